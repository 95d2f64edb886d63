//! A thread's event stream, the Agent Protocol's
//! `POST /threads/{id}/stream` (also served at `…/stream/events`, where
//! LangGraph's SDKs open it): every run of the thread, oldest first, each
//! followed from its job's log through its parks to its end
//! (`follower::Follower`) and told as the protocol's events
//! (`thread_events`), then the runs started after — the stream stays open
//! until its client goes, as a client keeps one across runs and
//! interrupts. `since` resumes after an event's `seq`, also after a daemon
//! restart, as the stream reads the store.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use aide::transform::TransformOperation;
use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::super::AppState;
use super::super::auth::Caller;
use super::super::body::{JsonBody, Path, whole_number};
use super::super::conversations::jobs_of;
use super::super::document::{EventStream, answers, json_text, sse_event};
use super::super::error::ApiError;
use super::super::feed::{MIN_RECHECK, Step as Batch, Stepper, shared_feed};
use super::super::limits::StreamPermit;
use super::follower::Follower;
use super::stream::Frame;
use super::stream_modes::Modes;
use super::thread_events::{Channel, Filter, ProtocolEvent, RunEvents};
use super::threads::own_thread;
use crate::queue::{Job, JobId};

/// The least time between two looks for a thread's new runs.
const LOOK_GAP: Duration = Duration::from_millis(200);

/// The body of a thread's event stream.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct EventStreamRequest {
    /// The channels to send: `values`, `updates`, `messages`, `tools`,
    /// `lifecycle`, `input`, `checkpoints`, `tasks`, `custom`, or
    /// `custom:<name>` (the custom events of that name).
    #[schemars(schema_with = "channels_schema")]
    pub channels: Vec<String>,
    /// Namespace prefixes to send (`[]` the runs' own; `["tools"]` the
    /// runs their agent calls started, `tools:<id>` one of them); every
    /// namespace when absent.
    #[serde(default)]
    pub namespaces: Option<Vec<Vec<String>>>,
    /// How many parts a namespace may have below the prefix that keeps it
    /// (`0`: the prefix's own events); any when absent.
    #[serde(default, deserialize_with = "whole_number")]
    pub depth: Option<u64>,
    /// Send only the events after this `seq` (the whole thread without).
    #[serde(default, deserialize_with = "whole_number")]
    pub since: Option<u64>,
}

/// `channels`: at least one, each a channel's name or `custom:<name>`.
fn channels_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "minItems": 1,
        "items": {"anyOf": [
            {"type": "string", "enum": Channel::names().collect::<Vec<_>>()},
            {"type": "string", "pattern": "^custom:.+"},
        ]},
    })
}

/// One event of a thread's stream, for the API document only.
pub enum ThreadStreamEvent {}

impl JsonSchema for ThreadStreamEvent {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ThreadStreamEvent".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let event = json_text(json_schema!({
            "type": "object",
            "required": ["type", "method", "params"],
            "properties": {
                "type": {"const": "event"},
                "event_id": {"type": "string"},
                "seq": {"type": "integer", "minimum": 0},
                "method": {"type": "string"},
                "params": {
                    "type": "object",
                    "required": ["namespace", "timestamp", "data"],
                    "properties": {
                        "namespace": {"type": "array", "items": {"type": "string"}},
                        "timestamp": {"type": "integer"},
                        "data": {},
                    },
                },
            },
        }));
        let error = json_text(json_schema!({
            "type": "object",
            "required": ["type", "error", "message"],
            "properties": {
                "type": {"const": "error"}, "id": {"type": "null"},
                "error": {"type": "string"}, "message": {"type": "string"},
            },
        }));
        json_schema!({
            "description": "One event of the thread streaming protocol; `id:` is its `seq` \
                when it was made from the stored log (resume with `since`)",
            "oneOf": [
                sse_event(None, "An event: its `event:` is its method", event),
                sse_event(Some("error"), "Last, when the thread could not be read", error),
            ],
        })
    }
}

/// A thread's event stream in the API document.
pub(super) fn open_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Stream a thread's events: every run, then the runs to come")
        .description(
            "The Agent Protocol's thread streaming: each run of the thread from its start \
             (after `since`), through its interrupts to its end, in the channels asked; \
             the stream stays open for the runs started after, until the client goes. \
             `POST /threads/{id}/commands` starts and resumes runs.",
        )
        .response_with::<200, EventStream<ThreadStreamEvent>, _>(|r| {
            r.description("The thread's events")
        });
    answers(
        op,
        &[
            (404, "The key has no thread of that id"),
            (422, "A channel is not served, named"),
            (429, "The key's event streams are all open"),
        ],
    )
}

/// `POST /threads/{thread_id}/stream` and `…/stream/events`.
pub async fn open(
    State(state): State<AppState>,
    caller: Caller,
    Path(thread): Path<String>,
    JsonBody(request): JsonBody<EventStreamRequest>,
) -> Result<Response, ApiError> {
    let filter = Filter::read(
        &request.channels,
        request.namespaces.as_deref(),
        request.depth,
        request.since,
    )?;
    own_thread(&state, &caller, &thread).await?;
    let follow = ThreadFollow::new(&state, caller, thread, Protocol(filter))?;
    Ok(EventStream::<ThreadStreamEvent>::new(sse_answer(&state, follow)).into_response())
}

