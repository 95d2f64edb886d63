//! The streamed runs: `POST /threads/{id}/runs/stream`, stateless
//! `POST /runs/stream`, and a run's stream joined again
//! (`GET /threads/{t}/runs/{r}/stream`, with `Last-Event-ID` also after a
//! daemon restart, as it reads the store). Each follows the run's job
//! (`follow`'s feed: its stored events, live tokens and progress, its end)
//! and tells it through `stream::Translator`; a stream ends with `end`, an
//! `error` for a failed run, or the interrupt of a run parked for a person.
//! A streamed run's answer names where to join it again in `Location`, as
//! LangGraph's clients reconnect there.

use std::convert::Infallible;

use aide::transform::TransformOperation;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::StreamExt;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Deserialize;
use tokio::sync::oneshot;

use super::super::AppState;
use super::super::auth::Caller;
use super::super::body::{JsonBody, ListQuery, Path, Texts};
use super::super::document::{EventStream, answers, json_text, reads_header, sse_event};
use super::super::error::ApiError;
use super::super::feed::{Feed, Item, Step as Batch, Stepper, batches, job_feed, listen_first};
use super::super::job_actions::settled;
use super::super::sse::resume_point;
use super::super::trace_context::CallerTrace;
use super::ids;
use super::messages::{Step, Told, steps_of};
use super::resume;
use super::run_routes::{
    START_REFUSALS, delete_when_ended, deleted_after, located, run_of, start_on_thread,
};
use super::runs::{self, RunRequest, RunStatus};
use super::runs_by_id::key_run;
use super::state;
use super::stream::{Ending, Frame, PER_EVENT, RunInfo, Translator};
use super::stream_modes::{Modes, subgraphs_asked};
use super::subgraphs::Subgraphs;
use crate::access::policy::Action;
use crate::events::{Event, EventEnvelope, JobStatus};
use crate::queue::{Job, JobId, JobState};

/// The frame of a run that runs again after its interrupt was answered
/// (only a follower that goes [`through parks`](Follower::through_parks)
/// makes it).
pub(super) const RESUMED: &str = "resumed";

/// One event of a run's stream, by its `event:` name — for the API
/// document only.
pub enum RunStreamEvent {}

impl JsonSchema for RunStreamEvent {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "RunStreamEvent".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let any = || json_text(json_schema!({}));
        let events = [
            ("metadata", "First: `{\"run_id\", \"attempt\"}`"),
            ("values", "The thread's values after a step: `{\"messages\": […]}`; or `{\"__interrupt__\": […]}` when the run parked"),
            ("updates", "What a node wrote: `{\"model\"|\"tools\": {\"messages\": […]}}`; or `{\"__interrupt__\": […]}`"),
            ("messages", "`messages-tuple`: `[message chunk, metadata]`"),
            ("messages/metadata", "`messages`: a message's metadata, once"),
            ("messages/partial", "`messages`: the message so far"),
            ("messages/complete", "`messages`: the whole message"),
            ("events", "LangChain's `astream_events` v2 dicts"),
            ("custom", "The daemon's progress: a model or tool call starting or ending, a wait"),
            ("debug", "`{\"type\": \"checkpoint\"|\"task_result\", \"step\", \"payload\"}`"),
            ("checkpoints", "A checkpoint's payload"),
            ("tasks", "A task result's payload"),
            ("error", "Last, for a failed run: `{\"error\", \"message\"}`"),
            ("end", "Last: `null`"),
        ]
        .map(|(name, description)| sse_event(Some(name), description, any()));
        json_schema!({
            "description": "One event of a run's stream, LangGraph's names and payloads; \
                `id:` on every event made from the stored log (resume after it with Last-Event-ID)",
            "oneOf": events,
        })
    }
}

/// A streamed run in the API document.
pub(super) fn stream_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Start a run and stream it in the `stream_mode`s asked")
        .description(
            "Admitted as any submit. Events follow LangGraph's names and payloads; each made \
             from the stored log has an `id:`, so a client joins again after it \
             (`GET /threads/{t}/runs/{r}/stream` with `Last-Event-ID`, named in `Location`), \
             also after a daemon restart. `on_disconnect: cancel` cancels the run when the \
             client goes.",
        )
        .response_with::<200, EventStream<RunStreamEvent>, _>(|r| {
            r.description("The run's events")
        });
    answers(op, &START_REFUSALS)
}

