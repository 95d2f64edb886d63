//! A thread's state and history: `GET /threads/{id}/state` (its latest
//! checkpoint), `GET …/state/{checkpoint_id}` and `POST …/state/checkpoint`
//! (one checkpoint), `POST` and `GET …/history` (its checkpoints, newest
//! first).
//! Writing a state (`POST` or `PATCH …/state`) is refused by name: a
//! thread's state is its journals, and a fork changes it.

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::super::AppState;
use super::super::auth::Caller;
use super::super::body::{JsonBody, Path, Query};
use super::super::conversations::{conversation, jobs_of};
use super::super::document::answers;
use super::super::error::{ApiError, ErrorCode};
use super::interrupts;
use super::listing::has_metadata;
use super::state::{self, Checkpoint, ThreadState};
use super::threads::{not_found, own_thread};
use crate::access::policy::Action;

/// The most checkpoints one history answers.
const MAX_HISTORY: usize = 1000;

/// A checkpoint as a client names it: its id (other keys are taken and
/// change nothing).
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct CheckpointName {
    #[serde(default)]
    pub checkpoint_id: Option<String>,
}

/// The body of `POST /threads/{thread_id}/state/checkpoint` (`subgraphs`
/// is taken and changes nothing: a thread has none).
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct CheckpointRequest {
    pub checkpoint: CheckpointName,
}

/// `before` in a history request: a checkpoint id or a checkpoint.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Before {
    Id(String),
    Checkpoint(CheckpointName),
}

/// The body of `POST /threads/{thread_id}/history` (`checkpoint`, a
/// subgraph's namespace, is taken and changes nothing: a thread has none).
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct HistoryRequest {
    /// At most this many (1 to 1000; default 10).
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<usize>,
    /// Only checkpoints older than this one.
    #[serde(default)]
    pub before: Option<Before>,
    /// Only checkpoints whose metadata has each of these keys at its value.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
}

/// The checkpoints of the caller's thread `id`, oldest first, or its 404.
pub(super) async fn checkpoints_of(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<Vec<Checkpoint>, ApiError> {
    own_thread(state, caller, id).await?;
    state::checkpoints(state, caller.name(), id).await
}

/// The state at the checkpoint named `checkpoint` of the caller's thread.
pub(super) async fn state_at(
    state: &AppState,
    caller: &Caller,
    id: &str,
    checkpoint: Option<&str>,
) -> Result<ThreadState, ApiError> {
    let all = checkpoints_of(state, caller, id).await?;
    let place = match checkpoint {
        None => all.len().checked_sub(1),
        Some(wanted) => Some(all.iter().position(|c| c.id() == wanted).ok_or_else(|| {
            ApiError::new(
                ErrorCode::NotFound,
                format!(
                    "thread {id:?} has no checkpoint {wanted:?}: its checkpoints are `<run id>:<step>` (POST /threads/{id}/history lists them)"
                ),
            )
        })?),
    };
    let mut found = place
        .and_then(|at| state::at(id, &all, at))
        .unwrap_or_else(|| state::empty(id));
    // At its latest step, a thread whose run is parked for a person waits
    // on the call's interrupt: the task `tools`, next.
    if checkpoint.is_none()
        && let Some(newest) = jobs_of(state, caller.name(), id).await?.last()
    {
        let interrupts = interrupts::of_job(newest);
        if !interrupts.is_empty() {
            found.tasks = vec![interrupts::waiting_task(newest, &interrupts)];
            found.next = vec!["tools"];
            found.interrupts = interrupts;
        }
    }
    Ok(found)
}

/// `GET /threads/{thread_id}/state` in the API document.
pub(super) fn get_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("A thread's state: its messages and what runs next, at its latest step")
        .response_with::<200, Json<ThreadState>, _>(|r| r.description("The state"));
    answers(op, &[(404, "The key has no thread of that id")])
}

/// `GET /threads/{thread_id}/state` (`subgraphs` is taken and changes
/// nothing: a thread has none).
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<ThreadState>, ApiError> {
    Ok(Json(state_at(&state, &caller, &id, None).await?))
}

/// `GET /threads/{thread_id}/state/{checkpoint_id}` in the API document.
pub(super) fn at_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("A thread's state at one checkpoint (`<run id>:<step>`)")
        .response_with::<200, Json<ThreadState>, _>(|r| r.description("The state"));
    answers(
        op,
        &[(
            404,
            "The key has no thread of that id, or it no such checkpoint",
        )],
    )
}

/// `GET /threads/{thread_id}/state/{checkpoint_id}`.
pub async fn at(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, checkpoint)): Path<(String, String)>,
) -> Result<Json<ThreadState>, ApiError> {
    Ok(Json(
        state_at(&state, &caller, &id, Some(&checkpoint)).await?,
    ))
}

