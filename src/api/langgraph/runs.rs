//! Runs are jobs. A run on a thread is a job continuing the thread's
//! conversation; a stateless run (`/runs`) is a job of no conversation.
//! Every run is admitted as any submit is (`admission::admit`: the key's
//! scope and globs, its quotas, the bundle's budgets), its assistant is
//! its bundle, and what LangGraph's client sent beside the input (its
//! metadata, its settings) is kept with the job (`run_meta`) for the run's
//! view. This file reads a run request and makes the job; `run_routes.rs`
//! serves the routes.

use std::time::{Duration, SystemTime};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::super::AppState;
use super::super::admission::{Submission, admit};
use super::super::auth::Caller;
use super::super::chat_input::chat_of;
use super::super::error::{ApiError, ErrorCode};
use super::super::trace_context::CallerTrace;
use super::assistants::{self, Target};
use super::ids;
use super::stream_modes::Modes;
use crate::queue::{Job, JobId, JobState, NewJob};
use crate::types::TerminationReason;

/// The body of a run's create, wait or stream.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct RunRequest {
    /// The assistant: a bundle's name or LangGraph's id of it (the Agent
    /// Protocol's `agent_id`).
    #[serde(alias = "agent_id")]
    pub assistant_id: String,
    /// On `/runs`, `/runs/wait` and `/runs/stream`: the thread to run on,
    /// as `/threads/{thread_id}/runs…` would (the Agent Protocol's way).
    #[serde(default)]
    pub thread_id: Option<String>,
    /// `{"messages": […]}` (the last human message is the job's input) and
    /// any other keys, which become the job's variables.
    #[serde(default)]
    pub input: Option<Value>,
    /// The Agent Protocol's input: the messages, read as `input.messages`
    /// when there is no `input`.
    #[serde(default)]
    pub messages: Option<Vec<Value>>,
    /// `{"resume": …}` on a thread whose run is parked for a person
    /// (`interrupted`): the answer to its interrupt — `{"type": "approve"}`,
    /// `{"type": "edit", "edited_action": {"name", "args"}}`,
    /// `{"type": "reject", "message"?}`, `true`/`false`, or those keyed by
    /// the interrupt's id — and the parked run goes on.
    #[serde(default)]
    pub command: Option<Value>,
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// `configurable` values become the job's variables (LangGraph's own
    /// keys aside).
    #[serde(default)]
    pub config: Option<Value>,
    /// Values that become the job's variables.
    #[serde(default)]
    pub context: Option<Map<String, Value>>,
    /// What a run on a thread with a run queued or running does:
    /// `reject` (the default: a 409), `interrupt` (that run is cancelled,
    /// its steps kept), `rollback` (cancelled and deleted) or `enqueue`
    /// (this run waits until the runs before it end).
    #[serde(default)]
    #[schemars(extend("enum" = ["reject", "interrupt", "rollback", "enqueue", null]))]
    pub multitask_strategy: Option<String>,
    /// A URL the daemon POSTs the job's changes to (as a job's `webhook`).
    #[serde(default)]
    pub webhook: Option<String>,
    /// Start no earlier than this many seconds from now.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub after_seconds: Option<f64>,
    /// `reject` (the default: a run on a thread the key has not is a 404)
    /// or `create`.
    #[serde(default)]
    #[schemars(extend("enum" = ["reject", "create", null]))]
    pub if_not_exists: Option<String>,
    /// For a stateless run: `delete` (the default: the job is deleted once
    /// waited for) or `keep`.
    #[serde(default)]
    #[schemars(extend("enum" = ["delete", "keep", null]))]
    pub on_completion: Option<String>,
    /// Only `null` or empty: a bundle's approval rules park its calls.
    #[serde(default)]
    #[schemars(with = "Option<Vec<()>>", length(max = 0))]
    pub interrupt_before: Option<Value>,
    /// Only `null` or empty, as `interrupt_before`.
    #[serde(default)]
    #[schemars(with = "Option<Vec<()>>", length(max = 0))]
    pub interrupt_after: Option<Value>,
    /// Only `null`: a run starts from the thread's latest step.
    #[serde(default)]
    #[schemars(with = "Option<()>")]
    pub checkpoint: Option<Value>,
    /// Only `null`, as `checkpoint`.
    #[serde(default)]
    #[schemars(with = "Option<()>")]
    pub checkpoint_id: Option<String>,
    /// Taken and kept: `stream_mode`, `stream_subgraphs`, `durability`, …
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// Where a run stands, from its job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Queued.
    Pending,
    Running,
    /// Its job failed or died.
    Error,
    Success,
    /// Its job ran out of time.
    Timeout,
    /// Parked for a person, or cancelled.
    Interrupted,
}

