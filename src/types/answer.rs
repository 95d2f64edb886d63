//! The shape a caller asks a job's final answer to have: OpenAI's
//! `response_format` (chat completions) or `text.format` (Responses) of type
//! `json_schema` or `json_object`, read once from either wire
//! ([`AnswerFormat::from_wire`]) and held to by one check
//! ([`AnswerFormat::check`]) that names where the answer fails the schema.
//!
//! It is data a job carries (its `controls`), so it knows no wire key of a
//! model server (the model's wire places it) and no job or HTTP.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Problems of a non-conforming answer listed in its error, at most.
const MAX_PROBLEMS: usize = 5;

/// A caller's answer format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AnswerFormat {
    /// Any JSON object (`json_object`).
    JsonObject,
    /// A JSON document that matches `schema` (`json_schema`).
    JsonSchema {
        /// The caller's name for the schema (sent on to the model server).
        name: String,
        #[schemars(schema_with = "schema_value")]
        schema: Value,
        /// The caller's `strict` (sent on; the answer is checked either way).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        strict: Option<bool>,
    },
}

/// A format's `schema` in the API document: a JSON Schema, which is an
/// object or a boolean (anything else is refused, [`AnswerFormat::from_wire`]).
pub fn schema_value(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "The JSON Schema the answer must match",
        "type": ["object", "boolean"]
    })
}

/// Why a `response_format` / `text.format` cannot be held to.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AnswerFormatError {
    #[error("must be an object with a `type` (text, json_object or json_schema), not {0}")]
    NotAnObject(String),
    #[error(
        "of type {0:?} is not supported: send `json_schema` (with a schema), `json_object` or `text`, or leave it out"
    )]
    UnknownType(String),
    #[error(
        "of type json_schema has no `schema` object: send the JSON Schema the answer must match in `schema`"
    )]
    MissingSchema,
    #[error("`name` must be a string, not {0}")]
    Name(String),
    #[error(
        "holds a schema that is not a valid JSON Schema ({0}): correct it, or leave the format out"
    )]
    InvalidSchema(String),
}

/// Where an answer fails its format: one problem.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// The JSON Pointer of the failing part of the answer (`""`: all of it).
    pub at: String,
    /// The JSON Pointer of the schema keyword it fails.
    pub schema_path: String,
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = if self.at.is_empty() { "/" } else { &self.at };
        write!(
            f,
            "at {at} (schema path {}): {}",
            self.schema_path, self.message
        )
    }
}

/// A final answer that does not hold to its format.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AnswerMismatch {
    #[error(
        "the answer is not JSON ({error}) and the response format {name:?} asks for a JSON document: the model did not follow it; have the bundle's model produce JSON (a server that honours the format, or a prompt that asks for it), or leave the format out"
    )]
    NotJson { name: String, error: String },
    #[error(
        "the answer does not match the response format {name:?}: {}; the model did not follow the schema: have the bundle's model produce it (a server that honours the format, or a prompt that asks for it), or send a schema it can meet",
        list(.problems)
    )]
    Schema {
        name: String,
        problems: Vec<Problem>,
    },
    #[error("the response format {name:?} holds a schema that does not compile: {error}")]
    Unusable { name: String, error: String },
}

