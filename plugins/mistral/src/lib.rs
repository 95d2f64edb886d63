//! Example model plugin: reads the tool calls of Mistral's models, which
//! the daemon does not ship a parser for. They write calls in the text
//! after a `[TOOL_CALLS]` token, in one of two forms:
//!
//! - a JSON array (tokenizer v3, Mistral 7B v0.3 and Nemo):
//!   `[TOOL_CALLS] [{"name": "add", "arguments": {"a": 1}, "id": "a1b2c3d4e"}]`
//! - one call per marker (tokenizer v11 on, Mistral Small 3.2, Magistral):
//!   `[TOOL_CALLS]add[ARGS]{"a": 1}`, optionally `[TOOL_CALLS]add[CALL_ID]a1b2c3d4e[ARGS]{…}`.
//!
//! The text before the first marker is the reply's content. Native
//! `tool_calls` (a server that parsed the calls itself) are kept as they
//! came. Tools are declared in the prompt as Mistral's template does,
//! `[AVAILABLE_TOOLS][…][/AVAILABLE_TOOLS]`.
//!
//! Build-time variants for the daemon's reload tests: `SA_MISTRAL_VARIANT=shout`
//! upper-cases the content (a visibly different library);
//! `SA_MISTRAL_VARIANT=garbage` answers `parse_reply` with a value of the
//! wrong shape (the daemon must fail the turn, not crash).

use structured_agents_plugin_sdk::serde_json::{self, Map};
use structured_agents_plugin_sdk::{ModelPluginDef, PluginError, Value, export_model_plugin, json};

const MARKER: &str = "[TOOL_CALLS]";
const ARGS: &str = "[ARGS]";
const CALL_ID: &str = "[CALL_ID]";

/// What the plugin found in a reply's text.
#[derive(Default)]
struct Found {
    /// Text outside the calls.
    outside: String,
    calls: Vec<Value>,
}

impl Found {
    fn call(&mut self, name: &str, arguments: Value, id: Option<&str>) {
        let mut call = Map::new();
        call.insert("name".into(), json!(name.trim()));
        if let Some(id) = id.filter(|id| !id.is_empty()) {
            call.insert("id".into(), json!(id));
        }
        if arguments.is_object() {
            call.insert("arguments".into(), arguments);
        } else {
            call.insert("arguments".into(), json!({}));
            call.insert(
                "error".into(),
                json!(format!(
                    "arguments of `{}` are not a JSON object: {arguments}",
                    name.trim()
                )),
            );
        }
        self.calls.push(Value::Object(call));
    }

    fn bad(&mut self, name: &str, error: String) {
        self.calls
            .push(json!({"name": name.trim(), "arguments": {}, "error": error}));
    }
}

/// Why no JSON value starts a piece of text.
#[derive(Debug)]
enum NoJson {
    Nothing,
    Invalid(serde_json::Error),
}

impl std::fmt::Display for NoJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoJson::Nothing => f.write_str("nothing after the marker"),
            NoJson::Invalid(e) => write!(f, "{e}"),
        }
    }
}

/// The JSON value at the start of `text` (after whitespace) and the bytes
/// it took, whitespace included.
fn json_prefix(text: &str) -> Result<(Value, usize), NoJson> {
    let skipped = text.len() - text.trim_start().len();
    let mut values = serde_json::Deserializer::from_str(&text[skipped..]).into_iter::<Value>();
    match values.next() {
        Some(Ok(value)) => Ok((value, skipped + values.byte_offset())),
        Some(Err(e)) => Err(NoJson::Invalid(e)),
        None => Err(NoJson::Nothing),
    }
}

/// One `[TOOL_CALLS]` segment (the text after the marker, up to the next
/// marker): the calls it holds, and the text it leaves over.
fn segment(text: &str, found: &mut Found) {
    if text.trim_start().starts_with('[') {
        match json_prefix(text) {
            Ok((Value::Array(calls), used)) => {
                for call in calls {
                    let name = call["name"].as_str().unwrap_or_default().to_string();
                    if name.is_empty() {
                        found.bad("", format!("a call without a name: {call}"));
                        continue;
                    }
                    found.call(&name, call["arguments"].clone(), call["id"].as_str());
                }
                found.outside.push_str(&text[used..]);
            }
            Ok((other, _)) => found.bad(
                "",
                format!("[TOOL_CALLS] is not followed by a list of calls: {other}"),
            ),
            Err(e) => found.bad(
                "",
                format!("[TOOL_CALLS] is not followed by valid JSON: {e}"),
            ),
        }
        return;
    }
    let Some(args_at) = text.find(ARGS) else {
        found.bad("", format!("a call without {ARGS}: {:?}", text.trim()));
        return;
    };
    let head = &text[..args_at];
    let (name, id) = match head.split_once(CALL_ID) {
        Some((name, id)) => (name, Some(id.trim())),
        None => (head, None),
    };
    let rest = &text[args_at + ARGS.len()..];
    match json_prefix(rest) {
        Ok((arguments, used)) => {
            found.call(name, arguments, id);
            found.outside.push_str(&rest[used..]);
        }
        Err(e) => found.bad(
            name,
            format!("the arguments of `{}` are not valid JSON: {e}", name.trim()),
        ),
    }
}

