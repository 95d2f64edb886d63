//! The API's accept loop: every connection is bounded in number and in time,
//! so idle sockets, slow headers and partial bodies cannot take the daemon
//! from everyone else.
//!
//! - At most `server.max_connections` connections are served at once. One
//!   past the cap is answered `503` with `Retry-After` and closed (a small
//!   pool of such answers runs at a time; beyond it a connection is closed
//!   unanswered), so a client learns to come back instead of hanging.
//! - A request's headers must be complete within `server.header_timeout` of
//!   the daemon starting to wait for them (the accept, or the end of the
//!   previous answer on a kept-alive connection).
//! - A kept-alive connection with no request in progress for
//!   `server.idle_timeout` is closed (a new one is under `header_timeout`
//!   until its first request; hyper runs that clock between requests too,
//!   so the idle limit in effect is the smaller of the two).
//! - A request body must arrive whole within `server.body_timeout`
//!   ([`body_deadline`], a middleware of the router): `408` otherwise.
//!
//! This module knows hyper and the router it is given, nothing of jobs.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use super::error::{ApiError, ErrorCode};

/// Over-cap connections answered 503 at once at most; past that they are
/// closed without an answer (each answer holds a socket for a moment).
const REFUSALS: usize = 64;
/// How long an over-cap connection gets to send its request head before
/// it is closed without its 503.
const REFUSAL_HEADER_TIMEOUT: Duration = Duration::from_secs(1);
/// The largest buffer a connection may grow (the request head, and what
/// waits to be written): the default is 400 KiB, which thousands of open
/// event streams could each hold.
const MAX_BUF: usize = 64 * 1024;
/// How long the loop pauses when `accept` fails for lack of file
/// descriptors or memory (retrying at once would spin).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The connection settings of `[server]`.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
}

/// Serves `app` on `listener` until `stop`, then lets every connection
/// finish its current request (answers already streaming are cut when
/// `stop` is followed by the caller dropping this future).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    stop: CancellationToken,
) {
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let refusing = Arc::new(Semaphore::new(REFUSALS));
    let at_cap = Arc::new(AtomicBool::new(false));
    loop {
        let (stream, _peer) = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    accept_failed(&e).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        match open.clone().try_acquire_owned() {
            Ok(slot) => {
                at_cap.store(false, Ordering::Relaxed);
                tokio::spawn(connection(stream, app.clone(), limits, slot, stop.clone()));
            }
            Err(_) => {
                if !at_cap.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        max_connections = limits.max_connections,
                        "connection cap reached: new connections are answered 503 until some close (server.max_connections)"
                    );
                }
                if let Ok(turn) = refusing.clone().try_acquire_owned() {
                    tokio::spawn(refuse(stream, turn));
                }
            }
        }
    }
    // Every connection gives its slot back when it ends.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let _ = open.acquire_many(all).await;
}

/// Errors of `accept` that concern one connection are skipped; running out
/// of descriptors or memory pauses the loop briefly.
async fn accept_failed(e: &std::io::Error) {
    use std::io::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset | ErrorKind::Interrupted
    ) {
        return;
    }
    tracing::warn!(error = %e, "cannot accept a connection (raise LimitNOFILE, or lower server.max_connections); pausing accepts briefly");
    tokio::time::sleep(ACCEPT_BACKOFF).await;
}

/// Serves one connection until it closes, idles out or the daemon stops.
async fn connection(
    stream: TcpStream,
    app: Router,
    limits: ConnectionLimits,
    _slot: OwnedSemaphorePermit,
    stop: CancellationToken,
) {
    let activity = Arc::new(Activity::default());
    let service = {
        let activity = activity.clone();
        hyper::service::service_fn(move |request: Request<Incoming>| {
            let busy = Busy::start(activity.clone());
            let app = app.clone();
            async move {
                let response = app.oneshot(request.map(Body::new)).await?;
                // The connection is busy until the answer's body ends
                // (an event stream's, much later than its headers).
                Ok::<_, Infallible>(response.map(|body| Body::new(Tracked { body, _busy: busy })))
            }
        })
    };
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(MAX_BUF);
    // With upgrades: a thread's event stream may be a WebSocket (the
    // connection hands its socket over, and ends here).
    let conn = builder
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        () = activity.idle_for(limits.idle_timeout) => {}
        () = stop.cancelled() => {}
    }
    // Closes at once when idle, else after the request in progress.
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}

