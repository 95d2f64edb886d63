//! `/v1/jobs`: submit, list, get, cancel.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::AppState;
use super::body::{JsonBody, Path, Query};
use super::error::{ApiError, ErrorCode};
use crate::events::daemon::DaemonEvent;
use crate::queue::{Job, JobFilter, JobId, JobState, NewJob, Resolution};

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
}

pub async fn submit(
    State(state): State<AppState>,
    headers: HeaderMap,
    JsonBody(mut request): JsonBody<SubmitRequest>,
) -> Result<(StatusCode, Json<Job>), ApiError> {
    request.idempotency_key = idempotency_key(request.idempotency_key, &headers)?;
    let new_job = checked(&state, request)?;
    let (job, created) = enqueue(&state, new_job).await?;
    Ok((
        if created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        },
        Json(job),
    ))
}

/// A submit request checked against the loaded bundles, as the job to
/// queue (its idempotency key already taken from the body or header).
fn checked(state: &AppState, request: SubmitRequest) -> Result<NewJob, ApiError> {
    known_bundle(state, &request.bundle, "bundle")?;
    checked_variables(state, &request.bundle, &request.variables)?;
    let mut new_job = validated(request)?;
    new_job.max_attempts = new_job.max_attempts.or(Some(state.max_attempts));
    Ok(new_job)
}

/// The checks of a submit request that need no loaded bundles: times,
/// trace context, conversation id, attempts, idempotency key.
pub(super) fn validated(request: SubmitRequest) -> Result<NewJob, ApiError> {
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
        && !valid_traceparent(tp)
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
    if request.max_attempts == Some(0) {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "max_attempts",
            "must be at least 1",
        ));
    }
    if request
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
    Ok(NewJob {
        id: None,
        bundle: request.bundle,
        bundle_version: None,
        input: request.input,
        variables: request.variables,
        messages: None,
        conversation_id: request.conversation_id,
        priority: request.priority,
        run_at,
        idempotency_key: request.idempotency_key,
        max_attempts: request.max_attempts,
        traceparent: request.traceparent,
        limits: request.limits,
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
    let jobs = request
        .jobs
        .into_iter()
        .enumerate()
        .map(|(i, job)| checked(&state, job).map_err(|e| at_index(i, e)))
        .collect::<Result<Vec<_>, _>>()?;
    let submission = tokio::spawn({
        // As for one job: the queue's answer is counted even if the client
        // hung up.
        let state = state.clone();
        async move {
            let submitted = state.queue.submit_many(jobs).await?;
            for (job, _) in submitted.iter().filter(|(_, created)| *created) {
                state.bus.publish(DaemonEvent::JobSubmitted {
                    bundle: job.bundle.clone(),
                });
            }
            Ok::<_, crate::queue::QueueError>(submitted)
        }
    });
    let submitted = submission
        .await
        .map_err(|e| ApiError::internal(format!("batch submit task failed: {e}")))?
        .map_err(|e| match e {
            crate::queue::QueueError::KeyConflict { index, .. } => ApiError::field(
                ErrorCode::IdempotencyConflict,
                format!("jobs[{index}].idempotency_key"),
                e.to_string(),
            ),
            e => e.into(),
        })?;
    let any_created = submitted.iter().any(|(_, created)| *created);
    let (jobs, created): (Vec<Job>, Vec<bool>) = submitted.into_iter().unzip();
    let status = if any_created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(json!({"jobs": jobs, "created": created}))))
}

/// A job's refusal within a batch: its field and message name its index.
fn at_index(index: usize, mut e: ApiError) -> ApiError {
    e.field = Some(match e.field {
        Some(field) => format!("jobs[{index}].{field}"),
        None => format!("jobs[{index}]"),
    });
    e.message = format!("job {index} of the batch: {}", e.message);
    e
}

