//! The scheduler: once a second it brings the bundles' `schedule:`s into
//! the queue's schedules (the registry snapshot the one reload pipeline
//! built decides them), then submits every due fire through admission —
//! as the schedule's owner key, or as the daemon for a bundle's — with the
//! fire's deterministic idempotency key, so several daemons sharing a
//! PostgreSQL store make one job of it. The compare-and-set of
//! `JobQueue::record_fire` lets one of them advance the schedule.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use super::super::AppState;
use super::super::admission::{Submission, admit};
use super::super::auth::Caller;
use super::super::error::ErrorCode;
use crate::access::Principal;
use crate::events::daemon::{DaemonEvent, StaleClaim};
use crate::queue::{FireRecord, JobId, NewJob, StoredSchedule};
use crate::schedule::{LastJob, Missed, Stored, Turn, due_fires, fire_key, turn};

const EVERY: Duration = Duration::from_secs(1);
/// How soon the scheduler looks again while fires wait their turn (a
/// catch-up, one job at a time): a one-second tick would never catch up a
/// cron of one second.
const CATCHING_UP: Duration = Duration::from_millis(100);
/// `source` of a schedule a bundle declares.
pub const FROM_BUNDLE: &str = "bundle";

/// A schedule's id as its owner names it: an API schedule is stored as
/// `KEY:ID` (ids are per key), a bundle's by the bundle's name.
pub fn own_id(schedule: &StoredSchedule) -> &str {
    match (&schedule.owner, schedule.source == FROM_BUNDLE) {
        (Some(owner), false) => schedule
            .id
            .strip_prefix(owner.as_str())
            .and_then(|rest| rest.strip_prefix(':'))
            .unwrap_or(&schedule.id),
        _ => &schedule.id,
    }
}

