//! Argument parsing and coercion against a tool's JSON Schema: blank means
//! `{}`; strings holding integers, numbers or booleans become those types;
//! defaults fill missing keys; keys the schema does not name pass through
//! here (the engine then checks the coerced arguments against the whole
//! schema, `additionalProperties: false` included). Failures are the
//! `bad_args` detail the model sees.

use serde_json::{Map, Value};

/// Why a call's arguments are refused: its `Display` is the `bad_args`
/// detail the model sees (`missing:KEY`, `bad_TYPE:KEY`, `schema:…`), a
/// form models and tests read, so it stays exactly as it was.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ArgsError {
    #[error("expected a JSON object, got {0}")]
    NotAnObject(&'static str),
    #[error("invalid JSON: {0}")]
    InvalidJson(String),
    #[error("missing:{0}")]
    Missing(String),
    #[error("bad_{expected}:{key}")]
    BadType { expected: String, key: String },
    /// What the whole schema found wrong, at most five problems.
    #[error("schema:{}", .0.join("; "))]
    Schema(Vec<String>),
}

/// Parses `raw` and coerces it against `schema` (an object schema).
pub fn parse_and_coerce(raw: &str, schema: &Value) -> Result<Map<String, Value>, ArgsError> {
    let mut args = if raw.trim().is_empty() {
        Map::new()
    } else {
        match serde_json::from_str::<Value>(raw) {
            Ok(Value::Object(map)) => map,
            Ok(other) => return Err(ArgsError::NotAnObject(type_name(&other))),
            Err(e) => return Err(ArgsError::InvalidJson(e.to_string())),
        }
    };
    let empty = Map::new();
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    for (key, prop) in properties {
        match args.get_mut(key) {
            Some(value) => coerce(key, value, prop)?,
            None => {
                if let Some(default) = prop.get("default") {
                    args.insert(key.clone(), default.clone());
                }
            }
        }
    }
    for required in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(key) = required.as_str()
            && !args.contains_key(key)
        {
            return Err(ArgsError::Missing(key.to_string()));
        }
    }
    Ok(args)
}

fn coerce(key: &str, value: &mut Value, prop: &Value) -> Result<(), ArgsError> {
    let types: Vec<&str> = match prop.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => return Ok(()),
    };
    if types.iter().any(|t| matches(value, t)) {
        return Ok(());
    }
    for t in &types {
        if let Some(coerced) = coerce_to(value, t) {
            *value = coerced;
            return Ok(());
        }
    }
    Err(ArgsError::BadType {
        expected: types.first().copied().unwrap_or("value").to_string(),
        key: key.to_string(),
    })
}

fn matches(value: &Value, schema_type: &str) -> bool {
    match schema_type {
        "integer" => {
            value.as_i64().is_some()
                || value.as_u64().is_some()
                || value.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "string" => value.is_string(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "null" => value.is_null(),
        _ => true,
    }
}

fn coerce_to(value: &Value, schema_type: &str) -> Option<Value> {
    let text = value.as_str()?.trim();
    match schema_type {
        "integer" => text.parse::<i64>().ok().map(Value::from),
        "number" => text
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .map(Value::from),
        "boolean" => match text.to_ascii_lowercase().as_str() {
            "true" => Some(Value::Bool(true)),
            "false" => Some(Value::Bool(false)),
            _ => None,
        },
        _ => None,
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "n": {"type": "integer"}, "x": {"type": "number"}, "flag": {"type": "boolean"},
            "name": {"type": "string"}, "mode": {"type": "string", "default": "fast"},
            "maybe": {"type": ["integer", "null"]}
        }, "required": ["n"]})
    }

    #[test]
    fn coerces_strings_and_fills_defaults_and_passes_extras() {
        let args = parse_and_coerce(
            r#"{"n": "2", "x": "1.5", "flag": "TRUE", "extra": [1], "maybe": null}"#,
            &schema(),
        )
        .unwrap();
        assert_eq!(
            Value::Object(args),
            json!({"n": 2, "x": 1.5, "flag": true, "extra": [1], "mode": "fast", "maybe": null})
        );
        let args = parse_and_coerce(r#"{"n": 1, "flag": "false"}"#, &schema()).unwrap();
        assert_eq!(args["flag"], json!(false));
    }

    #[test]
    fn reports_the_first_problem() {
        assert_eq!(
            parse_and_coerce("", &json!({"type": "object"})).unwrap(),
            Map::new()
        );
        assert_eq!(
            parse_and_coerce("[1]", &schema()).unwrap_err().to_string(),
            "expected a JSON object, got array"
        );
        assert!(
            parse_and_coerce("{oops", &schema())
                .unwrap_err()
                .to_string()
                .starts_with("invalid JSON:")
        );
        assert_eq!(
            parse_and_coerce(r#"{"n": "two"}"#, &schema())
                .unwrap_err()
                .to_string(),
            "bad_integer:n"
        );
        assert_eq!(
            parse_and_coerce(r#"{"n": 1.5}"#, &schema())
                .unwrap_err()
                .to_string(),
            "bad_integer:n"
        );
        assert_eq!(
            parse_and_coerce(r#"{"n": 1, "flag": "yes"}"#, &schema())
                .unwrap_err()
                .to_string(),
            "bad_boolean:flag"
        );
        assert_eq!(
            parse_and_coerce(r#"{"n": 1, "name": 5}"#, &schema())
                .unwrap_err()
                .to_string(),
            "bad_string:name"
        );
        assert_eq!(
            parse_and_coerce(r#"{}"#, &schema())
                .unwrap_err()
                .to_string(),
            "missing:n"
        );
    }
}
