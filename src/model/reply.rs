//! What every text-parsing plugin shares once it has found calls in the
//! text: typing parameter values against the tool's schema, and combining
//! text calls with the server's native `tool_calls`.
//!
//! It knows no concrete call syntax.

use serde_json::{Map, Value};

use super::{ParsedCall, ParsedReply, new_call_id};
use crate::types::{Message, ToolCall, ToolSchema};

/// Calls found in a reply's text, and the text around them.
#[derive(Debug, Default)]
pub(crate) struct TextParse {
    pub outside: String,
    pub calls: Vec<ParsedCall>,
}

impl TextParse {
    pub(crate) fn text(&mut self, piece: &str) {
        self.outside.push_str(piece);
    }

    pub(crate) fn ok(&mut self, name: &str, arguments: Value, raw: Option<String>) {
        let canonical = arguments.to_string();
        let raw = raw.filter(|r| *r != canonical);
        self.calls.push(ParsedCall {
            call: ToolCall {
                id: new_call_id(),
                name: name.to_string(),
                arguments,
                raw_arguments: raw,
            },
            error: None,
        });
    }

    pub(crate) fn bad(&mut self, name: &str, raw: &str, error: String) {
        self.calls.push(ParsedCall {
            call: ToolCall {
                id: new_call_id(),
                name: name.to_string(),
                arguments: Value::String(raw.to_string()),
                raw_arguments: Some(raw.to_string()),
            },
            error: Some(error),
        });
    }
}

/// The `parameters` schema of `name`'s property `param`, if declared.
pub(crate) fn param_schema<'a>(
    tools: &'a [ToolSchema],
    name: &str,
    param: &str,
) -> Option<&'a Value> {
    tools
        .iter()
        .find(|t| t.name == name)
        .and_then(|t| t.parameters.get("properties"))
        .and_then(|p| p.get(param))
}

/// A parameter written as text: JSON when it parses as JSON of a type the
/// schema allows, else the text itself as a string.
pub(crate) fn typed_value(text: &str, schema: Option<&Value>) -> Value {
    let types = schema.map(schema_types).unwrap_or_default();
    if types.len() == 1 && types[0] == "string" {
        return Value::String(text.to_string());
    }
    match serde_json::from_str::<Value>(text.trim()) {
        Ok(v) if types.is_empty() || types.iter().any(|t| type_matches(t, &v)) => v,
        _ => Value::String(text.to_string()),
    }
}

/// The JSON types a schema allows; empty means "anything".
fn schema_types(schema: &Value) -> Vec<&str> {
    match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => match schema.get("enum").and_then(Value::as_array) {
            // An all-string enum is a string parameter.
            Some(options) if !options.is_empty() && options.iter().all(Value::is_string) => {
                vec!["string"]
            }
            _ => match schema
                .get("anyOf")
                .or_else(|| schema.get("oneOf"))
                .and_then(Value::as_array)
            {
                Some(options) => options.iter().flat_map(schema_types).collect(),
                None => Vec::new(),
            },
        },
    }
}

fn type_matches(t: &str, v: &Value) -> bool {
    match t {
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        _ => false,
    }
}

/// Combines native `tool_calls` with calls parsed from the content.
///
/// Native calls win. A native call whose arguments are empty or not JSON
/// takes the arguments of the first unused, well-formed text call to the
/// same tool, keeping the server's id. Without native calls, the text calls
/// are the calls.
pub(crate) fn combine(reply: &Message, parsed: TextParse) -> ParsedReply {
    let content = Some(parsed.outside.trim().to_string()).filter(|c| !c.is_empty());
    if reply.tool_calls.is_empty() {
        return ParsedReply {
            content,
            calls: parsed.calls,
        };
    }
    let mut spare: Vec<Option<ParsedCall>> = parsed.calls.into_iter().map(Some).collect();
    let calls = reply
        .tool_calls
        .iter()
        .map(|native| {
            let mut call = native.clone();
            if call.id.is_empty() {
                call.id = new_call_id();
            }
            if call.arguments.is_object() {
                return ParsedCall { call, error: None };
            }
            let donor = spare.iter_mut().find(|c| {
                c.as_ref()
                    .is_some_and(|c| c.error.is_none() && c.call.name == call.name)
            });
            if let Some(donor) = donor.and_then(Option::take) {
                call.arguments = donor.call.arguments;
                call.raw_arguments = donor.call.raw_arguments;
                return ParsedCall { call, error: None };
            }
            if call
                .raw_arguments
                .as_deref()
                .is_some_and(|r| r.trim().is_empty())
            {
                call.arguments = Value::Object(Map::new());
                call.raw_arguments = None;
                return ParsedCall { call, error: None };
            }
            let error = Some(format!(
                "arguments of `{}` are not a JSON object: {}",
                call.name,
                crate::events::preview(&call.arguments_text(), 200)
            ));
            ParsedCall { call, error }
        })
        .collect();
    ParsedReply { content, calls }
}

/// The first 80 characters of `text`, for error messages.
pub(crate) fn snippet(text: &str) -> String {
    crate::events::preview(text, 80)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_follow_the_schema_type() {
        let int = json!({"type": "integer"});
        let string = json!({"type": "string"});
        assert_eq!(typed_value("\n42\n", Some(&int)), json!(42));
        assert_eq!(typed_value("42", Some(&string)), json!("42"));
        assert_eq!(typed_value("4.5", Some(&int)), json!("4.5"));
        assert_eq!(typed_value("[1, 2]", None), json!([1, 2]));
        assert_eq!(typed_value("hello", None), json!("hello"));
        assert_eq!(
            typed_value("null", Some(&json!({"type": ["integer", "null"]}))),
            json!(null)
        );
        assert_eq!(
            typed_value("1", Some(&json!({"enum": ["1", "2"]}))),
            json!("1")
        );
    }
}

/// Where in `text` one of `markers` begins, or where a suffix of `text`
/// could still grow into one (a streamed `<tool_ca`): the first such byte
/// offset (a character boundary).
pub(crate) fn marker_start(text: &str, markers: &[&str]) -> Option<usize> {
    let whole = markers.iter().filter_map(|m| text.find(m)).min();
    let partial = text.char_indices().map(|(i, _)| i).find(|&i| {
        let tail = &text[i..];
        markers
            .iter()
            .any(|m| m.len() > tail.len() && m.starts_with(tail))
    });
    [whole, partial].into_iter().flatten().min()
}

#[cfg(test)]
mod marker_tests {
    use super::marker_start;

    #[test]
    fn a_marker_or_the_start_of_one_is_found_where_it_begins() {
        let markers = ["<tool_call>", "<function="];
        assert_eq!(marker_start("Hello there.", &markers), None);
        assert_eq!(marker_start("Sure.\n<tool_call>{", &markers), Some(6));
        assert_eq!(marker_start("Sure. <tool_ca", &markers), Some(6));
        assert_eq!(marker_start("a <fun", &markers), Some(2));
        assert_eq!(marker_start("x <", &markers), Some(2));
        assert_eq!(marker_start("héllo <f", &markers), Some(7));
    }
}
