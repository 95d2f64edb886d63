//! One attempt of one job, from its lease to its recorded end. The attempt
//! owns what the pool used to juggle by hand: its event sink (the attempt's
//! log first, then the job's other observers), its write path
//! ([`AttemptLog`]: journal steps with the held events, then the end), one
//! cancellation tree (the pool's `abandon` → the run's token, which the
//! heartbeat also cancels when a cancel is requested or the lease is lost),
//! and one way to build its end ([`Attempt::end`], [`Attempt::release`]).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::WorkerPool;
use super::attempt_log::AttemptLog;
use crate::budget::Budget;
use crate::events::daemon::{DaemonEvent, StaleClaim};
use crate::events::live::{ProgressKind, WaitFor};
use crate::events::{
    CompositeObserver, Event, EventSink, JobStatus, NullObserver, Observer, RunContext,
};
use crate::journal::RunJournal;
use crate::queue::{CompleteReply, Finished, HeartbeatReply, Lease, LeasedJob, NextLease, Outcome};
use crate::registry::LoadedBundle;
use crate::runner::RunScope;
use crate::tools::panic_message;

/// One attempt of one job.
pub(super) struct Attempt {
    lease: Lease,
    log: Arc<AttemptLog>,
    sink: EventSink,
    /// The job's observers besides its log (metrics, spans, plugins); none
    /// for an attempt that never ran.
    others: Option<Arc<dyn Observer>>,
    started: Instant,
}

/// How a run ended, as far as the attempt is concerned.
pub(super) enum Ran {
    /// It ended: its outcome is to be recorded, with what the job spent.
    Ended {
        outcome: Outcome,
        budget: Option<Budget>,
    },
    /// A newer attempt took the job over: this one records nothing.
    LeaseLost,
    /// The pool's drain timeout passed: the job goes back to the queue.
    Abandoned,
}

impl Attempt {
    /// An attempt that runs `loaded`: its `Running` state is announced.
    pub(super) async fn begin(pool: &WorkerPool, lease: Lease, loaded: &LoadedBundle) -> Attempt {
        let others: Arc<dyn Observer> = Arc::new(CompositeObserver::new(
            pool.observers.observers(loaded, &lease.job),
        ));
        let context = RunContext {
            run_id: lease.job.id.to_string(),
            bundle: loaded.name().to_string(),
            bundle_version: loaded.version().to_string(),
            parent: None,
        };
        let attempt = Attempt::with_observers(pool, lease, context, Some(others));
        attempt
            .sink
            .emit(Event::JobState {
                state: JobStatus::Running,
                attempt: attempt.lease.attempt,
                error: None,
                duration_ms: None,
                spent: None,
                spent_by_bundle: Default::default(),
                termination_reason: None,
            })
            .await;
        attempt
    }

    /// An attempt that cannot run (its bundle is not loaded): it only ends.
    pub(super) fn without_run(pool: &WorkerPool, lease: Lease) -> Attempt {
        let job = &lease.job;
        let context = RunContext {
            run_id: job.id.to_string(),
            bundle: job.bundle.clone(),
            bundle_version: job.bundle_version.clone().unwrap_or_default(),
            parent: None,
        };
        Attempt::with_observers(pool, lease, context, None)
    }

    fn with_observers(
        pool: &WorkerPool,
        lease: Lease,
        context: RunContext,
        others: Option<Arc<dyn Observer>>,
    ) -> Attempt {
        let log = Arc::new(AttemptLog::new(
            pool.queue.clone(),
            lease.job.id.clone(),
            lease.attempt,
        ));
        // An attempt that never runs emits nothing before its end, which
        // goes to the log directly.
        let observer: Arc<dyn Observer> = match &others {
            Some(others) => Arc::new(CompositeObserver::new(vec![
                log.clone() as Arc<dyn Observer>,
                others.clone(),
            ])),
            None => Arc::new(NullObserver),
        };
        Attempt {
            sink: EventSink::new(context, lease.next_seq, observer),
            lease,
            log,
            others,
            started: Instant::now(),
        }
    }

    pub(super) fn job(&self) -> &LeasedJob {
        &self.lease.job
    }

    /// Which attempt of its job this is (1-based).
    pub(super) fn number(&self) -> u32 {
        self.lease.attempt
    }

