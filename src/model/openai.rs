//! The `openai` plugin: the server parses tool calls and returns native
//! `tool_calls`; the plugin only validates them.

use serde_json::Value;

use super::{GrammarMode, ModelPlugin, ParsedCall, ParsedReply, new_call_id};
use crate::types::{Message, ToolSchema};

pub struct OpenAiPlugin;

impl ModelPlugin for OpenAiPlugin {
    fn name(&self) -> &str {
        "openai"
    }

    fn grammar_modes(&self) -> &[GrammarMode] {
        &[]
    }

    fn parse_reply(&self, reply: &Message, _tools: &[ToolSchema]) -> ParsedReply {
        let calls = reply
            .tool_calls
            .iter()
            .map(|call| {
                let mut call = call.clone();
                if call.id.is_empty() {
                    call.id = new_call_id();
                }
                let error = match &call.arguments {
                    Value::Object(_) => None,
                    _ if call
                        .raw_arguments
                        .as_deref()
                        .is_some_and(|r| r.trim().is_empty()) =>
                    {
                        call.arguments = Value::Object(Default::default());
                        None
                    }
                    _ => Some(format!(
                        "arguments of `{}` are not a JSON object: {}",
                        call.name,
                        call.arguments_text()
                    )),
                };
                ParsedCall { call, error }
            })
            .collect();
        ParsedReply {
            content: reply.content.clone().filter(|c| !c.is_empty()),
            calls,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn native_calls_are_kept_and_bad_arguments_flagged() {
        let reply = Message::from_wire(&json!({"role": "assistant", "content": "", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "add", "arguments": "{\"a\":1}"}},
            {"id": "", "type": "function", "function": {"name": "add", "arguments": ""}},
            {"id": "c", "type": "function", "function": {"name": "add", "arguments": "{oops"}}
        ]}))
        .unwrap();
        let parsed = OpenAiPlugin.parse_reply(&reply, &[]);
        assert_eq!(parsed.content, None);
        assert_eq!(parsed.calls[0].call.id, "a");
        assert!(parsed.calls[0].error.is_none());
        assert!(parsed.calls[1].call.id.len() >= 24);
        assert_eq!(parsed.calls[1].call.arguments, json!({}));
        assert!(
            parsed.calls[2]
                .error
                .as_deref()
                .unwrap()
                .contains("not a JSON object")
        );
    }
}
