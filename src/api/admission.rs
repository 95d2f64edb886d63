//! The one way in: every route that starts a job — `POST /v1/jobs`, the
//! batch, `/v1/chat/completions`, the runtime API, MCP `tools/call`, and so
//! the console and the CLI, which use those — builds a [`Submission`] and
//! calls [`admit`] (or [`admit_batch`]). Admission decides, in this order:
//!
//! 1. the caller's key has `submit` and may use the bundle (its globs);
//! 2. the bundle is loaded, the fields are sound (no NUL bytes, a blank
//!    idempotency key, a priority or attempt count out of range), the
//!    job's kind and controls are decided (`controls`: those sent as
//!    variables are lifted out of them), the limits only lower the
//!    bundle's;
//! 3. the key's quotas: its rate, its jobs in flight;
//! 4. the job is queued, reserving its share of its key's and its bundle's
//!    daily budgets in the same write (`budgets`; a day with nothing left
//!    refuses it), recording who asked (its idempotency key is
//!    namespaced by that key in the queue); a conversation it continues is
//!    the key's own (conversations are per key: another key's of the same
//!    id is another conversation, so naming one tells nothing of it).
//!
//! Each way in keeps only its wire format: what it reads from the body, and
//! how it spells this module's refusals.
//!
//! A direct tool call (`POST /v1/bundles/{name}/tools/{tool}:run`) starts
//! no job but comes through here too ([`admit_direct`]): steps 1, 2
//! (the bundle) and 3.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::Value;

use super::AppState;
use super::auth::Caller;
use super::error::{ApiError, ErrorCode};
use crate::access::Principal;
use crate::access::policy::Action;
use crate::admit::DirectRunTicket;
use crate::events::daemon::DaemonEvent;
use crate::queue::{Job, NewJob};

/// The priorities a job may ask for (higher runs first); a key's
/// `max_priority` lowers the top.
pub const PRIORITY_RANGE: std::ops::RangeInclusive<i32> = -1000..=1000;
/// The most attempts a submitter may give a job.
pub const MAX_ATTEMPTS: u32 = 100;

