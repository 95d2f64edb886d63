//! What the queue answers without changing a job — a page of jobs, counts
//! by state, an owner's load for its quotas — and what it deletes: finished
//! jobs past retention, a conversation's finished turns, one finished job
//! its owner deletes.

use super::transaction::Tx;
use super::tx::{Conversation, Fail, Res};
use super::*;

/// What an API key's jobs hold and spent: for its quotas at admission.
pub(crate) async fn owner_load(tx: &mut impl Tx, owner: &str, since: i64) -> Res<OwnerLoad> {
    let (in_flight, spend) = tx.owner_load(owner, since).await?;
    Ok(OwnerLoad {
        in_flight: in_flight.max(0) as u64,
        spend: spend.day(),
    })
}

/// A page of jobs in the filter's order (`JobOrder`).
pub(crate) async fn list(tx: &mut impl Tx, filter: &JobFilter) -> Res<Page> {
    let rows = tx
        .list(filter, super::listing::page_limit(filter.limit) + 1)
        .await?;
    super::listing::paged_jobs(rows, filter.limit, filter.order).map_err(Fail::Refused)
}

/// How many jobs the filter matches on every page: its cursor, limit and
/// order aside.
pub(crate) async fn count(tx: &mut impl Tx, filter: &JobFilter) -> Res<u64> {
    let every_page = JobFilter {
        cursor: None,
        ..filter.clone()
    };
    Ok(tx.count_jobs(&every_page).await?.max(0) as u64)
}

/// (bundle, state, count) of every job, or only `owner`'s.
pub(crate) async fn counts_by_state(
    tx: &mut impl Tx,
    owner: Option<&str>,
) -> Res<Vec<(String, JobState, u64)>> {
    let rows = tx.counts_by_state(owner).await?;
    Ok(rows
        .into_iter()
        .filter_map(|(bundle, state, n)| {
            JobState::parse(&state).map(|state| (bundle, state, n.max(0) as u64))
        })
        .collect())
}

/// The live gauges: one indexed count per live state.
pub(crate) async fn live_counts(tx: &mut impl Tx) -> Res<Vec<(JobState, u64)>> {
    let mut out = Vec::new();
    for state in JobState::LIVE {
        out.push((state, tx.count_in_state(state).await?.max(0) as u64));
    }
    Ok(out)
}

/// Retention: deletes up to `limit` jobs finished before `cutoff` (ms).
pub(crate) async fn purge_finished(tx: &mut impl Tx, cutoff: i64, limit: usize) -> Res<usize> {
    let ids = tx.finished_before(cutoff, limit).await?;
    tx.delete_jobs(&ids).await?;
    Ok(ids.len())
}

/// What deleting one job found.
#[derive(Debug, Clone)]
pub enum Deletion {
    /// The job had ended: it is gone, with its events, journal and
    /// deliveries (as it was, for the answer).
    Deleted(Box<Job>),
    /// The job has not ended (queued, running or parked): nothing changed.
    Unfinished(Box<Job>),
    /// No such job.
    Missing,
}

/// Deletes job `id` if it has ended. Its row is locked first, so a job
/// that ends meanwhile is either deleted after its end committed or found
/// unfinished.
pub(crate) async fn delete_finished(tx: &mut impl Tx, id: &JobId) -> Res<Deletion> {
    let Some(job) = tx.job(id.as_str(), true).await? else {
        return Ok(Deletion::Missing);
    };
    if !job.state.is_terminal() {
        return Ok(Deletion::Unfinished(Box::new(job)));
    }
    tx.delete_jobs(&[id.to_string()]).await?;
    Ok(Deletion::Deleted(Box::new(job)))
}

/// Deletes a conversation's finished jobs; (deleted, left unfinished).
/// With none left the conversation's owner row goes too (the id is free to
/// start again). The row is locked first, so a submit continuing the
/// conversation meanwhile either committed its turn (counted as left) or
/// waits and claims the id again.
pub(crate) async fn forget_conversation(
    tx: &mut impl Tx,
    conversation: &Conversation<'_>,
) -> Res<(usize, usize)> {
    tx.has_conversation(conversation, true).await?;
    let ids = tx.finished_in_conversation(conversation).await?;
    tx.delete_jobs(&ids).await?;
    let left = tx.count_in_conversation(conversation).await?;
    if left <= 0 {
        tx.delete_conversation(conversation).await?;
    }
    Ok((ids.len(), left.max(0) as usize))
}
