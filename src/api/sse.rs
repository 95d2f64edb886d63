//! `GET /v1/jobs/{id}/events`: the job's durable event log as Server-Sent
//! Events. `id:` is the sequence number; `Last-Event-ID` (or `?after=N`)
//! resumes with no gap and no duplicate, also across daemon restarts, because
//! the stream reads the store, not memory. The stream ends with an `end`
//! event carrying the job's final state.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::Stream;
use serde::Deserialize;
use serde_json::json;

use super::AppState;
use super::error::{ApiError, ErrorCode};
use super::jobs::not_found;
use crate::queue::JobId;

#[derive(Debug, Deserialize)]
pub struct EventsQuery {
    pub after: Option<u64>,
}

/// Events read from the store per query.
const PAGE: usize = 256;
/// Shortest wait for a notification before the store is read again (the
/// daemon sets `AppState::sse_recheck` to this or `queue.poll_interval`,
/// whichever is longer).
pub const MIN_RECHECK: Duration = Duration::from_millis(500);

pub async fn events(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<EventsQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let id = JobId::from(id);
    if state.queue.get(&id).await?.is_none() {
        return Err(not_found(&id));
    }
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
    struct Cursor {
        state: AppState,
        id: JobId,
        after: u64,
        pending: std::collections::VecDeque<SseEvent>,
        done: bool,
        updates: tokio::sync::broadcast::Receiver<JobId>,
    }
    let updates = state.queue.subscribe();
    let cursor = Cursor {
        state,
        id,
        after,
        pending: Default::default(),
        done: false,
        updates,
    };
    futures::stream::unfold(cursor, |mut c| async move {
        loop {
            if let Some(event) = c.pending.pop_front() {
                return Some((Ok(event), c));
            }
            if c.done {
                return None;
            }
            // Read the job state before the events: if it is terminal, every
            // event was already stored, so an empty read means the end.
            let job = match c.state.queue.get(&c.id).await {
                Ok(Some(job)) => job,
                Ok(None) | Err(_) => return None,
            };
            let stored = match c.state.queue.events_after(&c.id, c.after, PAGE).await {
                Ok(e) => e,
                Err(err) => {
                    tracing::warn!(job_id = %c.id, error = %err, "cannot read event log for SSE");
                    return None;
                }
            };
            if !stored.is_empty() {
                for event in stored {
                    c.after = event.seq;
                    c.pending.push_back(
                        SseEvent::default()
                            .id(event.seq.to_string())
                            .event("event")
                            .data(event.event_json),
                    );
                }
                continue;
            }
            if job.state.is_terminal() {
                let end = json!({"job_id": c.id, "state": job.state, "error": job.error, "result": job.result});
                c.pending
                    .push_back(SseEvent::default().event("end").data(end.to_string()));
                c.done = true;
                continue;
            }
            // Wait for this job's next update, or recheck periodically.
            let deadline = tokio::time::sleep(c.state.sse_recheck.max(MIN_RECHECK));
            tokio::pin!(deadline);
            loop {
                tokio::select! {
                    update = c.updates.recv() => match update {
                        Ok(job_id) if job_id == c.id => break,
                        Ok(_) => continue,
                        Err(_) => break,
                    },
                    _ = &mut deadline => break,
                }
            }
        }
    })
}
