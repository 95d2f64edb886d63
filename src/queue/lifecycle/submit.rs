//! A job's way in, written once for every dialect: one submit or a batch,
//! each job inserted with what goes beside it (a fork's journal, its push
//! configs), its conversation claimed for its owner and its share of the
//! daily budgets reserved, in the write that queues it; a key already
//! used answers the job it names.

use crate::queue::push_configs;
use crate::queue::reservations::{DayLedger, Reserved};
use crate::queue::transaction::Tx;
use crate::queue::tx::{Change, Conversation, Fail, Res, TurnAhead, stored_key};
use crate::queue::*;

/// Inserts a job, or finds the one its idempotency key already names.
pub(crate) async fn submit(tx: &mut impl Tx, id: &JobId, job: &NewJob) -> Res<(Job, bool)> {
    let now = tx.now().await?;
    let key = job_key(job);
    let mut ledger = DayLedger::new(now);
    ledger.lock(tx, std::iter::once(job)).await?;
    claim_conversation(tx, job, now).await?;
    // A job already queued under its key reserves nothing again.
    let queued = match &key {
        Some(key) if job.daily.is_some() => tx.job_by_key(key).await?,
        _ => None,
    };
    if let Some(queued) = queued {
        return Ok((queued, false));
    }
    let reserved = ledger.reserve(tx, 0, job).await?;
    let new = reserved.as_ref().map_or(job, |r| &r.job);
    let ahead = turn_ahead(tx, new).await?;
    let held;
    let new = match ahead {
        Some(_) => {
            held = NewJob {
                run_at: Some(SystemTime::UNIX_EPOCH + Duration::from_millis(HELD_RUN_AT_MS as u64)),
                ..new.clone()
            };
            &held
        }
        None => new,
    };
    if let Some(created) = tx.insert_jobs(&[(id, new)], now).await?.pop() {
        if let Some(r) = &reserved {
            tx.set_reservation(id.as_str(), r.tokens, r.cost_micros)
                .await?;
        }
        if let Some(ahead) = &ahead {
            tx.set_after(id.as_str(), ahead).await?;
        }
        write_beside(tx, id, new).await?;
        tx.changed(Change::Runnable, &created.id);
        return Ok((created, true));
    }
    // The key is taken: a concurrent submit with the same key waited for the
    // first and inserted nothing.
    let existing = match &key {
        Some(key) => tx.job_by_key(key).await?,
        None => None,
    };
    existing.map(|job| (job, false)).ok_or_else(|| {
        Fail::Db("the job with this idempotency key vanished during the submit".into())
    })
}

/// Claims the conversation `job` continues for its owner, in the write
/// that inserts it: a conversation is its key's (two keys' conversations of
/// one id are two), so a claim never fails; the row stays locked until
/// commit, so a concurrent forget cannot delete it under a new turn.
async fn claim_conversation(tx: &mut impl Tx, job: &NewJob, now: i64) -> Res<()> {
    let Some(id) = &job.conversation_id else {
        return Ok(());
    };
    let conversation = Conversation::of(job.owner.as_deref(), id);
    tx.claim_conversation(&conversation, now).await?;
    if !tx.has_conversation(&conversation, true).await? {
        // Forgotten between the claim and the read: the writer runs the
        // write again, and its claim then makes the row.
        return Err(Fail::Conflict(format!(
            "conversation {id:?} was forgotten during the submit"
        )));
    }
    Ok(())
}

/// The turn a job waiting behind its conversation's turns
/// ([`NewJob::after_turns`]) waits for, marked followed in this write;
/// `None` when the conversation has no turn queued or running (the job is
/// queued as any other) or the job does not wait.
async fn turn_ahead(tx: &mut impl Tx, job: &NewJob) -> Res<Option<String>> {
    let Some(id) = job.conversation_id.as_deref().filter(|_| job.after_turns) else {
        return Ok(None);
    };
    let conversation = Conversation::of(job.owner.as_deref(), id);
    match tx.follow_newest_turn(&conversation).await? {
        TurnAhead::Idle => Ok(None),
        TurnAhead::Followed(turn) => Ok(Some(turn)),
        TurnAhead::Moved => Err(Fail::Conflict(format!(
            "the newest turn of conversation {id:?} ended during the submit"
        ))),
    }
}

/// What a new job's insert writes beside its row, in the same transaction:
/// a fork's copied journal, the job's webhook and push configs.
async fn write_beside(tx: &mut impl Tx, id: &JobId, job: &NewJob) -> Res<()> {
    seed_journal(tx, id, job).await?;
    push_configs::submitted(tx, id.as_str(), job).await
}

/// Writes a fork's seeded journal with its job (attempt 0: before any
/// attempt of its own).
async fn seed_journal(tx: &mut impl Tx, id: &JobId, job: &NewJob) -> Res<()> {
    let Some(seed) = &job.fork else {
        return Ok(());
    };
    for entry in &seed.journal {
        tx.put_step(id.as_str(), entry, 0).await?;
    }
    Ok(())
}

