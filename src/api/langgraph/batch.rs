//! `POST /runs/batch`: several stateless runs in one request (LangGraph's
//! `create_batch`), each admitted as `POST /runs` admits one. Every run is
//! read and checked before any starts, so a batch with a malformed run
//! starts nothing; a refusal at admission (a quota used up) ends the batch
//! there, the runs before it started, and names the run it stopped at.

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;

use super::super::AppState;
use super::super::auth::Caller;
use super::super::body::JsonList;
use super::super::document::answers;
use super::super::error::{ApiError, ErrorCode};
use super::super::trace_context::CallerTrace;
use super::run_routes::{START_REFUSALS, delete_when_ended, deleted_after};
use super::runs::{self, Run, RunRequest};

/// The most runs one batch starts.
pub(super) const MAX_RUNS: usize = 1_000;

/// `POST /runs/batch` in the API document.
pub(super) fn batch_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Start several stateless runs: each a job of its assistant's bundle")
        .description(
            "A JSON array of run requests, 1 to 1000, each as `POST /runs` takes it. Every run is \
             checked before any starts; a refusal at admission names the run it stopped at \
             (`[i]`), those before it started.",
        )
        .response_with::<200, Json<Vec<Run>>, _>(|r| r.description("The runs, pending, in order"));
    answers(op, &START_REFUSALS)
}

/// `error` of the run at `index`: its field named under `[index]`.
fn of_run(index: usize, mut error: ApiError) -> ApiError {
    error.field = Some(match error.field.take() {
        Some(field) => format!("[{index}].{field}"),
        None => format!("[{index}]"),
    });
    error.message = format!("run [{index}] of the batch: {}", error.message);
    error
}

/// `POST /runs/batch`.
pub async fn batch(
    State(state): State<AppState>,
    caller: Caller,
    trace: CallerTrace,
    JsonList(requests): JsonList<RunRequest>,
) -> Result<Json<Vec<Run>>, ApiError> {
    if requests.is_empty() || requests.len() > MAX_RUNS {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "batch",
            format!("a batch holds 1 to {MAX_RUNS} runs, not {}", requests.len()),
        ));
    }
    let mut deletes = Vec::with_capacity(requests.len());
    for (index, request) in requests.iter().enumerate() {
        runs::checked(&state, &caller, request)
            .await
            .map_err(|e| of_run(index, e))?;
        deletes.push(deleted_after(request).map_err(|e| of_run(index, e))?);
    }
    let mut started = Vec::with_capacity(requests.len());
    for (index, (request, delete)) in requests.iter().zip(deletes).enumerate() {
        let job = runs::start(&state, &caller, &trace, request, None, None)
            .await
            .map_err(|e| of_run(index, e))?;
        if delete {
            tokio::spawn(delete_when_ended(state.clone(), job.id.clone(), None));
        }
        started.push(runs::view(&job));
    }
    Ok(Json(started))
}
