//! `GET /v1/jobs/{id}/turns/{turn}/prompt`: what one turn of a job's run
//! sent the model — the conversation and the tools — rebuilt from what is
//! stored, never a second copy: the messages from the step journal
//! ([`RunJournal::conversation_before`], grown as the kernel grows its
//! history), the tools from the bundle version the job is pinned to
//! (resolved as the worker resolves it). The console's per-turn prompt
//! view reads it.

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::AppState;
use super::auth::Caller;
use super::body::Path;
use super::error::{ApiError, ErrorCode};
use crate::access::policy::Action;
use crate::journal::RunJournal;
use crate::queue::{Job, JobId};
use crate::registry::BundleIdentity;
use crate::types::{Message, ToolSchema};

/// What a turn sent the model.
#[derive(Debug, Serialize, JsonSchema)]
pub struct TurnPrompt {
    pub job_id: JobId,
    pub turn: u32,
    /// The conversation when the turn asked, in order: the rendered input
    /// (system and user), then each earlier turn's reply and its calls'
    /// results (`role`, `content`, `tool_calls`, `tool_call_id`, `name`).
    /// A bundle with `history: sliding_window` sent the first of these
    /// and the newest, `limits.max_history_messages` in all.
    #[schemars(with = "Vec<Value>")]
    pub messages: Vec<Message>,
    /// The tools offered: those of the bundle version the job is pinned to
    /// (its controls or a router may have narrowed or widened them).
    pub tools: Vec<ToolSchema>,
    /// The version those tools are of (its `digest`).
    pub bundle_digest: Option<String>,
    /// Whether that is the version the job ran (`false`: the pinned one
    /// cannot be had any more, and these are the current version's).
    pub pinned: bool,
}

/// `GET /v1/jobs/{id}/turns/{turn}/prompt` in the API document.
pub(super) fn prompt_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    op.summary(
        "What a turn of the job sent the model: the messages and the tools, from the journal",
    )
    .response_with::<200, Json<TurnPrompt>, _>(|r| r.description("The turn's prompt"))
}

/// `GET /v1/jobs/{id}/turns/{turn}/prompt`: turn `turn`'s messages and tools.
pub async fn prompt(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, turn)): Path<(String, String)>,
) -> Result<Json<TurnPrompt>, ApiError> {
    let id = JobId::from(id);
    let job = caller.job(Action::ReadJob, &id, state.queue.get(&id).await?)?;
    let unknown = || {
        ApiError::new(
            ErrorCode::NotFound,
            format!(
                "job {id} has no recorded turn {turn:?}: a turn is a number from 1 to the last one its run asked the model (see GET /v1/jobs/{id}/journal)"
            ),
        )
    };
    let turn: u32 = turn.parse().ok().filter(|&t| t >= 1).ok_or_else(unknown)?;
    let journal = RunJournal::reading(id.as_str(), state.queue.journal(&id).await?);
    // Asked: answered (its reply is recorded), or being asked now by a run
    // that has not ended (the turn after the last complete one).
    let answered = journal.recorded_reply(turn).ok().flatten().is_some();
    if !answered && (job.state.is_terminal() || journal.resume_turn() != turn) {
        return Err(unknown());
    }
    let messages = journal
        .conversation_before(turn)
        .map_err(|e| {
            ApiError::new(
                ErrorCode::Internal,
                format!("the journal of job {id} does not read: {e}"),
            )
        })?
        .ok_or_else(unknown)?;
    let (tools, bundle_digest, pinned) = tools_of(&state, &job).await;
    Ok(Json(TurnPrompt {
        job_id: id,
        turn,
        messages,
        tools,
        bundle_digest,
        pinned,
    }))
}

/// The tools of the version `job` is pinned to, else of the current one
/// (none when the bundle is not loaded at all).
async fn tools_of(state: &AppState, job: &Job) -> (Vec<ToolSchema>, Option<String>, bool) {
    let pin = job.bundle_digest.as_deref().map(BundleIdentity::recorded);
    let (loaded, pinned) = match state.registry.resolve(&job.bundle, pin.as_ref()).await {
        Ok(loaded) => (Some(loaded), pin.is_some()),
        Err(_) => (
            state.registry.snapshot().bundle(&job.bundle).cloned(),
            false,
        ),
    };
    match loaded {
        Some(b) => (
            b.tools.schemas().to_vec(),
            Some(b.identity.to_string()),
            pinned,
        ),
        None => (Vec::new(), None, false),
    }
}
