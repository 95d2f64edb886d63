//! Guardrails compiled from a bundle's `GuardrailSpec`: checks on a call's
//! arguments before it runs and on its output after. A block becomes
//! `guardrail:<reason>` for the model.

use regex::Regex;
use serde_json::{Map, Value};

use super::policy::GuardrailSpec;

/// A pattern that does not compile.
#[derive(Debug, thiserror::Error)]
#[error("guardrails.{key}: invalid regex {pattern:?}: {detail}")]
pub struct GuardrailError {
    pub key: String,
    pub pattern: String,
    pub detail: String,
}

#[derive(Debug)]
pub struct Guardrails {
    max_argument_bytes: Option<usize>,
    deny: Vec<(String, Regex)>,
    allow: Vec<(String, Vec<Regex>)>,
    path_prefixes: Vec<(String, Vec<String>)>,
    max_output_bytes: Option<usize>,
    redact: Vec<Regex>,
    deny_output: Vec<Regex>,
}

/// What the output check did.
#[derive(Debug, PartialEq)]
pub struct OutputCheck {
    pub output: String,
    pub truncated: bool,
    pub redactions: usize,
}

fn compile(key: &str, pattern: &str) -> Result<Regex, GuardrailError> {
    Regex::new(pattern).map_err(|e| GuardrailError {
        key: key.to_string(),
        pattern: pattern.to_string(),
        detail: e.to_string(),
    })
}

