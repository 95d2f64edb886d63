//! The scheduler's loop: a tick a second (sooner while a catch-up is under
//! way), each syncing the bundles' schedules and taking every due
//! schedule's turn, until the daemon shuts down.

use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use super::bundles::{Synced, sync_bundles};
use super::fire::handle;
use super::seam::Scheduler;

const EVERY: Duration = Duration::from_secs(1);
/// How soon the scheduler looks again while fires wait their turn (a
/// catch-up, one job at a time): a one-second tick would never catch up a
/// cron of one second.
const CATCHING_UP: Duration = Duration::from_millis(100);
/// Runs until `shutdown`; `daemon` names this daemon in what it logs.
pub fn spawn(
    scheduler: Scheduler,
    daemon: String,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut synced = Synced {
            daemon,
            generation: None,
            declared: None,
        };
        let mut wait = Duration::ZERO;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.cancelled() => return,
            }
            wait = match tick(&scheduler, &mut synced).await {
                Ok(true) => CATCHING_UP,
                Ok(false) => EVERY,
                Err(e) => {
                    tracing::warn!(error = %e, "scheduler: cannot read or update the schedules; trying again in a second");
                    EVERY
                }
            };
        }
    })
}

/// One look at every schedule: whether fires were left waiting their turn
/// (a catch-up in progress).
async fn tick(
    scheduler: &Scheduler,
    synced: &mut Synced,
) -> Result<bool, crate::queue::QueueError> {
    let snapshot = scheduler.registry.snapshot();
    let reloaded = synced.generation != Some(snapshot.generation);
    sync_bundles(scheduler, synced, reloaded).await?;
    synced.generation = Some(snapshot.generation);
    let now = crate::queue::millis(SystemTime::now());
    let mut waiting = false;
    for schedule in scheduler.queue.schedules().await? {
        if schedule.paused || schedule.next_fire.is_none_or(|next| next > now) {
            continue;
        }
        waiting |= handle(scheduler, schedule, now).await?;
    }
    Ok(waiting)
}
