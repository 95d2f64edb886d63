//! The streamed runs: `POST /threads/{id}/runs/stream`, stateless
//! `POST /runs/stream`, and a run's stream joined again
//! (`GET /threads/{t}/runs/{r}/stream`, with `Last-Event-ID` also after a
//! daemon restart, as it reads the store). Each follows the run's job
//! with `follower::Follower` (`follow`'s feed: its stored events, live
//! tokens and progress, its end, told through `stream::Translator`); a
//! stream ends with `end`, an `error` for a failed run, or the interrupt of
//! a run parked for a person.
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
use super::super::feed::{Feed, batches, job_feed, listen_first};
use super::super::sse::resume_point;
use super::super::trace_context::CallerTrace;
use super::follower::Follower;
use super::resume;
use super::run_routes::{
    START_REFUSALS, delete_when_ended, deleted_after, located, run_of, start_on_thread,
};
use super::runs::{self, RunRequest};
use super::runs_by_id::key_run;
use super::stream::{Frame, PER_EVENT};
use super::stream_modes::{Modes, subgraphs_asked};
use crate::access::policy::Action;
use crate::queue::{Job, JobId};

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
