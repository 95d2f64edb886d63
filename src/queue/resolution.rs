//! An operator's resolution of a parked job and what it writes, free of
//! any database: the call it answers, the journal entries of a caller's
//! outputs, the error a `fail` records and the result a `skip` supplies.
//! `decisions` applies it inside a transaction.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::*;
use crate::approval::{ParkedCall, ParkedKind};
use crate::journal::RecordedResult;

/// An operator's answer for a `needs_attention` job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Resolution {
    /// Run the pending call again (the operator knows it is safe).
    Retry,
    /// Do not run it; the model sees `output` as its result.
    Skip {
        output: String,
        #[serde(default)]
        is_error: bool,
    },
    /// End the job as failed.
    Fail {
        #[serde(default)]
        reason: Option<String>,
    },
    /// The outputs of the caller's calls the job is parked on (a
    /// `caller_call` park), one per call, each journaled as its call's
    /// result: what a client's `function_call_output` items (or `tool`
    /// messages) send. Every call of the park is answered, no other.
    CallerOutputs { outputs: Vec<CallerOutput> },
}

/// The client's output of one call of its own tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CallerOutput {
    pub call_id: String,
    pub output: String,
}

/// The call a job is parked on (`None`: parked as a poison pill, on no
/// call), or why the job cannot be resolved this way.
pub(crate) fn parked_call(
    job: &Job,
    resolution: &Resolution,
) -> Result<Option<ParkedCall>, QueueError> {
    if job.state != JobState::NeedsAttention {
        return Err(QueueError::NotParked {
            job: job.id.clone(),
            state: job.state,
        });
    }
    match job.pending_call.clone() {
        Some(pending) => Ok(Some(pending)),
        None => match resolution {
            Resolution::Skip { .. } => Err(QueueError::NoCallToSkip(job.id.clone())),
            _ => Ok(None),
        },
    }
}

/// The journal entries of a client's `outputs` for the caller calls the
/// job is parked on (`pending`): one result per call, or why they are not
/// the answer it waits for.
pub(crate) fn caller_results(
    job: &Job,
    pending: Option<&ParkedCall>,
    outputs: &[CallerOutput],
) -> Result<Vec<JournalEntry>, QueueError> {
    let refused = |problem: String, expected: String| QueueError::CallerOutputs {
        job: job.id.clone(),
        problem,
        expected,
    };
    let Some(pending) = pending.filter(|p| p.kind == ParkedKind::CallerCall) else {
        return Err(refused(
            "waits for no output of a caller's tool".into(),
            "none".into(),
        ));
    };
    let expected = pending
        .caller_calls
        .iter()
        .map(|c| c.call_id.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let unknown: Vec<&str> = outputs
        .iter()
        .map(|o| o.call_id.as_str())
        .filter(|id| !pending.caller_calls.iter().any(|c| c.call_id == *id))
        .collect();
    if !unknown.is_empty() {
        return Err(refused(
            format!("waits for no call {}", unknown.join(", ")),
            expected,
        ));
    }
    let mut entries = Vec::with_capacity(pending.caller_calls.len());
    for call in &pending.caller_calls {
        let mut answered = outputs.iter().filter(|o| o.call_id == call.call_id);
        let (Some(output), None) = (answered.next(), answered.next()) else {
            return Err(refused(
                format!("needs exactly one output of call {}", call.call_id),
                expected,
            ));
        };
        let at = ParkedCall {
            position: Some(call.position),
            call_id: call.call_id.clone(),
            tool: call.tool.clone(),
            ..pending.clone()
        };
        entries.push(JournalEntry {
            scope: pending.scope.clone(),
            turn: pending.turn,
            step: JournalEntry::call_steps(&at).1,
            body: Resolution::skipped_result(&at, &output.output, false),
        });
    }
    Ok(entries)
}

impl Resolution {
    /// The error a `fail` records.
    pub(crate) fn failure(reason: &Option<String>, pending: Option<&ParkedCall>) -> String {
        reason.clone().unwrap_or_else(|| match pending {
            Some(pending) => format!(
                "an operator failed the job at the unresolved call {} of tool `{}`",
                pending.call_id, pending.tool
            ),
            None => "an operator failed the job after its worker died repeatedly".into(),
        })
    }

    /// The journal body of the result a `skip` supplies, as the kernel
    /// records a tool result.
    pub(crate) fn skipped_result(pending: &ParkedCall, output: &str, is_error: bool) -> String {
        let recorded = RecordedResult {
            result: crate::types::ToolResult {
                call_id: pending.call_id.clone(),
                name: pending.tool.clone(),
                output: output.to_string(),
                is_error,
            },
            error_code: is_error.then(|| "tool_error".to_string()),
        };
        serde_json::to_string(&recorded).unwrap_or_default()
    }
}
