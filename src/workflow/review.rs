//! The review score gate's parser: turns a reviewer agent's free-form answer
//! into four dimension scores, a pass verdict against thresholds and the
//! feedback that becomes the next implementation's retry context.
//!
//! Pure functions only; it knows nothing of agents, stages or artifacts.
//!
//! Where the JSON is found (first match wins): the whole output, then a
//! fenced ```` ```json ```` block, then the text from the first `{` to the
//! last `}`. The dimensions are read from `scores` when it is an object, else
//! from the top-level object. Without usable JSON the text is searched for
//! "Score: N/100", then "Quality: N", then "Rating: X/10" (× 10), else every
//! dimension gets the neutral 50, and the bullets of its `Feedback:` section
//! are the findings and the suggestions (as `lol impl` read a text review).

use std::sync::LazyLock;

use regex::Regex;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// The score every dimension gets when nothing in the output says otherwise.
pub const NEUTRAL_SCORE: u32 = 50;

/// The dimensions in report order.
pub const DIMENSIONS: [&str; 4] = ["faithful", "style", "docs", "corner_cases"];

/// The minimum score per dimension for a review to pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Thresholds {
    /// Does the change do what the issue asks? Default 90.
    #[serde(default = "default_faithful")]
    pub faithful: u32,
    /// Default 85.
    #[serde(default = "default_85")]
    pub style: u32,
    /// Default 85.
    #[serde(default = "default_85")]
    pub docs: u32,
    /// Default 85.
    #[serde(default = "default_85")]
    pub corner_cases: u32,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            faithful: default_faithful(),
            style: default_85(),
            docs: default_85(),
            corner_cases: default_85(),
        }
    }
}

fn default_faithful() -> u32 {
    90
}
fn default_85() -> u32 {
    85
}

impl Thresholds {
    fn get(&self, dimension: &str) -> u32 {
        match dimension {
            "faithful" => self.faithful,
            "style" => self.style,
            "docs" => self.docs,
            _ => self.corner_cases,
        }
    }
}

/// Four dimension scores, each 0..=100.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Scores {
    pub faithful: u32,
    pub style: u32,
    pub docs: u32,
    pub corner_cases: u32,
}

impl Scores {
    pub fn all(score: u32) -> Self {
        let s = score.min(100);
        Self {
            faithful: s,
            style: s,
            docs: s,
            corner_cases: s,
        }
    }

    pub fn get(&self, dimension: &str) -> u32 {
        match dimension {
            "faithful" => self.faithful,
            "style" => self.style,
            "docs" => self.docs,
            _ => self.corner_cases,
        }
    }

    fn set(&mut self, dimension: &str, value: u32) {
        match dimension {
            "faithful" => self.faithful = value,
            "style" => self.style = value,
            "docs" => self.docs = value,
            _ => self.corner_cases = value,
        }
    }

    /// The mean of the four dimensions, rounded: what the non-improvement
    /// streak compares between iterations.
    pub fn overall(&self) -> u32 {
        (self.faithful + self.style + self.docs + self.corner_cases + 2) / 4
    }
}

/// A parsed review.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Review {
    pub scores: Scores,
    pub pass: bool,
    pub findings: Vec<String>,
    pub suggestions: Vec<String>,
    pub raw_output: String,
}

impl Review {
    /// The review of a reviewer that failed to answer: all zeros, failing.
    pub fn reviewer_error(message: &str) -> Self {
        Self {
            scores: Scores::all(0),
            pass: false,
            findings: vec![format!("the reviewer failed: {message}")],
            suggestions: Vec::new(),
            raw_output: String::new(),
        }
    }

    /// What the next implementation is told: the suggestions, else the
    /// findings, else one line per failed dimension (`faithful=89<90`).
    pub fn feedback(&self, thresholds: &Thresholds) -> Vec<String> {
        if !self.suggestions.is_empty() {
            return self.suggestions.clone();
        }
        if !self.findings.is_empty() {
            return self.findings.clone();
        }
        failed_dimensions(&self.scores, thresholds)
    }

    /// The artifact body `{scores, pass, findings, suggestions, raw_output}`.
    pub fn to_artifact(&self) -> Value {
        json!({
            "scores": self.scores,
            "pass": self.pass,
            "findings": self.findings,
            "suggestions": self.suggestions,
            "raw_output": self.raw_output,
        })
    }
}