/// Answers a connection past the cap with a 503 and closes it.
async fn refuse(stream: TcpStream, _turn: OwnedSemaphorePermit) {
    let service = hyper::service::service_fn(|_request: Request<Incoming>| async {
        let refusal = ApiError::new(
            ErrorCode::Unavailable,
            "the daemon has as many connections open as server.max_connections allows; try again after Retry-After seconds",
        );
        let mut response = refusal.into_response();
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        Ok::<_, Infallible>(response)
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(REFUSAL_HEADER_TIMEOUT)
        .keep_alive(false);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    let _ = tokio::time::timeout(2 * REFUSAL_HEADER_TIMEOUT, conn).await;
}

/// Requests in progress on one connection, so it can tell when it idles.
#[derive(Default)]
struct Activity {
    busy: AtomicUsize,
    /// Told at every start and end of a request (one waiter: the connection).
    changed: Notify,
}

impl Activity {
    /// Resolves once no request has been in progress for `idle`.
    async fn idle_for(&self, idle: Duration) {
        loop {
            if self.busy.load(Ordering::SeqCst) == 0 {
                tokio::select! {
                    () = tokio::time::sleep(idle) => {
                        if self.busy.load(Ordering::SeqCst) == 0 {
                            return;
                        }
                    }
                    () = self.changed.notified() => {}
                }
            } else {
                self.changed.notified().await;
            }
        }
    }
}

/// One request in progress; ends when dropped.
struct Busy(Arc<Activity>);

impl Busy {
    fn start(activity: Arc<Activity>) -> Self {
        activity.busy.fetch_add(1, Ordering::SeqCst);
        // `notify_one` keeps a permit when nobody waits: no start is missed.
        activity.changed.notify_one();
        Self(activity)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
        self.0.changed.notify_one();
    }
}

/// An answer's body that keeps its request counted as in progress.
struct Tracked {
    body: Body,
    _busy: Busy,
}

impl http_body::Body for Tracked {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The request body settings of `[server]`, for [`body_deadline`].
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    pub timeout: Duration,
    pub max_bytes: usize,
}

/// Reads a request's whole body within `server.body_timeout` (and
/// `server.max_body_bytes`) before any handler sees it: a client that
/// stops sending halfway gets a 408 and its connection closed, instead of
/// holding a task and a connection for as long as it likes.
pub async fn body_deadline(
    State(limits): State<BodyLimits>,
    request: Request,
    next: Next,
) -> Response {
    use http_body::Body as _;
    if request.body().is_end_stream() {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let limited = http_body_util::Limited::new(body, limits.max_bytes);
    let read = http_body_util::BodyExt::collect(limited);
    match tokio::time::timeout(limits.timeout, read).await {
        Ok(Ok(collected)) => {
            let body = Body::from(collected.to_bytes());
            next.run(Request::from_parts(parts, body)).await
        }
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => ApiError::new(
            ErrorCode::PayloadTooLarge,
            "request body exceeds server.max_body_bytes",
        )
        .into_response(),
        Ok(Err(e)) => ApiError::new(
            ErrorCode::InvalidRequest,
            format!("cannot read the request body: {e}"),
        )
        .into_response(),
        Err(_) => {
            let mut response = ApiError::new(
                ErrorCode::RequestTimeout,
                format!(
                    "the request body did not arrive within {} (server.body_timeout); send it whole, or ask the operator to raise the limit",
                    humantime::format_duration(limits.timeout)
                ),
            )
            .into_response();
            // The rest of the body may still come: do not read it as the
            // next request.
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_connection_idles_out_only_with_no_request_in_progress() {
        let activity = Arc::new(Activity::default());
        let busy = Busy::start(activity.clone());
        let idle = activity.idle_for(Duration::from_millis(10));
        tokio::pin!(idle);
        // A request in progress for many times the idle time keeps it.
        tokio::select! {
            () = &mut idle => panic!("idled out with a request in progress"),
            () = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
        drop(busy);
        idle.await;
    }
}
