//! An attempt's end on PostgreSQL without a transaction held across round
//! trips: one statement reads the job's attempt row and the database's
//! clock, the one rule (`rules::decide`, `rules::decide_release`) decides
//! in Rust, and one statement applies the decision — the job's row, the
//! held events and the stamped final event, the spend —
//! guarded by everything the decision read (the attempt, the cancel
//! request, the attempts allowed). Should any of it have changed between
//! the two (a cancel request came in), the guard makes the second statement
//! change nothing, and the end is decided again from a fresh read; a stale
//! attempt changes nothing at all.
//!
//! An end the statement does not apply — a park (its request event and
//! pending call) or a job with a webhook or push configs (its deliveries) —
//! answers `None`, and the driver runs the lifecycle's write in a
//! transaction.

use tokio_postgres::types::ToSql;

use super::dialect::{NOW, PgTx};
use super::hot::{APPENDED, Appended, EventRows, events_cte};
use super::pool::Writes;
use crate::events::Event;
use crate::queue::op::{Finish, Release};
use crate::queue::rules::{Decision, decide, decide_release, reported_reason, stamp_final};
use crate::queue::tx::{Change, Columns, Fail, Res};
use crate::queue::*;
use crate::types::TerminationReason;

/// Times an end is decided again because what it read changed meanwhile,
/// before the lifecycle's transaction takes over.
const MAX_REREADS: usize = 3;

/// The attempt row as the end reads it.
struct Current {
    allowed: u32,
    cancel_requested: bool,
    now: i64,
}

/// What the row says of attempt `attempt`: `Ok(None)` when it is stale,
/// `Err(())` when the end needs the lifecycle's transaction (the job has a
/// webhook or push configs).
async fn read(
    pg: &PgTx<'_, deadpool_postgres::Object>,
    id: &JobId,
    attempt: u32,
) -> Res<Result<Option<Current>, ()>> {
    let sql = format!(
        "SELECT state, attempts, max_attempts + crash_resumes, cancel_requested, {NOW},
                EXISTS (SELECT 1 FROM job_webhooks WHERE job_id = $1)
                OR EXISTS (SELECT 1 FROM a2a_push_configs WHERE job_id = $1)
         FROM jobs WHERE id = $1"
    );
    let Some(row) = pg.first(&sql, &[&id.as_str()]).await? else {
        return Ok(Ok(None));
    };
    let current = row.req_text(0)? == JobState::Running.as_str()
        && u32::try_from(row.req_int(1)?).ok() == Some(attempt);
    if !current {
        return Ok(Ok(None));
    }
    if row.req_int(5)? != 0 {
        return Ok(Err(()));
    }
    Ok(Ok(Some(Current {
        allowed: u32::try_from(row.req_int(2)?.max(0)).unwrap_or(u32::MAX),
        cancel_requested: row.req_int(3)? != 0,
        now: row.req_int(4)?,
    })))
}

/// The row an end writes, and whether it gives the attempt back (a release
/// that queues the job again) rather than settling it.
struct Apply<'a> {
    id: &'a JobId,
    attempt: u32,
    read: &'a Current,
    unlease: bool,
    state: JobState,
    result: Option<String>,
    error: Option<&'a str>,
    run_at: Option<i64>,
    reason: Option<TerminationReason>,
    events: &'a [EventEnvelope],
    final_event: Option<EventEnvelope>,
    change: Change,
}