/// `dimension=score<threshold` for every dimension below its threshold.
pub fn failed_dimensions(scores: &Scores, thresholds: &Thresholds) -> Vec<String> {
    DIMENSIONS
        .iter()
        .filter(|d| scores.get(d) < thresholds.get(d))
        .map(|d| format!("{d}={}<{}", scores.get(d), thresholds.get(d)))
        .collect()
}

/// Whether every dimension meets its threshold.
pub fn passes(scores: &Scores, thresholds: &Thresholds) -> bool {
    failed_dimensions(scores, thresholds).is_empty()
}

/// Parses a reviewer's output into a review judged against `thresholds`.
pub fn parse_review(output: &str, thresholds: &Thresholds) -> Review {
    let (scores, findings, suggestions) = match find_json(output) {
        Some(object) => {
            let fallback = text_score(output);
            let dims = match object.get("scores") {
                Some(Value::Object(scores)) => scores,
                _ => &object,
            };
            let mut scores = Scores::all(fallback);
            for d in DIMENSIONS {
                scores.set(d, dims.get(d).and_then(number).unwrap_or(fallback));
            }
            (
                scores,
                strings(object.get("findings")),
                strings(object.get("suggestions")),
            )
        }
        None => {
            let feedback = feedback_bullets(output);
            (Scores::all(text_score(output)), feedback.clone(), feedback)
        }
    };
    Review {
        pass: passes(&scores, thresholds),
        scores,
        findings,
        suggestions,
        raw_output: output.to_string(),
    }
}

/// The first JSON object found in the output, in the documented order.
fn find_json(output: &str) -> Option<Map<String, Value>> {
    static FENCE: LazyLock<Option<Regex>> =
        LazyLock::new(|| Regex::new(r"(?s)```json[ \t]*\r?\n?(.*?)```").ok());
    let object = |text: &str| match serde_json::from_str::<Value>(text.trim()) {
        Ok(Value::Object(map)) => Some(map),
        _ => None,
    };
    if let Some(found) = object(output) {
        return Some(found);
    }
    if let Some(fence) = FENCE.as_ref()
        && let Some(found) = fence
            .captures_iter(output)
            .filter_map(|c| c.get(1))
            .find_map(|m| object(m.as_str()))
    {
        return Some(found);
    }
    let start = output.find('{')?;
    let end = output.rfind('}')?;
    if end <= start {
        return None;
    }
    object(&output[start..=end])
}

/// The textual fallback: "Score: N/100", "Quality: N", "Rating: X/10" × 10,
/// else the neutral score.
fn text_score(output: &str) -> u32 {
    static PATTERNS: LazyLock<Vec<(Regex, f64)>> = LazyLock::new(|| {
        [
            (r"(?i)score\s*:\s*(-?\d+(?:\.\d+)?)\s*/\s*100", 1.0),
            (r"(?i)quality\s*:\s*(-?\d+(?:\.\d+)?)", 1.0),
            (r"(?i)rating\s*:\s*(-?\d+(?:\.\d+)?)\s*/\s*10\b", 10.0),
        ]
        .into_iter()
        .filter_map(|(p, factor)| Regex::new(p).ok().map(|r| (r, factor)))
        .collect()
    });
    PATTERNS
        .iter()
        .find_map(|(regex, factor)| {
            let found = regex
                .captures(output)?
                .get(1)?
                .as_str()
                .parse::<f64>()
                .ok()?;
            Some(clamp(found * factor))
        })
        .unwrap_or(NEUTRAL_SCORE)
}

/// The items of a text review's `Feedback:` section: the text after the
/// heading on its line, then each bullet (`-`, `*`, `•`, `1.`) below it, up
/// to the next `Heading:` line or the end of the bullets.
fn feedback_bullets(output: &str) -> Vec<String> {
    static HEADING: LazyLock<Option<Regex>> =
        LazyLock::new(|| Regex::new(r"(?i)^[#*\s]*feedback[*\s]*:[*\s]*(.*)$").ok());
    static BULLET: LazyLock<Option<Regex>> =
        LazyLock::new(|| Regex::new(r"^\s*(?:[-*•]|\d+[.)])\s+(.+)$").ok());
    static OTHER_HEADING: LazyLock<Option<Regex>> =
        LazyLock::new(|| Regex::new(r"^[#*\s]*[A-Za-z][\w ]{0,40}[*\s]*:").ok());
    let (Some(heading), Some(bullet), Some(other)) =
        (HEADING.as_ref(), BULLET.as_ref(), OTHER_HEADING.as_ref())
    else {
        return Vec::new();
    };
    let mut lines = output.lines();
    let mut items = Vec::new();
    for line in lines.by_ref() {
        if let Some(found) = heading.captures(line) {
            let rest = found.get(1).map_or("", |m| m.as_str()).trim();
            if !rest.is_empty() {
                items.push(rest.to_string());
            }
            break;
        }
    }
    for line in lines {
        if let Some(found) = bullet.captures(line) {
            items.push(found[1].trim().to_string());
        } else if line.trim().is_empty() && items.is_empty() {
            continue;
        } else if line.trim().is_empty() || other.is_match(line) {
            break;
        }
    }
    items
}