    /// Runs the job under the attempt's cancellation tree, keeping its lease
    /// alive. A panic anywhere in the run (model plugin, client, template,
    /// tool glue) ends the attempt as a failure instead of killing the task
    /// and stranding the job with a live heartbeat.
    pub(super) async fn run(
        &mut self,
        pool: &WorkerPool,
        loaded: &LoadedBundle,
        abandon: &CancellationToken,
    ) -> Ran {
        let scope = RunScope {
            sink: self.sink.child(self.sink.context().clone()),
            journal: RunJournal::new(
                self.lease.job.id.as_str(),
                std::mem::take(&mut self.lease.journal),
                self.log.clone(),
            ),
            // The drain timeout cancels every run through its child.
            cancel: abandon.child_token(),
            budget: Some(pool.budget(loaded, &self.lease.job)),
            // Whatever the job reaches beyond its bundle, it reaches as the
            // key that submitted it, as the ring has it now.
            reach: pool
                .registry
                .snapshot()
                .keys
                .reach_of(self.lease.job.owner.as_deref()),
        };
        let heartbeat = Heartbeat::spawn(pool, &self.lease, scope.cancel.clone());
        let result = AssertUnwindSafe(pool.run_kind(loaded, &self.lease.job, &scope))
            .catch_unwind()
            .await;
        heartbeat.handle.abort();
        if heartbeat.lost.is_cancelled() {
            return Ran::LeaseLost;
        }
        if abandon.is_cancelled() {
            return Ran::Abandoned;
        }
        let outcome = result.unwrap_or_else(|panic| Outcome::Failed {
            error: format!(
                "job {}: the run panicked: {} (a bug in a model plugin, client or tool; the attempt was stopped)",
                self.lease.job.id,
                panic_message(panic.as_ref())
            ),
            retryable: false,
        });
        Ran::Ended {
            outcome,
            budget: scope.budget,
        }
    }

    /// Records the outcome. The queue decides the final state and stamps the
    /// final `JobState` event in the same transaction (after the events
    /// still held by the log); only a recorded event reaches the other
    /// observers. With `next`, the slot's next job is leased in that write.
    pub(super) async fn end(
        self,
        pool: &WorkerPool,
        outcome: Outcome,
        budget: Option<&Budget>,
        next: Option<NextLease>,
    ) -> Option<Lease> {
        let (spent, spent_by_bundle) = match budget {
            Some(budget) => (Some(budget.spent()), budget.spent_by_bundle()),
            None => (None, Default::default()),
        };
        let final_event = self.sink.stamp(Event::JobState {
            state: JobStatus::Failed,
            attempt: self.lease.attempt,
            error: None,
            duration_ms: Some(self.started.elapsed().as_millis() as u64),
            spent,
            spent_by_bundle,
            // What the run reported; the queue decides what the job records.
            termination_reason: self.log.termination_reason(),
        });
        let asked = next.is_some();
        let job = &self.lease.job;
        let approval = match &outcome {
            Outcome::AwaitingApproval { request, .. } => Some((
                request.turn,
                ProgressKind::Waiting {
                    waiting_for: WaitFor::Approval,
                    until: request.approval.as_ref().and_then(|terms| {
                        (terms.expires_at.clone()).or_else(|| after_ms(terms.timeout_ms))
                    }),
                    call_id: Some(request.call_id.clone()),
                    tool: Some(request.tool.clone()),
                },
            )),
            _ => None,
        };
        match self.log.finish(outcome, final_event, next).await {
            Ok((finished, mut next)) => {
                tracing::info!(job_id = %job.id, attempt = self.lease.attempt, outcome = ?finished.reply, "job finished");
                if finished.reply == CompleteReply::Stale {
                    // A newer attempt took the job over before this one's
                    // heartbeat heard of it: the queue recorded nothing.
                    pool.bus.publish(DaemonEvent::StaleSettle {
                        claim: StaleClaim::Job,
                    });
                }
                if asked {
                    pool.health.report("lease", true);
                }
                if let Some(others) = &self.others {
                    // The queue wrote a park's request with it (never the run).
                    let written = finished.request_event.iter().chain(&finished.final_event);
                    for event in written {
                        let _ = others.on_event(event).await;
                    }
                }
                self.announce_wait(&finished, approval);
                next.pop()
            }
            Err(err) => {
                tracing::error!(job_id = %job.id, attempt = self.lease.attempt, error = %err, "cannot record job outcome; the lease will expire and the job resumes from its journal");
                None
            }
        }
    }

