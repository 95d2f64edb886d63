//! Scripted model replies: the script format shared by the mock
//! OpenAI-compatible HTTP server (tests, benchmarks) and the in-process
//! `scripted` endpoint (the quick start, which needs no model server).
//!
//! This module knows the chat-completions wire format and nothing else.

mod queueing;
mod server;

pub use queueing::{QueueLoad, Queueing};
pub use server::{MockServer, serve_mock};

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::Deserialize;
use serde_json::{Value, json};

/// A script: how to pick replies and the replies themselves.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Script {
    #[serde(default)]
    pub mode: ScriptMode,
    pub replies: Vec<ScriptedReply>,
    /// The HTTP server behaves like a small model server under load
    /// (docs/mock-server.md, "Queueing").
    #[serde(default)]
    pub queueing: Option<Queueing>,
}

#[derive(Debug, Clone, Copy, Deserialize, Default, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum ScriptMode {
    /// Reply N answers a request whose conversation holds N−1 assistant
    /// messages, so every conversation replays the same script.
    #[default]
    ByTurn,
    /// Replies are handed out in order across all requests (the last one repeats).
    Sequential,
}

/// One scripted answer.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ScriptedReply {
    /// Only for conversations whose user messages contain this text.
    #[serde(default, rename = "match")]
    pub matches: Option<String>,
    /// Only for this turn (1-based); otherwise replies take turns in order.
    #[serde(default)]
    pub turn: Option<u32>,
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub tool_calls: Vec<ScriptedCall>,
    /// Answer with this HTTP status and `error` as the server's message.
    #[serde(default)]
    pub status: Option<u16>,
    #[serde(default)]
    pub error: Option<String>,
    /// Sent as `Retry-After` with an error `status`.
    #[serde(default)]
    pub retry_after: Option<RetryAfter>,
    #[serde(default)]
    pub delay_ms: u64,
    /// When the request streams: the pause before each chunk after the
    /// first (a model writing a word at a time).
    #[serde(default)]
    pub chunk_delay_ms: u64,
    #[serde(default)]
    pub usage: Option<Value>,
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// Send this exact body (e.g. `{}` or empty) instead of a normal reply.
    #[serde(default)]
    pub raw_body: Option<String>,
}

/// A scripted `Retry-After`: whole seconds, or a raw header value sent
/// verbatim (an HTTP-date, or garbage such as `nan` to test clients).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum RetryAfter {
    Seconds(u64),
    Header(String),
}

