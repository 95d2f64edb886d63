//! Typed events: the kernel events of a run (`daemon` holds the daemon's own
//! happenings, which belong to no run), the envelope that places an event in a run, and the `Observer`
//! seam through which every consumer (event log, telemetry, plugins, the CLI)
//! receives them.
//!
//! This module must not know who consumes events; it only defines the shapes
//! and the fan-out rules.

pub mod answer;
pub mod daemon;
pub mod legacy;
pub mod live;
mod observer;

pub use observer::{
    CompositeObserver, EventSink, LiveOut, NullObserver, Observer, ObserverError, TokenDelta,
};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::types::{TerminationReason, TokenUsage};

/// Where an event happened: which run of which bundle.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunContext {
    /// The job id in the daemon, or a fresh id for `structured-agents run`.
    pub run_id: String,
    pub bundle: String,
    pub bundle_version: String,
    /// Set for a child run started by an `agent` tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentRun>,
}

impl RunContext {
    /// The context of the run nested in this one under `key` (an agent
    /// call's `{turn}:{position}`, a workflow stage's or a group-chat
    /// reply's key): run id `{run}/{key}`, one level deeper. `call_id` is
    /// what the parent's events call the step (the model's call id).
    pub fn nested(&self, key: &str, call_id: &str, bundle: &str) -> RunContext {
        RunContext {
            run_id: format!("{}/{key}", self.run_id),
            bundle: bundle.to_string(),
            bundle_version: String::new(),
            parent: Some(ParentRun {
                run_id: self.run_id.clone(),
                call_id: call_id.to_string(),
                depth: self.parent.as_ref().map_or(0, |p| p.depth) + 1,
            }),
        }
    }
}

/// The run and tool call that started a nested run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParentRun {
    pub run_id: String,
    pub call_id: String,
    pub depth: u32,
}

/// An event placed in its run: the unit that observers receive and the job
/// event log stores. Read back, an event of an earlier layout is upgraded
/// ([`legacy`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Value")]
pub struct EventEnvelope {
    pub run_id: String,
    pub bundle: String,
    pub bundle_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentRun>,
    /// Gap-free per run, starting at 1.
    pub seq: u64,
    /// RFC 3339 UTC with milliseconds.
    pub timestamp: String,
    #[serde(flatten)]
    pub event: Event,
}

/// [`EventEnvelope`] as stored, read after [`legacy::upgrade`].
#[derive(Deserialize)]
struct StoredEnvelope {
    run_id: String,
    bundle: String,
    bundle_version: String,
    #[serde(default)]
    parent: Option<ParentRun>,
    seq: u64,
    timestamp: String,
    #[serde(flatten)]
    event: Event,
}

impl TryFrom<Value> for EventEnvelope {
    type Error = serde_json::Error;

    fn try_from(mut value: Value) -> Result<Self, Self::Error> {
        legacy::upgrade(&mut value);
        let stored: StoredEnvelope = serde_json::from_value(value)?;
        Ok(EventEnvelope {
            run_id: stored.run_id,
            bundle: stored.bundle,
            bundle_version: stored.bundle_version,
            parent: stored.parent,
            seq: stored.seq,
            timestamp: stored.timestamp,
            event: stored.event,
        })
    }
}

