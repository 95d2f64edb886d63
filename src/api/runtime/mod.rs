//! The runtime API under `/api`, for the clients of the multi-agent runtime
//! this daemon absorbed: the agent directory, queries answered by a router
//! bundle that calls agents as tools, group chats, conversations, and each
//! local bundle reachable as a remote agent. Every request is a job of the
//! queue; this module only translates the runtime's message envelopes and
//! stream frames to and from jobs.

mod agents;
mod conversations;
mod group;
mod query;
mod stream;

use aide::axum::ApiRouter;
use aide::axum::routing::{get_with, post_with};
use axum::response::IntoResponse;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Value, json};

use super::AppState;
use super::admission::{Submission, admit};
use super::auth::Caller;
use super::document::QUOTA;
use super::error::{ApiError, ErrorCode};
use super::feed::job_feed;
use super::feed::wait_finished;
use super::trace_context::CallerTrace;
use super::with;
use crate::queue::{Controls, Job, JobId, NewJob};
use crate::registry::LoadedBundle;

/// Who answers a query, in envelopes.
const RUNTIME: &str = "runtime";
/// Who answers a group chat, in envelopes.
const GROUP_RUNTIME: &str = "agent-runtime";
/// The job variable that names the asking user: a variable, not a control,
/// since a bundle's templates may render it (the conversation view reads it
/// too).
const USER_VARIABLE: &str = "user_id";

pub(super) fn routes() -> ApiRouter<AppState> {
    use crate::access::policy::Action::{ReadBundle, ReadConversation, SubmitJob};
    ApiRouter::new()
        .api_route(
            "/agents",
            with(ReadBundle, get_with(agents::list, agents::list_doc)),
        )
        .api_route(
            "/agents/{id}/message",
            with(SubmitJob, post_with(agents::message, agents::message_doc)),
        )
        .api_route(
            "/query",
            with(SubmitJob, post_with(query::query, query::query_doc)),
        )
        .api_route(
            "/group-chat",
            with(
                SubmitJob,
                post_with(group::group_chat, group::group_chat_doc),
            ),
        )
        .api_route(
            "/conversations/{id}",
            with(
                ReadConversation,
                get_with(conversations::get, conversations::get_doc),
            ),
        )
}

/// The statuses of a request answered by a job the caller waits for,
/// besides its extractors' and its own 404, 422 and 503: the job's
/// admission and its outcome.
const WAITED_JOB: [(u16, &str); 2] = [
    QUOTA,
    (
        500,
        "The job ended without an answer (code `job_failed`; the message names the job and its \
         error)",
    ),
];

/// A 503 of a request answered by a job: it is parked, or the queue
/// cannot take it.
const PARKED: &str = "the job is parked for a person's decision (code `job_awaiting_approval`) \
     or an operator (`job_needs_attention`), the message naming the job and what answers it; or \
     the queue cannot take the request now";

/// The job a runtime request asks for.
struct RunSubmission<'a> {
    bundle: &'a str,
    input: String,
    variables: serde_json::Map<String, Value>,
    /// The daemon's controls over the run (a query's `max_agents`, `verbose`).
    controls: Controls,
    /// A group chat's plan, which makes the job one.
    plan: Option<crate::group_chat::Plan>,
    /// Bundles the job runs as agents (a group chat's local participants).
    also_runs: Vec<String>,
    /// The caller's trace context (its `traceparent` header).
    trace: CallerTrace,
}

/// What a runtime request gets back from its job.
enum Answer {
    /// The runtime's SSE frames (the client asked for a stream).
    Streamed(axum::response::Response),
    /// The job that succeeded, and its answer.
    Answered(Box<Job>, String),
}

/// How a runtime request is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stream {
    /// One reply once the job has succeeded.
    No,
    /// The runtime's SSE frames; with `functions`, also a frame for each
    /// tool call of the run (the CLI's `ƒ(x)` lines), which the original
    /// runtime's clients do not expect unasked.
    Frames { functions: bool },
}

impl Stream {
    pub(super) fn of(stream: bool, functions: bool) -> Self {
        if stream {
            Stream::Frames { functions }
        } else {
            Stream::No
        }
    }
}

