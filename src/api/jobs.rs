//! `/v1/jobs`: submit, list, get, cancel.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::AppState;
use super::admission::{Submission, admit, admit_batch};
use super::auth::Caller;
use super::body::{JsonBody, Path, Query};
use super::error::{ApiError, ErrorCode};
use super::trace_context::CallerTrace;
// Where the wires that answered with a finished job found the wait.
pub(super) use super::feed::wait_finished;
use crate::access::policy::Action;
use crate::events::daemon::DaemonEvent;
use crate::queue::{Deletion, Job, JobFilter, JobId, JobState, NewJob, Resolution};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    pub bundle: String,
    pub input: String,
    #[serde(default)]
    pub variables: Map<String, Value>,
    #[serde(default)]
    pub priority: i32,
    /// RFC 3339; the job waits until then.
    #[serde(default)]
    pub run_at: Option<String>,
    #[serde(default)]
    pub idempotency_key: Option<String>,
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// W3C trace context; the job's spans join this trace.
    #[serde(default)]
    pub traceparent: Option<String>,
    /// Continue this conversation: the job starts from its earlier turns.
    #[serde(default)]
    pub conversation_id: Option<String>,
    /// Lower the bundle's budgets for this job (`prompt_tokens`,
    /// `completion_tokens`, `cost`, `wall_time`, `tool_calls`,
    /// `model_calls`, `depth`); a limit above the bundle's is refused.
    #[serde(default)]
    pub limits: Option<crate::budget::BudgetLimits>,
    /// Where the job's state changes are POSTed (within `egress.allow`;
    /// docs/api.md, Completion webhooks).
    #[serde(default)]
    pub webhook: Option<String>,
}

pub async fn submit(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    trace: CallerTrace,
    JsonBody(mut request): JsonBody<SubmitRequest>,
) -> Result<(StatusCode, Json<Job>), ApiError> {
    request.idempotency_key = idempotency_key(request.idempotency_key, &headers)?;
    let submission = Submission::new(validated(request, &trace)?, "bundle");
    let (job, created) = admit(&state, &caller, submission).await?;
    Ok((
        if created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        },
        Json(job),
    ))
}

/// A submit request read into the job it asks for: its wire's own checks
/// (times, trace context, conversation id); the rules every way in shares
/// are admission's. The job's `traceparent` is the body's (an explicit
/// field, checked: a bad one is a 422), else the request's header.
pub(super) fn validated(request: SubmitRequest, trace: &CallerTrace) -> Result<NewJob, ApiError> {
    let run_at = match &request.run_at {
        Some(text) => Some(humantime::parse_rfc3339_weak(text).map_err(|e| {
            ApiError::field(
                ErrorCode::InvalidRequest,
                "run_at",
                format!("invalid RFC 3339 time {text:?}: {e}"),
            )
        })?),
        None => None,
    };
    if let Some(tp) = &request.traceparent
        && !super::trace_context::valid_traceparent(tp)
    {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "traceparent",
            format!("not a W3C traceparent: {tp:?}"),
        ));
    }
    if let Some(id) = &request.conversation_id {
        super::conversations::check_id(id)?;
    }
    Ok(NewJob {
        id: None,
        bundle: request.bundle,
        bundle_version: None,
        bundle_digest: None,
        fork: None,
        input: request.input,
        variables: request.variables,
        kind: Default::default(),
        controls: Default::default(),
        messages: None,
        conversation_id: request.conversation_id,
        priority: request.priority,
        run_at,
        idempotency_key: request.idempotency_key,
        max_attempts: request.max_attempts,
        traceparent: match request.traceparent {
            Some(tp) => Some(tp),
            None => trace.or_body(None),
        },
        limits: request.limits,
        owner: None,
        webhook: request.webhook,
        push: Vec::new(),
        daily: None,
        push_caps: None,
    })
}

/// Jobs one batch may carry.
pub const MAX_BATCH: usize = 10_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    pub jobs: Vec<SubmitRequest>,
}