/// What an applied end answers: `None` when the guard found the row
/// changed since it was read.
async fn apply(
    w: &Writes,
    pg: &PgTx<'_, deadpool_postgres::Object>,
    a: Apply<'_>,
) -> Res<Option<Option<EventEnvelope>>> {
    let events = EventRows::of(a.id, a.events.iter().chain(a.final_event.as_ref()))?;
    let (tokens, cost, nested) = spend(a.final_event.as_ref());
    let (bundles, nested_tokens, nested_cost) = nested;
    let finished_at = a.state.is_terminal().then_some(a.read.now);
    let changes = [(a.change, a.id.clone())];
    let sql = format!(
        "WITH cur AS (SELECT id FROM jobs WHERE id = $1 AND state = 'running' AND attempts = $2
                        AND cancel_requested = $3 AND max_attempts + crash_resumes = $4
                        AND NOT EXISTS (SELECT 1 FROM job_webhooks WHERE job_id = $1)
                        AND NOT EXISTS (SELECT 1 FROM a2a_push_configs WHERE job_id = $1)
                      FOR UPDATE),
         {},
         settled AS (UPDATE jobs SET state = $8, updated_at = $13, lease_owner = NULL, lease_expires_at = NULL,
                       attempts = attempts - $17::int,
                       result = CASE WHEN $17::int = 1 THEN result ELSE $9 END,
                       error = CASE WHEN $17::int = 1 THEN error ELSE $10 END,
                       run_at = CASE WHEN $17::int = 1 THEN run_at ELSE COALESCE($11, run_at) END,
                       finished_at = CASE WHEN $17::int = 1 THEN finished_at ELSE $12 END,
                       pending_call = CASE WHEN $17::int = 1 THEN pending_call ELSE NULL END,
                       termination_reason = CASE WHEN $17::int = 1 THEN termination_reason ELSE $14 END,
                       tokens_spent = COALESCE($15, tokens_spent), cost_micros = COALESCE($16, cost_micros),
                       tool_errors = tool_errors + (SELECT n FROM added_errors)
                     WHERE id IN (SELECT id FROM ok) RETURNING created_at),
         nested AS (INSERT INTO nested_spend (job_id, bundle, created_at, tokens, cost_micros)
                    SELECT $1, n.bundle, s.created_at, n.tokens, n.cost
                    FROM settled s, unnest($18::text[], $19::bigint[], $20::bigint[]) AS n(bundle, tokens, cost)
                    ON CONFLICT (job_id, bundle) DO UPDATE SET tokens = EXCLUDED.tokens, cost_micros = EXCLUDED.cost_micros
                    RETURNING 1)
         SELECT {APPENDED}, (SELECT COUNT(*) FROM nested)",
        events_cte(5)
    );
    let state = a.state.as_str();
    let reason = a.reason.map(TerminationReason::as_str);
    let p: [&(dyn ToSql + Sync); 20] = [
        &a.id.as_str(),
        &i32::try_from(a.attempt).unwrap_or(i32::MAX),
        &a.read.cancel_requested,
        &i32::try_from(a.read.allowed).unwrap_or(i32::MAX),
        &events.seqs,
        &events.json,
        &events.tool_errors,
        &state,
        &a.result,
        &a.error,
        &a.run_at,
        &finished_at,
        &a.read.now,
        &reason,
        &tokens,
        &cost,
        &i32::from(a.unlease),
        &bundles,
        &nested_tokens,
        &nested_cost,
    ];
    let row = pg
        .first(&sql, &p)
        .await?
        .ok_or_else(|| Fail::Db("the end's write answered no row".into()))?;
    let appended = Appended::read(&row, 0)?;
    if !appended.current {
        return Ok(None);
    }
    if let Some(refused) = appended.refusal(a.id, a.attempt, &events) {
        return Err(refused);
    }
    w.shared.committed(&changes);
    Ok(Some(a.final_event))
}

/// The spend a final event reports: the job's tokens and cost (micros), and
/// its nested bundles' (as `lifecycle::write_ending` records them).
#[allow(clippy::type_complexity)]
fn spend(
    final_event: Option<&EventEnvelope>,
) -> (Option<i64>, Option<i64>, (Vec<String>, Vec<i64>, Vec<i64>)) {
    let Some(EventEnvelope {
        event:
            Event::JobState {
                spent: Some(spent),
                spent_by_bundle,
                ..
            },
        ..
    }) = final_event
    else {
        return (None, None, Default::default());
    };
    let tokens = |spent: &crate::budget::Spent| {
        i64::try_from(spent.prompt_tokens.saturating_add(spent.completion_tokens))
            .unwrap_or(i64::MAX)
    };
    let mut nested = (Vec::new(), Vec::new(), Vec::new());
    for (bundle, spent) in spent_by_bundle {
        nested.0.push(bundle.clone());
        nested.1.push(tokens(spent));
        nested.2.push(crate::queue::tx::cost_to_micros(spent.cost));
    }
    (
        Some(tokens(spent)),
        Some(crate::queue::tx::cost_to_micros(spent.cost)),
        nested,
    )
}

