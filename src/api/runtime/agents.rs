//! `GET /api/agents`, the agents the runtime knows: local bundles (except
//! the router and the group-chat host) and the config's remote
//! `[[agents]]`; and `POST /api/agents/{id}/message`, which answers a
//! message envelope with a local bundle's job, so other runtimes can call
//! this daemon's bundles as remote agents (exactly once per
//! `Idempotency-Key`, which `http_agent` tools send).

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::super::AppState;
use super::super::admission::Submission;
use super::super::auth::Caller;
use super::super::body::{JsonBody, Path};
use super::super::document::answers;
use super::super::error::{ApiError, ErrorCode};
use super::super::feed::run_to_end;
use super::super::idempotency::{idempotency_header, reads_idempotency_key};
use super::super::trace_context::CallerTrace;
use super::Envelope;
use crate::access::policy::{Action, Resource};
use crate::group_chat::{Participant, Place};
use crate::queue::{JobId, NewJob};
use crate::types::MessageType;

/// One agent as clients see it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(super) struct AgentCard {
    pub id: String,
    pub name: String,
    pub description: String,
    pub capabilities: Vec<String>,
    pub conversation_starters: Vec<String>,
    /// `/api/agents/<id>/message` for a local bundle, the URL of a remote
    /// agent.
    pub endpoint: String,
    pub kind: AgentKind,
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

/// Where an agent runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(super) enum AgentKind {
    /// A bundle of this daemon.
    Local,
    /// An agent of the config's `[[agents]]`, reached over HTTP.
    Remote,
}

impl AgentCard {
    pub fn participant(&self) -> Participant {
        let place = if self.kind == AgentKind::Local {
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
            kind: match a.remote {
                Some(_) => AgentKind::Remote,
                None => AgentKind::Local,
            },
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

/// The agents a key may see (`GET /api/agents`).
#[derive(Debug, Serialize, JsonSchema)]
pub struct AgentList {
    /// Local bundles by name, then remote agents in config order.
    pub agents: Vec<AgentCard>,
}

/// `GET /api/agents` in the API document.
pub(super) fn list_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    op.summary(
        "The agents: loaded bundles (kind local; not the router and group-chat bundles) the key \
         may use, then the config's remote [[agents]] (kind remote)",
    )
    .response_with::<200, Json<AgentList>, _>(|r| r.description("The agents"))
}

/// The directory as the key sees it: local agents of bundles it may use,
/// and the remote agents.
pub async fn list(State(state): State<AppState>, caller: Caller) -> Json<AgentList> {
    let agents: Vec<AgentCard> = directory(&state)
        .into_iter()
        .filter(|agent| {
            agent.kind != AgentKind::Local
                || caller.allows(Action::ReadBundle, &Resource::bundle(&agent.id))
        })
        .collect();
    Json(AgentList { agents })
}

// Alike in shape to AG-UI's `RunInput` (api/agui/mod.rs), kept apart: each is
// its own wire's body, its keys and their defaults its wire's.
/// The message envelope of remote agents; in a request only `content` is
/// required.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "AgentMessage")]
pub struct Message {
    /// What is asked: not blank, and without NUL (a job cannot hold one).
    #[schemars(regex(pattern = crate::types::text::KEY_PATTERN))]
    content: String,
    /// Continue this conversation (default: a new `conv-<uuid>`).
    #[serde(default)]
    #[schemars(regex(pattern = crate::types::text::ID_PATTERN))]
    conversation_id: Option<String>,
    /// Who asks; the reply's `recipientId` (default `user`).
    #[serde(default)]
    #[schemars(regex(pattern = crate::types::text::NO_NUL_PATTERN))]
    sender_id: Option<String>,
    /// Accepted and ignored: the reply makes its own.
    #[serde(default, rename = "messageId")]
    _message_id: Option<String>,
    /// Accepted and ignored.
    #[serde(default, rename = "recipientId")]
    _recipient_id: Option<String>,
    /// Accepted and ignored.
    #[serde(default, rename = "timestamp")]
    _timestamp: Option<String>,
    /// Accepted and ignored (`Text`).
    #[serde(default, rename = "type")]
    _kind: Option<String>,
}

/// The agent's reply: `senderId` the agent, `recipientId` the request's
/// `senderId` (or `user`), and the job that answered.
#[derive(Debug, Serialize, JsonSchema)]
pub struct AgentReply {
    #[serde(flatten)]
    pub envelope: Envelope,
    pub job_id: JobId,
}

/// `POST /api/agents/{id}/message` in the API document.
pub(super) fn message_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary(
            "Message a local bundle as a remote agent: runs it as a job (in conversationId when \
             given) and answers the envelope",
        )
        .response_with::<200, Json<AgentReply>, _>(|r| r.description("The agent's reply"));
    let op = reads_idempotency_key(
        op,
        "Names the job: a repeat with the same key (per agent) answers the first job's reply \
         instead of running again (`http_agent` tools send one)",
    );
    let op = answers(op, &super::WAITED_JOB);
    answers(
        op,
        &[
            (
                404,
                "No agent with that id (the message names the known ones), or the job was \
                 deleted while the request waited for it",
            ),
            (
                409,
                "The Idempotency-Key names a job of a different message",
            ),
            (
                422,
                "The envelope is not what the route reads, `content` is blank, \
                 `conversationId` is not a usable id, the Idempotency-Key header is blank, or \
                 the agent is remote (field `id`: post to its endpoint); `field` names it",
            ),
            (
                503,
                &format!(
                    "Not answered now: {}. Retry-After says when to ask again",
                    super::PARKED
                ),
            ),
        ],
    )
}

/// `POST /api/agents/{id}/message`: the local bundle answers as a job.
pub async fn message(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    trace: CallerTrace,
    JsonBody(message): JsonBody<Message>,
) -> Result<Json<AgentReply>, ApiError> {
    let agent = find(&directory(&state), &id, "id")?;
    if agent.kind != AgentKind::Local {
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
    let idempotency_key =
        idempotency_header(&headers)?.map(|key| format!("agent-message:{id}:{key}"));
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
    Ok(Json(AgentReply {
        envelope: Envelope::reply(&conversation, &id, &sender, answer),
        job_id: job.id,
    }))
}
