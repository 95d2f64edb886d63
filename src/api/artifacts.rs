//! `GET /v1/jobs/{id}/artifacts[/{name}]`: what a workflow job's stages
//! produced (stage inputs, gate reports, reviews, the fatal report), read
//! from the job's journal where the worker stores them.

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::AppState;
use super::auth::Caller;
use super::body::Path;
use super::error::{ApiError, ErrorCode};
use crate::access::policy::Action;
use crate::journal::ARTIFACTS_SCOPE;
use crate::queue::JobId;

/// A workflow job's artifacts, in name order.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Artifacts {
    pub job_id: String,
    pub artifacts: Vec<Artifact>,
}

/// What one stage stored under a name.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Artifact {
    pub name: String,
    /// Its body: JSON as stored, or the stored text as a string.
    pub body: Value,
}

/// `GET /v1/jobs/{id}/artifacts` in the API document.
pub(super) fn list_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    op.summary(
        "A workflow job's artifacts (stage inputs, gate reports, reviews, the fatal report), \
         in name order",
    )
    .response_with::<200, Json<Artifacts>, _>(|r| r.description("The artifacts"))
}

/// `GET /v1/jobs/{id}/artifacts/{name}` in the API document.
pub(super) fn get_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    op.summary("One artifact's body")
        .response_with::<200, Json<Value>, _>(|r| {
            r.description("The artifact's body: JSON as stored, or its text as a string")
        })
}

/// Every artifact of the job, in name order.
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Artifacts>, ApiError> {
    let artifacts = read(&state, &caller, &JobId::from(id.clone())).await?;
    Ok(Json(Artifacts {
        job_id: id,
        artifacts,
    }))
}

/// One artifact's body; 404 naming the job and the artifacts it has.
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let mut artifacts = read(&state, &caller, &JobId::from(id.clone())).await?;
    if let Some(found) = artifacts.iter().position(|a| a.name == name) {
        return Ok(Json(artifacts.swap_remove(found).body));
    }
    let names: Vec<&str> = artifacts.iter().map(|a| a.name.as_str()).collect();
    let has = match names.is_empty() {
        true => "none".to_string(),
        false => names.join(", "),
    };
    Err(ApiError::new(
        ErrorCode::NotFound,
        format!("job {id} has no artifact {name:?} (it has: {has})"),
    ))
}

/// The artifacts of job `id` the caller may read, in name order.
pub(super) async fn read(
    state: &AppState,
    caller: &Caller,
    id: &JobId,
) -> Result<Vec<Artifact>, ApiError> {
    caller.stored_job(state, Action::ReadJob, id).await?;
    let scope = format!("{ARTIFACTS_SCOPE}/");
    let mut artifacts: Vec<Artifact> = state
        .queue
        .journal(id)
        .await?
        .into_iter()
        .filter(|e| e.scope == scope)
        .map(|e| Artifact {
            name: e.step,
            body: stored_json(e.body),
        })
        .collect();
    artifacts.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(artifacts)
}

/// A stored body as JSON: parsed when it is, else its text as a string.
pub(super) fn stored_json(body: String) -> Value {
    serde_json::from_str::<Value>(&body).unwrap_or(Value::String(body))
}