/// Queues a runtime request's job of `bundle` in `conversation` and answers
/// with its frames or, once it has succeeded, its answer (a job that ended
/// otherwise is a `job_failed` error naming it; one parked for a decision or
/// an operator a 503 `job_awaiting_approval` / `job_needs_attention`). A
/// stream listens before the job can start (the job's id is picked here), so
/// its first tokens are not missed.
async fn run(
    state: &AppState,
    caller: &Caller,
    submission: RunSubmission<'_>,
    conversation: &str,
    stream: Stream,
) -> Result<Answer, ApiError> {
    let RunSubmission {
        bundle,
        input,
        variables,
        controls,
        plan,
        also_runs,
        trace,
    } = submission;
    let id = JobId::new();
    let feed = match stream {
        Stream::Frames { .. } => {
            let permit = state.streams.acquire(caller.name())?;
            Some(job_feed(state.clone(), id.clone(), 0, true, permit))
        }
        Stream::No => None,
    };
    let started = std::time::Instant::now();
    let job = NewJob {
        id: Some(id),
        bundle: bundle.to_string(),
        input,
        variables,
        controls,
        conversation_id: Some(conversation.to_string()),
        trace: trace.or_body(None, None),
        ..Default::default()
    };
    // The runtime hands over a group chat's plan, which it checked; the
    // bundle is the configured one.
    let submission = Submission {
        plan,
        also_runs,
        ..Submission::new(job, "query")
    };
    let (job, _) = admit(state, caller, submission).await?;
    if let Some(feed) = feed {
        return Ok(Answer::Streamed(
            stream::frames(state.clone(), job, feed, started, stream).into_response(),
        ));
    }
    let job = wait_finished(state, &job.id).await?;
    let answer = job.answer_or_error()?.to_string();
    Ok(Answer::Answered(Box::new(job), answer))
}

fn default_user() -> String {
    "user".into()
}

/// A runtime job's variables: who asks (`user_id`), under whom its
/// conversation is listed.
fn user_variables(user: &str) -> serde_json::Map<String, Value> {
    let mut variables = serde_json::Map::new();
    variables.insert(USER_VARIABLE.into(), json!(user));
    variables
}

/// The message envelope of remote agents: who said what to whom, in which
/// conversation.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "MessageEnvelope")]
pub(super) struct Envelope {
    pub message_id: String,
    pub conversation_id: String,
    pub sender_id: String,
    pub recipient_id: String,
    pub content: String,
    /// RFC 3339 UTC with milliseconds.
    pub timestamp: String,
    #[serde(rename = "type")]
    pub kind: EnvelopeType,
}

/// What an envelope carries: the runtime's replies are always text.
#[derive(Debug, Serialize, JsonSchema)]
pub(super) enum EnvelopeType {
    Text,
}

impl Envelope {
    /// A reply of the runtime: a fresh `messageId`, sent now.
    fn reply(conversation: &str, sender: &str, recipient: &str, content: &str) -> Self {
        Self {
            message_id: uuid::Uuid::new_v4().to_string(),
            conversation_id: conversation.to_string(),
            sender_id: sender.to_string(),
            recipient_id: recipient.to_string(),
            content: content.to_string(),
            timestamp: now(),
            kind: EnvelopeType::Text,
        }
    }
}

fn now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// The bundle that `[runtime].<key>` names, or a 503 saying how to fix it.
fn configured_bundle(
    state: &AppState,
    key: &str,
    name: &str,
) -> Result<std::sync::Arc<LoadedBundle>, ApiError> {
    state.registry.snapshot().bundle(name).cloned().ok_or_else(|| {
        ApiError::new(
            ErrorCode::Unavailable,
            format!(
                "the runtime's {key} bundle {name:?} is not loaded: drop a bundle named {name:?} into the bundles directory or set `[runtime] {key}` to a loaded bundle (`structured-agents bundles` lists them)"
            ),
        )
    })
}

/// A 422 naming `field` unless `text` has something in it.
fn non_blank(field: &str, text: &str) -> Result<(), ApiError> {
    if text.trim().is_empty() {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            field,
            format!("`{field}` is empty: send the text to ask"),
        ));
    }
    Ok(())
}

/// The conversation a request continues, or a new one.
fn conversation_of(requested: Option<String>) -> Result<String, ApiError> {
    match requested {
        Some(id) => {
            super::conversations::check_id(&id)?;
            Ok(id)
        }
        None => Ok(format!("conv-{}", uuid::Uuid::new_v4())),
    }
}
