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
        phase: Phase::Replay,
        updates,
        live,
    };
    let feed = futures::stream::unfold(cursor, |mut c| async move {
        loop {
            if let Some(item) = c.pending.pop_front() {
                return Some((item, c));
            }
            let phase = c.phase;
            match phase {
                Phase::Ended => return None,
                Phase::Replay => c.read().await?,
                // Once caught up, live items that arrived while the store
                // was read go first: they come before the durable events of
                // their step, and the feed must not end with some still
                // waiting.
                Phase::Behind | Phase::Current if c.drain_live() => {}
                Phase::Behind => c.read().await?,
                Phase::Current => c.wait().await,
            }
        }
    });
    futures::StreamExt::take_until(feed, revoked.cancelled_owned())
}

/// Where a feed stands. It replays the stored events first, then follows
/// the job live (reading the store again whenever it may hold more), then
/// ends; each phase is entered only from the one before it or from
/// following live, so the order of a feed's items is this type's.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    /// Sending the stored events up to now (a reconnecting client catching
    /// up on what it missed): live items wait until they are all sent.
    Replay,
    /// Following live, and the store may hold events not yet sent: read it.
    Behind,
    /// Following live, and every stored event was sent: wait for the job's
    /// next update or live item.
    Current,
    /// The job's end is queued; nothing follows it.
    Ended,
}

/// One feed's state between the items it yields.
struct Cursor<P> {
    /// What the wire handed the feed to keep while it is open.
    _held: P,
    source: Source,
    id: JobId,
    /// The sequence number of the last stored event queued.
    after: u64,
    pending: VecDeque<Item>,
    phase: Phase,
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

    /// Reads the store once (in [`Phase::Replay`] or [`Phase::Behind`]) and
    /// moves on by what it found; `None` when it cannot be read, which ends
    /// the feed.
    async fn read(&mut self) -> Option<()> {
        let mut stored = VecDeque::new();
        let read = read_store(
            &mut stored,
            self.source.queue.as_ref(),
            &self.id,
            &mut self.after,
        )
        .await;
        // Live items published before the store was read go before the
        // events it found (they happened before those were committed: a
        // call starts before its step is stored) — except while the feed
        // replays what a client that reconnected missed: those stored
        // events go first.
        if self.phase == Phase::Behind {
            self.drain_live();
        }
        let end = matches!(read, Read::End).then(|| stored.pop_back());
        self.pending.append(&mut stored);
        match read {
            // More may follow: read again (in the same phase) once these
            // are sent.
            Read::Events => {}
            Read::End => {
                // Every live item was published before the job ended.
                self.drain_live();
                self.pending.extend(end.flatten());
                self.phase = Phase::Ended;
            }
            Read::Nothing => self.phase = Phase::Current,
            Read::Failed => return None,
        }
        Some(())
    }

    /// In [`Phase::Current`]: waits for this job's next update or live
    /// item, or for the recheck (a notification can be lost); anything but
    /// a live item puts the feed [`Phase::Behind`].
    async fn wait(&mut self) {
        let deadline = tokio::time::sleep(self.source.recheck.max(MIN_RECHECK));
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                update = self.updates.recv() => match update {
                    Ok(job_id) if job_id == self.id => break,
                    Ok(_) => continue,
                    // Lagged or closed: what was missed may be this job's.
                    Err(_) => break,
                },
                Some(live) = self.live.next() => {
                    self.pending.push_back(live.into());
                    return;
                }
                _ = &mut deadline => break,
            }
        }
        self.phase = Phase::Behind;
    }
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
