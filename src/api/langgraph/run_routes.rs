//! The run routes: on a thread (`POST /threads/{id}/runs` and `…/wait`,
//! list, get, join, cancel, delete) and stateless (`POST /runs`,
//! `/runs/wait`). A run's answer names where it lives in
//! `Content-Location` (`/threads/{t}/runs/{r}` or `/runs/{r}`), as
//! LangGraph's clients read it; a wait answers the thread's values once
//! the job has ended or parked.

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;

use super::super::AppState;
use super::super::auth::Caller;
use super::super::body::{JsonBody, Path, Query};
use super::super::conversations::{check_id, conversation, jobs_of};
use super::super::document::{QUOTA, answers};
use super::super::error::{ApiError, ErrorCode};
use super::super::feed::wait_finished;
use super::super::job_actions::{delete_ended, settled};
use super::super::trace_context::CallerTrace;
use super::listing::{self, page};
use super::messages;
use super::resume;
use super::runs::{self, Multitask, OnThread, Run, RunRequest, RunStatus};
use super::state;
use super::threads::own_thread;
use super::waiting::kept_alive;
use crate::access::policy::Action;
use crate::queue::{Created, Job, JobId, JobState, StoredThread};

fn thread_not_found(id: &str) -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        format!(
            "no thread {id:?}: a thread is a conversation of this key (POST /threads makes one; a run with `if_not_exists: create` does too)"
        ),
    )
}

fn run_not_found(thread: &str, run: &str) -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        format!("thread {thread:?} has no run {run:?} (GET /threads/{thread}/runs lists them)"),
    )
}

/// The caller's thread `id`, made first when `if_not_exists` is `create`
/// (a run's or a cron's); else the 404 of a thread it does not have.
pub(super) async fn thread_for(
    state: &AppState,
    caller: &Caller,
    id: &str,
    if_not_exists: Option<&str>,
) -> Result<StoredThread, ApiError> {
    let owner = caller.name();
    if let Some(thread) = state.queue.thread(owner, id).await? {
        return Ok(thread);
    }
    if if_not_exists != Some("create") {
        return Err(thread_not_found(id));
    }
    check_id(id).map_err(|_| {
        ApiError::field(
            ErrorCode::InvalidRequest,
            "thread_id",
            format!("invalid thread id {id:?}: use 1 to 128 letters, digits, `-`, `_`, `.` or `:`"),
        )
    })?;
    caller.authorize(Action::WriteConversation, &conversation(owner), || {
        thread_not_found(id)
    })?;
    match state.queue.create_thread(owner, id, Map::new()).await? {
        Created::New(thread) | Created::Existing(thread) => Ok(thread),
    }
}

/// Readies the caller's thread `id` for a new run: made first when
/// `if_not_exists` is `create`; while one of its runs is queued or running,
/// refused, queued behind that run, or that run stopped first
/// (`multitask`). Where the run stands among the thread's turns.
async fn ready_thread<'a>(
    state: &AppState,
    caller: &Caller,
    id: &'a str,
    request: &RunRequest,
) -> Result<OnThread<'a>, ApiError> {
    let owner = caller.name();
    let thread = thread_for(state, caller, id, request.if_not_exists.as_deref()).await?;
    let on_thread = |first| OnThread {
        id,
        first,
        after_turns: false,
    };
    if !thread.busy {
        return Ok(on_thread(thread.newest.is_none()));
    }
    match runs::multitask_of(request)? {
        Multitask::Reject => Err(ApiError::new(
            ErrorCode::InvalidState,
            format!(
                "thread {id:?} is busy: a run of it is queued or running (multitask_strategy `reject`); wait for it (GET /threads/{id}/runs), cancel it, send `enqueue` to run after it, or `interrupt` or `rollback` to stop it first"
            ),
        )),
        // Its time to start is when the runs before it end.
        Multitask::Enqueue if request.after_seconds.is_some() => Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "after_seconds",
            format!(
                "thread {id:?} is busy: a run queued behind its runs (`enqueue`) starts when they end, so it takes no `after_seconds`; send it without, or once the thread is idle"
            ),
        )),
        Multitask::Enqueue => Ok(OnThread {
            id,
            first: false,
            after_turns: true,
        }),
        strategy => {
            // The new run is checked before the busy one is stopped: a
            // request that would be refused stops nothing.
            runs::checked(state, caller, request).await?;
            stop_busy(state, caller, id, strategy == Multitask::Rollback).await?;
            let thread = state.queue.thread(owner, id).await?;
            Ok(on_thread(thread.is_none_or(|t| t.newest.is_none())))
        }
    }
}