/// The SSE answer of a thread's stream: what `follow` tells, batch after
/// batch, a heartbeat comment every `server.sse_heartbeat` meanwhile.
pub(super) fn sse_answer<T: Telling>(
    state: &AppState,
    follow: ThreadFollow<T>,
) -> impl IntoResponse + use<T> {
    let events = futures::stream::unfold(follow, |mut follow| async move {
        let batch = follow.next_batch().await?;
        Some((futures::stream::iter(batch.into_iter().map(sse)), follow))
    })
    .flatten();
    Sse::new(events).keep_alive(
        KeepAlive::new()
            .interval(state.sse_heartbeat)
            .text("heartbeat"),
    )
}

/// What a thread's stream tells: the protocol's event, or last, why it
/// cannot go on; or one of LangGraph's events (a thread joined).
pub(super) enum Told {
    Event(ProtocolEvent),
    Failed(String),
    Joined(Frame),
}

impl Told {
    /// Its wire form (the protocol's event, or its error with no command's
    /// id; a LangGraph event's data).
    pub fn json(&self) -> Value {
        match self {
            Self::Event(event) => event.json(chrono::Utc::now().timestamp_millis()),
            Self::Failed(why) => json!({
                "type": "error", "id": Value::Null, "error": "unknown_error",
                "message": format!("{why}: ask again with `since` the last event's seq"),
            }),
            Self::Joined(frame) => frame.data.clone(),
        }
    }
}

/// How one stream of a thread tells its runs: the protocol's events
/// ([`Protocol`]), or LangGraph's join of a thread (`thread_join`).
pub(super) trait Telling: Send + 'static {
    /// What it keeps of one run as it tells it.
    type Run: Send + 'static;
    /// The teller of the thread's `ordinal`-th run, job `job`; `None`
    /// skips the run (the client has all of it, or it is not told).
    fn run(&self, ordinal: usize, job: &Job) -> Option<Self::Run>;
    /// The translator's modes a run is told from.
    fn modes(&self, job: &Job) -> Modes;
    /// Whether a run's nested runs are told (as subgraphs).
    fn subgraphs(&self, job: &Job) -> bool;
    /// What `frame` of a run tells.
    fn tell(&self, run: &mut Self::Run, frame: &Frame) -> Vec<Told>;
    /// Why the stream cannot go on, as it tells it (last).
    fn failed(&self, why: String) -> Told;
}

/// The protocol's events of each run, as `filter` keeps them.
pub(super) struct Protocol(pub Filter);

impl Telling for Protocol {
    type Run = RunEvents;

    fn run(&self, ordinal: usize, job: &Job) -> Option<RunEvents> {
        let events = RunEvents::new(ordinal, job.id.as_str(), &job.bundle);
        let told = self.0.since.is_some_and(|since| events.last_seq() <= since);
        (!told).then_some(events)
    }

    fn modes(&self, _: &Job) -> Modes {
        RunEvents::modes()
    }

    fn subgraphs(&self, _: &Job) -> bool {
        self.0.reaches_nested()
    }

    fn tell(&self, run: &mut RunEvents, frame: &Frame) -> Vec<Told> {
        run.tell(frame)
            .into_iter()
            .filter(|event| self.0.admits(event))
            .map(Told::Event)
            .collect()
    }

    fn failed(&self, why: String) -> Told {
        Told::Failed(why)
    }
}

/// Follows a thread's runs one after another, telling each as `T` does.
pub(super) struct ThreadFollow<T: Telling> {
    state: AppState,
    caller: Caller,
    thread: String,
    telling: T,
    /// The stream's place among the key's open streams, held by each run's
    /// feed in turn.
    permit: Arc<StreamPermit>,
    updates: broadcast::Receiver<JobId>,
    revoked: CancellationToken,
    /// The thread's runs as last listed, oldest first.
    listed: Vec<Job>,
    /// The place of the next run to follow among them.
    next: usize,
    /// The run followed now: its job, its teller, its follower.
    current: Option<(JobId, T::Run, Follower)>,
    /// The run last followed to its end, and the thread's messages after
    /// it: the next run's, when it follows it, without reading the
    /// thread's journals again.
    told: Option<(JobId, Vec<Value>)>,
    done: bool,
}

impl<T: Telling> ThreadFollow<T> {
    /// Follows the caller's thread `thread`, telling it as `telling` does,
    /// holding one of the key's stream permits.
    pub fn new(
        state: &AppState,
        caller: Caller,
        thread: String,
        telling: T,
    ) -> Result<Self, ApiError> {
        let permit = Arc::new(state.streams.acquire(caller.name())?);
        Ok(Self {
            updates: state.queue.subscribe(),
            revoked: permit.revoked(),
            state: state.clone(),
            caller,
            thread,
            telling,
            permit,
            listed: Vec::new(),
            next: 0,
            current: None,
            told: None,
            done: false,
        })
    }