/// `POST /threads/{thread_id}/runs/stream`.
pub async fn stream(
    State(state): State<AppState>,
    caller: Caller,
    trace: CallerTrace,
    Path(thread): Path<String>,
    JsonBody(request): JsonBody<RunRequest>,
) -> Result<Response, ApiError> {
    let modes = Modes::of_value(request.rest.get("stream_mode"))?;
    let subgraphs = subgraphs_asked(request.rest.get("stream_subgraphs"))?;
    let cancel = runs::cancelled_on_disconnect(&request)?;
    if let Some(command) = runs::command_of(&request) {
        // The parked run goes on: followed from before the decision, told
        // from after what its stream told up to the park.
        let pending = resume::find(&state, &caller, &thread, command).await?;
        let feed = listen_first(&state, &caller, &pending.job.id)?;
        let resumed = resume::take(&state, &caller, pending).await?;
        let after = (resumed.after_seq + 1).saturating_mul(PER_EVENT) - 1;
        let follower = Follower::open(
            &state,
            &caller,
            resumed.job,
            modes,
            Some(after),
            feed,
            cancel,
        )
        .await?;
        return Ok(answer(&state, follower.with_subgraphs(subgraphs)));
    }
    let id = JobId::new();
    let feed = listen_first(&state, &caller, &id)?;
    let job = start_on_thread(&state, &caller, &trace, &thread, &request, Some(id)).await?;
    let follower = Follower::open(&state, &caller, job, modes, None, feed, cancel).await?;
    Ok(answer(&state, follower.with_subgraphs(subgraphs)))
}

/// `POST /runs/stream` (on the thread `thread_id` names, when it names
/// one).
pub async fn stream_stateless(
    State(state): State<AppState>,
    caller: Caller,
    trace: CallerTrace,
    JsonBody(request): JsonBody<RunRequest>,
) -> Result<Response, ApiError> {
    if let Some(thread) = request.thread_id.clone() {
        return stream(State(state), caller, trace, Path(thread), JsonBody(request)).await;
    }
    let modes = Modes::of_value(request.rest.get("stream_mode"))?;
    let subgraphs = subgraphs_asked(request.rest.get("stream_subgraphs"))?;
    let cancel = runs::cancelled_on_disconnect(&request)?;
    let delete = deleted_after(&request)?;
    let id = JobId::new();
    let feed = listen_first(&state, &caller, &id)?;
    let job = runs::start(&state, &caller, &trace, &request, None, Some(id)).await?;
    // The job goes once it ended and this stream told its end (or its
    // client went): its last values are read from the job.
    let (reading, read) = oneshot::channel();
    if delete {
        tokio::spawn(delete_when_ended(state.clone(), job.id.clone(), Some(read)));
    }
    let mut follower = Follower::open(&state, &caller, job, modes, None, feed, cancel)
        .await?
        .with_subgraphs(subgraphs);
    follower.reading = Some(reading);
    Ok(answer(&state, follower))
}

/// `?stream_mode=` and `?cancel_on_disconnect=` of a joined stream.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct JoinQuery {
    /// The modes to stream (repeat the parameter for several); the run's
    /// own when absent.
    #[serde(default)]
    #[schemars(schema_with = "super::stream_modes::names_schema")]
    pub stream_mode: Option<Texts>,
    /// `true`/`1`: cancel the run when this client goes.
    #[serde(default)]
    pub cancel_on_disconnect: Option<String>,
}

/// A joined stream in the API document.
pub(super) fn join_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Join a run's stream: from the start, or after `Last-Event-ID`")
        .response_with::<200, EventStream<RunStreamEvent>, _>(|r| {
            r.description("The run's events")
        });
    let op = reads_header(
        op,
        "Last-Event-ID",
        "The `id:` of the last event received; the stream resumes after it (`-1`: the whole run).",
        &crate::types::text::sequence_number_pattern().replacen("^(", "^(-1|", 1),
    );
    answers(
        op,
        &[
            (400, "The Last-Event-ID header is not an event's id"),
            (404, "The thread has no such run for the key"),
            (422, "A stream mode is not served, named"),
        ],
    )
}

/// `GET /threads/{thread_id}/runs/{run_id}/stream`.
pub async fn join(
    State(state): State<AppState>,
    caller: Caller,
    Path((thread, run)): Path<(String, String)>,
    ListQuery(query): ListQuery<JoinQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let after = joined_after(&headers)?;
    let job = run_of(&state, &caller, Action::ReadJob, &thread, &run).await?;
    rejoin(&state, &caller, job, &query, after).await
}