impl RunStatus {
    pub fn of(job: &Job) -> Self {
        match job.state {
            JobState::Queued => Self::Pending,
            JobState::Running => Self::Running,
            JobState::Succeeded => Self::Success,
            JobState::Failed | JobState::Dead
                if job.termination_reason == Some(TerminationReason::Timeout) =>
            {
                Self::Timeout
            }
            JobState::Failed | JobState::Dead => Self::Error,
            JobState::Cancelled | JobState::NeedsAttention | JobState::AwaitingApproval => {
                Self::Interrupted
            }
        }
    }
}

/// A run as LangGraph's clients see it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Run {
    /// The job's id.
    pub run_id: String,
    /// The thread (conversation) it continues; `null` for a stateless run.
    pub thread_id: Option<String>,
    pub assistant_id: String,
    /// RFC 3339 UTC.
    pub created_at: String,
    pub updated_at: String,
    pub status: RunStatus,
    /// The metadata the client sent.
    pub metadata: Map<String, Value>,
    /// What the run was asked to do on a busy thread (`reject` unless it
    /// said otherwise).
    pub multitask_strategy: String,
    /// What the client sent beside: `input`, `config`, `context`, …
    pub kwargs: Map<String, Value>,
}

/// `job`'s run.
pub(super) fn view(job: &Job) -> Run {
    let meta = job.run_meta.as_ref();
    let field = |key: &str| meta.and_then(|m| m.get(key)).cloned();
    let object = |key: &str| match field(key) {
        Some(Value::Object(map)) => map,
        _ => Map::new(),
    };
    Run {
        run_id: job.id.to_string(),
        thread_id: job.conversation_id.clone(),
        // A custom assistant's runs name it; a bundle's, LangGraph's id.
        assistant_id: field("assistant_id")
            .and_then(|id| id.as_str().map(str::to_string))
            .unwrap_or_else(|| ids::assistant_id(&job.bundle)),
        created_at: job.created_at.clone(),
        updated_at: job.updated_at.clone(),
        status: RunStatus::of(job),
        metadata: object("metadata"),
        multitask_strategy: field("multitask_strategy")
            .and_then(|s| s.as_str().map(str::to_string))
            .unwrap_or_else(|| "reject".to_string()),
        kwargs: object("kwargs"),
    }
}

fn refused(field: &str, why: impl Into<String>) -> ApiError {
    ApiError::field(ErrorCode::InvalidRequest, field, why.into())
}

/// Whether a field holds something (not absent, `null`, `[]`, `{}`, `""`).
fn given(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) => false,
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(Value::String(s)) => !s.is_empty(),
        Some(_) => true,
    }
}

/// The command of a run on a thread that resumes its parked run, if given.
pub(super) fn command_of(request: &RunRequest) -> Option<&Value> {
    request.command.as_ref().filter(|c| given(Some(c)))
}

/// Refuses what a run request asks that the daemon does not do, by name.
fn refusals(request: &RunRequest) -> Result<(), ApiError> {
    if given(request.command.as_ref()) {
        return Err(refused(
            "command",
            "a stateless run has no interrupt to resume: send the command with a run on the thread whose run is parked (its status `interrupted`)",
        ));
    }
    for (field, value) in [
        ("interrupt_before", &request.interrupt_before),
        ("interrupt_after", &request.interrupt_after),
    ] {
        if given(value.as_ref()) {
            return Err(refused(
                field,
                "a run is not interrupted at nodes: a bundle parks a tool call for a person by its tool's `approval:` rule",
            ));
        }
    }
    if given(request.checkpoint.as_ref()) || request.checkpoint_id.is_some() {
        return Err(refused(
            "checkpoint_id",
            "a run starts from its thread's latest step: to start from an earlier one, fork its job at that turn (POST /v1/jobs/{id}/fork)",
        ));
    }
    Modes::of_value(request.rest.get("stream_mode"))?;
    cancelled_on_disconnect(request)?;
    multitask_of(request).map(|_| ())
}

