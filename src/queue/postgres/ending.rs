//! An attempt's end on PostgreSQL in one statement. The one rule
//! (`rules::decide`, `rules::decide_release`) stays in Rust: what it
//! decides depends on two things only the job's row knows at that moment —
//! whether a cancel was requested, and whether attempts remain for a retry
//! — so Rust decides every combination beforehand (a [`Variant`] each:
//! the row's new fields and the final event stamped with that decision) and
//! the statement, holding the row's lock, applies the one that matches the
//! row, with the held events, the final event and the spend, guarded by
//! the attempt: a stale attempt changes nothing.
//!
//! An end the statement does not apply — a park (its request event and
//! pending call) or a job with a webhook or push configs (its deliveries) —
//! answers `None` having written nothing, and the driver runs the
//! lifecycle's write in a transaction.

use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::group::{Params, Statement};
use super::hot::{APPENDED, Appended, EventRows, events_cte};
use super::pool::Writes;
use super::sql::{JOB_ROW, NOW};
use super::transaction::PgTx;
use crate::events::Event;
use crate::queue::op::{Finish, Release};
use crate::queue::rules::{Decision, decide, decide_release, reported_reason, stamp_final};
use crate::queue::tx::{Change, Columns, Fail, Res};
use crate::queue::*;
use crate::types::TerminationReason;

/// What an end writes when the row says `cancel_requested` and whether
/// attempts remain (`retry_ok`).
struct Variant {
    cancel_requested: bool,
    retry_ok: bool,
    decision: Decision,
    result: Option<String>,
    /// A retry's backoff: `run_at` becomes the database's now plus this.
    backoff: Option<i64>,
    /// A release that queues the job again gives the attempt back.
    unlease: bool,
    final_event: Option<EventEnvelope>,
}

impl Variant {
    fn reason(&self, reported: Option<TerminationReason>) -> Option<&'static str> {
        self.decision
            .termination_reason(reported)
            .map(TerminationReason::as_str)
    }
}

/// An end to apply: the job, the attempt, its events, and its variants.
struct End<'a> {
    id: &'a JobId,
    attempt: u32,
    events: &'a [EventEnvelope],
    /// The reason the worker's final event reported.
    reported: Option<TerminationReason>,
    variants: Vec<Variant>,
}

/// What an applied end answers: stale, needs the lifecycle's transaction,
/// or the variant applied (its index) with the database's now.
pub(super) enum Applied {
    Stale,
    Transaction,
    Done { variant: usize, now: i64 },
}

/// The columns of one statement's variants, as arrays.
#[derive(Default)]
struct VariantColumns {
    cancel: Vec<bool>,
    retry_ok: Vec<bool>,
    state: Vec<&'static str>,
    result: Vec<Option<String>>,
    error: Vec<Option<String>>,
    backoff: Vec<Option<i64>>,
    reason: Vec<Option<&'static str>>,
    final_json: Vec<Option<String>>,
    unlease: Vec<bool>,
    terminal: Vec<bool>,
}

fn columns(end: &End<'_>) -> Res<VariantColumns> {
    let mut c = VariantColumns::default();
    for v in &end.variants {
        c.cancel.push(v.cancel_requested);
        c.retry_ok.push(v.retry_ok);
        c.state.push(v.decision.state.as_str());
        c.result.push(v.result.clone());
        c.error.push(v.decision.error.clone());
        c.backoff.push(v.backoff);
        c.reason.push(v.reason(end.reported));
        let json = match &v.final_event {
            Some(e) => Some(
                serde_json::to_string(e)
                    .map_err(|e| Fail::Db(format!("the final event cannot be encoded: {e}")))?,
            ),
            None => None,
        };
        c.final_json.push(json);
        c.unlease.push(v.unlease);
        c.terminal.push(v.decision.state.is_terminal());
    }
    Ok(c)
}

