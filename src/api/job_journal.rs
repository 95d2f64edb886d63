//! `GET /v1/jobs/{id}/journal`: a job's recorded steps, bodies as JSON.

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::AppState;
use super::auth::Caller;
use super::body::Path;
use super::error::ApiError;
use crate::access::policy::Action;
use crate::queue::JobId;

/// A job's step journal.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Journal {
    pub job_id: JobId,
    pub steps: Vec<JournalStep>,
}

/// One recorded step.
#[derive(Debug, Serialize, JsonSchema)]
pub struct JournalStep {
    /// The run it belongs to: `""` for the job's own, `"2:call_1/"` for the
    /// agent run started by call `call_1` of turn 2.
    pub scope: String,
    pub turn: u32,
    /// `input`, `reply`, `start@<position>` or `result@<position>`.
    pub step: String,
    /// Its body: JSON as stored, or the stored text as a string.
    pub body: Value,
}

/// `GET /v1/jobs/{id}/journal` in the API document.
pub(super) fn journal_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    op.summary(
        "The job's step journal: its recorded input, model replies, tool starts and tool results",
    )
    .response_with::<200, Json<Journal>, _>(|r| r.description("The journal"))
}

/// `GET /v1/jobs/{id}/journal`: the recorded steps, bodies as JSON.
pub async fn journal(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Journal>, ApiError> {
    let id = JobId::from(id);
    caller.stored_job(&state, Action::ReadJob, &id).await?;
    let steps = state
        .queue
        .journal(&id)
        .await?
        .into_iter()
        .map(|e| JournalStep {
            scope: e.scope,
            turn: e.turn,
            step: e.step,
            body: super::artifacts::stored_json(e.body),
        })
        .collect();
    Ok(Json(Journal { job_id: id, steps }))
}
