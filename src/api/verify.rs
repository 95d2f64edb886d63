//! `POST /v1/bundles/{name}/verify`: the crash matrix of a loaded bundle
//! (`crate::verify`), as `structured-agents verify --json` prints it. The
//! API never runs it: it checks the body, admission queues it as a
//! `verify` job (the key's `verify_bundle` on the bundle, its rate and
//! in-flight cap as for any job), a worker runs it (`worker/verify.rs`: on
//! the version the job is pinned to, copied into a work directory under
//! the state directory, never against a model server, at most
//! `verify::DAEMON_MAX_DURATION`), and the route answers with the job's report and its
//! id, or with the refusal the worker recorded (`verify::Refusal`).
//!
//! Tools with a side effect are answered by stand-ins (the body's
//! `tool_results`) unless the body asks for `"real_tools": true`.

use std::collections::BTreeMap;
use std::time::Duration;

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::AppState;
use super::admission::{Submission, admit};
use super::auth::Caller;
use super::body::{JsonBody, Path};
use super::document::{QUOTA, UNAVAILABLE, answers, object_or_text};
use super::error::{ApiError, ErrorCode};
use crate::access::policy::Action;
use crate::queue::{Job, JobId, JobKind, JobState, NewJob, VerifyRun};
use crate::verify::refusal::{REFUSED_STEP, REFUSED_TURN, Reason};
use crate::verify::{self, Refusal, Report, VerifyError};

/// How long the route waits for the verify job, queued and run: past
/// this it answers 504 with the job's id, and the job goes on.
const MAX_WAIT: Duration = Duration::from_secs(2 * verify::DAEMON_MAX_DURATION.as_secs());

/// The body of `POST /v1/bundles/{name}/verify`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = one_kind_of_tools)]
pub struct VerifyRequest {
    /// The reply script (the mock server's format): an object, or its
    /// YAML or JSON text. Needed when the bundle is bound to a model server.
    /// Another value is refused as a script that does not parse.
    #[serde(default)]
    #[schemars(schema_with = "object_or_text")]
    pub exchange: Option<Value>,
    /// The job's input (default: `verify`).
    #[serde(default)]
    pub input: Option<String>,
    #[serde(default)]
    pub variables: Map<String, Value>,
    /// Really run the tools whose effect is not `read_only`, once per
    /// crash point (default: stand-ins answer them).
    #[serde(default)]
    pub real_tools: bool,
    /// What the stand-ins answer, by tool name (not with `real_tools`).
    #[serde(default)]
    pub tool_results: Option<BTreeMap<String, Value>>,
}

/// `tool_results` and `real_tools: true` do not go together ([`checked`]
/// refuses both), as the API document says.
fn one_kind_of_tools(schema: &mut Schema) {
    schema.insert(
        "not".into(),
        json!({
            "properties": {"real_tools": {"const": true}, "tool_results": {"type": "object"}},
            "required": ["real_tools", "tool_results"]
        }),
    );
}

/// What the route answers: the verify job's report, with the job's id.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Verified {
    /// The report the worker stored as the job's result, passed on as it
    /// is (`worker/verify.rs` serializes a [`Report`]).
    #[serde(flatten)]
    #[schemars(with = "Report")]
    report: Map<String, Value>,
    /// The verify job (`GET /v1/jobs/{id}`).
    job_id: JobId,
}

/// `POST /v1/bundles/{name}/verify` in the API document.
pub(super) fn verify_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("The crash matrix of a loaded bundle, run as a `verify` job on a worker")
        .description(
            "A reference run against a reply script, crashed before and after every journal \
             write, resumed, and each tool call judged once, twice or never against its \
             declared effect: the JSON `structured-agents verify --json` prints, with the job's \
             id. Tools whose effect is not read_only are answered by stand-ins unless the body \
             asks for `real_tools`. One verify at a time per daemon.",
        )
        .response_with::<200, Json<Verified>, _>(|r| {
            r.description(
                "The matrix: writes, calls, crash_points (each with its calls' runs, ran, \
                 parked, violation), per-call tools summaries and violations",
            )
        });
    answers(
        op,
        &[
            (
                409,
                "Another verify is running in this daemon (Retry-After), or the verify job \
                 ended without a report",
            ),
            (
                422,
                "The body, its reply script or the bundle cannot be verified (no loaded bundle \
                 by that name, a script it needs and lacks): `field` names what",
            ),
            QUOTA,
            (500, "The verify failed in the daemon's own part"),
            UNAVAILABLE,
            (
                504,
                "The verify outgrew its time cap, or did not end in time (it goes on: the \
                 message names its job)",
            ),
        ],
    )
}

