//! A chat sent as a job's input, read the one way every wire that takes a
//! list of messages reads it (AG-UI's `messages`, LangGraph's
//! `input.messages`): each message's role from `role` (`user`,
//! `assistant`, `system`, `developer`) or LangChain's `type` (`human`,
//! `ai`, `system`), its text from `content` as a string or as text parts.
//! The job's input is the last user text; the chat is kept when there is
//! more than it.

use serde_json::{Value, json};

use super::error::{ApiError, ErrorCode};

/// The role a message was written in, as the model reads it; `None` for a
/// message the job does not start from (a tool's result, an unknown one).
fn role_of(message: &Value) -> Option<&'static str> {
    let role = message["role"]
        .as_str()
        .or_else(|| message["type"].as_str())?;
    Some(match role {
        "developer" | "system" => "system",
        "user" | "human" => "user",
        "assistant" | "ai" => "assistant",
        _ => return None,
    })
}

fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter(|p| p["type"] == "text")
            .filter_map(|p| p["text"].as_str())
            .collect(),
        _ => String::new(),
    }
}

/// The last user text of `messages`, and the chat when there is more than
/// it; a 422 naming `field` when no user message has text.
pub(super) fn chat_of(
    messages: &[Value],
    field: &str,
) -> Result<(String, Option<Vec<Value>>), ApiError> {
    let chat: Vec<Value> = messages
        .iter()
        .filter_map(|m| {
            let role = role_of(m)?;
            let content = text_of(&m["content"]);
            (!content.is_empty()).then(|| json!({"role": role, "content": content}))
        })
        .collect();
    let last = chat
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .map(str::to_string)
        .ok_or_else(|| {
            ApiError::field(
                ErrorCode::InvalidRequest,
                field,
                "no user message with text: send at least one (role `user`, or type `human`)",
            )
        })?;
    Ok((last, (chat.len() > 1).then_some(chat)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chat_is_kept_only_when_there_is_more_than_one_message() {
        let one = [json!({"id": "1", "role": "user", "content": "hi"})];
        assert_eq!(chat_of(&one, "messages").unwrap(), ("hi".to_string(), None));
        let two = [
            json!({"id": "0", "role": "developer", "content": "be brief"}),
            json!({"id": "1", "role": "user", "content": [{"type": "text", "text": "hi"}]}),
        ];
        let (text, chat) = chat_of(&two, "messages").unwrap();
        assert_eq!(text, "hi");
        assert_eq!(chat.unwrap()[0]["role"], "system");
        assert!(chat_of(&[json!({"role": "assistant", "content": "x"})], "messages").is_err());
    }

    #[test]
    fn langchains_message_types_are_roles() {
        let chat = [
            json!({"type": "system", "content": "be brief"}),
            json!({"type": "human", "content": "first"}),
            json!({"type": "ai", "content": "ok"}),
            json!({"type": "tool", "content": "42", "tool_call_id": "c"}),
            json!({"type": "human", "content": "second"}),
        ];
        let (text, kept) = chat_of(&chat, "input.messages").unwrap();
        assert_eq!(text, "second");
        let roles: Vec<&str> = kept
            .as_ref()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["system", "user", "assistant", "user"]);
        let refused =
            chat_of(&[json!({"type": "ai", "content": "x"})], "input.messages").unwrap_err();
        assert_eq!(refused.field.as_deref(), Some("input.messages"));
    }
}
