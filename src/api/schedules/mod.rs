//! `/v1/schedules`: make, list, edit, pause, resume, delete and run now the
//! schedules that submit a bundle's job on a cron (see `crate::schedule`).
//! A schedule made here is owned by the caller's key, and its fires are
//! submitted as that key; a bundle's own `schedule:` is listed too, owned
//! by the daemon, and can be paused or run but is deleted only by removing
//! it from the bundle. The scheduler that fires them is `crate::scheduler`,
//! admitting each fire through `api::on_behalf`.
//!
//! Ids are namespaced per key ([`Named`]): a key's schedule `nightly` is
//! stored as `KEY:nightly`, so two keys may both have one and making yours
//! never tells you whether another key's exists. A key names its own by
//! the bare id, another key's (where the policy lets it) as `KEY:ID`, and
//! a bundle's own by the bundle's name.

mod edit;

pub(super) use edit::{edit, edit_doc};

use std::time::SystemTime;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::AppState;
use super::admission::{Submission, admit, known_bundle};
use super::auth::Caller;
use super::body::{JsonBody, Path, Query};
use super::error::{ApiError, ErrorCode};
use crate::access::policy::{Action, Resource};
use crate::queue::{Job, StoredSchedule, rfc3339};
use crate::schedule::{ScheduleSpec, Stored};
use crate::scheduler::{FROM_BUNDLE, own_id, stored_spec};

/// A schedule's id: letters, digits, `-`, `_`, `.` (no `:`, which
/// separates a key's name from its schedule's id: `KEY:ID`).
const ID_PATTERN: &str = "^[A-Za-z0-9._-]+$";

/// Whether `id` is a schedule id by [`ID_PATTERN`].
fn is_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// The body of `POST /v1/schedules`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct NewSchedule {
    /// The schedule's id (default: a fresh UUIDv7). Letters, digits, `-`, `_`, `.`.
    #[serde(default)]
    #[schemars(regex(pattern = ID_PATTERN))]
    pub id: Option<String>,
    pub bundle: String,
    #[serde(flatten)]
    pub spec: ScheduleSpec,
}

/// A schedule as the API shows it.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct ScheduleView {
    /// As the caller names it: its own schedule's bare id, another key's
    /// `KEY:ID`, a bundle's own by the bundle's name.
    pub id: String,
    /// `bundle` (the bundle's own `schedule:`) or `api`.
    pub source: String,
    pub bundle: String,
    pub owner: Option<String>,
    pub paused: bool,
    /// RFC 3339 UTC; `null` when the cron never fires again.
    pub next_fire: Option<String>,
    pub last_fire: Option<String>,
    pub last_job: Option<String>,
    /// `submitted`, `missed` (fires passed over by `missed`),
    /// `skipped_overlap` or `refused` (admission said no; see the log).
    pub last_outcome: Option<String>,
    /// The state of the last fire's job (`needs_attention` or
    /// `awaiting_approval`: it is parked, and an `overlap: queue` schedule
    /// waits for it); `null` without one.
    pub last_job_state: Option<crate::queue::JobState>,
    /// The next fires, up to three, RFC 3339 UTC.
    pub next_fires: Vec<String>,
    /// Fires passed over so far (late past the grace under `missed`, or
    /// while paused).
    pub missed_fires: u64,
    pub spec: ScheduleSpec,
}

impl ScheduleView {
    /// `schedule` as `caller` names it.
    async fn of(state: &AppState, schedule: StoredSchedule, caller: &Caller) -> Option<Self> {
        let stored: Stored = serde_json::from_str(&schedule.spec).ok()?;
        let last_job_state = match &schedule.last_job {
            Some(id) => {
                let id = crate::queue::JobId::from(id.as_str());
                state
                    .queue
                    .get(&id)
                    .await
                    .ok()
                    .flatten()
                    .map(|job| job.state)
            }
            None => None,
        };
        let compiled = stored.spec.compile().ok();
        let mut next_fires = Vec::new();
        let mut cursor = schedule.next_fire.filter(|_| !schedule.paused);
        while let (Some(fire), Some(compiled)) = (cursor, &compiled) {
            if next_fires.len() == 3 {
                break;
            }
            next_fires.push(rfc3339(fire));
            cursor = crate::schedule::next_after(compiled, fire);
        }
        Some(Self {
            id: Named::shown(&schedule, caller.name()),
            source: schedule.source,
            bundle: stored.bundle,
            owner: schedule.owner,
            paused: schedule.paused,
            next_fire: schedule.next_fire.map(rfc3339),
            last_fire: schedule.last_fire.map(rfc3339),
            last_job: schedule.last_job,
            last_outcome: schedule.last_outcome,
            last_job_state,
            next_fires,
            missed_fires: schedule.missed_fires,
            spec: stored.spec,
        })
    }
}

