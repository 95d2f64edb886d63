//! The approval timeout: a call nobody decided on within its policy's
//! `timeout` is denied (the default decision), so a forgotten request never
//! holds a job forever. A sweep every second; with several daemons on one
//! PostgreSQL schema each takes rows no other holds.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::events::daemon::{DaemonBus, DaemonEvent};
use crate::queue::JobQueue;

/// Jobs decided per transaction.
const BATCH: usize = 100;
const EVERY: Duration = Duration::from_secs(1);

/// Runs until `shutdown`.
pub fn spawn(
    queue: Arc<dyn JobQueue>,
    bus: DaemonBus,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    super::sweep::every(EVERY, shutdown, move || {
        let (queue, bus) = (queue.clone(), bus.clone());
        async move {
            match queue.expire_approvals(BATCH).await {
                Ok(jobs) => {
                    for job in jobs {
                        bus.publish(DaemonEvent::ApprovalDecided {
                            job: job.id.to_string(),
                            bundle: job.bundle,
                            decision: "deny",
                            by: "timeout".into(),
                        });
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "approval timeouts: cannot deny expired requests; trying again in a second")
                }
            }
        }
    })
}