/// Records an attempt's outcome by the one rule, [`decide`]; `None` when
/// the lifecycle's transaction must (a park, a job with deliveries to
/// make, or a row that kept changing under it).
pub(super) async fn finish(w: &Writes, op: &Finish) -> Result<Option<Finished>, QueueError> {
    if matches!(
        op.outcome,
        Outcome::AwaitingApproval { .. } | Outcome::NeedsAttention { .. }
    ) {
        return Ok(None);
    }
    let client = w.client().await?;
    let pg = PgTx::new(&client);
    let answer = finish_on(w, &pg, op).await;
    w.shared.stats.sent(pg.statements());
    answer.map_err(|f| f.into_error(&w.shared.label))
}

async fn finish_on(
    w: &Writes,
    pg: &PgTx<'_, deadpool_postgres::Object>,
    op: &Finish,
) -> Res<Option<Finished>> {
    for _ in 0..MAX_REREADS {
        let current = match read(pg, &op.id, op.attempt).await? {
            Ok(Some(current)) => current,
            Ok(None) => return Ok(Some(Finished::stale())),
            Err(()) => return Ok(None),
        };
        let decision = decide(
            &op.outcome,
            op.attempt,
            current.allowed,
            current.cancel_requested,
        );
        let (result, _) = decision.stored(&op.outcome);
        let run_at = decision.run_at(&op.outcome, current.now, op.retry.delay(op.attempt));
        let applied = apply(
            w,
            pg,
            Apply {
                id: &op.id,
                attempt: op.attempt,
                read: &current,
                unlease: false,
                state: decision.state,
                result,
                error: decision.error.as_deref(),
                run_at,
                reason: decision.termination_reason(reported_reason(op.final_event.as_ref())),
                events: &op.events,
                final_event: stamped(op.final_event.as_ref(), &decision),
                change: Change::Updated,
            },
        )
        .await?;
        if let Some(final_event) = applied {
            return Ok(Some(Finished {
                reply: CompleteReply::Recorded(decision.state),
                request_event: None,
                final_event,
                run_at: run_at
                    .filter(|_| !decision.state.is_terminal())
                    .map(rfc3339),
            }));
        }
    }
    Ok(None)
}

fn stamped(final_event: Option<&EventEnvelope>, decision: &Decision) -> Option<EventEnvelope> {
    final_event.map(|e| stamp_final(e.clone(), decision))
}

/// Gives a running job back without using its attempt (a job whose
/// cancellation was requested ends `cancelled`), by [`decide_release`];
/// `None` when the lifecycle's transaction must.
pub(super) async fn release(w: &Writes, op: &Release) -> Result<Option<Finished>, QueueError> {
    let client = w.client().await?;
    let pg = PgTx::new(&client);
    let answer = release_on(w, &pg, op).await;
    w.shared.stats.sent(pg.statements());
    answer.map_err(|f| f.into_error(&w.shared.label))
}

async fn release_on(
    w: &Writes,
    pg: &PgTx<'_, deadpool_postgres::Object>,
    op: &Release,
) -> Res<Option<Finished>> {
    for _ in 0..MAX_REREADS {
        let current = match read(pg, &op.id, op.attempt).await? {
            Ok(Some(current)) => current,
            Ok(None) => return Ok(Some(Finished::stale())),
            Err(()) => return Ok(None),
        };
        let cancelled = current.cancel_requested;
        let decision = decide_release(cancelled);
        let applied = apply(
            w,
            pg,
            Apply {
                id: &op.id,
                attempt: op.attempt,
                read: &current,
                unlease: !cancelled,
                state: decision.state,
                result: None,
                error: cancelled.then_some("cancelled by request"),
                run_at: None,
                reason: cancelled.then_some(TerminationReason::Cancelled),
                events: &op.events,
                final_event: stamped(op.final_event.as_ref(), &decision),
                change: if cancelled {
                    Change::Updated
                } else {
                    Change::Runnable
                },
            },
        )
        .await?;
        if let Some(final_event) = applied {
            return Ok(Some(Finished {
                reply: CompleteReply::Recorded(decision.state),
                request_event: None,
                final_event,
                run_at: None,
            }));
        }
    }
    Ok(None)
}
