//! The job lifecycle, written once for every dialect: lease (with the
//! first attempt's pin), heartbeat, finish, release, the journal and the
//! event log (a submit is in `lifecycle/submit.rs`, an operator's decisions
//! in `decisions.rs`, the reads and deletions in `reads.rs`). Each
//! operation runs inside one transaction of a [`Tx`]; the backend only
//! opens, commits and announces it.
//!
//! Every write guarded by an attempt starts by reading (and on PostgreSQL
//! locking) the job's row, so a stale worker writes nothing; every
//! transition that ends a job writes its final event in the same
//! transaction.

use std::time::Duration;

use super::outbox;
use super::transaction::Tx;
use super::tx::{AttemptRow, AttemptStart, Change, Fail, Pin, Res, Settle};
use super::*;
use crate::approval;
use crate::events::Event;
use crate::types::TerminationReason;

mod submit;

pub(crate) use submit::{submit, submit_many};

/// Given the name of a first attempt's bundle, the version and digest to
/// pin it to (the daemon's registry knows; the queue does not).
pub type Pinner = dyn Fn(&str) -> Option<Pin> + Send + Sync;

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// What a lease asks for: who, for how long, how many jobs at most, and how
/// a first attempt is pinned.
pub(crate) struct LeaseAsk<'a> {
    pub worker: &'a str,
    pub lease_for: Duration,
    pub n: usize,
    pub max_crash_resumes: u32,
    pub pin: Option<&'a Pinner>,
    /// How the queued jobs are shared between keys.
    pub shares: &'a Shares,
}

/// Leases up to `n` runnable jobs, in lease order: abandoned runs first
/// (their worker's lease expired: each resumes without using an attempt,
/// unless it is a poison pill, which parks instead), then queued jobs by
/// fair share between keys (`queue::fair`) and by priority inside a key.
pub(crate) async fn lease(tx: &mut impl Tx, ask: &LeaseAsk<'_>) -> Res<Vec<Lease>> {
    let now = tx.now().await?;
    let expires = now.saturating_add(ms(ask.lease_for));
    let mut leases = Vec::new();
    while leases.len() < ask.n {
        let want = ask.n - leases.len();
        let mut candidates = tx.expired(now, want).await?;
        let fair = fair_due(tx, now, want - candidates.len(), ask.shares).await?;
        candidates.extend(fair);
        if candidates.is_empty() {
            break;
        }
        let mut parked = false;
        for candidate in candidates {
            if candidate.is_poison_pill(ask.max_crash_resumes) {
                park_poison_pill(tx, &candidate, ask.max_crash_resumes, now).await?;
                parked = true;
                continue;
            }
            let pin = ask.pin.and_then(|pin| pin(&candidate.bundle));
            let start = AttemptStart {
                candidate: &candidate,
                worker: ask.worker,
                expires,
                now,
                pin: pin.as_ref(),
            };
            let job = tx.start_attempt(&start).await?;
            // An abandoned run resumed was running already: no change.
            if !candidate.running {
                outbox::state_changed(tx, job.id.as_str(), JobState::Running).await?;
            }
            tx.changed(Change::Updated, &job.id);
            leases.push(Lease {
                attempt: job.attempts,
                next_seq: tx.last_seq(job.id.as_str()).await? + 1,
                journal: tx.journal(job.id.as_str()).await?,
                job: job.into(),
            });
        }
        // Only a parked poison pill leaves room for more in this round.
        if !parked {
            break;
        }
    }
    Ok(leases)
}

/// Up to `n` due queued jobs, shared between keys by `fair::plan`: each
/// key's share taken in priority order, each job given the pass its lease
/// leaves its key at, the whole in lease order.
async fn fair_due(tx: &mut impl Tx, now: i64, n: usize, shares: &Shares) -> Res<Vec<Candidate>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let ready = tx.ready_keys(now).await?;
    let mut slots = Vec::with_capacity(n);
    for share in super::fair::plan(&ready, shares, n) {
        let jobs = tx.due_of(&share.key, now, share.count).await?;
        for (i, mut job) in jobs.into_iter().enumerate() {
            job.fair_pass = Some(share.pass_after(i));
            slots.push((share.starts_at(i), share.key.clone(), job));
        }
    }
    slots.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    Ok(slots.into_iter().map(|(_, _, job)| job).collect())
}

