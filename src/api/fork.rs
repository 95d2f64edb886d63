//! `POST /v1/jobs/{id}/fork` and `POST /v1/bundles/{name}/migrate-jobs`:
//! forks and version moves on the wire. A fork is admitted for the caller
//! like any submit (through admission), as what a rerun copies plus the
//! source's journal before the turn asked for, pinned to the source's
//! content or, when asked and the replay check passes, to the bundle's
//! current version. What is seeded and checked is decided in `versions`.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Deserialize;
use serde_json::Value;

use super::AppState;
use super::admission::{Submission, admit};
use super::auth::Caller;
use super::body::{JsonBody, Path};
use super::document::{QUOTA, UNAVAILABLE, answers};
use super::error::{ApiError, ErrorCode};
use crate::access::policy::Action;
use crate::journal::JournalEntry;
use crate::queue::{ForkSeed, Job, JobId, JobOrigin, JobState};
use crate::registry::BundleIdentity;
use crate::versions::{compat, migrate, seed};

/// Which content a fork runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ForkVersion {
    /// The content the source job ran (its pin).
    #[default]
    Pinned,
    /// The bundle's current version, when the replayed turns replay there.
    Current,
}

/// The body of `POST /v1/jobs/{id}/fork`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    /// The first turn the fork runs live (default: the source's last); at
    /// most the first turn the source did not finish.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub at_turn: Option<u32>,
    /// A new input for the fork (its prompts are rendered again).
    #[serde(default)]
    pub input: Option<String>,
    #[serde(default)]
    pub bundle_version: ForkVersion,
}

/// `POST /v1/jobs/{id}/fork` in the API document.
pub(super) fn fork_doc(
    op: aide::transform::TransformOperation<'_>,
) -> aide::transform::TransformOperation<'_> {
    let op = op
        .summary(
            "Fork a job: a new job replaying the source's turns before at_turn from its journal \
             (no model or tool call) and running live from there",
        )
        .response_with::<201, Json<Job>, _>(|r| r.description("The fork, queued"));
    answers(
        op,
        &[
            (422, "The source cannot be forked there: `field` says why"),
            QUOTA,
            UNAVAILABLE,
        ],
    )
}

/// `POST /v1/jobs/{id}/fork`: a new job that replays the source's turns
/// before `at_turn` from its journal and runs live from there.
pub async fn fork(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(request): JsonBody<ForkRequest>,
) -> Result<(StatusCode, Json<Job>), ApiError> {
    let id = JobId::from(id);
    let source = caller.stored_job(&state, Action::ForkJob, &id).await?;
    agent_job(&state, &source)?;
    let journal = state.queue.journal(&id).await?;
    let range = seed::range(&journal);
    let at_turn = request.at_turn.unwrap_or(range.default);
    if !(1..=range.last).contains(&at_turn) {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "at_turn",
            format!(
                "job {id} can be forked at turns 1 to {} (turn {} is the first it did not finish), not {at_turn}",
                range.last, range.last
            ),
        ));
    }
    let (version, identity) = match request.bundle_version {
        ForkVersion::Pinned => {
            pinned_loads(&state, &source).await?;
            (source.bundle_version.clone(), source.bundle_digest.clone())
        }
        ForkVersion::Current => current_version(&state, &source, &journal, at_turn).await?,
    };
    let keep_input = request.input.is_none() && identity == source.bundle_digest;
    let seeded = seed::seed(&journal, at_turn, keep_input);
    let mut job = super::job_actions::rerun_of(source);
    job.bundle_version = version;
    job.bundle_digest = identity;
    if let Some(input) = request.input {
        job.input = input;
    }
    job.fork = Some(ForkSeed {
        origin: JobOrigin {
            job_id: id,
            at_turn,
        },
        journal: seeded,
    });
    let (job, _) = admit(&state, &caller, Submission::new(job, "bundle")).await?;
    Ok((StatusCode::CREATED, Json(job)))
}

/// Only an agent's turns can be forked: a workflow's or a group chat's
/// journal records stages and replies, a tool run's one call.
fn agent_job(state: &AppState, source: &Job) -> Result<(), ApiError> {
    let snapshot = state.registry.snapshot();
    let Some(loaded) = snapshot.bundle(&source.bundle) else {
        return Ok(());
    };
    let raw = &loaded.bundle.raw;
    let kind = if raw.workflow.is_some() {
        "a workflow"
    } else if source.kind.is_group_chat() {
        "a group chat"
    } else if matches!(source.kind, crate::queue::JobKind::ToolRun { .. }) {
        "a tool run"
    } else if matches!(source.kind, crate::queue::JobKind::Verify(_)) {
        "a verify"
    } else if matches!(source.kind, crate::queue::JobKind::Eval(_)) {
        "an eval run"
    } else {
        return Ok(());
    };
    Err(ApiError::new(
        ErrorCode::InvalidRequest,
        format!(
            "job {} is {kind} of bundle {:?}: a fork replays an agent's turns; run it again instead (POST /v1/jobs/{}/rerun)",
            source.id, source.bundle, source.id
        ),
    ))
}

/// Refuses a fork on the source's pinned content when that content can no
/// longer be loaded (its copy pruned, its bindings changed): the fork
/// would only fail when it ran.
async fn pinned_loads(state: &AppState, source: &Job) -> Result<(), ApiError> {
    let Some(pinned) = source
        .bundle_digest
        .as_deref()
        .map(BundleIdentity::recorded)
    else {
        return Ok(());
    };
    match state.registry.resolve(&source.bundle, Some(&pinned)).await {
        Ok(_) => Ok(()),
        Err(why) => Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "bundle_version",
            format!(
                "the content job {} ran (bundle {:?} version {}) can no longer be loaded: {why}; fork it with \"bundle_version\": \"current\"",
                source.id,
                source.bundle,
                source.bundle_version.as_deref().unwrap_or("?")
            ),
        )),
    }
}

