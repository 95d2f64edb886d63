//! `POST /threads/prune`: several of the key's threads deleted at once,
//! each as `DELETE /threads/{id}` deletes one (with its runs, once they
//! have all ended). LangGraph's `keep_latest` (old checkpoints dropped, the
//! latest state kept) has no meaning here: a thread's state is rebuilt
//! from all its runs' journals, so dropping its older runs would change
//! its latest state; it is refused by name.

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::super::AppState;
use super::super::auth::Caller;
use super::super::body::JsonBody;
use super::super::conversations::conversation;
use super::super::document::answers;
use super::super::error::{ApiError, ErrorCode};
use crate::access::policy::Action;
use crate::queue::ThreadDeletion;

/// The most threads one prune names.
const MAX_THREADS: usize = 1000;

/// The body of `POST /threads/prune`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct PruneRequest {
    /// 1 to 1000 of the key's threads.
    #[schemars(length(min = 1, max = MAX_THREADS))]
    pub thread_ids: Vec<String>,
    /// Only `delete` (the default): each thread deleted with its runs.
    #[serde(default)]
    #[schemars(extend("enum" = ["delete", null]))]
    pub strategy: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct Pruned {
    /// How many of the threads were deleted: the key's, with every run
    /// ended (a thread with a run queued, running or parked is kept, as
    /// are ids the key has no thread of).
    pub pruned_count: usize,
}

/// `POST /threads/prune` in the API document.
pub(super) fn prune_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Delete several of the key's threads with their runs")
        .response_with::<200, Json<Pruned>, _>(|r| r.description("How many were deleted"));
    answers(
        op,
        &[(
            422,
            "A field is invalid, or `strategy` is `keep_latest` (a thread's state is all its runs)",
        )],
    )
}

/// `POST /threads/prune`.
pub async fn prune(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(request): JsonBody<PruneRequest>,
) -> Result<Json<Pruned>, ApiError> {
    match request.strategy.as_deref() {
        None | Some("delete") => {}
        Some(other) => {
            return Err(ApiError::field(
                ErrorCode::InvalidRequest,
                "strategy",
                format!(
                    "strategy {other:?} is not served: a thread's state is rebuilt from all its runs, so a prune deletes whole threads (`delete`)"
                ),
            ));
        }
    }
    if !(1..=MAX_THREADS).contains(&request.thread_ids.len()) {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "thread_ids",
            format!("name 1 to {MAX_THREADS} threads"),
        ));
    }
    let owner = caller.name();
    caller.authorize(Action::DeleteConversation, &conversation(owner), || {
        ApiError::new(ErrorCode::NotFound, "no such threads")
    })?;
    let mut pruned_count = 0;
    for id in &request.thread_ids {
        if let ThreadDeletion::Deleted(_) = state.queue.delete_thread(owner, id).await? {
            pruned_count += 1;
        }
    }
    Ok(Json(Pruned { pruned_count }))
}
