//! The OpenAI-compatible HTTP backend: timeouts, retries with backoff and
//! jitter (honouring `Retry-After`), and streaming.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use futures::StreamExt;
use rand::Rng;
use reqwest::StatusCode;
use serde_json::Value;
use tokio::sync::Semaphore;

use super::sse::assemble_stream;
use super::{
    ChatBackend, ChatRequest, ChatResponse, ClientError, EndpointInfo, OnToken, server_message,
};

/// The default cap on the wait between attempts (and on `Retry-After`).
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// The default cap on a reply body (8 MiB): far above any real chat
/// completion, far below what would hurt the daemon.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 8 * 1024 * 1024;

/// How much of an error reply is read for its message.
pub(crate) const ERROR_BODY_BYTES: usize = 64 * 1024;

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
    /// The longest wait between attempts, also for a server's `Retry-After`.
    pub backoff_max: Duration,
    /// The largest reply body read; a bigger one is `ClientError::TooLarge`.
    pub max_response_bytes: usize,
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
            backoff_max: DEFAULT_BACKOFF_MAX,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
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

    /// Exponential backoff with full jitter, or the server's `Retry-After`;
    /// either way at most `backoff_max`, so a server cannot park a job for
    /// an hour with one header.
    fn delay_before(&self, retry: u32, err: &ClientError) -> Duration {
        if let ClientError::Status {
            retry_after: Some(after),
            ..
        } = err
        {
            return (*after).min(self.settings.backoff_max);
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

    /// One HTTP attempt of the call, within the request timeout: the reply
    /// streamed (when `on_token` wants tokens and the server streams) or
    /// read whole, never past `max_response_bytes`.
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
            if !response.status().is_success() {
                return Err(self.refused(response).await);
            }
            match on_token {
                Some(on_token) if is_event_stream(&response) => {
                    self.streamed(response, &*on_token).await
                }
                _ => self.whole(response).await,
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

    /// The error of a reply with an error status: the server's message (a
    /// huge error page cut short) and its `Retry-After`.
    async fn refused(&self, response: reqwest::Response) -> ClientError {
        let status = response.status();
        let retry_after = retry_after(&response);
        // Only the message is wanted; a huge error page is cut short.
        let text = match read_capped(response, ERROR_BODY_BYTES).await {
            Ok((bytes, _)) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(_) => String::new(),
        };
        ClientError::Status {
            url: self.url.clone(),
            status: status.as_u16(),
            message: server_message(&text),
            retry_after,
        }
    }

    /// A streamed reply assembled, its tokens handed to `on_token` as they
    /// come; `TooLarge` past `max_response_bytes`.
    async fn streamed(
        &self,
        response: reqwest::Response,
        on_token: &(dyn Fn(&str) + Send + Sync),
    ) -> Result<ChatResponse, ClientError> {
        // Count the bytes as they arrive and end the stream at
        // the limit; the flag turns that end into `TooLarge`.
        let over = Arc::new(AtomicBool::new(false));
        let (flag, limit) = (over.clone(), self.settings.max_response_bytes);
        let mut seen = 0usize;
        let capped = response.bytes_stream().map(move |item| {
            let bytes = item.map_err(|e| e.to_string())?;
            seen = seen.saturating_add(bytes.len());
            if seen > limit {
                flag.store(true, Ordering::Relaxed);
                return Err(format!("reply exceeds {limit} bytes"));
            }
            Ok(bytes)
        });
        let result = assemble_stream(capped, on_token).await;
        if over.load(Ordering::Relaxed) {
            return Err(self.too_large());
        }
        result
    }

    /// A reply read whole (at most `max_response_bytes`) and decoded.
    async fn whole(&self, response: reqwest::Response) -> Result<ChatResponse, ClientError> {
        let limit = self.settings.max_response_bytes;
        if response.content_length().is_some_and(|n| n > limit as u64) {
            return Err(self.too_large());
        }
        let (bytes, truncated) = read_capped(response, limit)
            .await
            .map_err(|e| self.transport_error(e))?;
        if truncated {
            return Err(self.too_large());
        }
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(ClientError::EmptyBody {
                url: self.url.clone(),
            });
        }
        let value: Value = serde_json::from_slice(&bytes).map_err(|e| ClientError::Decode {
            detail: format!(
                "{e}: {}",
                crate::events::preview(&String::from_utf8_lossy(&bytes), 200)
            ),
        })?;
        ChatResponse::from_body(&value)
    }

    /// The retry loop. With `limit`, a permit is held for each HTTP attempt
    /// only: a call waiting out a backoff (or a `Retry-After`) must not keep
    /// other jobs from an endpoint that may well be able to answer them.
    async fn call(
        &self,
        request: &ChatRequest,
        on_token: Option<OnToken>,
        limit: Option<&Semaphore>,
    ) -> Result<ChatResponse, ClientError> {
        let body = Self::encode(request, on_token.is_some());
        let mut retry = 0;
        loop {
            let result = {
                let _permit = match limit {
                    Some(limit) => super::watch::slot(limit).await,
                    None => None,
                };
                self.attempt(&body, on_token.clone()).await
            };
            match result {
                Err(err) if err.is_retryable() && retry < self.settings.max_retries => {
                    let delay = self.delay_before(retry, &err);
                    tracing::warn!(endpoint = %self.settings.name, retry = retry + 1, delay_ms = delay.as_millis() as u64, error = %err, "model call failed; retrying");
                    super::watch::note(super::watch::CallNote::Retrying {
                        attempt: retry + 1,
                        error: &err,
                        delay,
                        model: request.model(),
                    });
                    tokio::time::sleep(delay).await;
                    retry += 1;
                    super::watch::note(super::watch::CallNote::Attempt(retry + 1));
                }
                other => return other,
            }
        }
    }

    fn too_large(&self) -> ClientError {
        ClientError::TooLarge {
            endpoint: self.settings.name.clone(),
            url: self.url.clone(),
            limit: self.settings.max_response_bytes,
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

/// Reads at most `limit` bytes of a body, chunk by chunk (never the whole
/// body at once: a broken or hostile server decides its size). The flag says
/// whether more was sent; the rest is not read.
pub(crate) async fn read_capped(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let mut out = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let room = limit - out.len();
        if chunk.len() > room {
            out.extend_from_slice(&chunk[..room]);
            return Ok((out, true));
        }
        out.extend_from_slice(&chunk);
    }
    Ok((out, false))
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
    parse_retry_after(value, SystemTime::now())
}

/// Reads a `Retry-After` value: delta-seconds (fractions tolerated) or an
/// HTTP-date (IMF-fixdate, RFC 850 or asctime). Anything else — NaN,
/// infinities, negative numbers, a date already past, garbage — is `None`,
/// which means "no advice": the caller falls back to its own backoff. The
/// value comes from the network, so this must never panic.
pub(super) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<f64>() {
        if !secs.is_finite() || secs < 0.0 {
            return None;
        }
        // Finite and non-negative, but it may still overflow a Duration.
        return Duration::try_from_secs_f64(secs).ok();
    }
    let at = httpdate::parse_http_date(value).ok()?;
    at.duration_since(now).ok()
}

#[async_trait]
impl ChatBackend for HttpBackend {
    async fn complete(
        &self,
        request: &ChatRequest,
        on_token: Option<OnToken>,
    ) -> Result<ChatResponse, ClientError> {
        self.call(request, on_token, None).await
    }

    async fn complete_limited(
        &self,
        request: &ChatRequest,
        on_token: Option<OnToken>,
        limit: &Semaphore,
    ) -> Result<ChatResponse, ClientError> {
        self.call(request, on_token, Some(limit)).await
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::{MockServer, Script};
    use serde_json::json;

    fn now() -> SystemTime {
        // A fixed instant (2024-01-01T00:00:00Z) so the date cases are exact.
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_704_067_200)
    }

    #[test]
    fn retry_after_accepts_delta_seconds_and_http_dates() {
        assert_eq!(
            parse_retry_after("120", now()),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after(" 1.5 ", now()),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(parse_retry_after("0", now()), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("Mon, 01 Jan 2024 00:00:42 GMT", now()),
            Some(Duration::from_secs(42))
        );
    }

    #[test]
    fn retry_after_rejects_nan_infinities_negatives_and_garbage() {
        for bad in [
            "nan",
            "NaN",
            "inf",
            "-inf",
            "infinity",
            "-1",
            "-0.5",
            "1e400",
            "soon",
            "",
            // A date already past is no advice either.
            "Sun, 31 Dec 2023 23:59:00 GMT",
        ] {
            assert_eq!(parse_retry_after(bad, now()), None, "{bad:?}");
        }
        // Finite but too large for a Duration: absent, not a panic.
        assert_eq!(parse_retry_after("1e300", now()), None);
    }

    #[test]
    fn retry_after_is_capped_at_backoff_max() {
        let mut settings = EndpointSettings::new("e", "http://127.0.0.1:1/v1");
        settings.backoff_max = Duration::from_secs(7);
        let backend = HttpBackend::new(settings).unwrap();
        let err = |after| ClientError::Status {
            url: "u".into(),
            status: 503,
            message: "m".into(),
            retry_after: Some(after),
        };
        assert_eq!(
            backend.delay_before(0, &err(Duration::from_secs(3600))),
            Duration::from_secs(7)
        );
        assert_eq!(
            backend.delay_before(0, &err(Duration::from_secs(2))),
            Duration::from_secs(2)
        );
    }

    #[tokio::test]
    async fn a_nan_retry_after_falls_back_to_backoff_and_the_call_completes() {
        let script = Script::parse(
            "mode: sequential\nreplies:\n  - {status: 503, error: busy, retry_after: \"nan\"}\n  - {content: done}\n",
            "t",
        )
        .unwrap();
        let server = MockServer::start(script).await.unwrap();
        let mut settings = EndpointSettings::new("mock", server.base_url());
        settings.max_retries = 1;
        settings.backoff_base = Duration::from_millis(1);
        let backend = HttpBackend::new(settings).unwrap();
        let reply = backend.complete(&request(), None).await.unwrap();
        assert_eq!(reply.message.content.as_deref(), Some("done"));
        assert_eq!(server.requests().len(), 2);
    }

    // A request; `complete` adds `stream: true` itself when given `on_token`.
    use crate::client::test_request as request;

    #[tokio::test]
    async fn a_reply_bigger_than_max_response_bytes_is_a_typed_error() {
        let big = "word ".repeat(2000);
        let raw = json!({"choices": [{"message": {"role": "assistant", "content": big}}]});
        let script = Script {
            queueing: None,
            mode: crate::mock::ScriptMode::ByTurn,
            replies: vec![crate::mock::ScriptedReply {
                raw_body: Some(raw.to_string()),
                ..Default::default()
            }],
        };
        let server = MockServer::start(script).await.unwrap();
        let mut settings = EndpointSettings::new("small", server.base_url());
        settings.max_response_bytes = 1024;
        let backend = HttpBackend::new(settings).unwrap();
        let err = backend.complete(&request(), None).await.unwrap_err();
        assert!(
            matches!(err, ClientError::TooLarge { limit: 1024, .. }),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains("`small`")
                && text.contains("1024")
                && text.contains("max_response_bytes"),
            "{text}"
        );
        assert!(!err.is_retryable());
    }

    #[tokio::test]
    async fn a_streamed_reply_bigger_than_max_response_bytes_is_a_typed_error() {
        let script = Script::parse(
            &format!("replies:\n  - content: \"{}\"\n", "word ".repeat(2000)),
            "t",
        )
        .unwrap();
        let server = MockServer::start(script).await.unwrap();
        let mut settings = EndpointSettings::new("small", server.base_url());
        settings.max_response_bytes = 1024;
        let backend = HttpBackend::new(settings).unwrap();
        let on_token: OnToken = std::sync::Arc::new(|_: &str| {});
        let err = backend
            .complete(&request(), Some(on_token.clone()))
            .await
            .unwrap_err();
        assert!(
            matches!(err, ClientError::TooLarge { limit: 1024, .. }),
            "{err:?}"
        );
        // Within the limit the same stream is fine.
        let mut settings = EndpointSettings::new("big", server.base_url());
        settings.max_response_bytes = 1024 * 1024;
        let backend = HttpBackend::new(settings).unwrap();
        let reply = backend.complete(&request(), Some(on_token)).await.unwrap();
        assert_eq!(reply.message.content.map(|c| c.len()), Some(10_000));
    }
}