/// `POST /v1/bundles/{name}/verify`: the body checked here (what it asks
/// for, its reply script, whether the bundle needs one), then a `verify`
/// job queued and waited for.
pub async fn verify(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    JsonBody(request): JsonBody<VerifyRequest>,
) -> Result<Json<Verified>, ApiError> {
    let run = checked(request)?;
    // The policy first: a bundle the key may not use is unknown to it.
    caller
        .on_bundle(Action::VerifyBundle, &name, "name")
        .map_err(|e| e.bundle_in_path("name"))?;
    let loaded = super::admission::loaded_bundle(&state, &name, "name")
        .map_err(|e| e.bundle_in_path("name"))?;
    verify::check_exchange(&loaded.bundle, run.exchange.is_some()).map_err(|e| refused(&e))?;
    // One verify waited for at a time per daemon: each runs its bundle a
    // few dozen times.
    let Ok(_only_one) = state.verifying.try_lock() else {
        return Err(ApiError::new(
            ErrorCode::Busy,
            "another verify is running in this daemon (one at a time); try again when it ends",
        )
        .retry_after(10));
    };
    let job = NewJob {
        bundle: name,
        input: run.input.clone(),
        kind: JobKind::Verify(Box::new(run)),
        ..Default::default()
    };
    let (job, _) = admit(&state, &caller, Submission::new(job, "bundle")).await?;
    let waited = tokio::time::timeout(MAX_WAIT, super::feed::wait_finished(&state, &job.id));
    let Ok(finished) = waited.await else {
        return Err(ApiError::new(
            ErrorCode::TimedOut,
            format!(
                "verify job {} of bundle {:?} did not end within {}s (queued behind other jobs, or slow); it goes on: see GET /v1/jobs/{}",
                job.id,
                job.bundle,
                MAX_WAIT.as_secs(),
                job.id
            ),
        ));
    };
    answer(&state, finished?).await
}

/// The body as a verify job runs it, or a 422 naming the field.
fn checked(request: VerifyRequest) -> Result<VerifyRun, ApiError> {
    if request.real_tools && request.tool_results.is_some() {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "tool_results",
            "tool_results answers the stand-ins, and real_tools runs the real tools instead: send one of them",
        ));
    }
    let exchange = request.exchange.as_ref().map(exchange_text).transpose()?;
    crate::bundle::requested_tools(&request.variables)
        .map_err(|e| ApiError::field(ErrorCode::InvalidRequest, "variables", e.to_string()))?;
    Ok(VerifyRun {
        exchange,
        input: request.input.unwrap_or_else(|| "verify".into()),
        variables: request.variables,
        real_tools: request.real_tools,
        tool_results: request.tool_results.unwrap_or_default(),
    })
}

/// The body's reply script as text, once it reads as one (a 422 saying
/// what is wrong with it otherwise).
fn exchange_text(value: &Value) -> Result<String, ApiError> {
    let text = match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    verify::parse_exchange(&text).map_err(|e| refused(&e))?;
    Ok(text)
}

/// A finished verify job as the route answers: its report with `job_id`,
/// or the refusal its worker recorded, or why it gave neither.
async fn answer(state: &AppState, job: Job) -> Result<Json<Verified>, ApiError> {
    if let (JobState::Succeeded, Some(Value::Object(report))) = (job.state, job.result.clone()) {
        return Ok(Json(Verified {
            report,
            job_id: job.id,
        }));
    }
    let recorded = state
        .queue
        .journal(&job.id)
        .await?
        .into_iter()
        .find(|entry| {
            entry.scope.is_empty() && entry.turn == REFUSED_TURN && entry.step == REFUSED_STEP
        });
    if let Some(mut refusal) = recorded.and_then(|e| serde_json::from_str::<Refusal>(&e.body).ok())
    {
        refusal.message = format!("{} (verify job {})", refusal.message, job.id);
        return Err(spelled(refusal));
    }
    Err(ApiError::new(
        ErrorCode::InvalidState,
        job.error.unwrap_or_else(|| {
            format!(
                "verify job {} ended {} without a report; see GET /v1/jobs/{}",
                job.id, job.state, job.id
            )
        }),
    ))
}

fn refused(e: &VerifyError) -> ApiError {
    spelled(Refusal::from(e))
}

/// A refusal as its status: the caller's script or bundle a 422 (the
/// script's naming `exchange`), too slow a 504, the daemon's own part a 500.
fn spelled(refusal: Refusal) -> ApiError {
    match refusal.reason {
        Reason::Exchange => ApiError::field(ErrorCode::InvalidRequest, "exchange", refusal.message),
        Reason::Invalid => ApiError::new(ErrorCode::InvalidRequest, refusal.message),
        Reason::TimedOut => ApiError::new(ErrorCode::TimedOut, refusal.message),
        Reason::Internal => ApiError::internal(refusal.message),
    }
}