/// Parks a poison pill in `needs_attention`, saying where it died, with
/// its `JobState` event (so its followers see it park) in the same write.
async fn park_poison_pill(
    tx: &mut impl Tx,
    candidate: &Candidate,
    max_crash_resumes: u32,
    now: i64,
) -> Res<()> {
    let journal = tx.journal(&candidate.id).await?;
    let last = tx.last_event(&candidate.id).await?;
    let died = poison::where_it_died(&journal, last.as_deref());
    let reason = candidate.poison_reason(max_crash_resumes, &died);
    let settle = Settle {
        termination_reason: None,
        state: JobState::NeedsAttention,
        result: None,
        error: Some(&reason),
        run_at: None,
        finished_at: None,
        pending_call: None,
    };
    tx.settle(&candidate.id, &settle, now).await?;
    outbox::state_changed(tx, &candidate.id, settle.state).await?;
    let id = JobId::from(candidate.id.as_str());
    tx.changed(Change::Updated, &id);
    let job = tx
        .job(id.as_str(), false)
        .await?
        .ok_or_else(|| Fail::Db(format!("job {id} vanished while it was parked")))?;
    record_ending(tx, job, true).await.map(|_| ())
}

pub(crate) async fn heartbeat(
    tx: &mut impl Tx,
    id: &JobId,
    attempt: u32,
    lease_for: Duration,
) -> Res<HeartbeatReply> {
    let now = tx.now().await?;
    let expires = now.saturating_add(ms(lease_for));
    Ok(match tx.renew(id.as_str(), attempt, expires, now).await? {
        None => HeartbeatReply::Lost,
        Some(true) => HeartbeatReply::CancelRequested,
        Some(false) => HeartbeatReply::Ok,
    })
}

/// The job's `(allowed attempts, cancel_requested)` while `attempt` is its
/// current running attempt; `None` for a stale attempt.
async fn current(tx: &mut impl Tx, id: &JobId, attempt: u32) -> Res<Option<(u32, bool)>> {
    Ok(match tx.attempt_row(id.as_str()).await? {
        Some(AttemptRow {
            state,
            attempts,
            allowed,
            cancel_requested,
        }) if state == JobState::Running.as_str() && attempts == attempt => {
            Some((allowed, cancel_requested))
        }
        _ => None,
    })
}

/// [`current`], refusing a stale attempt.
pub(super) async fn require_current(
    tx: &mut impl Tx,
    id: &JobId,
    attempt: u32,
) -> Res<(u32, bool)> {
    current(tx, id, attempt).await?.ok_or_else(|| {
        Fail::Refused(QueueError::StaleAttempt {
            job: id.clone(),
            attempt,
        })
    })
}

/// Appends events; a sequence number already stored refuses the write,
/// unless it holds this very event (a write whose reply was lost, retried).
pub(super) async fn insert_events(
    tx: &mut impl Tx,
    id: &JobId,
    attempt: u32,
    events: &[EventEnvelope],
) -> Res<()> {
    let mut inserted = Vec::with_capacity(events.len());
    for event in events {
        let json = serde_json::to_string(event)
            .map_err(|e| Fail::Db(format!("event {} cannot be encoded: {e}", event.seq)))?;
        if tx
            .insert_event(id.as_str(), event.seq, attempt, &json)
            .await?
        {
            inserted.push(event);
            continue;
        }
        let stored = tx.stored_event(id.as_str(), event.seq).await?;
        if !stored.is_some_and(|stored| rules::same_event(stored, attempt, &json)) {
            return Err(Fail::Refused(QueueError::DuplicateEvent {
                job: id.clone(),
                seq: event.seq,
            }));
        }
    }
    // Counted as stored: an event written again (a lost reply) counts once.
    let errors = rules::tool_errors(&inserted);
    if errors > 0 {
        tx.add_tool_errors(id.as_str(), errors).await?;
    }
    Ok(())
}

