//! `/v1/conversations/{id}`: a conversation is the jobs that carry its
//! `conversation_id`, in order. `GET` shows its turns (the user's input,
//! the final answer, the agents used, timestamps); `DELETE` forgets its
//! finished turns with their events and journals. A job submitted with a
//! `conversation_id` starts from the earlier turns (the worker reads them).

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::AppState;
use super::auth::Caller;
use super::body::{Path, Query};
use super::document::{INVALID_STATE, UNAVAILABLE, answers};
use super::error::{ApiError, ErrorCode};
use crate::access::policy::{Action, Resource};
use crate::queue::{Job, JobFilter, JobId, JobState};

/// Turns read per conversation.
const MAX_TURNS: usize = 1000;

/// A 422 naming `conversation_id` unless it is a usable id.
pub(super) fn check_id(id: &str) -> Result<(), ApiError> {
    if crate::types::text::is_id(id) {
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

/// A conversation named in a route's path (`…/conversations/{id}`).
#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct ConversationPath {
    /// The conversation's id.
    #[schemars(regex(pattern = crate::types::text::ID_PATTERN))]
    pub id: String,
}

/// A conversation's turns, oldest first.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Conversation {
    pub conversation_id: String,
    pub turns: Vec<Turn>,
}

/// One turn of a conversation as clients see it: one job.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Turn {
    pub job_id: JobId,
    pub bundle: String,
    pub state: JobState,
    pub input: String,
    /// The final answer, once the job succeeded.
    pub answer: Option<String>,
    pub error: Option<String>,
    /// The bundles the turn ran as agents.
    pub agents_used: Vec<String>,
    /// RFC 3339 UTC.
    pub created_at: String,
    pub finished_at: Option<String>,
}

/// What a forget did.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Forgotten {
    pub conversation_id: String,
    pub forgotten_turns: usize,
}

fn turn(job: &Job, agents: Vec<String>) -> Turn {
    Turn {
        job_id: job.id.clone(),
        bundle: job.bundle.clone(),
        state: job.state,
        input: job.input.clone(),
        answer: job.answer().map(str::to_string),
        error: job.error.clone(),
        agents_used: agents,
        created_at: job.created_at.clone(),
        finished_at: job.finished_at.clone(),
    }
}

/// `GET /v1/conversations/{id}` in the API document.
pub(super) fn get_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    op.summary("A conversation's turns, oldest first")
        .response_with::<200, Json<Conversation>, _>(|r| r.description("The conversation"))
}

/// `DELETE /v1/conversations/{id}` in the API document.
pub(super) fn delete_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Forget a conversation's finished turns (with their events and journals)")
        .response_with::<200, Json<Forgotten>, _>(|r| r.description("What was forgotten"));
    answers(op, &[INVALID_STATE, UNAVAILABLE])
}

/// The 404 of a conversation that does not exist for the caller: unknown,
/// forgotten, or another key's (answered alike).
fn not_found(id: &str) -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        format!("no conversation with id {id:?} (it has no turns, or it was forgotten)"),
    )
}

/// A conversation as the policy sees it: owned by the key that made it.
pub(super) fn conversation(owner: &str) -> Resource<'_> {
    Resource::owned("conversation", Some(owner), None)
}

/// Whose conversation a request names: `?owner=KEY` — for a key the
/// policy lets read (or forget) every key's conversations — else the
/// caller's own. Conversations are per key: two keys' of one id are two.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Whose {
    #[serde(default)]
    pub owner: Option<String>,
}

/// The turns (jobs) of `owner`'s conversation `id` (`None`: the caller's),
/// oldest first, or a 404 naming it; another key's conversation is a 404
/// too, unless the key reads all.
pub(super) async fn turns_of(
    state: &AppState,
    caller: &Caller,
    owner: Option<&str>,
    id: &str,
) -> Result<Vec<Job>, ApiError> {
    check_id(id)?;
    let owner = owner.unwrap_or(caller.name());
    caller.authorize(Action::ReadConversation, &conversation(owner), || {
        not_found(id)
    })?;
    let jobs = jobs_of(state, owner, id).await?;
    if jobs.is_empty() {
        return Err(not_found(id));
    }
    Ok(jobs)
}

/// The jobs of `owner`'s conversation `id`, oldest first (at most 1,000,
/// the newest): what every reader of a conversation's turns starts from,
/// once it has asked the policy.
pub(super) async fn jobs_of(state: &AppState, owner: &str, id: &str) -> Result<Vec<Job>, ApiError> {
    let mut jobs = state
        .queue
        .list(JobFilter {
            conversation_id: Some(id.to_string()),
            conversation_owner: Some(owner.to_string()),
            limit: MAX_TURNS,
            ..Default::default()
        })
        .await?
        .jobs;
    jobs.reverse();
    Ok(jobs)
}

pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(ConversationPath { id }): Path<ConversationPath>,
    Query(whose): Query<Whose>,
) -> Result<Json<Conversation>, ApiError> {
    let jobs = turns_of(&state, &caller, whose.owner.as_deref(), &id).await?;
    let mut turns = Vec::with_capacity(jobs.len());
    for job in &jobs {
        turns.push(turn(job, super::job_trace::agents_used(&state, job).await?));
    }
    Ok(Json(Conversation {
        conversation_id: id,
        turns,
    }))
}

/// Forgets `owner`'s conversation `id` (the caller's, unless `?owner=`
/// names another key and the key may operate on every key's): its
/// finished turns and, once none is left, its row (the id may start
/// again). For a key that may not, it does not exist.
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(ConversationPath { id }): Path<ConversationPath>,
    Query(whose): Query<Whose>,
) -> Result<Json<Forgotten>, ApiError> {
    check_id(&id)?;
    let owner = whose.owner.as_deref().unwrap_or(caller.name());
    caller.authorize(Action::DeleteConversation, &conversation(owner), || {
        not_found(&id)
    })?;
    if !state.queue.has_conversation(Some(owner), &id).await? {
        // Without a row (a job of an older daemon) its turns say whether
        // it exists.
        turns_of(&state, &caller, Some(owner), &id).await?;
    }
    let (forgotten, left) = state.queue.forget_conversation(Some(owner), &id).await?;
    if left > 0 {
        return Err(ApiError::new(
            ErrorCode::InvalidState,
            format!(
                "conversation {id:?}: forgot {forgotten} finished turn(s); {left} job(s) are still queued or running: cancel them or wait, then DELETE again"
            ),
        ));
    }
    Ok(Json(Forgotten {
        conversation_id: id,
        forgotten_turns: forgotten,
    }))
}
