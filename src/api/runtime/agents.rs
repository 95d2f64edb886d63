//! `GET /api/agents`, the agents the runtime knows: local bundles (except
//! the router and the group-chat host) and the config's remote
//! `[[agents]]`; and `POST /api/agents/{id}/message`, which answers a
//! message envelope with a local bundle's job, so other runtimes can call
//! this daemon's bundles as remote agents (exactly once per
//! `Idempotency-Key`, which `http_agent` tools send).

use crate::access::policy::{Action, Resource};
use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::super::AppState;
use super::super::admission::Submission;
use super::super::auth::Caller;
use super::super::body::{JsonBody, Path};
use super::super::error::{ApiError, ErrorCode};
use super::super::feed::run_to_end;
use super::super::trace_context::CallerTrace;
use super::envelope;
use crate::group_chat::{Participant, Place};
use crate::queue::NewJob;
use crate::types::MessageType;

/// One agent as clients see it.
#[derive(Debug, Clone, Serialize)]
pub(super) struct AgentCard {
    pub id: String,
    pub name: String,
    pub description: String,
    pub capabilities: Vec<String>,
    pub conversation_starters: Vec<String>,
    pub endpoint: String,
    /// `local` (a bundle of this daemon) or `remote`.
    pub kind: &'static str,
    /// A remote agent's reply cap (`[[agents]] max_response_bytes`).
    #[serde(skip)]
    pub max_response_bytes: Option<usize>,
    /// A remote agent's envelope `type` (`[[agents]] message_type`).
    #[serde(skip)]
    pub message_type: Option<MessageType>,
    /// A remote agent's own `timeout` (`[[agents]] timeout`), when set.
    #[serde(skip)]
    pub timeout: Option<std::time::Duration>,
}

impl AgentCard {
    pub fn participant(&self) -> Participant {
        let place = if self.kind == LOCAL {
            Place::Local {
                bundle: self.id.clone(),
            }
        } else {
            Place::Remote {
                endpoint: self.endpoint.clone(),
                max_response_bytes: self.max_response_bytes,
                message_type: self.message_type.clone(),
                timeout_ms: self.timeout.map(|t| t.as_millis() as u64),
            }
        };
        Participant {
            id: self.id.clone(),
            name: self.name.clone(),
            place,
        }
    }
}

const LOCAL: &str = "local";

/// Every agent: local bundles by name, then remote agents in config order.
pub(super) fn directory(state: &AppState) -> Vec<AgentCard> {
    state
        .registry
        .snapshot()
        .agent_directory()
        .into_iter()
        .map(|a| AgentCard {
            endpoint: match a.remote {
                Some(remote) => remote.endpoint.clone(),
                None => format!("/api/agents/{}/message", a.id),
            },
            kind: if a.remote.is_some() { "remote" } else { LOCAL },
            max_response_bytes: a.remote.and_then(|r| r.max_response_bytes),
            message_type: a.remote.and_then(|r| r.message_type.clone()),
            timeout: a.remote.and_then(|r| r.timeout.map(Into::into)),
            id: a.id,
            name: a.name,
            description: a.description,
            capabilities: a.capabilities,
            conversation_starters: a.conversation_starters,
        })
        .collect()
}

/// The agent named `id`, or a 404 naming it and the known ones.
pub(super) fn find(cards: &[AgentCard], id: &str, field: &str) -> Result<AgentCard, ApiError> {
    cards.iter().find(|c| c.id == id).cloned().ok_or_else(|| {
        let known: Vec<&str> = cards.iter().map(|c| c.id.as_str()).collect();
        ApiError::field(
            ErrorCode::NotFound,
            field,
            format!(
                "no agent with id {id:?} (known: {}; GET /api/agents lists them)",
                known.join(", ")
            ),
        )
    })
}

/// The directory as the key sees it: local agents of bundles it may use,
/// and the remote agents.
pub async fn list(State(state): State<AppState>, caller: Caller) -> Json<Value> {
    let agents: Vec<AgentCard> = directory(&state)
        .into_iter()
        .filter(|agent| {
            agent.kind != LOCAL || caller.allows(Action::ReadBundle, &Resource::bundle(&agent.id))
        })
        .collect();
    Json(json!({"agents": agents}))
}

// Alike in shape to AG-UI's `RunInput` (api/agui.rs), kept apart: each is
// its own wire's body, its keys and their defaults its wire's.
/// A message envelope as callers send it; only `content` is required.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    content: String,
    #[serde(default)]
    conversation_id: Option<String>,
    #[serde(default)]
    sender_id: Option<String>,
    /// Accepted and ignored: the reply makes its own.
    #[serde(default, rename = "messageId")]
    _message_id: Option<String>,
    #[serde(default, rename = "recipientId")]
    _recipient_id: Option<String>,
    #[serde(default, rename = "timestamp")]
    _timestamp: Option<String>,
    #[serde(default, rename = "type")]
    _kind: Option<String>,
}

/// `POST /api/agents/{id}/message`: the local bundle answers as a job.
pub async fn message(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    trace: CallerTrace,
    JsonBody(message): JsonBody<Message>,
) -> Result<Json<Value>, ApiError> {
    let agent = find(&directory(&state), &id, "id")?;
    if agent.kind != LOCAL {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "id",
            format!(
                "agent {id:?} is remote: post the message to its endpoint {}",
                agent.endpoint
            ),
        ));
    }
    super::non_blank("content", &message.content)?;
    let conversation = super::conversation_of(message.conversation_id)?;
    let sender = message.sender_id.unwrap_or_else(super::default_user);
    let variables = super::user_variables(&sender);
    // A caller that repeats a message (a resumed job's `http_agent` call
    // does, with the same key) gets the first answer, not a second run.
    let idempotency_key = match headers.get("idempotency-key").map(|v| v.to_str()) {
        None => None,
        Some(Ok(key)) if !key.trim().is_empty() => Some(format!("agent-message:{id}:{key}")),
        Some(_) => {
            return Err(ApiError::field(
                ErrorCode::InvalidRequest,
                "Idempotency-Key",
                "the Idempotency-Key header is empty or not visible ASCII; send a non-blank token or leave it out",
            ));
        }
    };
    let job = NewJob {
        bundle: id.clone(),
        input: message.content,
        variables,
        conversation_id: Some(conversation.clone()),
        idempotency_key,
        trace: trace.or_body(None, None),
        ..Default::default()
    };
    let submission = Submission::new(job, "id");
    let job = run_to_end(&state, &caller, submission).await?;
    let answer = job.answer_or_error()?;
    let mut reply = envelope(&conversation, &id, &sender, answer);
    reply["job_id"] = json!(job.id);
    Ok(Json(reply))
}
