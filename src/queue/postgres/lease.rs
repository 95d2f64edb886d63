//! The lease on PostgreSQL in one statement: abandoned runs first, then
//! queued jobs shared between keys by `queue::fair`'s rule, each first
//! attempt pinned in the statement. Each key's scan starts where this
//! daemon last leased from it (`cursor`), so the index entries a leased
//! job leaves behind — which a snapshot held elsewhere keeps vacuum from
//! removing — are walked once, not by every lease.
//!
//! A lease that would need a rule the statement cannot apply (a poison pill
//! to park, a job with A2A push configs to announce) leases nothing here and
//! says so; the driver then runs the lifecycle's lease in a transaction.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use tokio_postgres::types::ToSql;

use super::cursor::{Cursors, Next, Seen, Walk};
use super::group::{Params, Statement};
use super::pool::Writes;
use super::sql::{
    FAIR_KEY, FAIR_ORDER, NEG_PRIORITY, NOW, SCAN_FROM_HEAD, int, ms, pipelined_hot, ready_keys_sql,
};
use super::transaction::PgTx;
use crate::queue::fair;
use crate::queue::op::LeaseJobs;
use crate::queue::tx::{Change, Columns, Fail, JOB_COLUMNS, Pin, Res, job_from_row};
use crate::queue::*;

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
/// not answered yet, is written by a second statement. A lease from the
/// cursors that found nothing is made again from every key's head, unless
/// a full walk began after it (`cursor::Next`), so that a job behind a
/// cursor is not left waiting while workers idle.
pub(super) async fn lease(
    w: &Writes,
    pins: &Pins,
    cursors: &Cursors,
    op: &LeaseJobs,
) -> Result<Option<Vec<Lease>>, QueueError> {
    let mut params = LeaseParams::of(pins, cursors, op);
    loop {
        let leases = lease_once(w, pins, cursors, op, &params).await?;
        let from_cursors = params.walk != Walk::Full;
        match leases {
            Some(found) if found.is_empty() && from_cursors => loop {
                match cursors.after_nothing(params.began, Instant::now()) {
                    Next::Covered => return Ok(Some(found)),
                    Next::WalkAll => break params = params.walking_all(),
                    Next::Wait(wait) => tokio::time::sleep(wait).await,
                }
            },
            leases => return Ok(leases),
        }
    }
}

async fn lease_once(
    w: &Writes,
    pins: &Pins,
    cursors: &Cursors,
    op: &LeaseJobs,
    params: &LeaseParams,
) -> Result<Option<Vec<Lease>>, QueueError> {
    let client = w.client().await?;
    let label = &w.shared.label;
    let store = |e: tokio_postgres::Error| w.shared.store(&e);
    // Prepared first, so that it goes out in its pipelined transaction.
    let statement = params.statement_with_params();
    client.prepare_cached(statement.sql).await.map_err(store)?;
    let pg = PgTx::new(&client);
    let values: Vec<&(dyn ToSql + Sync)> = statement
        .params
        .iter()
        .map(|b| b.as_ref() as &(dyn ToSql + Sync))
        .collect();
    let (begin, rows, commit) = pipelined_hot(&client, pg.rows(statement.sql, &values)).await;
    w.shared.stats.sent(1);
    begin.map_err(store)?;
    let rows = rows.map_err(|f| f.into_error(label))?;
    commit.map_err(store)?;
    let Some(leases) = params
        .committed(cursors, &rows)
        .map_err(|f| f.into_error(label))?
    else {
        return Ok(None);
    };
    w.shared.committed(&changes(&leases));
    // The connection goes back first: a repin takes one of its own.
    drop(pg);
    drop(client);
    Ok(Some(pinned(w, pins, op, leases).await?))
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
    w: &Writes,
    pins: &Pins,
    op: &LeaseJobs,
    mut leases: Vec<(Lease, Pinning)>,
) -> Result<Vec<Lease>, QueueError> {
    if let Some(pinner) = &op.pin {
        repin(w, pins, pinner.as_ref(), &mut leases).await?;
    }
    Ok(leases.into_iter().map(|(l, _)| l).collect())
}

/// A lease statement to send: how it walks the keys (`cursor`), and its
/// parameters, owned by the caller while it runs.
pub(super) struct LeaseParams {
    walk: Walk,
    began: Instant,
    n: i64,
    max_crash_resumes: i32,
    worker: String,
    lease_for: i64,
    pins: (Vec<String>, Vec<String>, Vec<String>),
    shares: (Vec<String>, Vec<i64>),
}

