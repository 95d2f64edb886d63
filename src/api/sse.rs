//! `GET /v1/jobs/{id}/events`: the job's durable event log as Server-Sent
//! Events. `id:` is the sequence number; `Last-Event-ID` (or `?after=N`)
//! resumes with no gap and no duplicate, also across daemon restarts, because
//! the stream reads the store, not memory. The stream ends with an `end`
//! event carrying the job's final state. While the job runs in this daemon,
//! the model's answer also arrives token by token as `token` events with no
//! `id:` (never stored, so resumption is unaffected).

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::json;
use std::convert::Infallible;

use super::AppState;
use super::auth::Caller;
use super::body::{Path, Query};
use super::error::{ApiError, ErrorCode};
use super::feed::{Item, job_feed};
use crate::events::tokens::Token;
use crate::queue::JobId;

#[derive(Debug, Deserialize)]
pub struct EventsQuery {
    pub after: Option<u64>,
}

pub async fn events(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(query): Query<EventsQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let id = JobId::from(id);
    caller.visible(&id, state.queue.get(&id).await?)?;
    let after = match headers.get("last-event-id").and_then(|v| v.to_str().ok()) {
        Some(text) => text.trim().parse::<u64>().map_err(|_| {
            ApiError::field(
                ErrorCode::InvalidRequest,
                "Last-Event-ID",
                format!("not a sequence number: {text:?}"),
            )
        })?,
        None => query.after.unwrap_or(0),
    };
    let heartbeat = state.sse_heartbeat;
    let stream = async_stream(state, id, after);
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(heartbeat).text("heartbeat")))
}

fn async_stream(
    state: AppState,
    id: JobId,
    after: u64,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    job_feed(state, id, after, false).map(|item| {
        Ok(match item {
            Item::Token(token) => token_event(&token),
            Item::Event { seq, json } => SseEvent::default()
                .id(seq.to_string())
                .event("event")
                .data(json),
            Item::End(job) => {
                let end = json!({"job_id": job.id, "state": job.state, "error": job.error, "result": job.result});
                SseEvent::default().event("end").data(end.to_string())
            }
        })
    })
}

/// A `token` event: ephemeral, with no `id:`, so resumption is unaffected.
fn token_event(token: &Token) -> SseEvent {
    let data = json!({"turn": token.turn, "run_id": token.run_id, "text": token.text});
    SseEvent::default().event("token").data(data.to_string())
}