/// What a run does on a thread whose run is queued or running
/// (`multitask_strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Multitask {
    /// Refused: a 409.
    Reject,
    /// That run is cancelled (its steps so far stay the thread's), then
    /// this one starts.
    Interrupt,
    /// That run is cancelled and deleted, then this one starts.
    Rollback,
    /// Queued behind that run: it starts once the thread's runs before it
    /// have ended (or parked on an interrupt).
    Enqueue,
}

/// A run on a thread: the thread, and where the run stands among its
/// turns.
#[derive(Debug, Clone, Copy)]
pub(super) struct OnThread<'a> {
    pub id: &'a str,
    /// The thread has no run yet: the run's input messages start it.
    pub first: bool,
    /// Sent with `enqueue` while a run of the thread is queued or running:
    /// it waits behind that run.
    pub after_turns: bool,
}

pub(super) fn multitask_of(request: &RunRequest) -> Result<Multitask, ApiError> {
    match request.multitask_strategy.as_deref() {
        None | Some("reject") => Ok(Multitask::Reject),
        Some("interrupt") => Ok(Multitask::Interrupt),
        Some("rollback") => Ok(Multitask::Rollback),
        Some("enqueue") => Ok(Multitask::Enqueue),
        Some(other) => Err(refused(
            "multitask_strategy",
            format!(
                "multitask_strategy {other:?} is not one of `reject`, `interrupt`, `rollback`, `enqueue`"
            ),
        )),
    }
}

/// Whether a streamed run is cancelled when its client goes
/// (`on_disconnect`: `continue`, the default, or `cancel`).
pub(super) fn cancelled_on_disconnect(request: &RunRequest) -> Result<bool, ApiError> {
    match request.rest.get("on_disconnect") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::String(mode)) if mode == "continue" => Ok(false),
        Some(Value::String(mode)) if mode == "cancel" => Ok(true),
        Some(other) => Err(refused(
            "on_disconnect",
            format!("on_disconnect {other} is not one of `continue`, `cancel`"),
        )),
    }
}

/// What a run request gives its job.
struct JobInput {
    /// The last human message's text.
    text: String,
    /// The chat, when there is more than that message.
    chat: Option<Vec<Value>>,
    /// The input's other keys, `config.configurable` and `context`.
    variables: Map<String, Value>,
}

/// The job's input text, its chat (for a thread's first run), and the
/// variables the input's other keys, `config.configurable` and `context`
/// give it.
fn input_of(request: &RunRequest) -> Result<JobInput, ApiError> {
    let given_messages = request
        .messages
        .as_ref()
        .map(|messages| Map::from_iter([("messages".to_string(), Value::Array(messages.clone()))]));
    let input = match (&request.input, &given_messages) {
        (Some(Value::Object(input)), _) => input,
        (None, Some(messages)) => messages,
        _ => {
            return Err(refused(
                "input",
                "a run needs `input` with `messages` holding a human message (or, as the Agent Protocol sends, `messages`)",
            ));
        }
    };
    let (text, chat) = match input.get("messages") {
        Some(Value::String(text)) if !text.is_empty() => (text.clone(), None),
        Some(Value::Array(messages)) => chat_of(messages, "input.messages")?,
        _ => {
            return Err(refused(
                "input.messages",
                "a run needs `input.messages`: a human message, or a list holding one",
            ));
        }
    };
    let mut variables: Map<String, Value> = input
        .iter()
        .filter(|(key, _)| key.as_str() != "messages")
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    let configurable = request.config.as_ref().and_then(|c| c.get("configurable"));
    variables.extend(ids::configured_variables(
        configurable,
        request.context.as_ref(),
    ));
    Ok(JobInput {
        text,
        chat,
        variables,
    })
}

/// When a run may start: `after_seconds` from now.
fn run_at(after: Option<f64>) -> Result<Option<SystemTime>, ApiError> {
    let Some(after) = after else {
        return Ok(None);
    };
    let delay = Duration::try_from_secs_f64(after).map_err(|_| {
        refused(
            "after_seconds",
            format!("after_seconds {after} is not a number of seconds from now: send 0 or more"),
        )
    })?;
    Ok(SystemTime::now().checked_add(delay))
}

