//! `POST /v1/bundles/{name}/evals`: an eval run of a loaded bundle's suite
//! (`crate::evals`), queued as an `eval` job of the caller (the key's
//! `submit_job` on the bundle, its rate and in-flight cap as for any job).
//! The API never runs it: a worker does (`worker/eval/`), submitting each
//! case as a job of the same key, and stores the report as the job's
//! result (`GET /v1/jobs/{id}`). The suite is read here first, so a broken
//! case file is a 422 naming its line, not a failed job.
//!
//! `version` picks the content under test (the loaded one by default, or a
//! version the daemon served, or a copy in its bundle store); `against` runs every case
//! on a second version too and reports regressions and improvements.

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use schemars::JsonSchema;
use serde::Deserialize;

use super::AppState;
use super::admission::{Submission, admit};
use super::auth::Caller;
use super::body::{JsonBody, Path};
use super::document::{QUOTA, UNAVAILABLE, answers};
use super::error::{ApiError, ErrorCode};
use crate::access::policy::Action;
use crate::budget::BudgetLimits;
use crate::evals::Suite;
use crate::queue::{EvalPin, EvalRun, Job, JobKind, NewJob};

/// Case jobs in flight at once when the body does not say.
const DEFAULT_CONCURRENCY: u32 = 4;
/// The most case jobs in flight at once one eval may ask for.
const MAX_CONCURRENCY: u32 = 64;

/// The body of `POST /v1/bundles/{name}/evals`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EvalRequest {
    /// The version under test: the loaded one when absent, else one the
    /// daemon served (or whose copy is in its bundle store).
    #[serde(default)]
    pub version: Option<String>,
    /// Run every case on this version too and compare case by case.
    #[serde(default)]
    pub against: Option<String>,
    /// Only the cases with one of these tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Case jobs in flight at once (1 to 64; default 4).
    #[serde(default)]
    #[schemars(range(min = 1, max = 64))]
    pub concurrency: Option<u32>,
    /// Each case job's budget limits (within the bundle's).
    #[serde(default)]
    pub limits: Option<BudgetLimits>,
    /// The suite passes at this mean score (0 to 1); without it, when
    /// every case passes.
    #[serde(default)]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub min_score: Option<f64>,
    /// The suite fails when a case that passed on `against` fails.
    #[serde(default)]
    pub no_regressions: bool,
    /// Really run the case jobs' tools whose effect is not `read_only`,
    /// side effects and all; by default stand-ins answer them with the
    /// cases' `tool_results` (and a workflow that runs commands is refused).
    #[serde(default)]
    pub real_tools: bool,
    /// A second request with the same key answers the first eval's job.
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// `POST /v1/bundles/{name}/evals` in the API document.
pub(super) fn run_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Run a bundle's eval suite as an `eval` job")
        .description(
            "Reads the suite under the bundle's `evals/` (JSONL cases, `suite.yaml`, a \
             promptfoo config; docs/evals.md) and queues an `eval` job of the caller: a worker \
             submits each case as a job of the same key, grades it, and stores the report — \
             each case's grades, answer, tool calls and cost, the score, regressions and \
             improvements against `against`, `pass` and `verdict` — as the job's `result`. \
             Follow it at GET /v1/jobs/{id}. A daemon restart resumes the eval without \
             running a finished case again.",
        )
        .response_with::<201, Json<Job>, _>(|r| r.description("The eval job, queued"))
        .response_with::<200, Json<Job>, _>(|r| {
            r.description("The eval job the idempotency key names already")
        });
    answers(
        op,
        &[
            (
                422,
                "The bundle is not loaded, its suite cannot be read (the message names the file \
                 and line), a version is unknown, a field is out of range, or a workflow runs \
                 commands and `real_tools` is not asked for: `field` names it",
            ),
            (409, "The idempotency key names a different job"),
            QUOTA,
            UNAVAILABLE,
        ],
    )
}

/// `POST /v1/bundles/{name}/evals`: the request checked, the suite read,
/// the eval job admitted.
pub async fn run(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    Path(name): Path<String>,
    JsonBody(request): JsonBody<EvalRequest>,
) -> Result<(StatusCode, Json<Job>), ApiError> {
    // The policy first: a bundle the key may not use is unknown to it.
    caller
        .on_bundle(Action::SubmitJob, &name, "name")
        .map_err(|e| e.bundle_in_path("name"))?;
    super::admission::known_bundle(&state, &name, "name").map_err(|e| e.bundle_in_path("name"))?;
    let tested = pin(&state, &name, request.version.as_deref(), "version").await?;
    let against = match request.against.as_deref() {
        Some(version) => Some(pin(&state, &name, Some(version), "against").await?),
        None => None,
    };
    let run = checked(&request, against)?;
    suite_reads(&state, &name, &tested, &run).await?;
    let idempotency_key = super::idempotency::idempotency_key(request.idempotency_key, &headers)?;
    // The cases' limits ride on the eval job too, so admission holds them
    // to the bundle's now rather than refusing every case later.
    let limits = run.limits.clone();
    let job = NewJob {
        bundle: name,
        bundle_version: Some(tested.version.clone()),
        bundle_digest: Some(tested.digest.clone()),
        input: format!("eval of version {}", tested.version),
        kind: JobKind::Eval(Box::new(run)),
        idempotency_key,
        limits,
        ..NewJob::default()
    };
    let (job, created) = admit(&state, &caller, Submission::new(job, "name")).await?;
    let status = match created {
        true => StatusCode::CREATED,
        false => StatusCode::OK,
    };
    Ok((status, Json(job)))
}

