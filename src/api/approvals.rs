//! `GET /v1/jobs/{id}/approvals` and `POST /v1/jobs/{id}/approvals/{call}`:
//! what a parked job waits for, and a person's decision on it. The queue
//! checks the decision against the request and takes it at most once; this
//! module only says who decided.

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use schemars::JsonSchema;
use serde::Serialize;

use super::AppState;
use super::auth::Caller;
use super::body::{JsonBody, Path};
use super::document::{INVALID_STATE, UNAVAILABLE, answers};
use super::error::{ApiError, ErrorCode};
use crate::access::policy::Action;
use crate::approval::{Decision, ParkedCall, ParkedKind};
use crate::queue::{Job, JobId, JobState};

/// What a job awaits approval for.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Approvals {
    pub job_id: JobId,
    pub state: JobState,
    /// The parked call (one at most: a job parks on its first undecided
    /// call), in the shape the job's `pending_call` has.
    pub approvals: Vec<ParkedCall>,
}

/// A decision taken.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Decided {
    /// The job as the decision left it.
    pub job: Job,
    /// The call decided on.
    pub call: String,
    /// `approve`, `deny` or `edit`.
    pub decision: &'static str,
    /// The key that decided.
    pub by: String,
}

/// `GET /v1/jobs/{id}/approvals` in the API document.
pub(super) fn list_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    op.summary("The call a job awaits approval for (an empty list when it awaits none)")
        .response_with::<200, Json<Approvals>, _>(|r| r.description("The pending approvals"))
}

/// `POST /v1/jobs/{id}/approvals/{call}` in the API document.
pub(super) fn decide_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary(
            "Decide on a call awaiting approval: approve, deny (with a reason) or edit its \
             arguments; taken once, bound to the arguments' digest",
        )
        .response_with::<200, Json<Decided>, _>(|r| r.description("The decision, taken"));
    answers(op, &[INVALID_STATE, UNAVAILABLE])
}

/// The pending approval requests of a job (one at most: a job parks on its
/// first undecided call).
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Approvals>, ApiError> {
    let id = JobId::from(id);
    let job = caller.stored_job(&state, Action::ReadJob, &id).await?;
    // The parked call's one shape (docs/api.md), as the job shows it.
    let approvals: Vec<ParkedCall> = match (job.state, job.pending_call) {
        (JobState::AwaitingApproval, Some(request)) if request.kind == ParkedKind::Approval => {
            vec![request]
        }
        _ => Vec::new(),
    };
    Ok(Json(Approvals {
        job_id: id,
        state: job.state,
        approvals,
    }))
}

/// A decision on the call `call` of job `id`: approve, deny (with a
/// reason) or edit (new arguments), bound to the digest the person saw.
pub async fn decide(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, call)): Path<(String, String)>,
    JsonBody(decision): JsonBody<Decision>,
) -> Result<Json<Decided>, ApiError> {
    let id = JobId::from(id);
    let by = caller.name().to_string();
    let verdict = decision.verdict.kind();
    let job = take(&state, &caller, &id, &call, decision).await?;
    Ok(Json(Decided {
        job,
        call,
        decision: verdict,
        by,
    }))
}

/// Takes a decision of `caller` (the queue checks it against the request
/// and takes it at most once) and tells the daemon: every way a decision
/// comes in (HTTP, MCP) ends here. The caller must hold `approve` and may
/// decide only on jobs it may operate on; a tool with `approval.by:
/// others` refuses the key that submitted the job.
pub(super) async fn take(
    state: &AppState,
    caller: &Caller,
    id: &JobId,
    call: &str,
    decision: Decision,
) -> Result<Job, ApiError> {
    // No stream tells of a request before the job is parked on it (the
    // queue writes `ApprovalRequested` in the park's commit), so a job
    // that is not parked here has nothing to decide yet, or any more.
    let job = caller.stored_job(state, Action::DecideApproval, id).await?;
    if let Some(request) = &job.pending_call
        && request.barred(job.owner.as_deref()) == Some(caller.name())
    {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            format!(
                "tool `{}` of job {id} needs a decision by someone other than its submitter (approval.by: others), and API key {:?} submitted it; ask another approver",
                request.tool,
                caller.name()
            ),
        ));
    }
    let by = caller.name();
    let verdict = decision.verdict.kind();
    let changed = state.queue.decide_approval(id, call, decision, by).await?;
    crate::failpoint::hit(crate::failpoint::Failpoint::AfterApprovalRecorded);
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

/// An interrupt id's job, digest and call: `<job>/<digest>/<call>`, the id
/// AG-UI's and LangGraph's clients answer an interrupt by.
pub(super) fn interrupt_parts(id: &str) -> Option<(JobId, &str, &str)> {
    let mut parts = id.splitn(3, '/');
    let (job, digest, call) = (parts.next()?, parts.next()?, parts.next()?);
    (!job.is_empty() && !digest.is_empty() && !call.is_empty())
        .then(|| (JobId::from(job), digest, call))
}
