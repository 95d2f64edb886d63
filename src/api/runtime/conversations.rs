//! `GET /api/conversations/{id}`: a conversation as the runtime's clients
//! read it — `{"id", "messages"}` as the multi-agent runtime answered, each
//! message with its `role`, `content` and `timestamp` (answers also with
//! `agents_used` and `execution_trace`), and besides that the message
//! envelope of each turn's question and answer (and `conversation_id`).

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::super::AppState;
use super::super::auth::Caller;
use super::super::body::Path;
use super::super::conversations::{ConversationPath, turns_of};
use super::super::document::{UNAVAILABLE, answers};
use super::super::error::ApiError;
use super::super::job_trace::TraceEntry;
use super::{Envelope, EnvelopeType, GROUP_RUNTIME, RUNTIME, USER_VARIABLE};
use crate::queue::{Job, JobId};

/// A runtime conversation, turn by turn.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ConversationMessages {
    /// The conversation id, as the multi-agent runtime answered it.
    pub id: String,
    pub conversation_id: String,
    /// Per turn the user's message, then, once the turn's job ended, the
    /// reply (`content` the answer, or `Error: …`).
    pub messages: Vec<ConversationMessage>,
}

/// One message of a conversation: `messageId` is the turn's job id with
/// `-q` (the question) or `-a` (the answer).
#[derive(Debug, Serialize, JsonSchema)]
pub struct ConversationMessage {
    pub role: Role,
    #[serde(flatten)]
    pub envelope: Envelope,
    /// On replies: the agents the turn used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agents_used: Option<Vec<String>>,
    /// On replies: the trace the answer carried (verbose when the query
    /// asked for it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execution_trace: Option<Vec<TraceEntry>>,
    /// On replies: the turn's job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_id: Option<JobId>,
}

/// Who said a message.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "ConversationRole")]
pub enum Role {
    User,
    Assistant,
}

/// `GET /api/conversations/{id}` in the API document.
pub(super) fn get_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary(
            "A runtime conversation as message envelopes: per turn the user's message, then the \
             reply once finished",
        )
        .response_with::<200, Json<ConversationMessages>, _>(|r| {
            r.description("The messages, turn by turn")
        });
    answers(
        op,
        &[
            (
                404,
                "No conversation with that id for the key (none, or it was forgotten)",
            ),
            (422, "The id is not a usable conversation id"),
            UNAVAILABLE,
        ],
    )
}

pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(ConversationPath { id }): Path<ConversationPath>,
) -> Result<Json<ConversationMessages>, ApiError> {
    let jobs = turns_of(&state, &caller, None, &id).await?;
    let mut messages = Vec::with_capacity(jobs.len() * 2);
    for job in &jobs {
        messages.extend(turn(&state, job).await?);
    }
    Ok(Json(ConversationMessages {
        conversation_id: id.clone(),
        id,
        messages,
    }))
}

/// A turn as messages: the question, and the answer once there is one.
async fn turn(state: &AppState, job: &Job) -> Result<Vec<ConversationMessage>, ApiError> {
    let conversation = job.conversation_id.as_deref().unwrap_or_default();
    let user = job
        .variables
        .get(USER_VARIABLE)
        .and_then(Value::as_str)
        .unwrap_or("user");
    let runtime = if job.kind.is_group_chat() {
        GROUP_RUNTIME
    } else {
        RUNTIME
    };
    // The question is the user's (`-q`), the answer the assistant's (`-a`).
    let message = |role: Role, content: String, at: &str| {
        let (sender, recipient, suffix) = match role {
            Role::User => (user, runtime, "q"),
            Role::Assistant => (runtime, user, "a"),
        };
        ConversationMessage {
            role,
            envelope: Envelope {
                message_id: format!("{}-{suffix}", job.id),
                conversation_id: conversation.to_string(),
                sender_id: sender.to_string(),
                recipient_id: recipient.to_string(),
                content,
                timestamp: at.to_string(),
                kind: EnvelopeType::Text,
            },
            agents_used: None,
            execution_trace: None,
            job_id: None,
        }
    };
    let mut messages = vec![message(Role::User, job.input.clone(), &job.created_at)];
    if job.state.is_terminal() {
        let content = match job.answer_or_error() {
            Ok(answer) => answer.to_string(),
            Err(error) => format!("Error: {error}"),
        };
        // An ended job has its end time; the last change is the nearest.
        let ended = job.finished_at.as_ref().unwrap_or(&job.updated_at);
        let (trace, used) = super::super::job_trace::answered_trace(state, job).await?;
        messages.push(ConversationMessage {
            agents_used: Some(used),
            execution_trace: Some(trace),
            job_id: Some(job.id.clone()),
            ..message(Role::Assistant, content, ended)
        });
    }
    Ok(messages)
}
