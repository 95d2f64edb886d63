//! What a person's request does to a job, written once for every dialect:
//! cancel (at once when it waits, at its next step when it runs), resolve a
//! parked call (retry, skip with a result, answer a caller's tools, fail),
//! decide an approval, and deny the approvals whose timeout passed — each
//! in one transaction of a [`Tx`], the job's final event beside it.

use super::lifecycle::{end_now, insert_events, record_ending};
use super::outbox;
use super::transaction::Tx;
use super::tx::{Change, Fail, Res};
use super::*;
use crate::approval::{self, Verdict};
use crate::types::TerminationReason;

/// Cancels a queued or parked job at once (with its final event); asks a
/// running one to stop (its worker hears of it through
/// [`Change::CancelRequested`] at once, else at its next heartbeat).
pub(crate) async fn cancel(tx: &mut impl Tx, id: &JobId) -> Res<Option<Changed>> {
    let now = tx.now().await?;
    let ended = tx.cancel_waiting(id.as_str(), now).await?;
    if ended {
        outbox::state_changed(tx, id.as_str(), JobState::Cancelled).await?;
    } else {
        tx.request_cancel(id.as_str(), now).await?;
    }
    let Some(job) = tx.job(id.as_str(), false).await? else {
        return Ok(None);
    };
    tx.changed(
        if ended {
            Change::Updated
        } else {
            Change::CancelRequested
        },
        id,
    );
    record_ending(tx, job, ended).await.map(Some)
}

/// Resolves a parked job: run its pending call again, skip it with a given
/// result, or fail the job.
pub(crate) async fn resolve(tx: &mut impl Tx, id: &JobId, resolution: &Resolution) -> Res<Changed> {
    let not_found = || Fail::Refused(QueueError::NotFound(id.clone()));
    let job = tx.job(id.as_str(), true).await?.ok_or_else(not_found)?;
    let pending = parked_call(&job, resolution).map_err(Fail::Refused)?;
    let now = tx.now().await?;
    let change = match resolution {
        Resolution::Fail { reason } => {
            let error = Resolution::failure(reason, pending.as_ref());
            end_now(
                tx,
                id,
                JobState::Failed,
                TerminationReason::Error,
                &error,
                now,
            )
            .await?
        }
        Resolution::Retry => {
            // Without its start marker the next attempt runs the call afresh.
            if let Some(pending) = &pending {
                let (start, _) = JournalEntry::call_steps(pending);
                tx.delete_step(id.as_str(), &pending.scope, pending.turn, &start)
                    .await?;
            }
            tx.requeue(id.as_str(), now).await?;
            outbox::state_changed(tx, id.as_str(), JobState::Queued).await?;
            Change::Runnable
        }
        Resolution::Skip { output, is_error } => {
            let pending =
                pending.ok_or_else(|| Fail::Refused(QueueError::NoCallToSkip(id.clone())))?;
            let entry = JournalEntry {
                scope: pending.scope.clone(),
                turn: pending.turn,
                step: JournalEntry::call_steps(&pending).1,
                body: Resolution::skipped_result(&pending, output, *is_error),
            };
            tx.put_step(id.as_str(), &entry, job.attempts).await?;
            tx.requeue(id.as_str(), now).await?;
            outbox::state_changed(tx, id.as_str(), JobState::Queued).await?;
            Change::Runnable
        }
        Resolution::CallerOutputs { outputs } => {
            // Checked in the write that takes them: a second answer finds
            // the job no longer parked, so no output is fed twice.
            let entries = resolution::caller_results(&job, pending.as_ref(), outputs)
                .map_err(Fail::Refused)?;
            for entry in &entries {
                tx.put_step(id.as_str(), entry, job.attempts).await?;
            }
            tx.requeue(id.as_str(), now).await?;
            outbox::state_changed(tx, id.as_str(), JobState::Queued).await?;
            Change::Runnable
        }
    };
    tx.changed(change, id);
    let job = tx.job(id.as_str(), false).await?.ok_or_else(not_found)?;
    let failed = matches!(resolution, Resolution::Fail { .. });
    record_ending(tx, job, failed).await
}

/// Takes a person's decision on the call a job awaits approval for: checked
/// against the request, journaled as the step the resumed run reads, the
/// job queued again and an `ApprovalDecided` event added to its log, all in
/// one write — a second decision finds the job no longer waiting.
pub(crate) async fn decide_approval(
    tx: &mut impl Tx,
    id: &JobId,
    call: &str,
    decision: &approval::Decision,
    by: &str,
    store: &str,
) -> Res<Changed> {
    let not_found = || Fail::Refused(QueueError::NotFound(id.clone()));
    let job = tx.job(id.as_str(), true).await?.ok_or_else(not_found)?;
    let request = rules::awaited_request(&job, call, store).map_err(Fail::Refused)?;
    let now = tx.now().await?;
    let recorded = decision
        .clone()
        .accept(&request, by, rfc3339(now))
        .map_err(|source| {
            Fail::Refused(QueueError::Decision {
                job: id.clone(),
                source,
            })
        })?;
    let body = serde_json::to_string(&recorded)
        .map_err(|e| Fail::Db(format!("decision cannot be encoded: {e}")))?;
    let entry = JournalEntry {
        scope: request.scope.clone(),
        turn: request.turn,
        // Approvals are parked since 0.2, always with their position.
        step: JournalEntry::decision_key(request.position.unwrap_or_default()),
        body,
    };
    tx.put_step(id.as_str(), &entry, job.attempts).await?;
    tx.requeue(id.as_str(), now).await?;
    outbox::state_changed(tx, id.as_str(), JobState::Queued).await?;
    let event = rules::decided_event(
        &job,
        &request,
        &recorded,
        tx.last_seq(id.as_str()).await? + 1,
    );
    insert_events(tx, id, job.attempts, &[event]).await?;
    tx.changed(Change::Runnable, id);
    let job = tx.job(id.as_str(), false).await?.ok_or_else(not_found)?;
    Ok(Changed {
        job,
        final_event: None,
    })
}

/// Denies the calls whose approval timeout has passed (at most `limit`
/// jobs), as a decision `by` "timeout"; returns the jobs as they are now.
pub(crate) async fn expire_approvals(tx: &mut impl Tx, limit: usize, store: &str) -> Res<Vec<Job>> {
    let now = tx.now().await?;
    let due = tx.approvals_due(now, limit).await?;
    let mut expired = Vec::with_capacity(due.len());
    for id in &due {
        let id = JobId(id.clone());
        let Some(job) = tx.job(id.as_str(), true).await? else {
            continue;
        };
        let Some((call, terms)) = job
            .pending_call
            .as_ref()
            .and_then(|p| Some((p.call_id.clone(), p.approval.as_ref()?)))
        else {
            continue;
        };
        let decision = approval::Decision {
            verdict: Verdict::Deny {
                reason: Some(format!(
                    "no decision came before the approval timeout (requested {}); the call was denied",
                    terms.requested_at.as_deref().unwrap_or("earlier")
                )),
            },
            // The timeout decides on the arguments the job waits with.
            digest: Some(terms.digest.clone()),
        };
        let changed = decide_approval(tx, &id, &call, &decision, "timeout", store).await?;
        expired.push(changed.job);
    }
    Ok(expired)
}