/// Stops the caller's thread `id`'s runs that are queued or running, before
/// a new run starts: cancelled (as the key may cancel: scope `operate`),
/// their steps so far kept; with `delete`, deleted too, as if they never
/// ran.
async fn stop_busy(
    state: &AppState,
    caller: &Caller,
    id: &str,
    delete: bool,
) -> Result<(), ApiError> {
    let busy = jobs_of(state, caller.name(), id)
        .await?
        .into_iter()
        .filter(|job| matches!(job.state, JobState::Queued | JobState::Running));
    for job in busy {
        caller.stored_job(state, Action::CancelJob, &job.id).await?;
        if let Some(changed) = state.queue.cancel(&job.id).await? {
            settled(state, changed);
        }
        let ended = wait_finished(state, &job.id).await?;
        if delete && ended.state.is_terminal() {
            delete_ended(state, caller, &job.id).await?;
        }
    }
    Ok(())
}

/// `answer` with the run's address in `Content-Location`.
pub(super) fn located(job: &Job, answer: impl IntoResponse) -> Response {
    let at = match &job.conversation_id {
        Some(thread) => format!("/threads/{thread}/runs/{}", job.id),
        None => format!("/runs/{}", job.id),
    };
    let mut headers = HeaderMap::new();
    if let Ok(value) = HeaderValue::from_str(&at) {
        headers.insert(header::CONTENT_LOCATION, value);
    }
    (headers, answer).into_response()
}

/// The values a waited-for run answers: its thread's (or, stateless, its
/// own), with `__error__` when its job failed.
pub(super) async fn values_after(
    state: &AppState,
    caller: &Caller,
    job: &Job,
) -> Result<Value, ApiError> {
    let mut values = match &job.conversation_id {
        Some(thread) => state::values(&state::checkpoints(state, caller.name(), thread).await?),
        None => {
            let journal = state.queue.journal(&job.id).await?;
            let steps = messages::steps_of(job, &journal);
            json!({"messages": steps.into_iter().map(|s| s.message).collect::<Vec<_>>()})
        }
    };
    if matches!(RunStatus::of(job), RunStatus::Error | RunStatus::Timeout)
        && let Value::Object(values) = &mut values
    {
        values.insert(
            "__error__".to_string(),
            json!({"error": "JobFailed", "message": job.error.clone().unwrap_or_default()}),
        );
    }
    Ok(values)
}

/// Starts a run on the caller's thread `id`, as job `job` when the caller
/// picked its id.
pub(super) async fn start_on_thread(
    state: &AppState,
    caller: &Caller,
    trace: &CallerTrace,
    id: &str,
    request: &RunRequest,
    job: Option<JobId>,
) -> Result<Job, ApiError> {
    let on_thread = ready_thread(state, caller, id, request).await?;
    runs::start(state, caller, trace, request, Some(on_thread), job).await
}

/// What starting a run may answer besides its success (create and wait,
/// on a thread or stateless).
pub(super) const START_REFUSALS: [(u16, &str); 4] = [
    (404, "No such thread or assistant for the key"),
    (
        409,
        "The thread has a run queued or running; or a resume, and no run of it is parked",
    ),
    (
        422,
        "A field is invalid, or one the daemon does not take, named",
    ),
    QUOTA,
];

