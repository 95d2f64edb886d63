//! A job's hot path on PostgreSQL, one statement each, outside any
//! transaction: heartbeat, journal steps with their events, and the lease
//! (of one job or a batch). Each statement applies what the lifecycle's
//! rules already decided (`lifecycle`, `rules`), guarded by the attempt, so
//! a stale worker changes nothing; once it committed, its changes are
//! announced (`pool::Shared::committed`).
//!
//! A lease that would need a rule the statement cannot apply (a poison pill
//! to park, a job with A2A push configs to announce) leases nothing here and
//! says so; the driver then runs the lifecycle's lease in a transaction.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio_postgres::types::ToSql;

use super::dialect::{FAIR_KEY, NOW, PgTx, pipelined_hot, ready_keys_sql};
use super::group;
use super::pool::Writes;
use crate::queue::fair;
use crate::queue::op::{Heartbeat, LeaseJobs, RecordSteps};
use crate::queue::tx::{Change, Columns, Fail, JOB_COLUMNS, Pin, Res, job_from_row};
use crate::queue::*;

fn ms(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn int(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Renews a current attempt's lease: one `UPDATE`.
pub(super) async fn heartbeat(w: &Writes, op: &Heartbeat) -> Result<HeartbeatReply, QueueError> {
    let sql = format!(
        "WITH t AS (SELECT {NOW} AS now)
         UPDATE jobs SET lease_expires_at = t.now + $3, updated_at = t.now FROM t
         WHERE id = $1 AND attempts = $2 AND state = 'running' RETURNING cancel_requested"
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
            "WITH cur AS (SELECT id FROM jobs WHERE id = $1 AND state = 'running' AND attempts = $2 FOR UPDATE),
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

/// The pins the lease statement applies to first attempts, by bundle: what
/// the worker's pinner answered last (see [`lease`]).
#[derive(Default)]
pub(super) struct Pins(Mutex<HashMap<String, Pin>>);

/// Bundles whose pins are remembered at most (a bound, not a working size).
const MAX_PINS: usize = 1024;

impl Pins {
    fn arrays(&self) -> (Vec<String>, Vec<String>, Vec<String>) {
        let known = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let mut arrays = (Vec::new(), Vec::new(), Vec::new());
        for (bundle, pin) in known.iter() {
            arrays.0.push(bundle.clone());
            arrays.1.push(pin.version.clone());
            arrays.2.push(pin.digest.clone());
        }
        arrays
    }

    fn learn(&self, bundle: &str, pin: &Pin) {
        let mut known = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if known.get(bundle) == Some(pin) {
            return;
        }
        if known.len() >= MAX_PINS {
            known.clear();
        }
        known.insert(bundle.to_string(), pin.clone());
    }
}

/// Index of the first column after the job's in the lease statement's rows.
fn after_job() -> usize {
    JOB_COLUMNS.split(", ").count()
}

/// Leases up to `n` of the best runnable jobs in one statement: `None` when
/// one of them needs the lifecycle's transaction (a poison pill to park, a
/// job with push configs to announce). First attempts are pinned in the
/// statement to what the pinner answered last for their bundle; a pin the
/// pinner now answers differently (the bundle was reloaded), or one it had
/// not answered yet, is written by a second statement.
pub(super) async fn lease(
    w: &Writes,
    pins: &Pins,
    op: &LeaseJobs,
) -> Result<Option<Vec<Lease>>, QueueError> {
    let params = LeaseParams::of(pins, op);
    let client = w.client().await?;
    let label = &w.shared.label;
    let store = |e: tokio_postgres::Error| w.shared.store(&e);
    // Prepared first, so that it goes out in its pipelined transaction.
    client
        .prepare_cached(lease_statement())
        .await
        .map_err(store)?;
    let pg = PgTx::new(&client);
    let params = params.get();
    let (begin, rows, commit) = pipelined_hot(&client, pg.rows(lease_statement(), &params)).await;
    w.shared.stats.sent(1);
    begin.map_err(store)?;
    let rows = rows.map_err(|f| f.into_error(label))?;
    commit.map_err(store)?;
    let Some(leases) = leases_of(&rows).map_err(|f| f.into_error(&w.shared.label))? else {
        return Ok(None);
    };
    w.shared.committed(&changes(&leases));
    Ok(Some(pinned(&pg, w, pins, op, leases).await?))
}

/// What a committed lease changed: each leased job.
pub(super) fn changes(leases: &[(Lease, Pinning)]) -> Vec<(Change, JobId)> {
    leases
        .iter()
        .map(|(l, _)| (Change::Updated, l.job.id.clone()))
        .collect()
}

/// The leases, each first attempt pinned to what the pinner answers now
/// (see [`repin`]), once the lease statement committed.
pub(super) async fn pinned(
    pg: &PgTx<'_, deadpool_postgres::Object>,
    w: &Writes,
    pins: &Pins,
    op: &LeaseJobs,
    mut leases: Vec<(Lease, Pinning)>,
) -> Result<Vec<Lease>, QueueError> {
    if let Some(pinner) = &op.pin {
        repin(pg, w, pins, pinner.as_ref(), &mut leases).await?;
    }
    Ok(leases.into_iter().map(|(l, _)| l).collect())
}

/// The lease statement's parameters, owned by the caller while it runs.
pub(super) struct LeaseParams {
    n: i64,
    max_crash_resumes: i32,
    worker: String,
    lease_for: i64,
    pins: (Vec<String>, Vec<String>, Vec<String>),
    shares: (Vec<String>, Vec<i64>),
}

impl LeaseParams {
    pub(super) fn of(pins: &Pins, op: &LeaseJobs) -> Self {
        Self {
            n: i64::try_from(op.n).unwrap_or(i64::MAX),
            max_crash_resumes: int(op.max_crash_resumes),
            worker: op.worker.clone(),
            lease_for: ms(op.lease_for),
            pins: match op.pin {
                Some(_) => pins.arrays(),
                None => Default::default(),
            },
            shares: op.shares.arrays(),
        }
    }

    pub(super) fn get(&self) -> [&(dyn ToSql + Sync); 9] {
        [
            &self.n,
            &self.max_crash_resumes,
            &self.worker,
            &self.lease_for,
            &self.pins.0,
            &self.pins.1,
            &self.pins.2,
            &self.shares.0,
            &self.shares.1,
        ]
    }
}

/// [`lease_sql`], built once.
pub(super) fn lease_statement() -> &'static str {
    static STATEMENT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    STATEMENT.get_or_init(lease_sql)
}

/// The lease statement (see [`lease`]), built once ([`lease_statement`]). Abandoned runs come first; then
/// queued jobs shared between keys by `queue::fair`'s rule, written here in
/// SQL: the keys with due jobs (a skip scan), each one's start (its pass,
/// at most `CREDIT` behind the most advanced), the next `$1` virtual start
/// times across keys, then each key's share of jobs in priority order,
/// each stamped with the pass it leaves its key at. A key's jobs are read
/// with `LIMIT $1`, a parameter, and cut to its share after: a `LIMIT` the
/// planner cannot know (the share) made it sort the key's whole queue.
fn lease_sql() -> String {
    let job = JOB_COLUMNS.split(", ");
    let returning: Vec<String> = job.clone().map(|c| format!("j.{c}")).collect();
    let selected: Vec<String> = job.map(|c| format!("s.{c}")).collect();
    let ready_keys = ready_keys_sql("(SELECT now FROM t)");
    let (base, credit) = (fair::BASE, fair::CREDIT);
    format!(
        "WITH t AS (SELECT {NOW} AS now),
         keys(k, pass) AS ({ready_keys}),
         top AS (SELECT COALESCE(MAX(pass) - {credit}, 0) AS floor FROM keys),
         starts AS (SELECT keys.k, GREATEST(keys.pass, top.floor) AS start, COALESCE(s.stride, {base}) AS stride
                    FROM keys CROSS JOIN top LEFT JOIN unnest($8::text[], $9::bigint[]) AS s(k, stride) ON s.k = keys.k),
         slots AS (SELECT st.k, st.start, st.stride FROM starts st CROSS JOIN generate_series(0::bigint, $1::bigint - 1) AS g(i)
                   ORDER BY st.start + st.stride * g.i, st.k COLLATE \"C\" LIMIT $1),
         shares AS (SELECT k, MIN(start) AS start, MIN(stride) AS stride, COUNT(*) AS n FROM slots GROUP BY k),
         locked AS (SELECT sh.k, sh.start, sh.stride, sh.n AS share, d.* FROM shares sh CROSS JOIN LATERAL (
                      SELECT id, crash_resumes, priority, run_at, bundle, bundle_digest IS NULL AS unpinned, bundle_version AS own_version FROM jobs
                      WHERE state = 'queued' AND {FAIR_KEY} = sh.k AND run_at <= (SELECT now FROM t)
                      ORDER BY priority DESC, run_at ASC, id ASC LIMIT $1 FOR UPDATE SKIP LOCKED) d),
         ranked AS (SELECT locked.*, ROW_NUMBER() OVER (PARTITION BY k ORDER BY priority DESC, run_at ASC, id ASC) AS rn
                    FROM locked),
         due AS (SELECT id, FALSE AS running, crash_resumes, run_at, bundle, unpinned, own_version, k,
                        start + stride * (rn - 1) AS fair_start, start + stride * rn AS fair_pass
                 FROM ranked WHERE rn <= share),
         expired AS (SELECT id, TRUE AS running, crash_resumes, run_at, bundle, bundle_digest IS NULL AS unpinned, bundle_version AS own_version,
                            NULL::text COLLATE \"C\" AS k, COALESCE(fair_pass, 0) AS fair_start, NULL::bigint AS fair_pass FROM jobs
                     WHERE state = 'running' AND lease_expires_at <= (SELECT now FROM t)
                     ORDER BY COALESCE(fair_pass, 0), run_at ASC, id ASC LIMIT $1 FOR UPDATE SKIP LOCKED),
         picked AS (SELECT c.*, ROW_NUMBER() OVER (ORDER BY c.running DESC, c.fair_start, c.k COLLATE \"C\", c.run_at, c.id) AS rank,
                           (c.running AND c.crash_resumes >= $2)
                               OR EXISTS (SELECT 1 FROM a2a_push_configs p WHERE p.job_id = c.id) AS slow
                    FROM (SELECT * FROM expired UNION ALL SELECT * FROM due) c
                    ORDER BY rank LIMIT $1),
         go AS (SELECT NOT EXISTS (SELECT 1 FROM picked WHERE slow) AS ok),
         started AS (
           UPDATE jobs j SET state = 'running', attempts = j.attempts + 1,
                  crash_resumes = j.crash_resumes + p.running::int, lease_owner = $3,
                  lease_expires_at = t.now + $4, started_at = COALESCE(j.started_at, t.now), updated_at = t.now,
                  bundle_version = CASE WHEN j.bundle_digest IS NULL THEN COALESCE(j.bundle_version, pin.version) ELSE j.bundle_version END,
                  bundle_digest = COALESCE(j.bundle_digest, pin.digest),
                  fair_pass = COALESCE(p.fair_pass, j.fair_pass)
           FROM picked p CROSS JOIN t CROSS JOIN go
                LEFT JOIN unnest($5::text[], $6::text[], $7::text[]) AS pin(bundle, version, digest) ON pin.bundle = p.bundle
           WHERE j.id = p.id AND go.ok
           RETURNING {}, p.unpinned AND pin.bundle IS NOT NULL AS pinned_here, p.own_version, p.rank)
         SELECT {}, s.pinned_here, s.own_version,
                (SELECT COALESCE(MAX(e.seq), 0)::BIGINT FROM events e WHERE e.job_id = s.id),
                (SELECT COALESCE(json_agg(json_build_array(l.scope, l.turn, l.step, l.body) ORDER BY l.scope, l.turn, l.step), '[]')::text
                 FROM journal l WHERE l.job_id = s.id),
                g.ok
         FROM go g LEFT JOIN started s ON TRUE
         ORDER BY s.rank",
        returning.join(", "),
        selected.join(", ")
    )
}

/// How a leased job was pinned by the lease statement: by it (`here`, with
/// a pin learnt earlier), and the version it was submitted with, which a
/// pin keeps (as `start_attempt` does).
pub(super) struct Pinning {
    here: bool,
    own_version: Option<String>,
}

/// The leases a lease statement's rows hold (with how each was pinned), or
/// `None` when it leased nothing because a job needs the lifecycle's
/// transaction.
pub(super) fn leases_of(rows: &[tokio_postgres::Row]) -> Res<Option<Vec<(Lease, Pinning)>>> {
    let mut leases = Vec::with_capacity(rows.len());
    let after = after_job();
    for row in rows {
        if row.int(after + 4)? == Some(0) {
            return Ok(None);
        }
        if row.text(0)?.is_none() {
            continue; // No job was due.
        }
        let job = job_from_row(row)?;
        let pinning = Pinning {
            here: row.int(after)?.unwrap_or(0) != 0,
            own_version: row.text(after + 1)?,
        };
        let last_seq = u64::try_from(row.req_int(after + 2)?).unwrap_or_default();
        let journal: Vec<(String, u32, String, String)> =
            serde_json::from_str(&row.req_text(after + 3)?)
                .map_err(|e| Fail::Db(format!("a leased job's journal did not read: {e}")))?;
        let journal = journal
            .into_iter()
            .map(|(scope, turn, step, body)| JournalEntry {
                scope,
                turn,
                step,
                body,
            })
            .collect();
        leases.push((
            Lease {
                attempt: job.attempts,
                next_seq: last_seq + 1,
                journal,
                job: job.into(),
            },
            pinning,
        ));
    }
    Ok(Some(leases))
}

/// Pins the first attempts the lease statement could not pin to what the
/// pinner answers now (its answer was not known, or has changed), in one
/// more statement; remembers the answers for the next lease.
async fn repin(
    pg: &PgTx<'_, deadpool_postgres::Object>,
    w: &Writes,
    pins: &Pins,
    pinner: &Pinner,
    leases: &mut [(Lease, Pinning)],
) -> Result<(), QueueError> {
    let mut ids = Vec::new();
    let mut versions = Vec::new();
    let mut digests = Vec::new();
    let mut attempts = Vec::new();
    for (lease, pinning) in leases.iter_mut() {
        let job = &mut lease.job;
        let Some(want) = pinner(&job.bundle) else {
            continue;
        };
        pins.learn(&job.bundle, &want);
        let unpinned = job.bundle_digest.is_none();
        // A version the job was submitted with stays (as in `start_attempt`).
        let version = pinning
            .own_version
            .clone()
            .unwrap_or_else(|| want.version.clone());
        let right = job.bundle_digest.as_deref() == Some(&want.digest)
            && job.bundle_version.as_deref() == Some(&version);
        if !(unpinned || pinning.here) || right {
            continue;
        }
        job.bundle_version = Some(version.clone());
        job.bundle_digest = Some(want.digest.clone());
        ids.push(job.id.as_str().to_string());
        versions.push(version);
        digests.push(want.digest);
        attempts.push(int(lease.attempt));
    }
    if ids.is_empty() {
        return Ok(());
    }
    let sql = "UPDATE jobs j SET bundle_version = v.version, bundle_digest = v.digest
               FROM unnest($1::text[], $2::text[], $3::text[], $4::int[]) AS v(id, version, digest, attempts)
               WHERE j.id = v.id AND j.attempts = v.attempts AND j.state = 'running'";
    let before = pg.statements();
    let done = pg.exec(sql, &[&ids, &versions, &digests, &attempts]).await;
    w.shared.stats.sent(pg.statements() - before);
    done.map(|_| ()).map_err(|f| f.into_error(&w.shared.label))
}
