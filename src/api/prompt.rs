//! `GET /v1/jobs/{id}/turns/{turn}/prompt`: what one turn of a job's run
//! sent the model — the conversation and the tools — rebuilt from what is
//! stored, never a second copy: the messages from the step journal
//! ([`RunJournal::conversation_before`], grown as the kernel grows its
//! history) windowed by the bundle's `limits.history` as the kernel does
//! (`Bundle::history_sent`), the tools from the bundle version the job is
//! pinned to (resolved as the worker resolves it) narrowed by the job's
//! controls as the runner does. The console's per-turn prompt view reads
//! it.

use std::sync::Arc;

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
use crate::bundle::HistorySent;
use crate::journal::RunJournal;
use crate::queue::{Job, JobId};
use crate::registry::{BundleIdentity, LoadedBundle};
use crate::types::{Message, ToolSchema};

/// What a turn sent the model.
#[derive(Debug, Serialize, JsonSchema)]
pub struct TurnPrompt {
    pub job_id: JobId,
    pub turn: u32,
    /// The messages the turn sent, in order: of the conversation then (the
    /// rendered input, each earlier turn's reply and its calls' results:
    /// `role`, `content`, `tool_calls`, `tool_call_id`, `name`), those the
    /// bundle's `limits.history` kept — with `sliding_window`, the first
    /// and the newest, `limits.max_history_messages` in all. With a history
    /// plugin, whose choice is not recorded, the whole conversation.
    #[schemars(with = "Vec<Value>")]
    pub messages: Vec<Message>,
    /// The messages of the conversation then, before `limits.history`
    /// chose: more than `messages` when a window left some out.
    pub conversation_messages: usize,
    /// How `messages` were chosen: `sliding_window`, `keep_all`, `plugin`
    /// (the whole conversation shown: the plugin's choice is not
    /// recorded), or `unknown` (the bundle is not loaded any more).
    pub history: &'static str,
    /// The tools offered: those of the bundle version the job is pinned
    /// to, narrowed to the job's `controls.tools` when it names some, then
    /// the caller's own tools (`controls.caller_tools`). A router's reach
    /// of the agent directory, bound per run, is not among them.
    pub tools: Vec<ToolSchema>,
    /// The version those tools are of (its `digest`).
    pub bundle_digest: Option<String>,
    /// Whether that is the version the job ran (`false`: the pinned one
    /// cannot be had any more, and these are the current version's).
    pub pinned: bool,
}

// Shaped as `job_journal.rs`'s `journal_doc` and handler, as every route's doc
// function and extractors are: each states its own summary and answer.
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
    let job = caller.stored_job(&state, Action::ReadJob, &id).await?;
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
    let conversation = journal
        .conversation_before(turn)
        .map_err(|e| {
            ApiError::new(
                ErrorCode::Internal,
                format!("the journal of job {id} does not read: {e}"),
            )
        })?
        .ok_or_else(unknown)?;
    let (loaded, pinned) = version_of(&state, &job).await;
    let conversation_messages = conversation.len();
    let sent = match &loaded {
        Some(b) => b.bundle.history_sent(conversation),
        None => HistorySent {
            messages: conversation,
            how: "unknown",
        },
    };
    Ok(Json(TurnPrompt {
        job_id: id,
        turn,
        messages: sent.messages,
        conversation_messages,
        history: sent.how,
        tools: offered(loaded.as_deref(), &job),
        bundle_digest: loaded.as_ref().map(|b| b.identity.to_string()),
        pinned,
    }))
}

/// The tools `job`'s run offered from `loaded`: narrowed by its
/// `controls.tools` (in the bundle's order), then the caller's tools.
fn offered(loaded: Option<&LoadedBundle>, job: &Job) -> Vec<ToolSchema> {
    let bundle = loaded
        .map(|b| b.tools.schemas().to_vec())
        .unwrap_or_default();
    let narrowed = match &job.controls.tools {
        Some(names) => bundle
            .into_iter()
            .filter(|tool| names.contains(&tool.name))
            .collect(),
        None => bundle,
    };
    narrowed
        .into_iter()
        .chain(job.controls.caller_tools.iter().cloned())
        .collect()
}

/// The version `job` is pinned to, else the current one (none when the
/// bundle is not loaded at all), and whether it is the pinned one.
async fn version_of(state: &AppState, job: &Job) -> (Option<Arc<LoadedBundle>>, bool) {
    let pin = job.bundle_digest.as_deref().map(BundleIdentity::recorded);
    match state.registry.resolve(&job.bundle, pin.as_ref()).await {
        Ok(loaded) => (Some(loaded), pin.is_some()),
        Err(_) => (
            state.registry.snapshot().bundle(&job.bundle).cloned(),
            false,
        ),
    }
}
