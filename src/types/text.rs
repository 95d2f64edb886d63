//! The rules a text field must keep, each beside the JSON Schema pattern
//! that states it in the API document, so what a handler refuses and what
//! the document calls invalid are one rule: a test holds each pattern to
//! its function over samples on both sides of the rule.

/// The characters `char::is_whitespace` takes, as a regex class's body.
macro_rules! whitespace {
    () => {
        "\\t\\n\\u000b\\f\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
    };
}

/// No NUL character: PostgreSQL cannot store one, and SQLite would cut the
/// text short there.
pub const NO_NUL_PATTERN: &str = "^[^\\u0000]*$";

/// Whether `text` holds no NUL character.
pub fn has_no_nul(text: &str) -> bool {
    !text.contains('\0')
}

/// Any JSON value without a NUL character in a string or an object key
/// (what [`has_no_nul`] asks of every string of a job's variables and
/// messages), as the API document names it.
pub struct NulFreeJson;

impl schemars::JsonSchema for NulFreeJson {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "NulFreeJson".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let itself = generator.subschema_for::<Self>();
        schemars::json_schema!({
            "description": "Any JSON value whose strings and keys hold no NUL character",
            "anyOf": [
                {"type": ["null", "boolean", "number"]},
                {"type": "string", "pattern": NO_NUL_PATTERN},
                {"type": "array", "items": itself},
                {
                    "type": "object",
                    "propertyNames": {"pattern": NO_NUL_PATTERN},
                    "additionalProperties": itself
                }
            ]
        })
    }
}

/// A JSON object of [`NulFreeJson`] values (a job's `variables`), for
/// `#[schemars(schema_with = …)]`.
pub fn nul_free_object(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let value = generator.subschema_for::<NulFreeJson>();
    schemars::json_schema!({
        "type": "object",
        "propertyNames": {"pattern": NO_NUL_PATTERN},
        "additionalProperties": value
    })
}

/// Holds something besides whitespace. The class is Rust's
/// `char::is_whitespace` (Unicode's `White_Space`) spelled out: `\s` means
/// more in some regex dialects (Python's counts U+001C–U+001F), and the
/// document must say exactly what the daemon refuses.
pub const NON_BLANK_PATTERN: &str = concat!("[^", whitespace!(), "]");

/// Non-blank and without NUL (a body's `idempotency_key`, a runtime
/// message's `content`).
pub const KEY_PATTERN: &str = concat!("^[^\\u0000]*[^\\u0000", whitespace!(), "][^\\u0000]*$");

/// Whether `text` is empty or only whitespace.
pub fn is_blank(text: &str) -> bool {
    text.chars().all(char::is_whitespace)
}

/// An id a caller chooses (a conversation's, a schedule's): 1 to 128
/// letters, digits, `.`, `_`, `:` or `-`.
pub const ID_PATTERN: &str = "^[A-Za-z0-9._:-]{1,128}$";

/// Whether `text` is an id by [`ID_PATTERN`].
pub fn is_id(text: &str) -> bool {
    (1..=128).contains(&text.len())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._:-".contains(c))
}

/// A token of visible ASCII (an idempotency key, a session id): what an
/// HTTP header carries without escaping.
pub const TOKEN_PATTERN: &str = "^[!-~]+$";

/// Whether `text` is a token by [`TOKEN_PATTERN`].
pub fn is_token(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_graphic())
}

/// The sequence number of an event, as the store keeps it (a signed 64-bit
/// integer, never negative), written in decimal without a sign or leading
/// zeros: 0 to 9223372036854775807.
pub fn sequence_number(text: &str) -> Option<u64> {
    let canonical = text == "0" || (text.starts_with(|c: char| c.is_ascii_digit() && c != '0'));
    if !canonical || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<i64>().ok().and_then(|n| u64::try_from(n).ok())
}

/// The pattern of [`sequence_number`]: the decimal numbers from 0 to
/// `i64::MAX`, without sign or leading zeros.
pub fn sequence_number_pattern() -> String {
    format!("^(0|{})$", decimal_up_to(&i64::MAX.to_string()))
}

