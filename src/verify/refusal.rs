//! Why a verify the daemon ran as a job gave no report ([`Refusal`]): the
//! worker records it in the job's journal before the job fails, and the
//! route that waits for the job answers it with the status it names. A
//! job's `error` is text for people; this is the typed half, so the route
//! never reads a status out of a message.

use serde::{Deserialize, Serialize};

use super::VerifyError;

/// The journal step (turn [`REFUSED_TURN`], the job's own scope) that holds
/// a verify job's [`Refusal`].
pub const REFUSED_STEP: &str = "verify.refused";
/// The turn the refusal is recorded at (a verify job has one).
pub const REFUSED_TURN: u32 = 1;

/// What was wrong, as the caller can act on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The reply script (`exchange`) is missing or does not fit the run:
    /// the caller sends another.
    Exchange,
    /// The bundle or its variables cannot be verified as sent.
    Invalid,
    /// The crash matrix took longer than a verify in the daemon may.
    TimedOut,
    /// The daemon could not do its part (its work directory, a task).
    Internal,
}

/// Why a verify gave no report: the reason and the message that says what
/// went wrong, where and what to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub reason: Reason,
    pub message: String,
}

impl Refusal {
    pub fn timed_out(message: String) -> Self {
        Self {
            reason: Reason::TimedOut,
            message,
        }
    }
}

impl From<&VerifyError> for Refusal {
    fn from(e: &VerifyError) -> Self {
        let reason = match e {
            VerifyError::NeedsExchange { .. } | VerifyError::Script(_) => Reason::Exchange,
            VerifyError::Invalid { .. } | VerifyError::Run { .. } => Reason::Invalid,
            VerifyError::Work { .. } | VerifyError::Task(_) => Reason::Internal,
        };
        Self {
            reason,
            message: e.to_string(),
        }
    }
}
