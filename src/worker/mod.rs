//! The worker pool: leases jobs from the queue, runs each with the bundle
//! version it is pinned to, keeps its lease alive with heartbeats, writes its
//! events to the job's durable log, and records the outcome guarded by the
//! attempt number. On shutdown it stops leasing, lets running jobs finish up
//! to the drain timeout and releases the rest back to the queue.
//!
//! This module must not know about HTTP or telemetry exporters; it emits
//! events to the observers it is given.

mod event_log;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::events::{CompositeObserver, Event, EventSink, Observer, RunContext};
use crate::kernel::Kernel;
use crate::queue::{HeartbeatReply, JobQueue, Lease, Outcome};
use crate::registry::{LoadedBundle, Registry};
use crate::types::TerminationReason;
use event_log::EventLogObserver;

/// How the pool behaves.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    pub worker_id: String,
    pub concurrency: usize,
    pub lease: Duration,
    pub poll_interval: Duration,
    pub drain_timeout: Duration,
    /// Put prompts on ModelRequest events (the operator opted in to content capture).
    pub record_messages: bool,
}

/// Builds the observers of one job (metrics, spans, plugins); the durable
/// event log is always added by the pool.
pub type ObserverFactory =
    Arc<dyn Fn(&LoadedBundle, &crate::queue::Job) -> Vec<Arc<dyn Observer>> + Send + Sync>;

pub struct WorkerPool {
    queue: Arc<dyn JobQueue>,
    registry: Arc<Registry>,
    settings: WorkerSettings,
    observers: ObserverFactory,
    /// Woken by submissions so idle workers do not wait for the next poll.
    wake: Arc<Notify>,
}

impl WorkerPool {
    pub fn new(
        queue: Arc<dyn JobQueue>,
        registry: Arc<Registry>,
        settings: WorkerSettings,
        observers: ObserverFactory,
        wake: Arc<Notify>,
    ) -> Self {
        Self {
            queue,
            registry,
            settings,
            observers,
            wake,
        }
    }

    /// Runs until `shutdown` fires, then drains.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let slots = Arc::new(Semaphore::new(self.settings.concurrency.max(1)));
        let mut running: JoinSet<()> = JoinSet::new();
        // Cancelled when the drain timeout passes: running jobs stop and are released.
        let abandon = CancellationToken::new();
        loop {
            let permit = tokio::select! {
                p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
                _ = shutdown.cancelled() => break,
            };
            let lease = match self
                .queue
                .lease(&self.settings.worker_id, self.settings.lease)
                .await
            {
                Ok(Some(lease)) => lease,
                Ok(None) => {
                    drop(permit);
                    tokio::select! {
                        _ = self.wake.notified() => {}
                        _ = tokio::time::sleep(self.settings.poll_interval) => {}
                        _ = shutdown.cancelled() => break,
                    }
                    continue;
                }
                Err(err) => {
                    drop(permit);
                    tracing::error!(error = %err, "cannot lease jobs; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(self.settings.poll_interval * 4) => {}
                        _ = shutdown.cancelled() => break,
                    }
                    continue;
                }
            };
            let this = self.clone();
            let abandon = abandon.clone();
            running.spawn(async move {
                this.run_job(lease, abandon).await;
                drop(permit);
            });
            // Reap finished tasks so the set does not grow.
            while running.try_join_next().is_some() {}
        }

