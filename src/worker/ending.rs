//! What an attempt ends with: the slot's next lease, asked for with the
//! outcome (one write), and a run's failure as its outcome.

use tokio_util::sync::CancellationToken;

use super::WorkerPool;
use crate::journal::Parked;
use crate::kernel::RunFailure;
use crate::queue::{NextLease, Outcome};

impl WorkerPool {
    /// The lease a slot asks for with its job's outcome: one job, unless
    /// the pool is stopping.
    pub(super) fn next_lease(&self, shutdown: &CancellationToken) -> Option<NextLease> {
        (!shutdown.is_cancelled()).then(|| NextLease {
            worker: self.settings.worker_id.clone(),
            lease_for: self.settings.lease,
            n: 1,
            pin: Some(self.pinner()),
        })
    }
}

/// A run's failure as its job's outcome (the one translation): a run that
/// waits for a person parks the job (an unknown outcome for an operator, a
/// call for a decision); the rest fail, retryable when a new attempt may
/// succeed.
impl From<RunFailure> for Outcome {
    fn from(failure: RunFailure) -> Self {
        match failure.parked() {
            Some(Parked::Attention(pending)) => Outcome::NeedsAttention {
                error: pending.to_string(),
                pending_call: serde_json::to_value(pending).unwrap_or_default(),
            },
            Some(Parked::Approval(request)) => Outcome::AwaitingApproval {
                error: request.to_string(),
                request: Box::new(request.clone()),
            },
            None => Outcome::Failed {
                retryable: failure.is_retryable(),
                error: failure.to_string(),
            },
        }
    }
}
