//! `GET /v1/jobs/{id}/events`: the job's durable event log as Server-Sent
//! Events. `id:` is the sequence number; `Last-Event-ID` (or `?after=N`)
//! resumes with no gap and no duplicate, also across daemon restarts, because
//! the stream reads the store, not memory. The stream ends with an `end`
//! event carrying the job's final state. While the job runs in this daemon,
//! the model's answer also arrives token by token as `token` events with no
//! `id:` (never stored, so resumption is unaffected).

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
use crate::events::tokens::{Token, TokenSubscription};
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
        /// Whether the store may hold events not yet sent.
        stale: bool,
        updates: tokio::sync::broadcast::Receiver<JobId>,
        tokens: TokenSubscription,
    }
    let updates = state.queue.subscribe();
    let tokens = state.tokens.subscribe(id.as_str());
    let cursor = Cursor {
        state,
        id,
        after,
        pending: Default::default(),
        done: false,
        stale: true,
        updates,
        tokens,
    };
    futures::stream::unfold(cursor, |mut c| async move {
        loop {
            if let Some(event) = c.pending.pop_front() {
                return Some((Ok(event), c));
            }
            if c.done {
                return None;
            }
            // Tokens that arrived while the store was read go first: they
            // come before the durable events that the model call ends with,
            // and the stream must not end with some still waiting.
            let mut drained = false;
            while let Some(token) = c.tokens.try_next() {
                c.pending.push_back(token_event(&token));
                drained = true;
            }
            if drained {
                continue;
            }
            if c.stale {
                match read_store(&mut c.pending, &c.state, &c.id, &mut c.after).await {
                    Read::Events => continue,
                    Read::End => {
                        // Every token was published before the job ended:
                        // send what is still waiting before `end`.
                        let end = c.pending.pop_back();
                        while let Some(token) = c.tokens.try_next() {
                            c.pending.push_back(token_event(&token));
                        }
                        c.pending.extend(end);
                        c.done = true;
                        continue;
                    }
                    Read::Nothing => c.stale = false,
                    Read::Failed => return None,
                }
            }
            // Wait for this job's next update or token, or recheck periodically.
            let deadline = tokio::time::sleep(c.state.sse_recheck.max(MIN_RECHECK));
            tokio::pin!(deadline);
            loop {
                tokio::select! {
                    update = c.updates.recv() => match update {
                        Ok(job_id) if job_id == c.id => {
                            c.stale = true;
                            break;
                        }
                        Ok(_) => continue,
                        Err(_) => {
                            c.stale = true;
                            break;
                        }
                    },
                    Some(token) = c.tokens.next() => {
                        c.pending.push_back(token_event(&token));
                        break;
                    }
                    _ = &mut deadline => {
                        c.stale = true;
                        break;
                    }
                }
            }
        }
    })
}

/// A `token` event: ephemeral, with no `id:`, so resumption is unaffected.
fn token_event(token: &Token) -> SseEvent {
    let data = json!({"turn": token.turn, "run_id": token.run_id, "text": token.text});
    SseEvent::default().event("token").data(data.to_string())
}

/// What one read of the store found.
enum Read {
    Events,
    End,
    Nothing,
    Failed,
}

/// Queues the job's stored events after `after` (or its `end` event when it
/// is finished and nothing is left).
async fn read_store(
    pending: &mut std::collections::VecDeque<SseEvent>,
    state: &AppState,
    id: &JobId,
    after: &mut u64,
) -> Read {
    // Read the job state before the events: if it is terminal, every
    // event was already stored, so an empty read means the end.
    let job = match state.queue.get(id).await {
        Ok(Some(job)) => job,
        Ok(None) | Err(_) => return Read::Failed,
    };
    let stored = match state.queue.events_after(id, *after, PAGE).await {
        Ok(e) => e,
        Err(err) => {
            tracing::warn!(job_id = %id, error = %err, "cannot read event log for SSE");
            return Read::Failed;
        }
    };
    if !stored.is_empty() {
        for event in stored {
            *after = event.seq;
            pending.push_back(
                SseEvent::default()
                    .id(event.seq.to_string())
                    .event("event")
                    .data(event.event_json),
            );
        }
        return Read::Events;
    }
    if job.state.is_terminal() {
        let end =
            json!({"job_id": id, "state": job.state, "error": job.error, "result": job.result});
        pending.push_back(SseEvent::default().event("end").data(end.to_string()));
        return Read::End;
    }
    Read::Nothing
}
