//! `POST /v1/bundles/{name}/evals`: an eval run of a loaded bundle's suite
//! (`crate::evals`), queued as an `eval` job of the caller (the key's
//! `submit_job` on the bundle, its rate and in-flight cap as for any job).
//! The API never runs it: a worker does (`worker/eval/`), submitting each
//! case as a job of the same key, and stores the report as the job's
//! result (`GET /v1/jobs/{id}`). The suite is read here first, so a broken
//! case file is a 422 naming its line, not a failed job.
//!
//! `version` picks the content under test (the loaded one by default, or a
//! version the daemon served since it started); `against` runs every case
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
    /// daemon served since it started.
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
                 and line), a version is unknown, or a field is out of range: `field` names it",
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
    let tested = pin(&state, &name, request.version.as_deref(), "version")?;
    let against = request
        .against
        .as_deref()
        .map(|version| pin(&state, &name, Some(version), "against"))
        .transpose()?;
    let run = checked(&request, against)?;
    suite_reads(&state, &name, &tested, &run.tags).await?;
    let idempotency_key = super::jobs::idempotency_key(request.idempotency_key, &headers)?;
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
    })
}

/// The content of bundle `name` at `version` (the loaded one for `None`),
/// or a 422 on `field` saying which versions there are.
fn pin(
    state: &AppState,
    name: &str,
    version: Option<&str>,
    field: &str,
) -> Result<EvalPin, ApiError> {
    let loaded = super::admission::loaded_bundle(state, name, "name")?;
    let version = version.unwrap_or(loaded.version());
    let identity = state.registry.identity_of(name, version).ok_or_else(|| {
        ApiError::field(
            ErrorCode::InvalidRequest,
            field,
            format!(
                "bundle {name:?} has no version {version:?} this daemon served since it started (the loaded one is {}); name the loaded version or drop the other version's directory in again",
                loaded.version()
            ),
        )
    })?;
    Ok(EvalPin {
        version: version.to_string(),
        digest: identity.to_string(),
    })
}

/// Reads the suite of the content under test, off the runtime thread, so
/// that a broken suite is refused now: a 422 naming the file and line.
async fn suite_reads(
    state: &AppState,
    name: &str,
    tested: &EvalPin,
    tags: &[String],
) -> Result<(), ApiError> {
    let identity = crate::registry::BundleIdentity::recorded(&tested.digest);
    let loaded = state
        .registry
        .resolve(name, Some(&identity))
        .await
        .map_err(|e| ApiError::field(ErrorCode::InvalidRequest, "version", e.to_string()))?;
    let dir = loaded.bundle.dir.join("evals");
    let tags = tags.to_vec();
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
        })
}
