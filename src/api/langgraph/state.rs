//! A thread's state, one checkpoint per durable step: each job of the
//! thread, oldest first, is its input, each recorded reply and each
//! recorded tool result (`messages::steps_of`), and the state at a
//! checkpoint is every message up to it, what runs next, and where the
//! step came from. Checkpoint ids are `<job>:<k>` (the job's k-th step, 0
//! its input): the same on every read, as the journal they come from never
//! changes. A thread's state is read, never written: it is its journals.

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::super::AppState;
use super::super::conversations::jobs_of;
use super::super::error::ApiError;
use super::ids;
use super::messages::{self, Step, StepKind};
use crate::events::{Event, EventEnvelope};
use crate::queue::{Job, JobId};

/// The most events of a job read for its steps' times.
const MAX_EVENTS: usize = 10_000;

/// One checkpoint: a durable step of a job of the thread.
#[derive(Debug, Clone)]
pub(super) struct Checkpoint {
    pub job: String,
    pub bundle: String,
    /// Its place among its job's steps (0: the input).
    pub k: usize,
    pub step: Step,
    /// When it was recorded (RFC 3339).
    pub created_at: String,
}

impl Checkpoint {
    pub fn id(&self) -> String {
        format!("{}:{}", self.job, self.k)
    }
}

/// The checkpoints of `owner`'s thread `id`, oldest first (none before its
/// first job).
pub(super) async fn checkpoints(
    state: &AppState,
    owner: &str,
    id: &str,
) -> Result<Vec<Checkpoint>, ApiError> {
    let jobs = jobs_of(state, owner, id).await?;
    let mut all = Vec::new();
    for job in &jobs {
        let journal = state.queue.journal(&job.id).await?;
        let times = step_times(state, job).await?;
        for (k, step) in messages::steps_of(job, &journal).into_iter().enumerate() {
            let created_at = time_of(&step, &times).unwrap_or_else(|| match step.kind {
                StepKind::Input => job.created_at.clone(),
                _ => job.updated_at.clone(),
            });
            all.push(Checkpoint {
                job: job.id.to_string(),
                bundle: job.bundle.clone(),
                k,
                step,
                created_at,
            });
        }
    }
    Ok(all)
}

/// The messages of `owner`'s thread `id` before its job `before` (every
/// earlier job's steps, as its checkpoints hold them; the thread's all
/// when `before` is not its job), read from their journals alone.
pub(super) async fn messages_before(
    state: &AppState,
    owner: &str,
    id: &str,
    before: &JobId,
) -> Result<Vec<Value>, ApiError> {
    let mut messages = Vec::new();
    for job in jobs_of(state, owner, id).await? {
        if job.id == *before {
            break;
        }
        let journal = state.queue.journal(&job.id).await?;
        messages.extend(
            messages::steps_of(&job, &journal)
                .into_iter()
                .map(|s| s.message),
        );
    }
    Ok(messages)
}

/// When each reply and result of `job`'s own run was recorded: its
/// events' times, by turn (and call id for a result).
struct StepTimes {
    replies: Vec<(u32, String)>,
    results: Vec<(u32, String, String)>,
}

async fn step_times(state: &AppState, job: &Job) -> Result<StepTimes, ApiError> {
    let events = state.queue.events_after(&job.id, 0, MAX_EVENTS).await?;
    let mut times = StepTimes {
        replies: Vec::new(),
        results: Vec::new(),
    };
    for stored in events {
        let Ok(envelope) = serde_json::from_str::<EventEnvelope>(&stored.event_json) else {
            continue;
        };
        if envelope.parent.is_some() {
            continue;
        }
        match envelope.event {
            Event::ModelResponse { turn, .. } => times.replies.push((turn, envelope.timestamp)),
            Event::ToolResult { turn, call_id, .. } => {
                times.results.push((turn, call_id, envelope.timestamp));
            }
            _ => {}
        }
    }
    Ok(times)
}

