//! What an operator does to a job that exists — cancel, delete, rerun,
//! resolve — and how the row such a request left is settled (its final
//! event counted like a run's). Every wire that offers one of these asks
//! the functions here.

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use super::AppState;
use super::admission::{Submission, admit};
use super::auth::Caller;
use super::body::{JsonBody, Path};
use super::document::{INVALID_STATE, QUOTA, UNAVAILABLE, answers};
use super::error::{ApiError, ErrorCode};
use crate::access::policy::Action;
use crate::events::daemon::DaemonEvent;
use crate::queue::{Deletion, Job, JobId, NewJob, Resolution};

/// `POST /v1/jobs/{id}/cancel` in the API document.
pub(super) fn cancel_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Cancel a queued or running job")
        .description("A running job stops at once: its model call or tool is cancelled.")
        .response_with::<200, Json<Job>, _>(|r| r.description("The job as the cancel left it"));
    answers(op, &[UNAVAILABLE])
}

pub async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Job>, ApiError> {
    let id = JobId::from(id);
    caller.stored_job(&state, Action::CancelJob, &id).await?;
    let changed = state
        .queue
        .cancel(&id)
        .await?
        .ok_or_else(|| ApiError::job_not_found(&id))?;
    Ok(Json(settled(&state, changed)))
}

/// `DELETE /v1/jobs/{id}` in the API document.
pub(super) fn delete_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary(
            "Delete a job that has ended, with its events, journal and deliveries \
             (a job still queued, running or parked is a 409: cancel it first)",
        )
        .response_with::<204, (), _>(|r| r.description("Deleted"));
    answers(op, &[INVALID_STATE, UNAVAILABLE])
}

/// `DELETE /v1/jobs/{id}`: forgets an ended job (204).
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    delete_ended(&state, &caller, &JobId::from(id)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Deletes job `id` — its row, events, journal and deliveries — when the
/// caller may (`delete_job`: its own job, or any with `operate_all`) and
/// the job has ended; a job still queued, running or parked is a 409
/// saying to cancel it first. `DELETE /v1/jobs/{id}` and `DELETE
/// /v1/responses/{id}` both ask it.
pub(super) async fn delete_ended(
    state: &AppState,
    caller: &Caller,
    id: &JobId,
) -> Result<Job, ApiError> {
    caller.stored_job(state, Action::DeleteJob, id).await?;
    match state.queue.delete_finished(id).await? {
        Deletion::Deleted(job) => {
            tracing::info!(job_id = %id, by = caller.name(), "job deleted");
            Ok(*job)
        }
        Deletion::Unfinished(job) => Err(ApiError::new(
            ErrorCode::InvalidState,
            format!(
                "job {id} is {}: only a job that has ended can be deleted; cancel it first (POST /v1/jobs/{id}/cancel), then delete it",
                job.state
            ),
        )),
        Deletion::Missing => Err(ApiError::job_not_found(id)),
    }
}

/// `POST /v1/jobs/{id}/rerun` in the API document.
pub(super) fn rerun_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary(
            "Run a job again: a new job with its bundle (current version), input, variables, \
             messages, priority, attempts and limits, admitted for the caller",
        )
        .response_with::<201, Json<Job>, _>(|r| r.description("The new job, queued"));
    answers(
        op,
        &[
            (422, "The job cannot be run again as it is"),
            QUOTA,
            UNAVAILABLE,
        ],
    )
}

/// `POST /v1/jobs/{id}/rerun`: the job again, as a new job admitted for
/// the caller like any submit (its key's bundles, limits and budgets).
pub async fn rerun(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<Job>), ApiError> {
    let id = JobId::from(id);
    let source = caller.stored_job(&state, Action::RerunJob, &id).await?;
    let submission = Submission::new(rerun_of(source), "bundle");
    let (job, _) = admit(&state, &caller, submission).await?;
    Ok((StatusCode::CREATED, Json(job)))
}

/// What a rerun copies: the bundle, the input, the variables, the kind and
/// controls (a group chat's is refused: only its route builds a plan), the
/// chat messages, the priority, the attempts allowed and the budget limits. Not
/// the conversation (continued again it would start from its end, not from
/// where the source started), the idempotency key or the trace; the bundle
/// runs at its current version.
pub(super) fn rerun_of(source: Job) -> NewJob {
    NewJob {
        id: None,
        bundle: source.bundle,
        bundle_version: None,
        bundle_digest: None,
        fork: None,
        input: source.input,
        variables: source.variables,
        kind: source.kind,
        controls: source.controls,
        messages: source.messages,
        conversation_id: None,
        after_turns: false,
        priority: source.priority,
        run_at: None,
        idempotency_key: None,
        max_attempts: Some(source.max_attempts),
        trace: None,
        limits: source.limits,
        owner: None,
        webhook: None,
        push: Vec::new(),
        daily: None,
        push_caps: None,
        run_meta: None,
    }
}

/// The job an operator's request left; a final event it recorded is
/// counted (metrics) like a run's.
pub(super) fn settled(state: &AppState, changed: crate::queue::Changed) -> Job {
    if let Some(event) = changed.final_event {
        state.bus.publish(DaemonEvent::JobEndedByRequest {
            event: Box::new(event),
        });
    }
    changed.job
}

/// `POST /v1/jobs/{id}/resolve` in the API document.
pub(super) fn resolve_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary(
            "Resolve a needs_attention job: retry its pending call, skip it with a supplied \
             result, or fail the job",
        )
        .response_with::<200, Json<Job>, _>(|r| r.description("The job as the resolution left it"));
    answers(op, &[INVALID_STATE, UNAVAILABLE])
}

/// `POST /v1/jobs/{id}/resolve`: an operator's answer for a parked job.
pub async fn resolve(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(resolution): JsonBody<Resolution>,
) -> Result<Json<Job>, ApiError> {
    let id = JobId::from(id);
    caller.stored_job(&state, Action::ResolveJob, &id).await?;
    let changed = state.queue.resolve(&id, resolution).await?;
    let job = settled(&state, changed);
    tracing::info!(job_id = %id, state = %job.state, by = caller.name(), "job resolved by an operator");
    Ok(Json(job))
}
