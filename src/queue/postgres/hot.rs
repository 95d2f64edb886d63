//! A job's hot path on PostgreSQL, one statement each, outside any
//! transaction: heartbeat, and journal steps with their events (the lease
//! is `lease`'s). Each statement applies what the lifecycle's
//! rules already decided (`lifecycle`, `rules`), guarded by the attempt, so
//! a stale worker changes nothing; once it committed, its changes are
//! announced (`pool::Shared::committed`).

use tokio_postgres::types::ToSql;

use super::group;
use super::pool::Writes;
use super::sql::{JOB_ROW, NOW, int, ms};
use super::transaction::PgTx;
use crate::queue::op::{Heartbeat, RecordSteps};
use crate::queue::tx::{Change, Columns, Fail, Res};
use crate::queue::*;

/// Renews a current attempt's lease: one `UPDATE`.
pub(super) async fn heartbeat(w: &Writes, op: &Heartbeat) -> Result<HeartbeatReply, QueueError> {
    let sql = format!(
        "WITH t AS (SELECT {NOW} AS now), {JOB_ROW}
         UPDATE jobs SET lease_expires_at = t.now + $3, updated_at = t.now FROM t, job
         WHERE jobs.id = job.id AND job.state = 'running' AND job.attempts = $2 RETURNING jobs.cancel_requested"
    );
    let client = w.client().await?;
    let pg = PgTx::new(&client);
    let p: [&(dyn ToSql + Sync); 3] = [&op.id.as_str(), &int(op.attempt), &ms(op.lease_for)];
    let row = pg.first(&sql, &p).await;
    w.shared.stats.sent(pg.statements());
    let row = row.map_err(|f| f.into_error(&w.shared.label))?;
    w.shared.stats.count(1);
    Ok(match row {
        None => HeartbeatReply::Lost,
        Some(row) if row.req_int(0).unwrap_or(0) != 0 => HeartbeatReply::CancelRequested,
        Some(_) => HeartbeatReply::Ok,
    })
}

/// Events as one statement binds them: sequence numbers, JSON, and whether
/// each is a tool call that ended in an error (what `tool_errors` counts).
#[derive(Default)]
pub(super) struct EventRows {
    pub seqs: Vec<i64>,
    pub json: Vec<String>,
    pub tool_errors: Vec<i32>,
}

impl EventRows {
    /// The events to append, each sequence number once: the same event twice
    /// is kept once; two different ones at one number refuse the write, as
    /// the lifecycle's `insert_events` does.
    pub(super) fn of<'a>(
        id: &JobId,
        events: impl IntoIterator<Item = &'a EventEnvelope>,
    ) -> Res<Self> {
        let mut rows = Self::default();
        for event in events {
            let json = serde_json::to_string(event)
                .map_err(|e| Fail::Db(format!("event {} cannot be encoded: {e}", event.seq)))?;
            let seq = i64::try_from(event.seq).unwrap_or(i64::MAX);
            if let Some(at) = rows.seqs.iter().position(|s| *s == seq) {
                if rows.json[at] != json {
                    return Err(Fail::Refused(QueueError::DuplicateEvent {
                        job: id.clone(),
                        seq: event.seq,
                    }));
                }
                continue;
            }
            rows.seqs.push(seq);
            rows.json.push(json);
            rows.tool_errors
                .push(i32::from(rules::tool_errors(&[event]) > 0));
        }
        Ok(rows)
    }
}

/// The part of a statement that appends events under the job's locked row
/// (`cur`, one row while the attempt is current) for attempt `$2` of job
/// `$1`: `new_events` is a query of `(seq, event, tool_error)` rows (see
/// [`EventRows`]), `go` a further condition for the write to go ahead.
/// `clash` holds the numbers already stored with other content (the write
/// must not go ahead), `same` those stored with this very content (a write
/// whose reply was lost, sent again), `ok` the job's row when the write
/// goes ahead, `added` the events appended.
pub(super) fn events_cte(new_events: &str, go: &str) -> String {
    format!(
        "new_events AS ({new_events}),
         clash AS (SELECT n.seq FROM new_events n JOIN events e ON e.job_id = $1 AND e.seq = n.seq
                   WHERE e.attempt <> $2 OR e.event <> n.event),
         same AS (SELECT n.seq FROM new_events n JOIN events e ON e.job_id = $1 AND e.seq = n.seq
                  WHERE e.attempt = $2 AND e.event = n.event),
         ok AS (SELECT id FROM cur WHERE NOT EXISTS (SELECT 1 FROM clash) AND ({go})),
         added AS (INSERT INTO events (job_id, seq, attempt, event)
                   SELECT ok.id, n.seq, $2, n.event FROM ok, new_events n
                   ON CONFLICT (job_id, seq) DO NOTHING RETURNING seq, event),
         added_errors AS (SELECT COALESCE(SUM(n.tool_error), 0)::int AS n
                          FROM new_events n JOIN added a ON a.seq = n.seq)"
    )
}