/// A run create in the API document.
pub(super) fn create_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Start a run: a job of the assistant's bundle, continuing the thread")
        .description(
            "Admitted as any submit. `Content-Location` names the run. A run on a thread \
             that has a run queued or running is a 409 (`multitask_strategy` `reject`), or \
             waits until the runs before it end (`enqueue`: pending meanwhile), or stops that \
             run first (`interrupt`: cancelled; `rollback`: cancelled and deleted). \
             With `command.resume`, the thread's parked run goes on instead.",
        )
        .response_with::<200, Json<Run>, _>(|r| r.description("The run, pending"));
    answers(op, &START_REFUSALS)
}

/// `POST /threads/{thread_id}/runs`.
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    trace: CallerTrace,
    Path(id): Path<String>,
    JsonBody(request): JsonBody<RunRequest>,
) -> Result<Response, ApiError> {
    let job = match runs::command_of(&request) {
        Some(command) => resume_on_thread(&state, &caller, &id, command).await?,
        None => start_on_thread(&state, &caller, &trace, &id, &request, None).await?,
    };
    Ok(located(&job, Json(runs::view(&job))))
}

/// Resumes the caller's thread `id`'s parked run with `command`: the job,
/// going on.
async fn resume_on_thread(
    state: &AppState,
    caller: &Caller,
    id: &str,
    command: &Value,
) -> Result<Job, ApiError> {
    let pending = resume::find(state, caller, id, command).await?;
    Ok(resume::take(state, caller, pending).await?.job)
}

/// A run wait in the API document.
pub(super) fn wait_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Start a run and answer its thread's values once it ended or parked")
        .response_with::<200, Json<Value>, _>(|r| {
            r.description("`{\"messages\": […]}`, with `__error__` when the run failed")
        });
    answers(op, &START_REFUSALS)
}

/// `POST /threads/{thread_id}/runs/wait`.
pub async fn wait(
    State(state): State<AppState>,
    caller: Caller,
    trace: CallerTrace,
    Path(id): Path<String>,
    JsonBody(request): JsonBody<RunRequest>,
) -> Result<Response, ApiError> {
    let job = match runs::command_of(&request) {
        Some(command) => resume_on_thread(&state, &caller, &id, command).await?,
        None => start_on_thread(&state, &caller, &trace, &id, &request, None).await?,
    };
    Ok(located(
        &job,
        answered_when_ended(state, caller, job.id.clone(), false),
    ))
}

/// The values of job `id` once it ended or parked, kept alive meanwhile
/// (`waiting`); with `delete`, its job deleted after (a stateless run's
/// `on_completion`).
fn answered_when_ended(state: AppState, caller: Caller, id: JobId, delete: bool) -> Response {
    let heartbeat = state.sse_heartbeat;
    kept_alive(heartbeat, async move {
        let ended = wait_finished(&state, &id).await?;
        let values = values_after(&state, &caller, &ended).await?;
        if delete && ended.state.is_terminal() {
            state.queue.delete_finished(&ended.id).await?;
        }
        Ok(values)
    })
}

/// Whether a stateless run's job goes once it ended (`on_completion`).
pub(super) fn deleted_after(request: &RunRequest) -> Result<bool, ApiError> {
    match request.on_completion.as_deref() {
        None | Some("delete") => Ok(true),
        Some("keep") => Ok(false),
        Some(other) => Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "on_completion",
            format!("on_completion {other:?} is not one of `delete`, `keep`"),
        )),
    }
}

/// Deletes a stateless run's job once it has ended (a parked one stays:
/// it waits for a person), and once the stream that reads it, if any, is
/// done (`read`: its sender goes with the stream). Lost with the daemon,
/// as its retention then purges the job.
pub(super) async fn delete_when_ended(
    state: AppState,
    id: JobId,
    read: Option<oneshot::Receiver<()>>,
) {
    let Ok(job) = wait_finished(&state, &id).await else {
        return;
    };
    if let Some(read) = read {
        // Nothing is ever sent: the sender's drop is the signal.
        let _ = read.await;
    }
    if job.state.is_terminal()
        && let Err(e) = state.queue.delete_finished(&id).await
    {
        tracing::warn!(job_id = %id, error = %e, "a stateless run's job was not deleted");
    }
}

