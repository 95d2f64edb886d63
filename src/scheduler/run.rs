//! The scheduler's loop: a tick just past each whole second (sooner while a catch-up is under
//! way), each syncing the bundles' schedules and taking every due
//! schedule's turn, until the daemon shuts down.

use std::collections::HashMap;
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
        let mut watched = Watched::default();
        let mut wait = Duration::ZERO;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.cancelled() => return,
            }
            let looked = crate::queue::millis(SystemTime::now());
            wait = match tick(&scheduler, &mut synced, &mut watched).await {
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
    watched: &mut Watched,
) -> Result<bool, crate::queue::QueueError> {
    let snapshot = scheduler.registry.snapshot();
    let reloaded = synced.generation != Some(snapshot.generation);
    sync_bundles(scheduler, synced, reloaded).await?;
    synced.generation = Some(snapshot.generation);
    let now = crate::queue::millis(SystemTime::now());
    let schedules = scheduler.queue.schedules().await?;
    watched.look(&schedules, now);
    let mut waiting = false;
    for schedule in schedules {
        if schedule.paused || schedule.next_fire.is_none_or(|next| next > now) {
            continue;
        }
        let since = watched.since(&schedule.id, now);
        waiting |= handle(scheduler, schedule, since, now).await?;
    }
    Ok(waiting)
}

/// Since when this daemon's scheduler has looked at each schedule unpaused:
/// a fire from before came while nobody here looked (the daemon was down,
/// or the schedule paused) and takes its turn (`schedule::turn`).
#[derive(Default)]
struct Watched(HashMap<String, i64>);

impl Watched {
    /// A look at `schedules` at `now`: the unpaused ones are watched from
    /// now on unless they were already; paused and deleted ones are not.
    fn look(&mut self, schedules: &[crate::queue::StoredSchedule], now: i64) {
        let before = std::mem::take(&mut self.0);
        self.0 = schedules
            .iter()
            .filter(|schedule| !schedule.paused)
            .map(|schedule| {
                let since = before.get(&schedule.id).copied().unwrap_or(now);
                (schedule.id.clone(), since)
            })
            .collect();
    }

    fn since(&self, id: &str, now: i64) -> i64 {
        self.0.get(id).copied().unwrap_or(now)
    }
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

    fn schedule(id: &str, paused: bool) -> crate::queue::StoredSchedule {
        let mut schedule =
            crate::queue::StoredSchedule::new(id.into(), "api".into(), "{}".into(), None, Some(0));
        schedule.paused = paused;
        schedule
    }

    #[test]
    fn a_schedule_is_watched_from_the_first_look_that_finds_it_unpaused() {
        let mut watched = Watched::default();
        watched.look(&[schedule("a", false), schedule("b", true)], 1_000);
        assert_eq!(watched.since("a", 1_000), 1_000);
        watched.look(&[schedule("a", false), schedule("b", true)], 2_000);
        assert_eq!(watched.since("a", 2_000), 1_000);
        // Paused, then resumed: its fires in between came while nobody
        // looked.
        watched.look(&[schedule("a", true), schedule("b", false)], 3_000);
        watched.look(&[schedule("a", false), schedule("b", false)], 4_000);
        assert_eq!(watched.since("a", 4_000), 4_000);
        assert_eq!(watched.since("b", 4_000), 3_000);
        // Deleted: forgotten.
        watched.look(&[schedule("b", false)], 5_000);
        assert_eq!(watched.0.len(), 1);
    }

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
