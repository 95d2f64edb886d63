//! Talking to model servers: the `ChatBackend` seam, the OpenAI-compatible
//! HTTP client (retries, streaming) and the in-process scripted endpoint.
//!
//! This module moves requests and replies; it does not know what a bundle,
//! a plugin or a tool is.

mod http;
mod scripted;
mod sse;
pub mod watch;

pub use http::{DEFAULT_BACKOFF_MAX, DEFAULT_MAX_RESPONSE_BYTES, EndpointSettings, HttpBackend};
pub(crate) use http::{ERROR_BODY_BYTES, read_capped};
pub use scripted::ScriptedBackend;

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::types::{Message, TokenUsage};

/// Receives streamed content pieces.
pub type OnToken = std::sync::Arc<dyn Fn(&str) + Send + Sync>;

/// A chat-completions request body, already shaped by the model plugin.
#[derive(Debug, Clone, Default)]
pub struct ChatRequest {
    pub body: Map<String, Value>,
}

impl ChatRequest {
    pub fn model(&self) -> &str {
        self.body
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    pub fn messages(&self) -> &[Value] {
        self.body
            .get("messages")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
    }
}

/// The first choice of a chat-completions reply.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatResponse {
    pub id: Option<String>,
    pub model: Option<String>,
    pub message: Message,
    pub finish_reason: Option<String>,
    pub usage: TokenUsage,
}

impl ChatResponse {
    /// Reads a non-streaming reply body.
    pub fn from_body(body: &Value) -> Result<Self, ClientError> {
        let choice = body
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
            .ok_or_else(|| ClientError::NoChoices {
                body: crate::events::preview(&body.to_string(), 300),
            })?;
        let message = choice.get("message").ok_or_else(|| ClientError::Decode {
            detail: "choices[0] has no `message`".into(),
        })?;
        let message = Message::from_wire(message).map_err(|e| ClientError::Decode {
            detail: format!("choices[0].message: {e}"),
        })?;
        let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
        Ok(Self {
            id: text(body.get("id")),
            model: text(body.get("model")),
            message,
            finish_reason: text(choice.get("finish_reason")),
            usage: body
                .get("usage")
                .map(TokenUsage::from_wire)
                .unwrap_or_default(),
        })
    }
}

/// Where a backend sends requests, for telemetry.
#[derive(Debug, Clone, Default)]
pub struct EndpointInfo {
    pub name: String,
    pub address: String,
    pub port: Option<u16>,
    pub provider: String,
}

/// Anything that answers chat-completions requests.
#[async_trait]
pub trait ChatBackend: Send + Sync {
    /// Sends one request. With `on_token`, the reply is streamed and each
    /// content piece is passed to it as it arrives.
    async fn complete(
        &self,
        request: &ChatRequest,
        on_token: Option<OnToken>,
    ) -> Result<ChatResponse, ClientError>;

    /// `complete` under an endpoint's concurrency limit. The default holds a
    /// permit for the whole call; a backend that retries overrides it to hold
    /// one per attempt, so its backoff sleeps do not occupy the endpoint.
    async fn complete_limited(
        &self,
        request: &ChatRequest,
        on_token: Option<OnToken>,
        limit: &tokio::sync::Semaphore,
    ) -> Result<ChatResponse, ClientError> {
        let _permit = watch::slot(limit).await;
        self.complete(request, on_token).await
    }

    fn info(&self) -> EndpointInfo;
}

/// A model call that failed. Every variant carries enough to act on.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "cannot connect to model server {url}: {detail} (is it running? check `endpoints` in the config)"
    )]
    Connect { url: String, detail: String },
    #[error(
        "model server {url} did not answer within {after:?} (raise the endpoint's request_timeout or check the server's load)"
    )]
    Timeout { url: String, after: Duration },
    #[error("model server {url} returned HTTP {status}: {message}")]
    Status {
        url: String,
        status: u16,
        message: String,
        retry_after: Option<Duration>,
    },
    #[error(
        "model server {url} (endpoint `{endpoint}`) sent a reply larger than {limit} bytes; \
         raise endpoints.{endpoint}.max_response_bytes if such replies are expected, or lower \
         the bundle's max_tokens"
    )]
    TooLarge {
        endpoint: String,
        url: String,
        limit: usize,
    },
    #[error("model server {url} returned an empty body")]
    EmptyBody { url: String },
    #[error("model server reply has no `choices`: {body}")]
    NoChoices { body: String },
    #[error("cannot decode model server reply: {detail}")]
    Decode { detail: String },
    #[error("scripted endpoint: {detail}")]
    Script { detail: String },
    #[error("the API key variable `{var}` named by endpoint `{endpoint}` is not set")]
    MissingApiKey { endpoint: String, var: String },
}

impl ClientError {
    /// Whether trying again may help (connection trouble, 429, 5xx, timeouts).
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Connect { .. } | Self::Timeout { .. } => true,
            Self::Status { status, .. } => *status == 429 || *status >= 500,
            _ => false,
        }
    }

    /// A short, low-cardinality name for metrics and `error.type`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Connect { .. } => "connect",
            Self::Timeout { .. } => "timeout",
            Self::Status { status, .. } if *status == 429 => "http_429",
            Self::Status { status, .. } if *status >= 500 => "http_5xx",
            Self::Status { .. } => "http_4xx",
            Self::TooLarge { .. } => "too_large",
            Self::EmptyBody { .. } => "empty_body",
            Self::NoChoices { .. } => "no_choices",
            Self::Decode { .. } => "decode",
            Self::Script { .. } => "script",
            Self::MissingApiKey { .. } => "config",
        }
    }
}

/// Pulls the server's own message out of an error body
/// (`{"error": {"message": ...}}`, `{"message": ...}`, `{"detail": ...}` or text).
pub fn server_message(body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let found = parsed.as_ref().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("error").filter(|e| e.is_string()))
            .or_else(|| v.get("message"))
            .or_else(|| v.get("detail"))
            .map(|m| {
                m.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| m.to_string())
            })
    });
    match found {
        Some(message) => message,
        None if body.trim().is_empty() => "(empty body)".to_string(),
        None => crate::events::preview(body.trim(), 300),
    }
}

/// A minimal request for tests of backends.
#[cfg(test)]
pub(crate) fn test_request() -> ChatRequest {
    let mut body = Map::new();
    body.insert("model".into(), serde_json::json!("m"));
    body.insert(
        "messages".into(),
        serde_json::json!([{"role": "user", "content": "hi"}]),
    );
    ChatRequest { body }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn server_messages_are_extracted() {
        assert_eq!(
            server_message(r#"{"error":{"message":"model not found"}}"#),
            "model not found"
        );
        assert_eq!(server_message(r#"{"detail":"bad"}"#), "bad");
        assert_eq!(server_message("oops"), "oops");
        assert_eq!(server_message(""), "(empty body)");
    }

    #[test]
    fn body_without_choices_is_a_typed_error() {
        let err = ChatResponse::from_body(&json!({"object": "error"})).unwrap_err();
        assert!(matches!(err, ClientError::NoChoices { .. }));
        let ok = ChatResponse::from_body(&json!({"id": "r1", "choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 2, "completion_tokens": 1}}))
        .unwrap();
        assert_eq!(ok.message.content.as_deref(), Some("hi"));
        assert_eq!(ok.usage.total_tokens, 3);
    }
}
