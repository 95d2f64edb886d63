//! How an attempt ends: its outcome recorded with the slot's next lease
//! (one write), or on shutdown its job given back; and a run's failure as
//! its outcome.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::WorkerPool;
use super::event_log::EventLogObserver;
use crate::events::{Event, EventSink, JobStatus, Observer};
use crate::journal::Parked;
use crate::kernel::RunFailure;
use crate::queue::{Lease, NextLease, Outcome};

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

    /// Records the outcome. The queue decides the final state and stamps the
    /// final JobState event in the same transaction (after the events still
    /// held by the log); only a recorded event reaches the other observers.
    pub(super) async fn finish(
        &self,
        lease: &Lease,
        outcome: Outcome,
        end: End<'_>,
    ) -> Option<Lease> {
        let job = &lease.job;
        let final_event = end.sink.stamp(Event::JobState {
            state: JobStatus::Failed,
            attempt: lease.attempt,
            error: None,
            duration_ms: Some(end.started.elapsed().as_millis() as u64),
            spent: end.spent,
            spent_by_bundle: end.spent_by_bundle,
        });
        let asked = end.next.is_some();
        match end.log.finish(outcome, final_event, end.next).await {
            Ok((finished, mut next)) => {
                tracing::info!(job_id = %job.id, attempt = lease.attempt, outcome = ?finished.reply, "job finished");
                if asked {
                    self.health.report("lease", true);
                }
                if let (Some(others), Some(event)) = (end.others, &finished.final_event) {
                    let _ = others.on_event(event).await;
                }
                next.pop()
            }
            Err(err) => {
                tracing::error!(job_id = %job.id, attempt = lease.attempt, error = %err, "cannot record job outcome; the lease will expire and the job resumes from its journal");
                None
            }
        }
    }
}

/// How an attempt ends: where its final event goes, and the lease its slot
/// asks for with the outcome (none when the pool is stopping).
pub(super) struct End<'a> {
    pub(super) sink: &'a EventSink,
    pub(super) log: &'a EventLogObserver,
    pub(super) others: Option<&'a Arc<dyn Observer>>,
    pub(super) started: std::time::Instant,
    pub(super) next: Option<NextLease>,
    /// What the job has spent, for its final event.
    pub(super) spent: Option<crate::budget::Spent>,
    /// What its nested agent runs spent, per bundle.
    pub(super) spent_by_bundle: std::collections::BTreeMap<String, crate::budget::Spent>,
}

/// Shutdown: the job goes back to the queue; its next attempt resumes from
/// the journal and continues the event log.
pub(super) async fn release(
    lease: &Lease,
    sink: &EventSink,
    log: &EventLogObserver,
    others: &Arc<dyn Observer>,
    started: std::time::Instant,
) {
    let final_event = sink.stamp(Event::JobState {
        state: JobStatus::Released,
        attempt: lease.attempt,
        error: None,
        duration_ms: Some(started.elapsed().as_millis() as u64),
        spent: None,
        spent_by_bundle: Default::default(),
    });
    match log.release(final_event).await {
        Ok(finished) => {
            if let Some(event) = finished.final_event {
                let _ = others.on_event(&event).await;
            }
        }
        Err(err) => {
            tracing::error!(job_id = %lease.job.id, error = %err, "cannot release job")
        }
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
