//! The Agent Protocol's runs named by their id alone, on a thread or not:
//! `GET` and `DELETE /runs/{run_id}`, `GET /runs/{run_id}/wait`,
//! `POST /runs/{run_id}/cancel` and `POST /runs/search`. A run is a job
//! the key submitted (another key's is the same 404 as an unknown id);
//! each route does what its thread's counterpart in `run_routes` does.

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::super::AppState;
use super::super::auth::Caller;
use super::super::body::{JsonBody, Path, Query};
use super::super::document::answers;
use super::super::error::{ApiError, ErrorCode};
use super::super::feed::wait_finished;
use super::super::job_actions::delete_ended;
use super::assistants::resolve;
use super::listing::{self, has_metadata, page};
use super::run_routes::{CancelQuery, stop_run, values_after};
use super::runs::{self, Run, RunStatus};
use super::waiting::kept_alive;
use crate::access::policy::Action;
use crate::queue::{Job, JobFilter, JobId};

/// The most of a key's runs a search looks at: its newest this many.
pub const RUNS_SCANNED: usize = 10_000;

/// The jobs a search reads at a time.
const SCAN_PAGE: usize = 500;

fn not_found(run: &str) -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        format!("no run {run:?} of this key (POST /runs/search lists them)"),
    )
}

/// The caller's run `run`, on a thread or not, for `action`.
pub(super) async fn key_run(
    state: &AppState,
    caller: &Caller,
    action: Action,
    run: &str,
) -> Result<Job, ApiError> {
    let job = caller
        .stored_job(state, action, &JobId::from(run.to_string()))
        .await
        .map_err(|e| match e.code {
            ErrorCode::NotFound => not_found(run),
            _ => e,
        })?;
    // A run is its key's alone, whatever the key's scopes reach.
    if job.owner.as_deref() != Some(caller.name()) {
        return Err(not_found(run));
    }
    Ok(job)
}

/// `GET /runs/{run_id}` in the API document.
pub(super) fn get_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("A run of the key, on a thread or stateless")
        .response_with::<200, Json<Run>, _>(|r| r.description("The run"));
    answers(op, &[(404, "The key has no run of that id")])
}

/// `GET /runs/{run_id}`.
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(run): Path<String>,
) -> Result<Json<Run>, ApiError> {
    let job = key_run(&state, &caller, Action::ReadJob, &run).await?;
    Ok(Json(runs::view(&job)))
}

/// `DELETE /runs/{run_id}` in the API document.
pub(super) fn delete_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Delete a run of the key that has ended (its job, events and journal)")
        .response_with::<204, (), _>(|r| r.description("Deleted"));
    answers(
        op,
        &[
            (404, "The key has no run of that id"),
            (409, "The run has not ended: cancel it first"),
        ],
    )
}

/// `DELETE /runs/{run_id}`.
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(run): Path<String>,
) -> Result<StatusCode, ApiError> {
    let job = key_run(&state, &caller, Action::DeleteJob, &run).await?;
    delete_ended(&state, &caller, &job.id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// What `GET /runs/{run_id}/wait` answers: the Agent Protocol's
/// `RunWaitResponse`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct RunWait {
    /// The run as it ended or parked.
    pub run: Run,
    /// Its thread's values (a stateless run's own): `{"messages": […]}`,
    /// with `__error__` when it failed.
    pub values: Value,
}

/// `GET /runs/{run_id}/wait` in the API document.
pub(super) fn wait_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Wait for a run of the key: the run and its values once it ended or parked")
        .description(
            "Kept alive with a newline every heartbeat until the answer (JSON ignores it).",
        )
        .response_with::<200, Json<RunWait>, _>(|r| r.description("The run and its values"));
    answers(op, &[(404, "The key has no run of that id")])
}

/// `GET /runs/{run_id}/wait`.
pub async fn wait(
    State(state): State<AppState>,
    caller: Caller,
    Path(run): Path<String>,
) -> Result<Response, ApiError> {
    let job = key_run(&state, &caller, Action::ReadJob, &run).await?;
    let heartbeat = state.sse_heartbeat;
    Ok(kept_alive(heartbeat, async move {
        let ended = wait_finished(&state, &job.id).await?;
        let values = values_after(&state, &caller, &ended).await?;
        Ok(json!({"run": runs::view(&ended), "values": values}))
    }))
}