/// A dimension's value: a number or a numeric string, rounded and clamped;
/// anything else (booleans, empty strings, null, objects) is no value.
fn number(value: &Value) -> Option<u32> {
    let n = match value {
        Value::Number(n) => n.as_f64()?,
        Value::String(s) if !s.trim().is_empty() => s.trim().parse::<f64>().ok()?,
        _ => return None,
    };
    n.is_finite().then(|| clamp(n))
}

fn clamp(n: f64) -> u32 {
    // NaN never reaches here; the cast saturates anyway.
    n.round().clamp(0.0, 100.0) as u32
}

/// A list of strings from an array (non-strings rendered as JSON), or one
/// string; empty entries dropped.
fn strings(value: Option<&Value>) -> Vec<String> {
    let one = |v: &Value| match v {
        Value::String(s) => s.trim().to_string(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    match value {
        Some(Value::Array(items)) => items.iter().map(one).filter(|s| !s.is_empty()).collect(),
        Some(v @ Value::String(_)) => Some(one(v)).filter(|s| !s.is_empty()).into_iter().collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Review {
        parse_review(text, &Thresholds::default())
    }

    fn scores(f: u32, s: u32, d: u32, c: u32) -> Scores {
        Scores {
            faithful: f,
            style: s,
            docs: d,
            corner_cases: c,
        }
    }

    #[test]
    fn whole_output_json_with_scores_object() {
        let r = parse(
            r#"{"scores": {"faithful": 95, "style": 90, "docs": 88, "corner_cases": 85},
                "overall_score": 90, "findings": ["f1"], "suggestions": ["s1", "s2"]}"#,
        );
        assert_eq!(r.scores, scores(95, 90, 88, 85));
        assert!(r.pass);
        assert_eq!(r.findings, vec!["f1"]);
        assert_eq!(r.suggestions, vec!["s1", "s2"]);
    }

    #[test]
    fn fenced_json_block_is_found_before_the_braces_span() {
        let text = "Here is my review {not json}.\n```json\n{\"scores\": {\"faithful\": 80, \"style\": 70, \"docs\": 60, \"corner_cases\": 50}}\n```\nThanks {bye}";
        let r = parse(text);
        assert_eq!(r.scores, scores(80, 70, 60, 50));
        assert!(!r.pass);
        assert_eq!(r.raw_output, text);
    }

    #[test]
    fn embedded_json_from_first_to_last_brace() {
        let r = parse(
            "Review: {\"faithful\": 91, \"style\": 86, \"docs\": 85, \"corner_cases\": 99} done",
        );
        assert_eq!(r.scores, scores(91, 86, 85, 99), "top-level dimensions");
        assert!(r.pass);
    }

    #[test]
    fn scores_that_is_not_an_object_uses_the_top_level() {
        let r = parse(
            r#"{"scores": [1, 2], "faithful": 90, "style": 85, "docs": 85, "corner_cases": 85}"#,
        );
        assert_eq!(r.scores, scores(90, 85, 85, 85));
        assert!(r.pass);
    }

    #[test]
    fn textual_fallbacks_in_order() {
        assert_eq!(parse("Score: 87/100").scores, Scores::all(87));
        assert_eq!(
            parse("quality: 70 and Rating: 9/10").scores,
            Scores::all(70)
        );
        assert_eq!(parse("Rating: 9/10").scores, Scores::all(90));
        assert_eq!(parse("Rating: 8.5/10").scores, Scores::all(85));
        assert_eq!(
            parse("Rating: 9/10 but Score: 40/100").scores,
            Scores::all(40),
            "Score wins over Rating"
        );
        assert_eq!(parse("looks fine to me").scores, Scores::all(NEUTRAL_SCORE));
        assert!(!parse("looks fine to me").pass);
    }

    #[test]
    fn a_text_review_s_feedback_bullets_are_its_findings_and_suggestions() {
        let text = "Score: 72/100\n\n**Feedback:**\n- Handle empty input\n* Add a docstring\n2. Test the error path\n\nSummary: close";
        let r = parse(text);
        assert_eq!(r.scores, Scores::all(72));
        let expected = [
            "Handle empty input",
            "Add a docstring",
            "Test the error path",
        ];
        assert_eq!(r.findings, expected);
        assert_eq!(r.suggestions, expected);
        assert_eq!(r.feedback(&Thresholds::default()), expected);
        let r = parse("Rating: 6/10\nFeedback: the tests are missing\nVerdict: fail");
        assert_eq!(r.findings, ["the tests are missing"]);
        assert!(parse("Score: 90/100, nothing to add").findings.is_empty());
    }

    #[test]
    fn garbage_gives_neutral_scores_and_no_feedback_lists() {
        for text in ["", "{", "}{", "```json\n{broken\n```", "[1, 2, 3]", "null"] {
            let r = parse(text);
            assert_eq!(r.scores, Scores::all(50), "{text:?}");
            assert!(r.findings.is_empty() && r.suggestions.is_empty());
        }
    }

    #[test]
    fn json_missing_dimensions_take_the_textual_fallback() {
        let r = parse(r#"Score: 77/100 {"scores": {"faithful": 95}}"#);
        assert_eq!(r.scores, scores(95, 77, 77, 77));
        let r = parse(r#"{"scores": {"faithful": 95}}"#);
        assert_eq!(r.scores, scores(95, 50, 50, 50));
    }

    #[test]
    fn values_are_rounded_clamped_and_strings_parsed() {
        let r = parse(r#"{"faithful": 150, "style": -3, "docs": "88.6", "corner_cases": 84.5}"#);
        assert_eq!(r.scores, scores(100, 0, 89, 85));
        let r = parse(r#"{"faithful": " 91 ", "style": "n/a", "docs": 1e9, "corner_cases": 0.4}"#);
        assert_eq!(r.scores, scores(91, 50, 100, 0));
    }

    #[test]
    fn booleans_empty_and_null_take_the_fallback() {
        let r = parse(
            r#"{"scores": {"faithful": true, "style": "", "docs": null, "corner_cases": {}}}"#,
        );
        assert_eq!(r.scores, Scores::all(50));
    }

    #[test]
    fn pass_rule_uses_configurable_thresholds() {
        let r = parse(r#"{"faithful": 89, "style": 85, "docs": 85, "corner_cases": 85}"#);
        assert!(!r.pass);
        let lenient = Thresholds {
            faithful: 80,
            ..Thresholds::default()
        };
        let r = parse_review(
            r#"{"faithful": 89, "style": 85, "docs": 85, "corner_cases": 85}"#,
            &lenient,
        );
        assert!(r.pass);
    }

    #[test]
    fn feedback_prefers_suggestions_then_findings_then_failed_dimensions() {
        let t = Thresholds::default();
        let r = parse(
            r#"{"faithful": 89, "style": 84, "docs": 85, "corner_cases": 85, "findings": ["x"], "suggestions": ["do y"]}"#,
        );
        assert_eq!(r.feedback(&t), vec!["do y"]);
        let r = parse(
            r#"{"faithful": 89, "style": 84, "docs": 85, "corner_cases": 85, "findings": ["x"], "suggestions": []}"#,
        );
        assert_eq!(r.feedback(&t), vec!["x"]);
        let r = parse(r#"{"faithful": 89, "style": 84, "docs": 85, "corner_cases": 85}"#);
        assert_eq!(r.feedback(&t), vec!["faithful=89<90", "style=84<85"]);
    }

    #[test]
    fn reviewer_error_scores_zero_and_fails() {
        let r = Review::reviewer_error("model unreachable");
        assert_eq!(r.scores, Scores::all(0));
        assert!(!r.pass);
        let body = r.to_artifact();
        assert_eq!(body["scores"]["faithful"], 0);
        assert_eq!(body["pass"], false);
        for key in ["findings", "suggestions", "raw_output"] {
            assert!(body.get(key).is_some(), "{key}");
        }
    }

    #[test]
    fn overall_is_the_rounded_mean() {
        assert_eq!(scores(90, 85, 85, 86).overall(), 87);
        assert_eq!(Scores::all(0).overall(), 0);
    }
}
