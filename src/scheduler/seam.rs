//! What the scheduler's loop works with ([`Scheduler`]: the queue, the
//! registry, the daemon bus, and the one way it submits a fire — the
//! daemon's `admit::OnBehalf`, filled with the API's admission so a fire
//! is admitted exactly as a request is).

use std::sync::Arc;

use crate::admit::OnBehalf;
use crate::events::daemon::DaemonBus;
use crate::queue::JobQueue;
use crate::registry::Registry;

/// What the scheduler's loop works with.
#[derive(Clone)]
pub struct Scheduler {
    pub queue: Arc<dyn JobQueue>,
    pub registry: Arc<Registry>,
    pub bus: DaemonBus,
    /// Submits a fire as the schedule's owner key (as the key ring has it
    /// now), or as the daemon for a bundle's schedule (`owner` `None`).
    pub admission: Arc<dyn OnBehalf>,
}
