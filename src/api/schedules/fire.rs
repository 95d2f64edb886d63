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
use crate::schedule::{Overlap, Stored, due_fires, fire_key};

const EVERY: Duration = Duration::from_secs(1);
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
        let mut ticks = tokio::time::interval(EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                _ = shutdown.cancelled() => return,
            }
            if let Err(e) = tick(&state, &mut synced).await {
                tracing::warn!(error = %e, "scheduler: cannot read or update the schedules; trying again in a second");
            }
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

async fn tick(state: &AppState, synced: &mut Synced) -> Result<(), crate::queue::QueueError> {
    let snapshot = state.registry.snapshot();
    let reloaded = synced.generation != Some(snapshot.generation);
    sync_bundles(state, synced, reloaded).await?;
    synced.generation = Some(snapshot.generation);
    let now = crate::queue::millis(SystemTime::now());
    for schedule in state.queue.schedules().await? {
        if schedule.paused || schedule.next_fire.is_none_or(|next| next > now) {
            continue;
        }
        handle(state, schedule, now).await?;
    }
    Ok(())
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

/// Submits a schedule's due fires by its policies and records them.
async fn handle(
    state: &AppState,
    schedule: StoredSchedule,
    now: i64,
) -> Result<(), crate::queue::QueueError> {
    let Some(expected_next) = schedule.next_fire else {
        return Ok(());
    };
    let Some((stored, compiled)) = parsed(&schedule) else {
        return Ok(());
    };
    let spec = &stored.spec;
    let due = due_fires(
        &compiled,
        spec.missed,
        spec.max_catch_up,
        expected_next,
        now,
    );
    let mut outcome = if due.passed_over {
        "missed"
    } else {
        "submitted"
    };
    let mut fires = due.fires.clone();
    if !fires.is_empty()
        && let Some(last) = live_last_job(state, &schedule).await?
    {
        match spec.overlap {
            Overlap::Skip => {
                fires.clear();
                outcome = "skipped_overlap";
            }
            // The fire waits for the last job: the schedule is not advanced.
            Overlap::Queue => return Ok(()),
            Overlap::CancelPrevious => {
                if let Some(changed) = state.queue.cancel(&last).await?
                    && let Some(event) = changed.final_event
                {
                    state.bus.publish(DaemonEvent::JobEndedByRequest {
                        event: Box::new(event),
                    });
                }
            }
        }
    }
    let mut last_job = None;
    for fire in &fires {
        match submit_fire(state, &schedule, &stored, *fire).await {
            Ok(job) => last_job = Some(job),
            Err(e) if e.code == ErrorCode::Unavailable || e.code == ErrorCode::Internal => {
                // The store is down: the fire stays due for the next tick.
                return Err(crate::queue::QueueError::Store {
                    path: format!("schedule {}", schedule.id),
                    detail: e.message,
                });
            }
            Err(e) => {
                tracing::warn!(schedule = %schedule.id, fire = %crate::queue::rfc3339(*fire), error = %e.message, "scheduler: admission refused the fire; it is dropped, the next one comes on time");
                outcome = "refused";
            }
        }
        state.bus.publish(DaemonEvent::ScheduleFired {
            schedule: schedule.id.clone(),
            bundle: stored.bundle.clone(),
            outcome,
            lateness: Duration::from_millis(u64::try_from(now - fire).unwrap_or(0)),
        });
    }
    if fires.is_empty() {
        state.bus.publish(DaemonEvent::ScheduleFired {
            schedule: schedule.id.clone(),
            bundle: stored.bundle.clone(),
            outcome,
            lateness: Duration::ZERO,
        });
    }
    let record = FireRecord {
        id: schedule.id.clone(),
        expected_next,
        next_fire: due.next,
        last_fire: due.fires.last().copied(),
        last_job,
        last_outcome: outcome.to_string(),
    };
    if !state.queue.record_fire(record).await? {
        // Another daemon handled the same fire and recorded it first.
        state.bus.publish(DaemonEvent::StaleSettle {
            claim: StaleClaim::ScheduleFire,
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

/// The schedule's last job, if it has not ended.
async fn live_last_job(
    state: &AppState,
    schedule: &StoredSchedule,
) -> Result<Option<JobId>, crate::queue::QueueError> {
    let Some(id) = &schedule.last_job else {
        return Ok(None);
    };
    let id = JobId::from(id.as_str());
    Ok(state
        .queue
        .get(&id)
        .await?
        .filter(|job| !job.state.is_terminal())
        .map(|job| job.id))
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