/// `GET /runs/{run_id}/stream`: a run's stream joined again by its id
/// alone (the Agent Protocol's; a stateless run's is kept while it runs,
/// and after with `on_completion: keep`).
pub async fn join_by_id(
    State(state): State<AppState>,
    caller: Caller,
    Path(run): Path<String>,
    ListQuery(query): ListQuery<JoinQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let after = joined_after(&headers)?;
    let job = key_run(&state, &caller, Action::ReadJob, &run).await?;
    rejoin(&state, &caller, job, &query, after).await
}

/// Where a joined stream resumes: after `Last-Event-ID`; from the start
/// without one, or with `-1` (what LangGraph's JS client sends for "the
/// whole run").
pub(super) fn joined_after(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    match headers
        .get("last-event-id")
        .map(|v| v.as_bytes().trim_ascii())
    {
        None | Some(b"-1") => Ok(None),
        Some(_) => Ok(Some(resume_point(headers, None)?)),
    }
}

/// Follows `job` again for a client that joins its stream.
async fn rejoin(
    state: &AppState,
    caller: &Caller,
    job: Job,
    query: &JoinQuery,
    after: Option<u64>,
) -> Result<Response, ApiError> {
    let modes = match &query.stream_mode {
        Some(names) => Modes::read(names.iter())?,
        // The run's own, as a client that reconnects sends none.
        None => own_modes(&job),
    };
    let cancel = matches!(
        query.cancel_on_disconnect.as_deref(),
        Some("1" | "true" | "yes")
    );
    let permit = state.streams.acquire(caller.name())?;
    let feed: Feed = Box::pin(job_feed(state.clone(), job.id.clone(), 0, false, permit));
    let subgraphs = own_subgraphs(&job);
    let follower = Follower::open(state, caller, job, modes, after, feed, cancel).await?;
    Ok(answer(state, follower.with_subgraphs(subgraphs)))
}

/// The stream modes run `job` was started with (`values` when none).
pub(super) fn own_modes(job: &Job) -> Modes {
    Modes::of_value(kept_setting(job, "stream_mode")).unwrap_or_default()
}

/// Whether run `job` was started streaming its subgraphs.
pub(super) fn own_subgraphs(job: &Job) -> bool {
    subgraphs_asked(kept_setting(job, "stream_subgraphs")).unwrap_or_default()
}

/// A setting run `job` was started with, as its request sent it.
fn kept_setting<'a>(job: &'a Job, name: &str) -> Option<&'a serde_json::Value> {
    job.run_meta
        .as_ref()
        .and_then(|meta| meta["kwargs"].get(name))
}

/// The SSE answer of `follower`, naming the run and where to join it.
fn answer(state: &AppState, follower: Follower) -> Response {
    let job = follower.job.clone();
    let events = batches(follower).map(sse);
    let sse = Sse::new(events).keep_alive(
        KeepAlive::new()
            .interval(state.sse_heartbeat)
            .text("heartbeat"),
    );
    let mut response = located(&job, EventStream::<RunStreamEvent>::new(sse));
    let at = match &job.conversation_id {
        Some(thread) => format!("/threads/{thread}/runs/{}/stream", job.id),
        None => format!("/runs/{}/stream", job.id),
    };
    if let Ok(at) = HeaderValue::from_str(&at) {
        response.headers_mut().insert(header::LOCATION, at);
    }
    response
}

fn sse(frame: Frame) -> Result<SseEvent, Infallible> {
    let data = serde_json::to_string(&frame.data).unwrap_or_else(|_| "null".into());
    let event = SseEvent::default().event(frame.name()).data(data);
    Ok(match frame.id {
        Some(id) => event.id(id.to_string()),
        None => event,
    })
}

/// Follows one run's job and tells it; cancels the run when dropped
/// before its end if the client asked so.
pub(super) struct Follower {
    state: AppState,
    job: Job,
    feed: Feed,
    translator: Translator,
    /// The job's steps as last read from its journal.
    steps: Vec<Step>,
    opened: bool,
    last_seq: u64,
    cancel_on_drop: Option<JobId>,
    /// Held while this stream reads a job deleted once it has ended
    /// (`delete_when_ended` waits for its drop).
    reading: Option<oneshot::Sender<()>>,
    /// Goes on past a park to the job's end (a thread's event stream),
    /// where a run's stream ends at its interrupt; and whether the job is
    /// parked as told.
    through_parks: bool,
    parked: bool,
    /// The job's nested runs, told when the client asked for subgraphs.
    subgraphs: Option<Subgraphs>,
}

