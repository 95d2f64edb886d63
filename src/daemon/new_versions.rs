//! `on_new_version: move`, wired: after each reload that changed bundles,
//! the reload pipeline (through this hook, since the registry knows no
//! queue) moves the waiting and parked jobs of the changed bundles that
//! declare `move` to their new version, each through the one
//! replay-compatibility check, and says so on the daemon bus. The start
//! does the same for every bundle once the first load is in (a bundle
//! edited while the daemon was down is loaded by the start, not changed by
//! a reload), before any worker leases a job.

use std::sync::Arc;

use crate::events::daemon::{DaemonBus, DaemonEvent};
use crate::queue::JobQueue;
use crate::registry::Registry;
use crate::registry::reload::AfterReload;
use crate::versions::migrate;

/// The hook the reloader runs after a reload changed bundles.
pub(super) fn moves_jobs(
    queue: Arc<dyn JobQueue>,
    registry: Arc<Registry>,
    bus: DaemonBus,
) -> AfterReload {
    Arc::new(move |changed: Vec<String>| {
        let (queue, registry, bus) = (queue.clone(), registry.clone(), bus.clone());
        Box::pin(async move { move_jobs(queue.as_ref(), &registry, &bus, &changed).await })
    })
}

/// After the first load: the jobs of every loaded bundle that declares
/// `move` and are pinned to an earlier version move to the loaded one.
pub(super) async fn after_start(queue: &dyn JobQueue, registry: &Arc<Registry>, bus: &DaemonBus) {
    let loaded: Vec<String> = registry.snapshot().bundles.keys().cloned().collect();
    move_jobs(queue, registry, bus, &loaded).await;
}

async fn move_jobs(
    queue: &dyn JobQueue,
    registry: &Arc<Registry>,
    bus: &DaemonBus,
    names: &[String],
) {
    for plan in migrate::follow_new_versions(queue, registry, names).await {
        match plan {
            Ok(plan) => bus.publish(DaemonEvent::JobsMoved {
                bundle: plan.bundle,
                version: plan.version,
                moved: plan.moves.len(),
                refused: plan
                    .refused
                    .into_iter()
                    .map(|job| (job.job_id.to_string(), job.reason.unwrap_or_default()))
                    .collect(),
            }),
            Err(e) => tracing::warn!(
                error = %e,
                "on_new_version: move could not move jobs after the load; they stay on their pinned versions"
            ),
        }
    }
}