    /// The next events to send; `None` once the stream ends.
    pub async fn next_batch(&mut self) -> Option<Vec<Told>> {
        loop {
            if self.done {
                return None;
            }
            if let Some((job, run, follower)) = self.current.as_mut() {
                let (frames, last) = match follower.step().await {
                    Batch::More(frames) => (frames, false),
                    Batch::Last(frames) => (frames, true),
                };
                let ended = frames.iter().any(|f| matches!(f.event, "end" | "error"));
                let mut sent: Vec<Told> = frames
                    .iter()
                    .flat_map(|frame| self.telling.tell(run, frame))
                    .collect();
                if last {
                    let job = job.clone();
                    let after = follower.thread_messages();
                    self.current = None;
                    if ended {
                        self.next += 1;
                        self.told = Some((job, after));
                    } else if let Some(lost) = self.feed_lost(&job).await {
                        sent.push(lost);
                        self.done = true;
                    }
                }
                if !sent.is_empty() {
                    return Some(sent);
                }
                continue;
            }
            match self.open_next().await {
                Ok(true) => {}
                Ok(false) => self.wait().await,
                Err(e) => {
                    tracing::warn!(thread = %self.thread, error = %e.message, "a thread's event stream could not read the thread");
                    self.done = true;
                    return Some(vec![self.telling.failed(e.message)]);
                }
            }
        }
    }

    /// A run's feed that ended before its job did: the job was deleted
    /// (a `rollback`), and the thread goes on without it (listed again:
    /// the runs after it move up); or the store could not be read or the
    /// key was revoked, and the stream ends with the protocol's error (the
    /// client may ask again `since` the last event it has).
    async fn feed_lost(&mut self, job: &JobId) -> Option<Told> {
        if !self.revoked.is_cancelled() && matches!(self.state.queue.get(job).await, Ok(None)) {
            self.listed.clear();
            return None;
        }
        Some(
            self.telling
                .failed("the run's events could not be read, or the key was revoked".into()),
        )
    }

    /// Opens the next run of the thread, when it has one (listing the
    /// thread's runs again when the last listing has no more); skips a
    /// run whose events were all sent before (`since`).
    async fn open_next(&mut self) -> Result<bool, ApiError> {
        if self.next >= self.listed.len() {
            self.listed = jobs_of(&self.state, self.caller.name(), &self.thread).await?;
        }
        let Some(job) = self.listed.get(self.next).cloned() else {
            return Ok(false);
        };
        let Some(run) = self.telling.run(self.next, &job) else {
            self.next += 1;
            return Ok(true);
        };
        let job_id = job.id.clone();
        let modes = self.telling.modes(&job);
        let feed = shared_feed(&self.state, job.id.clone(), &self.permit);
        let subgraphs = self.telling.subgraphs(&job);
        let follows_told = self.told.as_ref().is_some_and(|(told, _)| {
            self.next > 0 && self.listed.get(self.next - 1).map(|j| &j.id) == Some(told)
        });
        let follower = match self.told.take() {
            Some((_, prior)) if follows_told => {
                Follower::new(&self.state, job, modes, None, feed, false, prior)
            }
            _ => Follower::open(&self.state, &self.caller, job, modes, None, feed, false).await?,
        };
        let follower = follower.through_parks().with_subgraphs(subgraphs);
        self.current = Some((job_id, run, follower));
        Ok(true)
    }

    /// Waits for a change to any job (a new run may be this thread's), at
    /// most the daemon's recheck; ends the stream when the key is revoked.
    async fn wait(&mut self) {
        let recheck = tokio::time::sleep(self.state.sse_recheck.max(MIN_RECHECK));
        let revoked = self.revoked.clone();
        tokio::select! {
            _ = self.updates.recv() => {}
            _ = recheck => {}
            _ = revoked.cancelled() => {}
        }
        self.done = self.revoked.is_cancelled();
        tokio::time::sleep(LOOK_GAP).await;
        // What changed meanwhile is seen by the next listing.
        while !matches!(
            self.updates.try_recv(),
            Err(broadcast::error::TryRecvError::Empty | broadcast::error::TryRecvError::Closed)
        ) {}
    }
}

/// What a thread's stream tells, as SSE: an event's method (or name) as
/// `event:`, its number as `id:`; an error as `event: error`.
fn sse(told: Told) -> Result<SseEvent, Infallible> {
    let data = serde_json::to_string(&told.json()).unwrap_or_else(|_| "null".into());
    let (event, id) = match &told {
        Told::Event(event) => (event.method.into(), event.seq),
        Told::Joined(frame) => (frame.name(), frame.id),
        Told::Failed(_) => ("error".into(), None),
    };
    let sent = SseEvent::default().event(event).data(data);
    Ok(match id {
        Some(id) => sent.id(id.to_string()),
        None => sent,
    })
}
