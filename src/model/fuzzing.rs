//! Fuzz entry points, one per parser. The `fuzz/` crate (cargo-fuzz) calls
//! these, and `tests/model_fuzz_smoke.rs` drives them with random input on
//! the stable toolchain. Each checks the parser's invariants and panics
//! when one breaks; any other panic is a bug too.
//!
//! Not part of the daemon's behaviour; public only so the fuzz crate can
//! reach the parsers.

use serde_json::Value;

use super::{
    FunctionGemmaPlugin, ModelPlugin, ParsedReply, QwenCallStyle, QwenOptions, QwenPlugin,
};
use crate::types::{Message, ToolCall, ToolSchema};

fn tools() -> Vec<ToolSchema> {
    let params = serde_json::json!({"type": "object", "properties": {
        "a": {"type": "integer"}, "note": {"type": "string"}, "xs": {"type": "array"}
    }});
    vec![ToolSchema {
        name: "add".into(),
        description: String::new(),
        parameters: params,
    }]
}

fn check(reply: &ParsedReply) {
    for parsed in &reply.calls {
        // A generated id (UUIDv4, 122 random bits) or an id the server gave.
        assert!(!parsed.call.id.is_empty(), "empty call id");
        if parsed.error.is_none() {
            assert!(
                parsed.call.arguments.is_object(),
                "accepted call with non-object arguments: {parsed:?}"
            );
        } else {
            assert!(
                !parsed.error.as_deref().unwrap_or_default().is_empty(),
                "empty error detail"
            );
        }
    }
}

fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

/// The Qwen parser (Hermes, XML, bare function, JSON content) on arbitrary text.
pub fn qwen_parse(data: &[u8]) {
    let reply = Message::assistant(Some(text(data)), vec![]);
    for style in [QwenCallStyle::Hermes, QwenCallStyle::Xml] {
        let plugin = QwenPlugin::new(QwenOptions {
            call_style: style,
            ..Default::default()
        });
        check(&plugin.parse_reply(&reply, &tools()));
    }
}

/// The FunctionGemma parser on arbitrary text.
pub fn function_gemma_parse(data: &[u8]) {
    let reply = Message::assistant(Some(text(data)), vec![]);
    check(&FunctionGemmaPlugin::default().parse_reply(&reply, &tools()));
}

/// Native `tool_calls` whose argument text is arbitrary, with the same
/// text as content, through both text-parsing plugins.
pub fn native_fallback(data: &[u8]) {
    let raw = text(data);
    let arguments =
        serde_json::from_str::<Value>(&raw).unwrap_or_else(|_| Value::String(raw.clone()));
    let call = ToolCall {
        id: String::new(),
        name: "add".into(),
        arguments,
        raw_arguments: Some(raw.clone()),
    };
    let reply = Message::assistant(Some(raw), vec![call]);
    let q = QwenPlugin::default().parse_reply(&reply, &tools());
    assert_eq!(q.calls.len(), 1, "native call lost");
    check(&q);
    check(&FunctionGemmaPlugin::default().parse_reply(&reply, &tools()));
}