fn list(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(Problem::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl AnswerFormat {
    /// Reads a format as either wire sends it: chat completions nest the
    /// schema (`{"type": "json_schema", "json_schema": {name, schema,
    /// strict}}`), Responses do not (`{"type": "json_schema", name, schema,
    /// strict}`). Absent, `null` or `text`: no format. The schema must
    /// compile.
    pub fn from_wire(format: &Value) -> Result<Option<Self>, AnswerFormatError> {
        let kind = match format {
            Value::Null => return Ok(None),
            Value::Object(object) => object.get("type").and_then(Value::as_str),
            other => return Err(AnswerFormatError::NotAnObject(other.to_string())),
        };
        let body = match format.get("json_schema") {
            Some(nested @ Value::Object(_)) => nested,
            _ => format,
        };
        match kind {
            None | Some("text") => Ok(None),
            Some("json_object") => Ok(Some(Self::JsonObject)),
            Some("json_schema") => {
                let schema = match body.get("schema") {
                    Some(schema @ (Value::Object(_) | Value::Bool(_))) => schema.clone(),
                    _ => return Err(AnswerFormatError::MissingSchema),
                };
                jsonschema::validator_for(&schema)
                    .map_err(|e| AnswerFormatError::InvalidSchema(e.to_string()))?;
                let name = match body.get("name") {
                    None | Some(Value::Null) => "answer".to_string(),
                    Some(Value::String(name)) => name.clone(),
                    Some(other) => return Err(AnswerFormatError::Name(other.to_string())),
                };
                Ok(Some(Self::JsonSchema {
                    name,
                    schema,
                    strict: body.get("strict").and_then(Value::as_bool),
                }))
            }
            Some(other) => Err(AnswerFormatError::UnknownType(other.to_string())),
        }
    }

    /// The caller's name of the format (`json_object` for that type).
    pub fn name(&self) -> &str {
        match self {
            Self::JsonObject => "json_object",
            Self::JsonSchema { name, .. } => name,
        }
    }

    /// The JSON Schema the answer must match.
    pub fn schema(&self) -> Value {
        match self {
            Self::JsonObject => json!({"type": "object"}),
            Self::JsonSchema { schema, .. } => schema.clone(),
        }
    }

    /// Checks a final answer: JSON that matches the schema, or what is
    /// wrong and where (at most five problems).
    pub fn check(&self, answer: &str) -> Result<(), AnswerMismatch> {
        let name = self.name().to_string();
        let instance: Value =
            serde_json::from_str(answer.trim()).map_err(|e| AnswerMismatch::NotJson {
                name: name.clone(),
                error: e.to_string(),
            })?;
        let schema = self.schema();
        let validator =
            jsonschema::validator_for(&schema).map_err(|e| AnswerMismatch::Unusable {
                name: name.clone(),
                error: e.to_string(),
            })?;
        let problems: Vec<Problem> = validator
            .iter_errors(&instance)
            .take(MAX_PROBLEMS)
            .map(|e| Problem {
                at: e.instance_path().to_string(),
                schema_path: e.schema_path().to_string(),
                message: e.to_string(),
            })
            .collect();
        match problems.is_empty() {
            true => Ok(()),
            false => Err(AnswerMismatch::Schema { name, problems }),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn person() -> Value {
        json!({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
               "required": ["name", "age"], "additionalProperties": false})
    }

    #[test]
    fn both_wires_read_the_same_format_and_text_is_none() {
        let chat = json!({"type": "json_schema", "json_schema": {"name": "person", "schema": person(), "strict": true}});
        let responses =
            json!({"type": "json_schema", "name": "person", "schema": person(), "strict": true});
        let expected = AnswerFormat::JsonSchema {
            name: "person".into(),
            schema: person(),
            strict: Some(true),
        };
        assert_eq!(AnswerFormat::from_wire(&chat), Ok(Some(expected.clone())));
        assert_eq!(AnswerFormat::from_wire(&responses), Ok(Some(expected)));
        assert_eq!(AnswerFormat::from_wire(&Value::Null), Ok(None));
        assert_eq!(AnswerFormat::from_wire(&json!({"type": "text"})), Ok(None));
        assert_eq!(
            AnswerFormat::from_wire(&json!({"type": "json_object"})),
            Ok(Some(AnswerFormat::JsonObject))
        );
    }

    #[test]
    fn a_format_that_cannot_be_held_to_is_refused_saying_why() {
        for (format, expected) in [
            (json!("json"), "must be an object"),
            (json!({"type": "grammar"}), "\"grammar\" is not supported"),
            (json!({"type": "json_schema", "name": "x"}), "no `schema`"),
            (
                json!({"type": "json_schema", "schema": {"type": "no-such-type"}}),
                "not a valid JSON Schema",
            ),
        ] {
            let err = AnswerFormat::from_wire(&format).unwrap_err();
            assert!(err.to_string().contains(expected), "{format}: {err}");
        }
    }

    #[test]
    fn the_check_names_where_the_answer_fails_the_schema() {
        let format = AnswerFormat::from_wire(
            &json!({"type": "json_schema", "name": "person", "schema": person()}),
        )
        .unwrap()
        .unwrap();
        assert_eq!(format.check(r#" {"name": "Ada", "age": 36} "#), Ok(()));
        let err = format
            .check(r#"{"name": "Ada", "age": "old"}"#)
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("\"person\""), "{text}");
        assert!(
            text.contains("at /age (schema path /properties/age/type)"),
            "{text}"
        );
        let err = format.check("Ada is 36.").unwrap_err();
        assert!(matches!(err, AnswerMismatch::NotJson { .. }), "{err}");
        assert!(err.to_string().contains("not JSON"), "{err}");
        assert!(AnswerFormat::JsonObject.check("[1]").is_err());
        assert_eq!(AnswerFormat::JsonObject.check("{}"), Ok(()));
    }

    #[test]
    fn a_stored_format_round_trips() {
        let format = AnswerFormat::JsonSchema {
            name: "p".into(),
            schema: person(),
            strict: None,
        };
        let text = serde_json::to_string(&format).unwrap();
        assert_eq!(serde_json::from_str::<AnswerFormat>(&text).unwrap(), format);
    }
}
