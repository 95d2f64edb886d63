//! `/v1/conversations/{id}`: a conversation is the jobs that carry its
//! `conversation_id`, in order. `GET` shows its turns (the user's input,
//! the final answer, the agents used, timestamps); `DELETE` forgets its
//! finished turns with their events and journals. A job submitted with a
//! `conversation_id` starts from the earlier turns (the worker reads them).

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::AppState;
use super::auth::Caller;
use super::body::Path;
use super::error::{ApiError, ErrorCode};
use crate::access::policy::Action;
use crate::queue::{Job, JobFilter};

/// Turns read per conversation.
const MAX_TURNS: usize = 1000;

/// A 422 naming `conversation_id` unless it is a usable id.
pub(super) fn check_id(id: &str) -> Result<(), ApiError> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c));
    if ok {
        Ok(())
    } else {
        Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "conversation_id",
            format!(
                "invalid conversation id {id:?}: use 1 to 128 letters, digits, `-`, `_`, `.` or `:`"
            ),
        ))
    }
}

/// One turn of a conversation as clients see it.
fn turn(job: &Job, agents: Vec<String>) -> Value {
    json!({
        "job_id": job.id,
        "bundle": job.bundle,
        "state": job.state,
        "input": job.input,
        "answer": job.answer(),
        "error": job.error,
        "agents_used": agents,
        "created_at": job.created_at,
        "finished_at": job.finished_at,
    })
}

/// The turns (jobs) of conversation `id`, oldest first, or a 404 naming
/// it; another key's conversation is a 404 too, unless the key reads all.
pub(super) async fn turns_of(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<Vec<Job>, ApiError> {
    check_id(id)?;
    let mut jobs = state
        .queue
        .list(JobFilter {
            conversation_id: Some(id.to_string()),
            owner: caller.listing_owner(Action::ReadConversation),
            limit: MAX_TURNS,
            ..Default::default()
        })
        .await?
        .jobs;
    if jobs.is_empty() {
        return Err(ApiError::new(
            ErrorCode::NotFound,
            format!("no conversation with id {id:?} (it has no turns, or it was forgotten)"),
        ));
    }
    jobs.reverse();
    Ok(jobs)
}

pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let jobs = turns_of(&state, &caller, &id).await?;
    let mut turns = Vec::with_capacity(jobs.len());
    for job in &jobs {
        turns.push(turn(
            job,
            super::runtime::trace::agents_used(&state, job).await?,
        ));
    }
    Ok(Json(json!({"conversation_id": id, "turns": turns})))
}

pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let turns = turns_of(&state, &caller, &id).await?;
    if turns
        .iter()
        .any(|job| !caller.allows_job(Action::DeleteConversation, job))
    {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            format!(
                "conversation {id:?} belongs to another API key; only its own key or one with `operate_all` may forget it"
            ),
        ));
    }
    let (forgotten, left) = state.queue.forget_conversation(&id).await?;
    if forgotten == 0 && left == 0 {
        return Err(ApiError::new(
            ErrorCode::NotFound,
            format!("no conversation with id {id:?}"),
        ));
    }
    if left > 0 {
        return Err(ApiError::new(
            ErrorCode::InvalidState,
            format!(
                "conversation {id:?}: forgot {forgotten} finished turn(s); {left} job(s) are still queued or running: cancel them or wait, then DELETE again"
            ),
        ));
    }
    Ok(Json(
        json!({"conversation_id": id, "forgotten_turns": forgotten}),
    ))
}