/// The body's fields as the eval job runs them, or a 422 naming the field.
fn checked(request: &EvalRequest, against: Option<EvalPin>) -> Result<EvalRun, ApiError> {
    let concurrency = request.concurrency.unwrap_or(DEFAULT_CONCURRENCY);
    if !(1..=MAX_CONCURRENCY).contains(&concurrency) {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "concurrency",
            format!(
                "concurrency {concurrency} is out of range: send 1 to {MAX_CONCURRENCY} case jobs at once"
            ),
        ));
    }
    if let Some(min) = request.min_score.filter(|m| !(0.0..=1.0).contains(m)) {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "min_score",
            format!("min_score {min} is out of range: a score is 0 to 1"),
        ));
    }
    if request.no_regressions && against.is_none() {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "no_regressions",
            "no_regressions compares with another version: name it in `against`",
        ));
    }
    Ok(EvalRun {
        tags: request.tags.clone(),
        concurrency,
        against,
        limits: request.limits.clone(),
        min_score: request.min_score,
        no_regressions: request.no_regressions,
        real_tools: request.real_tools,
    })
}

/// The content of bundle `name` at `version` (the loaded one for `None`;
/// else one it served, or a copy of it in the bundle store), or a 422 on
/// `field` saying which versions there are.
async fn pin(
    state: &AppState,
    name: &str,
    version: Option<&str>,
    field: &str,
) -> Result<EvalPin, ApiError> {
    let loaded = super::admission::loaded_bundle(state, name, "name")?;
    let version = version.unwrap_or(loaded.version());
    let identity = state
        .registry
        .find_version(name, version)
        .await
        .ok_or_else(|| {
            ApiError::field(
                ErrorCode::InvalidRequest,
                field,
                format!(
                    "bundle {name:?} has no version {version:?} this daemon served, nor a copy of it in its bundle store (the loaded one is {}); name the loaded version or drop the other version's directory in again",
                    loaded.version()
                ),
            )
        })?;
    Ok(EvalPin {
        version: version.to_string(),
        digest: identity.to_string(),
    })
}

/// The content `pin` names, or a 422 on `field`.
async fn resolved(
    state: &AppState,
    name: &str,
    pin: &EvalPin,
    field: &str,
) -> Result<std::sync::Arc<crate::registry::LoadedBundle>, ApiError> {
    let identity = crate::registry::BundleIdentity::recorded(&pin.digest);
    state
        .registry
        .resolve(name, Some(&identity))
        .await
        .map_err(|e| ApiError::field(ErrorCode::InvalidRequest, field, e.to_string()))
}

/// A 422 on `real_tools` for a workflow that runs commands: its case jobs
/// would refuse to start with stand-ins (the worker's rule), so the eval
/// is refused now rather than failing every case.
fn no_commands(loaded: &crate::registry::LoadedBundle, pin: &EvalPin) -> Result<(), ApiError> {
    let commands = loaded.bundle.raw.command_stages();
    match commands.is_empty() {
        true => Ok(()),
        false => Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "real_tools",
            format!(
                "bundle {:?} version {} is a workflow that runs commands (stages {}), which no stand-in answers: send `real_tools: true` to run them, side effects and all",
                loaded.name(),
                pin.version,
                commands.join(", ")
            ),
        )),
    }
}

/// Reads the suite of the content under test, off the runtime thread, so
/// that a broken suite is refused now: a 422 naming the file and line.
/// Then, unless the real tools are asked for, a workflow that runs
/// commands (on either version) is refused on `real_tools`.
async fn suite_reads(
    state: &AppState,
    name: &str,
    tested: &EvalPin,
    run: &EvalRun,
) -> Result<(), ApiError> {
    let loaded = resolved(state, name, tested, "version").await?;
    let dir = loaded.bundle.dir.join("evals");
    let tags = run.tags.clone();
    tokio::task::spawn_blocking(move || Suite::cases_to_run(&dir, &tags))
        .await
        .map_err(|e| ApiError::internal(format!("reading the suite failed: {e}")))?
        .map(drop)
        .map_err(|e| {
            // The bundle named in the path: its suite is what cannot run.
            ApiError::field(
                ErrorCode::InvalidRequest,
                "name",
                format!("bundle {name:?} version {}: {e}", tested.version),
            )
        })?;
    if run.real_tools {
        return Ok(());
    }
    no_commands(&loaded, tested)?;
    if let Some(against) = &run.against {
        no_commands(&*resolved(state, name, against, "against").await?, against)?;
    }
    Ok(())
}
