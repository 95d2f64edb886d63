//! The `scripted` endpoint: answers from a script file in-process, so the
//! daemon and `run` work with no model server installed.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use super::{ChatBackend, ChatRequest, ChatResponse, ClientError, EndpointInfo, OnToken};
use crate::mock::{Script, ScriptPlayer};

pub struct ScriptedBackend {
    name: String,
    player: ScriptPlayer,
}

impl ScriptedBackend {
    pub fn new(name: impl Into<String>, script: Script) -> Self {
        Self {
            name: name.into(),
            player: ScriptPlayer::new(script),
        }
    }
}

#[async_trait]
impl ChatBackend for ScriptedBackend {
    async fn complete(
        &self,
        request: &ChatRequest,
        on_token: Option<OnToken>,
    ) -> Result<ChatResponse, ClientError> {
        let reply = self.player.next_reply(&Value::Object(request.body.clone()));
        if reply.delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(reply.delay_ms)).await;
        }
        if let Some(status) = reply.status {
            return Err(ClientError::Status {
                url: format!("scripted:{}", self.name),
                status,
                message: reply
                    .error
                    .clone()
                    .unwrap_or_else(|| "scripted error".into()),
                // Parsed like a real header, so scripts exercise the same rules.
                retry_after: reply.retry_after.as_ref().and_then(|after| {
                    super::http::parse_retry_after(
                        &after.header_value(),
                        std::time::SystemTime::now(),
                    )
                }),
            });
        }
        if let Some(raw) = &reply.raw_body {
            let value: Value = serde_json::from_str(raw).map_err(|e| ClientError::Script {
                detail: e.to_string(),
            })?;
            return ChatResponse::from_body(&value);
        }
        let response = ChatResponse::from_body(&reply.completion_body(request.model()))?;
        if let (Some(on_token), Some(content)) = (&on_token, &response.message.content) {
            for piece in content.split_inclusive(' ') {
                on_token(piece);
            }
        }
        Ok(response)
    }

    fn info(&self) -> EndpointInfo {
        EndpointInfo {
            name: self.name.clone(),
            address: "scripted".into(),
            port: None,
            provider: "scripted".into(),
        }
    }
}
