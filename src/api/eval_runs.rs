//! `GET /v1/bundles/{name}/evals` and `GET /v1/bundles/{name}/evals/suite`:
//! what the console's Evals panel reads. The first lists the bundle's eval
//! runs (jobs of kind `eval`, newest first) the caller may see — through
//! the store's job listing, narrowed by the authorization policy as
//! `GET /v1/jobs` is — each with its report's summary once it succeeded,
//! and the versions an eval may name. The second lists the cases of the
//! loaded version's suite (`evals/`, read off the runtime thread by
//! `crate::evals::Suite`). A run's whole report is its job's `result`
//! (`GET /v1/jobs/{id}`).

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::AppState;
use super::auth::Caller;
use super::body::{Path, Query};
use super::document::{UNAVAILABLE, answers};
use super::error::{ApiError, ErrorCode};
use crate::access::policy::{Action, Resource};
use crate::evals::{EvalCase, Suite};
use crate::queue::{Job, JobFilter, JobId, JobKind, JobState};

/// Runs listed when the query does not say.
const DEFAULT_RUNS: usize = 20;
/// The most runs one answer lists.
const MAX_RUNS: usize = 100;
/// The characters of a case's input the suite's listing shows.
const INPUT_CHARS: usize = 200;

/// The query of `GET /v1/bundles/{name}/evals`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "EvalRunsQuery")]
pub struct RunsQuery {
    /// Runs to list, newest first: 1 to 100 (default 20).
    #[schemars(range(min = 1, max = MAX_RUNS))]
    pub limit: Option<usize>,
}

/// The query of `GET /v1/bundles/{name}/evals/suite`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "EvalSuiteQuery")]
pub struct SuiteQuery {
    /// The version whose suite to read: one an eval may name (the one
    /// serving, the candidate the release gate holds, or one the daemon
    /// served). Default: the one serving.
    #[schemars(regex(pattern = crate::types::text::NO_NUL_PATTERN))]
    pub version: Option<String>,
}

/// A bundle's eval runs.
#[derive(Debug, Serialize, JsonSchema)]
pub struct EvalRuns {
    pub bundle: String,
    /// The versions an eval may name (`version`, `against`): the one
    /// serving, the candidate the release gate holds, then those the daemon
    /// served since it started, newest first.
    pub versions: Vec<String>,
    /// Newest first: the caller's own (every key's with `read_all`).
    pub runs: Vec<EvalRunView>,
}

/// One eval run: its job, what it compared, and — once it succeeded — its
/// report's summary (each of those fields `null` before).
#[derive(Debug, Serialize, JsonSchema)]
pub struct EvalRunView {
    /// The eval job (`GET /v1/jobs/{id}`: the whole report as `result`).
    pub id: JobId,
    pub state: JobState,
    /// The key that asked for it (none: the release gate's own).
    pub owner: Option<String>,
    /// RFC 3339 UTC.
    pub created_at: String,
    pub finished_at: Option<String>,
    /// The version under test.
    pub version: Option<String>,
    /// The version it is compared with, case by case.
    pub against: Option<String>,
    /// Only the cases with one of these tags ran.
    pub tags: Vec<String>,
    /// The mean case score on the version under test.
    pub score: Option<f64>,
    pub passed: Option<usize>,
    pub failed: Option<usize>,
    /// The same mean on `against`.
    pub against_score: Option<f64>,
    /// Cases that passed on `against` and fail here.
    pub regressions: Vec<String>,
    /// Cases that failed on `against` and pass here.
    pub improvements: Vec<String>,
    /// Every case job and judge job, on both versions.
    pub cost_usd: Option<f64>,
    /// Whether the suite passed by its rule.
    pub pass: Option<bool>,
    /// Why it passed or failed, in one sentence.
    pub verdict: Option<String>,
    /// Why a run that ended gave no report.
    pub error: Option<String>,
}

/// What the runs list reads of a report (`crate::evals::RunReport`),
/// leaving its cases unread.
#[derive(Debug, Default, Deserialize)]
struct Summary {
    score: f64,
    passed: usize,
    failed: usize,
    #[serde(default)]
    against_score: Option<f64>,
    #[serde(default)]
    regressions: Vec<String>,
    #[serde(default)]
    improvements: Vec<String>,
    cost_usd: f64,
    pass: bool,
    verdict: String,
}

/// A bundle's suite, as one of its versions carries it.
#[derive(Debug, Serialize, JsonSchema)]
pub struct EvalSuite {
    pub bundle: String,
    /// The version whose `evals/` was read (the one serving unless the
    /// query named another).
    pub version: String,
    pub cases: Vec<SuiteCase>,
    /// Why there is no case: the version has no `evals/`, or its suite
    /// does not read (the message names the file and line).
    pub note: Option<String>,
}