/// Everything that can happen. Kernel events keep the names and fields of the
/// original Python kernel; extra fields are additive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum Event {
    KernelStart {
        max_turns: u32,
        tools_count: usize,
        initial_messages_count: usize,
    },
    ModelRequest {
        turn: u32,
        messages_count: usize,
        tools_count: usize,
        model: String,
        /// Sampling parameters sent with the request (temperature, max_tokens, ...).
        #[serde(default, skip_serializing_if = "Value::is_null")]
        parameters: Value,
        /// The messages as sent; consumers decide whether content may leave the process.
        #[serde(default, skip_serializing_if = "Value::is_null")]
        messages: Value,
    },
    ModelResponse {
        turn: u32,
        duration_ms: u64,
        /// The reply's text as the server sent it, tool-call text included
        /// (the Python kernel's `content`).
        content: Option<String>,
        /// Tool calls the server returned in its `tool_calls` field (the
        /// Python kernel's `tool_calls_count`); calls written in the text
        /// are in `parsed_tool_calls_count`.
        tool_calls_count: usize,
        usage: TokenUsage,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        response_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        finish_reason: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        response_model: Option<String>,
        /// What the call cost by the daemon's price table (with a budget).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost: Option<f64>,
        /// What is left of `content` once the model plugin took the tool
        /// calls out of it: the answer the run records and shows.
        #[serde(default)]
        parsed_content: Option<String>,
        /// The tool calls the run goes on with: the native ones and those
        /// the model plugin parsed from the text.
        #[serde(default)]
        parsed_tool_calls_count: usize,
    },
    ToolCall {
        turn: u32,
        tool_name: String,
        call_id: String,
        arguments: Value,
    },
    ToolResult {
        turn: u32,
        tool_name: String,
        call_id: String,
        is_error: bool,
        duration_ms: u64,
        output_preview: String,
        /// The error code (`tool_error`, `bad_args`, ...) when `is_error`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_type: Option<String>,
    },
    TurnComplete {
        turn: u32,
        tool_calls_count: usize,
        tool_results_count: usize,
        errors_count: usize,
    },
    KernelEnd {
        turn_count: u32,
        termination_reason: TerminationReason,
        total_duration_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// A low-cardinality kind of the error (`timeout`, `http_5xx`, ...).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_type: Option<String>,
    },
    /// A new attempt of a job picks up where an earlier one stopped: the
    /// journal's steps are replayed (no model or tool call) and the run
    /// continues at `from_turn`.
    Resumed {
        from_turn: u32,
        replayed_steps: usize,
    },
    /// A call waits for a person's decision; the job parks in
    /// `awaiting_approval`.
    ApprovalRequested {
        turn: u32,
        tool_name: String,
        call_id: String,
        arguments: Value,
        /// The digest a decision must name (`sha256:…`).
        digest: String,
    },
    /// A person (or the approval timeout) decided; the job runs again.
    ApprovalDecided {
        turn: u32,
        tool_name: String,
        call_id: String,
        /// `approve`, `deny` or `edit`.
        decision: String,
        /// Who decided: an API key's name, `local` or `timeout`.
        by: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// For `edit`: the arguments the call runs with instead of the
        /// model's (its `ApprovalRequested` event has those).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        arguments: Option<Value>,
    },
    /// The job used up a budget; its run ends (`budget_exceeded`).
    BudgetExceeded {
        turn: u32,
        budget: String,
        limit: String,
        spent: String,
    },
    /// A model reply whose tool-call text could not be parsed.
    ParseError { turn: u32, detail: String },
    /// A trace event from the tool engine pipeline (`cache.hit`, ...).
    ToolTrace {
        turn: u32,
        call_id: String,
        tool_name: String,
        stage: String,
        #[serde(default, skip_serializing_if = "Value::is_null")]
        detail: Value,
    },
    /// A workflow job starts, or resumes from its checkpoint, at `stage`.
    WorkflowStart {
        workflow: String,
        stage: String,
        iteration: u32,
        resumed: bool,
    },
    /// A workflow stage ran (or its attempt cap passed it through, `ran`
    /// false) and produced `event`, which the table maps to `next`.
    StageEnd {
        step: u32,
        stage: String,
        /// `agent`, `command` or `score`.
        kind: String,
        event: String,
        /// The event's original name (`impl_done`, `pr_pass`; the stage's
        /// `event_prefix`), as `lol impl` reported it.
        #[serde(default)]
        original_event: String,
        next: String,
        iteration: u32,
        reason: String,
        ran: bool,
        /// When the stage started (RFC 3339), so its span has true times.
        started_at: String,
        duration_ms: u64,
    },
    /// The workflow reached `finish` or `fatal`.
    WorkflowEnd {
        /// `finish` or `fatal`.
        outcome: String,
        stage: String,
        iteration: u32,
        reason: String,
    },
    /// The daemon's job lifecycle: `running`, then the attempt's result as
    /// the queue recorded it.
    JobState {
        state: JobStatus,
        attempt: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// How long the attempt ran, on its final event.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        duration_ms: Option<u64>,
        /// What the job has spent so far, on an attempt's final event (the
        /// queue keeps it for the bundle's daily budget).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        spent: Option<crate::budget::Spent>,
        /// What its nested agent runs spent, per bundle they ran (counted in
        /// `spent` too): each such bundle's daily budget counts its part.
        #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
        spent_by_bundle: std::collections::BTreeMap<String, crate::budget::Spent>,
        /// Why the job ended, on the final event of a job that finished
        /// (the queue decides it: the job's own run's reason, `cancelled`
        /// or `error`); absent while the job can still run.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        termination_reason: Option<TerminationReason>,
    },
}

