//! Moving a bundle's waiting or parked jobs to its current version: each
//! job pinned to other content (queued with a pin, `needs_attention`,
//! `awaiting_approval`) moves only when its journal replays on the current
//! content ([`super::compat::check`]); the others stay where they are, with
//! the reason. The move itself is one guarded write per job
//! ([`JobQueue::move_version`]): a job that started running meanwhile stays.

use std::sync::Arc;

use serde::Serialize;

use super::compat;
use crate::bundle::OnNewVersion;
use crate::queue::{Job, JobFilter, JobId, JobQueue, JobState, QueueError};
use crate::registry::{LoadedBundle, Registry};

/// The states a job can move in: it holds no worker.
pub const MOVABLE: [JobState; 3] = [
    JobState::Queued,
    JobState::NeedsAttention,
    JobState::AwaitingApproval,
];

/// Jobs one plan looks at, at most (the rest are left for the next one).
pub const MAX_JOBS: usize = 10_000;

/// One job of a plan: where it is pinned now, and why it cannot move.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct JobMove {
    pub job_id: JobId,
    pub state: JobState,
    pub from_version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What moving a bundle's jobs does (or did): the jobs that move and those
/// that cannot, each with its reason.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "MigrationPlan")]
pub struct Plan {
    pub bundle: String,
    pub version: String,
    pub identity: String,
    pub dry_run: bool,
    pub moves: Vec<JobMove>,
    pub refused: Vec<JobMove>,
}

#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("no loaded bundle named {0:?}: its jobs have no current version to move to")]
    NotLoaded(String),
    #[error(
        "{state} is not a state a job can move in (queued, needs_attention, awaiting_approval)"
    )]
    State { state: JobState },
    #[error("reading the jobs of bundle {bundle:?}: {source}")]
    Queue { bundle: String, source: QueueError },
}

/// The plan for `bundle`'s jobs in `states` (all movable ones when empty);
/// with `dry_run` nothing moves.
pub async fn migrate(
    queue: &dyn JobQueue,
    registry: &Arc<Registry>,
    bundle: &str,
    states: &[JobState],
    owner: Option<&str>,
    dry_run: bool,
) -> Result<Plan, MigrateError> {
    if let Some(state) = states.iter().find(|s| !MOVABLE.contains(s)) {
        return Err(MigrateError::State { state: *state });
    }
    let current = registry
        .snapshot()
        .bundle(bundle)
        .cloned()
        .ok_or_else(|| MigrateError::NotLoaded(bundle.to_string()))?;
    let states = if states.is_empty() {
        &MOVABLE[..]
    } else {
        states
    };
    let queue_err = |source| MigrateError::Queue {
        bundle: bundle.to_string(),
        source,
    };
    let mut plan = Plan {
        bundle: bundle.to_string(),
        version: current.version().to_string(),
        identity: current.identity.as_str().to_string(),
        dry_run,
        moves: Vec::new(),
        refused: Vec::new(),
    };
    for job in pinned_elsewhere(queue, bundle, states, owner, &current)
        .await
        .map_err(queue_err)?
    {
        let mut entry = JobMove {
            job_id: job.id.clone(),
            state: job.state,
            from_version: job.bundle_version.clone().unwrap_or_default(),
            reason: None,
        };
        match replays(queue, registry, &job, &current).await {
            Ok(()) if dry_run => plan.moves.push(entry),
            Ok(()) => match moved(queue, &job, &current).await.map_err(queue_err)? {
                true => plan.moves.push(entry),
                false => {
                    entry.reason =
                        Some("it started running, ended or moved before it could move".to_string());
                    plan.refused.push(entry);
                }
            },
            Err(reason) => {
                entry.reason = Some(reason.to_string());
                plan.refused.push(entry);
            }
        }
    }
    Ok(plan)
}

/// After a reload: moves the jobs of every bundle in `changed` that
/// declares `on_new_version: move`; the plans of those that had jobs.
pub async fn follow_new_versions(
    queue: &dyn JobQueue,
    registry: &Arc<Registry>,
    changed: &[String],
) -> Vec<Result<Plan, MigrateError>> {
    let mut plans = Vec::new();
    for name in changed {
        let moves = registry
            .snapshot()
            .bundle(name)
            .is_some_and(|b| b.bundle.raw.on_new_version == OnNewVersion::Move);
        if !moves {
            continue;
        }
        // The operator's `on_new_version: move`: every key's jobs.
        let plan = migrate(queue, registry, name, &[], None, false).await;
        if plan
            .as_ref()
            .is_ok_and(|p| p.moves.is_empty() && p.refused.is_empty())
        {
            continue;
        }
        plans.push(plan);
    }
    plans
}

/// The bundle's jobs in `states` pinned to other content than `current`
/// (a queued job without a pin runs the current version anyway).
async fn pinned_elsewhere(
    queue: &dyn JobQueue,
    bundle: &str,
    states: &[JobState],
    owner: Option<&str>,
    current: &LoadedBundle,
) -> Result<Vec<Job>, QueueError> {
    let mut jobs = Vec::new();
    for state in states {
        let mut cursor = None;
        loop {
            let page = queue
                .list(JobFilter {
                    state: Some(*state),
                    bundle: Some(bundle.to_string()),
                    owner: owner.map(str::to_string),
                    limit: 500,
                    cursor,
                    ..Default::default()
                })
                .await?;
            jobs.extend(page.jobs.into_iter().filter(|job| {
                job.bundle_digest
                    .as_deref()
                    .is_some_and(|pinned| pinned != current.identity.as_str())
            }));
            cursor = page.next_cursor;
            if cursor.is_none() || jobs.len() >= MAX_JOBS {
                break;
            }
        }
    }
    jobs.truncate(MAX_JOBS);
    Ok(jobs)
}

/// Why a job stays on the version it is pinned to (the reason its entry in
/// the move plan shows).
#[derive(Debug, thiserror::Error)]
enum Unmovable {
    #[error("the content it is pinned to cannot be loaded to compare: {0}")]
    PinUnloadable(crate::registry::Unresolved),
    #[error("its journal cannot be read: {0}")]
    JournalUnreadable(String),
    #[error("{0}")]
    Incompatible(#[from] compat::Incompatible),
}

/// Whether `job`'s journal replays on `current`, or why not.
async fn replays(
    queue: &dyn JobQueue,
    registry: &Arc<Registry>,
    job: &Job,
    current: &LoadedBundle,
) -> Result<(), Unmovable> {
    let pinned = job
        .bundle_digest
        .as_deref()
        .map(crate::registry::BundleIdentity::recorded);
    let from = registry
        .resolve(&job.bundle, pinned.as_ref())
        .await
        .map_err(Unmovable::PinUnloadable)?;
    let journal = queue
        .journal(&job.id)
        .await
        .map_err(|e| Unmovable::JournalUnreadable(e.to_string()))?;
    Ok(compat::check(&from, current, &journal)?)
}

async fn moved(
    queue: &dyn JobQueue,
    job: &Job,
    current: &LoadedBundle,
) -> Result<bool, QueueError> {
    let from = job.bundle_digest.as_deref().unwrap_or_default();
    let moved = queue
        .move_version(&job.id, from, current.version(), current.identity.as_str())
        .await?;
    Ok(moved.is_some())
}