/// A 422 naming `field` and the loaded bundles unless `name` is loaded.
pub(super) fn known_bundle(state: &AppState, name: &str, field: &str) -> Result<(), ApiError> {
    let snapshot = state.registry.snapshot();
    if snapshot.bundle(name).is_some() {
        return Ok(());
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

/// Refuses variables the job cannot have: a `tools` subset its bundle
/// cannot offer, and variables only the daemon may set — a group-chat plan
/// (which names the agents, endpoints and rounds of a chat) comes only from
/// `POST /api/group-chat`, which checks it; a submitter cannot hand one to
/// the host bundle directly.
pub(super) fn checked_variables(
    state: &AppState,
    bundle: &str,
    variables: &Map<String, Value>,
) -> Result<(), ApiError> {
    let snapshot = state.registry.snapshot();
    let Some(loaded) = snapshot.bundle(bundle) else {
        return Ok(());
    };
    offered_tools(loaded, variables)?;
    let plan = crate::group_chat::PLAN_VARIABLE;
    let hosts_chats = loaded.bundle.raw.group_chat.is_some();
    if hosts_chats && variables.contains_key(plan) {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            format!("variables.{plan}"),
            format!(
                "`variables.{plan}` is set by the daemon: bundle {bundle:?} hosts group chats, which start with POST /api/group-chat"
            ),
        ));
    }
    Ok(())
}

/// A 422 unless the job's `tools` variable (when set) names tools its
/// agent bundle can offer alone.
fn offered_tools(
    loaded: &crate::registry::LoadedBundle,
    variables: &Map<String, Value>,
) -> Result<(), ApiError> {
    let variable = crate::bundle::TOOLS_VARIABLE;
    let refused = |message: String| {
        ApiError::field(
            ErrorCode::InvalidRequest,
            format!("variables.{variable}"),
            message,
        )
    };
    let Some(names) = crate::bundle::requested_tools(variables).map_err(refused)? else {
        return Ok(());
    };
    let raw = &loaded.bundle.raw;
    if raw.workflow.is_some() || raw.group_chat.is_some() {
        return Err(refused(format!(
            "`variables.{variable}` offers a subset of an agent bundle's tools; bundle {:?} is a {} (leave the variable out)",
            loaded.name(),
            if raw.workflow.is_some() {
                "workflow"
            } else {
                "group-chat host"
            }
        )));
    }
    let tools = loaded
        .tools
        .subset(&names)
        .map_err(|e| refused(format!("bundle {:?} has {e}", loaded.name())))?;
    loaded.shapes_for(&tools).map(|_| ()).map_err(refused)
}

/// Queues a job (or finds the one its idempotency key names). axum drops a
/// handler's future when the client hangs up, and the queue may still
/// create the job, so the submission and its bookkeeping (counting, waking
/// a worker) run in a task of their own that finishes whether or not anyone
/// reads the answer.
/// A job that does not say how many attempts it gets has the daemon's
/// `queue.max_attempts`.
pub(super) async fn enqueue(
    state: &AppState,
    mut new_job: NewJob,
) -> Result<(Job, bool), ApiError> {
    new_job.max_attempts.get_or_insert(state.max_attempts);
    super::budgets::admit(state, &new_job).await?;
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
    // Every way in (`/v1/jobs`, `/api/agents/{id}/message`, …) refuses a
    // reused key for a different job the same way.
    if !created {
        same_job(&job, &expected)?;
    }
    Ok((job, created))
}

/// Queues a job and waits until it is finished or parked: a synchronous
/// caller's answer (see [`wait_finished`]).
pub(super) async fn run_to_end(state: &AppState, new_job: NewJob) -> Result<Job, ApiError> {
    let (job, _) = enqueue(state, new_job).await?;
    wait_finished(state, &job.id).await
}

