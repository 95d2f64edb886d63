//! The one way in, as HTTP sees it: every route that starts a job —
//! `POST /v1/jobs`, the batch, `/v1/chat/completions`, the runtime API, MCP
//! `tools/call`, and so the console and the CLI, which use those — builds a
//! [`Submission`] and calls [`admit`] (or [`admit_batch`]). This file reads
//! the caller and the daemon's state and calls the rules in order; the
//! rules are `crate::admit`'s, and a refusal becomes its status through
//! `impl From<Refusal> for ApiError` (`error.rs`). In this order:
//!
//! 1. the caller's key may do what the job's kind is (`submit_job`;
//!    `run_tool` for a direct tool call's `tool_run` job, `verify_bundle`
//!    for a `verify` job) on the bundle (its scope, its globs);
//! 2. the bundle is loaded, the fields are sound (`admit::check_fields`:
//!    no NUL bytes, a blank idempotency key, a priority or attempt count
//!    out of range), the webhook is allowed, the job's kind and controls
//!    are decided (`admit::decide`: those sent as variables are lifted out
//!    of them), the limits only lower the bundle's (`admit::daily_budgets`);
//! 3. the key's quotas (`admit::key_quotas`): its rate, its jobs in flight;
//! 4. the job is queued, reserving its share of its key's and its bundle's
//!    daily budgets in the same write (`budget::reserve`; a day with nothing left
//!    refuses it), recording who asked (its idempotency key is
//!    namespaced by that key in the queue, and a key used again must name
//!    the same job: `admit::same_job`); a conversation it continues is
//!    the key's own (conversations are per key: another key's of the same
//!    id is another conversation, so naming one tells nothing of it).
//!
//! Each way in keeps only its wire format: what it reads from the body, and
//! how it spells a refusal.
//!
//! Direct tool runs and verifies are jobs too (`tool_run`, `verify`): they
//! come through here like any submit, and what the key must be allowed is
//! the job's kind's (`admit::action_of`), whatever the way in.

use std::sync::Arc;

use super::AppState;
use super::auth::Caller;
use super::error::{ApiError, ErrorCode};
use crate::admit;
use crate::events::daemon::DaemonEvent;
use crate::queue::{Job, NewJob};

/// One job as a way in asks for it.
pub(super) struct Submission {
    pub job: NewJob,
    /// The wire's name for the field that named the bundle (`bundle`,
    /// `model`, `id`), so a refusal points at what the client sent.
    pub bundle_field: &'static str,
    /// A group chat's plan, which only the runtime API builds (and
    /// checks): the one way a job becomes a group chat (`admit::decide`).
    pub plan: Option<crate::group_chat::Plan>,
    /// Other bundles the job runs as agents of its own (a group chat's
    /// local participants): the key must be allowed to use each.
    pub also_runs: Vec<String>,
}

impl Submission {
    /// A submission of `job` whose bundle came in the field `bundle_field`.
    pub fn new(job: NewJob, bundle_field: &'static str) -> Self {
        Self {
            job,
            bundle_field,
            plan: None,
            also_runs: Vec::new(),
        }
    }
}

/// Admits one job and queues it (or finds the one its idempotency key
/// names): `(job, created)`.
pub(super) async fn admit(
    state: &AppState,
    caller: &Caller,
    submission: Submission,
) -> Result<(Job, bool), ApiError> {
    admit_one(state, caller, submission)
        .await
        .inspect_err(|e| refused(state, caller, e))
}

/// Tells the daemon (log, metric) that admission refused `caller`.
fn refused(state: &AppState, caller: &Caller, e: &ApiError) {
    let reason = match e.code {
        ErrorCode::Forbidden => "forbidden",
        ErrorCode::UnknownBundle => "unknown_bundle",
        ErrorCode::QuotaExceeded => "quota",
        ErrorCode::BudgetExhausted => "budget",
        ErrorCode::IdempotencyConflict => "conflict",
        ErrorCode::NotFound => "not_found",
        ErrorCode::InvalidRequest => "invalid",
        ErrorCode::Unavailable => "unavailable",
        _ => "other",
    };
    state.bus.publish(DaemonEvent::SubmissionRefused {
        key: caller.name().to_string(),
        reason,
    });
}

async fn admit_one(
    state: &AppState,
    caller: &Caller,
    submission: Submission,
) -> Result<(Job, bool), ApiError> {
    let job = checked(state, caller, submission)?;
    let _held = state.admission.hold_in_flight(&caller.0).await;
    key_quotas(state, caller, 1).await?;
    enqueue(state, job).await
}

/// Admits every job of a batch or none: a refusal names the job's index.
pub(super) async fn admit_batch(
    state: &AppState,
    caller: &Caller,
    jobs: Vec<Submission>,
) -> Result<Vec<(Job, bool)>, ApiError> {
    admit_all(state, caller, jobs)
        .await
        .inspect_err(|e| refused(state, caller, e))
}

