//! Whose turn it is: of a schedule's due fires ([`super::due_fires`]), the
//! one to run now, by its `overlap` policy — pure, so every daemon decides
//! the same. A schedule runs at most one job at a time whatever `missed`
//! says: due fires take their turns oldest first, one each time the last
//! job has ended (a catch-up after an outage too).

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

/// The schedule's last job, as its turn needs it: when it was submitted,
/// when it first started running and when it ended (`None`: it has not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastJob {
    pub submitted: i64,
    pub started: Option<i64>,
    pub ended: Option<i64>,
}

/// The turn of `fires` (due, oldest first) of a schedule whose last job
/// is `last`. `after` is the schedule's first fire after a given time;
/// `next` its first fire after now.
///
/// Fires already due when the last job was submitted (held by an outage,
/// a pause caught up, or their turn) run one after another, oldest first,
/// and so do fires that came while it waited to start (a fire submitted
/// as a daemon stopped waits out the outage queued: the fires of the
/// outage did not overlap a run). Fires that came due while the last job
/// ran follow `overlap`: `skip` drops them, `queue` holds them and runs
/// one job for them all (the newest) when it ends, `cancel_previous`
/// cancels the job and runs the newest (fires that came after the held
/// ones, within the same look, join them). Fires that came after it ended
/// run in order.
pub fn turn(
    overlap: Overlap,
    fires: &[i64],
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
    // Due before the last job was submitted, or before it started running.
    let waiting = oldest <= last.submitted || last.started.is_none_or(|started| oldest < started);
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
            Overlap::Skip if waiting => Turn::Hold,
            Overlap::Skip => Turn::Pass {
                skipped: count,
                next,
            },
        };
    };
    if waiting {
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

    /// Submitted at `submitted` and started at once.
    fn running(submitted: i64) -> Option<LastJob> {
        Some(LastJob {
            submitted,
            started: Some(submitted),
            ended: None,
        })
    }

    fn ended(submitted: i64, ended: i64) -> Option<LastJob> {
        Some(LastJob {
            submitted,
            started: Some(submitted),
            ended: Some(ended),
        })
    }

    /// Submitted at `submitted`, waited in the queue until `started`.
    fn waited(submitted: i64, started: Option<i64>, ended: Option<i64>) -> Option<LastJob> {
        Some(LastJob {
            submitted,
            started,
            ended,
        })
    }

    fn run(fire: i64, skipped: u64) -> Turn {
        Turn::Run {
            fire,
            skipped,
            cancel: false,
            next: after(fire),
        }
    }

    #[test]
    fn fires_waiting_their_turn_run_one_after_another_oldest_first() {
        for overlap in [Overlap::Skip, Overlap::Queue, Overlap::CancelPrevious] {
            // No job yet, or the last one ended before them (an outage).
            assert_eq!(
                turn(overlap, &[10, 20, 30], None, after, Some(40)),
                run(10, 0)
            );
            assert_eq!(
                turn(overlap, &[10, 20, 30], ended(1, 5), after, Some(40)),
                run(10, 0),
                "{overlap:?}"
            );
            // Already due when the last one was submitted: their turn.
            assert_eq!(
                turn(overlap, &[20, 30], ended(25, 26), after, Some(40)),
                run(20, 0)
            );
        }
        // While the last job runs they wait, under skip and queue alike.
        assert_eq!(
            turn(Overlap::Skip, &[20, 30], running(25), after, Some(40)),
            Turn::Hold
        );
        assert_eq!(
            turn(Overlap::Queue, &[20, 30], running(25), after, Some(40)),
            Turn::Hold
        );
    }

    #[test]
    fn fires_during_a_job_are_dropped_held_as_one_or_cancel_it() {
        // The last job was submitted at 5 and runs (or ran until 32).
        assert_eq!(
            turn(Overlap::Skip, &[10, 20], running(5), after, Some(40)),
            Turn::Pass {
                skipped: 2,
                next: Some(40)
            }
        );
        assert_eq!(
            turn(Overlap::Queue, &[10, 20], running(5), after, Some(40)),
            Turn::Hold
        );
        assert_eq!(
            turn(
                Overlap::CancelPrevious,
                &[10, 20],
                running(5),
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
                turn(overlap, &[10, 20, 30, 40], ended(5, 32), after, Some(50)),
                run(40, 3),
                "{overlap:?}"
            );
        }
        assert_eq!(
            turn(Overlap::Skip, &[10, 20], ended(5, 32), after, Some(40)),
            Turn::Pass {
                skipped: 2,
                next: Some(40)
            }
        );
        assert_eq!(
            turn(Overlap::Skip, &[], running(5), after, Some(40)),
            Turn::Pass {
                skipped: 0,
                next: Some(40)
            }
        );
    }

    /// A fire submitted as its daemon stopped waits out the outage queued:
    /// the fires of the outage came while it waited, not while it ran, so
    /// they take their turns one after another under every policy (`queue`
    /// once ran one job for them all, and the test of a short outage lost
    /// fires).
    #[test]
    fn fires_that_came_while_the_last_job_waited_to_start_take_their_turns() {
        for overlap in [Overlap::Skip, Overlap::Queue] {
            // Still queued, or running now after the wait: they wait.
            assert_eq!(
                turn(overlap, &[20, 30], waited(15, None, None), after, Some(40)),
                Turn::Hold,
                "{overlap:?}"
            );
            assert_eq!(
                turn(
                    overlap,
                    &[20, 30],
                    waited(15, Some(45), None),
                    after,
                    Some(50)
                ),
                Turn::Hold,
                "{overlap:?}"
            );
            // It started after them and has ended: the oldest runs.
            assert_eq!(
                turn(
                    overlap,
                    &[20, 30, 40],
                    waited(15, Some(45), Some(47)),
                    after,
                    Some(50)
                ),
                run(20, 0),
                "{overlap:?}"
            );
            // Cancelled before it ever started.
            assert_eq!(
                turn(
                    overlap,
                    &[20, 30],
                    waited(15, None, Some(33)),
                    after,
                    Some(40)
                ),
                run(20, 0),
                "{overlap:?}"
            );
        }
        // Fires after its start still overlap it.
        assert_eq!(
            turn(
                Overlap::Queue,
                &[20, 30, 40],
                waited(5, Some(12), Some(32)),
                after,
                Some(50)
            ),
            run(40, 2)
        );
    }
}
