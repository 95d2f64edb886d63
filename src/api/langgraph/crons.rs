//! Crons are schedules: `POST /threads/{id}/runs/crons` (each run
//! continues the thread), `POST /runs/crons` (each run alone), `PATCH` and
//! `DELETE /runs/crons/{cron_id}` (searched by `cron_search`). A cron is a schedule of the key
//! (`api::schedules`: the same store, caps, scheduler and admission, listed
//! in `/v1/schedules` too) whose fires are its run request read once
//! (`runs::template`), and whose spec keeps what the client sent with it
//! (`Stored::run_meta`) for the cron's and each run's view. A key's crons
//! are its own: another key's cron id is unknown to it.

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::super::AppState;
use super::super::auth::Caller;
use super::super::body::{JsonBody, Path};
use super::super::document::answers;
use super::super::error::{ApiError, ErrorCode};
use super::super::schedules::{first_fire, held_within_caps, stored_id};
use super::run_routes;
use super::runs::{self, RunRequest};
use crate::access::policy::{Action, Resource};
use crate::queue::{StoredSchedule, rfc3339};
use crate::schedule::{Overlap, ScheduleSpec, Stored};
use crate::scheduler::{FROM_BUNDLE, own_id, stored_spec};

/// A cron as LangGraph's clients see it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Cron {
    pub cron_id: String,
    pub assistant_id: String,
    /// The thread each run continues; `null`: each run is alone.
    pub thread_id: Option<String>,
    /// `keep` for a cron without a thread (its runs' jobs are kept as
    /// `[retention]` says); `null` with a thread.
    pub on_run_completed: Option<String>,
    /// No run after this (RFC 3339).
    pub end_time: Option<String>,
    pub schedule: String,
    pub timezone: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// The run each fire starts, as the client sent it.
    pub payload: Map<String, Value>,
    /// The key that made it.
    pub user_id: Option<String>,
    pub next_run_date: Option<String>,
    pub metadata: Map<String, Value>,
    pub enabled: bool,
}

/// The body of a cron's create: a run request, and when it runs.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct CronRequest {
    /// Five fields (minute hour day month weekday) or six with seconds
    /// first, read in `timezone`.
    pub schedule: String,
    /// The IANA time zone the schedule is read in (default UTC).
    #[serde(default)]
    pub timezone: Option<String>,
    /// No run after this time (RFC 3339).
    #[serde(default)]
    pub end_time: Option<String>,
    /// `false`: made paused.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// `keep` (or none): each run's job is kept as `[retention]` says
    /// (`delete` is refused).
    #[serde(default)]
    #[schemars(extend("enum" = ["keep", null]))]
    pub on_run_completed: Option<String>,
    #[serde(flatten)]
    pub run: RunRequest,
}

/// The body of `PATCH /runs/crons/{cron_id}`: what changes.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct CronUpdate {
    #[serde(default)]
    pub schedule: Option<String>,
    #[serde(default)]
    pub timezone: Option<String>,
    /// `null` clears it.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<String>")]
    pub end_time: Option<Option<String>>,
    #[serde(default)]
    pub input: Option<Value>,
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default)]
    pub config: Option<Value>,
    #[serde(default)]
    pub context: Option<Map<String, Value>>,
    #[serde(default)]
    pub webhook: Option<String>,
    #[serde(default)]
    pub enabled: Option<bool>,
    #[serde(default)]
    #[schemars(extend("enum" = ["keep", null]))]
    pub on_run_completed: Option<String>,
    /// Taken and kept: `stream_mode`, `interrupt_before`, …
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// A field sent (even as `null`) is `Some`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

fn refused(field: &str, why: impl Into<String>) -> ApiError {
    ApiError::field(ErrorCode::InvalidRequest, field, why)
}

fn not_found(id: &str) -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        format!(
            "no cron {id:?}: a cron is a schedule this key made (POST /runs/crons/search lists them)"
        ),
    )
}

/// One of the key's crons, read: its schedule, its spec and its view.
pub(super) struct Found {
    pub(super) schedule: StoredSchedule,
    pub(super) stored: Stored,
    pub(super) view: Cron,
}

