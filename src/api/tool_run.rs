//! `POST /v1/bundles/{name}/tools/{tool}:run` (and its spelling without a
//! colon, `…/tools/{tool}/run`): one tool call of a loaded bundle, outside
//! any agent run. The API never runs it: it checks the call, admission
//! queues it as a `tool_run` job (the key's `run_tool` on the bundle, its
//! rate and quotas as for any job), a worker runs it through the bundle's
//! engine (`worker/tool_run.rs`), and the route answers with the job's
//! result.
//!
//! axum's router (matchit) has no parameter suffixes, so the `:run` form
//! is one path segment taken apart here.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::Value;

use super::AppState;
use super::admission::{Submission, admit};
use super::auth::Caller;
use super::body::{JsonBody, Path};
use super::error::{ApiError, ErrorCode};
use crate::access::policy::Action;
use crate::queue::{Job, JobKind, JobState, NewJob};
use crate::registry::tool_run::DirectRunError;

/// The `:run` of `POST …/tools/{tool}:run`.
const RUN_SUFFIX: &str = ":run";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunBody {
    /// The call's arguments: a JSON object, or the text of one (as a model
    /// writes it). Absent: `{}`.
    #[serde(default)]
    arguments: Option<Value>,
}

/// `…/tools/{tool}:run`: the segment must end in `:run`.
pub async fn run_suffixed(
    state: State<AppState>,
    caller: Caller,
    Path((bundle, segment)): Path<(String, String)>,
    body: JsonBody<RunBody>,
) -> Result<Json<Value>, ApiError> {
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
) -> Result<Json<Value>, ApiError> {
    let arguments = match body.arguments {
        None => "{}".to_string(),
        Some(Value::String(text)) => text,
        Some(value) => value.to_string(),
    };
    // The policy first: a bundle the key may not use is unknown to it,
    // whatever its tools.
    caller.on_bundle(Action::RunTool, &bundle, "bundle")?;
    let loaded = super::admission::loaded_bundle(&state, &bundle, "bundle")?;
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
fn answer(job: Job) -> Result<Json<Value>, ApiError> {
    match (job.state, job.result) {
        (JobState::Succeeded, Some(Value::Object(mut result))) => {
            result.insert("job_id".into(), Value::String(job.id.to_string()));
            Ok(Json(Value::Object(result)))
        }
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
