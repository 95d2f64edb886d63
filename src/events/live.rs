//! What a job does right now, for whoever is watching it (SSE clients,
//! `/v1/chat/completions` with `stream: true`, the runtime API): the
//! model's answer token by token ([`Token`]) and the run's progress — a
//! model or tool call starting and ending, a wait beginning and ending
//! ([`Progress`]). Live items are ephemeral: never stored, never numbered,
//! so the durable event log and `Last-Event-ID` resumption are unaffected,
//! and no stored event depends on them. Tokens are published only while
//! someone listens ([`LiveObserver::wants_tokens`] is asked each time), so
//! unwatched jobs pay nothing for them. Progress is always published (a
//! few items per call): the hub keeps the calls in progress, so a client
//! that connects, or reconnects, in the middle of a call is told of it
//! first ([`LiveHub::subscribe`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::broadcast;

use super::{EventEnvelope, Observer, ObserverError, TokenDelta};

/// Items a slow listener may fall behind by before it loses some (it is
/// told how many, and the durable events still arrive complete).
const BUFFER: usize = 1024;

/// One streamed piece of a job's answer.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[schemars(rename = "AnswerToken")]
pub struct Token {
    /// The run that produced it: the job id, or `<job>/<…>` for nested runs.
    pub run_id: String,
    pub turn: u32,
    pub text: String,
    /// Instead of text: a tool call of the job's own run starting or ending,
    /// as it happens (the stored event can come later, after the next
    /// durable write), for listeners that interleave calls with the answer
    /// (the runtime API's streams). Only subscriptions that ask get these.
    #[serde(skip)]
    pub event: Option<Arc<EventEnvelope>>,
}

/// A step of a run as it happens (the `progress` frame of a job's event
/// stream): `{"run_id", "turn", "at", "kind", …}`.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Progress {
    /// The job id, or `<job>/<…>` for nested runs.
    pub run_id: String,
    pub turn: u32,
    /// RFC 3339 UTC with milliseconds.
    pub at: String,
    #[serde(flatten)]
    pub kind: ProgressKind,
}

/// What is happening.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ProgressKind {
    /// A request goes to the model; `attempt` counts the tries of this one
    /// call (from 1: the client retries a failed one after a backoff).
    ModelCallStarted {
        model: String,
        messages: usize,
        attempt: u32,
    },
    ModelCallEnded {
        ok: bool,
        error: Option<String>,
    },
    /// A tool starts running (after its admission: budget, approval).
    ToolCallStarted {
        call_id: String,
        tool: String,
        /// Cut to [`ARGUMENTS_CAP`] characters of JSON when larger.
        arguments: Value,
    },
    /// A tool call ends, with what its stored `ToolResult` will say (that
    /// event is stored only with the run's next durable write, seconds
    /// later when the next model call is slow), so a watcher can show the
    /// result at once.
    ToolCallEnded {
        call_id: String,
        tool: String,
        ok: bool,
        /// The tool's output, cut to [`super::OUTPUT_PREVIEW`] characters
        /// and marked `…` when longer (as the `ToolResult` event's
        /// `output_preview`).
        output: String,
        duration_ms: u64,
        /// As the `ToolResult` event's `error_type` (`interrupted` for a
        /// call the job's cancel or deadline cut short).
        error_type: Option<String>,
    },
    /// The run waits: for a person's approval, a backoff or a free slot
    /// of the model's endpoint.
    Waiting {
        #[serde(rename = "for")]
        waiting_for: WaitFor,
        /// When the wait ends at the latest, if known (RFC 3339).
        until: Option<String>,
        call_id: Option<String>,
        tool: Option<String>,
    },
    WaitingEnded {
        #[serde(rename = "for")]
        waiting_for: WaitFor,
    },
}

/// What a run waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WaitFor {
    Approval,
    Backoff,
    ModelSlot,
}

impl ProgressKind {
    /// A wait for `waiting_for` with nothing more known.
    pub fn waiting(waiting_for: WaitFor, until: Option<String>) -> Self {
        ProgressKind::Waiting {
            waiting_for,
            until,
            call_id: None,
            tool: None,
        }
    }
}

/// The largest `arguments` a `tool_call_started` carries, in characters of
/// JSON; larger ones arrive as a string cut at this length (the stored
/// `ToolCall` event has them whole).
pub const ARGUMENTS_CAP: usize = 2000;