fn not_found(id: &str) -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        format!("no schedule {id:?}; see GET /v1/schedules"),
    )
}

/// `POST /v1/schedules`.
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody<NewSchedule>,
) -> Result<(StatusCode, Json<ScheduleView>), ApiError> {
    caller.on_bundle(Action::CreateSchedule, &body.bundle, "bundle")?;
    known_bundle(&state, &body.bundle, "bundle")?;
    let first = first_fire(&state, &body.spec)?;
    let id = body.id.unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    if !is_id(&id) {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "id",
            format!("{id:?} is not a schedule id: use letters, digits, `-`, `_`, `.`"),
        ));
    }
    let schedules = state.queue.schedules().await?;
    held_within_caps(&state, &caller, &schedules)?;
    if Named::Own(&id).find(&schedules, caller.name()).is_some() {
        return Err(ApiError::field(
            ErrorCode::IdempotencyConflict,
            "id",
            format!("you have a schedule {id:?} already; pick another id or delete it first"),
        ));
    }
    let schedule = StoredSchedule::new(
        Named::stored(caller.name(), &id),
        "api".into(),
        stored_spec(&body.bundle, &body.spec, None),
        Some(caller.name().to_string()),
        first,
    );
    state.queue.put_schedule(schedule.clone()).await?;
    tracing::info!(schedule = %id, bundle = %body.bundle, by = caller.name(), "schedule made");
    let view = ScheduleView::of(&state, schedule, &caller)
        .await
        .ok_or_else(|| ApiError::internal("schedule view"))?;
    Ok((StatusCode::CREATED, Json(view)))
}

/// The first fire of `spec` from now, or a 422 naming the field of the
/// spec that does not compile (its webhook checked as a job's would be).
pub(in crate::api) fn first_fire(
    state: &AppState,
    spec: &ScheduleSpec,
) -> Result<Option<i64>, ApiError> {
    if let Some(url) = &spec.webhook {
        super::admission::check_callback(state, "webhook", url)?;
    }
    let compiled = spec.compile().map_err(|e| {
        let text = e.to_string();
        let field = text
            .split(':')
            .next()
            .unwrap_or("schedule")
            .replace("schedule.", "");
        ApiError::field(ErrorCode::InvalidRequest, field, text)
    })?;
    let now = crate::queue::millis(SystemTime::now());
    Ok(crate::schedule::next_after(&compiled, now))
}

/// Refuses one more API schedule past `server.max_schedules` in all or the
/// key's share (`server.max_schedules_per_key`): every schedule is a row the
/// scheduler reads each second.
pub(in crate::api) fn held_within_caps(
    state: &AppState,
    caller: &Caller,
    schedules: &[StoredSchedule],
) -> Result<(), ApiError> {
    let server = &state.registry.snapshot().config.server;
    let made = schedules.iter().filter(|s| s.source != FROM_BUNDLE);
    let (all, own) = made.fold((0, 0), |(all, own), s| {
        let mine = s.owner.as_deref() == Some(caller.name());
        (all + 1, own + usize::from(mine))
    });
    let refused =
        |message: String| Err(ApiError::new(ErrorCode::QuotaExceeded, message).retry_after(60));
    if own >= server.schedules_per_key() {
        return refused(format!(
            "API key {:?} has {own} schedules, its share (server.max_schedules_per_key, {}); delete one (DELETE /v1/schedules/{{id}}) first",
            caller.name(),
            server.schedules_per_key()
        ));
    }
    if all >= server.max_schedules {
        return refused(format!(
            "the daemon holds {all} schedules made over the API, its limit (server.max_schedules); delete one first, or ask the operator to raise it"
        ));
    }
    Ok(())
}

/// `GET /v1/schedules`: the schedules the caller's key may see.
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<Vec<ScheduleView>>, ApiError> {
    let schedules = state.queue.schedules().await?;
    let mut views = Vec::new();
    for schedule in schedules
        .into_iter()
        .filter(|s| caller.allows(Action::ReadSchedule, &Owned::of(s).resource()))
    {
        views.extend(ScheduleView::of(&state, schedule, &caller).await);
    }
    Ok(Json(views))
}

/// `GET /v1/schedules/{id}`.
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<ScheduleView>, ApiError> {
    let schedule = authorized(&state, &caller, Action::ReadSchedule, &id).await?;
    ScheduleView::of(&state, schedule, &caller)
        .await
        .map(Json)
        .ok_or_else(|| not_found(&id))
}

