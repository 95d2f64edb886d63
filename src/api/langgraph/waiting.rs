//! A run's wait answered as LangGraph's server answers it: the headers at
//! once, then a `\n` every heartbeat while the run goes on, then its JSON.
//! LangGraph's Python client gives up on a silent response after 300 s;
//! JSON readers skip the whitespace before a value, so the clients read
//! the answer as if nothing came first. What goes wrong once the answer
//! has begun is told in it: `{"__error__": {"error", "message"}}`, as the
//! reference server does.

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::super::error::ApiError;

/// `answer`'s JSON once it is ready, kept alive every `heartbeat` until then.
pub(super) fn kept_alive(
    heartbeat: Duration,
    answer: impl Future<Output = Result<Value, ApiError>> + Send + 'static,
) -> Response {
    let answer = Box::pin(answer);
    let body = futures::stream::unfold(Some(answer), move |pending| async move {
        let mut answer = pending?;
        tokio::select! {
            value = &mut answer => {
                let value = value.unwrap_or_else(|e| {
                    json!({"__error__": {"error": e.code.name(), "message": e.message}})
                });
                let text = serde_json::to_vec(&value).unwrap_or_else(|_| b"null".to_vec());
                Some((Ok::<_, Infallible>(Bytes::from(text)), None))
            }
            () = tokio::time::sleep(heartbeat) => Some((Ok(Bytes::from_static(b"\n")), Some(answer))),
        }
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(body),
    )
        .into_response()
}