/// One job as a way in asks for it.
pub(super) struct Submission {
    pub job: NewJob,
    /// The wire's name for the field that named the bundle (`bundle`,
    /// `model`, `id`), so a refusal points at what the client sent.
    pub bundle_field: &'static str,
    /// A group chat's plan, which only the runtime API builds (and
    /// checks): the one way a job becomes a group chat (`controls`).
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
    key_quotas(state, &caller.0, 1).await?;
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
    key_quotas(state, &caller.0, checked_jobs.len() as u32).await?;
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

/// Admits one run that starts no job — a direct tool call (`POST
/// /v1/bundles/{name}/tools/{tool}:run`, `run_tool`) or a verify
/// (`verify_bundle`): the policy lets the key do `action` on the bundle, the
/// bundle is loaded, and the key's quotas hold (the run counts against its
/// rate like a submission, and it is in flight, against the key's
/// `max_in_flight`, until the ticket drops). Returns the bundle as loaded
/// now.
pub(super) async fn admit_direct(
    state: &AppState,
    caller: &Caller,
    action: Action,
    bundle: &str,
) -> Result<(Arc<crate::registry::LoadedBundle>, DirectRunTicket), ApiError> {
    let admitted = async {
        no_nul("bundle", bundle)?;
        caller.on_bundle(action, bundle, "bundle")?;
        let loaded = loaded_bundle(state, bundle, "bundle")?;
        let _held = state.admission.hold_in_flight(&caller.0).await;
        key_quotas(state, &caller.0, 1).await?;
        Ok((loaded, state.admission.start_direct_run(caller.name())))
    }
    .await;
    admitted.inspect_err(|e| refused(state, caller, e))
}

/// Everything about one job that needs no store: who may, which bundle,
/// which fields. The job comes back ready to queue, owned by the caller.
fn checked(state: &AppState, caller: &Caller, s: Submission) -> Result<NewJob, ApiError> {
    caller.require(Action::SubmitJob)?;
    let mut job = s.job;
    no_nul(s.bundle_field, &job.bundle)?;
    for bundle in std::iter::once(&job.bundle).chain(&s.also_runs) {
        caller.on_bundle(Action::SubmitJob, bundle, s.bundle_field)?;
    }
    known_bundle(state, &job.bundle, s.bundle_field)?;
    check_fields(&job)?;
    job.webhook = webhook(state, caller, &job)?;
    check_priority(&caller.0, job.priority)?;
    super::controls::decide(state, &mut job, s.plan)?;
    job.daily = super::budgets::daily_budgets(state, &caller.0, &job)?;
    job.max_attempts.get_or_insert(state.max_attempts);
    job.owner = Some(caller.name().to_string());
    Ok(job)
}

/// The job's webhook: its own, else its key's, else its bundle's; within
/// `egress.allow`.
fn webhook(state: &AppState, caller: &Caller, job: &NewJob) -> Result<Option<String>, ApiError> {
    let snapshot = state.registry.snapshot();
    let url = job
        .webhook
        .clone()
        .or_else(|| caller.0.webhook.clone())
        .or_else(|| {
            snapshot
                .bundle(&job.bundle)
                .and_then(|b| b.bundle.raw.webhook.clone())
        });
    let Some(url) = url else {
        return Ok(None);
    };
    check_callback(state, "webhook", &url)?;
    Ok(Some(url))
}

/// A URL the daemon is to POST a job's changes to (a webhook, an A2A push
/// config's `url`, named `field`): the egress rule's, which the sender
/// applies again to each delivery and to the address it connects to.
pub fn check_callback(state: &AppState, field: &str, url: &str) -> Result<(), ApiError> {
    crate::access::file::check_webhook(url)
        .map_err(|e| ApiError::field(ErrorCode::InvalidRequest, field, format!("{field} {e}")))?;
    state
        .registry
        .snapshot()
        .egress
        .check(url)
        .map(drop)
        .map_err(|e| ApiError::field(ErrorCode::InvalidRequest, field, format!("{field}: {e}")))
}

/// The rules of a job's own fields, for every way in (and the fuzz
/// targets): no NUL byte anywhere (PostgreSQL cannot store one, SQLite
/// would), a non-blank idempotency key, attempts in range.
pub fn check_fields(job: &NewJob) -> Result<(), ApiError> {
    no_nul("input", &job.input)?;
    no_nul_in("variables", &Value::Object(job.variables.clone()))?;
    if let Some(messages) = &job.messages {
        no_nul_in("messages", &Value::Array(messages.clone()))?;
    }
    for (field, value) in [
        ("idempotency_key", &job.idempotency_key),
        ("conversation_id", &job.conversation_id),
        ("traceparent", &job.traceparent),
        ("bundle_version", &job.bundle_version),
    ] {
        if let Some(value) = value {
            no_nul(field, value)?;
        }
    }
    if job
        .idempotency_key
        .as_ref()
        .is_some_and(|k| k.trim().is_empty())
    {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "idempotency_key",
            "the idempotency key is empty; send a non-blank key or leave the field out",
        ));
    }
    if let Some(n) = job.max_attempts
        && !(1..=MAX_ATTEMPTS).contains(&n)
    {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "max_attempts",
            format!("{n} is out of range: a job gets 1 to {MAX_ATTEMPTS} attempts"),
        ));
    }
    if !PRIORITY_RANGE.contains(&job.priority) {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "priority",
            format!(
                "{} is out of range: priorities go from {} to {}",
                job.priority,
                PRIORITY_RANGE.start(),
                PRIORITY_RANGE.end()
            ),
        ));
    }
    Ok(())
}

fn no_nul(field: &str, text: &str) -> Result<(), ApiError> {
    if !text.contains('\0') {
        return Ok(());
    }
    Err(ApiError::field(
        ErrorCode::InvalidRequest,
        field,
        format!("`{field}` contains a NUL character (\\u0000), which a job cannot hold; remove it"),
    ))
}

/// [`no_nul`] over every string and object key of a JSON value, naming the
/// path (`variables.user.name`).
fn no_nul_in(path: &str, value: &Value) -> Result<(), ApiError> {
    match value {
        Value::String(text) => no_nul(path, text),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, item)| no_nul_in(&format!("{path}[{i}]"), item)),
        Value::Object(map) => map.iter().try_for_each(|(key, item)| {
            let inner = format!("{path}.{key}");
            no_nul(&inner, key)?;
            no_nul_in(&inner, item)
        }),
        _ => Ok(()),
    }
}

fn check_priority(key: &Principal, priority: i32) -> Result<(), ApiError> {
    match key.max_priority {
        Some(max) if priority > max => Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "priority",
            format!(
                "API key {:?} may submit priorities up to {max}, not {priority}; lower it or ask the operator to raise the key's max_priority",
                key.name
            ),
        )),
        _ => Ok(()),
    }
}

