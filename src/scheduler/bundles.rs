//! A bundle's own schedule in the store: stored under the bundle's name
//! with source [`FROM_BUNDLE`], kept what this daemon's bundles declare
//! ([`sync_bundles`]), and a schedule's id as its owner names it.

use std::collections::BTreeSet;
use std::time::SystemTime;

use super::seam::Scheduler;
use crate::events::daemon::DaemonEvent;
use crate::queue::StoredSchedule;
use crate::schedule::Stored;

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

/// What this daemon's scheduler last made of its bundles' schedules.
pub(super) struct Synced {
    pub daemon: String,
    /// The snapshot generation it last synced.
    pub generation: Option<u64>,
    /// The bundles that declared a schedule then (`None` before the first
    /// sync): only a bundle in it that a reload removed, or whose
    /// `schedule:` a reload removed, takes its schedule away.
    pub declared: Option<BTreeSet<String>>,
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
pub(super) async fn sync_bundles(
    scheduler: &Scheduler,
    synced: &mut Synced,
    reloaded: bool,
) -> Result<(), crate::queue::QueueError> {
    let snapshot = scheduler.registry.snapshot();
    let stored = scheduler.queue.schedules().await?;
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
        let text = stored_spec(bundle.name(), spec, None);
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
        scheduler
            .queue
            .put_schedule(StoredSchedule::new(
                bundle.name().to_string(),
                FROM_BUNDLE.into(),
                text,
                None,
                crate::schedule::next_after(&compiled, now),
            ))
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
            scheduler.queue.delete_schedule(&schedule.id).await?;
            scheduler.bus.publish(DaemonEvent::ScheduleRemoved {
                schedule: schedule.id.clone(),
                daemon: synced.daemon.clone(),
                reason,
            });
        }
    }
    synced.declared = Some(declared);
    Ok(())
}

/// A spec as the queue stores it (with its bundle, and what a LangGraph
/// client sent with its cron).
pub fn stored_spec(
    bundle: &str,
    spec: &crate::schedule::ScheduleSpec,
    run_meta: Option<serde_json::Value>,
) -> String {
    let stored = Stored {
        bundle: bundle.to_string(),
        spec: spec.clone(),
        run_meta,
    };
    serde_json::to_string(&stored).unwrap_or_default()
}
