//! `POST /api/query`: the router bundle answers as a job of the query's
//! conversation, calling agents as tools; the reply is the runtime's
//! message envelope, or with `stream` the runtime's SSE frames.

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::super::AppState;
use super::super::auth::Caller;
use super::super::body::JsonBody;
use super::super::document::{also_streams, answers};
use super::super::error::{ApiError, ErrorCode};
use super::super::job_trace::TraceEntry;
use super::super::trace_context::CallerTrace;
use super::stream::RuntimeStreamEvent;
use super::{Envelope, RUNTIME};
use crate::queue::{Controls, JobId};

/// A question for the router bundle.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QueryRequest {
    #[schemars(length(min = 1))]
    query: String,
    /// Who asks: the reply's `recipientId`, and whose conversation it is.
    #[serde(default = "super::default_user")]
    user_id: String,
    /// Continue this conversation (default: a new `conv-<uuid>`).
    #[serde(default)]
    #[schemars(regex(pattern = crate::types::text::ID_PATTERN))]
    conversation_id: Option<String>,
    /// The trace also lists other tool calls and the model's turns.
    #[serde(default)]
    verbose: bool,
    /// Agent calls allowed for this query (the kernel refuses the ones
    /// beyond).
    #[serde(default)]
    #[schemars(range(min = 1))]
    max_agents: Option<u32>,
    /// Answer as `text/event-stream`.
    #[serde(default)]
    stream: bool,
    /// With `stream`: a `{"function_call"}` frame for each tool call of the
    /// router and a `{"function_result"}` for each result of a tool that is
    /// not an agent (the CLI prints them as `ƒ(x)` lines).
    #[serde(default)]
    function_calls: bool,
}

/// The router's answer: `senderId` `runtime`, `recipientId` the asking
/// user.
#[derive(Debug, Serialize, JsonSchema)]
pub struct RuntimeReply {
    #[serde(flatten)]
    pub envelope: Envelope,
    pub execution_trace: Vec<TraceEntry>,
    /// Every agent called, distinct, in order of first call.
    pub agents_used: Vec<String>,
    pub job_id: JobId,
}

/// `POST /api/query` in the API document.
pub(super) fn query_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary(
            "Ask the router bundle ([runtime] router), which calls agents as its agent/http_agent \
             tools; runs as a job",
        )
        .response_with::<200, Json<RuntimeReply>, _>(|r| {
            r.description(
                "The answer; with `stream: true` the runtime's frames (text/event-stream, one \
                 `data:` each), ending with `data: [DONE]`",
            )
        });
    let op = also_streams::<RuntimeStreamEvent>(op, 200);
    let op = answers(op, &super::WAITED_JOB);
    answers(
        op,
        &[
            (404, "The job was deleted while the request waited for it"),
            (
                422,
                "The body is not what the route reads, `query` is blank, `max_agents` is 0 or \
                 `conversation_id` is not a usable id; `field` names it",
            ),
            (
                503,
                &format!(
                    "The router bundle is not loaded (the message names it and the [runtime] \
                     key); with `stream`, the key's event streams are all open; {}. Retry-After \
                     says when to ask again",
                    super::PARKED
                ),
            ),
        ],
    )
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
    let reply = RuntimeReply {
        envelope: Envelope::reply(&conversation, RUNTIME, &request.user_id, &answer),
        execution_trace: trace,
        agents_used: used,
        job_id: job.id.clone(),
    };
    Ok(Json(reply).into_response())
}