/// The schedule `id` if the policy lets the caller do `action` on it;
/// another key's it may not read is the 404 an unknown id gets.
async fn authorized(
    state: &AppState,
    caller: &Caller,
    action: Action,
    id: &str,
) -> Result<StoredSchedule, ApiError> {
    let schedules = state.queue.schedules().await?;
    let schedule = Named::parse(id)
        .find(&schedules, caller.name())
        .cloned()
        .ok_or_else(|| not_found(id))?;
    caller.authorize(action, &Owned::of(&schedule).resource(), || not_found(id))?;
    Ok(schedule)
}

/// How an API schedule `id` of `owner` is stored (a LangGraph cron's too).
pub(in crate::api) fn stored_id(owner: &str, id: &str) -> String {
    Named::stored(owner, id)
}

/// The bundle a stored schedule fires (`None`: a spec this binary cannot
/// read, which the scheduler skips too).
pub fn bundle_of(schedule: &StoredSchedule) -> Option<String> {
    serde_json::from_str::<Stored>(&schedule.spec)
        .ok()
        .map(|stored| stored.bundle)
}

/// A schedule as the policy sees it: its owner and the bundle it fires.
struct Owned<'a> {
    owner: Option<&'a str>,
    bundle: Option<String>,
}

impl<'a> Owned<'a> {
    fn of(schedule: &'a StoredSchedule) -> Self {
        Self {
            owner: schedule.owner.as_deref(),
            bundle: bundle_of(schedule),
        }
    }

    fn resource(&self) -> Resource<'_> {
        Resource::owned("schedule", self.owner, self.bundle.as_deref())
    }
}

/// A schedule id as a key names it: its own by the bare id (`Own`),
/// another key's as `KEY:ID` (`Qualified`). Key names and ids have no
/// `:`, so the first one splits them.
enum Named<'a> {
    Own(&'a str),
    Qualified { owner: &'a str, id: &'a str },
}

impl<'a> Named<'a> {
    fn parse(id: &'a str) -> Self {
        match id.split_once(':') {
            Some((owner, id)) => Named::Qualified { owner, id },
            None => Named::Own(id),
        }
    }

    /// How an API schedule of `owner` is stored.
    fn stored(owner: &str, id: &str) -> String {
        format!("{owner}:{id}")
    }

    /// The schedule this name means to `caller`: an API schedule of the
    /// key it names (stored namespaced, or bare from before namespacing),
    /// or for a bare id also a bundle's own schedule of that name.
    fn find<'s>(
        &self,
        schedules: &'s [StoredSchedule],
        caller: &str,
    ) -> Option<&'s StoredSchedule> {
        let (owner, id) = match *self {
            Named::Own(id) => (caller, id),
            Named::Qualified { owner, id } => (owner, id),
        };
        let stored = Self::stored(owner, id);
        let made = |s: &&StoredSchedule| {
            s.source != FROM_BUNDLE
                && (s.id == stored || (s.id == id && s.owner.as_deref() == Some(owner)))
        };
        let bundle = |s: &&StoredSchedule| {
            matches!(self, Named::Own(_)) && s.source == FROM_BUNDLE && s.id == id
        };
        schedules
            .iter()
            .find(made)
            .or_else(|| schedules.iter().find(bundle))
    }

    /// How `caller` names `schedule`: its own by the bare id, another
    /// key's qualified, a bundle's by the bundle's name.
    fn shown(schedule: &StoredSchedule, caller: &str) -> String {
        match schedule.owner.as_deref() {
            Some(owner) if owner != caller && schedule.source != FROM_BUNDLE => {
                Self::stored(owner, own_id(schedule))
            }
            _ => own_id(schedule).to_string(),
        }
    }
}

async fn set_paused(
    state: AppState,
    caller: Caller,
    id: String,
    paused: bool,
    catch_up: bool,
) -> Result<Json<ScheduleView>, ApiError> {
    let schedule = authorized(&state, &caller, Action::ManageSchedule, &id).await?;
    if !paused && schedule.paused && !catch_up {
        crate::scheduler::pass_over_paused_fires(state.queue.as_ref(), &state.bus, &schedule)
            .await?;
    }
    if !state.queue.pause_schedule(&schedule.id, paused).await? {
        return Err(not_found(&id));
    }
    tracing::info!(schedule = %schedule.id, paused, by = caller.name(), "schedule paused or resumed");
    // Answered as the key that changed it may see it (an `operate_all` key
    // may pause a schedule it cannot read).
    let schedule = authorized(&state, &caller, Action::ManageSchedule, &id).await?;
    ScheduleView::of(&state, schedule, &caller)
        .await
        .map(Json)
        .ok_or_else(|| not_found(&id))
}

/// `POST /v1/schedules/{id}/pause`: no fire is submitted until resumed
/// (fires meanwhile count as missed).
pub async fn pause(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<ScheduleView>, ApiError> {
    set_paused(state, caller, id, true, false).await
}

/// How a schedule resumes.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResumeQuery {
    /// Run the fires that came while it was paused, by its `missed` policy
    /// (default: they are passed over, counted as missed).
    #[serde(default)]
    pub catch_up: bool,
}