/// Runs until `shutdown`; `daemon` names this daemon in what it logs.
pub fn spawn(
    state: AppState,
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
            wait = match tick(&state, &mut synced).await {
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

/// What this daemon's scheduler last made of its bundles' schedules.
struct Synced {
    daemon: String,
    /// The snapshot generation it last synced.
    generation: Option<u64>,
    /// The bundles that declared a schedule then (`None` before the first
    /// sync): only a bundle in it that a reload removed, or whose
    /// `schedule:` a reload removed, takes its schedule away.
    declared: Option<BTreeSet<String>>,
}

/// One look at every schedule: whether fires were left waiting their turn
/// (a catch-up in progress).
async fn tick(state: &AppState, synced: &mut Synced) -> Result<bool, crate::queue::QueueError> {
    let snapshot = state.registry.snapshot();
    let reloaded = synced.generation != Some(snapshot.generation);
    sync_bundles(state, synced, reloaded).await?;
    synced.generation = Some(snapshot.generation);
    let now = crate::queue::millis(SystemTime::now());
    let mut waiting = false;
    for schedule in state.queue.schedules().await? {
        if schedule.paused || schedule.next_fire.is_none_or(|next| next > now) {
            continue;
        }
        waiting |= handle(state, schedule, now).await?;
    }
    Ok(waiting)
}

/// Makes the stored bundle schedules what this daemon's bundles declare,
/// without taking away what other daemons' bundles declare: a schedule
/// missing from the store is put back on every tick (a daemon that has
/// the bundle restores it); one whose spec differs is replaced only after
/// a reload of this daemon (its own new version wins; two daemons in a
/// rolling deploy do not replace each other's every second); and one is
/// removed only when a reload of this daemon removed its bundle or the
/// bundle's `schedule:` — a daemon that never had the bundle leaves it
/// alone. Each removal is a daemon event naming the schedule, this daemon
/// and why.
async fn sync_bundles(
    state: &AppState,
    synced: &mut Synced,
    reloaded: bool,
) -> Result<(), crate::queue::QueueError> {
    let snapshot = state.registry.snapshot();
    let stored = state.queue.schedules().await?;
    let now = crate::queue::millis(SystemTime::now());
    let mut declared = BTreeSet::new();
    for loaded in snapshot.loaded() {
        let bundle = &loaded.bundle;
        let Some(spec) = &bundle.raw.schedule else {
            continue;
        };
        declared.insert(bundle.name().to_string());
        let Ok(compiled) = spec.compile() else {
            continue; // refused by the bundle's load already
        };
        let text = stored_spec(bundle.name(), spec);
        let held = stored
            .iter()
            .find(|s| s.id == bundle.name() && s.source == FROM_BUNDLE);
        match held {
            Some(held) if held.spec == text || !reloaded => continue,
            _ => {}
        }
        // A key's schedule stored under the bundle's name (from before ids
        // were per key) keeps it: a bundle never replaces a schedule
        // somebody made over the API.
        if let Some(taken) = stored
            .iter()
            .find(|s| s.id == bundle.name() && s.source != FROM_BUNDLE)
        {
            if reloaded {
                tracing::warn!(
                    schedule = %taken.id,
                    owner = taken.owner.as_deref().unwrap_or_default(),
                    bundle = %bundle.name(),
                    "bundle {:?} declares a schedule, but a schedule made over the API has its id; the bundle's schedule is not stored (delete the other one, DELETE /v1/schedules/{}, to let it)",
                    bundle.name(),
                    taken.id
                );
            }
            continue;
        }
        state
            .queue
            .put_schedule(StoredSchedule {
                id: bundle.name().to_string(),
                source: FROM_BUNDLE.into(),
                spec: text,
                owner: None,
                paused: false,
                next_fire: crate::schedule::next_after(&compiled, now),
                last_fire: None,
                last_job: None,
                last_outcome: None,
                missed_fires: 0,
            })
            .await?;
    }
    if reloaded && let Some(before) = &synced.declared {
        for gone in before.difference(&declared) {
            let Some(schedule) = stored
                .iter()
                .find(|s| s.id == *gone && s.source == FROM_BUNDLE)
            else {
                continue;
            };
            let reason = match snapshot.bundle(gone) {
                Some(_) => "schedule_removed_from_bundle",
                None => "bundle_removed",
            };
            state.queue.delete_schedule(&schedule.id).await?;
            state.bus.publish(DaemonEvent::ScheduleRemoved {
                schedule: schedule.id.clone(),
                daemon: synced.daemon.clone(),
                reason,
            });
        }
    }
    synced.declared = Some(declared);
    Ok(())
}

/// A spec as the queue stores it (with its bundle).
pub fn stored_spec(bundle: &str, spec: &crate::schedule::ScheduleSpec) -> String {
    let stored = Stored {
        bundle: bundle.to_string(),
        spec: spec.clone(),
    };
    serde_json::to_string(&stored).unwrap_or_default()
}

/// Takes a schedule's turn: of its due fires (`missed` decides which are
/// kept), at most one is submitted, by its `overlap` policy
/// (`schedule::turn`), and the schedule is advanced past what was
/// submitted or dropped. What happened is counted once the store took the
/// record (the daemon that records a fire counts it).
/// Whether it left fires waiting their turn behind the one it submitted.
async fn handle(
    state: &AppState,
    schedule: StoredSchedule,
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
    let last = match due.fires.is_empty() {
        true => None,
        false => last_job(state, &schedule).await?,
    };
    let after = |fire| crate::schedule::next_after(&compiled, fire);
    let taken = turn(
        spec.overlap,
        &due.fires,
        last.as_ref().map(|l| l.1),
        after,
        due.next,
    );
    let (fire, skipped, next) = match taken {
        Turn::Hold => return Ok(false),
        Turn::Pass { skipped, next } => (None, skipped, next),
        Turn::Run {
            fire,
            skipped,
            cancel,
            next,
        } => {
            if cancel && let Some((last, _)) = &last {
                cancel_last(state, last).await?;
            }
            (Some(fire), skipped, next)
        }
    };
    let mut tally = vec![("missed", due.missed), ("skipped_overlap", skipped)];
    let mut last_job = None;
    if let Some(fire) = fire {
        match submit_fire(state, &schedule, &stored, fire).await {
            Ok(job) => {
                last_job = Some(job);
                tally.push(("submitted", 1));
            }
            Err(e) if e.code == ErrorCode::Unavailable || e.code == ErrorCode::Internal => {
                // The store is down: the fire stays due for the next tick.
                return Err(crate::queue::QueueError::Store {
                    path: format!("schedule {}", schedule.id),
                    detail: e.message,
                });
            }
            Err(e) => {
                tracing::warn!(schedule = %schedule.id, fire = %crate::queue::rfc3339(fire), error = %e.message, "scheduler: admission refused the fire; it is dropped, the next one comes on time");
                tally.push(("refused", 1));
            }
        }
    }
    // The last tick's outcome: what ran, else why nothing did.
    let last_outcome = ["submitted", "refused", "skipped_overlap", "missed"]
        .into_iter()
        .find(|outcome| tally.iter().any(|(o, n)| o == outcome && *n > 0))
        .unwrap_or("missed");
    let record = FireRecord {
        id: schedule.id.clone(),
        expected_next,
        next_fire: next,
        last_fire: fire,
        last_job,
        last_outcome: last_outcome.to_string(),
        missed: due.missed,
    };
    if !state.queue.record_fire(record).await? {
        // Another daemon handled the same fire and recorded (and counted)
        // it first.
        state.bus.publish(DaemonEvent::StaleSettle {
            claim: StaleClaim::ScheduleFire,
        });
        return Ok(false);
    }
    let waiting = fire.is_some() && next.is_some_and(|next| next <= now);
    for (outcome, count) in tally.into_iter().filter(|(_, n)| *n > 0) {
        let lateness = match (outcome, fire) {
            ("submitted", Some(fire)) => u64::try_from(now - fire).unwrap_or(0),
            _ => 0,
        };
        state.bus.publish(DaemonEvent::ScheduleFired {
            schedule: schedule.id.clone(),
            bundle: stored.bundle.clone(),
            outcome,
            count,
            lateness: Duration::from_millis(lateness),
        });
    }
    Ok(waiting)
}

/// Moves a paused schedule that is resumed without catching up past the
/// fires that came while it was paused: they are passed over, counted as
/// missed, and it fires again from now on.
pub async fn pass_over_paused_fires(
    state: &AppState,
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
    if state.queue.record_fire(record).await? && passed > 0 {
        state.bus.publish(DaemonEvent::ScheduleFired {
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
async fn cancel_last(state: &AppState, last: &JobId) -> Result<(), crate::queue::QueueError> {
    if let Some(changed) = state.queue.cancel(last).await?
        && let Some(event) = changed.final_event
    {
        state.bus.publish(DaemonEvent::JobEndedByRequest {
            event: Box::new(event),
        });
    }
    Ok(())
}

/// The stored spec and its compiled cron; `None` (logged) when it no
/// longer compiles (a time zone this binary lacks).
fn parsed(schedule: &StoredSchedule) -> Option<(Stored, (croner::Cron, chrono_tz::Tz))> {
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

/// The schedule's last job, when it was submitted, started and ended (if
/// it did).
async fn last_job(
    state: &AppState,
    schedule: &StoredSchedule,
) -> Result<Option<(JobId, LastJob)>, crate::queue::QueueError> {
    let Some(id) = &schedule.last_job else {
        return Ok(None);
    };
    let ms = |at: &str| humantime::parse_rfc3339(at).map(crate::queue::millis).ok();
    Ok(state
        .queue
        .get(&JobId::from(id.as_str()))
        .await?
        .map(|job| {
            let last = LastJob {
                submitted: ms(&job.created_at).unwrap_or(i64::MAX),
                started: job.started_at.as_deref().and_then(ms),
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

/// Who a schedule's fires are submitted as: its owner key as the key ring
/// now has it, or the daemon for a bundle's schedule.
pub fn submitter(state: &AppState, owner: Option<&str>) -> Option<Caller> {
    let principal = match owner {
        None => Arc::new(Principal::unrestricted(crate::access::SCHEDULER)),
        Some(name) => state.registry.snapshot().keys.by_name(name)?,
    };
    Some(Caller(principal))
}

/// Submits one fire through admission; the job's id.
async fn submit_fire(
    state: &AppState,
    schedule: &StoredSchedule,
    stored: &Stored,
    fire: i64,
) -> Result<String, super::super::error::ApiError> {
    let caller = submitter(state, schedule.owner.as_deref()).ok_or_else(|| {
        super::super::error::ApiError::new(
            ErrorCode::Forbidden,
            format!(
                "the API key {:?} that owns schedule {} is gone from the keys file; delete the schedule or make it again with another key",
                schedule.owner.as_deref().unwrap_or_default(),
                schedule.id
            ),
        )
    })?;
    let job = NewJob {
        bundle: stored.bundle.clone(),
        input: stored.spec.input.clone(),
        variables: stored.spec.variables.clone(),
        priority: stored.spec.priority,
        idempotency_key: Some(fire_key(own_id(schedule), fire)),
        ..Default::default()
    };
    let (job, _) = admit(state, &caller, Submission::new(job, "bundle")).await?;
    Ok(job.id.to_string())
}