/// `POST /runs/{run_id}/cancel` in the API document.
pub(super) fn cancel_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Cancel a run of the key (`action=rollback` also deletes it)")
        .description("With `wait=true` the answer comes once the run has stopped.")
        .response_with::<204, (), _>(|r| r.description("Cancelled"));
    answers(
        op,
        &[
            (404, "The key has no run of that id"),
            (422, "`action` is not `interrupt` or `rollback`"),
        ],
    )
}

/// `POST /runs/{run_id}/cancel`.
pub async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    Path(run): Path<String>,
    Query(query): Query<CancelQuery>,
) -> Result<StatusCode, ApiError> {
    let rollback = query.rollback()?;
    let job = key_run(&state, &caller, Action::CancelJob, &run).await?;
    stop_run(&state, &caller, &job, query.waits(), rollback).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The body of `POST /runs/search`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(rename = "RunSearch")]
pub struct SearchRequest {
    /// Only runs whose metadata has each of these keys at exactly this
    /// value.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default)]
    pub status: Option<RunStatus>,
    /// Only the runs of this thread.
    #[serde(default)]
    pub thread_id: Option<String>,
    /// Only the runs of this agent (an assistant id or a bundle's name).
    #[serde(default)]
    pub agent_id: Option<String>,
    /// At most this many (1 to 1000; default 10).
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<usize>,
    /// After skipping this many.
    #[serde(default)]
    pub offset: Option<usize>,
}

/// `POST /runs/search` in the API document.
pub(super) fn search_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Search the key's runs, newest first")
        .description(
            "Among the key's newest 10,000 runs: those of `thread_id`, of `agent_id`, in \
             `status`, whose metadata has each key of `metadata` at its value. When more \
             runs follow the page, the header `X-Pagination-Next` holds the next offset.",
        )
        .response_with::<200, Json<Vec<Run>>, _>(|r| r.description("The runs of the page"));
    answers(
        op,
        &[
            (404, "`agent_id` names no loaded bundle the key may read"),
            (422, "A field is out of range or unknown"),
        ],
    )
}

/// `POST /runs/search`.
pub async fn search(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(request): JsonBody<SearchRequest>,
) -> Result<Response, ApiError> {
    let (limit, offset) = page(request.limit, request.offset)?;
    let agent = match &request.agent_id {
        Some(agent) => Some(resolve(&state, &caller, agent).await?),
        None => None,
    };
    let bundle = agent.as_ref().map(|target| target.bundle.clone());
    let agent_id = agent.map(|target| target.assistant_id);
    let owner = caller.name().to_string();
    let mut filter = JobFilter {
        owner: Some(owner.clone()),
        bundle,
        limit: SCAN_PAGE,
        ..Default::default()
    };
    if let Some(thread) = &request.thread_id {
        filter.conversation_id = Some(thread.clone());
        filter.conversation_owner = Some(owner);
    }
    // One past the page: whether another follows.
    let wanted = offset.saturating_add(limit).saturating_add(1);
    let (mut kept, mut scanned) = (Vec::new(), 0);
    while kept.len() < wanted && scanned < RUNS_SCANNED {
        let page = state.queue.list(filter.clone()).await?;
        scanned += page.jobs.len();
        kept.extend(
            page.jobs
                .iter()
                .map(runs::view)
                .filter(|run| request.status.is_none_or(|status| run.status == status))
                .filter(|run| agent_id.as_ref().is_none_or(|id| &run.assistant_id == id))
                .filter(|run| {
                    has_metadata(
                        &Value::Object(run.metadata.clone()),
                        request.metadata.as_ref(),
                    )
                }),
        );
        match page.next_cursor {
            Some(cursor) => filter.cursor = Some(cursor),
            None => break,
        }
    }
    let (shown, next) = listing::paged(kept, (limit, offset));
    Ok(listing::answer(shown, next, &[]))
}