/// The bundle's current version and identity for a fork of `source` at
/// `at_turn`, once the turns it replays pass the replay check.
async fn current_version(
    state: &AppState,
    source: &Job,
    journal: &[JournalEntry],
    at_turn: u32,
) -> Result<(Option<String>, Option<String>), ApiError> {
    super::admission::known_bundle(state, &source.bundle, "bundle")?;
    let snapshot = state.registry.snapshot();
    let current = snapshot.bundle(&source.bundle).cloned().ok_or_else(|| {
        ApiError::new(
            ErrorCode::UnknownBundle,
            format!("bundle {:?} is not loaded", source.bundle),
        )
    })?;
    let pinned = source
        .bundle_digest
        .as_deref()
        .map(BundleIdentity::recorded);
    if let Some(pinned) = pinned.filter(|p| *p != current.identity) {
        let refused = |reason: String| {
            ApiError::field(
                ErrorCode::InvalidRequest,
                "bundle_version",
                format!(
                    "job {} cannot replay its turns before {at_turn} on version {} of bundle {:?}: {reason}; fork it on its pinned version, or at an earlier turn",
                    source.id,
                    current.version(),
                    source.bundle
                ),
            )
        };
        let from = state
            .registry
            .resolve(&source.bundle, Some(&pinned))
            .await
            .map_err(|why| {
                refused(format!(
                    "the content it ran cannot be loaded to compare ({why})"
                ))
            })?;
        let replayed = seed::seed(journal, at_turn, false);
        compat::check(&from, &current, &replayed).map_err(|e| refused(e.to_string()))?;
    }
    Ok((
        Some(current.version().to_string()),
        Some(current.identity.as_str().to_string()),
    ))
}

/// The body of `POST /v1/bundles/{name}/migrate-jobs`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MigrateRequest {
    /// Only jobs in these states (default: queued, needs_attention,
    /// awaiting_approval).
    #[serde(default)]
    #[schemars(schema_with = "movable_states")]
    pub states: Vec<JobState>,
    #[serde(default)]
    pub dry_run: bool,
}

/// `states` as the route takes them: any job state reads, and only the
/// states a job can move in are taken (another is a 422 naming `states`).
fn movable_states(_: &mut SchemaGenerator) -> Schema {
    let names: Vec<Value> = migrate::MOVABLE
        .iter()
        .filter_map(|state| serde_json::to_value(state).ok())
        .collect();
    json_schema!({"type": "array", "items": {"type": "string", "enum": names}})
}

/// `POST /v1/bundles/{name}/migrate-jobs` in the API document.
pub(super) fn migrate_jobs_doc(
    op: aide::transform::TransformOperation<'_>,
) -> aide::transform::TransformOperation<'_> {
    let op = op
        .summary(
            "Move the bundle's waiting and parked jobs to its current version, each only when \
             its journal replays there (dry_run: list which would and why the others cannot)",
        )
        .description(
            "A key moves its own jobs; one whose scopes extend `migrate_jobs` to every key's \
             (operate_all) moves every key's.",
        )
        .response_with::<200, Json<migrate::Plan>, _>(|r| {
            r.description(
                "The plan: moves and refused, each job with its state, version and (refused) \
                 reason",
            )
        });
    answers(
        op,
        &[
            (
                422,
                "No loaded bundle by that name, a state a job cannot move in, or a body the \
                 route does not read: `field` names it",
            ),
            UNAVAILABLE,
        ],
    )
}

// Its doc function ends and its handler opens as `fork`'s above, as routes
// do (aide's answers, axum's extractors); what each reads is its own.
/// `POST /v1/bundles/{name}/migrate-jobs`: moves the bundle's waiting and
/// parked jobs to its current version where their journals replay (with
/// `dry_run`, says which would and why the others cannot).
pub async fn migrate_jobs(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    JsonBody(request): JsonBody<MigrateRequest>,
) -> Result<Json<migrate::Plan>, ApiError> {
    caller
        .on_bundle(Action::MigrateJobs, &name, "name")
        .map_err(|e| e.bundle_in_path("name"))?;
    let plan = migrate::migrate(
        state.queue.as_ref(),
        &state.registry,
        &name,
        &request.states,
        // A key moves its own jobs; only `operate_all` moves every key's.
        caller.listing_owner(Action::MigrateJobs).as_deref(),
        request.dry_run,
    )
    .await
    .map_err(|e| match e {
        migrate::MigrateError::NotLoaded(_) => {
            ApiError::field(ErrorCode::UnknownBundle, "name", e.to_string()).bundle_in_path("name")
        }
        migrate::MigrateError::State { .. } => {
            ApiError::field(ErrorCode::InvalidRequest, "states", e.to_string())
        }
        migrate::MigrateError::Queue { source, .. } => source.into(),
    })?;
    tracing::info!(
        bundle = %name,
        version = %plan.version,
        moved = plan.moves.len(),
        refused = plan.refused.len(),
        dry_run = plan.dry_run,
        by = caller.name(),
        "migrate-jobs: the bundle's waiting and parked jobs {} to its current version",
        if plan.dry_run { "were checked for a move" } else { "were moved" }
    );
    Ok(Json(plan))
}