pub(crate) async fn pin_version(tx: &mut impl Tx, id: &JobId, attempt: u32, pin: &Pin) -> Res<()> {
    tx.pin(id.as_str(), attempt, pin).await
}

/// What an attempt's end writes: the events held until then, and the
/// final event stamped with the decision.
pub(crate) struct Ending<'a> {
    pub events: &'a [EventEnvelope],
    pub final_event: Option<&'a EventEnvelope>,
}

/// Writes an attempt's end: its held events, then (for a park, `asked`)
/// the `ApprovalRequested` event, then its final event.
async fn write_ending(
    tx: &mut impl Tx,
    id: &JobId,
    attempt: u32,
    ending: Ending<'_>,
    decision: &Decision,
    change: Change,
    asked: Option<&approval::ParkedCall>,
) -> Res<Finished> {
    let mut final_event = ending.final_event.map(|e| stamp_final(e.clone(), decision));
    if let Some(EventEnvelope {
        event:
            Event::JobState {
                spent: Some(spent),
                spent_by_bundle,
                ..
            },
        ..
    }) = &final_event
    {
        let tokens = |spent: &crate::budget::Spent| {
            i64::try_from(spent.prompt_tokens.saturating_add(spent.completion_tokens))
                .unwrap_or(i64::MAX)
        };
        tx.record_spend(
            id.as_str(),
            tokens(spent),
            super::tx::cost_to_micros(spent.cost),
        )
        .await?;
        for (bundle, spent) in spent_by_bundle {
            tx.record_nested_spend(
                id.as_str(),
                bundle,
                tokens(spent),
                super::tx::cost_to_micros(spent.cost),
            )
            .await?;
        }
    }
    insert_events(tx, id, attempt, ending.events).await?;
    let request_event = match asked {
        Some(request) => Some(request_event(tx, id, request, final_event.as_mut()).await?),
        None => None,
    };
    insert_events(tx, id, attempt, request_event.as_slice()).await?;
    insert_events(tx, id, attempt, final_event.as_slice()).await?;
    tx.changed(change, id);
    Ok(Finished {
        reply: CompleteReply::Recorded(decision.state),
        request_event,
        final_event,
        run_at: None,
    })
}

/// The `ApprovalRequested` event a park writes ([`rules::requested_event`]),
/// as the event just before the attempt's final one, which moves one on.
async fn request_event(
    tx: &mut impl Tx,
    id: &JobId,
    request: &approval::ParkedCall,
    final_event: Option<&mut EventEnvelope>,
) -> Res<EventEnvelope> {
    let event = rules::requested_event(request);
    Ok(match final_event {
        Some(last) => {
            let asked = EventEnvelope {
                event,
                ..last.clone()
            };
            last.seq += 1;
            asked
        }
        None => {
            let job = tx
                .job(id.as_str(), false)
                .await?
                .ok_or_else(|| Fail::Refused(QueueError::NotFound(id.clone())))?;
            rules::job_event(&job, tx.last_seq(id.as_str()).await? + 1, event)
        }
    })
}