/// The key's own limits for `n` new jobs: its rate and its jobs in
/// flight. (Its daily budget is reserved by the queue, in the write that
/// queues the jobs: `budgets`.)
async fn key_quotas(state: &AppState, key: &Principal, n: u32) -> Result<(), ApiError> {
    if let Some(per_minute) = key.rate_per_minute {
        let limiter = state.admission.limiter(&key.name, per_minute);
        let cells = NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN);
        let refused = |wait: Duration| {
            ApiError::new(
                ErrorCode::QuotaExceeded,
                format!(
                    "API key {:?} may submit {per_minute} jobs a minute (rate_per_minute); retry after {} s",
                    key.name,
                    wait.as_secs().max(1)
                ),
            )
            .retry_after(wait.as_secs().max(1))
        };
        match limiter.check_n(cells) {
            Ok(Ok(())) => {}
            Ok(Err(not_until)) => {
                let clock = governor::clock::DefaultClock::default();
                return Err(refused(
                    not_until.wait_time_from(governor::clock::Clock::now(&clock)),
                ));
            }
            Err(_) => {
                return Err(ApiError::field(
                    ErrorCode::QuotaExceeded,
                    "jobs",
                    format!(
                        "a batch of {n} jobs is more than API key {:?} may submit in a minute ({per_minute}); split it",
                        key.name
                    ),
                ));
            }
        }
    }
    let Some(max) = key.max_in_flight else {
        return Ok(());
    };
    let load = state
        .queue
        .owner_load(&key.name, SystemTime::now() - crate::budget::DAY)
        .await?;
    // Direct tool runs are in flight too: they run processes as jobs do.
    let in_flight = load.in_flight + state.admission.direct_runs(&key.name);
    if in_flight + u64::from(n) > max {
        return Err(ApiError::new(
            ErrorCode::QuotaExceeded,
            format!(
                "API key {:?} has {in_flight} jobs and direct tool runs not finished and may have {max} (max_in_flight); wait for some to finish",
                key.name
            ),
        )
        .retry_after(5));
    }
    Ok(())
}

/// A 422 naming `field` and the loaded bundles unless `name` is loaded.
pub(super) fn known_bundle(state: &AppState, name: &str, field: &str) -> Result<(), ApiError> {
    loaded_bundle(state, name, field).map(|_| ())
}

/// The bundle `name` as loaded now, or [`known_bundle`]'s 422.
fn loaded_bundle(
    state: &AppState,
    name: &str,
    field: &str,
) -> Result<Arc<crate::registry::LoadedBundle>, ApiError> {
    let snapshot = state.registry.snapshot();
    if let Some(loaded) = snapshot.bundle(name) {
        return Ok(loaded.clone());
    }
    let known: Vec<&str> = snapshot.loaded().map(|b| b.name()).collect();
    Err(ApiError::field(
        ErrorCode::UnknownBundle,
        field,
        format!(
            "no loaded bundle named {name:?} (loaded: {})",
            known.join(", ")
        ),
    ))
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
        same_job(&job, &expected)?;
    }
    Ok((job, created))
}

/// A repeated idempotency key must describe the same job; otherwise the
/// caller would believe a different job had been queued.
fn same_job(existing: &Job, asked: &NewJob) -> Result<(), ApiError> {
    let differs = if existing.bundle != asked.bundle {
        "bundle"
    } else if existing.input != asked.input {
        "input"
    } else if existing.variables != asked.variables {
        "variables"
    } else if existing.kind != asked.kind || existing.controls != asked.controls {
        "kind or controls"
    } else {
        return Ok(());
    };
    Err(ApiError::field(
        ErrorCode::IdempotencyConflict,
        "idempotency_key",
        format!(
            "idempotency key {:?} was already used for job {} with a different {differs}; \
             use a new key for a new job, or GET /v1/jobs/{} for the existing one",
            existing.idempotency_key.as_deref().unwrap_or_default(),
            existing.id,
            existing.id
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(input: &str) -> NewJob {
        NewJob {
            bundle: "b".into(),
            input: input.into(),
            ..Default::default()
        }
    }

    #[test]
    fn nul_bytes_are_refused_naming_the_field() {
        let err = check_fields(&job("a\0b")).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("input"));
        let mut with_vars = job("ok");
        with_vars
            .variables
            .insert("user".into(), serde_json::json!({"names": ["x", "y\0"]}));
        let err = check_fields(&with_vars).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("variables.user.names[1]"));
        let mut keyed = job("ok");
        keyed.idempotency_key = Some("k\0".into());
        assert_eq!(
            check_fields(&keyed).unwrap_err().field.as_deref(),
            Some("idempotency_key")
        );
    }

    #[test]
    fn priority_and_attempts_are_capped() {
        let mut j = job("ok");
        j.priority = i32::MAX;
        assert_eq!(
            check_fields(&j).unwrap_err().field.as_deref(),
            Some("priority")
        );
        j.priority = 5;
        j.max_attempts = Some(u32::MAX);
        assert_eq!(
            check_fields(&j).unwrap_err().field.as_deref(),
            Some("max_attempts")
        );
        j.max_attempts = Some(0);
        assert!(check_fields(&j).is_err());
        j.max_attempts = Some(3);
        assert!(check_fields(&j).is_ok());
        let mut key = Principal::unrestricted("k");
        key.max_priority = Some(10);
        assert!(check_priority(&key, 10).is_ok());
        assert!(check_priority(&key, 11).is_err());
    }
}
