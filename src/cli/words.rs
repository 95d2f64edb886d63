//! Counts said in words for people: `1 tool call`, `2 tool calls`. The
//! command line's counts go through [`count`], so no line reads "1 tools".
//! It knows only English regular plurals, which every noun counted here is.

use std::fmt::Display;

/// `n` and `noun`, with an `s` unless `n` is one: `count(1, "tool")` is
/// `1 tool`, `count(0, "tool call")` is `0 tool calls`.
pub(crate) fn count<N>(n: N, noun: &str) -> String
where
    N: Copy + Display + TryInto<u64>,
{
    let one = n.try_into().ok() == Some(1);
    format!("{n} {noun}{}", if one { "" } else { "s" })
}

#[cfg(test)]
mod tests {
    use super::count;

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(count(1u32, "tool"), "1 tool");
        assert_eq!(count(1usize, "tool call"), "1 tool call");
        assert_eq!(count(0u64, "tool call"), "0 tool calls");
        assert_eq!(count(2usize, "turn"), "2 turns");
        assert_eq!(count(11u32, "message"), "11 messages");
    }
}