/// What [`events_cte`] found, read from the columns at `at..at+4`: whether
/// the attempt was current (`cur`), and the events' fate.
pub(super) struct Appended {
    pub current: bool,
    pub clash: Option<i64>,
    pub same: i64,
    pub added: i64,
}

/// The columns that read [`Appended`]: `cur`, the first clash, `same`, `added`.
pub(super) const APPENDED: &str = "(SELECT COUNT(*) FROM cur), (SELECT MIN(seq) FROM clash),
    (SELECT COUNT(*) FROM same), (SELECT COUNT(*) FROM added)";

impl Appended {
    pub(super) fn read(row: &tokio_postgres::Row, at: usize) -> Res<Self> {
        Ok(Self {
            current: row.req_int(at)? > 0,
            clash: row.int(at + 1)?,
            same: row.req_int(at + 2)?,
            added: row.req_int(at + 3)?,
        })
    }

    /// Why the write did not go ahead, or wrote less than it was given:
    /// refused for a stale attempt or a sequence number stored with other
    /// content.
    pub(super) fn refusal(&self, id: &JobId, attempt: u32, events: &EventRows) -> Option<Fail> {
        if !self.current {
            return Some(Fail::Refused(QueueError::StaleAttempt {
                job: id.clone(),
                attempt,
            }));
        }
        let seq = match self.clash {
            Some(seq) => seq,
            // A concurrent write of the same attempt took a number between
            // this statement's snapshot and its insert.
            None if self.same + self.added < events.seqs.len() as i64 => {
                events.seqs.first().copied().unwrap_or_default()
            }
            None => return None,
        };
        Some(Fail::Refused(QueueError::DuplicateEvent {
            job: id.clone(),
            seq: u64::try_from(seq).unwrap_or_default(),
        }))
    }
}

/// Journal steps with the events held until then, guarded by the attempt:
/// one statement (the lifecycle's `record_steps`), in the next group commit
/// (`group`).
pub(super) async fn record_steps(w: &Writes, op: &RecordSteps) -> Result<(), QueueError> {
    let label = &w.shared.label;
    let events = EventRows::of(&op.id, &op.events).map_err(|f| f.into_error(label))?;
    // The last of several entries for one step wins, as one after another.
    let mut steps: Vec<&JournalEntry> = Vec::with_capacity(op.entries.len());
    for entry in &op.entries {
        let key = |e: &JournalEntry| (e.scope.clone(), e.turn, e.step.clone());
        steps.retain(|kept| key(kept) != key(entry));
        steps.push(entry);
    }
    let column = |f: fn(&JournalEntry) -> &str| -> Vec<String> {
        steps.iter().map(|e| f(e).to_string()).collect()
    };
    let turns: Vec<i32> = steps.iter().map(|e| int(e.turn)).collect();
    let params: group::Params = vec![
        Box::new(op.id.as_str().to_string()),
        Box::new(int(op.attempt)),
        Box::new(events.seqs.clone()),
        Box::new(events.json.clone()),
        Box::new(events.tool_errors.clone()),
        Box::new(column(|e| &e.scope)),
        Box::new(turns),
        Box::new(column(|e| &e.step)),
        Box::new(column(|e| &e.body)),
    ];
    let rows = w
        .grouped(record_steps_statement(), params)
        .await
        .map_err(|f| f.into_error(label))?;
    let row = rows
        .first()
        .ok_or_else(|| Fail::Db("the journal write answered no row".into()))
        .map_err(|f| f.into_error(label))?;
    let appended = Appended::read(row, 0).map_err(|f| f.into_error(label))?;
    if let Some(refused) = appended.refusal(&op.id, op.attempt, &events) {
        return Err(refused.into_error(label));
    }
    if !op.events.is_empty() {
        w.shared.announce(&[(Change::Updated, op.id.clone())]);
    }
    Ok(())
}

/// The journal step's statement, built once.
fn record_steps_statement() -> &'static str {
    static STATEMENT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    STATEMENT.get_or_init(|| {
        format!(
            "WITH {JOB_ROW},
             cur AS (SELECT id FROM job WHERE state = 'running' AND attempts = $2),
             {},
             errors AS (UPDATE jobs SET tool_errors = tool_errors + x.n FROM added_errors x
                        WHERE jobs.id IN (SELECT id FROM ok) AND x.n > 0 RETURNING 1),
             steps AS (INSERT INTO journal (job_id, scope, turn, step, attempt, body)
                       SELECT ok.id, s.scope, s.turn, s.step, $2, s.body
                       FROM ok, unnest($6::text[], $7::int[], $8::text[], $9::text[]) AS s(scope, turn, step, body)
                       ON CONFLICT (job_id, scope, turn, step) DO UPDATE SET attempt = EXCLUDED.attempt, body = EXCLUDED.body
                       RETURNING 1)
             SELECT {APPENDED}, (SELECT COUNT(*) FROM errors), (SELECT COUNT(*) FROM steps)",
            events_cte(
                "SELECT * FROM unnest($3::bigint[], $4::text[], $5::int[]) AS n(seq, event, tool_error)",
                "TRUE"
            )
        )
    })
}
