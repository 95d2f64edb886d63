//! What the scheduler's loop works with ([`Scheduler`]: the queue, the
//! registry, the daemon bus) and the one way it submits a fire
//! ([`FireAdmission`]), which the daemon fills with the API's admission so
//! a fire is admitted exactly as a request is.

use std::sync::Arc;

use crate::events::daemon::DaemonBus;
use crate::queue::{JobId, JobQueue, NewJob};
use crate::registry::Registry;

/// How the scheduler submits a fire: admitted and queued as `owner` (the
/// key that made the schedule, as the key ring has it now), or as the
/// daemon for a bundle's schedule (`owner` `None`).
#[async_trait::async_trait]
pub trait FireAdmission: Send + Sync {
    /// The id of the job `job` was admitted as (or the one its
    /// idempotency key names already).
    async fn submit(&self, owner: Option<&str>, job: NewJob) -> Result<JobId, FireRefused>;
}

/// Why a fire was not submitted, as the scheduler must act on it.
#[derive(Debug, thiserror::Error)]
pub enum FireRefused {
    /// The store could not take it now: the fire stays due for the next
    /// tick.
    #[error("the store cannot take the fire now: {0}")]
    Unavailable(String),
    /// Admission refused it (the owner key gone, a quota, the bundle
    /// unloaded): the fire is dropped, the next one comes on time.
    #[error("{0}")]
    Refused(String),
}

/// What the scheduler's loop works with.
#[derive(Clone)]
pub struct Scheduler {
    pub queue: Arc<dyn JobQueue>,
    pub registry: Arc<Registry>,
    pub bus: DaemonBus,
    pub admission: Arc<dyn FireAdmission>,
}
