//! `GET /v1/jobs/{id}/artifacts[/{name}]`: what a workflow job's stages
//! produced (stage inputs, gate reports, reviews, the fatal report), read
//! from the job's journal where the worker stores them.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::AppState;
use super::auth::Caller;
use super::body::Path;
use super::error::{ApiError, ErrorCode};
use crate::access::policy::Action;
use crate::journal::ARTIFACTS_SCOPE;
use crate::queue::JobId;

/// Every artifact of the job: `{job_id, artifacts: [{name, body}]}` in name order.
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let artifacts = read(&state, &caller, &JobId::from(id.clone())).await?;
    Ok(Json(json!({"job_id": id, "artifacts": artifacts})))
}

/// One artifact's body; 404 naming the job and the artifacts it has.
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let artifacts = read(&state, &caller, &JobId::from(id.clone())).await?;
    artifacts
        .iter()
        .find(|a| a["name"] == name.as_str())
        .map(|a| Json(a["body"].clone()))
        .ok_or_else(|| {
            let names: Vec<&str> = artifacts
                .iter()
                .filter_map(|a| a["name"].as_str())
                .collect();
            ApiError::new(
                ErrorCode::NotFound,
                format!(
                    "job {id} has no artifact {name:?} (it has: {})",
                    if names.is_empty() {
                        "none".to_string()
                    } else {
                        names.join(", ")
                    }
                ),
            )
        })
}

pub(super) async fn read(
    state: &AppState,
    caller: &Caller,
    id: &JobId,
) -> Result<Vec<Value>, ApiError> {
    caller.job(Action::ReadJob, id, state.queue.get(id).await?)?;
    let scope = format!("{ARTIFACTS_SCOPE}/");
    let mut artifacts: Vec<Value> = state
        .queue
        .journal(id)
        .await?
        .into_iter()
        .filter(|e| e.scope == scope)
        .map(|e| {
            json!({
                "name": e.step,
                "body": serde_json::from_str::<Value>(&e.body).unwrap_or(Value::String(e.body)),
            })
        })
        .collect();
    artifacts.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    Ok(artifacts)
}
