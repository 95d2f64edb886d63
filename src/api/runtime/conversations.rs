//! `GET /api/conversations/{id}`: a conversation as the runtime's clients
//! read it — each turn's question and answer as message envelopes.

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
    let jobs = turns_of(&state, &caller, &id).await?;
    let mut messages = Vec::with_capacity(jobs.len() * 2);
    for job in &jobs {
        messages.extend(turn(&state, job).await?);
    }
    Ok(Json(json!({"conversation_id": id, "messages": messages})))
}

/// A turn as envelopes: the question, and the answer once there is one.
async fn turn(state: &AppState, job: &Job) -> Result<Vec<Value>, ApiError> {
    let conversation = job.conversation_id.as_deref().unwrap_or_default();
    let user = job
        .variables
        .get(USER_VARIABLE)
        .and_then(Value::as_str)
        .unwrap_or("user");
    let runtime = if job.variables.contains_key(crate::group_chat::PLAN_VARIABLE) {
        GROUP_RUNTIME
    } else {
        RUNTIME
    };
    let message = |sender: &str, recipient: &str, content: &str, at: Option<&String>, suffix| {
        json!({
            "messageId": format!("{}-{suffix}", job.id),
            "conversationId": conversation,
            "senderId": sender,
            "recipientId": recipient,
            "content": content,
            "timestamp": at,
            "type": "Text",
        })
    };
    let mut messages = vec![message(
        user,
        runtime,
        &job.input,
        Some(&job.created_at),
        "q",
    )];
    if job.state.is_terminal() {
        let content = match job.answer_or_error() {
            Ok(answer) => answer.to_string(),
            Err(error) => format!("Error: {error}"),
        };
        let mut reply = message(runtime, user, &content, job.finished_at.as_ref(), "a");
        reply["agents_used"] = json!(super::trace::agents_used(state, job).await?);
        reply["job_id"] = json!(job.id);
        messages.push(reply);
    }
    Ok(messages)
}