/// `arguments` as a progress frame carries them.
pub fn capped_arguments(arguments: &Value) -> Value {
    let text = arguments.to_string();
    if text.chars().count() <= ARGUMENTS_CAP {
        return arguments.clone();
    }
    Value::String(super::preview(&text, ARGUMENTS_CAP))
}

/// One live item of a job.
#[derive(Debug, Clone)]
pub enum Live {
    Token(Token),
    Progress(Arc<Progress>),
}

/// Which live items a subscription wants besides the answer's tokens.
#[derive(Debug, Clone, Copy, Default)]
pub struct Wants {
    /// The job's own tool calls as they start and end ([`Token::event`]).
    pub calls: bool,
    /// The run's [`Progress`].
    pub progress: bool,
}

impl Wants {
    fn takes(&self, item: &Live) -> bool {
        match item {
            Live::Token(token) => token.event.is_none() || self.calls,
            Live::Progress(_) => self.progress,
        }
    }
}

/// Live streams by job id.
#[derive(Default)]
pub struct LiveHub {
    streams: Mutex<Streams>,
}

/// The hub's state, behind one lock: what a new subscription is told as
/// open and what it then receives cannot overlap or leave a gap.
#[derive(Default)]
struct Streams {
    senders: HashMap<String, broadcast::Sender<Live>>,
    /// Each job's calls in progress (started, not yet ended), oldest first.
    open: HashMap<String, Vec<Arc<Progress>>>,
}

impl Streams {
    /// Keeps `progress` among `job`'s open calls, or closes the call it ends.
    fn track(&mut self, job: &str, progress: &Arc<Progress>) {
        let same_call = |open: &Progress| {
            open.run_id == progress.run_id
                && match (&open.kind, &progress.kind) {
                    (
                        ProgressKind::ModelCallStarted { .. },
                        ProgressKind::ModelCallEnded { .. },
                    ) => open.turn == progress.turn,
                    (
                        ProgressKind::ToolCallStarted { call_id: a, .. },
                        ProgressKind::ToolCallEnded { call_id: b, .. },
                    ) => a == b,
                    _ => false,
                }
        };
        match progress.kind {
            ProgressKind::ModelCallStarted { .. } | ProgressKind::ToolCallStarted { .. } => {
                let calls = self.open.entry(job.to_string()).or_default();
                // A runaway run cannot grow this without bound.
                if calls.len() < MAX_OPEN {
                    calls.push(progress.clone());
                }
            }
            ProgressKind::ModelCallEnded { .. } | ProgressKind::ToolCallEnded { .. } => {
                if let Some(calls) = self.open.get_mut(job) {
                    calls.retain(|open| !same_call(open));
                    if calls.is_empty() {
                        self.open.remove(job);
                    }
                }
            }
            ProgressKind::Waiting { .. } | ProgressKind::WaitingEnded { .. } => {}
        }
    }
}

/// Calls kept open per job at most (parallel tool calls, nested runs).
const MAX_OPEN: usize = 64;

impl LiveHub {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Starts listening to `job`; its items stop being produced when the
    /// last subscription is dropped.
    /// With `wants.progress`, the calls in progress now come first.
    pub fn subscribe(self: &Arc<Self>, job: &str, wants: Wants) -> LiveSubscription {
        let mut streams = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        let receiver = streams
            .senders
            .entry(job.to_string())
            .or_insert_with(|| broadcast::channel(BUFFER).0)
            .subscribe();
        let open = match (wants.progress, streams.open.get(job)) {
            (true, Some(calls)) => calls.iter().cloned().map(Live::Progress).collect(),
            _ => VecDeque::new(),
        };
        LiveSubscription {
            hub: self.clone(),
            job: job.to_string(),
            open,
            receiver: Some(receiver),
            wants,
        }
    }

    /// Whether anyone listens to `job` now.
    pub fn listening(&self, job: &str) -> bool {
        self.streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .senders
            .get(job)
            .is_some_and(|s| s.receiver_count() > 0)
    }