const SQL: &str = "
 WITH t AS (SELECT {NOW} AS now),
 {JOB_ROW},
 cur AS (SELECT id, cancel_requested, attempts < max_attempts + crash_resumes AS retry_ok FROM job
         WHERE state = 'running' AND attempts = $2),
 hooked AS (SELECT EXISTS (SELECT 1 FROM job_webhooks WHERE job_id = $1)
                   OR EXISTS (SELECT 1 FROM a2a_push_configs WHERE job_id = $1) AS yes),
 v AS (SELECT * FROM unnest($6::bool[], $7::bool[], $8::text[], $9::text[], $10::text[], $11::bigint[],
                            $12::text[], $13::text[], $14::bool[], $21::bool[])
                     WITH ORDINALITY AS v(cancel, retry_ok, state, result, error, backoff, reason, final_json, unlease, terminal, i)),
 pick AS (SELECT v.* FROM cur JOIN v ON v.cancel = cur.cancel_requested AND v.retry_ok = cur.retry_ok),
 {EVENTS},
 settled AS (UPDATE jobs SET state = p.state, updated_at = t.now, lease_owner = NULL, lease_expires_at = NULL,
               attempts = attempts - p.unlease::int,
               result = CASE WHEN p.unlease THEN jobs.result ELSE p.result END,
               error = CASE WHEN p.unlease THEN jobs.error ELSE p.error END,
               run_at = CASE WHEN p.unlease THEN jobs.run_at ELSE COALESCE(t.now + p.backoff, jobs.run_at) END,
               finished_at = CASE WHEN p.unlease THEN jobs.finished_at WHEN p.terminal THEN t.now END,
               pending_call = CASE WHEN p.unlease THEN jobs.pending_call END,
               termination_reason = CASE WHEN p.unlease THEN jobs.termination_reason ELSE p.reason END,
               tokens_spent = COALESCE($15, tokens_spent), cost_micros = COALESCE($16, cost_micros),
               tool_errors = tool_errors + (SELECT n FROM added_errors)
             FROM pick p, t WHERE jobs.id IN (SELECT id FROM ok) RETURNING jobs.created_at),
 nested AS (INSERT INTO nested_spend (job_id, bundle, created_at, tokens, cost_micros)
            SELECT $1, n.bundle, s.created_at, n.tokens, n.cost
            FROM settled s, unnest($17::text[], $18::bigint[], $19::bigint[]) AS n(bundle, tokens, cost)
            ON CONFLICT (job_id, bundle) DO UPDATE SET tokens = EXCLUDED.tokens, cost_micros = EXCLUDED.cost_micros
            RETURNING 1)
 SELECT {APPENDED}, (SELECT yes FROM hooked), (SELECT i FROM pick), (SELECT now FROM t),
        (SELECT COUNT(*) FROM settled), (SELECT COUNT(*) FROM nested)";

/// The events an end appends: the held ones, then the final event as the
/// variant applied stamps it.
const NEW_EVENTS: &str =
    "SELECT * FROM unnest($3::bigint[], $4::text[], $5::int[]) AS n(seq, event, tool_error)
     UNION ALL SELECT $20::bigint, p.final_json, 0 FROM pick p WHERE p.final_json IS NOT NULL";

/// A last column that raises (`sa_refused`, migration 0021) where
/// [`Appended::refusal`] would refuse the end — a clash, or fewer events
/// stored than sent — so that a transaction committed in the same round
/// trip rolls back whole (see `postgres::settle`). A stale attempt or an
/// end for the lifecycle's transaction wrote nothing and raises nothing.
const RAISE_REFUSED: &str = ", CASE WHEN EXISTS (SELECT 1 FROM cur) AND NOT (SELECT yes FROM hooked)
          AND (EXISTS (SELECT 1 FROM clash)
               OR (SELECT COUNT(*) FROM same) + (SELECT COUNT(*) FROM added) < (SELECT COUNT(DISTINCT seq) FROM new_events))
        THEN sa_refused('an event number of job ' || $1 || ' is taken') ELSE 0 END";

/// [`SQL`] with its parts filled in; `raising` adds [`RAISE_REFUSED`].
fn filled(raising: bool) -> String {
    let sql = SQL
        .replace("{NOW}", NOW)
        .replace("{JOB_ROW}", JOB_ROW)
        .replace(
            "{EVENTS}",
            &events_cte(NEW_EVENTS, "NOT (SELECT yes FROM hooked)"),
        )
        .replace("{APPENDED}", APPENDED);
    match raising {
        true => format!("{sql}{RAISE_REFUSED}"),
        false => sql,
    }
}

/// [`SQL`] with its parts filled in, built once.
pub(super) fn statement() -> &'static str {
    static STATEMENT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    STATEMENT.get_or_init(|| filled(false))
}

/// [`statement`] raising where it would refuse, built once.
pub(super) fn statement_raising() -> &'static str {
    static STATEMENT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    STATEMENT.get_or_init(|| filled(true))
}

/// Applies `end` in one statement (`sql`: [`statement`] or
/// [`statement_raising`]).
async fn apply(pg: &PgTx<'_, deadpool_postgres::Object>, end: &End<'_>, sql: &str) -> Res<Applied> {
    let params = params(end)?;
    let p: Vec<&(dyn ToSql + Sync)> = params
        .iter()
        .map(|b| b.as_ref() as &(dyn ToSql + Sync))
        .collect();
    let row = pg.first(sql, &p).await?;
    read(end, row.as_ref())
}

