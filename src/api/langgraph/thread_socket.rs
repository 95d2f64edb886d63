//! A thread's stream over a WebSocket, the Agent Protocol's
//! `GET /threads/{id}/stream` with an upgrade (also `…/stream/events`,
//! where LangGraph's SDKs open it): the client sends the protocol's commands as text frames
//! and reads their answers and the events of its subscriptions on the same
//! socket. `subscription.subscribe` (`channels`, `namespaces`, `depth`, `since`, as
//! the SSE stream's body) follows the thread for what it keeps
//! (`thread_stream::ThreadFollow`, each subscription its own, holding one of
//! the key's stream permits) and answers its `subscription_id`;
//! `subscription.unsubscribe` ends one; every other command is answered as
//! `POST /threads/{id}/commands` answers it (`commands`). The thread need
//! not exist yet: a client opens its socket before the `run.start` that
//! makes it. The socket closes when its client closes it or goes. A plain
//! `GET` of `…/stream/events` is a 422 naming the upgrade it lacks (of
//! `…/stream`, it joins the thread: `thread_join`).

use std::collections::HashMap;

use aide::OperationInput;
use aide::generate::GenContext;
use aide::openapi::Operation;
use aide::transform::TransformOperation;
use axum::extract::ws::{Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::response::Response;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::super::AppState;
use super::super::auth::Caller;
use super::super::body::Path;
use super::super::document::answers;
use super::super::error::{ApiError, ErrorCode};
use super::super::trace_context::CallerTrace;
use super::commands::{StreamingCommand, answer, refused};
use super::thread_events::Filter;
use super::thread_stream::{EventStreamRequest, Protocol, ThreadFollow};

/// The largest command a client may send, in bytes.
const MAX_COMMAND_BYTES: usize = 1 << 20;
/// Frames waiting to be written before the subscriptions wait for the
/// client to read.
const OUTBOX: usize = 256;

/// The upgrade of a request to a WebSocket; a request that is not one is a
/// 422 naming the header it lacks.
pub struct SocketUpgrade(WebSocketUpgrade);

impl<S: Send + Sync> FromRequestParts<S> for SocketUpgrade {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        WebSocketUpgrade::from_request_parts(parts, state)
            .await
            .map(Self)
            .map_err(|rejection| {
                ApiError::field(
                    ErrorCode::InvalidRequest,
                    "upgrade",
                    format!(
                        "this is a thread's stream over a WebSocket ({rejection}): connect with `Upgrade: websocket`, or POST the same path for Server-Sent Events"
                    ),
                )
            })
    }
}

impl OperationInput for SocketUpgrade {
    fn operation_input(ctx: &mut GenContext, operation: &mut Operation) {
        WebSocketUpgrade::operation_input(ctx, operation);
    }
}

/// A request's upgrade to a WebSocket when it asks for one (an `Upgrade`
/// header), else none: a path that is a socket and a plain stream.
pub struct MaybeUpgrade(pub Option<WebSocketUpgrade>);

impl<S: Send + Sync> FromRequestParts<S> for MaybeUpgrade {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        if !parts.headers.contains_key(axum::http::header::UPGRADE) {
            return Ok(Self(None));
        }
        let SocketUpgrade(upgrade) = SocketUpgrade::from_request_parts(parts, state).await?;
        Ok(Self(Some(upgrade)))
    }
}

impl OperationInput for MaybeUpgrade {
    fn operation_input(ctx: &mut GenContext, operation: &mut Operation) {
        WebSocketUpgrade::operation_input(ctx, operation);
    }
}

/// A thread's socket in the API document.
pub(super) fn open_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("A thread's stream over a WebSocket: commands in, answers and events out")
        .description(
            "Text frames are the thread streaming protocol's commands \
             (`subscription.subscribe` with `channels`, `namespaces`, `depth`, `since`; \
             `subscription.unsubscribe` with `subscription_id`; and every command \
             `POST /threads/{id}/commands` takes), each answered on the socket by its id; \
             each subscription's events follow as text frames, as the SSE stream's.",
        );
    answers(
        op,
        &[(
            422,
            "Not a WebSocket upgrade (POST the path for Server-Sent Events)",
        )],
    )
}

/// `GET /threads/{thread_id}/stream/events` (and `…/stream` with an
/// upgrade: `thread_join`).
pub async fn open(
    State(state): State<AppState>,
    caller: Caller,
    trace: CallerTrace,
    Path(thread): Path<String>,
    SocketUpgrade(upgrade): SocketUpgrade,
) -> Response {
    serve(state, caller, trace, thread, upgrade)
}