/// A job's idempotency key as stored (namespaced by its owner), the order
/// keyed inserts lock in.
fn job_key(job: &NewJob) -> Option<String> {
    job.idempotency_key
        .as_deref()
        .map(|key| stored_key(job.owner.as_deref(), key))
}

/// Rows one multi-row insert carries at most ([`ROW_VALUES`] values each, well under
/// both dialects' limits on bound values).
const INSERT_CHUNK: usize = 500;

/// Inserts many jobs, in chunks of multi-row inserts; each job is answered
/// as [`submit`] answers. A key already used for other content (by an
/// earlier job or one earlier in the batch) refuses the whole batch.
///
/// The jobs go in sorted by their stored idempotency key, whatever order
/// they came in: inserting a key waits for a concurrent write holding the
/// same key, so two batches with the same keys (on two daemons) wait for
/// each other in one order, never in a cycle.
pub(crate) async fn submit_many(
    tx: &mut impl Tx,
    jobs: &[(JobId, NewJob)],
) -> Res<Vec<(Job, bool)>> {
    // Which of two turns of one batch runs first is not the batch's to say.
    if let Some(index) = jobs.iter().position(|(_, job)| job.after_turns) {
        return Err(Fail::Refused(QueueError::HeldInBatch { index }));
    }
    let now = tx.now().await?;
    let mut ledger = DayLedger::new(now);
    ledger.lock(tx, jobs.iter().map(|(_, job)| job)).await?;
    // The conversations first, each once, in one order (as the keys).
    let mut claims: Vec<(Conversation<'_>, &NewJob)> = jobs
        .iter()
        .filter_map(|(_, job)| {
            let id = job.conversation_id.as_deref()?;
            Some((Conversation::of(job.owner.as_deref(), id), job))
        })
        .collect();
    claims.sort_by(|a, b| (a.0.owner, a.0.id).cmp(&(b.0.owner, b.0.id)));
    claims.dedup_by(|a, b| a.0 == b.0);
    for (_, job) in claims {
        claim_conversation(tx, job, now).await?;
    }
    let reserved = reserve_batch(tx, &mut ledger, jobs).await?;
    let mut by_key: Vec<(Option<String>, &JobId, &NewJob, Option<&Reserved>)> = jobs
        .iter()
        .zip(&reserved)
        .map(|((id, job), r)| {
            let queued = r.as_ref().map_or(job, |r| &r.job);
            (job_key(job), id, queued, r.as_ref())
        })
        .collect();
    by_key.sort_by(|a, b| a.0.cmp(&b.0));
    let mut inserted = std::collections::HashMap::new();
    for chunk in by_key.chunks(INSERT_CHUNK) {
        let rows: Vec<(&JobId, &NewJob)> =
            chunk.iter().map(|(_, id, job, _)| (*id, *job)).collect();
        for job in tx.insert_jobs(&rows, now).await? {
            if let Some((_, id, new, r)) = chunk.iter().find(|(_, id, ..)| **id == job.id) {
                if let Some(r) = r {
                    tx.set_reservation(id.as_str(), r.tokens, r.cost_micros)
                        .await?;
                }
                write_beside(tx, id, new).await?;
            }
            tx.changed(Change::Runnable, &job.id);
            inserted.insert(job.id.clone(), job);
        }
    }
    let mut out = Vec::with_capacity(jobs.len());
    for (index, (id, job)) in jobs.iter().enumerate() {
        if let Some(created) = inserted.remove(id) {
            out.push((created, true));
            continue;
        }
        let key = job.idempotency_key.clone().unwrap_or_default();
        let stored = stored_key(job.owner.as_deref(), &key);
        let existing = tx.job_by_key(&stored).await?.ok_or_else(|| {
            Fail::Db(format!(
                "job {index} of the batch was neither inserted nor found by its key"
            ))
        })?;
        if !existing.same_content(job) {
            return Err(Fail::Refused(QueueError::KeyConflict {
                index,
                key,
                existing: Box::new(existing),
            }));
        }
        out.push((existing, false));
    }
    Ok(out)
}

/// What each job of a batch reserves of its daily budgets, in the batch's
/// order (a job already queued under its key reserves nothing again).
async fn reserve_batch(
    tx: &mut impl Tx,
    ledger: &mut DayLedger,
    jobs: &[(JobId, NewJob)],
) -> Res<Vec<Option<Reserved>>> {
    let mut reserved = Vec::with_capacity(jobs.len());
    for (index, (_, job)) in jobs.iter().enumerate() {
        let queued = match job_key(job) {
            Some(key) if job.daily.is_some() => tx.job_by_key(&key).await?.is_some(),
            _ => false,
        };
        reserved.push(match queued {
            true => None,
            false => ledger.reserve(tx, index, job).await?,
        });
    }
    Ok(reserved)
}