fn parse_reply(input: &Value) -> Result<Value, PluginError> {
    let variant = option_env!("SA_MISTRAL_VARIANT");
    if variant == Some("garbage") {
        return Ok(json!({"calls": "not a list"}));
    }
    let text = input["content"].as_str().unwrap_or_default();
    let mut found = Found::default();
    let mut pieces = text.split(MARKER);
    found.outside.push_str(pieces.next().unwrap_or_default());
    for piece in pieces {
        segment(piece, &mut found);
    }
    // A server that parsed the calls itself: its calls, as they came.
    let native = input["tool_calls"].as_array().cloned().unwrap_or_default();
    let calls = if native.is_empty() {
        found.calls
    } else {
        native
    };
    let mut content = found.outside.trim().to_string();
    if variant == Some("shout") {
        content = content.to_uppercase();
    }
    Ok(json!({
        "content": (!content.is_empty()).then_some(content),
        "calls": calls,
    }))
}

fn declare_tools(input: &Value) -> Result<Value, PluginError> {
    let tools = input["tools"].as_array().cloned().unwrap_or_default();
    Ok(json!(format!(
        "[AVAILABLE_TOOLS]{}[/AVAILABLE_TOOLS]\nTo call tools, answer with [TOOL_CALLS] followed by a JSON list of {{\"name\": …, \"arguments\": {{…}}}} objects.",
        Value::Array(tools)
    )))
}

static MISTRAL: ModelPluginDef = ModelPluginDef {
    name: "mistral",
    version: env!("CARGO_PKG_VERSION"),
    call_markers: &[MARKER],
    parse_reply,
    format_tools: None,
    declare_tools: Some(declare_tools),
};

export_model_plugin!(MISTRAL);

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Value {
        parse_reply(&json!({"content": text, "tool_calls": [], "tools": []})).unwrap()
    }

    #[test]
    fn the_json_list_form() {
        let out = parse(
            "Let me add.[TOOL_CALLS] [{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 40}, \"id\": \"abc123def\"}, {\"name\": \"neg\", \"arguments\": {\"x\": 1}}]",
        );
        assert_eq!(out["content"], "Let me add.");
        assert_eq!(
            out["calls"][0],
            json!({"name": "add", "arguments": {"a": 2, "b": 40}, "id": "abc123def"})
        );
        assert_eq!(out["calls"][1]["name"], "neg");
        assert!(out["calls"][1].get("id").is_none());
    }

    #[test]
    fn the_args_form_one_call_per_marker() {
        let out = parse(
            "[TOOL_CALLS]add[ARGS]{\"a\": 1, \"b\": 2}[TOOL_CALLS]neg[CALL_ID]x1y2z3w4v[ARGS]{\"x\": 3}",
        );
        assert_eq!(out["content"], Value::Null);
        assert_eq!(
            out["calls"][0],
            json!({"name": "add", "arguments": {"a": 1, "b": 2}})
        );
        assert_eq!(
            out["calls"][1],
            json!({"name": "neg", "arguments": {"x": 3}, "id": "x1y2z3w4v"})
        );
    }

    #[test]
    fn malformed_calls_are_reported_not_dropped() {
        let out = parse("[TOOL_CALLS] [{\"name\": \"add\", \"arguments\": {\"a\": ");
        assert!(
            out["calls"][0]["error"]
                .as_str()
                .unwrap()
                .contains("not followed by valid JSON")
        );
        let out = parse("[TOOL_CALLS]add[ARGS][1, 2]");
        assert!(
            out["calls"][0]["error"]
                .as_str()
                .unwrap()
                .contains("not a JSON object")
        );
        let out = parse("plain answer");
        assert_eq!(out, json!({"content": "plain answer", "calls": []}));
    }
}