/// Records an attempt's outcome by the one rule, [`decide`].
pub(crate) async fn finish(
    tx: &mut impl Tx,
    id: &JobId,
    attempt: u32,
    outcome: &Outcome,
    ending: Ending<'_>,
    retry: &RetryPolicy,
) -> Res<Finished> {
    let Some((allowed, cancel_requested)) = current(tx, id, attempt).await? else {
        return Ok(Finished::stale());
    };
    let now = tx.now().await?;
    let parked = rules::parked_for(outcome, id, now);
    let outcome = parked.as_ref().unwrap_or(outcome);
    let decision = decide(outcome, attempt, allowed, cancel_requested);
    let (result, pending_call) = decision.stored(outcome);
    let reason = decision.termination_reason(rules::reported_reason(ending.final_event));
    let settle = Settle {
        termination_reason: reason.map(TerminationReason::as_str),
        state: decision.state,
        result,
        error: decision.error.as_deref(),
        run_at: decision.run_at(outcome, now, retry.delay(attempt)),
        finished_at: decision.state.is_terminal().then_some(now),
        pending_call,
    };
    tx.settle(id.as_str(), &settle, now).await?;
    outbox::state_changed(tx, id.as_str(), settle.state).await?;
    // A park writes the request's event with it, and only a park does.
    let asked = match outcome {
        Outcome::AwaitingApproval { request, .. }
            if decision.state == JobState::AwaitingApproval =>
        {
            Some(&**request)
        }
        _ => None,
    };
    let finished = write_ending(tx, id, attempt, ending, &decision, Change::Updated, asked).await?;
    Ok(Finished {
        run_at: settle
            .run_at
            .filter(|_| !decision.state.is_terminal())
            .map(super::rfc3339),
        ..finished
    })
}

/// Gives a running job back (drain) without using its attempt; a job whose
/// cancellation was requested ends `cancelled` instead of running again.
pub(crate) async fn release(
    tx: &mut impl Tx,
    id: &JobId,
    attempt: u32,
    ending: Ending<'_>,
) -> Res<Finished> {
    let Some((_, cancel_requested)) = current(tx, id, attempt).await? else {
        return Ok(Finished::stale());
    };
    let now = tx.now().await?;
    let decision = decide_release(cancel_requested);
    let change = if cancel_requested {
        end_now(
            tx,
            id,
            JobState::Cancelled,
            TerminationReason::Cancelled,
            CANCELLED,
            now,
        )
        .await?
    } else {
        tx.unlease(id.as_str(), now).await?;
        outbox::state_changed(tx, id.as_str(), JobState::Queued).await?;
        Change::Runnable
    };
    write_ending(tx, id, attempt, ending, &decision, change, None).await
}

const CANCELLED: &str = "cancelled by request";

/// Ends job `id` now as `state` (cancelled, or failed by an operator),
/// saying `error`, and tells its webhook: one settle for every way a
/// request ends a job outside its run.
pub(super) async fn end_now(
    tx: &mut impl Tx,
    id: &JobId,
    state: JobState,
    reason: TerminationReason,
    error: &str,
    now: i64,
) -> Res<Change> {
    let settle = Settle {
        termination_reason: Some(reason.as_str()),
        state,
        result: None,
        error: Some(error),
        run_at: None,
        finished_at: Some(now),
        pending_call: None,
    };
    tx.settle(id.as_str(), &settle, now).await?;
    outbox::state_changed(tx, id.as_str(), state).await?;
    Ok(Change::Updated)
}

/// The job an operator's request left, with the final event it records (as
/// the next of the job's log) when the request `ended` the job.
pub(super) async fn record_ending(tx: &mut impl Tx, job: Job, ended: bool) -> Res<Changed> {
    let final_event = if ended {
        rules::ended_by_request(&job, tx.last_seq(job.id.as_str()).await? + 1)
    } else {
        None
    };
    insert_events(tx, &job.id, job.attempts, final_event.as_slice()).await?;
    Ok(Changed { job, final_event })
}

/// Records journal steps with the events held until then, guarded by the
/// attempt.
pub(crate) async fn record_steps(
    tx: &mut impl Tx,
    id: &JobId,
    attempt: u32,
    entries: &[JournalEntry],
    events: &[EventEnvelope],
) -> Res<()> {
    require_current(tx, id, attempt).await?;
    insert_events(tx, id, attempt, events).await?;
    for entry in entries {
        tx.put_step(id.as_str(), entry, attempt).await?;
    }
    if !events.is_empty() {
        tx.changed(Change::Updated, id);
    }
    Ok(())
}