impl Follower {
    /// Follows `job` for `caller`, after the thread's earlier messages.
    pub(super) async fn open(
        state: &AppState,
        caller: &Caller,
        job: Job,
        modes: Modes,
        after: Option<u64>,
        feed: Feed,
        cancel: bool,
    ) -> Result<Self, ApiError> {
        let prior = match &job.conversation_id {
            Some(thread) => state::messages_before(state, caller.name(), thread, &job.id).await?,
            None => Vec::new(),
        };
        Ok(Self::new(state, job, modes, after, feed, cancel, prior))
    }

    /// Follows `job`, whose thread's messages before it are `prior`.
    pub(super) fn new(
        state: &AppState,
        job: Job,
        modes: Modes,
        after: Option<u64>,
        feed: Feed,
        cancel: bool,
        prior: Vec<serde_json::Value>,
    ) -> Self {
        let run = RunInfo {
            job: job.id.to_string(),
            thread: job.conversation_id.clone(),
            graph: job.bundle.clone(),
            assistant: ids::assistant_id(&job.bundle),
            prior,
            namespace: Vec::new(),
        };
        Self {
            state: state.clone(),
            steps: steps_of(&job, &[]),
            cancel_on_drop: cancel.then(|| job.id.clone()),
            job,
            feed,
            translator: Translator::new(run, modes, after),
            opened: false,
            last_seq: 0,
            reading: None,
            through_parks: false,
            parked: false,
            subgraphs: None,
        }
    }

    /// This follower tells the job's nested runs too, when `on`, each in
    /// its subgraph's namespace (`subgraphs`).
    pub(super) fn with_subgraphs(mut self, on: bool) -> Self {
        self.subgraphs = on.then(|| {
            let (run, modes, after) = self.translator.settings();
            Subgraphs::new(run, modes.clone(), after)
        });
        self
    }

    /// The thread's messages after what this follower told: the next
    /// run's prior, once it told its run's end.
    pub(super) fn thread_messages(&self) -> Vec<serde_json::Value> {
        self.translator.thread_messages()
    }

    /// This follower goes on past a park: after its interrupt, a
    /// [`RESUMED`] frame when the job runs again, then the rest of the run.
    pub(super) fn through_parks(mut self) -> Self {
        self.through_parks = true;
        self
    }

    /// The run's first events: its metadata, and its input.
    fn opening(&mut self) -> Vec<Frame> {
        self.translator.at(0);
        let mut frames = vec![self.translator.opening(self.job.attempts)];
        if let Some(input) = self.steps.first() {
            frames.extend(self.translator.started(&input.message.clone()));
        }
        frames.extend(self.translator.steps(&self.steps, 1));
        frames
    }

    /// Reads the job's journal again: its steps as recorded so far.
    async fn read_steps(&mut self, job: Option<&Job>) {
        let job = job.unwrap_or(&self.job);
        match self.state.queue.journal(&job.id).await {
            Ok(journal) => self.steps = steps_of(job, &journal),
            Err(e) => {
                tracing::warn!(job_id = %job.id, error = %e, "a run's stream could not read its journal")
            }
        }
    }

    /// Events of the steps up to the first `which` names, read again from
    /// the journal when it is not there yet.
    async fn steps_through(&mut self, which: impl Fn(&Step) -> bool) -> Vec<Frame> {
        let mut found = self.steps.iter().position(&which);
        if found.is_none() {
            self.read_steps(None).await;
            found = self.steps.iter().position(&which);
        }
        match found {
            Some(k) => self.translator.steps(&self.steps, k + 1),
            None => Vec::new(),
        }
    }

