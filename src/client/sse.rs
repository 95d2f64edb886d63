//! Assembles a streamed chat-completions reply (SSE chunks) into one
//! `ChatResponse`: content pieces concatenated, tool-call fragments joined by
//! their `index`.

use bytes::Bytes;
use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};
use serde_json::{Value, json};

use super::{ChatResponse, ClientError};
use crate::types::{Message, TokenUsage};

/// The most tool calls one streamed reply may carry. A fragment's `index`
/// comes from the server and sizes a Vec, so an absurd one (corrupt stream,
/// hostile server) must be an error, not an allocation.
pub(super) const MAX_STREAMED_TOOL_CALLS: usize = 256;

#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// The reply a stream of SSE chunks carries, each content piece handed to
/// `on_token` as it comes; a chunk that is not JSON or is an `error` ends it.
pub(super) async fn assemble_stream<S, E>(
    bytes: S,
    on_token: &(dyn Fn(&str) + Send + Sync),
) -> Result<ChatResponse, ClientError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let mut events = bytes.eventsource();
    let mut assembled = Assembled::default();
    while let Some(event) = events.next().await {
        let event = event.map_err(|e| ClientError::Decode {
            detail: format!("stream: {e}"),
        })?;
        if event.data.trim() == "[DONE]" {
            break;
        }
        let chunk: Value = serde_json::from_str(&event.data).map_err(|e| ClientError::Decode {
            detail: format!("stream chunk: {e}"),
        })?;
        if let Some(message) = chunk.get("error") {
            return Err(ClientError::Decode {
                detail: format!("stream error: {message}"),
            });
        }
        assembled.add(&chunk, on_token)?;
    }
    assembled.into_response()
}

/// What the chunks so far say: the reply's text, its calls by `index`, and
/// the id, model, finish reason and usage they carry (the first id and
/// model, the last finish reason and usage).
#[derive(Default)]
struct Assembled {
    content: String,
    calls: Vec<PartialCall>,
    id: Option<String>,
    model: Option<String>,
    finish_reason: Option<String>,
    usage: TokenUsage,
    saw_chunk: bool,
}

impl Assembled {
    /// One chunk added; its content piece handed to `on_token`.
    fn add(
        &mut self,
        chunk: &Value,
        on_token: &(dyn Fn(&str) + Send + Sync),
    ) -> Result<(), ClientError> {
        self.saw_chunk = true;
        let text = |key: &str| chunk.get(key).and_then(Value::as_str).map(str::to_string);
        self.id = self.id.take().or_else(|| text("id"));
        self.model = self.model.take().or_else(|| text("model"));
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = TokenUsage::from_wire(u);
        }
        let Some(choice) = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        else {
            return Ok(());
        };
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_string());
        }
        let Some(delta) = choice.get("delta") else {
            return Ok(());
        };
        if let Some(piece) = delta.get("content").and_then(Value::as_str)
            && !piece.is_empty()
        {
            on_token(piece);
            self.content.push_str(piece);
        }
        add_fragments(&mut self.calls, delta)
    }

    /// The assembled reply; a stream without chunks has none.
    fn into_response(self) -> Result<ChatResponse, ClientError> {
        if !self.saw_chunk {
            return Err(ClientError::NoChoices {
                body: "(stream ended without chunks)".into(),
            });
        }
        let Assembled {
            content,
            calls,
            id,
            model,
            finish_reason,
            usage,
            ..
        } = self;
        let wire = json!({
            "role": "assistant",
            "content": if content.is_empty() && !calls.is_empty() { Value::Null } else { Value::String(content) },
            "tool_calls": calls.iter().map(|c| json!({
                "id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}
            })).collect::<Vec<_>>(),
        });
        let message = Message::from_wire(&wire).map_err(|e| ClientError::Decode {
            detail: e.to_string(),
        })?;
        Ok(ChatResponse {
            id,
            model,
            message,
            finish_reason,
            usage,
        })
    }
}

/// Adds a delta's tool-call fragments to the calls they continue (by
/// `index`, at most [`MAX_STREAMED_TOOL_CALLS`]).
fn add_fragments(calls: &mut Vec<PartialCall>, delta: &Value) -> Result<(), ClientError> {
    for fragment in delta
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let index = fragment
            .get("index")
            .and_then(Value::as_u64)
            .unwrap_or(calls.len() as u64);
        let index = match usize::try_from(index) {
            Ok(i) if i < MAX_STREAMED_TOOL_CALLS => i,
            _ => {
                return Err(ClientError::Decode {
                    detail: format!(
                        "stream chunk has tool call index {index}, but at most \
                         {MAX_STREAMED_TOOL_CALLS} tool calls per reply are accepted \
                         (the server's stream is corrupt; check the model server)"
                    ),
                });
            }
        };
        if calls.len() <= index {
            calls.resize_with(index + 1, PartialCall::default);
        }
        let call = &mut calls[index];
        if let Some(v) = fragment.get("id").and_then(Value::as_str) {
            call.id.push_str(v);
        }
        if let Some(f) = fragment.get("function") {
            if let Some(v) = f.get("name").and_then(Value::as_str) {
                call.name.push_str(v);
            }
            if let Some(v) = f.get("arguments").and_then(Value::as_str) {
                call.arguments.push_str(v);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[tokio::test]
    async fn chunks_assemble_into_content_and_calls() {
        let body = concat!(
            "data: {\"id\":\"r\",\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"function\":{\"name\":\"add\",\"arguments\":\"{\\\"a\\\"\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\":1}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\n",
            "data: [DONE]\n\n"
        );
        let stream = futures::stream::iter(vec![Ok::<_, std::io::Error>(Bytes::from(body))]);
        let seen = Mutex::new(String::new());
        let on_token = |t: &str| seen.lock().unwrap().push_str(t);
        let response = assemble_stream(stream, &on_token).await.unwrap();
        assert_eq!(*seen.lock().unwrap(), "Hello");
        assert_eq!(response.message.content.as_deref(), Some("Hello"));
        assert_eq!(response.message.tool_calls[0].arguments, json!({"a": 1}));
        assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(response.usage.total_tokens, 7);
    }

    #[tokio::test]
    async fn an_absurd_tool_call_index_is_an_error_not_an_allocation() {
        for index in ["4000000000", "256", "18446744073709551615"] {
            let body = format!(
                "data: {{\"choices\":[{{\"delta\":{{\"tool_calls\":[{{\"index\":{index},\"id\":\"c\",\"function\":{{\"name\":\"f\",\"arguments\":\"{{}}\"}}}}]}}}}]}}\n\ndata: [DONE]\n\n"
            );
            let stream = futures::stream::iter(vec![Ok::<_, std::io::Error>(Bytes::from(body))]);
            let err = assemble_stream(stream, &|_: &str| {}).await.unwrap_err();
            let text = err.to_string();
            assert!(
                matches!(err, ClientError::Decode { .. }) && text.contains(index),
                "{index}: {text}"
            );
        }
        // The last accepted index still works.
        let body = "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":255,\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}}]}\n\ndata: [DONE]\n\n";
        let stream = futures::stream::iter(vec![Ok::<_, std::io::Error>(Bytes::from(body))]);
        let response = assemble_stream(stream, &|_: &str| {}).await.unwrap();
        assert_eq!(response.message.tool_calls.len(), 256);
    }
}