impl LeaseParams {
    pub(super) fn of(pins: &Pins, cursors: &Cursors, op: &LeaseJobs) -> Self {
        let began = Instant::now();
        Self {
            walk: cursors.plan(began),
            began,
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

    /// The same lease, from every key's head (claimed by the caller).
    fn walking_all(self) -> Self {
        Self {
            walk: Walk::Full,
            began: Instant::now(),
            ..self
        }
    }

    /// The statement for this walk (each built once).
    pub(super) fn statement(&self) -> &'static str {
        static FULL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        static FROM_CURSORS: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        match self.walk {
            Walk::Full => FULL.get_or_init(|| lease_sql(false)),
            Walk::FromCursors { .. } => FROM_CURSORS.get_or_init(|| lease_sql(true)),
        }
    }

    /// The statement with its parameters, owned (cloned: the walk and
    /// the time it began stay here, for [`LeaseParams::committed`]).
    pub(super) fn statement_with_params(&self) -> Statement {
        let mut params: Params = vec![
            Box::new(self.n),
            Box::new(self.max_crash_resumes),
            Box::new(self.worker.clone()),
            Box::new(self.lease_for),
            Box::new(self.pins.0.clone()),
            Box::new(self.pins.1.clone()),
            Box::new(self.pins.2.clone()),
            Box::new(self.shares.0.clone()),
            Box::new(self.shares.1.clone()),
        ];
        if let Walk::FromCursors {
            keys,
            neg_priorities,
            run_ats,
            ids,
            expired_after,
        } = &self.walk
        {
            params.push(Box::new(keys.clone()));
            params.push(Box::new(neg_priorities.clone()));
            params.push(Box::new(run_ats.clone()));
            params.push(Box::new(ids.clone()));
            params.push(Box::new(*expired_after));
        }
        Statement {
            sql: self.statement(),
            params,
        }
    }

    /// The leases the committed statement's `rows` hold (see
    /// [`leases_of`]); the cursors learn where it leased.
    pub(super) fn committed(
        &self,
        cursors: &Cursors,
        rows: &[tokio_postgres::Row],
    ) -> Res<Option<Vec<(Lease, Pinning)>>> {
        let leases = leases_of(rows)?;
        if leases.is_some() {
            let seen = Seen::read(rows, after_job() + 5)?;
            cursors.learn(&self.walk, self.began, &seen);
        }
        Ok(leases)
    }
}

/// The lease statement (see [`lease`]): abandoned runs come first; then
/// queued jobs shared between keys by `queue::fair`'s rule, written here in
/// SQL: the keys with due jobs, each one's start (its pass, at most
/// `CREDIT` behind the most advanced), the next `$1` virtual start times
/// across keys, then each key's share of jobs in priority order, each
/// stamped with the pass it leaves its key at. A key's jobs are read with
/// `LIMIT $1`, a parameter, and cut to its share after: a `LIMIT` the
/// planner cannot know (the share) made it sort the key's whole queue.
///
/// The keys with due jobs are, in a full walk, every key (a skip scan); from
/// the cursors, the keys in `$10`, each read from its place (`$11`, `$12`,
/// `$13`) unless a probe of the range before it finds a due job of a higher
/// priority, and abandoned runs are looked for after `$14` (`cursor`).
/// After the job's columns each row carries what the lease saw
/// ([`Seen::read`]).
fn lease_sql(from_cursors: bool) -> String {
    let job = JOB_COLUMNS.split(", ");
    let returning: Vec<String> = job.clone().map(|c| format!("j.{c}")).collect();
    let selected: Vec<String> = job.map(|c| format!("s.{c}")).collect();
    let now = "(SELECT now FROM t)";
    let (keys, abandoned_after) = if from_cursors {
        (keys_from_cursors_sql(now), "AND lease_expires_at > $14")
    } else {
        let ready_keys = ready_keys_sql(now);
        let head = SCAN_FROM_HEAD;
        (
            format!("SELECT rk.k, rk.pass, {head}, {head}, '' FROM ({ready_keys}) AS rk(k, pass)"),
            "",
        )
    };
    let (base, credit) = (fair::BASE, fair::CREDIT);
    format!(
        "WITH t AS (SELECT {NOW} AS now),
         keys(k, pass, np, r, i) AS ({keys}),
         top AS (SELECT COALESCE(MAX(pass) - {credit}, 0) AS floor FROM keys),
         starts AS (SELECT keys.k, GREATEST(keys.pass, top.floor) AS start, COALESCE(s.stride, {base}) AS stride
                    FROM keys CROSS JOIN top LEFT JOIN unnest($8::text[], $9::bigint[]) AS s(k, stride) ON s.k = keys.k),
         slots AS (SELECT st.k, st.start, st.stride FROM starts st CROSS JOIN generate_series(0::bigint, $1::bigint - 1) AS g(i)
                   ORDER BY st.start + st.stride * g.i, st.k COLLATE \"C\" LIMIT $1),
         shares AS (SELECT k, MIN(start) AS start, MIN(stride) AS stride, COUNT(*) AS n FROM slots GROUP BY k),
         locked AS (SELECT sh.k, sh.start, sh.stride, sh.n AS share, d.* FROM shares sh JOIN keys kk ON kk.k = sh.k CROSS JOIN LATERAL (
                      SELECT id, crash_resumes, priority, run_at, bundle, bundle_digest IS NULL AS unpinned, bundle_version AS own_version FROM jobs
                      WHERE state = 'queued' AND {FAIR_KEY} = sh.k AND ({NEG_PRIORITY}, run_at, id) >= (kk.np, kk.r, kk.i) AND run_at <= {now}
                      ORDER BY {FAIR_ORDER} LIMIT $1 FOR UPDATE SKIP LOCKED) d),
         ranked AS (SELECT locked.*, ROW_NUMBER() OVER (PARTITION BY k ORDER BY priority DESC, run_at ASC, id ASC) AS rn
                    FROM locked),
         due AS (SELECT id, FALSE AS running, crash_resumes, run_at, bundle, unpinned, own_version, k,
                        start + stride * (rn - 1) AS fair_start, start + stride * rn AS fair_pass
                 FROM ranked WHERE rn <= share),
         expired AS (SELECT id, TRUE AS running, crash_resumes, run_at, bundle, bundle_digest IS NULL AS unpinned, bundle_version AS own_version,
                            NULL::text COLLATE \"C\" AS k, COALESCE(fair_pass, 0) AS fair_start, NULL::bigint AS fair_pass FROM jobs
                     WHERE state = 'running' AND lease_expires_at <= {now} {abandoned_after}
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
           RETURNING {}, p.unpinned AND pin.bundle IS NOT NULL AS pinned_here, p.own_version, p.rank, p.k::text AS fair_key)
         SELECT {}, s.pinned_here, s.own_version,
                (SELECT COALESCE(MAX(e.seq), 0)::BIGINT FROM events e WHERE e.job_id = s.id),
                (SELECT COALESCE(json_agg(json_build_array(l.scope, l.turn, l.step, l.body) ORDER BY l.scope, l.turn, l.step), '[]')::text
                 FROM journal l WHERE l.job_id = s.id),
                g.ok,
                s.fair_key, -(s.priority::bigint), s.run_at, {now}, (SELECT array_agg(k::text) FROM keys)
         FROM go g LEFT JOIN started s ON TRUE
         ORDER BY s.rank",
        returning.join(", "),
        selected.join(", ")
    )
}

/// The keys with due jobs among those this daemon knows (`$10`), each with
/// its pass and where its scan starts: its cursor (`$11`, `$12`, `$13`), or its
/// head when a job of a higher priority than the cursor's is due. Both
/// probes are `LIMIT 1` subqueries within the key's range (see
/// `ready_keys_sql` for why not `EXISTS`); the one before the cursor reads
/// no entry of the jobs leased at the cursor's priority.
fn keys_from_cursors_sql(now: &str) -> String {
    let head = SCAN_FROM_HEAD;
    format!(
        "SELECT c.k, (SELECT MAX(fair_pass) FROM jobs WHERE {FAIR_KEY} = c.k AND fair_pass IS NOT NULL),
                CASE WHEN c.ahead THEN {head} ELSE c.np END, CASE WHEN c.ahead THEN {head} ELSE c.r END,
                CASE WHEN c.ahead THEN '' ELSE c.i END
         FROM (SELECT c.k COLLATE \"C\" AS k, c.np, c.r, c.i,
                      (SELECT TRUE FROM jobs WHERE state = 'queued' AND {FAIR_KEY} = c.k
                         AND {NEG_PRIORITY} < c.np AND run_at <= {now} LIMIT 1) AS ahead
               FROM unnest($10::text[], $11::bigint[], $12::bigint[], $13::text[]) AS c(k, np, r, i)) c
         WHERE c.ahead OR (SELECT TRUE FROM jobs WHERE state = 'queued' AND {FAIR_KEY} = c.k
                             AND ({NEG_PRIORITY}, run_at, id) >= (c.np, c.r, c.i) AND run_at <= {now} LIMIT 1)"
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
fn leases_of(rows: &[tokio_postgres::Row]) -> Res<Option<Vec<(Lease, Pinning)>>> {
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
    let client = w.client().await?;
    let pg = PgTx::new(&client);
    let before = pg.statements();
    let done = pg.exec(sql, &[&ids, &versions, &digests, &attempts]).await;
    w.shared.stats.sent(pg.statements() - before);
    done.map(|_| ()).map_err(|f| f.into_error(&w.shared.label))
}
