//! How a run ends without an answer, as one type for every kind of run (a
//! job's agent, a nested agent, a workflow stage, a group-chat agent), and
//! its one translation into the tool error of a call that started a nested
//! run.

use std::time::Duration;

use super::RunError;
use crate::approval::ParkedCall;
use crate::journal::JournalError;
use crate::tools::{JobEnd, ToolError};

/// Why a run gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum RunFailure {
    #[error("cancelled by request")]
    Cancelled,
    #[error("the run exceeded its deadline ({0:?}, limits.timeout)")]
    TimedOut(Duration),
    /// The run used its last turn and its last reply still called tools
    /// (`limits.on_max_turns: fail`, the default).
    #[error(
        "max_turns: the run used all {0} of its turns (limits.max_turns) and its last reply still called tools, so it has no final answer; raise `limits.max_turns` in the bundle, or set `limits.on_max_turns: succeed` to take the last reply as the answer"
    )]
    MaxTurns(u32),
    /// The bundle to run is not loaded, or its prompts do not render.
    #[error("{0}")]
    Bundle(String),
    /// The authorization policy refused the run: the job's key may not
    /// reach the bundle (a nested run, a workflow stage, a group-chat
    /// member).
    #[error("{0}")]
    Refused(String),
    /// The bundle content a resumed nested run is pinned to is gone: the
    /// job fails rather than run different content.
    #[error("{0}")]
    PinnedContentGone(String),
    /// The bundle's pin could not be read from the journal.
    #[error("{0}")]
    Journal(#[from] JournalError),
    #[error(transparent)]
    Run(#[from] RunError),
}

impl RunFailure {
    pub fn is_retryable(&self) -> bool {
        match self {
            RunFailure::Run(err) => err.is_retryable(),
            _ => false,
        }
    }

    /// Whether this ends the whole job however deep the run is nested: an
    /// unknown outcome (the job parks) or content that is gone (it fails).
    /// A caller that would otherwise carry on (a group chat's reply, a
    /// workflow review) passes it up instead.
    pub fn ends_job(&self) -> bool {
        match self {
            RunFailure::Run(RunError::OverBudget(stop)) => stop.bundle.is_none(),
            _ => matches!(
                self,
                RunFailure::PinnedContentGone(_)
                    | RunFailure::Run(RunError::Parked(_) | RunError::Aborted(_))
            ),
        }
    }

    /// Why the run waits for a person, if that is why it stopped.
    pub fn parked(&self) -> Option<&ParkedCall> {
        match self {
            RunFailure::Run(RunError::Parked(parked)) => Some(parked),
            _ => None,
        }
    }
}

/// How a nested run's end that ends the job ends the run that called it.
impl From<JobEnd> for RunError {
    fn from(end: JobEnd) -> Self {
        match end {
            JobEnd::Parked(parked) => RunError::Parked(parked),
            JobEnd::OverBudget(stop) => RunError::OverBudget(stop),
            JobEnd::Aborted(message) => RunError::Aborted(message),
        }
    }
}

/// A nested run's failure, for the call that started it: a run waiting for
/// a person parks the whole job, a used-up job budget ends it, content that
/// is gone fails it; the rest — a nested run's own bundle limits used up
/// among them — is the call's error, which the model can work around.
impl From<RunFailure> for ToolError {
    fn from(failure: RunFailure) -> Self {
        match failure {
            RunFailure::Run(RunError::Parked(parked)) => ToolError::EndsJob(JobEnd::Parked(parked)),
            RunFailure::Run(RunError::OverBudget(stop)) if stop.bundle.is_none() => {
                ToolError::EndsJob(JobEnd::OverBudget(stop))
            }
            RunFailure::PinnedContentGone(message)
            | RunFailure::Run(RunError::Aborted(message)) => {
                ToolError::EndsJob(JobEnd::Aborted(message))
            }
            failure if failure.is_retryable() => ToolError::Retryable(failure.to_string()),
            failure => ToolError::Failed(failure.to_string()),
        }
    }
}
