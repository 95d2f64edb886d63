//! One schedule's turn ([`handle`]): of its due fires (`missed` decides
//! which are kept), at most one is submitted through admission, by its
//! `overlap` policy, and the schedule is advanced past what was submitted
//! or dropped; and a paused schedule resumed without catching up passed
//! over its fires ([`pass_over_paused_fires`]).

use std::time::{Duration, SystemTime};

use super::bundles::own_id;
use super::seam::Scheduler;
use crate::admit::NotAdmitted;
use crate::events::daemon::{DaemonBus, DaemonEvent, StaleClaim};
use crate::queue::{FireRecord, JobId, JobQueue, NewJob, StoredSchedule};
use crate::schedule::{Due, LastJob, Missed, Stored, Turn, due_fires, fire_key, turn};

/// Takes a schedule's turn: of its due fires (`missed` decides which are
/// kept), at most one is submitted, by its `overlap` policy
/// (`schedule::turn`), and the schedule is advanced past what was
/// submitted or dropped. What happened is counted once the store took the
/// record (the daemon that records a fire counts it). `watched_since`:
/// since when this daemon's scheduler has looked at it unpaused (fires
/// from before take their turns). Whether it left fires waiting their turn
/// behind the one it submitted.
pub(super) async fn handle(
    scheduler: &Scheduler,
    schedule: StoredSchedule,
    watched_since: i64,
    now: i64,
) -> Result<bool, crate::queue::QueueError> {
    let Some(expected_next) = schedule.next_fire else {
        return Ok(false);
    };
    let Some((stored, compiled)) = parsed(&schedule) else {
        return Ok(false);
    };
    let spec = &stored.spec;
    let due = due_fires(
        &compiled,
        spec.missed,
        spec.max_catch_up,
        expected_next,
        now,
    );
    let Some(taken) = take_turn(
        scheduler,
        &schedule,
        &stored,
        &compiled,
        &due,
        watched_since,
    )
    .await?
    else {
        return Ok(false);
    };
    let mut tally = vec![("missed", due.missed), ("skipped_overlap", taken.skipped)];
    let last_job = match taken.fire {
        Some(fire) => submit_counted(scheduler, &schedule, &stored, fire, &mut tally).await?,
        None => None,
    };
    let record = FireRecord {
        id: schedule.id.clone(),
        expected_next,
        next_fire: taken.next,
        last_fire: taken.fire,
        last_job,
        last_outcome: last_outcome(&tally).to_string(),
        missed: due.missed,
    };
    if !scheduler.queue.record_fire(record).await? {
        // Another daemon handled the same fire and recorded (and counted)
        // it first.
        scheduler.bus.publish(DaemonEvent::StaleSettle {
            claim: StaleClaim::ScheduleFire,
        });
        return Ok(false);
    }
    announce(
        &scheduler.bus,
        &schedule.id,
        &stored.bundle,
        tally,
        taken.fire,
        now,
    );
    Ok(taken.fire.is_some() && taken.next.is_some_and(|next| next <= now))
}

/// What a turn takes: the fire to submit (if any), the fires it passed
/// over for overlap, and the schedule's next unhandled fire after it.
struct Taken {
    fire: Option<i64>,
    skipped: u64,
    next: Option<i64>,
}

/// The turn the schedule's `overlap` policy gives its due fires, after its
/// last job (cancelled first when the policy says so); `None` holds them
/// due while the last job runs.
async fn take_turn(
    scheduler: &Scheduler,
    schedule: &StoredSchedule,
    stored: &Stored,
    compiled: &crate::schedule::Compiled,
    due: &Due,
    watched_since: i64,
) -> Result<Option<Taken>, crate::queue::QueueError> {
    let last = match due.fires.is_empty() {
        true => None,
        false => last_job(scheduler, schedule).await?,
    };
    let after = |fire| crate::schedule::next_after(compiled, fire);
    let taken = turn(
        stored.spec.overlap,
        &due.fires,
        watched_since,
        last.as_ref().map(|l| l.1),
        after,
        due.next,
    );
    Ok(match taken {
        Turn::Hold => None,
        Turn::Pass { skipped, next } => Some(Taken {
            fire: None,
            skipped,
            next,
        }),
        Turn::Run {
            fire,
            skipped,
            cancel,
            next,
        } => {
            if cancel && let Some((last, _)) = &last {
                cancel_last(scheduler, last).await?;
            }
            Some(Taken {
                fire: Some(fire),
                skipped,
                next,
            })
        }
    })
}

