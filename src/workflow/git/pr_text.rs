//! The text of a pull request as the `pr` gate writes and reads it: the
//! title rule (`[tag][#N] text`), the issue it closes (the body gets
//! `Closes #N` when it does not say so, as in `lol impl`) and the PR's URL
//! and number in what the create command prints.

use std::sync::LazyLock;

use regex::Regex;

static TITLE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^\[[^\[\]\s][^\[\]]*\]\[#(\d+)\] \S").ok());

/// Whether a title reads `[tag][#N] text`.
pub fn valid_pr_title(title: &str) -> bool {
    TITLE.as_ref().is_some_and(|r| r.is_match(title))
}

/// The issue number of a valid title.
fn issue_of(title: &str) -> Option<&str> {
    let captures = TITLE.as_ref()?.captures(title)?;
    Some(captures.get(1)?.as_str())
}

/// `body` closing the title's issue: `Closes #N` is appended unless the
/// body already closes it (any case; `Closes`, `Fixes` or `Resolves`).
pub fn closing_body(title: &str, body: &str) -> String {
    let Some(issue) = issue_of(title) else {
        return body.to_string();
    };
    let pattern = format!(r"(?i)\b(close[sd]?|fix(e[sd])?|resolve[sd]?)\s+#{issue}\b");
    if Regex::new(&pattern).is_ok_and(|r| r.is_match(body)) {
        return body.to_string();
    }
    let body = body.trim_end();
    if body.is_empty() {
        format!("Closes #{issue}")
    } else {
        format!("{body}\n\nCloses #{issue}")
    }
}

/// The first web address in a create command's output: the PR's URL
/// (`gh pr create` prints it; when the PR already exists, its error names it).
pub fn pr_url(output: &str) -> Option<&str> {
    static URL: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"https?://\S+").ok());
    let found = URL.as_ref()?.find(output)?.as_str();
    Some(found.trim_end_matches(['.', ',', ')', ':', ';', '"', '\'']))
}

/// The number of the PR at `url` (`…/pull/N` on GitHub, `…/merge_requests/N`
/// on GitLab), if the create command printed such a URL.
pub fn pr_number(url: &str) -> Option<u64> {
    static NUMBER: LazyLock<Option<Regex>> =
        LazyLock::new(|| Regex::new(r"/(?:pull|pulls|merge_requests)/(\d+)\b").ok());
    let captures = NUMBER.as_ref()?.captures(url)?;
    captures.get(1)?.as_str().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_that_does_not_close_the_issue_gets_closes_n() {
        let title = "[feat][#13] Add the calculator";
        assert_eq!(closing_body(title, "Adds it.\n"), "Adds it.\n\nCloses #13");
        assert_eq!(closing_body(title, ""), "Closes #13");
        assert_eq!(closing_body(title, "Fixes #13."), "Fixes #13.");
        assert_eq!(closing_body(title, "closes #13"), "closes #13");
        // Another issue is not this one.
        assert_eq!(
            closing_body(title, "Closes #130"),
            "Closes #130\n\nCloses #13"
        );
    }

    #[test]
    fn the_pr_number_is_read_from_the_url() {
        assert_eq!(pr_number("https://github.com/o/r/pull/42\n"), Some(42));
        assert_eq!(
            pr_number("https://gitlab.com/o/r/-/merge_requests/7"),
            Some(7)
        );
        assert_eq!(pr_number("created"), None);
    }

    #[test]
    fn the_pr_url_is_the_first_address_printed() {
        assert_eq!(
            pr_url("https://github.com/o/r/pull/42\n"),
            Some("https://github.com/o/r/pull/42")
        );
        let exists = "a pull request for branch \"f\" into branch \"main\" already exists:\nhttps://github.com/o/r/pull/7\n";
        assert_eq!(pr_url(exists), Some("https://github.com/o/r/pull/7"));
        assert_eq!(pr_url("created"), None);
    }
}