/// `POST /runs` (on the thread `thread_id` names, when it names one).
pub async fn create_stateless(
    State(state): State<AppState>,
    caller: Caller,
    trace: CallerTrace,
    JsonBody(request): JsonBody<RunRequest>,
) -> Result<Response, ApiError> {
    if let Some(thread) = request.thread_id.clone() {
        return create(State(state), caller, trace, Path(thread), JsonBody(request)).await;
    }
    let delete = deleted_after(&request)?;
    let job = runs::start(&state, &caller, &trace, &request, None, None).await?;
    if delete {
        tokio::spawn(delete_when_ended(state.clone(), job.id.clone(), None));
    }
    Ok(located(&job, Json(runs::view(&job))))
}

/// `POST /runs/wait` (on the thread `thread_id` names, when it names one).
pub async fn wait_stateless(
    State(state): State<AppState>,
    caller: Caller,
    trace: CallerTrace,
    JsonBody(request): JsonBody<RunRequest>,
) -> Result<Response, ApiError> {
    if let Some(thread) = request.thread_id.clone() {
        return wait(State(state), caller, trace, Path(thread), JsonBody(request)).await;
    }
    let delete = deleted_after(&request)?;
    let job = runs::start(&state, &caller, &trace, &request, None, None).await?;
    Ok(located(
        &job,
        answered_when_ended(state, caller, job.id.clone(), delete),
    ))
}

/// The caller's run `run` of its thread `thread`, for `action`.
pub(super) async fn run_of(
    state: &AppState,
    caller: &Caller,
    action: Action,
    thread: &str,
    run: &str,
) -> Result<Job, ApiError> {
    let id = JobId::from(run.to_string());
    let job = caller
        .stored_job(state, action, &id)
        .await
        .map_err(|e| match e.code {
            ErrorCode::NotFound => run_not_found(thread, run),
            _ => e,
        })?;
    // A thread is its key's alone: another key's job is no run of it.
    if job.conversation_id.as_deref() != Some(thread) || job.owner.as_deref() != Some(caller.name())
    {
        return Err(run_not_found(thread, run));
    }
    Ok(job)
}

/// `GET /threads/{thread_id}/runs/{run_id}` in the API document.
pub(super) fn get_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("A run of the thread")
        .response_with::<200, Json<Run>, _>(|r| r.description("The run"));
    answers(op, &[(404, "The thread has no such run for the key")])
}

/// `GET /threads/{thread_id}/runs/{run_id}`.
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path((thread, run)): Path<(String, String)>,
) -> Result<Json<Run>, ApiError> {
    let job = run_of(&state, &caller, Action::ReadJob, &thread, &run).await?;
    Ok(Json(runs::view(&job)))
}

/// `GET /threads/{thread_id}/runs/{run_id}/join` in the API document.
pub(super) fn join_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Wait for a run of the thread: its thread's values once it ended or parked")
        .response_with::<200, Json<Value>, _>(|r| {
            r.description("`{\"messages\": […]}`, with `__error__` when the run failed")
        });
    answers(op, &[(404, "The thread has no such run for the key")])
}

/// `GET /threads/{thread_id}/runs/{run_id}/join`.
pub async fn join(
    State(state): State<AppState>,
    caller: Caller,
    Path((thread, run)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let job = run_of(&state, &caller, Action::ReadJob, &thread, &run).await?;
    Ok(answered_when_ended(state, caller, job.id, false))
}

/// `?wait=` and `?action=` of a run's cancel.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct CancelQuery {
    /// `1`/`true`: answer once the run has stopped, with its thread's values.
    #[serde(default)]
    pub wait: Option<String>,
    /// `interrupt` (the default) or `rollback` (the run is deleted once it
    /// stopped).
    #[serde(default)]
    #[schemars(extend("enum" = ["interrupt", "rollback"]))]
    pub action: Option<String>,
}

/// `POST /threads/{thread_id}/runs/{run_id}/cancel` in the API document.
pub(super) fn cancel_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Cancel a run of the thread (`action=rollback` also deletes it)")
        .response_with::<202, (), _>(|r| r.description("Cancelled; the run stops at once"))
        .response_with::<200, Json<Value>, _>(|r| {
            r.description("With `wait=1`: the thread's values once the run stopped")
        });
    answers(
        op,
        &[
            (404, "The thread has no such run for the key"),
            (422, "`action` is not `interrupt` or `rollback`"),
        ],
    )
}

