//! A job's live feed: its durable events from the store (after a sequence
//! number, gap-free across restarts because it reads the store, not
//! memory), the model's tokens and the run's progress while the job runs in
//! this daemon (`events::live`), and the finished job at the end. The job's
//! SSE stream, the runtime API's streams and anything else that follows a
//! job read this one feed.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use tokio_util::sync::CancellationToken;

use crate::events::live::{Live, LiveHub, LiveSubscription, Progress, Token, Wants};
use crate::queue::{Job, JobId, JobQueue};

/// Events read from the store per query. Small: a page is held in memory
/// until the client has read it, per stream, and an event can be large (a
/// model response with its messages), so thousands of streams catching up
/// at once would otherwise hold thousands of large pages.
const PAGE: usize = 32;
/// Shortest wait for a notification before the store is read again (the
/// daemon sets `AppState::sse_recheck`: see `daemon::sse_recheck`).
pub const MIN_RECHECK: Duration = Duration::from_millis(500);

/// Where a feed reads a job from: the store, what runs in this daemon now,
/// and how long it waits for a notification before reading the store
/// anyway (notifications from other daemons can be missed while the LISTEN
/// connection is down).
#[derive(Clone)]
pub struct Source {
    pub queue: Arc<dyn JobQueue>,
    pub live: Arc<LiveHub>,
    pub recheck: Duration,
}

/// What a feed holds while it is open (a wire's stream permit, released
/// when the feed drops), and the token that ends it at once (the permit's
/// key revoked by a reload).
pub struct Hold<P> {
    pub held: P,
    pub revoked: CancellationToken,
}

/// One item of a job's feed.
pub enum Item {
    /// Ephemeral: never stored, so it has no sequence number.
    Token(Token),
    /// Ephemeral too: a step of the run as it happens.
    Progress(Arc<Progress>),
    /// A stored event (its JSON as stored).
    Event { seq: u64, json: String },
    /// The job finished; nothing follows.
    End(Box<Job>),
}

/// A job's feed, boxed: what a way in that answers by streaming holds.
pub type Feed = std::pin::Pin<Box<dyn Stream<Item = Item> + Send>>;

/// The feed of job `id` from the event after `after`. It ends after
/// [`Item::End`], or early when the store cannot be read. Live items
/// (tokens, [`Item::Progress`]) arrive as they happen, so before the stored
/// events of the same step; a feed that starts late (a reconnect) gets the
/// stored events first, then the live items from then on. With `calls`, the
/// job's tool calls also arrive live, as tokens with an event
/// ([`Token::event`]), before their stored events. Every feed keeps what
/// `hold` holds (a wire's stream permit: `server.max_event_streams`, in all
/// and per API key) until it is dropped, and ends when `hold.revoked` is
/// cancelled.
pub fn job_feed<P: Send + 'static>(
    source: Source,
    id: JobId,
    after: u64,
    calls: bool,
    hold: Hold<P>,
) -> impl Stream<Item = Item> {
    struct Cursor<P> {
        _held: P,
        source: Source,
        id: JobId,
        after: u64,
        pending: VecDeque<Item>,
        done: bool,
        /// Whether the store may hold events not yet sent.
        stale: bool,
        /// Whether the stored events up to now were sent (live items wait
        /// until then).
        caught_up: bool,
        updates: tokio::sync::broadcast::Receiver<JobId>,
        live: LiveSubscription,
    }
    impl<P> Cursor<P> {
        /// Queues the live items waiting; whether there were any.
        fn drain_live(&mut self) -> bool {
            let mut drained = false;
            while let Some(live) = self.live.try_next() {
                self.pending.push_back(live.into());
                drained = true;
            }
            drained
        }
    }
    let updates = source.queue.subscribe();
    let wants = Wants {
        calls,
        progress: true,
    };
    let live = source.live.subscribe(id.as_str(), wants);
    // A feed of a key revoked by a reload ends at once.
    let revoked = hold.revoked;
    let cursor = Cursor {
        _held: hold.held,
        source,
        id,
        after,
        pending: VecDeque::new(),
        done: false,
        stale: true,
        caught_up: false,
        updates,
        live,
    };
    let feed = futures::stream::unfold(cursor, |mut c| async move {
        loop {
            if let Some(item) = c.pending.pop_front() {
                return Some((item, c));
            }
            if c.done {
                return None;
            }
            // Once caught up, live items that arrived while the store was
            // read go first: they come before the durable events of their
            // step, and the feed must not end with some still waiting.
            if c.caught_up && c.drain_live() {
                continue;
            }
            if c.stale {
                let mut stored = VecDeque::new();
                let read = read_store(&mut stored, c.source.queue.as_ref(), &c.id, &mut c.after).await;
                // Live items published before the store was read go before
                // the events it found (they happened before those were
                // committed: a call starts before its step is stored) —
                // except while the feed catches up with what a client that
                // reconnected missed: those stored events go first.
                if c.caught_up {
                    c.drain_live();
                }
                let end = matches!(read, Read::End).then(|| stored.pop_back());
                c.pending.append(&mut stored);
                match read {
                    Read::Events => continue,
                    Read::End => {
                        // Every live item was published before the job ended.
                        c.drain_live();
                        c.pending.extend(end.flatten());
                        c.done = true;
                        continue;
                    }
                    Read::Nothing => {
                        c.caught_up = true;
                        c.stale = false;
                    }
                    Read::Failed => return None,
                }
            }
            // Wait for this job's next update or live item, or recheck periodically.
            let deadline = tokio::time::sleep(c.source.recheck.max(MIN_RECHECK));
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
                    Some(live) = c.live.next() => {
                        c.pending.push_back(live.into());
                        break;
                    }
                    _ = &mut deadline => {
                        c.stale = true;
                        break;
                    }
                }
            }
        }
    });
    futures::StreamExt::take_until(feed, revoked.cancelled_owned())
}

impl From<Live> for Item {
    fn from(live: Live) -> Self {
        match live {
            Live::Token(token) => Item::Token(token),
            Live::Progress(progress) => Item::Progress(progress),
        }
    }
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
    queue: &dyn JobQueue,
    id: &JobId,
    after: &mut u64,
) -> Read {
    // Read the job state before the events: if it is terminal, every
    // event was already stored, so an empty read means the end.
    let job = match queue.get(id).await {
        Ok(Some(job)) => job,
        Ok(None) | Err(_) => return Read::Failed,
    };
    let stored = match queue.events_after(id, *after, PAGE).await {
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
