//! An attempt's write path. Everything one attempt writes goes through it:
//! its journal steps (it is the attempt's [`JournalStore`]), its events
//! (it is also an [`Observer`]) and its end, each guarded by the attempt
//! number. A run's events are held and written with the run's next durable
//! write — a journal step (each model reply and each tool result is one) or
//! the job's outcome — so the log costs no commit of its own on a turn's
//! critical path.
//!
//! Every write of a job's held events goes through one lock, so they reach
//! the store in sequence order; a write that fails puts its events back, so a
//! failed append never leaves a gap in the sequence.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::events::{Event, EventEnvelope, Observer, ObserverError};
use crate::journal::{JournalEntry, JournalStore, StoreError};
use crate::queue::{Finished, JobId, JobQueue, Lease, NextLease, Outcome, QueueError};
use crate::types::TerminationReason;

/// The write path of one attempt of one job.
pub struct AttemptLog {
    queue: Arc<dyn JobQueue>,
    job: JobId,
    attempt: u32,
    pending: Mutex<Vec<EventEnvelope>>,
    /// Held from taking the pending events until their write is answered.
    writing: tokio::sync::Mutex<()>,
    /// Why the job's own run ended (its `KernelEnd`, or a workflow's end),
    /// as the attempt reports it with its outcome; nested runs' ends are
    /// not the job's.
    ended: Mutex<Option<TerminationReason>>,
}

impl AttemptLog {
    pub fn new(queue: Arc<dyn JobQueue>, job: JobId, attempt: u32) -> Self {
        Self {
            queue,
            job,
            attempt,
            pending: Mutex::new(Vec::new()),
            writing: tokio::sync::Mutex::new(()),
            ended: Mutex::new(None),
        }
    }

    /// Why the job's own run ended, if it did in this attempt.
    pub fn termination_reason(&self) -> Option<TerminationReason> {
        *self.ended.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take_pending(&self) -> Vec<EventEnvelope> {
        std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Puts back events whose write failed, before any held since.
    fn restore(&self, mut events: Vec<EventEnvelope>) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        events.append(&mut pending);
        *pending = events;
    }

    /// Runs `write` with the held events (in sequence order, and after every
    /// earlier write of this job); the events are put back if it fails with
    /// anything but a stale attempt (then nothing of this attempt is written
    /// any more).
    pub async fn write_with<T, F, Fut>(&self, write: F) -> Result<T, QueueError>
    where
        F: FnOnce(Arc<Vec<EventEnvelope>>) -> Fut,
        Fut: std::future::Future<Output = Result<T, QueueError>>,
    {
        let _in_order = self.writing.lock().await;
        // Shared with the write, not copied: only a failed write needs them back.
        let held = Arc::new(self.take_pending());
        let written = write(held.clone()).await;
        if let Err(err) = &written
            && !matches!(err, QueueError::StaleAttempt { .. })
        {
            self.restore(Arc::try_unwrap(held).unwrap_or_else(|shared| (*shared).clone()));
        }
        written
    }

    /// Records the attempt's outcome with the held events (the queue
    /// decides the job's state and stamps `final_event`), and with `next`
    /// leases the slot's next job in the same write.
    pub async fn finish(
        &self,
        outcome: Outcome,
        final_event: EventEnvelope,
        next: Option<NextLease>,
    ) -> Result<(Finished, Vec<Lease>), QueueError> {
        let (queue, job, attempt) = (self.queue.clone(), self.job.clone(), self.attempt);
        self.write_with(|held| async move {
            let final_event = Some(final_event);
            match next {
                Some(next) => {
                    queue
                        .finish_and_lease(&job, attempt, outcome, &held, final_event, next)
                        .await
                }
                None => queue
                    .finish(&job, attempt, outcome, &held, final_event)
                    .await
                    .map(|finished| (finished, Vec::new())),
            }
        })
        .await
    }

    /// Gives the job back to the queue (shutdown) with the held events.
    pub async fn release(&self, final_event: EventEnvelope) -> Result<Finished, QueueError> {
        let (queue, job, attempt) = (self.queue.clone(), self.job.clone(), self.attempt);
        self.write_with(|held| async move {
            queue.release(&job, attempt, &held, Some(final_event)).await
        })
        .await
    }
}

/// The journal's store: each step is written with the events held until
/// then, guarded by the attempt.
#[async_trait]
impl JournalStore for AttemptLog {
    async fn record(&self, entries: Vec<JournalEntry>) -> Result<(), StoreError> {
        let (queue, job, attempt) = (self.queue.clone(), self.job.clone(), self.attempt);
        self.write_with(
            |held| async move { queue.record_steps(&job, attempt, &entries, &held).await },
        )
        .await
        .map_err(|e| StoreError(Box::new(e)))
    }
}

#[async_trait]
impl Observer for AttemptLog {
    async fn on_event(&self, event: &EventEnvelope) -> Result<(), ObserverError> {
        if event.parent.is_none() && event.run_id == self.job.as_str() {
            let reason = match &event.event {
                Event::KernelEnd {
                    termination_reason, ..
                } => Some(*termination_reason),
                Event::WorkflowEnd { outcome, .. } if outcome == "finish" => {
                    Some(TerminationReason::WorkflowFinished)
                }
                _ => None,
            };
            if let Some(reason) = reason {
                *self.ended.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason);
            }
        }
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(event.clone());
        // Held until the next journal write or the outcome carries it.
        Ok(())
    }

    fn name(&self) -> &str {
        "event-log"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Event;

    fn event(seq: u64) -> EventEnvelope {
        EventEnvelope {
            run_id: "j".into(),
            bundle: "b".into(),
            bundle_version: "1".into(),
            parent: None,
            seq,
            timestamp: String::new(),
            event: Event::ParseError {
                turn: 1,
                detail: String::new(),
            },
        }
    }

    #[tokio::test]
    async fn a_failed_write_puts_its_events_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let queue: Arc<dyn JobQueue> = Arc::new(
            crate::queue::sqlite::SqliteQueue::open(&dir.path().join("q.db"), Default::default())
                .await
                .unwrap(),
        );
        let log = AttemptLog::new(queue, JobId::from("j"), 1);
        log.on_event(&event(1)).await.unwrap();
        let failed: Result<(), QueueError> = log
            .write_with(|held| async move {
                assert_eq!(held.len(), 1);
                Err(QueueError::Cursor("simulated store failure".into()))
            })
            .await;
        assert!(failed.is_err());
        log.on_event(&event(2)).await.unwrap();
        let seqs: Vec<u64> = log.take_pending().iter().map(|e| e.seq).collect();
        assert_eq!(seqs, vec![1, 2], "the failed events come back first");
    }
}