/// One case of a suite.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SuiteCase {
    pub id: String,
    pub tags: Vec<String>,
    /// Its input, cut at 200 characters (`…` when cut).
    pub input: String,
    /// The chat messages it runs over instead of a user prompt.
    pub messages: usize,
    /// The types of the graders that grade it, in order (one whose
    /// `expected:` key the case lacks does not).
    pub graders: Vec<String>,
    /// The score at which it passes; none: when every counted grader does.
    pub threshold: Option<f64>,
}

/// `GET /v1/bundles/{name}/evals` in the API document.
pub(super) fn list_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("A bundle's eval runs, newest first")
        .description(
            "The `eval` jobs of the bundle the key may list (its own; every key's with \
             `read_all`), each with the versions it compared and, once it succeeded, its \
             report's score, passed and failed cases, regressions, improvements, cost, `pass` \
             and `verdict`; and the versions an eval may name. The whole report is the job's \
             `result` (GET /v1/jobs/{id}).",
        )
        .response_with::<200, Json<EvalRuns>, _>(|r| r.description("The runs"));
    answers(
        op,
        &[
            (404, "No bundle by that name the key may use"),
            (422, "`limit` is out of range, or a parameter is unknown"),
            UNAVAILABLE,
        ],
    )
}

/// `GET /v1/bundles/{name}/evals/suite` in the API document.
pub(super) fn suite_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("The cases of a bundle's eval suite")
        .description(
            "The cases under the `evals/` of the serving version, or of `version` (the \
             candidate the release gate holds, or a version the daemon served: docs/evals.md): \
             id, tags, input (cut at 200 characters) and the types of the graders that grade \
             each. A version without a suite, or whose suite does not read, answers no case \
             and a `note` saying why.",
        )
        .response_with::<200, Json<EvalSuite>, _>(|r| r.description("The suite"));
    answers(
        op,
        &[(
            404,
            "No loaded bundle by that name the key may use, or no version of it by that name \
             the daemon knows",
        )],
    )
}

/// A 404 for a bundle the key may not use or that is not loaded: a key
/// learns nothing of bundles outside its globs.
fn readable(caller: &Caller, state: &AppState, name: &str) -> Result<(), ApiError> {
    let known = state.registry.snapshot().bundles.contains_key(name);
    match known && caller.allows(Action::ReadBundle, &Resource::bundle(name)) {
        true => Ok(()),
        false => Err(ApiError::new(
            ErrorCode::NotFound,
            format!("no bundle named {name:?}"),
        )),
    }
}

/// The runs' `limit`: 20 unless asked, 1 to 100.
fn runs_limit(asked: Option<usize>) -> Result<usize, ApiError> {
    match asked.unwrap_or(DEFAULT_RUNS) {
        limit @ 1..=MAX_RUNS => Ok(limit),
        other => Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "limit",
            format!("{other} runs: ask for 1 to {MAX_RUNS}"),
        )),
    }
}

pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    Query(query): Query<RunsQuery>,
) -> Result<Json<EvalRuns>, ApiError> {
    readable(&caller, &state, &name)?;
    let limit = runs_limit(query.limit)?;
    // The listing `GET /v1/jobs` makes, narrowed to this bundle's evals:
    // the key's own unless it may read every key's, then the policy's
    // word on each job.
    let page = state
        .queue
        .list(JobFilter {
            bundle: Some(name.clone()),
            kind: Some("eval".into()),
            owner: caller.listing_owner(Action::ListJobs),
            limit,
            ..JobFilter::default()
        })
        .await?;
    let runs = page
        .jobs
        .iter()
        .filter(|job| caller.allows_job(Action::ListJobs, job))
        .map(run_view)
        .collect();
    Ok(Json(EvalRuns {
        versions: state.registry.versions_of(&name),
        bundle: name,
        runs,
    }))
}

/// An eval job as the runs list shows it.
fn run_view(job: &Job) -> EvalRunView {
    let (against, tags) = match &job.kind {
        JobKind::Eval(run) => (
            run.against.as_ref().map(|pin| pin.version.clone()),
            run.tags.clone(),
        ),
        _ => (None, Vec::new()),
    };
    let summary = job
        .result
        .as_ref()
        .filter(|_| job.state == JobState::Succeeded)
        .and_then(|report| Summary::deserialize(report).ok());
    let reported = summary.is_some();
    let s = summary.unwrap_or_default();
    EvalRunView {
        id: job.id.clone(),
        state: job.state,
        owner: job.owner.clone(),
        created_at: job.created_at.clone(),
        finished_at: job.finished_at.clone(),
        version: job.bundle_version.clone(),
        against,
        tags,
        score: reported.then_some(s.score),
        passed: reported.then_some(s.passed),
        failed: reported.then_some(s.failed),
        against_score: s.against_score,
        regressions: s.regressions,
        improvements: s.improvements,
        cost_usd: reported.then_some(s.cost_usd),
        pass: reported.then_some(s.pass),
        verdict: reported.then_some(s.verdict),
        error: job.error.clone(),
    }
}

