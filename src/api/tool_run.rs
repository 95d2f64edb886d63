//! `POST /v1/bundles/{name}/tools/{tool}:run` (and its spelling without a
//! colon, `…/tools/{tool}/run`): one tool call of a loaded bundle, outside
//! any agent run. The API never runs it: it checks the call, admission
//! queues it as a `tool_run` job (the key's `run_tool` on the bundle, its
//! rate and quotas as for any job), a worker runs it through the bundle's
//! engine (`worker/tool_run.rs`), and the route answers with the job's
//! result.
//!
//! axum's router (matchit) has no parameter suffixes, so the `:run` form
//! is one path segment taken apart here (the API document spells it
//! `{tool}:run`: `document::SPELLED`).

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::AppState;
use super::admission::{Submission, admit};
use super::auth::Caller;
use super::body::{JsonBody, Path};
use super::document::{QUOTA, UNAVAILABLE, answers, object_or_text};
use super::error::{ApiError, ErrorCode};
use crate::access::policy::Action;
use crate::queue::{Job, JobId, JobKind, JobState, NewJob};
use crate::registry::tool_run::{DirectRun, DirectRunError};

/// The `:run` of `POST …/tools/{tool}:run`.
const RUN_SUFFIX: &str = ":run";

/// The body of a tool run (none at all is `{}`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunBody {
    /// The call's arguments: a JSON object, or the text of one (as a model
    /// writes it). Absent: `{}`. Another value is passed on as its text,
    /// and the run answers it with a `bad_args` result, as in a job.
    #[serde(default)]
    #[schemars(schema_with = "object_or_text")]
    arguments: Option<Value>,
}

/// What a tool run answers: the call's result, with the job's id.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ToolRan {
    /// The result the worker stored as the job's result, passed on as it
    /// is (`worker/tool_run.rs` serializes a [`DirectRun`]).
    #[serde(flatten)]
    #[schemars(with = "DirectRun")]
    run: Map<String, Value>,
    /// The `tool_run` job (`GET /v1/jobs/{id}`; its log holds the call's trace).
    job_id: JobId,
}

/// Both spellings of a tool run in the API document.
pub(super) fn run_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Run one tool call of a loaded bundle, as a `tool_run` job")
        .description(
            "Outside any agent run, through the tool engine's pipeline (coercion, cache, \
             guardrails, timeout, retries, caps). Approval-gated calls and agent tools are \
             refused (409): they need a job of their own.",
        )
        .response_with::<200, Json<ToolRan>, _>(|r| {
            r.description(
                "The call's result: `output` (what a model reads), `value` (it parsed), \
                 `is_error`, `error_code` (bad_args, user_error, tool_error, guardrail), \
                 `attempts`, `cached`, `duration_ms`",
            )
        });
    answers(
        op,
        &[
            (404, "The bundle has no tool by that name"),
            (
                409,
                "The call needs a job (an approval or a nested agent), or its job ended \
                 without an answer",
            ),
            (
                422,
                "No loaded bundle by that name, or a body the route does not read: `field` \
                 names it",
            ),
            QUOTA,
            UNAVAILABLE,
        ],
    )
}

/// `…/tools/{tool}:run`: the segment must end in `:run`.
pub async fn run_suffixed(
    state: State<AppState>,
    caller: Caller,
    Path((bundle, segment)): Path<(String, String)>,
    body: JsonBody<RunBody>,
) -> Result<Json<ToolRan>, ApiError> {
    let Some(tool) = segment.strip_suffix(RUN_SUFFIX) else {
        return Err(ApiError::new(
            ErrorCode::NotFound,
            format!(
                "no such route: to run tool {segment:?} of bundle {bundle:?}, POST /v1/bundles/{bundle}/tools/{segment}:run"
            ),
        ));
    };
    run(state, caller, Path((bundle, tool.to_string())), body).await
}

/// `…/tools/{tool}/run`: the call is checked here (who may, which tool,
/// whether it needs a job of its own), then queued as a `tool_run` job
/// that a worker runs, and its answer is the job's result with the job's
/// id (`job_id`; the job's log holds the call's trace).
pub async fn run(
    State(state): State<AppState>,
    caller: Caller,
    Path((bundle, tool)): Path<(String, String)>,
    JsonBody(body): JsonBody<RunBody>,
) -> Result<Json<ToolRan>, ApiError> {
    let arguments = match body.arguments {
        None => "{}".to_string(),
        Some(Value::String(text)) => text,
        Some(value) => value.to_string(),
    };
    // The policy first: a bundle the key may not use is unknown to it,
    // whatever its tools.
    caller
        .on_bundle(Action::RunTool, &bundle, "name")
        .map_err(|e| e.bundle_in_path("name"))?;
    let loaded = super::admission::loaded_bundle(&state, &bundle, "name")
        .map_err(|e| e.bundle_in_path("name"))?;
    loaded
        .check_tool_run(&tool, &arguments)
        .await
        .map_err(refusal)?;
    let job = NewJob {
        bundle,
        input: arguments.clone(),
        kind: JobKind::ToolRun { tool, arguments },
        ..Default::default()
    };
    let (job, _) = admit(&state, &caller, Submission::new(job, "bundle")).await?;
    answer(super::jobs::wait_finished(&state, &job.id).await?)
}

/// A finished `tool_run` job as the route answers: its result (the call's
/// output, error code, attempts, …) with `job_id`, or why it did not run.
fn answer(job: Job) -> Result<Json<ToolRan>, ApiError> {
    match (job.state, job.result) {
        (JobState::Succeeded, Some(Value::Object(run))) => Ok(Json(ToolRan {
            run,
            job_id: job.id,
        })),
        (state, _) => Err(ApiError::new(
            ErrorCode::InvalidState,
            job.error.unwrap_or_else(|| {
                format!(
                    "tool run job {} ended {state} without an answer; see GET /v1/jobs/{}",
                    job.id, job.id
                )
            }),
        )),
    }
}

/// How a call that needs a job, or names no tool, is refused.
fn refusal(e: DirectRunError) -> ApiError {
    let code = match e {
        DirectRunError::UnknownTool { .. } => ErrorCode::NotFound,
        DirectRunError::NeedsApproval { .. } | DirectRunError::NestedAgent { .. } => {
            ErrorCode::InvalidState
        }
    };
    ApiError::field(code, "tool", e.to_string())
}
