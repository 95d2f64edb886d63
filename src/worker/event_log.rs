//! The observer that appends a job's events to its durable log in the queue
//! store, guarded by the attempt number.

use std::sync::Arc;

use async_trait::async_trait;

use crate::events::{EventEnvelope, Observer, ObserverError};
use crate::queue::{JobId, JobQueue};

pub struct EventLogObserver {
    queue: Arc<dyn JobQueue>,
    job: JobId,
    attempt: u32,
}

impl EventLogObserver {
    pub fn new(queue: Arc<dyn JobQueue>, job: JobId, attempt: u32) -> Self {
        Self {
            queue,
            job,
            attempt,
        }
    }
}

#[async_trait]
impl Observer for EventLogObserver {
    async fn on_event(&self, event: &EventEnvelope) -> Result<(), ObserverError> {
        self.queue
            .append_events(&self.job, self.attempt, std::slice::from_ref(event))
            .await
            .map_err(|e| ObserverError {
                observer: "event-log".into(),
                message: e.to_string(),
            })
    }

    fn name(&self) -> &str {
        "event-log"
    }
}
