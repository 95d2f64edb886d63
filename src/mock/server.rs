//! The mock OpenAI-compatible HTTP server: answers `/v1/chat/completions`
//! from a script, streams when asked, and records every request it received
//! (`GET /_mock/requests`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use super::queueing::{Queue, QueueLoad};
use super::{Script, ScriptPlayer};

struct MockState {
    player: ScriptPlayer,
    /// The queueing mode's queue, if the script asks for it.
    queue: Option<Queue>,
    record: bool,
    requests: Mutex<Vec<Value>>,
}

/// A running mock server.
pub struct MockServer {
    pub addr: SocketAddr,
    state: Arc<MockState>,
    shutdown: tokio_util::sync::CancellationToken,
}

impl MockServer {
    /// Starts on `127.0.0.1` with a random port.
    pub async fn start(script: Script) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        Self::start_on(listener, script, true).await
    }

    pub async fn start_on(
        listener: TcpListener,
        script: Script,
        record: bool,
    ) -> std::io::Result<Self> {
        let addr = listener.local_addr()?;
        let state = Arc::new(MockState {
            queue: script.queueing.clone().map(Queue::new),
            player: ScriptPlayer::new(script),
            record,
            requests: Mutex::new(Vec::new()),
        });
        let shutdown = tokio_util::sync::CancellationToken::new();
        let app = router(state.clone());
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await;
        });
        Ok(Self {
            addr,
            state,
            shutdown,
        })
    }

    /// `http://127.0.0.1:PORT/v1`
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The queueing mode's load (zeros without it).
    pub fn load(&self) -> QueueLoad {
        self.state
            .queue
            .as_ref()
            .map(Queue::load)
            .unwrap_or_default()
    }

    /// The request bodies received so far.
    pub fn requests(&self) -> Vec<Value> {
        self.state
            .requests
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn router(state: Arc<MockState>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route(
            "/v1/models",
            get(|| async {
                axum::Json(json!({"object": "list", "data": [{"id": "mock", "object": "model"}]}))
            }),
        )
        .route("/_mock/requests", get(recorded))
        .route("/_mock/load", get(queue_load))
        .route("/metrics", get(metrics_page))
        .with_state(state)
}

async fn recorded(State(state): State<Arc<MockState>>) -> axum::Json<Value> {
    axum::Json(Value::Array(
        state.requests.lock().map(|r| r.clone()).unwrap_or_default(),
    ))
}

async fn queue_load(State(state): State<Arc<MockState>>) -> axum::Json<QueueLoad> {
    axum::Json(state.queue.as_ref().map(Queue::load).unwrap_or_default())
}

/// vLLM's Prometheus page, in queueing mode; otherwise there is none.
async fn metrics_page(State(state): State<Arc<MockState>>) -> Response {
    match &state.queue {
        Some(queue) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            queue.metrics_page(),
        )
            .into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn chat(State(state): State<Arc<MockState>>, body: String) -> Response {
    let request: Value = match serde_json::from_str(&body) {
        Ok(v) => v,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                axum::Json(json!({"error": {"message": format!("invalid JSON: {e}")}})),
            )
                .into_response();
        }
    };
    if state.record
        && let Ok(mut log) = state.requests.lock()
    {
        log.push(request.clone());
    }
    // In queueing mode the request waits for a slot and is served, holding
    // the slot while the reply below is sent.
    let _served = match &state.queue {
        Some(queue) => {
            match queue.serve().await {
                Some(served) => Some(served),
                None => {
                    return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    axum::Json(json!({"error": {"message": "the server's queue is full", "code": 503}})),
                )
                    .into_response();
                }
            }
        }
        None => None,
    };
    let reply = state.player.next_reply(&request);
    if reply.delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(reply.delay_ms)).await;
    }
    if let Some(status) = reply.status {
        let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response =
            (code, axum::Json(json!({"error": {"message": reply.error.clone().unwrap_or_default(), "code": status}})))
                .into_response();
        // A raw value that is not a legal header (e.g. with a newline) is
        // left out rather than failing the reply.
        if let Some(after) = &reply.retry_after
            && let Ok(v) = header::HeaderValue::from_str(&after.header_value())
        {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
        return response;
    }
    if let Some(raw) = reply.raw_body {
        return ([(header::CONTENT_TYPE, "application/json")], raw).into_response();
    }
    let model = request
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("mock")
        .to_string();
    if request.get("stream").and_then(Value::as_bool) == Some(true) {
        return streamed(&reply, &model);
    }
    axum::Json(reply.completion_body(&model)).into_response()
}

/// `reply` as a chat-completions event stream, its chunks
/// `chunk_delay_ms` apart.
fn streamed(reply: &super::ScriptedReply, model: &str) -> Response {
    let frames: Vec<String> = reply
        .stream_chunks(model)
        .into_iter()
        .map(|chunk| format!("data: {chunk}\n\n"))
        .chain(std::iter::once("data: [DONE]\n\n".to_string()))
        .collect();
    let pause = Duration::from_millis(reply.chunk_delay_ms);
    let body =
        futures::stream::iter(frames.into_iter().enumerate()).then(move |(i, frame)| async move {
            if i > 0 && !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
            Ok::<_, std::convert::Infallible>(frame)
        });
    (
        [(header::CONTENT_TYPE, "text/event-stream")],
        Body::from_stream(body),
    )
        .into_response()
}

/// Runs the mock server until Ctrl-C (`structured-agents mock-server`).
pub async fn serve_mock(listen: SocketAddr, script: Script, record: bool) -> std::io::Result<()> {
    let listener = TcpListener::bind(listen).await?;
    let server = MockServer::start_on(listener, script, record).await?;
    println!("mock OpenAI-compatible server on {}", server.base_url());
    let _ = tokio::signal::ctrl_c().await;
    Ok(())
}
