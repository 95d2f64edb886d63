//! The observer that appends a job's events to its durable log in the queue
//! store, guarded by the attempt number. Events that are always followed
//! within moments by another (KernelStart, ModelResponse, tool traces and
//! results) are held and written with the next one, so a turn costs a few
//! transactions instead of one per event; what is still held when the run
//! ends goes into the same transaction as the job's outcome.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::events::{Event, EventEnvelope, Observer, ObserverError};
use crate::queue::{JobId, JobQueue, QueueError};

pub struct EventLogObserver {
    queue: Arc<dyn JobQueue>,
    job: JobId,
    attempt: u32,
    pending: Mutex<Vec<EventEnvelope>>,
}

impl EventLogObserver {
    pub fn new(queue: Arc<dyn JobQueue>, job: JobId, attempt: u32) -> Self {
        Self {
            queue,
            job,
            attempt,
            pending: Mutex::new(Vec::new()),
        }
    }

    /// Events that make a watcher's view current: written at once, with
    /// whatever is held before them.
    fn flushes(event: &Event) -> bool {
        matches!(
            event,
            Event::ModelRequest { .. }
                | Event::ToolCall { .. }
                | Event::TurnComplete { .. }
                | Event::KernelEnd { .. }
                | Event::Reload { .. }
        ) || matches!(event, Event::JobState { state, .. } if state != "running")
    }

    /// The held events, for the transaction that records the outcome.
    pub fn take_pending(&self) -> Vec<EventEnvelope> {
        std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Writes the held events now.
    pub async fn flush(&self) -> Result<(), QueueError> {
        let batch = self.take_pending();
        if batch.is_empty() {
            return Ok(());
        }
        self.queue
            .append_events(&self.job, self.attempt, &batch)
            .await
    }
}

#[async_trait]
impl Observer for EventLogObserver {
    async fn on_event(&self, event: &EventEnvelope) -> Result<(), ObserverError> {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(event.clone());
        if !Self::flushes(&event.event) {
            return Ok(());
        }
        self.flush().await.map_err(|e| ObserverError {
            observer: "event-log".into(),
            message: e.to_string(),
        })
    }

    fn name(&self) -> &str {
        "event-log"
    }
}
