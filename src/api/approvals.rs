//! `GET /v1/jobs/{id}/approvals` and `POST /v1/jobs/{id}/approvals/{call}`:
//! what a parked job waits for, and a person's decision on it. The queue
//! checks the decision against the request and takes it at most once; this
//! module only says who decided.

use axum::Json;
use axum::extract::{Path, State};
use serde_json::{Value, json};

use super::AppState;
use super::body::JsonBody;
use super::error::{ApiError, ErrorCode};
use super::jobs::not_found;
use crate::approval::Decision;
use crate::queue::{JobId, JobState};

/// The pending approval requests of a job (one at most: a job parks on its
/// first undecided call).
pub async fn list(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = JobId::from(id);
    let job = state.queue.get(&id).await?.ok_or_else(|| not_found(&id))?;
    let approvals: Vec<Value> = match (job.state, job.pending_call) {
        (JobState::AwaitingApproval, Some(request)) => vec![json!({
            "call": request["call"],
            "tool": request["tool"],
            "arguments": request["arguments"],
            "digest": request["digest"],
            "turn": request["turn"],
            "scope": request["scope"],
            "effect": request["effect"],
            "requested_at": request["requested_at"],
            "expires_at": request["expires_at"],
        })],
        _ => Vec::new(),
    };
    Ok(Json(
        json!({"job_id": id, "state": job.state, "approvals": approvals}),
    ))
}

/// A decision on the call `call` of job `id`: approve, deny (with a
/// reason) or edit (new arguments), bound to the digest the person saw.
pub async fn decide(
    State(state): State<AppState>,
    Path((id, call)): Path<(String, String)>,
    JsonBody(decision): JsonBody<Decision>,
) -> Result<Json<Value>, ApiError> {
    let id = JobId::from(id);
    let by = decided_by(&state);
    let verdict = decision.verdict.kind();
    let job = take(&state, &id, &call, decision, &by).await?;
    Ok(Json(json!({
        "job": job,
        "call": call,
        "decision": verdict,
        "by": by,
    })))
}

/// Takes a decision (the queue checks it and takes it at most once) and
/// tells the daemon: every way a decision comes in (HTTP, MCP) ends here.
pub(super) async fn take(
    state: &AppState,
    id: &JobId,
    call: &str,
    decision: Decision,
    by: &str,
) -> Result<crate::queue::Job, ApiError> {
    let verdict = decision.verdict.kind();
    let changed = state.queue.decide_approval(id, call, decision, by).await?;
    crate::failpoint::hit("after_approval_recorded");
    state
        .bus
        .publish(crate::events::daemon::DaemonEvent::ApprovalDecided {
            job: id.to_string(),
            bundle: changed.job.bundle.clone(),
            decision: verdict,
            by: by.to_string(),
        });
    Ok(changed.job)
}

/// Who a decision is recorded as made by: the holder of the daemon's token
/// when one is configured, else a local operator.
fn decided_by(state: &AppState) -> String {
    if state.registry.snapshot().token.is_some() {
        "token".into()
    } else {
        "local".into()
    }
}

/// A decision the queue refused, as the API says it.
pub(super) fn refused(e: &crate::queue::QueueError) -> Option<ApiError> {
    use crate::approval::DecisionError;
    use crate::queue::QueueError;
    match e {
        QueueError::NotAwaitingApproval { .. } | QueueError::NotTheAwaitedCall { .. } => {
            Some(ApiError::new(ErrorCode::InvalidState, e.to_string()))
        }
        QueueError::Decision {
            source: DecisionError::Stale { .. },
            ..
        } => Some(ApiError::new(ErrorCode::InvalidState, e.to_string())),
        QueueError::Decision {
            source: DecisionError::MissingDigest { .. },
            ..
        } => Some(ApiError::field(
            ErrorCode::InvalidRequest,
            "digest",
            e.to_string(),
        )),
        QueueError::Decision {
            source: DecisionError::BadEdit { .. },
            ..
        } => Some(ApiError::field(
            ErrorCode::InvalidRequest,
            "arguments",
            e.to_string(),
        )),
        _ => None,
    }
}