impl RetryAfter {
    /// The header value as sent on the wire.
    pub fn header_value(&self) -> String {
        match self {
            Self::Seconds(secs) => secs.to_string(),
            Self::Header(raw) => raw.clone(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedCall {
    #[serde(default)]
    pub id: Option<String>,
    pub name: String,
    /// An object, or a string sent verbatim (to script malformed arguments).
    #[serde(default)]
    pub arguments: Value,
}

#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    #[error("cannot read script {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {detail}")]
    Parse { path: String, detail: String },
    #[error("script {path} has no replies")]
    Empty { path: String },
}

impl Script {
    pub fn load(path: &Path) -> Result<Self, ScriptError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScriptError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    pub fn parse(text: &str, origin: &str) -> Result<Self, ScriptError> {
        let script: Script = serde_saphyr::from_str(text).map_err(|e| ScriptError::Parse {
            path: origin.to_string(),
            detail: e.to_string(),
        })?;
        if script.replies.is_empty() {
            return Err(ScriptError::Empty {
                path: origin.to_string(),
            });
        }
        Ok(script)
    }
}

/// Picks replies from a script for incoming requests.
#[derive(Debug)]
pub struct ScriptPlayer {
    script: Script,
    served: AtomicUsize,
}

impl ScriptPlayer {
    pub fn new(script: Script) -> Self {
        Self {
            script,
            served: AtomicUsize::new(0),
        }
    }

    pub fn next_reply(&self, request: &Value) -> ScriptedReply {
        let served = self.served.fetch_add(1, Ordering::SeqCst);
        let replies = &self.script.replies;
        if self.script.mode == ScriptMode::Sequential {
            return replies[served.min(replies.len() - 1)].clone();
        }
        let messages = request
            .get("messages")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let turn = 1 + messages.iter().filter(|m| m["role"] == "assistant").count() as u32;
        let user_text: String = messages
            .iter()
            .filter(|m| m["role"] == "user")
            .filter_map(|m| m["content"].as_str())
            .collect::<Vec<_>>()
            .join("\n");
        let candidates: Vec<&ScriptedReply> = replies
            .iter()
            .filter(|r| r.matches.as_deref().is_none_or(|m| user_text.contains(m)))
            .collect();
        if let Some(exact) = candidates.iter().find(|r| r.turn == Some(turn)) {
            return (*exact).clone();
        }
        let ordered: Vec<&&ScriptedReply> =
            candidates.iter().filter(|r| r.turn.is_none()).collect();
        match ordered.get((turn as usize - 1).min(ordered.len().saturating_sub(1))) {
            Some(reply) => (**reply).clone(),
            None => ScriptedReply {
                status: Some(500),
                error: Some(format!(
                    "mock script has no reply for turn {turn} of this conversation"
                )),
                ..Default::default()
            },
        }
    }
}

impl ScriptedReply {
    fn wire_calls(&self) -> Vec<Value> {
        self.tool_calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let arguments = match &c.arguments {
                    Value::String(s) => s.clone(),
                    Value::Null => "{}".to_string(),
                    other => other.to_string(),
                };
                json!({
                    "id": c.id.clone().unwrap_or_else(|| format!("call_{}_{i}", uuid::Uuid::new_v4().simple())),
                    "type": "function",
                    "function": {"name": c.name, "arguments": arguments},
                })
            })
            .collect()
    }

    fn usage(&self) -> Value {
        self.usage.clone().unwrap_or_else(
            || json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}),
        )
    }

    /// The non-streaming chat-completions body.
    pub fn completion_body(&self, model: &str) -> Value {
        let calls = self.wire_calls();
        let mut message = json!({"role": "assistant", "content": self.content});
        if !calls.is_empty() {
            message["tool_calls"] = Value::Array(calls);
        }
        let finish = self.finish_reason.clone().unwrap_or_else(|| {
            if self.tool_calls.is_empty() {
                "stop"
            } else {
                "tool_calls"
            }
            .to_string()
        });
        json!({
            "id": format!("chatcmpl-{}", uuid::Uuid::new_v4().simple()),
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": self.usage(),
        })
    }

    /// The streaming body's `data:` payloads, in order (without `[DONE]`).
    pub fn stream_chunks(&self, model: &str) -> Vec<Value> {
        let id = format!("chatcmpl-{}", uuid::Uuid::new_v4().simple());
        let chunk = |delta: Value, finish: Value| {
            json!({"id": id, "object": "chat.completion.chunk", "model": model,
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        };
        let mut out = vec![chunk(json!({"role": "assistant"}), Value::Null)];
        if let Some(content) = &self.content {
            for piece in content.split_inclusive(' ') {
                out.push(chunk(json!({"content": piece}), Value::Null));
            }
        }
        for (index, call) in self.wire_calls().into_iter().enumerate() {
            let mut call = call;
            call["index"] = json!(index);
            out.push(chunk(json!({"tool_calls": [call]}), Value::Null));
        }
        let finish = if self.tool_calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        };
        out.push(chunk(json!({}), json!(finish)));
        out.push(json!({"id": id, "object": "chat.completion.chunk", "choices": [], "usage": self.usage()}));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_turn_counts_assistant_messages_and_honours_match() {
        let script = Script::parse(
            "replies:\n  - match: weather\n    content: sunny\n  - content: first\n  - content: second\n",
            "t",
        )
        .unwrap();
        let player = ScriptPlayer::new(script);
        let req = |msgs: Value| json!({"messages": msgs});
        let r = player.next_reply(&req(json!([{"role": "user", "content": "hello"}])));
        assert_eq!(r.content.as_deref(), Some("first"));
        let r = player.next_reply(&req(
            json!([{"role": "user", "content": "hello"}, {"role": "assistant", "content": "x"}]),
        ));
        assert_eq!(r.content.as_deref(), Some("second"));
        let r = player.next_reply(&req(json!([{"role": "user", "content": "the weather?"}])));
        assert_eq!(r.content.as_deref(), Some("sunny"));
    }

    #[test]
    fn retry_after_is_seconds_or_a_raw_header() {
        let script = Script::parse(
            "replies:\n  - {status: 503, retry_after: 2}\n  - {status: 503, retry_after: \"nan\"}\n",
            "t",
        )
        .unwrap();
        assert_eq!(script.replies[0].retry_after, Some(RetryAfter::Seconds(2)));
        assert_eq!(
            script.replies[1]
                .retry_after
                .as_ref()
                .map(RetryAfter::header_value)
                .as_deref(),
            Some("nan")
        );
    }
}
