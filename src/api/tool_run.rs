//! `POST /v1/bundles/{name}/tools/{tool}:run` (and its spelling without a
//! colon, `…/tools/{tool}/run`): one tool call of a loaded bundle, outside
//! any job. Admission decides who may ([`super::admission::admit_direct`]);
//! the loaded bundle runs it through its engine's pipeline
//! ([`crate::registry::LoadedBundle::run_tool`]).
//!
//! axum's router (matchit) has no parameter suffixes, so the `:run` form
//! is one path segment taken apart here.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::AppState;
use super::auth::Caller;
use super::body::{JsonBody, Path};
use super::error::{ApiError, ErrorCode};
use crate::access::policy::Action;
use crate::events::{EventSink, NullObserver, RunContext};
use crate::registry::tool_run::{DirectRun, DirectRunError};

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
) -> Result<Json<DirectRun>, ApiError> {
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

/// `…/tools/{tool}/run`.
pub async fn run(
    State(state): State<AppState>,
    caller: Caller,
    Path((bundle, tool)): Path<(String, String)>,
    JsonBody(body): JsonBody<RunBody>,
) -> Result<Json<DirectRun>, ApiError> {
    // Held until the call ends: the run is in flight for the key.
    let (loaded, _in_flight) =
        super::admission::admit_direct(&state, &caller, Action::RunTool, &bundle).await?;
    let arguments = match body.arguments {
        None => "{}".to_string(),
        Some(Value::String(text)) => text,
        Some(value) => value.to_string(),
    };
    let context = RunContext {
        run_id: format!("tool-run-{}", uuid::Uuid::now_v7()),
        bundle: loaded.name().to_string(),
        bundle_version: loaded.version().to_string(),
        parent: None,
    };
    let events = EventSink::new(context, 1, Arc::new(NullObserver));
    // A client that hangs up drops this future and with it the call (a
    // process tool's group is killed on drop); shutdown ends it here.
    let cancel: CancellationToken = state.stop.child_token();
    loaded
        .run_tool(&tool, &arguments, &cancel, &events)
        .await
        .map(Json)
        .map_err(refusal)
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