/// What is kept with the job for its run's view.
fn run_meta(request: &RunRequest, assistant_id: &str) -> Value {
    let mut kwargs = request.rest.clone();
    for (key, value) in [
        ("input", &request.input),
        ("messages", &request.messages.clone().map(Value::Array)),
        ("config", &request.config),
        ("webhook", &request.webhook.clone().map(Value::String)),
    ] {
        if let Some(value) = value {
            kwargs.insert(key.to_string(), value.clone());
        }
    }
    if let Some(context) = &request.context {
        kwargs.insert("context".to_string(), Value::Object(context.clone()));
    }
    json!({
        "assistant_id": assistant_id,
        "metadata": request.metadata.clone().unwrap_or_default(),
        "multitask_strategy": request.multitask_strategy.as_deref().unwrap_or("reject"),
        "kwargs": kwargs,
    })
}

/// What a run request's assistant runs, once no field of it is refused.
async fn target_of(
    state: &AppState,
    caller: &Caller,
    request: &RunRequest,
) -> Result<Target, ApiError> {
    refusals(request)?;
    assistants::resolve(state, caller, &request.assistant_id).await
}

/// A run's variables: its assistant's, then its own over them.
fn variables_of(target: &Target, own: Map<String, Value>) -> Map<String, Value> {
    let mut variables = target.variables.clone();
    variables.extend(own);
    variables
}

/// What each fire of a cron gives its job: a run request read once, as
/// [`start`] reads it, for a schedule to repeat (`crons`).
pub(super) struct Template {
    pub bundle: String,
    /// The human message's text.
    pub input: String,
    pub variables: Map<String, Value>,
    /// Kept with each fire's job for its run's view.
    pub run_meta: Value,
}

/// A cron's run request as its fires' job; a 422 naming the field a cron
/// cannot repeat.
pub(super) async fn template(
    state: &AppState,
    caller: &Caller,
    request: &RunRequest,
) -> Result<Template, ApiError> {
    let target = target_of(state, caller, request).await?;
    let JobInput {
        text,
        chat,
        variables,
    } = input_of(request)?;
    let variables = variables_of(&target, variables);
    if chat.is_some() {
        return Err(refused(
            "input.messages",
            "a cron's input is one human message: each fire continues its thread (or starts alone) from it",
        ));
    }
    if request.after_seconds.is_some() {
        return Err(refused(
            "after_seconds",
            "a cron's runs start at its schedule's times",
        ));
    }
    let mut run_meta = run_meta(request, &target.assistant_id);
    // Every fire is a new human message: none may carry the id the client
    // gave the cron's (a thread's fires would merge into one by id).
    if let Some(messages) = run_meta["kwargs"]["input"]["messages"].as_array_mut() {
        for message in messages.iter_mut().filter_map(Value::as_object_mut) {
            message.remove("id");
        }
    }
    Ok(Template {
        bundle: target.bundle,
        input: text,
        variables,
        run_meta,
    })
}

/// Checks a run request as [`start`] does, without starting it (a batch
/// checks every run before it starts any).
pub(super) async fn checked(
    state: &AppState,
    caller: &Caller,
    request: &RunRequest,
) -> Result<(), ApiError> {
    target_of(state, caller, request).await?;
    input_of(request)?;
    run_at(request.after_seconds)?;
    Ok(())
}

/// Admits a run: on `thread` (the caller's conversation), or stateless; as job `id` when the caller picked it
/// (a stream listens before its job is queued). The job as queued.
pub(super) async fn start(
    state: &AppState,
    caller: &Caller,
    trace: &CallerTrace,
    request: &RunRequest,
    thread: Option<OnThread<'_>>,
    id: Option<JobId>,
) -> Result<Job, ApiError> {
    let target = target_of(state, caller, request).await?;
    let JobInput {
        text: input,
        chat,
        variables,
    } = input_of(request)?;
    let variables = variables_of(&target, variables);
    let metadata = request.metadata.clone().map(Value::Object);
    let job = NewJob {
        id,
        bundle: target.bundle.clone(),
        input,
        // A thread's later runs start from its earlier turns instead.
        messages: chat.filter(|_| thread.is_none_or(|t| t.first)),
        variables,
        conversation_id: thread.map(|t| t.id.to_string()),
        after_turns: thread.is_some_and(|t| t.after_turns),
        run_at: run_at(request.after_seconds)?,
        webhook: request.webhook.clone(),
        run_meta: Some(run_meta(request, &target.assistant_id)),
        trace: trace.or_metadata(metadata.as_ref()),
        ..Default::default()
    };
    let (job, _) = admit(state, caller, Submission::new(job, "assistant_id")).await?;
    Ok(job)
}