/// `POST /v1/schedules/{id}/resume[?catch_up=true]`: fires again from now
/// on; the fires while paused are passed over unless `catch_up`.
pub async fn resume(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(query): Query<ResumeQuery>,
) -> Result<Json<ScheduleView>, ApiError> {
    set_paused(state, caller, id, false, query.catch_up).await
}

/// `DELETE /v1/schedules/{id}`: a schedule made over the API (a bundle's
/// goes with its `schedule:`).
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let schedule = authorized(&state, &caller, Action::ManageSchedule, &id).await?;
    if schedule.source == FROM_BUNDLE {
        return Err(ApiError::new(
            ErrorCode::InvalidState,
            format!(
                "schedule {id} is declared by bundle {id}'s `schedule:`; remove it there (and reload), or pause it"
            ),
        ));
    }
    state.queue.delete_schedule(&schedule.id).await?;
    tracing::info!(schedule = %schedule.id, by = caller.name(), "schedule deleted");
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/schedules/{id}/run`: one job of the schedule now, admitted as
/// the caller, outside the cron (no fire is used up).
pub async fn run(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<Job>), ApiError> {
    let schedule = authorized(&state, &caller, Action::RunSchedule, &id).await?;
    let stored: Stored = serde_json::from_str(&schedule.spec).map_err(|_| not_found(&id))?;
    let job = crate::scheduler::fire_job(&stored);
    let (job, _) = admit(&state, &caller, Submission::new(job, "bundle")).await?;
    Ok((StatusCode::CREATED, Json(job)))
}

/// The API document's entries of the schedule routes.
pub(super) mod doc {
    use aide::transform::TransformOperation;
    use axum::Json;

    use super::ScheduleView;
    use crate::api::document::{QUOTA, UNAVAILABLE, answers};
    use crate::queue::Job;

    pub(in crate::api) fn create(op: TransformOperation<'_>) -> TransformOperation<'_> {
        let op = op
            .summary("Make a schedule: a bundle's job on a cron, owned by the caller's key")
            .response_with::<201, Json<ScheduleView>, _>(|r| r.description("The schedule"));
        answers(
            op,
            &[
                (409, "The key has a schedule with that id"),
                (
                    429,
                    "The key's share of schedules (server.max_schedules_per_key) or the daemon's \
                     (server.max_schedules) is used up",
                ),
                UNAVAILABLE,
            ],
        )
    }

    pub(in crate::api) fn list(op: TransformOperation<'_>) -> TransformOperation<'_> {
        op.summary("List the schedules the key may see")
            .response_with::<200, Json<Vec<ScheduleView>>, _>(|r| r.description("The schedules"))
    }

    pub(in crate::api) fn get(op: TransformOperation<'_>) -> TransformOperation<'_> {
        op.summary("A schedule")
            .response_with::<200, Json<ScheduleView>, _>(|r| r.description("The schedule"))
    }

    pub(in crate::api) fn delete(op: TransformOperation<'_>) -> TransformOperation<'_> {
        let op = op
            .summary("Delete a schedule made over the API")
            .response_with::<204, (), _>(|r| r.description("Deleted"));
        answers(
            op,
            &[(
                409,
                "A bundle's own schedule: remove it from the bundle's `schedule:`",
            )],
        )
    }

    pub(in crate::api) fn pause(op: TransformOperation<'_>) -> TransformOperation<'_> {
        op.summary("Pause a schedule: no fire until resumed")
            .response_with::<200, Json<ScheduleView>, _>(|r| r.description("The schedule, paused"))
    }

    pub(in crate::api) fn resume(op: TransformOperation<'_>) -> TransformOperation<'_> {
        op.summary("Resume a paused schedule")
            .response_with::<200, Json<ScheduleView>, _>(|r| r.description("The schedule"))
    }

    pub(in crate::api) fn run(op: TransformOperation<'_>) -> TransformOperation<'_> {
        let op = op
            .summary("Submit one job of the schedule now, outside the cron")
            .response_with::<201, Json<Job>, _>(|r| r.description("The job, queued"));
        answers(
            op,
            &[
                (422, "The schedule's bundle is not loaded: `field` says so"),
                QUOTA,
                UNAVAILABLE,
            ],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_pattern_says_what_is_id_takes() {
        let pattern = regex::Regex::new(ID_PATTERN).unwrap();
        for id in ["nightly", "a.b_c-1", "", "a:b", "a b", "é", "x/y"] {
            assert_eq!(pattern.is_match(id), is_id(id), "{id:?}");
        }
    }
}