/// Submits the turn's fire through admission and counts it in `tally`:
/// the job's id when submitted; a refusal drops the fire (logged), and a
/// store that is down is an error, so the fire stays due for the next tick.
async fn submit_counted(
    scheduler: &Scheduler,
    schedule: &StoredSchedule,
    stored: &Stored,
    fire: i64,
    tally: &mut Vec<(&'static str, u64)>,
) -> Result<Option<String>, crate::queue::QueueError> {
    match submit_fire(scheduler, schedule, stored, fire).await {
        Ok(job) => {
            tally.push(("submitted", 1));
            Ok(Some(job))
        }
        Err(NotAdmitted::Unavailable(detail)) => {
            // The store is down: the fire stays due for the next tick.
            Err(crate::queue::QueueError::Store {
                path: format!("schedule {}", schedule.id),
                detail,
            })
        }
        // A fire the key's quota refused is dropped like any refusal: the
        // next one comes on time, and a schedule never queues up behind it.
        Err(NotAdmitted::Refused(why) | NotAdmitted::Throttled(why)) => {
            tracing::warn!(schedule = %schedule.id, fire = %crate::queue::rfc3339(fire), error = %why, "scheduler: admission refused the fire; it is dropped, the next one comes on time");
            tally.push(("refused", 1));
            Ok(None)
        }
    }
}

/// The last tick's outcome: what ran, else why nothing did.
fn last_outcome(tally: &[(&'static str, u64)]) -> &'static str {
    ["submitted", "refused", "skipped_overlap", "missed"]
        .into_iter()
        .find(|outcome| tally.iter().any(|(o, n)| o == outcome && *n > 0))
        .unwrap_or("missed")
}

/// Tells the daemon's bus how a recorded tick went: one event for each
/// outcome it had (a submitted fire with its lateness at `now`).
fn announce(
    bus: &DaemonBus,
    schedule: &str,
    bundle: &str,
    tally: Vec<(&'static str, u64)>,
    fire: Option<i64>,
    now: i64,
) {
    for (outcome, count) in tally.into_iter().filter(|(_, n)| *n > 0) {
        let lateness = match (outcome, fire) {
            ("submitted", Some(fire)) => u64::try_from(now - fire).unwrap_or(0),
            _ => 0,
        };
        bus.publish(DaemonEvent::ScheduleFired {
            schedule: schedule.to_string(),
            bundle: bundle.to_string(),
            outcome,
            count,
            lateness: Duration::from_millis(lateness),
        });
    }
}

/// Moves a paused schedule that is resumed without catching up past the
/// fires that came while it was paused: they are passed over, counted as
/// missed, and it fires again from now on.
pub async fn pass_over_paused_fires(
    queue: &dyn JobQueue,
    bus: &DaemonBus,
    schedule: &StoredSchedule,
) -> Result<(), crate::queue::QueueError> {
    let now = crate::queue::millis(SystemTime::now());
    let (Some(expected_next), Some((stored, compiled))) = (schedule.next_fire, parsed(schedule))
    else {
        return Ok(());
    };
    if expected_next > now {
        return Ok(());
    }
    let all = due_fires(&compiled, Missed::Skip, 1, expected_next, now);
    let passed = all.fires.len() as u64 + all.missed;
    let record = FireRecord {
        id: schedule.id.clone(),
        expected_next,
        next_fire: all.next,
        last_fire: None,
        last_job: None,
        last_outcome: "missed".into(),
        missed: passed,
    };
    if queue.record_fire(record).await? && passed > 0 {
        bus.publish(DaemonEvent::ScheduleFired {
            schedule: schedule.id.clone(),
            bundle: stored.bundle,
            outcome: "missed",
            count: passed,
            lateness: Duration::ZERO,
        });
    }
    Ok(())
}

/// Cancels the schedule's last job (`overlap: cancel_previous`).
async fn cancel_last(scheduler: &Scheduler, last: &JobId) -> Result<(), crate::queue::QueueError> {
    if let Some(changed) = scheduler.queue.cancel(last).await?
        && let Some(event) = changed.final_event
    {
        scheduler.bus.publish(DaemonEvent::JobEndedByRequest {
            event: Box::new(event),
        });
    }
    Ok(())
}

/// The stored spec and its compiled cron; `None` (logged) when it no
/// longer compiles (a time zone this binary lacks).
fn parsed(schedule: &StoredSchedule) -> Option<(Stored, crate::schedule::Compiled)> {
    let stored: Stored = serde_json::from_str(&schedule.spec)
        .inspect_err(|e| tracing::warn!(schedule = %schedule.id, error = %e, "scheduler: the stored spec cannot be read; delete the schedule and make it again"))
        .ok()?;
    let compiled = stored
        .spec
        .compile()
        .inspect_err(|e| tracing::warn!(schedule = %schedule.id, error = %e, "scheduler: the stored spec is not valid; delete the schedule and make it again"))
        .ok()?;
    Some((stored, compiled))
}

/// The schedule's last job, and when it ended (if it did).
async fn last_job(
    scheduler: &Scheduler,
    schedule: &StoredSchedule,
) -> Result<Option<(JobId, LastJob)>, crate::queue::QueueError> {
    let Some(id) = &schedule.last_job else {
        return Ok(None);
    };
    let ms = |at: &str| humantime::parse_rfc3339(at).map(crate::queue::millis).ok();
    Ok(scheduler
        .queue
        .get(&JobId::from(id.as_str()))
        .await?
        .map(|job| {
            let last = LastJob {
                // A job that ended at an unreadable time ended now.
                ended: job.state.is_terminal().then(|| {
                    job.finished_at
                        .as_deref()
                        .and_then(ms)
                        .unwrap_or_else(|| crate::queue::millis(SystemTime::now()))
                }),
            };
            (job.id, last)
        }))
}

/// The job a fire of `stored` submits (and a run outside the cron): the
/// spec's input, variables, priority, conversation and webhook, and the
/// LangGraph client's run settings when it is a cron.
pub fn fire_job(stored: &Stored) -> NewJob {
    NewJob {
        bundle: stored.bundle.clone(),
        input: stored.spec.input.clone(),
        variables: stored.spec.variables.clone(),
        priority: stored.spec.priority,
        conversation_id: stored.spec.conversation.clone(),
        webhook: stored.spec.webhook.clone(),
        run_meta: stored.run_meta.clone(),
        ..Default::default()
    }
}

/// Submits one fire through admission; the job's id.
async fn submit_fire(
    scheduler: &Scheduler,
    schedule: &StoredSchedule,
    stored: &Stored,
    fire: i64,
) -> Result<String, NotAdmitted> {
    let job = NewJob {
        idempotency_key: Some(fire_key(own_id(schedule), fire)),
        ..fire_job(stored)
    };
    let id = scheduler
        .admission
        .submit(schedule.owner.as_deref(), job)
        .await?;
    Ok(id.to_string())
}
