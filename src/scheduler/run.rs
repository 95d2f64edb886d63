//! The scheduler's loop: a tick just past each whole second (sooner while a catch-up is under
//! way), each syncing the bundles' schedules and taking every due
//! schedule's turn, until the daemon shuts down.

use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use super::bundles::{Synced, sync_bundles};
use super::fire::handle;
use super::seam::Scheduler;

/// How long after a whole second the scheduler looks: cron fires fall on
/// whole seconds, so a look just past each one sees that second's fires.
const PAST_THE_SECOND_MS: i64 = 10;
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
            let looked = crate::queue::millis(SystemTime::now());
            wait = match tick(&scheduler, &mut synced).await {
                Ok(true) => CATCHING_UP,
                Ok(false) => until_next_second(looked, crate::queue::millis(SystemTime::now())),
                Err(e) => {
                    tracing::warn!(error = %e, "scheduler: cannot read or update the schedules; trying again in a second");
                    until_next_second(looked, crate::queue::millis(SystemTime::now()))
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

/// From `now`, the wait until just after the first whole second after
/// `looked` (when the last look began). A fixed second's sleep drifted by
/// each look's own length until one look saw two seconds' fires at once:
/// with `overlap: queue`, a fire that came while the last job ran and the
/// next one that came after it ended then ran as one job, and the earlier
/// fire was lost.
fn until_next_second(looked: i64, now: i64) -> Duration {
    let at = looked.div_euclid(1000) * 1000 + 1000 + PAST_THE_SECOND_MS;
    Duration::from_millis(u64::try_from(at - now).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_look_is_just_after_the_next_whole_second() {
        assert_eq!(until_next_second(5_400, 5_420), Duration::from_millis(590));
        // A look at a fire's very second waits for the next one.
        assert_eq!(
            until_next_second(5_000, 5_000),
            Duration::from_millis(1_010)
        );
        // A look that ran past the next second looks again at once.
        assert_eq!(until_next_second(5_990, 6_050), Duration::ZERO);
    }
}