/// The text a field check looks at: `*` is the whole raw argument text.
fn field_text(field: &str, raw: &str, args: &Map<String, Value>) -> Option<String> {
    if field == "*" {
        return Some(raw.to_string());
    }
    match args.get(field)? {
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

impl Guardrails {
    pub fn compile(spec: &GuardrailSpec) -> Result<Self, GuardrailError> {
        let mut deny = Vec::new();
        for (field, patterns) in &spec.deny_patterns {
            for p in patterns {
                deny.push((
                    field.clone(),
                    compile(&format!("deny_patterns.{field}"), p)?,
                ));
            }
        }
        let mut allow = Vec::new();
        for (field, patterns) in &spec.allow_patterns {
            let compiled = patterns
                .iter()
                .map(|p| compile(&format!("allow_patterns.{field}"), p))
                .collect::<Result<_, _>>()?;
            allow.push((field.clone(), compiled));
        }
        Ok(Self {
            max_argument_bytes: spec.max_argument_bytes,
            deny,
            allow,
            path_prefixes: spec
                .path_prefixes
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            max_output_bytes: spec.max_output_bytes,
            redact: spec
                .redact_patterns
                .iter()
                .map(|p| compile("redact_patterns", p))
                .collect::<Result<_, _>>()?,
            deny_output: spec
                .deny_output_patterns
                .iter()
                .map(|p| compile("deny_output_patterns", p))
                .collect::<Result<_, _>>()?,
        })
    }

    /// Checks a call's arguments; `Err` is the block reason.
    pub fn check_input(&self, raw: &str, args: &Map<String, Value>) -> Result<(), Blocked> {
        if let Some(max) = self.max_argument_bytes
            && raw.len() > max
        {
            return Err(Blocked::TooLarge {
                bytes: raw.len(),
                max,
            });
        }
        for (field, pattern) in &self.deny {
            if let Some(text) = field_text(field, raw, args)
                && pattern.is_match(&text)
            {
                return Err(Blocked::Denied {
                    field: field.clone(),
                    pattern: pattern.as_str().to_string(),
                });
            }
        }
        for (field, patterns) in &self.allow {
            if let Some(text) = field_text(field, raw, args)
                && !patterns.iter().any(|p| p.is_match(&text))
            {
                return Err(Blocked::NotAllowed {
                    field: field.clone(),
                });
            }
        }
        for (field, prefixes) in &self.path_prefixes {
            if let Some(Value::String(path)) = args.get(field) {
                let normalized = normalize(path);
                if normalized
                    .is_none_or(|p| !prefixes.iter().any(|prefix| p.starts_with(prefix.as_str())))
                {
                    return Err(Blocked::OutsidePrefixes {
                        field: field.clone(),
                        path: path.clone(),
                        prefixes: prefixes.join(", "),
                    });
                }
            }
        }
        Ok(())
    }

    /// Checks and rewrites an output; `Err` is the block reason.
    pub fn check_output(&self, output: String) -> Result<OutputCheck, Blocked> {
        for pattern in &self.deny_output {
            if pattern.is_match(&output) {
                return Err(Blocked::OutputDenied {
                    pattern: pattern.as_str().to_string(),
                });
            }
        }
        let mut output = output;
        let mut redactions = 0;
        for pattern in &self.redact {
            let count = pattern.find_iter(&output).count();
            if count > 0 {
                redactions += count;
                output = pattern.replace_all(&output, "[REDACTED]").into_owned();
            }
        }
        let mut truncated = false;
        if let Some(max) = self.max_output_bytes.filter(|max| output.len() > *max) {
            // Cut the text inside a JSON string, or the JSON text itself, and
            // return a JSON string the model can read.
            let total = output.len();
            let text = match serde_json::from_str::<Value>(&output) {
                Ok(Value::String(inner)) => inner,
                _ => output,
            };
            let mut cut = max.min(text.len());
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            output = Value::String(format!(
                "{}… [truncated: {total} bytes, limit {max}]",
                &text[..cut]
            ))
            .to_string();
            truncated = true;
        }
        Ok(OutputCheck {
            output,
            truncated,
            redactions,
        })
    }
}

/// Resolves `.` and `..` lexically; `None` if the path climbs above its root.
fn normalize(path: &str) -> Option<String> {
    let absolute = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    let joined = parts.join("/");
    Some(if absolute {
        format!("/{joined}")
    } else {
        joined
    })
}

/// Why a guardrail blocked a call: its `Display` is the reason the model
/// and the trace see (`guardrail:REASON`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Blocked {
    #[error("arguments are {bytes} bytes, more than the {max} allowed")]
    TooLarge { bytes: usize, max: usize },
    #[error("`{field}` matches a denied pattern ({pattern})")]
    Denied { field: String, pattern: String },
    #[error("`{field}` matches none of the allowed patterns")]
    NotAllowed { field: String },
    #[error("`{field}` path {path:?} is outside the allowed prefixes ({prefixes})")]
    OutsidePrefixes {
        field: String,
        path: String,
        prefixes: String,
    },
    #[error("output matches a denied pattern ({pattern})")]
    OutputDenied { pattern: String },
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn guards() -> Guardrails {
        let spec: GuardrailSpec = serde_json::from_value(json!({
            "max_argument_bytes": 64,
            "deny_patterns": {"query": ["(?i)drop\\s+table"]},
            "allow_patterns": {"lang": ["^(en|fr)$"]},
            "path_prefixes": {"path": ["/srv/data/"]},
            "max_output_bytes": 20,
            "redact_patterns": ["sk-[a-z0-9]+"],
            "deny_output_patterns": ["BEGIN PRIVATE KEY"]
        }))
        .unwrap();
        Guardrails::compile(&spec).unwrap()
    }

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn input_checks() {
        let g = guards();
        assert!(
            g.check_input(
                "{}",
                &args(json!({"query": "select 1", "lang": "en", "path": "/srv/data/x"}))
            )
            .is_ok()
        );
        assert!(
            g.check_input(&"x".repeat(65), &Map::new())
                .unwrap_err()
                .to_string()
                .contains("65 bytes")
        );
        assert!(
            g.check_input("{}", &args(json!({"query": "DROP  table x"})))
                .unwrap_err()
                .to_string()
                .contains("denied")
        );
        assert!(
            g.check_input("{}", &args(json!({"lang": "de"})))
                .unwrap_err()
                .to_string()
                .contains("none of the allowed")
        );
        assert!(
            g.check_input("{}", &args(json!({"path": "/srv/data/../../etc/passwd"})))
                .unwrap_err()
                .to_string()
                .contains("outside")
        );
    }

    #[test]
    fn output_checks() {
        let g = guards();
        let out = g.check_output("\"key sk-abc1\"".into()).unwrap();
        assert_eq!(out.output, "\"key [REDACTED]\"");
        assert_eq!(out.redactions, 1);
        let long = g
            .check_output("\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"".into())
            .unwrap();
        assert!(long.truncated && long.output.contains("truncated: 32 bytes"));
        assert!(g.check_output("BEGIN PRIVATE KEY".into()).is_err());
        let bad = GuardrailSpec {
            redact_patterns: vec!["(".into()],
            ..Default::default()
        };
        assert!(
            Guardrails::compile(&bad)
                .unwrap_err()
                .to_string()
                .contains("redact_patterns")
        );
    }
}