/// `schedule` as a cron, if it is one (made by a LangGraph client).
fn cron_of(schedule: &StoredSchedule) -> Option<Found> {
    let stored: Stored = serde_json::from_str(&schedule.spec).ok()?;
    let meta = stored.run_meta.clone()?;
    let spec = &stored.spec;
    let mut payload = meta["kwargs"].as_object().cloned().unwrap_or_default();
    payload.insert("assistant_id".into(), meta["assistant_id"].clone());
    payload.insert("metadata".into(), meta["metadata"].clone());
    payload.insert(
        "multitask_strategy".into(),
        meta["multitask_strategy"].clone(),
    );
    let view = Cron {
        cron_id: own_id(schedule).to_string(),
        assistant_id: meta["assistant_id"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        thread_id: spec.conversation.clone(),
        on_run_completed: spec.conversation.is_none().then(|| "keep".to_string()),
        end_time: spec.until.clone(),
        schedule: spec.cron.clone(),
        timezone: Some(spec.timezone.clone()),
        created_at: rfc3339(schedule.created_at),
        updated_at: rfc3339(schedule.updated_at),
        payload,
        user_id: schedule.owner.clone(),
        next_run_date: schedule.next_fire.filter(|_| !schedule.paused).map(rfc3339),
        metadata: meta["metadata"].as_object().cloned().unwrap_or_default(),
        enabled: !schedule.paused,
    };
    Some(Found {
        schedule: schedule.clone(),
        stored,
        view,
    })
}

/// The caller's crons, once the policy lets it do `action` on schedules.
pub(super) async fn own_crons(
    state: &AppState,
    caller: &Caller,
    action: Action,
) -> Result<Vec<Found>, ApiError> {
    let owner = caller.name();
    let schedules = state.queue.schedules().await?;
    Ok(schedules
        .iter()
        .filter(|s| s.source != FROM_BUNDLE && s.owner.as_deref() == Some(owner))
        .filter_map(cron_of)
        .filter(|found| {
            let resource =
                Resource::owned("schedule", Some(owner), Some(found.stored.bundle.as_str()));
            caller.allows(action, &resource)
        })
        .collect())
}

/// The caller's cron `id`, once the policy lets it do `action` there.
async fn own_cron(
    state: &AppState,
    caller: &Caller,
    action: Action,
    id: &str,
) -> Result<Found, ApiError> {
    let stored = stored_id(caller.name(), id);
    own_crons(state, caller, action)
        .await?
        .into_iter()
        .find(|found| found.schedule.id == stored)
        .ok_or_else(|| not_found(id))
}

/// The cron stored as `stored_id`, read back as it stands after a write
/// the caller was let make (it need not be let read schedules as well).
async fn written(state: &AppState, stored_id: &str, id: &str) -> Result<Json<Cron>, ApiError> {
    let schedules = state.queue.schedules().await?;
    schedules
        .iter()
        .find(|s| s.id == stored_id)
        .and_then(cron_of)
        .map(|found| Json(found.view))
        .ok_or_else(|| not_found(id))
}

/// What a cron's `multitask_strategy` makes of a fire that comes while
/// the thread's last run has not ended.
fn overlap_of(strategy: Option<&str>) -> Result<Overlap, ApiError> {
    match strategy {
        None | Some("reject") => Ok(Overlap::Skip),
        Some("enqueue") => Ok(Overlap::Queue),
        Some("interrupt" | "rollback") => Ok(Overlap::CancelPrevious),
        Some(other) => Err(refused(
            "multitask_strategy",
            format!(
                "multitask_strategy {other:?} is not one of `reject`, `enqueue`, `interrupt`, `rollback`"
            ),
        )),
    }
}

/// `on_run_completed`: only `keep` (what every cron's runs are).
fn kept(on_run_completed: Option<&str>) -> Result<(), ApiError> {
    match on_run_completed {
        None | Some("keep") => Ok(()),
        Some(other) => Err(refused(
            "on_run_completed",
            format!(
                "on_run_completed {other:?}: a cron's runs are jobs kept as the daemon's `[retention]` says; send `keep` (or nothing)"
            ),
        )),
    }
}

/// The cron `request` as a schedule spec and its client's settings.
async fn spec_of(
    state: &AppState,
    caller: &Caller,
    request: &CronRequest,
    thread: Option<&str>,
) -> Result<(String, ScheduleSpec, Value), ApiError> {
    if request
        .run
        .command
        .as_ref()
        .is_some_and(|command| !command.is_null())
    {
        return Err(refused(
            "command",
            "a cron starts new runs: resume a parked run with a run on its thread",
        ));
    }
    kept(request.on_run_completed.as_deref())?;
    let template = runs::template(state, caller, &request.run).await?;
    let spec = ScheduleSpec {
        timezone: request.timezone.clone().unwrap_or_else(|| "UTC".into()),
        input: template.input,
        variables: template.variables,
        overlap: overlap_of(request.run.multitask_strategy.as_deref())?,
        until: request.end_time.clone(),
        conversation: thread.map(str::to_string),
        webhook: request.run.webhook.clone(),
        ..ScheduleSpec::new(request.schedule.clone())
    };
    Ok((template.bundle, spec, template.run_meta))
}

/// Makes the cron: a schedule of the caller's key.
async fn make(
    state: &AppState,
    caller: &Caller,
    request: CronRequest,
    thread: Option<&str>,
) -> Result<Json<Cron>, ApiError> {
    let (bundle, spec, run_meta) = spec_of(state, caller, &request, thread).await?;
    caller.on_bundle(Action::CreateSchedule, &bundle, "assistant_id")?;
    let first = first_fire(state, &spec)?;
    held_within_caps(state, caller, &state.queue.schedules().await?)?;
    let id = uuid::Uuid::new_v4().to_string();
    let stored = stored_id(caller.name(), &id);
    let mut schedule = StoredSchedule::new(
        stored.clone(),
        "api".into(),
        stored_spec(&bundle, &spec, Some(run_meta)),
        Some(caller.name().to_string()),
        first,
    );
    schedule.paused = request.enabled == Some(false);
    state.queue.put_schedule(schedule).await?;
    tracing::info!(cron = %id, bundle = %bundle, by = caller.name(), "cron made");
    written(state, &stored, &id).await
}

/// A cron's create in the API document.
pub(super) fn create_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Make a cron: a schedule of this key that starts the run on each fire")
        .response_with::<200, Json<Cron>, _>(|r| r.description("The cron"));
    answers(
        op,
        &[
            (
                404,
                "No such assistant, or (for a thread's cron) thread, for this key",
            ),
            (
                422,
                "A field is invalid (it is named): the schedule, the time zone, the input, …",
            ),
            (
                429,
                "The key's share of schedules (server.max_schedules_per_key) or the daemon's is used up",
            ),
        ],
    )
}