/// The statement's parameters for `end`.
fn params(end: &End<'_>) -> Res<Params> {
    let c = columns(end)?;
    // The final event as the first variant has it (only the stamp differs
    // between variants) for the checks of sequence numbers.
    let first_final = end.variants.first().and_then(|v| v.final_event.as_ref());
    let held = EventRows::of(end.id, end.events)?;
    let final_seq = first_final.map(|e| i64::try_from(e.seq).unwrap_or(i64::MAX));
    let (tokens, cost, nested) = spend(first_final);
    Ok(vec![
        Box::new(end.id.as_str().to_owned()),
        Box::new(i32::try_from(end.attempt).unwrap_or(i32::MAX)),
        Box::new(held.seqs),
        Box::new(held.json),
        Box::new(held.tool_errors),
        Box::new(c.cancel),
        Box::new(c.retry_ok),
        Box::new(c.state),
        Box::new(c.result),
        Box::new(c.error),
        Box::new(c.backoff),
        Box::new(c.reason),
        Box::new(c.final_json),
        Box::new(c.unlease),
        Box::new(tokens),
        Box::new(cost),
        Box::new(nested.0),
        Box::new(nested.1),
        Box::new(nested.2),
        Box::new(final_seq),
        Box::new(c.terminal),
    ])
}

/// What the statement's `row` for `end` says was applied.
fn read(end: &End<'_>, row: Option<&Row>) -> Res<Applied> {
    let row = row.ok_or_else(|| Fail::Db("the end's write answered no row".into()))?;
    let appended = Appended::read(row, 0)?;
    if !appended.current {
        return Ok(Applied::Stale);
    }
    if row.req_int(4)? != 0 {
        return Ok(Applied::Transaction);
    }
    // The held events and the final event, for the checks of sequence numbers.
    let first_final = end.variants.first().and_then(|v| v.final_event.as_ref());
    let events = EventRows::of(end.id, end.events.iter().chain(first_final))?;
    if let Some(refused) = appended.refusal(end.id, end.attempt, &events) {
        return Err(refused);
    }
    let variant = usize::try_from(row.req_int(5)? - 1)
        .map_err(|_| Fail::Db("the end matched none of its decisions".into()))?;
    let now = row.req_int(6)?;
    Ok(Applied::Done { variant, now })
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

fn stamped(final_event: Option<&EventEnvelope>, decision: &Decision) -> Option<EventEnvelope> {
    final_event.map(|e| stamp_final(e.clone(), decision))
}

/// Runs `end` on a pooled connection; what the caller answers comes from
/// the variant applied (`answer`), `None` when the lifecycle's transaction
/// must run it.
async fn run(
    w: &Writes,
    end: End<'_>,
    answer: impl FnOnce(Variant, i64) -> (Finished, Change),
) -> Result<Option<Finished>, QueueError> {
    let client = w.client().await?;
    let pg = PgTx::new(&client);
    let applied = apply(&pg, &end, statement()).await;
    w.shared.stats.sent(pg.statements());
    let Some((finished, change)) = concluded(w, end, applied, answer)? else {
        return Ok(None);
    };
    if let Some(change) = change {
        w.shared.committed(&[change]);
    }
    Ok(Some(finished))
}

/// What an applied end answers, and the change to announce once its
/// statement committed (none for a stale attempt).
pub(super) type Concluded = (Finished, Option<(Change, JobId)>);

/// What an applied end answers ([`Concluded`]); `None` when the
/// lifecycle's transaction must run it.
fn concluded(
    w: &Writes,
    end: End<'_>,
    applied: Res<Applied>,
    answer: impl FnOnce(Variant, i64) -> (Finished, Change),
) -> Result<Option<Concluded>, QueueError> {
    match applied.map_err(|f| f.into_error(&w.shared.label))? {
        Applied::Stale => Ok(Some((Finished::stale(), None))),
        Applied::Transaction => Ok(None),
        Applied::Done { variant, now } => {
            let mut variants = end.variants;
            if variant >= variants.len() {
                return Err(QueueError::Store {
                    path: w.shared.label.clone(),
                    detail: "the end matched none of its decisions".into(),
                });
            }
            let (finished, change) = answer(variants.swap_remove(variant), now);
            Ok(Some((finished, Some((change, end.id.clone())))))
        }
    }
}

/// A finish applied in a statement of someone else's transaction (see
/// `postgres::settle`): its end, built before the statement is sent.
pub(super) struct FinishEnd<'a>(End<'a>);