async fn admit_all(
    state: &AppState,
    caller: &Caller,
    jobs: Vec<Submission>,
) -> Result<Vec<(Job, bool)>, ApiError> {
    let mut checked_jobs = Vec::with_capacity(jobs.len());
    for (index, submission) in jobs.into_iter().enumerate() {
        let job = checked(state, caller, submission).map_err(|e| at_index(index, e))?;
        checked_jobs.push(job);
    }
    let _held = state.admission.hold_in_flight(&caller.0).await;
    key_quotas(state, caller, checked_jobs.len() as u32).await?;
    let submission = tokio::spawn({
        // As for one job: the queue's answer is counted even if the client
        // hung up.
        let state = state.clone();
        async move {
            let submitted = state.queue.submit_many(checked_jobs).await?;
            for (job, _) in submitted.iter().filter(|(_, created)| *created) {
                state.bus.publish(DaemonEvent::JobSubmitted {
                    bundle: job.bundle.clone(),
                });
            }
            Ok::<_, crate::queue::QueueError>(submitted)
        }
    });
    submission
        .await
        .map_err(|e| ApiError::internal(format!("batch submit task failed: {e}")))?
        .map_err(|e| match e {
            crate::queue::QueueError::KeyConflict { index, .. } => ApiError::field(
                ErrorCode::IdempotencyConflict,
                format!("jobs[{index}].idempotency_key"),
                e.to_string(),
            ),
            crate::queue::QueueError::DailyBudget { index, .. } => at_index(index, e.into()),
            e => e.into(),
        })
}

/// A job's refusal within a batch: its field and message name its index.
pub(super) fn at_index(index: usize, mut e: ApiError) -> ApiError {
    e.field = Some(match e.field {
        Some(field) => format!("jobs[{index}].{field}"),
        None => format!("jobs[{index}]"),
    });
    e.message = format!("job {index} of the batch: {}", e.message);
    e
}

/// Everything about one job that needs no store: who may, which bundle,
/// which fields. The job comes back ready to queue, owned by the caller.
fn checked(state: &AppState, caller: &Caller, s: Submission) -> Result<NewJob, ApiError> {
    let action = admit::action_of(&s.job.kind);
    caller.require(action)?;
    let mut job = s.job;
    admit::no_nul(s.bundle_field, &job.bundle)?;
    for bundle in std::iter::once(&job.bundle).chain(&s.also_runs) {
        caller.on_bundle(action, bundle, s.bundle_field)?;
    }
    let snapshot = state.registry.snapshot();
    admit::loaded_bundle(&snapshot, &job.bundle, s.bundle_field)?;
    admit::check_fields(&job)?;
    job.webhook = admit::webhook(&snapshot, &caller.0, &job)?;
    admit::key_priority(&caller.0, job.priority)?;
    admit::decide(&snapshot, &mut job, s.plan)?;
    admit::route_canary(&snapshot, &mut job);
    job.daily = admit::daily_budgets(&snapshot, &caller.0, &job)?;
    job.max_attempts.get_or_insert(state.max_attempts);
    job.owner = Some(caller.name().to_string());
    Ok(job)
}

/// A URL the daemon is to POST a job's changes to (a webhook, an A2A push
/// config's `url`, named `field`): `admit::check_callback` under the
/// egress rule loaded now.
pub fn check_callback(state: &AppState, field: &str, url: &str) -> Result<(), ApiError> {
    Ok(admit::check_callback(
        &state.registry.snapshot().egress,
        field,
        url,
    )?)
}

/// The key's quotas for `n` new jobs or one direct run (`admit::key_quotas`).
async fn key_quotas(state: &AppState, caller: &Caller, n: u32) -> Result<(), ApiError> {
    Ok(admit::key_quotas(&state.admission, state.queue.as_ref(), &caller.0, n).await?)
}

/// A 422 naming `field` and the loaded bundles unless `name` is loaded.
pub(super) fn known_bundle(state: &AppState, name: &str, field: &str) -> Result<(), ApiError> {
    loaded_bundle(state, name, field).map(|_| ())
}

/// The bundle `name` as loaded now, or [`known_bundle`]'s 422.
pub(super) fn loaded_bundle(
    state: &AppState,
    name: &str,
    field: &str,
) -> Result<Arc<crate::registry::LoadedBundle>, ApiError> {
    Ok(admit::loaded_bundle(
        &state.registry.snapshot(),
        name,
        field,
    )?)
}

/// Queues an admitted job (or finds the one its idempotency key names).
/// axum drops a handler's future when the client hangs up, and the queue
/// may still create the job, so the submission and its bookkeeping
/// (counting, waking a worker) run in a task of their own that finishes
/// whether or not anyone reads the answer.
async fn enqueue(state: &AppState, new_job: NewJob) -> Result<(Job, bool), ApiError> {
    let bundle = new_job.bundle.clone();
    let expected = new_job.clone();
    let submission = tokio::spawn({
        let state = state.clone();
        let bundle = bundle.clone();
        async move {
            let (job, created) = state.queue.submit(new_job).await?;
            // The queue's `runnable()` wakes the workers at commit.
            if created {
                state.bus.publish(DaemonEvent::JobSubmitted { bundle });
            }
            Ok::<_, crate::queue::QueueError>((job, created))
        }
    });
    let (job, created) = submission.await.map_err(|e| {
        ApiError::internal(format!("submit task for bundle {bundle:?} failed: {e}"))
    })??;
    // Every way in refuses a reused key for a different job the same way.
    if !created {
        admit::same_job(&job, &expected)?;
    }
    Ok((job, created))
}
