//! Tools: the `Tool` seam every backend implements, the engine pipeline every
//! call goes through, and the backends (`process`, `grail`, `plugin`, `mcp`,
//! `http_agent`, `agent`).
//!
//! This module must not know about models or the queue; it receives a
//! `ToolCall` and returns a `ToolResult` with an error code the model can read.

pub mod agent;
mod cache;
mod coerce;
pub mod direct;
pub mod engine;
pub mod grail;
pub mod guardrails;
mod handling;
pub mod http_agent;
mod invoke;
pub mod mcp;
pub mod plugin;
pub mod policy;
pub mod process;
pub mod stand_in;

pub use engine::{PreparedCall, ToolEngine};
pub use handling::ToolPolicy;
pub use invoke::ToolOutcome;

use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::approval::ParkedCall;
use crate::events::EventSink;
use crate::journal::RunJournal;
use crate::types::{ToolCall, ToolSchema};

/// What a backend produced; the engine normalizes it to a JSON string.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolOutput {
    Json(Value),
    Text(String),
    Bytes(Vec<u8>),
    Null,
}

impl ToolOutput {
    /// The JSON string the model sees. Text that already is JSON is kept
    /// byte for byte so recorded transcripts replay exactly.
    pub fn into_json_string(self) -> String {
        match self {
            ToolOutput::Json(Value::String(s)) => Value::String(s).to_string(),
            ToolOutput::Json(value) => value.to_string(),
            ToolOutput::Text(text) => {
                if serde_json::from_str::<Value>(&text).is_ok() {
                    text
                } else {
                    Value::String(text).to_string()
                }
            }
            ToolOutput::Bytes(bytes) => match String::from_utf8(bytes) {
                Ok(text) => ToolOutput::Text(text).into_json_string(),
                Err(e) => {
                    let bytes = e.into_bytes();
                    serde_json::json!({"bytes_hex": crate::hex::hex(&bytes)}).to_string()
                }
            },
            ToolOutput::Null => "null".to_string(),
        }
    }
}

/// The message a caught panic carried (for tool errors and failed attempts).
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// What running a tool again does to the world, declared per tool in
/// `bundle.yaml` (`effect:`). It decides what a new attempt does with a call
/// that an interrupted attempt started but left without a recorded result.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// No side effect: run it again.
    ReadOnly,
    /// Safe to repeat with the same idempotency key: run it again with it.
    Idempotent,
    /// Never run again on its own: the job waits for an operator.
    #[default]
    Unsafe,
}

impl Effect {
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::ReadOnly => "read_only",
            Effect::Idempotent => "idempotent",
            Effect::Unsafe => "unsafe",
        }
    }
}

/// How a backend failed; decides retrying and the code the model sees.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ToolError {
    /// Worth trying again (a transient backend failure).
    #[error("{0}")]
    Retryable(String),
    /// The tool rejected its input; the model should change the arguments.
    #[error("{0}")]
    Validation(String),
    /// Anything else.
    #[error("{0}")]
    Failed(String),
    /// A nested run ended in a way no answer of this call mends: the whole
    /// job ends with it.
    #[error("{0}")]
    EndsJob(JobEnd),
}

/// How a nested run can end the whole job, however deep it is.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JobEnd {
    /// It waits for a person (an unsafe call of unknown outcome, or a call
    /// awaiting approval): the job parks.
    #[error("{0}")]
    Parked(Box<ParkedCall>),
    /// It used up one of the job's budgets: the job ends `budget_exceeded`.
    #[error("{0}")]
    OverBudget(Box<crate::budget::BudgetStop>),
    /// It cannot go on (the bundle content it is pinned to is gone): the job
    /// fails.
    #[error("{0}")]
    Aborted(String),
}

impl JobEnd {
    /// The tool engine's trace stage for it, and what the trace says.
    pub fn trace(&self) -> (&'static str, serde_json::Value) {
        match self {
            JobEnd::Parked(parked) => (
                "tool.invoke.parked",
                serde_json::json!({"pending_call": parked.call_id}),
            ),
            JobEnd::OverBudget(stop) => (
                "tool.invoke.over_budget",
                serde_json::json!({"budget": stop.budget}),
            ),
            JobEnd::Aborted(message) => {
                ("tool.invoke.abort", serde_json::json!({"message": message}))
            }
        }
    }
}

/// Where a call stands in its run: the daemon's own key for it (the turn
/// and its position in the model's reply; the model's call id is data), the
/// run's journal (a nested run keeps its own under the call, and the call's
/// idempotency key comes from it) and who runs nested agents.
#[derive(Clone, Copy, Default)]
pub struct CallPlace<'a> {
    pub turn: u32,
    /// 0-based, in the order of the reply's tool calls.
    pub position: usize,
    pub journal: Option<&'a RunJournal>,
    /// Runs the bundles of `agent` tools (absent outside the daemon).
    pub agents: Option<&'a dyn agent::AgentHost>,
    /// The job's budget, which a nested run shares.
    pub budget: Option<&'a crate::budget::Budget>,
}

/// What a tool receives besides its arguments.
pub struct ToolContext<'a> {
    /// The call being answered.
    pub call: &'a ToolCall,
    pub place: CallPlace<'a>,
    /// Fires when the job is cancelled or the run's deadline passes.
    pub cancel: CancellationToken,
    /// When the engine will give up on this attempt.
    pub deadline: Instant,
    /// The run's event sink, for tools that start nested runs.
    pub events: &'a EventSink,
}

impl ToolContext<'_> {
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// The stable key of this call, `{job}:{turn}:{position}`: the same on
    /// every attempt, so a backend can recognize a repetition.
    pub fn idempotency_key(&self) -> String {
        let CallPlace { turn, position, .. } = self.place;
        match self.place.journal {
            Some(journal) => journal.idempotency_key(turn, &position.to_string()),
            None => format!("{}:{turn}:{position}", self.events.context().run_id),
        }
    }
}

// Every backend's impl opens alike (`schema`, `kind`, `invoke`'s
// signature: agent.rs, grail/, http_agent.rs, mcp.rs, plugin.rs,
// process.rs), as an impl must; what each does is its own.
/// A callable tool, whatever its backend.
#[async_trait]
pub trait Tool: Send + Sync {
    fn schema(&self) -> &ToolSchema;

    /// The backend kind (`process`, `plugin`, ...), for listings and telemetry.
    fn kind(&self) -> &'static str;

    /// Whether the backend announced that this tool's definition changed
    /// (an MCP server's `list_changed`), so the bundle should be bound again.
    fn stale(&self) -> bool {
        false
    }

    async fn invoke(&self, arguments: Value, ctx: ToolContext<'_>)
    -> Result<ToolOutput, ToolError>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn outputs_normalize_to_json_strings() {
        assert_eq!(
            ToolOutput::Json(json!({"sum": 7})).into_json_string(),
            r#"{"sum":7}"#
        );
        assert_eq!(
            ToolOutput::Text(r#"{"sum": 7}"#.into()).into_json_string(),
            r#"{"sum": 7}"#
        );
        assert_eq!(
            ToolOutput::Text("plain".into()).into_json_string(),
            r#""plain""#
        );
        assert_eq!(
            ToolOutput::Bytes(vec![0xff, 0x00]).into_json_string(),
            r#"{"bytes_hex":"ff00"}"#
        );
        assert_eq!(ToolOutput::Null.into_json_string(), "null");
    }
}