/// The caller's socket on thread `thread`, once upgraded.
pub(super) fn serve(
    state: AppState,
    caller: Caller,
    trace: CallerTrace,
    thread: String,
    upgrade: WebSocketUpgrade,
) -> Response {
    upgrade
        .max_message_size(MAX_COMMAND_BYTES)
        .on_upgrade(move |socket| {
            Socket {
                state,
                caller,
                trace,
                thread,
                subscriptions: HashMap::new(),
                made: 0,
            }
            .run(socket)
        })
}

/// One client's socket on one thread.
struct Socket {
    state: AppState,
    caller: Caller,
    trace: CallerTrace,
    thread: String,
    /// Each subscription's follower, by its id.
    subscriptions: HashMap<String, JoinHandle<()>>,
    made: u64,
}

impl Socket {
    async fn run(mut self, socket: WebSocket) {
        let (mut sink, mut inbox) = socket.split();
        let (outbox, mut sending) = mpsc::channel::<Value>(OUTBOX);
        let writer = tokio::spawn(async move {
            while let Some(frame) = sending.recv().await {
                let text = Utf8Bytes::from(frame.to_string());
                if sink.send(Message::Text(text)).await.is_err() {
                    return;
                }
            }
            let _ = sink.close().await;
        });
        while let Some(Ok(message)) = inbox.next().await {
            let text = match message {
                Message::Text(text) => text.to_string(),
                Message::Binary(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                Message::Close(_) => break,
                Message::Ping(_) | Message::Pong(_) => continue,
            };
            let answered = self.command(&text, &outbox).await;
            if outbox.send(answered).await.is_err() {
                break;
            }
        }
        for (_, follower) in self.subscriptions.drain() {
            follower.abort();
        }
        drop(outbox);
        let _ = writer.await;
    }

    /// The answer to one frame of the client's.
    async fn command(&mut self, text: &str, outbox: &mpsc::Sender<Value>) -> Value {
        let command: StreamingCommand = match serde_json::from_str(text) {
            Ok(command) => command,
            Err(e) => {
                let id = serde_json::from_str::<Value>(text)
                    .ok()
                    .and_then(|v| v.get("id").cloned())
                    .unwrap_or(Value::Null);
                return json!({
                    "type": "error", "id": id, "error": "invalid_argument",
                    "message": format!("a frame is a command `{{\"id\", \"method\", \"params\"}}`: {e}"),
                });
            }
        };
        let id = json!(command.id);
        match command.method.as_str() {
            "subscription.subscribe" => match self.subscribe(&command, outbox) {
                Ok(subscription) => json!({
                    "type": "success", "id": id, "result": {"subscription_id": subscription},
                }),
                Err(e) => refused(&id, &e),
            },
            "subscription.unsubscribe" => {
                let wanted = command
                    .params
                    .get("subscription_id")
                    .and_then(Value::as_str);
                match wanted.and_then(|s| self.subscriptions.remove(s)) {
                    Some(follower) => {
                        follower.abort();
                        json!({"type": "success", "id": id, "result": {}})
                    }
                    None => json!({
                        "type": "error", "id": id, "error": "no_such_subscription",
                        "message": format!("this socket has no subscription {wanted:?}"),
                    }),
                }
            }
            _ => answer(
                &self.state,
                &self.caller,
                &self.trace,
                &self.thread,
                &command,
            )
            .await
            .unwrap_or_else(|e| refused(&id, &e)),
        }
    }

    /// A subscription: a follower of the thread sending what its filter
    /// keeps to the socket.
    fn subscribe(
        &mut self,
        command: &StreamingCommand,
        outbox: &mpsc::Sender<Value>,
    ) -> Result<String, ApiError> {
        let request: EventStreamRequest =
            serde_json::from_value(Value::Object(command.params.clone())).map_err(|e| {
                ApiError::field(
                    ErrorCode::InvalidRequest,
                    "params",
                    format!("subscription.subscribe's params: {e}"),
                )
            })?;
        let filter = Filter::read(
            &request.channels,
            request.namespaces.as_deref(),
            request.depth,
            request.since,
        )?;
        let mut follow = ThreadFollow::new(
            &self.state,
            self.caller.clone(),
            self.thread.clone(),
            Protocol(filter),
        )?;
        self.made += 1;
        let id = format!("sub-{}", self.made);
        let outbox = outbox.clone();
        let follower = tokio::spawn(async move {
            while let Some(batch) = follow.next_batch().await {
                for told in batch {
                    if outbox.send(told.json()).await.is_err() {
                        return;
                    }
                }
            }
        });
        self.subscriptions.insert(id.clone(), follower);
        Ok(id)
    }
}