/// `POST /v1/jobs/batch`: many jobs in one transaction (multi-row
/// inserts), all or none. A job the API refuses is a 422 naming its index
/// (`jobs[3].run_at`) and nothing is queued; a key reused for different
/// content is a 409 naming its index. 201 when any job was created, else
/// 200 (every job was an idempotent repeat).
pub async fn submit_batch(
    State(state): State<AppState>,
    caller: Caller,
    trace: CallerTrace,
    JsonBody(request): JsonBody<BatchRequest>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    if request.jobs.is_empty() || request.jobs.len() > MAX_BATCH {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "jobs",
            format!(
                "a batch holds 1 to {MAX_BATCH} jobs, not {}",
                request.jobs.len()
            ),
        ));
    }
    let submissions = request
        .jobs
        .into_iter()
        .enumerate()
        .map(|(i, job)| {
            validated(job, &trace)
                .map(|job| Submission::new(job, "bundle"))
                .map_err(|e| super::admission::at_index(i, e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let submitted = admit_batch(&state, &caller, submissions).await?;
    let any_created = submitted.iter().any(|(_, created)| *created);
    let (jobs, created): (Vec<Job>, Vec<bool>) = submitted.into_iter().unzip();
    let status = if any_created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(json!({"jobs": jobs, "created": created}))))
}

/// The idempotency key from the body field or, failing that, the
/// `Idempotency-Key` header. A blank key would silently make unrelated
/// submissions share one job, so it is refused rather than ignored.
fn idempotency_key(body: Option<String>, headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    if let Some(key) = body {
        if key.trim().is_empty() {
            return Err(ApiError::field(
                ErrorCode::InvalidRequest,
                "idempotency_key",
                "the idempotency key is empty; send a non-blank key or leave the field out",
            ));
        }
        return Ok(Some(key));
    }
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let key = value.to_str().map_err(|_| {
        ApiError::field(
            ErrorCode::InvalidRequest,
            "Idempotency-Key",
            "the Idempotency-Key header is not visible ASCII; use a UUID or similar token",
        )
    })?;
    if key.trim().is_empty() {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "Idempotency-Key",
            "the Idempotency-Key header is empty; send a non-blank key or leave the header out",
        ));
    }
    Ok(Some(key.to_string()))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    pub state: Option<String>,
    pub bundle: Option<String>,
    pub conversation_id: Option<String>,
    pub limit: Option<usize>,
    pub cursor: Option<String>,
    /// Text the job's id, bundle or input contains (any case).
    pub q: Option<String>,
}

pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let job_state = match &query.state {
        Some(s) => Some(serde_json::from_value::<JobState>(json!(s)).map_err(|_| {
            ApiError::field(
                ErrorCode::InvalidRequest,
                "state",
                format!(
                    "unknown state {s:?} (queued, running, succeeded, failed, cancelled, dead)"
                ),
            )
        })?),
        None => None,
    };
    let limit = page_limit(query.limit)?;
    let mut page = state
        .queue
        .list(JobFilter {
            state: job_state,
            bundle: query.bundle,
            conversation_id: query.conversation_id,
            conversation_owner: None,
            // A key sees its own jobs unless it may read all.
            owner: caller.listing_owner(Action::ListJobs),
            limit,
            cursor: query.cursor,
            search: query.q,
            unfinished: false,
        })
        .await?;
    // Jobs of bundles outside the key's globs do not exist for it.
    page.jobs
        .retain(|job| caller.allows_job(Action::ListJobs, job));
    Ok(Json(
        json!({"jobs": page.jobs, "next_cursor": page.next_cursor}),
    ))
}

/// A listing's `limit`: 50 unless asked, 1 to 1000 (jobs and deliveries).
pub(crate) fn page_limit(asked: Option<usize>) -> Result<usize, ApiError> {
    let limit = asked.unwrap_or(50);
    if limit == 0 || limit > 1000 {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "limit",
            "must be between 1 and 1000",
        ));
    }
    Ok(limit)
}

pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Job>, ApiError> {
    let id = JobId::from(id);
    caller
        .job(Action::ReadJob, &id, state.queue.get(&id).await?)
        .map(Json)
}

pub async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Job>, ApiError> {
    let id = JobId::from(id);
    caller.job(Action::CancelJob, &id, state.queue.get(&id).await?)?;
    let changed = state
        .queue
        .cancel(&id)
        .await?
        .ok_or_else(|| ApiError::job_not_found(&id))?;
    Ok(Json(settled(&state, changed)))
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
    caller.job(Action::DeleteJob, id, state.queue.get(id).await?)?;
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

/// `POST /v1/jobs/{id}/rerun`: the job again, as a new job admitted for
/// the caller like any submit (its key's bundles, limits and budgets).
pub async fn rerun(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<Job>), ApiError> {
    let id = JobId::from(id);
    let source = caller.job(Action::RerunJob, &id, state.queue.get(&id).await?)?;
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
        priority: source.priority,
        run_at: None,
        idempotency_key: None,
        max_attempts: Some(source.max_attempts),
        traceparent: None,
        limits: source.limits,
        owner: None,
        webhook: None,
        push: Vec::new(),
        daily: None,
        push_caps: None,
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

/// `POST /v1/jobs/{id}/resolve`: an operator's answer for a parked job.
pub async fn resolve(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(resolution): JsonBody<Resolution>,
) -> Result<Json<Job>, ApiError> {
    let id = JobId::from(id);
    caller.job(Action::ResolveJob, &id, state.queue.get(&id).await?)?;
    let changed = state.queue.resolve(&id, resolution).await?;
    let job = settled(&state, changed);
    tracing::info!(job_id = %id, state = %job.state, by = caller.name(), "job resolved by an operator");
    Ok(Json(job))
}

/// `GET /v1/jobs/{id}/journal`: the recorded steps, bodies as JSON.
pub async fn journal(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = JobId::from(id);
    caller.job(Action::ReadJob, &id, state.queue.get(&id).await?)?;
    let steps: Vec<Value> = state
        .queue
        .journal(&id)
        .await?
        .into_iter()
        .map(|e| {
            json!({
                "scope": e.scope,
                "turn": e.turn,
                "step": e.step,
                "body": serde_json::from_str::<Value>(&e.body).unwrap_or(Value::String(e.body)),
            })
        })
        .collect();
    Ok(Json(json!({"job_id": id, "steps": steps})))
}
