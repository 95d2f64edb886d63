//! `POST /api/group-chat`: the chosen agents answer in order, round after
//! round, until the termination strategy says stop — as one job of the
//! group-chat host bundle carrying its [`Plan`] (the worker runs it).

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::super::AppState;
use super::super::auth::Caller;
use super::super::body::JsonBody;
use super::super::document::{also_streams, answers};
use super::super::error::{ApiError, ErrorCode};
use super::super::job_trace::TraceEntry;
use super::super::trace_context::CallerTrace;
use super::agents::{AgentCard, directory, find};
use super::stream::{AgentResponse, RuntimeStreamEvent};
use super::{Envelope, GROUP_RUNTIME};
use crate::group_chat::{Ended, Participant, Place, Plan, Termination};
use crate::queue::{Job, JobId};
use crate::registry::LoadedBundle;

// Its first fields are a query's (`query.rs`), kept apart: each wire's
// request refuses unknown keys, which `#[serde(flatten)]` cannot.
/// A group chat to hold.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupChatRequest {
    #[schemars(length(min = 1))]
    query: String,
    /// Who asks: the reply's `recipientId`, and whose conversation it is.
    #[serde(default = "super::default_user")]
    user_id: String,
    /// Continue this conversation (default: a new `conv-<uuid>`).
    #[serde(default)]
    #[schemars(regex(pattern = crate::types::text::ID_PATTERN))]
    conversation_id: Option<String>,
    /// Who speaks, in order (default: every agent of `GET /api/agents`);
    /// unknown ids are dropped.
    #[serde(default)]
    agent_ids: Option<Vec<String>>,
    /// Rounds at most: from 1 to the host bundle's `group_chat.max_rounds`.
    #[serde(default = "default_max_iterations")]
    #[schemars(range(min = 1))]
    max_iterations: u32,
    /// When the chat ends (default `{"type": "max_iterations"}`);
    /// `max_iterations` bounds every strategy.
    // Read as any JSON, then by `termination()`, which names the field at
    // fault; described as what it must be.
    #[serde(default)]
    #[schemars(with = "Option<Termination>")]
    termination: Option<Value>,
    /// The trace also lists other tool calls and the model's turns.
    #[serde(default)]
    verbose: bool,
    /// Answer as `text/event-stream`.
    #[serde(default)]
    stream: bool,
}

/// What a group chat's job left in its result, as the reply shows it.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub(super) struct ChatOutcome {
    /// Each reply, in order.
    pub agent_responses: Vec<AgentResponse>,
    /// The agents that spoke, distinct, in order.
    pub agents_used: Vec<String>,
    pub rounds: u32,
    pub terminated_by: Ended,
}

impl ChatOutcome {
    /// The outcome a group chat's job recorded (its worker writes it).
    fn of(job: &Job) -> Result<Self, ApiError> {
        let result = job.result.clone().unwrap_or_default();
        serde_json::from_value(result).map_err(|e| {
            ApiError::internal(format!(
                "group chat {} recorded a result the runtime API cannot read: {e}",
                job.id
            ))
        })
    }
}

/// The chat: `senderId` `agent-runtime`, `content` all replies joined by
/// single spaces.
#[derive(Debug, Serialize, JsonSchema)]
pub struct GroupChatReply {
    #[serde(flatten)]
    pub envelope: Envelope,
    #[serde(flatten)]
    pub outcome: ChatOutcome,
    pub execution_trace: Vec<TraceEntry>,
    pub job_id: JobId,
}

/// `POST /api/group-chat` in the API document.
pub(super) fn group_chat_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary(
            "A group chat among agents, in rounds, until the termination strategy ends it; runs \
             as a job hosted by the group-chat bundle ([runtime] group_chat)",
        )
        .response_with::<200, Json<GroupChatReply>, _>(|r| {
            r.description(
                "The chat; with `stream: true` the frames of /api/query (an agent_call / \
                 agent_response pair per reply; the complete frame also carries \
                 agent_responses), ending with `data: [DONE]`",
            )
        });
    let op = also_streams::<RuntimeStreamEvent>(op, 200);
    let op = answers(op, &super::WAITED_JOB);
    answers(
        op,
        &[
            (
                404,
                "An unknown selector agent (`termination.agent_id`), or the job was deleted \
                 while the request waited for it",
            ),
            (
                422,
                "The body is not what the route reads, `query` is blank, `max_iterations` is \
                 past the host's group_chat.max_rounds, no agent of `agent_ids` is known, the \
                 termination is not one of the strategies, or `conversation_id` is not a usable \
                 id; `field` names it",
            ),
            (
                503,
                &format!(
                    "The group-chat bundle is not loaded or has no `group_chat:` section (the \
                     message names it and the [runtime] key); with `stream`, the key's event \
                     streams are all open; {}. Retry-After says when to ask again",
                    super::PARKED
                ),
            ),
        ],
    )
}

fn default_max_iterations() -> u32 {
    5
}