impl CancelQuery {
    /// Whether the run is deleted once it stopped (`rollback`).
    pub(super) fn rollback(&self) -> Result<bool, ApiError> {
        match self.action.as_deref() {
            None | Some("interrupt") => Ok(false),
            Some("rollback") => Ok(true),
            Some(other) => Err(ApiError::field(
                ErrorCode::InvalidRequest,
                "action",
                format!("action {other:?} is not one of `interrupt`, `rollback`"),
            )),
        }
    }

    /// Whether the answer waits until the run stopped.
    pub(super) fn waits(&self) -> bool {
        matches!(self.wait.as_deref(), Some("1" | "true" | "yes"))
    }
}

/// Cancels the caller's run `job`; with `wait` or `rollback`, waits until
/// it stopped, and with `rollback` deletes it then. The job as it stopped,
/// when waited for.
pub(super) async fn stop_run(
    state: &AppState,
    caller: &Caller,
    job: &Job,
    wait: bool,
    rollback: bool,
) -> Result<Option<Job>, ApiError> {
    if let Some(changed) = state.queue.cancel(&job.id).await? {
        settled(state, changed);
    }
    if !wait && !rollback {
        return Ok(None);
    }
    let ended = wait_finished(state, &job.id).await?;
    if rollback && ended.state.is_terminal() {
        delete_ended(state, caller, &ended.id).await?;
    }
    Ok(Some(ended))
}

/// `POST /threads/{thread_id}/runs/{run_id}/cancel`.
pub async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    Path((thread, run)): Path<(String, String)>,
    Query(query): Query<CancelQuery>,
) -> Result<Response, ApiError> {
    let (rollback, wait) = (query.rollback()?, query.waits());
    let job = run_of(&state, &caller, Action::CancelJob, &thread, &run).await?;
    match stop_run(&state, &caller, &job, wait, rollback).await? {
        Some(ended) if wait => {
            Ok(Json(values_after(&state, &caller, &ended).await?).into_response())
        }
        _ => Ok(StatusCode::ACCEPTED.into_response()),
    }
}

/// `DELETE /threads/{thread_id}/runs/{run_id}` in the API document.
pub(super) fn delete_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Delete a run of the thread that has ended (its job, events and journal)")
        .response_with::<204, (), _>(|r| r.description("Deleted"));
    answers(
        op,
        &[
            (404, "The thread has no such run for the key"),
            (409, "The run has not ended: cancel it first"),
        ],
    )
}

/// `DELETE /threads/{thread_id}/runs/{run_id}`.
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path((thread, run)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let job = run_of(&state, &caller, Action::DeleteJob, &thread, &run).await?;
    delete_ended(&state, &caller, &job.id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `?limit=`, `?offset=` and `?status=` of a thread's run listing.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct ListQuery {
    /// At most this many (1 to 1000; default 10).
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<usize>,
    #[serde(default)]
    pub offset: Option<usize>,
    #[serde(default)]
    pub status: Option<RunStatus>,
}

/// `GET /threads/{thread_id}/runs` in the API document.
pub(super) fn list_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("The thread's runs, newest first")
        .response_with::<200, Json<Vec<Run>>, _>(|r| r.description("The runs of the page"));
    answers(
        op,
        &[
            (404, "The key has no thread of that id"),
            (422, "A parameter is out of range or unknown"),
        ],
    )
}

/// `GET /threads/{thread_id}/runs`.
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path(thread): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let bounds = page(query.limit, query.offset)?;
    own_thread(&state, &caller, &thread).await?;
    let mut jobs = jobs_of(&state, caller.name(), &thread).await?;
    jobs.reverse();
    let found: Vec<Run> = jobs
        .iter()
        .map(runs::view)
        .filter(|run| query.status.is_none_or(|status| run.status == status))
        .collect();
    let (shown, next) = listing::paged(found, bounds);
    Ok(listing::answer(shown, next, &[]))
}