    /// A stored event of the job: what it tells, and whether the stream
    /// ends there (the run parked for a person).
    async fn stored(&mut self, seq: u64, json: &str) -> Batch<Frame> {
        let Ok(envelope) = serde_json::from_str::<EventEnvelope>(json) else {
            return Batch::More(Vec::new());
        };
        self.last_seq = seq;
        // The job's nested runs first: a nested run's end tells its own
        // rest before its parent's call's result (`Translator::at_event`).
        let mut frames = Vec::new();
        if let Some(subgraphs) = &mut self.subgraphs {
            let journal = match subgraphs.wants_journal(&envelope) {
                true => match self.state.queue.journal(&self.job.id).await {
                    Ok(journal) => Some(journal),
                    Err(e) => {
                        tracing::warn!(job_id = %self.job.id, error = %e, "a run's stream could not read its journal");
                        None
                    }
                },
                false => None,
            };
            frames.extend(subgraphs.stored(seq, &envelope, journal.as_deref()));
        }
        self.translator.at_event(seq, &envelope);
        frames.extend(self.translator.stored(&envelope));
        // A reply is recorded with the events held before it (its
        // request's), a tool's result with its call's or, for an agent
        // call, with its nested run's end (`Told`): those events tell the
        // step; their answers' events, stored with the next durable write,
        // only if they did not.
        if let Some(told) = Told::of(&envelope, self.translator.run_id()) {
            frames.extend(self.steps_through(move |s| told.is(s)).await);
        }
        if envelope.parent.is_some() {
            return Batch::More(frames);
        }
        match &envelope.event {
            Event::JobState {
                state: JobStatus::AwaitingApproval | JobStatus::NeedsAttention,
                ..
            } => {
                if let Some(parked) = parked_now(&self.state, &self.job.id, seq).await {
                    self.read_steps(Some(&parked)).await;
                    let all = self.steps.len();
                    frames.extend(self.translator.steps(&self.steps, all));
                    frames.extend(self.translator.interrupted(parked.error.as_deref()));
                    if self.through_parks {
                        self.parked = true;
                        return Batch::More(frames);
                    }
                    frames.extend(self.translator.ended(Ending::Done));
                    return Batch::Last(frames);
                }
            }
            Event::JobState {
                state: JobStatus::Running,
                ..
            } if self.parked => {
                self.parked = false;
                // The last number this stored event has room for: the
                // translator numbers only a few events at one.
                frames.push(Frame::root(
                    RESUMED,
                    serde_json::Value::Null,
                    Some(seq.saturating_mul(PER_EVENT) + PER_EVENT - 1),
                ));
            }
            _ => {}
        }
        Batch::More(frames)
    }

    /// The job's end: the steps not told yet, then `error` or `end`.
    async fn ended(&mut self, job: Job) -> Vec<Frame> {
        crate::failpoint::reached(crate::failpoint::Failpoint::StreamEndRead).await;
        self.translator.at(self.last_seq + 1);
        self.read_steps(Some(&job)).await;
        let all = self.steps.len();
        let mut frames = self.translator.steps(&self.steps, all);
        let message = job.error.clone().unwrap_or_default();
        let ending = match RunStatus::of(&job) {
            RunStatus::Error | RunStatus::Timeout => Ending::Failed("JobFailed", &message),
            _ if job.state == JobState::Cancelled => Ending::Cancelled(match message.is_empty() {
                true => "the run was cancelled",
                false => &message,
            }),
            _ => Ending::Done,
        };
        frames.extend(self.translator.ended(ending));
        frames
    }
}

/// Job `id`, when it is parked now at the park stored as `seq` (not at an
/// earlier one it has since left).
async fn parked_now(state: &AppState, id: &JobId, seq: u64) -> Option<Job> {
    let job = state.queue.get(id).await.ok().flatten()?;
    if !job.state.is_parked() {
        return None;
    }
    let later = state.queue.events_after(id, seq, 1).await.ok()?;
    later.is_empty().then_some(job)
}

impl Stepper for Follower {
    type Sent = Frame;

    async fn step(&mut self) -> Batch<Frame> {
        if !self.opened {
            self.opened = true;
            return Batch::More(self.opening());
        }
        loop {
            let Some(item) = self.feed.next().await else {
                // The store could not be read, or the key was revoked: not
                // the client's going; it may join again.
                self.cancel_on_drop = None;
                return Batch::Last(Vec::new());
            };
            let frames = match item {
                Item::Token(token) => match &mut self.subgraphs {
                    Some(subgraphs) if token.run_id != self.translator.run_id() => {
                        subgraphs.token(&token)
                    }
                    _ => self.translator.token(&token),
                },
                Item::Progress(progress) => match &mut self.subgraphs {
                    Some(subgraphs) if progress.run_id != self.translator.run_id() => {
                        subgraphs.progress(&progress)
                    }
                    _ => self.translator.progress(&progress),
                },
                Item::Event { seq, json } => match self.stored(seq, &json).await {
                    Batch::More(frames) => frames,
                    Batch::Last(frames) => {
                        self.cancel_on_drop = None;
                        return Batch::Last(frames);
                    }
                },
                Item::End(job) => {
                    self.cancel_on_drop = None;
                    return Batch::Last(self.ended(*job).await);
                }
            };
            if !frames.is_empty() {
                return Batch::More(frames);
            }
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let Some(id) = self.cancel_on_drop.take() else {
            return;
        };
        let state = self.state.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                match state.queue.cancel(&id).await {
                    Ok(Some(changed)) => {
                        settled(&state, changed);
                    }
                    Ok(None) => {}
                    Err(e) => tracing::warn!(job_id = %id, error = %e, "a run whose client went was not cancelled"),
                }
            });
        }
    }
}