/// `POST /threads/{thread_id}/state/checkpoint`.
pub async fn at_checkpoint(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(request): JsonBody<CheckpointRequest>,
) -> Result<Json<ThreadState>, ApiError> {
    let wanted = request.checkpoint.checkpoint_id;
    Ok(Json(
        state_at(&state, &caller, &id, wanted.as_deref()).await?,
    ))
}

/// `POST /threads/{thread_id}/history` in the API document.
pub(super) fn history_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("A thread's checkpoints, newest first: one per durable step of its runs")
        .response_with::<200, Json<Vec<ThreadState>>, _>(|r| r.description("The states"));
    answers(
        op,
        &[
            (404, "The key has no thread of that id"),
            (422, "A field is out of range or unknown"),
        ],
    )
}

/// `POST /threads/{thread_id}/history`.
pub async fn history(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(request): JsonBody<HistoryRequest>,
) -> Result<Json<Vec<ThreadState>>, ApiError> {
    let before = match &request.before {
        Some(Before::Id(wanted))
        | Some(Before::Checkpoint(CheckpointName {
            checkpoint_id: Some(wanted),
        })) => Some(wanted.as_str()),
        _ => None,
    };
    let page = HistoryPage {
        limit: request.limit,
        before,
        metadata: request.metadata.as_ref(),
    };
    Ok(Json(page.of(&state, &caller, &id).await?))
}

/// `?limit=` and `?before=` of `GET /threads/{thread_id}/history`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct HistoryQuery {
    /// At most this many (1 to 1000; default 10).
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<usize>,
    /// Only checkpoints older than this one (its id).
    #[serde(default)]
    pub before: Option<String>,
}

/// `GET /threads/{thread_id}/history` in the API document.
pub(super) fn history_get_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    history_doc(op).description("`POST …/history` with its `limit` and `before` as parameters.")
}

/// `GET /threads/{thread_id}/history` (the Agent Protocol's, and
/// LangGraph's server's too).
pub async fn history_get(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(query): Query<HistoryQuery>,
) -> Result<Json<Vec<ThreadState>>, ApiError> {
    let page = HistoryPage {
        limit: query.limit,
        before: query.before.as_deref(),
        metadata: None,
    };
    Ok(Json(page.of(&state, &caller, &id).await?))
}

/// Which of a thread's checkpoints a history answers.
struct HistoryPage<'a> {
    limit: Option<usize>,
    /// Only those older than the checkpoint of this id.
    before: Option<&'a str>,
    /// Only those whose metadata has each of these keys at its value.
    metadata: Option<&'a Map<String, Value>>,
}

impl HistoryPage<'_> {
    /// The caller's thread `id`'s states of this page, newest first.
    async fn of(
        &self,
        state: &AppState,
        caller: &Caller,
        id: &str,
    ) -> Result<Vec<ThreadState>, ApiError> {
        let limit = self.limit.unwrap_or(10);
        if !(1..=MAX_HISTORY).contains(&limit) {
            return Err(ApiError::field(
                ErrorCode::InvalidRequest,
                "limit",
                format!("limit {limit} is out of range: send 1 to {MAX_HISTORY}"),
            ));
        }
        let all = checkpoints_of(state, caller, id).await?;
        let before = match self.before {
            None => all.len(),
            Some(wanted) => all.iter().position(|c| c.id() == wanted).unwrap_or(0),
        };
        Ok((0..before)
            .rev()
            .filter_map(|at| state::at(id, &all, at))
            .filter(|s| has_metadata(&Value::Object(s.metadata.clone()), self.metadata))
            .take(limit)
            .collect())
    }
}

/// `POST` and `PATCH /threads/{thread_id}/state` in the API document.
pub(super) fn write_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    op.summary("Refused: a thread's state is its runs' journals")
        .description(
            "Always `422`: a thread's state is read from the journals of its runs, which \
             never change. To start from a changed state, fork the run at a step \
             (`POST /v1/jobs/{id}/fork`) or start a new run on the thread.",
        )
        .response_with::<422, Json<super::super::error::ErrorBody>, _>(|r| {
            r.description("The state cannot be written")
        })
}

/// `POST` and `PATCH /threads/{thread_id}/state`.
pub async fn write(caller: Caller, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    caller.authorize(
        Action::WriteConversation,
        &conversation(caller.name()),
        || not_found(&id),
    )?;
    Err(ApiError::field(
        ErrorCode::InvalidRequest,
        "values",
        format!(
            "thread {id:?}: a thread's state is its runs' journals and is not written: fork a run at a step (POST /v1/jobs/{{id}}/fork) or start a new run on the thread"
        ),
    ))
}