pub async fn group_chat(
    State(state): State<AppState>,
    caller: Caller,
    trace: CallerTrace,
    JsonBody(request): JsonBody<GroupChatRequest>,
) -> Result<Response, ApiError> {
    super::non_blank("query", &request.query)?;
    let host_name = state.registry.snapshot().config.runtime.group_chat.clone();
    let host = super::configured_bundle(&state, "group_chat", &host_name)?;
    let plan = plan(&state, &host, &request)?;
    let local_agents = plan.local_bundles();
    let conversation = super::conversation_of(request.conversation_id)?;
    let submission = super::RunSubmission {
        bundle: host.name(),
        input: request.query,
        variables: super::user_variables(&request.user_id),
        // As before the controls had fields, a chat's conversation shows
        // its trace plain (the reply below shows what it asked for).
        controls: Default::default(),
        plan: Some(plan),
        also_runs: local_agents,
        trace,
    };
    let (job, answer) = match super::run(
        &state,
        &caller,
        submission,
        &conversation,
        super::Stream::of(request.stream, false),
    )
    .await?
    {
        super::Answer::Streamed(frames) => return Ok(frames),
        super::Answer::Answered(job, answer) => (job, answer),
    };
    let (trace, _) =
        super::super::job_trace::execution_trace(&state, &job, request.verbose).await?;
    let reply = GroupChatReply {
        envelope: Envelope::reply(&conversation, GROUP_RUNTIME, &request.user_id, &answer),
        outcome: ChatOutcome::of(&job)?,
        execution_trace: trace,
        job_id: job.id.clone(),
    };
    Ok(Json(reply).into_response())
}

/// The request as a plan, or the 4xx naming what is wrong.
fn plan(
    state: &AppState,
    host: &LoadedBundle,
    request: &GroupChatRequest,
) -> Result<Plan, ApiError> {
    let Some(spec) = host.bundle.raw.group_chat.clone() else {
        return Err(ApiError::new(
            ErrorCode::Unavailable,
            format!(
                "bundle {:?} (`[runtime] group_chat`) has no `group_chat:` section, so it cannot host group chats: add one (docs/api.md)",
                host.name()
            ),
        ));
    };
    if request.max_iterations == 0 || request.max_iterations > spec.max_rounds {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "max_iterations",
            format!(
                "`max_iterations` must be between 1 and {} (the host bundle's group_chat.max_rounds)",
                spec.max_rounds
            ),
        ));
    }
    let cards = directory(state);
    let agents = speakers(&cards, request.agent_ids.as_deref())?;
    let termination = termination(request.termination.as_ref())?;
    let selector = match &termination {
        Termination::Selector { agent_id: None } => Some(Participant {
            id: host.name().to_string(),
            name: host.name().to_string(),
            place: Place::Local {
                bundle: host.name().to_string(),
            },
        }),
        Termination::Selector { agent_id: Some(id) } => {
            Some(find(&cards, id, "termination.agent_id")?.participant())
        }
        _ => None,
    };
    Ok(Plan {
        agents,
        max_iterations: request.max_iterations,
        termination,
        selector,
        stop_word: spec.stop_word,
    })
}

/// The agents that speak, in the requested order (unknown ids dropped), or
/// every agent when none are named.
fn speakers(cards: &[AgentCard], ids: Option<&[String]>) -> Result<Vec<Participant>, ApiError> {
    let chosen: Vec<Participant> = match ids {
        None => cards.iter().map(AgentCard::participant).collect(),
        Some(ids) => ids
            .iter()
            .filter_map(|id| cards.iter().find(|c| &c.id == id))
            .map(AgentCard::participant)
            .collect(),
    };
    if chosen.is_empty() {
        let known: Vec<&str> = cards.iter().map(|c| c.id.as_str()).collect();
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "agent_ids",
            format!(
                "no known agent to chat with (known: {}; GET /api/agents lists them)",
                known.join(", ")
            ),
        ));
    }
    Ok(chosen)
}

/// The termination strategy, or a 422 naming the field at fault.
fn termination(value: Option<&Value>) -> Result<Termination, ApiError> {
    let Some(value) = value else {
        return Ok(Termination::default());
    };
    let known = ["max_iterations", "stop_phrase", "selector"];
    match value.get("type").and_then(Value::as_str) {
        Some(kind) if known.contains(&kind) => {}
        other => {
            return Err(ApiError::field(
                ErrorCode::InvalidRequest,
                "termination.type",
                format!(
                    "unknown termination type {other:?}: use one of {}",
                    known.join(", ")
                ),
            ));
        }
    }
    let termination: Termination = serde_json::from_value(value.clone()).map_err(|e| {
        ApiError::field(
            ErrorCode::InvalidRequest,
            "termination",
            format!("invalid termination: {e}"),
        )
    })?;
    if let Termination::StopPhrase { phrase } = &termination
        && phrase.trim().is_empty()
    {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "termination.phrase",
            "the stop phrase is empty: send the text that ends the chat",
        ));
    }
    Ok(termination)
}
