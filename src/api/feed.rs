//! A job's live feed: its durable events from the store (after a sequence
//! number, gap-free across restarts because it reads the store, not
//! memory), the model's tokens while the job runs in this daemon, and the
//! finished job at the end. The job's SSE stream, the runtime API's streams
//! and anything else that follows a job read this one feed.

use std::collections::VecDeque;

use futures::Stream;

use super::AppState;
use crate::events::tokens::{Token, TokenSubscription};
use crate::queue::{Job, JobId};

/// Events read from the store per query. Small: a page is held in memory
/// until the client has read it, per stream, and an event can be large (a
/// model response with its messages), so thousands of streams catching up
/// at once would otherwise hold thousands of large pages.
const PAGE: usize = 32;
/// Shortest wait for a notification before the store is read again (the
/// daemon sets `AppState::sse_recheck`: see `daemon::sse_recheck`).
pub const MIN_RECHECK: std::time::Duration = std::time::Duration::from_millis(500);

/// One item of a job's feed.
pub enum Item {
    /// Ephemeral: never stored, so it has no sequence number.
    Token(Token),
    /// A stored event (its JSON as stored).
    Event { seq: u64, json: String },
    /// The job finished; nothing follows.
    End(Box<Job>),
}

/// The feed of job `id` from the event after `after`. It ends after
/// [`Item::End`], or early when the store cannot be read. With `calls`, the
/// job's tool calls also arrive live, as tokens with an event
/// ([`Token::event`]), before their stored events. Every feed holds one of
/// the daemon's stream permits (`server.max_event_streams`, in all and per
/// API key) until it is dropped.
pub fn job_feed(
    state: AppState,
    id: JobId,
    after: u64,
    calls: bool,
    permit: super::limits::StreamPermit,
) -> impl Stream<Item = Item> {
    struct Cursor {
        _permit: super::limits::StreamPermit,
        state: AppState,
        id: JobId,
        after: u64,
        pending: VecDeque<Item>,
        done: bool,
        /// Whether the store may hold events not yet sent.
        stale: bool,
        updates: tokio::sync::broadcast::Receiver<JobId>,
        tokens: TokenSubscription,
    }
    let updates = state.queue.subscribe();
    let tokens = if calls {
        state.tokens.subscribe_with_calls(id.as_str())
    } else {
        state.tokens.subscribe(id.as_str())
    };
    let cursor = Cursor {
        _permit: permit,
        state,
        id,
        after,
        pending: VecDeque::new(),
        done: false,
        stale: true,
        updates,
        tokens,
    };
    futures::stream::unfold(cursor, |mut c| async move {
        loop {
            if let Some(item) = c.pending.pop_front() {
                return Some((item, c));
            }
            if c.done {
                return None;
            }
            // Tokens that arrived while the store was read go first: they
            // come before the durable events that the model call ends with,
            // and the feed must not end with some still waiting.
            let mut drained = false;
            while let Some(token) = c.tokens.try_next() {
                c.pending.push_back(Item::Token(token));
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
                        // send what is still waiting before the end.
                        let end = c.pending.pop_back();
                        while let Some(token) = c.tokens.try_next() {
                            c.pending.push_back(Item::Token(token));
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
                        c.pending.push_back(Item::Token(token));
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

/// The frame a stream sends when the job parks for a decision (at any
/// depth of nesting): which job and call, what the call would do, and where
/// to decide. `None` for any other stored event.
pub fn approval_required(job_id: &str, event_json: &str) -> Option<serde_json::Value> {
    let event: serde_json::Value = serde_json::from_str(event_json).ok()?;
    if event["type"] != "ApprovalRequested" {
        return None;
    }
    let call = event["call_id"].as_str()?;
    // The parked call's names (docs/api.md): `call_id`, `tool`.
    Some(serde_json::json!({
        "job_id": job_id,
        "kind": "approval",
        "turn": event["turn"],
        "call_id": call,
        "tool": event["tool_name"],
        "arguments": event["arguments"],
        "digest": event["digest"],
        "decide": format!("POST /v1/jobs/{job_id}/approvals/{call}"),
    }))
}

/// What one read of the store found.
enum Read {
    Events,
    End,
    Nothing,
    Failed,
}

/// Queues the job's stored events after `after` (or its end when it is
/// finished and nothing is left).
async fn read_store(
    pending: &mut VecDeque<Item>,
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
            tracing::warn!(job_id = %id, error = %err, "cannot read the event log for a job's feed");
            return Read::Failed;
        }
    };
    if !stored.is_empty() {
        for event in stored {
            *after = event.seq;
            pending.push_back(Item::Event {
                seq: event.seq,
                json: event.event_json,
            });
        }
        return Read::Events;
    }
    if job.state.is_terminal() {
        pending.push_back(Item::End(Box::new(job)));
        return Read::End;
    }
    Read::Nothing
}
