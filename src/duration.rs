//! `HumanDuration`: a duration written the way operators write them in YAML
//! and TOML (`"5s"`, `"250ms"`, `"2m"`), with a parse error that shows the
//! expected form.

use std::fmt;
use std::str::FromStr;
use std::sync::LazyLock;
use std::time::Duration;

use regex::Regex;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct HumanDuration(pub Duration);

impl HumanDuration {
    pub const fn from_secs(secs: u64) -> Self {
        Self(Duration::from_secs(secs))
    }

    pub const fn from_millis(ms: u64) -> Self {
        Self(Duration::from_millis(ms))
    }
}

impl From<HumanDuration> for Duration {
    fn from(d: HumanDuration) -> Self {
        d.0
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("invalid duration {0:?} (expected e.g. \"5s\", \"250ms\" or \"2m\")")]
pub struct DurationError(pub String);

/// The units humantime reads, longest spelling first (a regex takes the
/// first alternative that matches), each with its length in seconds as
/// humantime counts it (a month is 30.44 days, a year 365.25).
const UNITS: [(&str, f64); 40] = [
    ("nanos", 1e-9),
    ("nsec", 1e-9),
    ("ns", 1e-9),
    ("usec", 1e-6),
    ("us", 1e-6),
    ("µs", 1e-6),
    ("millis", 1e-3),
    ("msec", 1e-3),
    ("ms", 1e-3),
    ("seconds", 1.0),
    ("second", 1.0),
    ("secs", 1.0),
    ("sec", 1.0),
    ("s", 1.0),
    ("minutes", 60.0),
    ("minute", 60.0),
    ("mins", 60.0),
    ("min", 60.0),
    ("m", 60.0),
    ("hours", 3600.0),
    ("hour", 3600.0),
    ("hrs", 3600.0),
    ("hr", 3600.0),
    ("h", 3600.0),
    ("days", 86_400.0),
    ("day", 86_400.0),
    ("d", 86_400.0),
    ("weeks", 604_800.0),
    ("week", 604_800.0),
    ("wks", 604_800.0),
    ("wk", 604_800.0),
    ("w", 604_800.0),
    ("months", 2_630_016.0),
    ("month", 2_630_016.0),
    ("M", 2_630_016.0),
    ("years", 31_557_600.0),
    ("year", 31_557_600.0),
    ("yrs", 31_557_600.0),
    ("yr", 31_557_600.0),
    ("y", 31_557_600.0),
];

/// One term of a duration: a number (a decimal fraction allowed) and its
/// unit, spaces between and around.
fn term_pattern() -> String {
    let units: Vec<&str> = UNITS.iter().map(|(unit, _)| *unit).collect();
    format!(" *([0-9]+(?:\\.[0-9]+)?) *({}) *", units.join("|"))
}

/// What a duration is, as the API document says it and [`FromStr`] checks
/// it: one term or more.
pub fn duration_pattern() -> String {
    format!("^(?:{})+$", term_pattern())
}

static GRAMMAR: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(&duration_pattern()).ok());
static TERM: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(&term_pattern()).ok());

impl FromStr for HumanDuration {
    type Err = DurationError;

    /// Text of [`duration_pattern`], read by humantime; where humantime
    /// cannot hold it (a sum past its range, a fraction finer than a
    /// nanosecond), the sum of its terms, to the nanosecond and at most
    /// the longest duration there is: text the pattern takes is a duration.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let refused = || DurationError(s.to_string());
        let (Some(grammar), Some(term)) = (GRAMMAR.as_ref(), TERM.as_ref()) else {
            return Err(refused());
        };
        if !grammar.is_match(s) {
            return Err(refused());
        }
        if let Ok(exact) = humantime::parse_duration(s.trim()) {
            return Ok(HumanDuration(exact));
        }
        let seconds: f64 = term
            .captures_iter(s)
            .filter_map(|term| {
                let number: f64 = term.get(1)?.as_str().parse().ok()?;
                let name = term.get(2)?.as_str();
                let unit = UNITS.iter().find(|(unit, _)| *unit == name)?;
                Some(number * unit.1)
            })
            .sum();
        Ok(HumanDuration(
            Duration::try_from_secs_f64(seconds).unwrap_or(Duration::MAX),
        ))
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = HumanDuration;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration such as \"5s\" or \"250ms\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<HumanDuration, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<HumanDuration, E> {
                Err(E::custom(DurationError(v.to_string())))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<HumanDuration, E> {
                Err(E::custom(DurationError(v.to_string())))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<HumanDuration, E> {
                Err(E::custom(DurationError(v.to_string())))
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl schemars::JsonSchema for HumanDuration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }

    /// What [`FromStr`] takes (and humantime writes: `"1day 2h"`):
    /// numbers, each with a unit of its list, spaces between.
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": duration_pattern(),
            "description": "A duration such as \"5s\", \"250ms\", \"2m\" or \"1h 30m\"."
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_is_what_parses_and_everything_it_takes_is_a_duration() {
        let pattern = Regex::new(&duration_pattern()).unwrap();
        let samples = [
            "5s",
            "250ms",
            "1.5h",
            " 2 weeks 1h30min ",
            "1day 2h",
            "3 yrs",
            "5 sec",
            "",
            " ",
            "five",
            "1h\t",
            "5",
            "s",
            "1.h",
            "999999999999999999999999y 99999y",
            "0.5ns",
            "1.0000000001ms",
        ];
        for text in samples {
            assert_eq!(
                pattern.is_match(text),
                text.parse::<HumanDuration>().is_ok(),
                "{text:?}"
            );
        }
        assert_eq!(
            "999999999999999999999999y"
                .parse::<HumanDuration>()
                .unwrap()
                .0,
            Duration::MAX
        );
        assert_eq!(
            "1.5h".parse::<HumanDuration>().unwrap().0,
            Duration::from_secs(5400)
        );
    }

    #[test]
    fn parses_and_rejects_with_hint() {
        assert_eq!(
            "5s".parse::<HumanDuration>().unwrap().0,
            Duration::from_secs(5)
        );
        assert_eq!(
            "250ms".parse::<HumanDuration>().unwrap().0,
            Duration::from_millis(250)
        );
        let err = "5 sec".parse::<HumanDuration>();
        assert!(
            err.is_ok()
                || err
                    .unwrap_err()
                    .to_string()
                    .contains("expected e.g. \"5s\"")
        );
        assert_eq!(
            "five".parse::<HumanDuration>().unwrap_err().to_string(),
            "invalid duration \"five\" (expected e.g. \"5s\", \"250ms\" or \"2m\")"
        );
    }
}
