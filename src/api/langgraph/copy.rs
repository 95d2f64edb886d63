//! `POST /threads/{thread_id}/copy`: a new thread of the key holding what
//! the thread's ended runs left — its metadata, and its ended runs under
//! new ids with their events and journals (`queue::threads::copy`), so the
//! copy's state and history are the thread's as they stood.

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;

use super::super::AppState;
use super::super::auth::Caller;
use super::super::body::Path;
use super::super::conversations::conversation;
use super::super::document::answers;
use super::super::error::{ApiError, ErrorCode};
use super::threads::{Thread, not_found, view};
use crate::access::policy::Action;
use crate::queue::{MAX_COPIED_RUNS, ThreadCopy};

/// `POST /threads/{thread_id}/copy` in the API document.
pub(super) fn copy_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary(
            "Copy a thread: a new thread of this key with the thread's metadata and ended runs",
        )
        .description(
            "The copy's runs are the thread's ended runs under new ids, with their events and \
             journals: its state and history are the thread's as those runs left them. A run \
             queued, running or parked is not copied. The copied runs spent nothing (a key's \
             daily budget counts a run once). A copy is one write: a thread of more than 1,000 \
             ended runs is not copied (409).",
        )
        .response_with::<200, Json<Thread>, _>(|r| r.description("The new thread"));
    answers(
        op,
        &[
            (404, "The key has no thread of that id"),
            (
                409,
                "The thread has more ended runs than one copy takes, named",
            ),
        ],
    )
}

/// `POST /threads/{thread_id}/copy`.
pub async fn copy(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Thread>, ApiError> {
    // The copy reads the thread and makes the new one: the key must be
    // let read and write its conversations. A thread it does not have is
    // the copy's own answer (one read, in its write).
    let owner = caller.name();
    for action in [Action::ReadConversation, Action::WriteConversation] {
        caller.authorize(action, &conversation(owner), || not_found(&id))?;
    }
    let to = uuid::Uuid::new_v4().to_string();
    match state
        .queue
        .copy_thread(owner, &id, &to, MAX_COPIED_RUNS)
        .await?
    {
        ThreadCopy::Copied(copy) => Ok(Json(view(&state, owner, copy).await?)),
        ThreadCopy::Missing => Err(not_found(&id)),
        ThreadCopy::TooLong(runs) => Err(ApiError::new(
            ErrorCode::InvalidState,
            format!(
                "thread {id:?} has {runs} ended runs and one copy takes at most {MAX_COPIED_RUNS}: \
                 delete old runs (DELETE /threads/{id}/runs/{{run_id}}) or start a new thread \
                 from its state (GET /threads/{id}/state); nothing was copied"
            ),
        )),
    }
}