impl<'a> FinishEnd<'a> {
    /// `None` for an end the statement does not apply (a park).
    pub(super) fn of(op: &'a Finish) -> Option<Self> {
        finish_end(op).map(Self)
    }

    /// The statement to send in a transaction committed with others
    /// (`settle`): it raises where it would refuse ([`statement_raising`]),
    /// so that the transaction rolls back whole.
    pub(super) fn statement(&self) -> Res<Statement> {
        Ok(Statement {
            sql: statement_raising(),
            params: params(&self.0)?,
        })
    }

    /// What its statement's `rows` say was applied, once committed.
    pub(super) fn applied(&self, rows: &[Row]) -> Res<Applied> {
        read(&self.0, rows.first())
    }

    /// What the finish answers once its statement committed, and the
    /// change to announce; `None` when the lifecycle's transaction must
    /// run it (it wrote nothing).
    pub(super) fn concluded(
        self,
        w: &Writes,
        applied: Res<Applied>,
    ) -> Result<Option<Concluded>, QueueError> {
        concluded(w, self.0, applied, finish_answer)
    }
}

/// Records an attempt's outcome by the one rule, [`decide`], in one
/// statement; `None` when the lifecycle's transaction must (a park, or a
/// job with deliveries to make).
pub(super) async fn finish(w: &Writes, op: &Finish) -> Result<Option<Finished>, QueueError> {
    match finish_end(op) {
        Some(end) => run(w, end, finish_answer).await,
        None => Ok(None),
    }
}

/// A finish's end with a variant per decision; `None` for a park, which the
/// lifecycle's transaction writes (its request event and pending call).
fn finish_end(op: &Finish) -> Option<End<'_>> {
    if matches!(
        op.outcome,
        Outcome::AwaitingApproval { .. } | Outcome::NeedsAttention { .. }
    ) {
        return None;
    }
    let backoff = i64::try_from(op.retry.delay(op.attempt).as_millis()).unwrap_or(i64::MAX);
    let mut variants = Vec::with_capacity(4);
    for cancel_requested in [false, true] {
        for retry_ok in [false, true] {
            // `decide` asks only whether `attempt < allowed`.
            let allowed = if retry_ok { op.attempt + 1 } else { op.attempt };
            let decision = decide(&op.outcome, op.attempt, allowed, cancel_requested);
            variants.push(Variant {
                cancel_requested,
                retry_ok,
                result: decision.stored(&op.outcome).0,
                backoff: decision.retry.then_some(backoff),
                unlease: false,
                final_event: stamped(op.final_event.as_ref(), &decision),
                decision,
            });
        }
    }
    Some(End {
        id: &op.id,
        attempt: op.attempt,
        events: &op.events,
        reported: reported_reason(op.final_event.as_ref()),
        variants,
    })
}

/// What a finish answers for the variant its statement applied.
fn finish_answer(v: Variant, now: i64) -> (Finished, Change) {
    let run_at = v
        .backoff
        .filter(|_| !v.decision.state.is_terminal())
        .map(|b| rfc3339(now.saturating_add(b)));
    let finished = Finished {
        reply: CompleteReply::Recorded(v.decision.state),
        request_event: None,
        final_event: v.final_event,
        run_at,
    };
    (finished, Change::Updated)
}

/// Gives a running job back without using its attempt (a job whose
/// cancellation was requested ends `cancelled`), by [`decide_release`], in
/// one statement; `None` when the lifecycle's transaction must.
pub(super) async fn release(w: &Writes, op: &Release) -> Result<Option<Finished>, QueueError> {
    let mut variants = Vec::with_capacity(4);
    for cancel_requested in [false, true] {
        for retry_ok in [false, true] {
            let mut decision = decide_release(cancel_requested);
            if cancel_requested {
                decision.error = Some("cancelled by request".into());
            }
            variants.push(Variant {
                cancel_requested,
                retry_ok,
                result: None,
                backoff: None,
                unlease: !cancel_requested,
                final_event: stamped(op.final_event.as_ref(), &decide_release(cancel_requested)),
                decision,
            });
        }
    }
    let end = End {
        id: &op.id,
        attempt: op.attempt,
        events: &op.events,
        reported: reported_reason(op.final_event.as_ref()),
        variants,
    };
    run(w, end, |v, _| {
        let change = match v.unlease {
            true => Change::Runnable,
            false => Change::Updated,
        };
        let finished = Finished {
            reply: CompleteReply::Recorded(v.decision.state),
            request_event: None,
            final_event: v.final_event,
            run_at: None,
        };
        (finished, change)
    })
    .await
}
