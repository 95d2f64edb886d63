//! Why a run or a step could not go on: [`KernelError`] (the model call
//! failed, with its turn and [`Phase`]), [`RunError`] (every reason a run
//! stops short, with whether a new attempt may succeed and its kind for
//! `error.type`) and [`StepError`] (a run error, or an interruption).

use crate::approval::{ParkedCall, ParkedKind};
use crate::budget::BudgetStop;
use crate::client::ClientError;
use crate::journal::JournalError;
use crate::model::ModelPluginError;
use crate::types::StepResult;

use super::history::HistoryPluginError;

/// Where in a turn a run failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    ModelCall,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Phase::ModelCall => "model call",
        })
    }
}

/// A run that could not go on.
#[derive(Debug, thiserror::Error)]
#[error("turn {turn}, {phase}: {source}")]
pub struct KernelError {
    pub turn: u32,
    pub phase: Phase,
    #[source]
    pub source: ClientError,
}

impl KernelError {
    pub fn is_retryable(&self) -> bool {
        self.source.is_retryable()
    }
}

/// Why a run could not finish.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Model(#[from] KernelError),
    /// A step could not be recorded (or a recorded one read): acting on it
    /// would break the promise that a new attempt resumes exactly.
    #[error("turn {turn}: {source}")]
    Journal {
        turn: u32,
        #[source]
        source: JournalError,
    },
    /// The run waits for a person: an `unsafe` call of an earlier attempt
    /// has an unknown outcome, or a call waits for approval.
    #[error("{0}")]
    Parked(Box<ParkedCall>),
    /// A nested run cannot go on (its pinned bundle content is gone).
    #[error("{0}")]
    Aborted(String),
    /// The job used up one of its budgets.
    #[error("{0}")]
    OverBudget(Box<BudgetStop>),
    /// The model plugin (a library) could not format the request or read
    /// the reply.
    #[error("turn {turn}: {source}")]
    ModelPlugin {
        turn: u32,
        #[source]
        source: ModelPluginError,
    },
    /// The history plugin (a library) could not choose the messages to send.
    #[error("turn {turn}: {source}")]
    HistoryPlugin {
        turn: u32,
        #[source]
        source: HistoryPluginError,
    },
}

impl RunError {
    pub fn is_retryable(&self) -> bool {
        match self {
            RunError::Model(err) => err.is_retryable(),
            RunError::Journal { .. } => true,
            RunError::ModelPlugin { source, .. } => source.retryable,
            RunError::HistoryPlugin { source, .. } => source.retryable,
            RunError::Parked(_) | RunError::Aborted(_) | RunError::OverBudget(_) => false,
        }
    }

    /// A low-cardinality kind, for `error.type`.
    pub fn kind(&self) -> String {
        match self {
            RunError::Model(err) => err.source.kind().to_string(),
            RunError::Journal { .. } => "journal".into(),
            RunError::ModelPlugin { .. } => "model_plugin".into(),
            RunError::HistoryPlugin { .. } => "history_plugin".into(),
            RunError::Parked(parked) => match parked.kind {
                ParkedKind::UnknownOutcome => "needs_attention".into(),
                ParkedKind::Approval => "awaiting_approval".into(),
                ParkedKind::CallerCall => "caller_call".into(),
            },
            RunError::Aborted(_) => "aborted".into(),
            RunError::OverBudget(_) => "budget_exceeded".into(),
        }
    }
}

/// Why a step did not complete.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("the step was interrupted (cancelled or out of time)")]
    Interrupted { partial: Option<StepResult> },
}

impl From<KernelError> for StepError {
    fn from(err: KernelError) -> Self {
        StepError::Run(RunError::Model(err))
    }
}
