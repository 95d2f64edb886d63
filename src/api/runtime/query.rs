//! `POST /api/query`: the router bundle answers as a job of the query's
//! conversation, calling agents as tools; the reply is the runtime's
//! message envelope, or with `stream` the runtime's SSE frames.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::super::AppState;
use super::super::auth::Caller;
use super::super::body::JsonBody;
use super::super::error::{ApiError, ErrorCode};
use super::super::trace_context::CallerTrace;
use super::{RUNTIME, envelope};
use crate::queue::Controls;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueryRequest {
    query: String,
    #[serde(default = "super::default_user")]
    user_id: String,
    #[serde(default)]
    conversation_id: Option<String>,
    /// The trace also lists other tool calls and the model's turns.
    #[serde(default)]
    verbose: bool,
    /// Agent calls allowed for this query (more are refused).
    #[serde(default)]
    max_agents: Option<u32>,
    #[serde(default)]
    stream: bool,
    /// With `stream`: a `{"function_call"}` frame for each tool call of the
    /// router and a `{"function_result"}` for each result of a tool that is
    /// not an agent (the CLI prints them as `ƒ(x)` lines).
    #[serde(default)]
    function_calls: bool,
}

pub async fn query(
    State(state): State<AppState>,
    caller: Caller,
    trace: CallerTrace,
    JsonBody(request): JsonBody<QueryRequest>,
) -> Result<Response, ApiError> {
    super::non_blank("query", &request.query)?;
    if request.max_agents == Some(0) {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "max_agents",
            "`max_agents` must be at least 1 (leave it out for no limit)",
        ));
    }
    let router_name = state.registry.snapshot().config.runtime.router.clone();
    let router = super::configured_bundle(&state, "router", &router_name)?;
    let conversation = super::conversation_of(request.conversation_id)?;
    let submission = super::RunSubmission {
        bundle: router.name(),
        input: request.query,
        variables: super::user_variables(&request.user_id),
        controls: Controls {
            max_agents: request.max_agents,
            verbose: request.verbose,
            ..Controls::default()
        },
        plan: None,
        also_runs: Vec::new(),
        trace,
    };
    let stream = super::Stream::of(request.stream, request.function_calls);
    let (job, answer) = match super::run(&state, &caller, submission, &conversation, stream).await?
    {
        super::Answer::Streamed(frames) => return Ok(frames),
        super::Answer::Answered(job, answer) => (job, answer),
    };
    let (trace, used) =
        super::super::job_trace::execution_trace(&state, &job, request.verbose).await?;
    let mut reply = envelope(&conversation, RUNTIME, &request.user_id, &answer);
    reply["execution_trace"] = json!(trace);
    reply["agents_used"] = json!(used);
    reply["job_id"] = json!(job.id);
    Ok(Json(reply).into_response())
}
