//! The OpenAI-compatible HTTP backend: timeouts, retries with backoff and
//! jitter (honouring `Retry-After`), and streaming.

use std::time::Duration;

use async_trait::async_trait;
use rand::Rng;
use reqwest::StatusCode;
use serde_json::Value;

use super::sse::assemble_stream;
use super::{
    ChatBackend, ChatRequest, ChatResponse, ClientError, EndpointInfo, OnToken, server_message,
};

/// How to reach one model server.
#[derive(Debug, Clone)]
pub struct EndpointSettings {
    pub name: String,
    /// Up to and including `/v1`, e.g. `http://127.0.0.1:8000/v1`.
    pub base_url: String,
    pub api_key: Option<String>,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    /// Attempts after the first one.
    pub max_retries: u32,
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    /// `gen_ai.provider.name` for telemetry.
    pub provider: String,
}

impl EndpointSettings {
    pub fn new(name: impl Into<String>, base_url: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            base_url: base_url.into(),
            api_key: None,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(120),
            max_retries: 3,
            backoff_base: Duration::from_millis(200),
            backoff_max: Duration::from_secs(10),
            provider: "openai".into(),
        }
    }
}

pub struct HttpBackend {
    settings: EndpointSettings,
    url: String,
    http: reqwest::Client,
}

impl HttpBackend {
    pub fn new(settings: EndpointSettings) -> Result<Self, ClientError> {
        let url = format!(
            "{}/chat/completions",
            settings.base_url.trim_end_matches('/')
        );
        let http = reqwest::Client::builder()
            .connect_timeout(settings.connect_timeout)
            .pool_max_idle_per_host(64)
            .tcp_nodelay(true)
            .build()
            .map_err(|e| ClientError::Connect {
                url: url.clone(),
                detail: e.to_string(),
            })?;
        Ok(Self {
            settings,
            url,
            http,
        })
    }

    /// Exponential backoff with full jitter, or the server's `Retry-After`.
    fn delay_before(&self, retry: u32, err: &ClientError) -> Duration {
        if let ClientError::Status {
            retry_after: Some(after),
            ..
        } = err
        {
            return (*after).min(self.settings.backoff_max.max(*after));
        }
        let exp = self
            .settings
            .backoff_base
            .saturating_mul(2u32.saturating_pow(retry));
        let cap = exp.min(self.settings.backoff_max);
        let jitter = rand::rng().random_range(0.5..=1.0);
        cap.mul_f64(jitter)
    }

    /// The request body, serialized once for all attempts.
    fn encode(request: &ChatRequest, streaming: bool) -> Vec<u8> {
        if !streaming {
            return serde_json::to_vec(&request.body).unwrap_or_default();
        }
        let mut body = request.body.clone();
        body.insert("stream".into(), Value::Bool(true));
        body.insert(
            "stream_options".into(),
            serde_json::json!({"include_usage": true}),
        );
        serde_json::to_vec(&body).unwrap_or_default()
    }

    async fn attempt(
        &self,
        body: &[u8],
        on_token: Option<OnToken>,
    ) -> Result<ChatResponse, ClientError> {
        let mut builder = self
            .http
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_vec());
        if let Some(key) = &self.settings.api_key {
            builder = builder.bearer_auth(key);
        }
        let timeout = self.settings.request_timeout;
        let send = async {
            let response = builder.send().await.map_err(|e| self.transport_error(e))?;
            let status = response.status();
            if !status.is_success() {
                let retry_after = retry_after(&response);
                let text = response.text().await.unwrap_or_default();
                return Err(ClientError::Status {
                    url: self.url.clone(),
                    status: status.as_u16(),
                    message: server_message(&text),
                    retry_after,
                });
            }
            match on_token {
                Some(on_token) if is_event_stream(&response) => {
                    assemble_stream(response.bytes_stream(), &*on_token).await
                }
                _ => {
                    let bytes = response
                        .bytes()
                        .await
                        .map_err(|e| self.transport_error(e))?;
                    if bytes.iter().all(u8::is_ascii_whitespace) {
                        return Err(ClientError::EmptyBody {
                            url: self.url.clone(),
                        });
                    }
                    let value: Value =
                        serde_json::from_slice(&bytes).map_err(|e| ClientError::Decode {
                            detail: format!(
                                "{e}: {}",
                                crate::events::preview(&String::from_utf8_lossy(&bytes), 200)
                            ),
                        })?;
                    ChatResponse::from_body(&value)
                }
            }
        };
        match tokio::time::timeout(timeout, send).await {
            Ok(result) => result,
            Err(_) => Err(ClientError::Timeout {
                url: self.url.clone(),
                after: timeout,
            }),
        }
    }

    fn transport_error(&self, err: reqwest::Error) -> ClientError {
        if err.is_timeout() {
            ClientError::Timeout {
                url: self.url.clone(),
                after: self.settings.request_timeout,
            }
        } else {
            let mut detail = err.to_string();
            let mut source = std::error::Error::source(&err);
            while let Some(inner) = source {
                detail = format!("{detail}: {inner}");
                source = inner.source();
            }
            ClientError::Connect {
                url: self.url.clone(),
                detail,
            }
        }
    }
}

fn is_event_stream(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    if response.status() != StatusCode::TOO_MANY_REQUESTS && !response.status().is_server_error() {
        return None;
    }
    let value = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?;
    if let Ok(secs) = value.trim().parse::<f64>() {
        return Some(Duration::from_secs_f64(secs.clamp(0.0, 3600.0)));
    }
    let at = humantime::parse_rfc3339_weak(value.trim()).ok()?;
    at.duration_since(std::time::SystemTime::now()).ok()
}

#[async_trait]
impl ChatBackend for HttpBackend {
    async fn complete(
        &self,
        request: &ChatRequest,
        on_token: Option<OnToken>,
    ) -> Result<ChatResponse, ClientError> {
        let body = Self::encode(request, on_token.is_some());
        let mut retry = 0;
        loop {
            match self.attempt(&body, on_token.clone()).await {
                Err(err) if err.is_retryable() && retry < self.settings.max_retries => {
                    let delay = self.delay_before(retry, &err);
                    tracing::warn!(endpoint = %self.settings.name, retry = retry + 1, delay_ms = delay.as_millis() as u64, error = %err, "model call failed; retrying");
                    tokio::time::sleep(delay).await;
                    retry += 1;
                }
                other => return other,
            }
        }
    }

    fn info(&self) -> EndpointInfo {
        let parsed = reqwest::Url::parse(&self.settings.base_url).ok();
        EndpointInfo {
            name: self.settings.name.clone(),
            address: parsed
                .as_ref()
                .and_then(|u| u.host_str().map(str::to_string))
                .unwrap_or_default(),
            port: parsed.as_ref().and_then(|u| u.port_or_known_default()),
            provider: self.settings.provider.clone(),
        }
    }
}