/// Waits until the job is finished, or parked for a person (which only a
/// resolution or a decision ends): the answer a synchronous caller can get.
pub(super) async fn wait_finished(state: &AppState, id: &JobId) -> Result<Job, ApiError> {
    let mut updates = state.queue.subscribe();
    loop {
        let job = state
            .queue
            .get(id)
            .await?
            .ok_or_else(|| ApiError::new(ErrorCode::NotFound, format!("job {id} vanished")))?;
        if job.state.is_terminal() || job.state.is_parked() {
            return Ok(job);
        }
        // Only this job's updates are worth a read; the recheck covers
        // notifications lost while the queue's notifier lagged.
        let recheck = tokio::time::sleep(state.sse_recheck);
        tokio::pin!(recheck);
        loop {
            tokio::select! {
                update = updates.recv() => match update {
                    Ok(changed) if &changed == id => break,
                    Ok(_) => continue,
                    Err(_) => break,
                },
                _ = &mut recheck => break,
            }
        }
    }
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

/// A repeated idempotency key must describe the same job; otherwise the
/// caller would believe a different job had been queued.
fn same_job(existing: &Job, asked: &NewJob) -> Result<(), ApiError> {
    let differs = if existing.bundle != asked.bundle {
        "bundle"
    } else if existing.input != asked.input {
        "input"
    } else if existing.variables != asked.variables {
        "variables"
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

fn valid_traceparent(tp: &str) -> bool {
    let parts: Vec<&str> = tp.split('-').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.chars().all(|c| c.is_ascii_hexdigit());
    parts.len() == 4
        && hex(parts[0], 2)
        && hex(parts[1], 32)
        && hex(parts[2], 16)
        && hex(parts[3], 2)
        && parts[1] != "0".repeat(32)
        && parts[2] != "0".repeat(16)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    pub state: Option<String>,
    pub bundle: Option<String>,
    pub conversation_id: Option<String>,
    pub limit: Option<usize>,
    pub cursor: Option<String>,
}

pub async fn list(
    State(state): State<AppState>,
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
    let limit = query.limit.unwrap_or(50);
    if limit == 0 || limit > 1000 {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "limit",
            "must be between 1 and 1000",
        ));
    }
    let page = state
        .queue
        .list(JobFilter {
            state: job_state,
            bundle: query.bundle,
            conversation_id: query.conversation_id,
            limit,
            cursor: query.cursor,
        })
        .await?;
    Ok(Json(
        json!({"jobs": page.jobs, "next_cursor": page.next_cursor}),
    ))
}

pub async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Job>, ApiError> {
    let id = JobId::from(id);
    state
        .queue
        .get(&id)
        .await?
        .map(Json)
        .ok_or_else(|| not_found(&id))
}

pub async fn cancel(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Job>, ApiError> {
    let id = JobId::from(id);
    let changed = state
        .queue
        .cancel(&id)
        .await?
        .ok_or_else(|| not_found(&id))?;
    Ok(Json(settled(&state, changed)))
}

/// The job an operator's request left; a final event it recorded is
/// counted (metrics) like a run's.
fn settled(state: &AppState, changed: crate::queue::Changed) -> Job {
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
    Path(id): Path<String>,
    JsonBody(resolution): JsonBody<Resolution>,
) -> Result<Json<Job>, ApiError> {
    let id = JobId::from(id);
    let changed = state.queue.resolve(&id, resolution).await?;
    let job = settled(&state, changed);
    tracing::info!(job_id = %id, state = %job.state, "job resolved by an operator");
    Ok(Json(job))
}

/// `GET /v1/jobs/{id}/journal`: the recorded steps, bodies as JSON.
pub async fn journal(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = JobId::from(id);
    if state.queue.get(&id).await?.is_none() {
        return Err(not_found(&id));
    }
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

pub(super) fn not_found(id: &JobId) -> ApiError {
    ApiError::new(ErrorCode::NotFound, format!("no job with id {id}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn traceparents() {
        assert!(super::valid_traceparent(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        ));
        assert!(!super::valid_traceparent(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"
        ));
        assert!(!super::valid_traceparent(
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01"
        ));
    }
}
