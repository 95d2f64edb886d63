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
use crate::access::policy::{Action, Resource};
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

/// The 404 of a conversation that does not exist for the caller: unknown,
/// forgotten, or another key's (answered alike).
fn not_found(id: &str) -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        format!("no conversation with id {id:?} (it has no turns, or it was forgotten)"),
    )
}

/// A conversation as the policy sees it: owned by the key that first wrote
/// it (`None`: from before keys).
fn conversation(owner: Option<&str>) -> Resource<'_> {
    Resource::owned("conversation", owner, None)
}

/// The turns (jobs) of conversation `id`, oldest first, or a 404 naming
/// it; another key's conversation is a 404 too, unless the key reads all.
pub(super) async fn turns_of(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<Vec<Job>, ApiError> {
    check_id(id)?;
    // The conversation's owner decides (the queue records the first key to
    // write it); without a row (a job of an older daemon) its turns do.
    if let Some(owner) = state.queue.conversation_owner(id).await? {
        caller.authorize(
            Action::ReadConversation,
            &conversation(owner.as_deref()),
            || not_found(id),
        )?;
    }
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
        return Err(not_found(id));
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

/// Forgets conversation `id`: its finished turns and, once none is left,
/// its owner row (the id may start again). Only the conversation's own key
/// (or one with `operate_all`) may; for any other it does not exist.
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    check_id(&id)?;
    match state.queue.conversation_owner(&id).await? {
        Some(owner) => caller.authorize(
            Action::DeleteConversation,
            &conversation(owner.as_deref()),
            || not_found(&id),
        )?,
        // Without a row (a job of an older daemon) every turn must be one
        // the key may forget.
        None => {
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
        }
    }
    let (forgotten, left) = state.queue.forget_conversation(&id).await?;
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