        while running.try_join_next().is_some() {}
        tracing::info!(
            in_flight = running.len(),
            "draining: no new jobs are leased"
        );
        let drained = tokio::time::timeout(self.settings.drain_timeout, async {
            while running.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                remaining = running.len(),
                "drain timeout passed; releasing running jobs to the queue"
            );
            abandon.cancel();
            while running.join_next().await.is_some() {}
        }
    }

    async fn run_job(&self, lease: Lease, abandon: CancellationToken) {
        let job = &lease.job;
        let attempt = lease.attempt;
        let Some(loaded) = self
            .registry
            .resolve(&job.bundle, job.bundle_version.as_deref())
        else {
            let error = match &job.bundle_version {
                Some(v) => format!(
                    "bundle {:?} version {v:?} is not loaded (it was replaced or removed); resubmit the job",
                    job.bundle
                ),
                None => format!(
                    "bundle {:?} is not loaded; check `structured-agents bundles`",
                    job.bundle
                ),
            };
            self.finish(
                &lease,
                Outcome::Failed {
                    error,
                    retryable: false,
                },
                None,
                std::time::Instant::now(),
            )
            .await;
            return;
        };
        if job.bundle_version.is_none()
            && let Err(err) = self
                .queue
                .pin_version(&job.id, attempt, loaded.version())
                .await
        {
            tracing::warn!(job_id = %job.id, error = %err, "cannot pin bundle version");
        }

        let first_seq = match self.queue.last_seq(&job.id).await {
            Ok(seq) => seq + 1,
            Err(err) => {
                tracing::error!(job_id = %job.id, error = %err, "cannot read the event log; releasing the job");
                let _ = self.queue.release(&job.id, attempt).await;
                return;
            }
        };
        let others: Arc<dyn Observer> =
            Arc::new(CompositeObserver::new((self.observers)(&loaded, job)));
        let log = Arc::new(EventLogObserver::new(
            self.queue.clone(),
            job.id.clone(),
            attempt,
        ));
        let context = RunContext {
            run_id: job.id.to_string(),
            bundle: loaded.name().to_string(),
            bundle_version: loaded.version().to_string(),
            parent: None,
        };
        let sink = EventSink::new(
            context,
            first_seq,
            Arc::new(CompositeObserver::new(vec![
                log.clone() as Arc<dyn Observer>,
                others.clone(),
            ])),
        );
        let cancel_requested = CancellationToken::new();
        let finish_with = FinalEvents {
            sink: &sink,
            log: &log,
            observers: &others,
            cancel_requested: &cancel_requested,
        };
        let started = std::time::Instant::now();
        sink.emit(Event::JobState {
            state: "running".into(),
            attempt,
            error: None,
            duration_ms: None,
        })
        .await;

        let messages = match loaded.bundle.prompts.render(&job.input, &job.variables) {
            Ok(m) => m,
            Err(e) => {
                let error = format!("bundle {:?}: {e}", job.bundle);
                self.finish(
                    &lease,
                    Outcome::Failed {
                        error,
                        retryable: false,
                    },
                    Some(finish_with),
                    started,
                )
                .await;
                return;
            }
        };

        let mut config = loaded.bundle.kernel_config();
        config.record_messages = self.settings.record_messages;
        let kernel = Kernel::new(
            config,
            loaded.bundle.model.plugin.clone(),
            loaded.backend.clone(),
            loaded.tools.clone(),
        );
        let cancel = CancellationToken::new();
        let heartbeat = self.spawn_heartbeat(&lease, cancel.clone(), cancel_requested.clone());
        let stop_on_abandon = {
            let cancel = cancel.clone();
            let abandon = abandon.clone();
            tokio::spawn(async move {
                abandon.cancelled().await;
                cancel.cancel();
            })
        };
        let result = kernel.run(messages, &sink, cancel.clone()).await;
        stop_on_abandon.abort();
        heartbeat.handle.abort();

        if abandon.is_cancelled() {
            // Shutdown: the job goes back to the queue; its next attempt
            // continues the event log.
            sink.emit(Event::JobState {
                state: "released".into(),
                attempt,
                error: None,
                duration_ms: Some(started.elapsed().as_millis() as u64),
            })
            .await;
            if let Err(err) = log.flush().await {
                tracing::warn!(job_id = %job.id, error = %err, "cannot write the event log before release");
            }
            if let Err(err) = self.queue.release(&job.id, attempt).await {
                tracing::error!(job_id = %job.id, error = %err, "cannot release job");
            }
            return;
        }
        if heartbeat.lost.is_cancelled() {
            tracing::warn!(job_id = %job.id, attempt, "lease lost to a newer attempt; discarding this attempt's outcome");
            return;
        }
        let outcome = match result {
            Ok(run) if matches!(run.termination_reason, TerminationReason::Cancelled) => {
                Outcome::Failed {
                    error: "cancelled by request".into(),
                    retryable: false,
                }
            }
            Ok(run) if matches!(run.termination_reason, TerminationReason::Timeout) => {
                Outcome::Failed {
                    error: format!(
                        "the run exceeded its deadline ({:?}, limits.timeout)",
                        loaded.bundle.kernel_config().timeout.unwrap_or_default()
                    ),
                    retryable: false,
                }
            }
            Ok(run) => Outcome::Succeeded(json!({
                "output": run.final_output.clone().or_else(|| run.final_message.content.clone()),
                "termination_reason": run.termination_reason,
                "turn_count": run.turn_count,
                "usage": run.usage,
                "bundle_version": loaded.version(),
            })),
            Err(err) => Outcome::Failed {
                error: err.to_string(),
                retryable: err.is_retryable(),
            },
        };
        self.finish(&lease, outcome, Some(finish_with), started)
            .await;
    }

    /// Records the outcome. The final JobState event goes into the log in
    /// the same transaction as the state change, then to the other observers.
    async fn finish(
        &self,
        lease: &Lease,
        outcome: Outcome,
        events: Option<FinalEvents<'_>>,
        started: std::time::Instant,
    ) {
        let job = &lease.job;
        let final_event = events.as_ref().map(|f| {
            // The state the queue will record for this outcome.
            let (state, error) = match &outcome {
                Outcome::Succeeded(_) => ("succeeded", None),
                Outcome::Failed { .. } if f.cancel_requested.is_cancelled() => ("cancelled", None),
                Outcome::Failed {
                    error,
                    retryable: true,
                } if lease.attempt < job.max_attempts => ("retrying", Some(error.clone())),
                Outcome::Failed {
                    error,
                    retryable: true,
                } => ("dead", Some(error.clone())),
                Outcome::Failed {
                    error,
                    retryable: false,
                } => ("failed", Some(error.clone())),
            };
            f.sink.stamp(Event::JobState {
                state: state.into(),
                attempt: lease.attempt,
                error,
                duration_ms: Some(started.elapsed().as_millis() as u64),
            })
        });
        // Events still held by the log go into the outcome's transaction,
        // before the final state, keeping the sequence in order.
        let mut final_events = events
            .as_ref()
            .map(|f| f.log.take_pending())
            .unwrap_or_default();
        final_events.extend(final_event.iter().cloned());
        match self
            .queue
            .complete(&job.id, lease.attempt, outcome, &final_events)
            .await
        {
            Ok(reply) => {
                tracing::info!(job_id = %job.id, attempt = lease.attempt, outcome = ?reply, "job finished")
            }
            Err(err) => {
                tracing::error!(job_id = %job.id, attempt = lease.attempt, error = %err, "cannot record job outcome")
            }
        }
        if let (Some(f), Some(event)) = (events, final_event) {
            let _ = f.observers.on_event(&event).await;
        }
    }

    fn spawn_heartbeat(
        &self,
        lease: &Lease,
        cancel: CancellationToken,
        cancel_requested: CancellationToken,
    ) -> Heartbeat {
        let queue = self.queue.clone();
        let id = lease.job.id.clone();
        let attempt = lease.attempt;
        let every = self.settings.lease / 3;
        let lease_for = self.settings.lease;
        let lost = CancellationToken::new();
        let lost_flag = lost.clone();
        let handle = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                match queue.heartbeat(&id, attempt, lease_for).await {
                    Ok(HeartbeatReply::Ok) => {}
                    Ok(HeartbeatReply::CancelRequested) => {
                        tracing::info!(job_id = %id, "cancellation requested; stopping the run");
                        cancel_requested.cancel();
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

/// Where a job's last event goes.
struct FinalEvents<'a> {
    sink: &'a EventSink,
    log: &'a Arc<EventLogObserver>,
    observers: &'a Arc<dyn Observer>,
    cancel_requested: &'a CancellationToken,
}

struct Heartbeat {
    handle: tokio::task::JoinHandle<()>,
    lost: CancellationToken,
}