/// `POST /runs/crons`: each run alone.
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(request): JsonBody<CronRequest>,
) -> Result<Json<Cron>, ApiError> {
    make(&state, &caller, request, None).await
}

/// `POST /threads/{thread_id}/runs/crons`: each run continues the thread.
pub async fn create_for_thread(
    State(state): State<AppState>,
    caller: Caller,
    Path(thread): Path<String>,
    JsonBody(request): JsonBody<CronRequest>,
) -> Result<Json<Cron>, ApiError> {
    let made = request.run.if_not_exists.as_deref();
    run_routes::thread_for(&state, &caller, &thread, made).await?;
    make(&state, &caller, request, Some(&thread)).await
}

/// `PATCH /runs/crons/{cron_id}` in the API document.
pub(super) fn update_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Change a cron: its schedule, end, run or whether it is enabled")
        .response_with::<200, Json<Cron>, _>(|r| r.description("The cron after"));
    answers(
        op,
        &[
            (404, "This key has no such cron"),
            (422, "A field is invalid (it is named)"),
        ],
    )
}

/// `PATCH /runs/crons/{cron_id}`: the cron's fields given replaced, the
/// rest kept; its next run is the new schedule's first from now.
pub async fn update(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(update): JsonBody<CronUpdate>,
) -> Result<Json<Cron>, ApiError> {
    let found = own_cron(&state, &caller, Action::ManageSchedule, &id).await?;
    let thread = found.stored.spec.conversation.clone();
    let request = updated_request(&found, update)?;
    let (bundle, spec, run_meta) = spec_of(&state, &caller, &request, thread.as_deref()).await?;
    if bundle != found.stored.bundle {
        caller.on_bundle(Action::CreateSchedule, &bundle, "assistant_id")?;
    }
    let next_fire = first_fire(&state, &spec)?;
    let edited = StoredSchedule {
        spec: stored_spec(&bundle, &spec, Some(run_meta)),
        next_fire,
        ..found.schedule.clone()
    };
    state.queue.put_schedule(edited).await?;
    if let Some(enabled) = request.enabled
        && enabled == found.schedule.paused
    {
        state
            .queue
            .pause_schedule(&found.schedule.id, !enabled)
            .await?;
    }
    tracing::info!(cron = %id, by = caller.name(), "cron changed");
    written(&state, &found.schedule.id, &id).await
}

/// The cron's create request as it was, with `update`'s fields replacing
/// its own.
fn updated_request(found: &Found, update: CronUpdate) -> Result<CronRequest, ApiError> {
    let mut body = found.view.payload.clone();
    body.insert(
        "schedule".into(),
        Value::String(found.view.schedule.clone()),
    );
    body.insert("timezone".into(), json_text(found.view.timezone.clone()));
    body.insert("end_time".into(), json_text(found.view.end_time.clone()));
    let mut set = |key: &str, value: Option<Value>| {
        if let Some(value) = value {
            body.insert(key.to_string(), value);
        }
    };
    set("schedule", update.schedule.map(Value::String));
    set("timezone", update.timezone.map(Value::String));
    set("end_time", update.end_time.map(json_text));
    set("input", update.input);
    set("metadata", update.metadata.map(Value::Object));
    set("config", update.config);
    set("context", update.context.map(Value::Object));
    set("webhook", update.webhook.map(Value::String));
    set("enabled", update.enabled.map(Value::Bool));
    set(
        "on_run_completed",
        update.on_run_completed.map(Value::String),
    );
    for (key, value) in update.rest {
        body.insert(key, value);
    }
    serde_json::from_value(Value::Object(body)).map_err(|e| refused("body", e.to_string()))
}

fn json_text(text: Option<String>) -> Value {
    text.map_or(Value::Null, Value::String)
}

/// `DELETE /runs/crons/{cron_id}` in the API document.
pub(super) fn delete_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Delete a cron (its runs so far are kept)")
        .response_with::<204, (), _>(|r| r.description("Deleted"));
    answers(op, &[(404, "This key has no such cron")])
}

/// `DELETE /runs/crons/{cron_id}`.
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let found = own_cron(&state, &caller, Action::ManageSchedule, &id).await?;
    state.queue.delete_schedule(&found.schedule.id).await?;
    tracing::info!(cron = %id, by = caller.name(), "cron deleted");
    Ok(StatusCode::NO_CONTENT)
}
