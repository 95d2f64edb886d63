//! Whose turn it is: of a schedule's due fires ([`super::due_fires`]), the
//! one to run now, by its `overlap` policy — pure: the same fires, last
//! job and watch give the same turn on every daemon. A schedule runs at
//! most one job at a time whatever `missed` says: fires nobody was
//! watching for take their turns oldest first, one each time the last job
//! has ended (a catch-up after an outage or a pause).

use super::spec::Overlap;

/// What to do with a schedule's due fires now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Turn {
    /// Leave them due: the last job runs and they wait their turn.
    Hold,
    /// Submit `fire`; the schedule's next unhandled fire becomes `next`.
    /// `cancel`: cancel the last job first. `skipped`: fires passed over
    /// for it.
    Run {
        fire: i64,
        skipped: u64,
        cancel: bool,
        next: Option<i64>,
    },
    /// Submit none: `skipped` fires are dropped, and the schedule moves on
    /// to `next`.
    Pass { skipped: u64, next: Option<i64> },
}

/// The schedule's last job, as its turn needs it: when it ended (`None`:
/// it has not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastJob {
    pub ended: Option<i64>,
}

/// The turn of `fires` (due, oldest first) of a schedule whose last job
/// is `last`, watched (looked at unpaused by this daemon's scheduler)
/// since `watched_since`. `after` is the schedule's first fire after a
/// given time; `next` its first fire after now.
///
/// Fires from before the watch came while nobody looked (the daemon was
/// down, or the schedule paused and resumed with a catch-up): no job ran
/// for them to overlap, so they take their turns one after another,
/// oldest first, each once the last job has ended. Fires since follow
/// `overlap` when they came while the last job was outstanding (queued
/// or running): `skip` drops them, `queue` holds them and runs one job
/// for them all (the newest) when it ends, `cancel_previous` cancels the
/// job and runs the newest. Fires that came after it ended run in order.
///
/// Only the watch makes a fire wait its turn: a rule that also let fires
/// that came while the last job waited in the queue wait their turn fed
/// itself — each fire it held came before the next job was submitted and
/// was held again — and turned `skip` and `queue` into one job per fire,
/// ever later, once a single job waited a second to start.
pub fn turn(
    overlap: Overlap,
    fires: &[i64],
    watched_since: i64,
    last: Option<LastJob>,
    after: impl Fn(i64) -> Option<i64>,
    next: Option<i64>,
) -> Turn {
    let (Some(&oldest), Some(&newest)) = (fires.first(), fires.last()) else {
        return Turn::Pass { skipped: 0, next };
    };
    let count = fires.len() as u64;
    let run = |fire: i64, skipped: u64| Turn::Run {
        fire,
        skipped,
        cancel: false,
        next: after(fire),
    };
    let Some(last) = last else {
        return run(oldest, 0);
    };
    let unwatched = oldest < watched_since;
    let Some(ended) = last.ended else {
        return match overlap {
            Overlap::CancelPrevious => Turn::Run {
                fire: newest,
                skipped: count - 1,
                cancel: true,
                next,
            },
            Overlap::Queue => Turn::Hold,
            // Fires waiting their turn hold the ones behind them too.
            Overlap::Skip if unwatched => Turn::Hold,
            Overlap::Skip => Turn::Pass {
                skipped: count,
                next,
            },
        };
    };
    if unwatched {
        return run(oldest, 0);
    }
    let during: Vec<i64> = fires.iter().copied().filter(|f| *f <= ended).collect();
    if during.is_empty() {
        return run(oldest, 0);
    }
    let dropped = during.len() as u64;
    match overlap {
        Overlap::Skip => match fires.iter().copied().find(|f| *f > ended) {
            Some(first_after) => run(first_after, dropped),
            None => Turn::Pass {
                skipped: dropped,
                next,
            },
        },
        // Held until it ended, then one job for them all: the newest due.
        Overlap::Queue | Overlap::CancelPrevious => run(newest, count - 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every 10 ms, for the test.
    fn after(ms: i64) -> Option<i64> {
        Some(ms / 10 * 10 + 10)
    }

    const RUNNING: Option<LastJob> = Some(LastJob { ended: None });

    fn ended(at: i64) -> Option<LastJob> {
        Some(LastJob { ended: Some(at) })
    }

    fn run(fire: i64, skipped: u64) -> Turn {
        Turn::Run {
            fire,
            skipped,
            cancel: false,
            next: after(fire),
        }
    }

    /// Watched since 35: fires before it came while nobody looked (an
    /// outage, or a pause caught up).
    #[test]
    fn fires_nobody_watched_for_run_one_after_another_oldest_first() {
        for overlap in [Overlap::Skip, Overlap::Queue, Overlap::CancelPrevious] {
            // No job yet, the last one ended before them, or it ended
            // after them (it drained as the daemon stopped, or its lease
            // ran out): the oldest runs, the others stay due.
            for last in [None, ended(5), ended(33)] {
                assert_eq!(
                    turn(overlap, &[10, 20, 30, 40], 35, last, after, Some(50)),
                    run(10, 0),
                    "{overlap:?} {last:?}"
                );
            }
        }
        // While the last job runs they wait, under skip and queue alike.
        for overlap in [Overlap::Skip, Overlap::Queue] {
            assert_eq!(
                turn(overlap, &[20, 30], 35, RUNNING, after, Some(40)),
                Turn::Hold
            );
        }
    }

    /// Watched all along: fires that came while the last job was
    /// outstanding follow `overlap`.
    #[test]
    fn fires_during_a_job_are_dropped_held_as_one_or_cancel_it() {
        assert_eq!(
            turn(Overlap::Skip, &[10, 20], 0, RUNNING, after, Some(40)),
            Turn::Pass {
                skipped: 2,
                next: Some(40)
            }
        );
        assert_eq!(
            turn(Overlap::Queue, &[10, 20], 0, RUNNING, after, Some(40)),
            Turn::Hold
        );
        assert_eq!(
            turn(
                Overlap::CancelPrevious,
                &[10, 20],
                0,
                RUNNING,
                after,
                Some(40)
            ),
            Turn::Run {
                fire: 20,
                skipped: 1,
                cancel: true,
                next: Some(40)
            }
        );
        // It ended at 32: queue runs one job for the held ones (the newest
        // due); skip drops them and runs the fire that came after.
        for overlap in [Overlap::Queue, Overlap::Skip] {
            assert_eq!(
                turn(overlap, &[10, 20, 30, 40], 0, ended(32), after, Some(50)),
                run(40, 3),
                "{overlap:?}"
            );
        }
        assert_eq!(
            turn(Overlap::Skip, &[10, 20], 0, ended(32), after, Some(40)),
            Turn::Pass {
                skipped: 2,
                next: Some(40)
            }
        );
        assert_eq!(
            turn(Overlap::Skip, &[], 0, RUNNING, after, Some(40)),
            Turn::Pass {
                skipped: 0,
                next: Some(40)
            }
        );
        // Fires that came after it ended run in order.
        assert_eq!(
            turn(Overlap::Queue, &[40, 50], 0, ended(32), after, Some(60)),
            run(40, 0)
        );
    }

    /// CI's failure: a watched schedule's job (a cron of one second, a
    /// 2.5 s job) waited a second in the queue before it started, and
    /// every fire after it ran, each later than the last: a fire that
    /// came while the job waited took its turn, and so did every fire
    /// held behind that turn. A fire that comes while the last job waits
    /// to start overlaps it like one that comes while it runs.
    #[test]
    fn a_job_that_waited_to_start_makes_no_fire_wait_its_turn() {
        // Submitted at 290, started at 300 (fire 300 came while it
        // waited), ended at 325.
        assert_eq!(
            turn(Overlap::Skip, &[300], 0, RUNNING, after, Some(310)),
            Turn::Pass {
                skipped: 1,
                next: Some(310)
            }
        );
        assert_eq!(
            turn(
                Overlap::Queue,
                &[300, 310, 320],
                0,
                RUNNING,
                after,
                Some(330)
            ),
            Turn::Hold
        );
        // The look after it ended runs the fire that came since, under
        // both, and nothing is left due to be held again.
        for overlap in [Overlap::Skip, Overlap::Queue] {
            let fires: &[i64] = match overlap {
                Overlap::Skip => &[330],
                _ => &[300, 310, 320, 330],
            };
            let skipped = fires.len() as u64 - 1;
            assert_eq!(
                turn(overlap, fires, 0, ended(325), after, Some(340)),
                run(330, skipped),
                "{overlap:?}"
            );
        }
    }
}