/// A regex for the positive decimal numbers (no leading zero) up to `max`
/// (itself written without one): those shorter than it, and those of its
/// length that are not greater, digit by digit.
fn decimal_up_to(max: &str) -> String {
    let digits: Vec<u32> = max.chars().filter_map(|c| c.to_digit(10)).collect();
    let mut branches = Vec::new();
    if digits.len() > 1 {
        branches.push(format!("[1-9][0-9]{{0,{}}}", digits.len() - 2));
    }
    // Numbers of max's length: equal to max up to position i, then smaller
    // at i (at position 0 not below 1), then anything.
    for (i, digit) in digits.iter().enumerate() {
        let lowest = if i == 0 { 1 } else { 0 };
        if *digit > lowest {
            let rest = digits.len() - i - 1;
            let prefix: String = digits[..i].iter().map(u32::to_string).collect();
            let tail = if rest > 0 {
                format!("[0-9]{{{rest}}}")
            } else {
                String::new()
            };
            branches.push(format!("{prefix}[{lowest}-{}]{tail}", digit - 1));
        }
    }
    branches.push(digits.iter().map(u32::to_string).collect());
    branches.join("|")
}

/// Whether `text` matches `pattern` as a JSON Schema validator reads it:
/// the tests that check a schema pattern says what its rule refuses.
#[cfg(test)]
pub(crate) fn pattern_matches(pattern: &str, text: &str) -> bool {
    regex::Regex::new(pattern)
        .map(|re| re.is_match(text))
        .unwrap_or_else(|e| panic!("{pattern}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::pattern_matches as matches;
    use super::*;

    #[test]
    fn each_pattern_says_what_its_rule_refuses() {
        for text in ["", "a", "a\0b", "\0", "naïve"] {
            assert_eq!(matches(NO_NUL_PATTERN, text), has_no_nul(text), "{text:?}");
        }
        let blank_ish = [
            "", " ", "\t\n", "\u{1c}", "\u{a0}", "\u{3000}", " x ", "\u{200b}",
        ];
        for text in blank_ish {
            assert_eq!(
                matches(NON_BLANK_PATTERN, text),
                !is_blank(text),
                "{text:?}"
            );
        }
        for text in blank_ish.iter().chain(&[" \0x", "\0", "k\0", "k"]) {
            let key = !is_blank(text) && has_no_nul(text);
            assert_eq!(matches(KEY_PATTERN, text), key, "{text:?}");
        }
        // Edge cases alike to `access/file.rs`'s (empty, blank, non-ASCII,
        // the length limit and one past it): each pattern's own limits.
        let ids = [
            "c1",
            "",
            "a b",
            "conv:1.2_3-4",
            "é",
            &"x".repeat(128),
            &"x".repeat(129),
        ];
        for text in ids {
            assert_eq!(matches(ID_PATTERN, text), is_id(text), "{text:?}");
        }
        for text in ["k-1", "", " ", "a b", "ü", "~!"] {
            assert_eq!(matches(TOKEN_PATTERN, text), is_token(text), "{text:?}");
        }
    }

    #[test]
    fn the_sequence_pattern_is_exactly_zero_to_i64_max() {
        let pattern = sequence_number_pattern();
        let samples = [
            "0",
            "7",
            "10",
            "00",
            "07",
            "-1",
            "+1",
            " 1",
            "1 ",
            "",
            "9223372036854775807",
            "9223372036854775808",
            "9223372036854775799",
            "9223372036854775810",
            "9999999999999999999",
            "1000000000000000000",
            "10000000000000000000",
            "8999999999999999999",
            "9223372036854775797",
        ];
        for text in samples {
            assert_eq!(
                matches(&pattern, text),
                sequence_number(text).is_some(),
                "{text:?} against {pattern}"
            );
        }
        assert_eq!(
            sequence_number("9223372036854775807"),
            Some(i64::MAX as u64)
        );
    }
}