pub async fn suite(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    Query(query): Query<SuiteQuery>,
) -> Result<Json<EvalSuite>, ApiError> {
    readable(&caller, &state, &name)?;
    let loaded = version_of(&state, &name, query.version.as_deref()).await?;
    let dir = loaded.bundle.dir.join("evals");
    // Reading the files blocks: off the runtime thread.
    let read = tokio::task::spawn_blocking(move || Suite::load(&dir))
        .await
        .map_err(|e| ApiError::internal(format!("reading the suite failed: {e}")))?;
    let version = loaded.version().to_string();
    let (cases, note) = match read {
        Ok(Some(suite)) => (suite.cases.iter().map(suite_case).collect(), None),
        Ok(None) => (
            Vec::new(),
            Some(format!(
                "version {version} of {name} has no eval suite: add cases under its `evals/` (docs/evals.md)"
            )),
        ),
        Err(e) => (
            Vec::new(),
            Some(format!("version {version}'s suite does not read: {e}")),
        ),
    };
    Ok(Json(EvalSuite {
        bundle: name,
        version,
        cases,
        note,
    }))
}

/// Version `version` of bundle `name` (the one serving when `None`), as
/// an eval would run it: loaded, held by the gate, or revived from the
/// bundle store.
async fn version_of(
    state: &AppState,
    name: &str,
    version: Option<&str>,
) -> Result<std::sync::Arc<crate::registry::LoadedBundle>, ApiError> {
    let not_found = |what: String| ApiError::new(ErrorCode::NotFound, what);
    let Some(version) = version else {
        return state
            .registry
            .snapshot()
            .bundle(name)
            .cloned()
            .ok_or_else(|| not_found(format!("bundle {name:?} has no version that loaded")));
    };
    let unknown = || {
        not_found(format!(
            "bundle {name:?} has no version {version:?} the daemon knows: name one GET /v1/bundles/{name}/evals lists as `versions`, or one whose copy is in the bundle store"
        ))
    };
    let identity = state
        .registry
        .find_version(name, version)
        .await
        .ok_or_else(unknown)?;
    state
        .registry
        .resolve(name, Some(&identity))
        .await
        .map_err(|e| {
            not_found(format!(
                "version {version:?} of bundle {name:?} cannot be loaded: {e}"
            ))
        })
}

fn suite_case(case: &EvalCase) -> SuiteCase {
    let mut input: String = case.input.chars().take(INPUT_CHARS).collect();
    if input.len() < case.input.len() {
        input.push('…');
    }
    SuiteCase {
        id: case.id.clone(),
        tags: case.tags.clone(),
        input,
        messages: case.messages.as_ref().map_or(0, Vec::len),
        graders: case
            .graders
            .iter()
            .filter(|g| {
                g.expected
                    .as_ref()
                    .is_none_or(|key| case.expected.contains_key(key))
            })
            .map(|g| g.check.kind().to_string())
            .collect(),
        threshold: case.threshold,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reports_summary_is_read_and_its_cases_left_alone() {
        let report = serde_json::json!({
            "bundle": "calc", "version": "2", "against": "1",
            "cases": [{"case": "sum", "pass": false}],
            "score": 0.5, "passed": 1, "failed": 1, "against_score": 1.0,
            "regressions": ["sum"], "improvements": [], "cost_usd": 0.25,
            "pass": false, "verdict": "1 case(s) regressed", "stand_ins": ["charge"],
        });
        let summary = Summary::deserialize(&report).unwrap();
        assert_eq!((summary.passed, summary.failed), (1, 1));
        assert_eq!(summary.regressions, ["sum"]);
        assert!(!summary.pass);
        assert!(Summary::deserialize(&serde_json::json!({"answer": "no report"})).is_err());
    }

    #[test]
    fn the_runs_limit_is_20_unless_asked_and_at_most_100() {
        assert_eq!(runs_limit(None).unwrap(), 20);
        assert_eq!(runs_limit(Some(100)).unwrap(), 100);
        assert!(runs_limit(Some(0)).is_err());
        assert!(runs_limit(Some(101)).is_err());
    }
}
