//! `POST /api/group-chat`: the chosen agents answer in order, round after
//! round, until the termination strategy says stop — as one job of the
//! group-chat host bundle carrying its [`Plan`] (the worker runs it).

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::super::AppState;
use super::super::auth::Caller;
use super::super::body::JsonBody;
use super::super::error::{ApiError, ErrorCode};
use super::super::trace_context::CallerTrace;
use super::agents::{AgentCard, directory, find};
use super::{GROUP_RUNTIME, envelope};
use crate::group_chat::{Participant, Place, Plan, Termination};
use crate::registry::LoadedBundle;

// Its first fields are a query's (`query.rs`), kept apart: each wire's
// request refuses unknown keys, which `#[serde(flatten)]` cannot.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupChatRequest {
    query: String,
    #[serde(default = "super::default_user")]
    user_id: String,
    #[serde(default)]
    conversation_id: Option<String>,
    /// Who speaks, in order; unknown ids are dropped; none means all.
    #[serde(default)]
    agent_ids: Option<Vec<String>>,
    /// Rounds at most.
    #[serde(default = "default_max_iterations")]
    max_iterations: u32,
    #[serde(default)]
    termination: Option<Value>,
    #[serde(default)]
    verbose: bool,
    #[serde(default)]
    stream: bool,
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
    let result = job.result.clone().unwrap_or_default();
    let mut reply = envelope(&conversation, GROUP_RUNTIME, &request.user_id, &answer);
    for key in ["agent_responses", "agents_used", "rounds", "terminated_by"] {
        reply[key] = result[key].clone();
    }
    reply["execution_trace"] = json!(trace);
    reply["job_id"] = json!(job.id);
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
