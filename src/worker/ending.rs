//! What an attempt ends with: the slot's next lease, asked for with the
//! outcome (one write), a run's failure as its outcome, and an answer that
//! does not hold to the job's answer format as a failure.

use tokio_util::sync::CancellationToken;

use super::WorkerPool;
use crate::approval::ParkedKind;
use crate::kernel::RunFailure;
use crate::queue::{LeasedJob, NextLease, Outcome};

impl WorkerPool {
    /// The lease a slot asks for with its job's outcome: one job, unless
    /// the pool is stopping.
    /// [`Self::next_lease`] for an attempt that holds a slot (`chain`);
    /// none for one that gave its slot back (an eval job).
    pub(super) fn chained(&self, chain: bool, shutdown: &CancellationToken) -> Option<NextLease> {
        chain.then(|| self.next_lease(shutdown)).flatten()
    }

    pub(super) fn next_lease(&self, shutdown: &CancellationToken) -> Option<NextLease> {
        self.share_fairly();
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
        // The queue words a park's message: it knows the job's id.
        match failure.parked() {
            // A caller's calls wait for the client, resolved by its outputs.
            Some(parked)
                if matches!(
                    parked.kind,
                    ParkedKind::UnknownOutcome | ParkedKind::CallerCall
                ) =>
            {
                Outcome::NeedsAttention {
                    error: parked.to_string(),
                    pending_call: Box::new(parked.clone()),
                }
            }
            Some(parked) => Outcome::AwaitingApproval {
                error: parked.to_string(),
                request: Box::new(parked.clone()),
            },
            None => Outcome::Failed {
                retryable: failure.is_retryable(),
                error: failure.to_string(),
            },
        }
    }
}

/// The outcome of a run of `job`, held to the job's answer format: a
/// success whose answer does not match it fails the job, naming the format
/// and where the answer fails it. Not retryable: a new attempt resumes
/// from the journal and would read the same answer.
pub(super) fn held_to_format(job: &LeasedJob, outcome: Outcome) -> Outcome {
    let (Some(format), Outcome::Succeeded(result)) = (&job.controls.answer_format, &outcome) else {
        return outcome;
    };
    let answer = result["output"].as_str().unwrap_or_default();
    match format.check(answer) {
        Ok(()) => outcome,
        Err(mismatch) => Outcome::Failed {
            // Every view of the failure names the job already.
            error: mismatch.to_string(),
            retryable: false,
        },
    }
}