/// When `step` was recorded, from its event: a reply's by its turn, a
/// result's by its turn and call id.
fn time_of(step: &Step, times: &StepTimes) -> Option<String> {
    match step.kind {
        StepKind::Reply { turn, .. } => times
            .replies
            .iter()
            .rev()
            .find(|(t, _)| *t == turn)
            .map(|(_, at)| at.clone()),
        StepKind::Result { turn, .. } => {
            let call = step.message["tool_call_id"].as_str()?;
            times
                .results
                .iter()
                .rev()
                .find(|(t, id, _)| *t == turn && id == call)
                .map(|(_, _, at)| at.clone())
        }
        StepKind::Input | StepKind::Answer => None,
    }
}

/// A checkpoint's address, as LangGraph's clients send and read it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct CheckpointRef {
    pub thread_id: String,
    /// Always empty: a thread has no subgraph namespaces.
    pub checkpoint_ns: String,
    /// `<job>:<k>`; `null` for the state of a thread with no step yet.
    pub checkpoint_id: Option<String>,
    pub checkpoint_map: Option<Map<String, Value>>,
}

impl CheckpointRef {
    fn of(thread: &str, id: Option<String>) -> Self {
        Self {
            thread_id: thread.to_string(),
            checkpoint_ns: String::new(),
            checkpoint_id: id,
            checkpoint_map: None,
        }
    }
}

/// A thread's state at one checkpoint.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ThreadState {
    /// `{"messages": […]}`: every message up to the checkpoint (`{}` for a
    /// thread with no step yet).
    pub values: Value,
    /// What runs next: `model`, `tools`, or nothing once the job answered.
    pub next: Vec<&'static str>,
    pub checkpoint: CheckpointRef,
    /// `source` (`input` or `loop`), `step`, `writes` (the node and the
    /// message it wrote), `run_id` (the job), `thread_id`, `graph_id` and
    /// `assistant_id` (its bundle).
    pub metadata: Map<String, Value>,
    pub created_at: Option<String>,
    pub parent_checkpoint: Option<CheckpointRef>,
    /// Always empty here: a parked approval is the thread's status.
    pub tasks: Vec<Value>,
    pub interrupts: Vec<Value>,
}

/// The state of a thread with no step yet.
pub(super) fn empty(thread: &str) -> ThreadState {
    ThreadState {
        values: json!({}),
        next: Vec::new(),
        checkpoint: CheckpointRef::of(thread, None),
        metadata: Map::new(),
        created_at: None,
        parent_checkpoint: None,
        tasks: Vec::new(),
        interrupts: Vec::new(),
    }
}

/// The values after every checkpoint of `all`.
pub(super) fn values(all: &[Checkpoint]) -> Value {
    if all.is_empty() {
        return json!({});
    }
    let messages: Vec<&Value> = all.iter().map(|c| &c.step.message).collect();
    json!({ "messages": messages })
}

/// The state at `all[at]`.
pub(super) fn at(thread: &str, all: &[Checkpoint], at: usize) -> Option<ThreadState> {
    let here = all.get(at)?;
    let (source, node, next) = match here.step.kind {
        StepKind::Input => ("input", "__start__", vec!["model"]),
        StepKind::Reply { calls, .. } => (
            "loop",
            "model",
            if calls > 0 { vec!["tools"] } else { vec![] },
        ),
        StepKind::Result { last, .. } => {
            ("loop", "tools", vec![if last { "model" } else { "tools" }])
        }
        StepKind::Answer => ("loop", "model", vec![]),
    };
    let metadata = json!({
        "source": source,
        "step": at as i64 - 1,
        "writes": { node: { "messages": [here.step.message] } },
        "run_id": here.job,
        "thread_id": thread,
        "graph_id": here.bundle,
        "assistant_id": ids::assistant_id(&here.bundle),
    });
    Some(ThreadState {
        values: values(&all[..=at]),
        next,
        checkpoint: CheckpointRef::of(thread, Some(here.id())),
        metadata: metadata.as_object().cloned().unwrap_or_default(),
        created_at: Some(here.created_at.clone()),
        parent_checkpoint: at
            .checked_sub(1)
            .map(|before| CheckpointRef::of(thread, Some(all[before].id()))),
        tasks: Vec::new(),
        interrupts: Vec::new(),
    })
}