    /// Hands `item` to `job`'s listeners, if any, and keeps track of the
    /// calls it starts or ends.
    pub fn publish(&self, job: &str, item: Live) {
        let mut streams = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        if let Live::Progress(progress) = &item {
            streams.track(job, progress);
        }
        if let Some(sender) = streams.senders.get(job) {
            // No receiver left is not an error: the listener just went away.
            let _ = sender.send(item);
        }
    }

    /// Forgets `job`'s open calls: its attempt is over, whatever it did
    /// not get to say (a run stopped mid-call).
    fn attempt_over(&self, job: &str) {
        let mut streams = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        streams.open.remove(job);
    }

    fn unsubscribe(&self, job: &str) {
        let mut streams = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        if streams
            .senders
            .get(job)
            .is_some_and(|s| s.receiver_count() == 0)
        {
            streams.senders.remove(job);
        }
    }
}

/// A listener's end of a job's live stream.
pub struct LiveSubscription {
    hub: Arc<LiveHub>,
    job: String,
    /// The calls that were in progress when it subscribed, still to give.
    open: VecDeque<Live>,
    /// `None` only while being dropped.
    receiver: Option<broadcast::Receiver<Live>>,
    wants: Wants,
}

impl LiveSubscription {
    /// An item already waiting, without waiting for one.
    pub fn try_next(&mut self) -> Option<Live> {
        if let Some(open) = self.open.pop_front() {
            return Some(open);
        }
        let receiver = self.receiver.as_mut()?;
        loop {
            match receiver.try_recv() {
                Ok(item) if !self.wants.takes(&item) => continue,
                Ok(item) => return Some(item),
                Err(broadcast::error::TryRecvError::Lagged(missed)) => {
                    tracing::debug!(job_id = %self.job, missed, "live listener lagged");
                }
                Err(_) => return None,
            }
        }
    }

    /// The next item; `None` once the hub is gone. Items a slow listener
    /// missed are skipped.
    pub async fn next(&mut self) -> Option<Live> {
        if let Some(open) = self.open.pop_front() {
            return Some(open);
        }
        let receiver = self.receiver.as_mut()?;
        loop {
            match receiver.recv().await {
                Ok(item) if !self.wants.takes(&item) => continue,
                Ok(item) => return Some(item),
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::debug!(job_id = %self.job, missed, "live listener lagged");
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

impl Drop for LiveSubscription {
    fn drop(&mut self) {
        // The receiver must be gone before the count is checked.
        drop(self.receiver.take());
        self.hub.unsubscribe(&self.job);
    }
}

/// The observer that feeds one job's live items to the hub.
pub struct LiveObserver {
    hub: Arc<LiveHub>,
    job: String,
}

impl LiveObserver {
    pub fn new(hub: Arc<LiveHub>, job: impl Into<String>) -> Self {
        Self {
            hub,
            job: job.into(),
        }
    }
}

#[async_trait]
impl Observer for LiveObserver {
    async fn on_event(&self, event: &EventEnvelope) -> Result<(), ObserverError> {
        use super::Event;
        let turn = match &event.event {
            Event::ToolCall { turn, .. } | Event::ToolResult { turn, .. } => *turn,
            _ => return Ok(()),
        };
        if event.parent.is_none() && self.hub.listening(&self.job) {
            self.hub.publish(
                &self.job,
                Live::Token(Token {
                    run_id: event.run_id.clone(),
                    turn,
                    text: String::new(),
                    event: Some(Arc::new(event.clone())),
                }),
            );
        }
        Ok(())
    }

    fn wants_tokens(&self) -> bool {
        self.hub.listening(&self.job)
    }

    fn on_token(&self, delta: TokenDelta<'_>) {
        self.hub.publish(
            &self.job,
            Live::Token(Token {
                run_id: delta.run_id.to_string(),
                turn: delta.turn,
                text: delta.text.to_string(),
                event: None,
            }),
        );
    }

    /// Always: the hub keeps the calls in progress for whoever connects
    /// during one.
    fn wants_progress(&self) -> bool {
        true
    }

    fn on_progress(&self, progress: &Progress) {
        self.hub
            .publish(&self.job, Live::Progress(Arc::new(progress.clone())));
    }

    fn name(&self) -> &str {
        "live"
    }
}

impl Drop for LiveObserver {
    /// The observer lives as long as the job's attempt.
    fn drop(&mut self) {
        self.hub.attempt_over(&self.job);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