impl Event {
    /// The `type` tag, for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::KernelStart { .. } => "KernelStart",
            Event::ModelRequest { .. } => "ModelRequest",
            Event::ModelResponse { .. } => "ModelResponse",
            Event::ToolCall { .. } => "ToolCall",
            Event::ToolResult { .. } => "ToolResult",
            Event::TurnComplete { .. } => "TurnComplete",
            Event::KernelEnd { .. } => "KernelEnd",
            Event::Resumed { .. } => "Resumed",
            Event::ApprovalRequested { .. } => "ApprovalRequested",
            Event::ApprovalDecided { .. } => "ApprovalDecided",
            Event::BudgetExceeded { .. } => "BudgetExceeded",
            Event::ParseError { .. } => "ParseError",
            Event::ToolTrace { .. } => "ToolTrace",
            Event::JobState { .. } => "JobState",
            Event::WorkflowStart { .. } => "WorkflowStart",
            Event::StageEnd { .. } => "StageEnd",
            Event::WorkflowEnd { .. } => "WorkflowEnd",
        }
    }
}

/// Where an attempt of a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    Running,
    Succeeded,
    Failed,
    /// Failed, and queued again after a backoff.
    Retrying,
    /// Failed with no attempts left.
    Dead,
    Cancelled,
    /// Put back in the queue by a draining daemon.
    Released,
    /// Parked: an operator must resolve an `unsafe` call of unknown outcome.
    NeedsAttention,
    /// Parked: a call waits for a person's decision.
    AwaitingApproval,
}

impl JobStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Retrying => "retrying",
            Self::Dead => "dead",
            Self::Cancelled => "cancelled",
            Self::Released => "released",
            Self::NeedsAttention => "needs_attention",
            Self::AwaitingApproval => "awaiting_approval",
        }
    }
}

impl std::fmt::Display for JobStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Characters of a tool's output that its `ToolResult` event and its
/// `tool_call_ended` progress frame carry (one cap, so the live drawing of
/// a call and the stored event that replaces it show the same text).
pub const OUTPUT_PREVIEW: usize = 200;

/// The first `max` characters of `text`, marked when cut.
pub fn preview(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((cut, _)) => format!("{}…", &text[..cut]),
    }
}

/// Now, as RFC 3339 UTC with milliseconds.
pub fn timestamp_now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// An envelope of run `run_id` with `event`'s fields (its `type` and the
/// rest), for tests of what reads events.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) fn test_envelope(run_id: &str, event: serde_json::Value) -> EventEnvelope {
    let mut envelope = serde_json::json!({"run_id": run_id, "bundle": "b", "bundle_version": "1", "seq": 1, "timestamp": ""});
    for (k, v) in event.as_object().unwrap() {
        envelope[k] = v.clone();
    }
    serde_json::from_value(envelope).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_is_flat_and_tagged() {
        let env = EventEnvelope {
            run_id: "j1".into(),
            bundle: "b".into(),
            bundle_version: "1".into(),
            parent: None,
            seq: 3,
            timestamp: "2026-01-01T00:00:00.000Z".into(),
            event: Event::TurnComplete {
                turn: 1,
                tool_calls_count: 2,
                tool_results_count: 2,
                errors_count: 1,
            },
        };
        let v = serde_json::to_value(&env).unwrap();
        assert_eq!(v["type"], "TurnComplete");
        assert_eq!(v["seq"], 3);
        assert_eq!(v["errors_count"], 1);
        let back: EventEnvelope = serde_json::from_value(v).unwrap();
        assert_eq!(back, env);
    }

    /// An event log written before `parsed_content` existed reads in
    /// today's layout (`watch`, `submit --follow`, the queue's rules).
    #[test]
    fn a_stored_model_response_of_the_earlier_layout_reads_in_todays() {
        let stored = serde_json::json!({"run_id": "j1", "bundle": "b", "bundle_version": "1",
            "seq": 2, "timestamp": "2026-01-01T00:00:00.000Z", "type": "ModelResponse",
            "turn": 1, "duration_ms": 5, "content": "Adding.", "tool_calls_count": 1,
            "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
            "raw_content": "Adding.<tool_call>…", "native_tool_calls_count": 0});
        let envelope: EventEnvelope = serde_json::from_value(stored).unwrap();
        let Event::ModelResponse {
            content,
            tool_calls_count,
            parsed_content,
            parsed_tool_calls_count,
            ..
        } = envelope.event
        else {
            panic!("{envelope:?}");
        };
        assert_eq!(content.as_deref(), Some("Adding.<tool_call>…"));
        assert_eq!(parsed_content.as_deref(), Some("Adding."));
        assert_eq!((tool_calls_count, parsed_tool_calls_count), (0, 1));
    }

    #[test]
    fn preview_cuts_on_char_boundary() {
        assert_eq!(preview("héllo", 2), "hé…");
        assert_eq!(preview("hi", 5), "hi");
    }
}