    /// Tells the job's live watchers what it waits for now that the
    /// attempt ended: the backoff before its retry, or a person's decision
    /// (`approval`, built from the request it parked with).
    fn announce_wait(&self, finished: &Finished, approval: Option<(u32, ProgressKind)>) {
        let Some(Event::JobState { state, .. }) = finished.final_event.as_ref().map(|e| &e.event)
        else {
            return;
        };
        match (state, approval) {
            (JobStatus::Retrying, _) => self.sink.progress(
                0,
                ProgressKind::waiting(WaitFor::Backoff, finished.run_at.clone()),
            ),
            (JobStatus::AwaitingApproval, Some((turn, wait))) => self.sink.progress(turn, wait),
            _ => {}
        }
    }

    /// Shutdown: the job goes back to the queue; its next attempt resumes
    /// from the journal and continues the event log.
    pub(super) async fn release(self) {
        let final_event = self.sink.stamp(Event::JobState {
            state: JobStatus::Released,
            attempt: self.lease.attempt,
            error: None,
            duration_ms: Some(self.started.elapsed().as_millis() as u64),
            spent: None,
            spent_by_bundle: Default::default(),
            termination_reason: None,
        });
        match self.log.release(final_event).await {
            Ok(finished) => {
                if let (Some(others), Some(event)) = (&self.others, finished.final_event) {
                    let _ = others.on_event(&event).await;
                }
            }
            Err(err) => {
                tracing::error!(job_id = %self.lease.job.id, error = %err, "cannot release job")
            }
        }
    }
}

/// `ms` from now (RFC 3339): when an approval's timeout denies the call.
fn after_ms(ms: Option<u64>) -> Option<String> {
    let at = std::time::SystemTime::now() + std::time::Duration::from_millis(ms?);
    Some(humantime::format_rfc3339_millis(at).to_string())
}

/// Keeps an attempt's lease alive, and stops its run when a cancel is
/// requested (at once when the queue announces it, else at the next beat)
/// or the lease is lost.
struct Heartbeat {
    handle: tokio::task::JoinHandle<()>,
    /// Cancelled when a newer attempt holds the job.
    lost: CancellationToken,
}

impl Heartbeat {
    fn spawn(pool: &WorkerPool, lease: &Lease, cancel: CancellationToken) -> Heartbeat {
        let queue = pool.queue.clone();
        let id = lease.job.id.clone();
        let attempt = lease.attempt;
        let every = crate::config::heartbeat_every(pool.settings.lease);
        let lease_for = pool.settings.lease;
        let lost = CancellationToken::new();
        let lost_flag = lost.clone();
        let mut cancels = queue.cancels();
        let handle = tokio::spawn(async move {
            let mut next_beat = tokio::time::Instant::now() + every;
            loop {
                let heard = match &mut cancels {
                    Some(announced) => tokio::select! {
                        () = tokio::time::sleep_until(next_beat) => None,
                        heard = announced.recv() => Some(heard),
                    },
                    None => {
                        tokio::time::sleep_until(next_beat).await;
                        None
                    }
                };
                match heard {
                    Some(Ok(job)) if job == id => {
                        tracing::info!(job_id = %id, "cancellation requested; stopping the run");
                        cancel.cancel();
                        continue;
                    }
                    Some(Ok(_)) => continue,
                    // Announcements were missed: ask the store now.
                    Some(Err(broadcast::error::RecvError::Lagged(_))) => {}
                    Some(Err(broadcast::error::RecvError::Closed)) => {
                        cancels = None;
                        continue;
                    }
                    None => {}
                }
                next_beat = tokio::time::Instant::now() + every;
                match queue.heartbeat(&id, attempt, lease_for).await {
                    Ok(HeartbeatReply::Ok) => {}
                    Ok(HeartbeatReply::CancelRequested) => {
                        tracing::info!(job_id = %id, "cancellation requested; stopping the run");
                        cancel.cancel();
                    }
                    Ok(HeartbeatReply::Lost) => {
                        lost_flag.cancel();
                        cancel.cancel();
                        return;
                    }
                    Err(err) => tracing::warn!(job_id = %id, error = %err, "heartbeat failed"),
                }
            }
        });
        Heartbeat { handle, lost }
    }
}
