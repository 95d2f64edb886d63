//! `GET /api/conversations/{id}`: a conversation as the runtime's clients
//! read it — `{"id", "messages"}` as the multi-agent runtime answered, each
//! message with its `role`, `content` and `timestamp` (answers also with
//! `agents_used` and `execution_trace`), and besides that the message
//! envelope of each turn's question and answer (and `conversation_id`).

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::super::AppState;
use super::super::auth::Caller;
use super::super::body::Path;
use super::super::conversations::turns_of;
use super::super::error::ApiError;
use super::{GROUP_RUNTIME, RUNTIME, USER_VARIABLE};
use crate::queue::Job;

pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let jobs = turns_of(&state, &caller, None, &id).await?;
    let mut messages = Vec::with_capacity(jobs.len() * 2);
    for job in &jobs {
        messages.extend(turn(&state, job).await?);
    }
    Ok(Json(
        json!({"id": id, "conversation_id": id, "messages": messages}),
    ))
}

/// A turn as messages: the question, and the answer once there is one.
async fn turn(state: &AppState, job: &Job) -> Result<Vec<Value>, ApiError> {
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
    let message = |asked: bool, content: &str, at: Option<&String>| {
        let (role, sender, recipient, suffix) = if asked {
            ("user", user, runtime, "q")
        } else {
            ("assistant", runtime, user, "a")
        };
        json!({
            "role": role,
            "messageId": format!("{}-{suffix}", job.id),
            "conversationId": conversation,
            "senderId": sender,
            "recipientId": recipient,
            "content": content,
            "timestamp": at,
            "type": "Text",
        })
    };
    let mut messages = vec![message(true, &job.input, Some(&job.created_at))];
    if job.state.is_terminal() {
        let content = match job.answer_or_error() {
            Ok(answer) => answer.to_string(),
            Err(error) => format!("Error: {error}"),
        };
        let mut reply = message(false, &content, job.finished_at.as_ref());
        let (trace, used) = super::super::job_trace::answered_trace(state, job).await?;
        reply["agents_used"] = json!(used);
        reply["execution_trace"] = json!(trace);
        reply["job_id"] = json!(job.id);
        messages.push(reply);
    }
    Ok(messages)
}
