//! `HumanDuration`: a duration written the way operators write them in YAML
//! and TOML (`"5s"`, `"250ms"`, `"2m"`), with a parse error that shows the
//! expected form.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

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

impl FromStr for HumanDuration {
    type Err = DurationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        humantime::parse_duration(s.trim())
            .map(HumanDuration)
            .map_err(|_| DurationError(s.to_string()))
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

    /// What humantime reads (and writes: `"1day 2h"`): numbers, each with
    /// a unit of its list, spaces anywhere between.
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": concat!(
                "^\\s*([0-9][0-9\\s]*(\\.\\s*[0-9][0-9\\s]*)?",
                "(nanos|nsec|ns|usec|us|µs|millis|msec|ms|seconds|second|secs|sec|s",
                "|minutes|minute|mins|min|m|hours|hour|hrs|hr|h|days|day|d",
                "|weeks|week|wks|wk|w|months|month|M|years|year|yrs|yr|y)\\s*)+$"
            ),
            "description": "A duration such as \"5s\", \"250ms\", \"2m\" or \"1h 30m\"."
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
