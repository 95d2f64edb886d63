//! An A2A task's push configs: how many a task, a key and the daemon may
//! hold ([`PushCaps`]), adding one (a config replacing one of its id is
//! always let through), deleting one with what is still to be sent to it,
//! and recording a job's webhook and push configs as it is submitted.

use super::outbox::{A2A_PUSH, OutboxStatements, PushConfig, state_changed};
use super::statements::JobStatements;
use super::tx::{Fail, Res};
use super::{JobState, NewJob, QueueError};

/// How many A2A push configs may be held on tasks not ended: one task's,
/// one key's, every key's (`server.max_push_configs*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushCaps {
    pub per_task: usize,
    pub per_key: usize,
    pub all: usize,
}

/// Whose push configs are full.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushHolder {
    Task(String),
    Key(String),
    Daemon,
}

/// Refuses `new` more push configs of `owner`'s task `job_id` past `caps`
/// (a config that replaces one the task holds is not new).
pub(crate) async fn within_push_caps(
    tx: &mut (impl JobStatements + OutboxStatements),
    job_id: &str,
    owner: Option<&str>,
    new: usize,
    caps: &PushCaps,
) -> Res<()> {
    let full = |holder: PushHolder, held: i64, limit: usize| {
        Fail::Refused(QueueError::PushConfigsFull {
            holder,
            held: usize::try_from(held).unwrap_or(usize::MAX),
            limit,
        })
    };
    let held = |n: i64| usize::try_from(n).unwrap_or(usize::MAX).saturating_add(new);
    let task = tx.count_push_configs(Some(job_id), None).await?;
    if held(task) > caps.per_task {
        return Err(full(
            PushHolder::Task(job_id.to_string()),
            task,
            caps.per_task,
        ));
    }
    if let Some(owner) = owner {
        let key = tx.count_push_configs(None, Some(owner)).await?;
        if held(key) > caps.per_key {
            return Err(full(PushHolder::Key(owner.to_string()), key, caps.per_key));
        }
    }
    let all = tx.count_push_configs(None, None).await?;
    if held(all) > caps.all {
        return Err(full(PushHolder::Daemon, all, caps.all));
    }
    Ok(())
}

/// Adds a push config to a task within `caps` (one that replaces a config
/// the task holds by its id is always let through).
pub(crate) async fn put_push(
    tx: &mut (impl JobStatements + OutboxStatements),
    job_id: &str,
    config: &PushConfig,
    caps: &PushCaps,
) -> Res<()> {
    let replaces = tx
        .push_configs(job_id)
        .await?
        .iter()
        .any(|held| held.id == config.id);
    if !replaces {
        let owner = tx.job(job_id, false).await?.and_then(|job| job.owner);
        within_push_caps(tx, job_id, owner.as_deref(), 1, caps).await?;
    }
    let now = tx.now().await?;
    tx.put_push_config(job_id, config, now).await
}

/// Records where a job's changes go as it is submitted: its webhook and
/// its push configs; a job pushed to is told of its first state too.
pub(crate) async fn submitted(
    tx: &mut (impl JobStatements + OutboxStatements),
    job_id: &str,
    job: &NewJob,
) -> Res<()> {
    if let Some(url) = &job.webhook {
        tx.set_job_webhook(job_id, url).await?;
    }
    if job.push.is_empty() {
        return Ok(());
    }
    if let Some(caps) = &job.push_caps {
        within_push_caps(tx, job_id, job.owner.as_deref(), job.push.len(), caps).await?;
    }
    let now = tx.now().await?;
    for config in &job.push {
        tx.put_push_config(job_id, config, now).await?;
    }
    state_changed(tx, job_id, JobState::Queued).await
}

/// Deletes a push config and what is still to be sent to it: no push
/// follows the deletion.
pub(crate) async fn delete_push(
    tx: &mut (impl JobStatements + OutboxStatements),
    job_id: &str,
    id: &str,
) -> Res<bool> {
    let Some(config) = tx
        .push_configs(job_id)
        .await?
        .into_iter()
        .find(|c| c.id == id)
    else {
        return Ok(false);
    };
    tx.delete_push_config(job_id, id).await?;
    let others = tx.push_configs(job_id).await?;
    if !others.iter().any(|c| c.url == config.url) {
        tx.drop_pending(job_id, A2A_PUSH, &config.url).await?;
    }
    Ok(true)
}
