//! The SQLite dialect of the job statements ([`JobStatements`]): one statement per method, on the writer's
//! savepoint or the reader connection. Nothing here decides anything; the
//! lifecycle does. Every method returns at once (SQLite is synchronous), so
//! the backend drives the lifecycle with `block_on` on its own threads.

use rusqlite::{Connection, OptionalExtension, Params, Row, params};

use crate::queue::statements::JobStatements;
use crate::queue::tx::{
    AttemptRow, AttemptStart, CANDIDATE_COLUMNS, Change, Columns, Conversation, Fail, JOB_COLUMNS,
    JobValues, Pin, Res, Settle, StoredSpend, TurnAhead, candidate_from_row, entry_from_row,
    insert_jobs_sql, job_from_row, start_attempt_sql,
};
use crate::queue::*;

/// The `type` of a job's `kind` (JSON text), for a listing by kind.
const KIND_TYPE: &str = "(kind ->> '$.type')";

impl From<rusqlite::Error> for Fail {
    fn from(e: rusqlite::Error) -> Self {
        Fail::Db(e.to_string())
    }
}

impl Columns for Row<'_> {
    fn text(&self, i: usize) -> Res<Option<String>> {
        Ok(self.get(i)?)
    }

    fn int(&self, i: usize) -> Res<Option<i64>> {
        Ok(self.get(i)?)
    }
}

/// A transaction (a savepoint of the writer's group commit) or a read.
/// It holds the connection exclusively: a `Connection` may move between
/// threads but not be shared, and holding it so keeps the transaction
/// `Send`, as every transaction is (see [`JobStatements`]).
pub(super) struct SqliteTx<'c> {
    conn: &'c mut Connection,
    pub(super) changes: Vec<(Change, JobId)>,
}

impl<'c> SqliteTx<'c> {
    pub(super) fn new(conn: &'c mut Connection) -> Self {
        Self {
            conn,
            changes: Vec::new(),
        }
    }

    /// Every row of a cached statement, mapped.
    pub(super) fn rows<T>(
        &self,
        sql: &str,
        p: impl Params,
        map: impl Fn(&Row<'_>) -> Res<T>,
    ) -> Res<Vec<T>> {
        let mut stmt = self.conn.prepare_cached(sql)?;
        let mut rows = stmt.query(p)?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            out.push(map(row)?);
        }
        Ok(out)
    }

    pub(super) fn first<T>(
        &self,
        sql: &str,
        p: impl Params,
        map: impl Fn(&Row<'_>) -> Res<T>,
    ) -> Res<Option<T>> {
        let mut stmt = self.conn.prepare_cached(sql)?;
        let mut rows = stmt.query(p)?;
        rows.next()?.map(map).transpose()
    }

    pub(super) fn exec(&self, sql: &str, p: impl Params) -> Res<usize> {
        Ok(self.conn.prepare_cached(sql)?.execute(p)?)
    }

    pub(super) fn one_int(&self, sql: &str, p: impl Params) -> Res<i64> {
        Ok(self.conn.prepare_cached(sql)?.query_row(p, |r| r.get(0))?)
    }
}

fn millis_now() -> i64 {
    millis(std::time::SystemTime::now())
}

fn id_of(row: &Row<'_>) -> Res<String> {
    row.req_text(0)
}

// Each method repeats its signature in `statements.rs` (as an impl must);
// kept apart from `postgres/dialect.rs`, whose methods it mirrors, as the
// SQL and the client's calling convention differ by dialect.
impl JobStatements for SqliteTx<'_> {
    async fn now(&mut self) -> Res<i64> {
        Ok(millis_now())
    }

    fn changed(&mut self, change: Change, id: &JobId) {
        self.changes.push((change, id.clone()));
    }

    async fn job(&mut self, id: &str, _lock: bool) -> Res<Option<Job>> {
        // One writer: every write already excludes every other.
        let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?1");
        self.first(&sql, [id], |r| job_from_row(r))
    }

    async fn job_by_key(&mut self, key: &str) -> Res<Option<Job>> {
        let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE idempotency_key = ?1");
        self.first(&sql, [key], |r| job_from_row(r))
    }

    async fn attempt_row(&mut self, id: &str) -> Res<Option<AttemptRow>> {
        self.first(
            "SELECT state, attempts, max_attempts + crash_resumes, cancel_requested FROM jobs WHERE id = ?1",
            [id],
            |r| AttemptRow::from_row(r),
        )
    }

    async fn ready_keys(&mut self, now: i64) -> Res<Vec<ReadyKey>> {
        // A skip scan of `jobs_fair`: each step seeks the next key.
        let sql = "WITH RECURSIVE walk(k) AS (
               SELECT (SELECT COALESCE(owner, '') FROM jobs INDEXED BY jobs_fair WHERE state = 'queued' ORDER BY COALESCE(owner, '') LIMIT 1)
               UNION ALL
               SELECT (SELECT COALESCE(owner, '') FROM jobs INDEXED BY jobs_fair WHERE state = 'queued' AND COALESCE(owner, '') > walk.k ORDER BY COALESCE(owner, '') LIMIT 1)
               FROM walk WHERE walk.k IS NOT NULL)
             SELECT k, (SELECT MAX(fair_pass) FROM jobs INDEXED BY jobs_fair_pass WHERE COALESCE(owner, '') = walk.k AND fair_pass IS NOT NULL)
             FROM walk
             WHERE k IS NOT NULL AND EXISTS (SELECT 1 FROM jobs INDEXED BY jobs_fair WHERE state = 'queued' AND COALESCE(owner, '') = walk.k AND run_at <= ?1)";
        self.rows(sql, [now], |r| {
            Ok(ReadyKey {
                key: r.req_text(0)?,
                pass: r.int(1)?,
            })
        })
    }

    async fn due_of(&mut self, key: &str, now: i64, n: usize) -> Res<Vec<Candidate>> {
        let sql = format!(
            "SELECT {CANDIDATE_COLUMNS} FROM jobs INDEXED BY jobs_fair
             WHERE state = 'queued' AND COALESCE(owner, '') = ?1 AND run_at <= ?2
             ORDER BY priority DESC, run_at ASC, id ASC LIMIT ?3"
        );
        self.rows(&sql, params![key, now, n as i64], |r| candidate_from_row(r))
    }

    async fn expired(&mut self, now: i64, n: usize) -> Res<Vec<Candidate>> {
        let sql = format!(
            "SELECT {CANDIDATE_COLUMNS} FROM jobs INDEXED BY jobs_lease
             WHERE state = 'running' AND lease_expires_at <= ?1 ORDER BY COALESCE(fair_pass, 0), run_at ASC, id ASC LIMIT ?2"
        );
        self.rows(&sql, params![now, n as i64], |r| candidate_from_row(r))
    }

    async fn list(&mut self, filter: &JobFilter, limit: usize) -> Res<Vec<Job>> {
        let (conditions, args) = filter
            .conditions(|n| format!("?{n}"), KIND_TYPE)
            .map_err(Fail::Refused)?;
        let order = filter.order.sql();
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE 1=1{conditions} ORDER BY {order} LIMIT {limit}"
        );
        self.rows(&sql, rusqlite::params_from_iter(args.iter()), |r| {
            job_from_row(r)
        })
    }

    async fn count_jobs(&mut self, filter: &JobFilter) -> Res<i64> {
        let (conditions, args) = filter
            .conditions(|n| format!("?{n}"), KIND_TYPE)
            .map_err(Fail::Refused)?;
        let sql = format!("SELECT COUNT(*) FROM jobs WHERE 1=1{conditions}");
        self.one_int(&sql, rusqlite::params_from_iter(args.iter()))
    }

    async fn counts_by_state(&mut self, owner: Option<&str>) -> Res<Vec<(String, String, i64)>> {
        let row = |r: &Row<'_>| Ok((r.req_text(0)?, r.req_text(1)?, r.req_int(2)?));
        match owner {
            Some(owner) => self.rows(
                "SELECT bundle, state, COUNT(*) FROM jobs WHERE owner = ?1 GROUP BY bundle, state",
                [owner],
                row,
            ),
            None => self.rows(
                "SELECT bundle, state, COUNT(*) FROM jobs GROUP BY bundle, state",
                [],
                row,
            ),
        }
    }

    async fn count_in_state(&mut self, state: JobState) -> Res<i64> {
        self.one_int(
            "SELECT COUNT(*) FROM jobs INDEXED BY jobs_due WHERE state = ?1",
            [state.as_str()],
        )
    }

    async fn add_tool_errors(&mut self, id: &str, n: i64) -> Res<()> {
        self.exec(
            "UPDATE jobs SET tool_errors = tool_errors + ?2 WHERE id = ?1",
            params![id, n],
        )?;
        Ok(())
    }

    async fn record_spend(&mut self, id: &str, tokens: i64, cost_micros: i64) -> Res<()> {
        self.exec(
            "UPDATE jobs SET tokens_spent = ?2, cost_micros = ?3 WHERE id = ?1",
            params![id, tokens, cost_micros],
        )?;
        Ok(())
    }

    async fn owner_load(&mut self, owner: &str, since: i64) -> Res<(i64, StoredSpend)> {
        self.first(
            "SELECT COUNT(*) FILTER (WHERE finished_at IS NULL),
                    COALESCE(SUM(tokens_spent) FILTER (WHERE created_at >= ?2), 0),
                    COALESCE(SUM(cost_micros) FILTER (WHERE created_at >= ?2), 0),
                    COALESCE(SUM(MAX(reserved_tokens - tokens_spent, 0)) FILTER (WHERE created_at >= ?2 AND finished_at IS NULL), 0),
                    COALESCE(SUM(MAX(reserved_cost_micros - cost_micros, 0)) FILTER (WHERE created_at >= ?2 AND finished_at IS NULL), 0)
             FROM jobs INDEXED BY jobs_owner_created
             WHERE owner = ?1 AND (finished_at IS NULL OR created_at >= ?2)",
            params![owner, since],
            |r| {
                let spend = StoredSpend {
                    tokens: r.req_int(1)?,
                    cost_micros: r.req_int(2)?,
                    held_tokens: r.req_int(3)?,
                    held_cost_micros: r.req_int(4)?,
                };
                Ok((r.req_int(0)?, spend))
            },
        )
        .map(|row| row.unwrap_or_default())
    }

    async fn record_nested_spend(
        &mut self,
        id: &str,
        bundle: &str,
        tokens: i64,
        cost_micros: i64,
    ) -> Res<()> {
        self.exec(
            "INSERT INTO nested_spend (job_id, bundle, created_at, tokens, cost_micros)
             SELECT id, ?2, created_at, ?3, ?4 FROM jobs WHERE id = ?1
             ON CONFLICT (job_id, bundle) DO UPDATE SET tokens = excluded.tokens, cost_micros = excluded.cost_micros",
            params![id, bundle, tokens, cost_micros],
        )?;
        Ok(())
    }

    async fn spend_since(&mut self, bundle: &str, since: i64) -> Res<StoredSpend> {
        let jobs = self.first(
            "SELECT COALESCE(SUM(tokens_spent), 0), COALESCE(SUM(cost_micros), 0),
                    COALESCE(SUM(MAX(reserved_tokens - tokens_spent, 0)) FILTER (WHERE finished_at IS NULL), 0),
                    COALESCE(SUM(MAX(reserved_cost_micros - cost_micros, 0)) FILTER (WHERE finished_at IS NULL), 0)
             FROM jobs INDEXED BY jobs_bundle_created WHERE bundle = ?1 AND created_at >= ?2",
            params![bundle, since],
            |r| {
                Ok(StoredSpend {
                    tokens: r.req_int(0)?,
                    cost_micros: r.req_int(1)?,
                    held_tokens: r.req_int(2)?,
                    held_cost_micros: r.req_int(3)?,
                })
            },
        )?;
        let nested = self.first(
            "SELECT COALESCE(SUM(tokens), 0), COALESCE(SUM(cost_micros), 0)
             FROM nested_spend WHERE bundle = ?1 AND created_at >= ?2",
            params![bundle, since],
            |r| Ok((r.req_int(0)?, r.req_int(1)?)),
        )?;
        let (mut spend, (tokens, micros)) = (jobs.unwrap_or_default(), nested.unwrap_or_default());
        spend.tokens += tokens;
        spend.cost_micros += micros;
        Ok(spend)
    }

    async fn lock_daily_budgets(&mut self) -> Res<()> {
        // One writer thread runs every write: none runs beside this one.
        Ok(())
    }

    async fn set_reservation(&mut self, id: &str, tokens: i64, cost_micros: i64) -> Res<()> {
        self.exec(
            "UPDATE jobs SET reserved_tokens = ?2, reserved_cost_micros = ?3 WHERE id = ?1",
            params![id, tokens, cost_micros],
        )?;
        Ok(())
    }

    async fn approvals_due(&mut self, now: i64, limit: usize) -> Res<Vec<String>> {
        self.rows(
            "SELECT id FROM jobs INDEXED BY jobs_due WHERE state = 'awaiting_approval' AND run_at <= ?1 LIMIT ?2",
            params![now, limit as i64],
            id_of,
        )
    }

    async fn finished_before(&mut self, cutoff: i64, limit: usize) -> Res<Vec<String>> {
        self.rows(
            "SELECT id FROM jobs INDEXED BY jobs_finished WHERE finished_at IS NOT NULL AND finished_at < ?1 ORDER BY finished_at LIMIT ?2",
            params![cutoff, limit as i64],
            id_of,
        )
    }

    async fn finished_in_conversation(&mut self, c: &Conversation<'_>) -> Res<Vec<String>> {
        self.rows(
            "SELECT id FROM jobs WHERE conversation_id = ?1 AND COALESCE(owner, '') = ?2 AND finished_at IS NOT NULL",
            params![c.id, c.owner],
            id_of,
        )
    }

    async fn count_in_conversation(&mut self, c: &Conversation<'_>) -> Res<i64> {
        self.one_int(
            "SELECT COUNT(*) FROM jobs WHERE conversation_id = ?1 AND COALESCE(owner, '') = ?2",
            params![c.id, c.owner],
        )
    }

    async fn claim_conversation(&mut self, c: &Conversation<'_>, now: i64) -> Res<()> {
        self.exec(
            "INSERT INTO conversations (owner, id, created_at) VALUES (?1, ?2, ?3) ON CONFLICT (owner, id) DO NOTHING",
            params![c.owner, c.id, now],
        )?;
        Ok(())
    }

    async fn has_conversation(&mut self, c: &Conversation<'_>, _lock: bool) -> Res<bool> {
        // One writer: every write already excludes every other.
        let row = self.first(
            "SELECT 1 FROM conversations WHERE owner = ?1 AND id = ?2",
            params![c.owner, c.id],
            |_| Ok(()),
        )?;
        Ok(row.is_some())
    }

    async fn delete_conversation(&mut self, c: &Conversation<'_>) -> Res<()> {
        self.exec(
            "DELETE FROM conversations WHERE owner = ?1 AND id = ?2",
            params![c.owner, c.id],
        )?;
        Ok(())
    }

    async fn follow_newest_turn(&mut self, c: &Conversation<'_>) -> Res<TurnAhead> {
        // One writer: the turn read is the turn marked.
        let followed = self.first(
            "UPDATE jobs SET followed = 1 WHERE id = (
                 SELECT id FROM jobs WHERE conversation_id = ?1 AND COALESCE(owner, '') = ?2
                 AND state IN ('queued', 'running') AND after_job IS NULL
                 ORDER BY created_at DESC, id DESC LIMIT 1)
             RETURNING id",
            params![c.id, c.owner],
            id_of,
        )?;
        Ok(followed.map_or(TurnAhead::Idle, TurnAhead::Followed))
    }

    async fn set_after(&mut self, id: &str, ahead: &str) -> Res<()> {
        self.exec(
            "UPDATE jobs SET after_job = ?2 WHERE id = ?1",
            params![id, ahead],
        )?;
        Ok(())
    }

    async fn insert_jobs(&mut self, jobs: &[(&JobId, &NewJob)], now: i64) -> Res<Vec<Job>> {
        use rusqlite::types::Value as V;
        let text = |t: Option<&str>| t.map_or(V::Null, |t| V::Text(t.to_string()));
        let mut values = vec![V::Integer(now)];
        for (id, job) in jobs {
            let v = JobValues::of(id, job, now);
            values.extend([
                V::Text(v.id.to_string()),
                V::Text(v.bundle.to_string()),
                text(v.bundle_version),
                V::Text(v.input.to_string()),
                V::Text(v.variables),
                V::Integer(v.priority.into()),
                V::Integer(v.max_attempts.into()),
                v.idempotency_key.map_or(V::Null, V::Text),
                text(v.traceparent),
                V::Integer(v.run_at),
                v.messages.map_or(V::Null, V::Text),
                text(v.conversation_id),
                v.limits.map_or(V::Null, V::Text),
                text(v.owner),
                text(v.bundle_digest),
                text(v.forked_from),
                v.forked_at_turn.map_or(V::Null, V::Integer),
                V::Text(v.kind),
                V::Text(v.controls),
                text(v.tracestate),
                v.run_meta.map_or(V::Null, V::Text),
            ]);
        }
        let sql = insert_jobs_sql(jobs.len(), |n| format!("?{n}"), "(idempotency_key)");
        self.rows(&sql, rusqlite::params_from_iter(values), |r| {
            job_from_row(r)
        })
    }

    async fn start_attempt(&mut self, start: &AttemptStart<'_>) -> Res<Job> {
        let sql = start_attempt_sql(|n| format!("?{n}"));
        let (c, pin) = (start.candidate, start.pin);
        let (version, digest) = (pin.map(|p| &p.version), pin.map(|p| &p.digest));
        let p = params![
            c.id,
            i64::from(c.running),
            start.worker,
            start.expires,
            start.now,
            version,
            digest,
            c.fair_pass
        ];
        self.first(&sql, p, |r| job_from_row(r))?
            .ok_or_else(|| Fail::Db(format!("job {} vanished while it was leased", c.id)))
    }

    async fn renew(&mut self, id: &str, attempt: u32, expires: i64, now: i64) -> Res<Option<bool>> {
        self.first(
            "UPDATE jobs SET lease_expires_at = ?3, updated_at = ?4 WHERE id = ?1 AND attempts = ?2 AND state = 'running' RETURNING cancel_requested",
            params![id, attempt, expires, now],
            |r| Ok(r.req_int(0)? != 0),
        )
    }

    async fn pin(&mut self, id: &str, attempt: u32, pin: &Pin) -> Res<()> {
        self.exec(
            "UPDATE jobs SET bundle_version = COALESCE(bundle_version, ?3), bundle_digest = ?4 WHERE id = ?1 AND attempts = ?2 AND bundle_digest IS NULL",
            params![id, attempt, pin.version, pin.digest],
        )?;
        Ok(())
    }

    async fn repin(&mut self, id: &str, from: &str, to: &Pin, now: i64) -> Res<bool> {
        let changed = self.exec(
            "UPDATE jobs SET bundle_version = ?3, bundle_digest = ?4, updated_at = ?5 WHERE id = ?1 AND bundle_digest = ?2 AND state IN ('queued', 'needs_attention', 'awaiting_approval')",
            params![id, from, to.version, to.digest, now],
        )?;
        Ok(changed > 0)
    }

    async fn settle(&mut self, id: &str, s: &Settle<'_>, now: i64) -> Res<()> {
        self.exec(
            "UPDATE jobs SET state = ?2, result = ?3, error = ?4, run_at = COALESCE(?5, run_at), finished_at = ?6, updated_at = ?7, pending_call = ?8, termination_reason = ?9, lease_owner = NULL, lease_expires_at = NULL WHERE id = ?1",
            params![id, s.state.as_str(), s.result, s.error, s.run_at, s.finished_at, now, s.pending_call, s.termination_reason],
        )?;
        Ok(())
    }

    async fn unlease(&mut self, id: &str, now: i64) -> Res<()> {
        self.exec(
            "UPDATE jobs SET state = 'queued', attempts = attempts - 1, lease_owner = NULL, lease_expires_at = NULL, updated_at = ?2 WHERE id = ?1",
            params![id, now],
        )?;
        Ok(())
    }

    async fn cancel_waiting(&mut self, id: &str, now: i64) -> Res<bool> {
        let ended = self.exec(
            "UPDATE jobs SET state = 'cancelled', finished_at = ?2, updated_at = ?2, error = 'cancelled by request', pending_call = NULL, termination_reason = 'cancelled' WHERE id = ?1 AND state IN ('queued', 'needs_attention', 'awaiting_approval')",
            params![id, now],
        )?;
        Ok(ended > 0)
    }

    async fn request_cancel(&mut self, id: &str, now: i64) -> Res<()> {
        self.exec(
            "UPDATE jobs SET cancel_requested = 1, updated_at = ?2 WHERE id = ?1 AND state = 'running'",
            params![id, now],
        )?;
        Ok(())
    }

    async fn requeue(&mut self, id: &str, now: i64) -> Res<()> {
        self.exec(
            "UPDATE jobs SET state = 'queued', error = NULL, pending_call = NULL, termination_reason = NULL, run_at = ?2, updated_at = ?2, attempts = MAX(attempts - 1, 0), crash_resumes = 0 WHERE id = ?1",
            params![id, now],
        )?;
        Ok(())
    }

    async fn delete_jobs(&mut self, ids: &[String]) -> Res<()> {
        for id in ids {
            self.exec("DELETE FROM events WHERE job_id = ?1", [id])?;
            self.exec("DELETE FROM journal WHERE job_id = ?1", [id])?;
            self.exec("DELETE FROM nested_spend WHERE job_id = ?1", [id])?;
            self.exec("DELETE FROM job_webhooks WHERE job_id = ?1", [id])?;
            self.exec("DELETE FROM a2a_push_configs WHERE job_id = ?1", [id])?;
            self.exec("DELETE FROM deliveries WHERE job_id = ?1", [id])?;
            self.exec("DELETE FROM jobs WHERE id = ?1", [id])?;
        }
        Ok(())
    }

    async fn insert_event(&mut self, id: &str, seq: u64, attempt: u32, json: &str) -> Res<bool> {
        let inserted = self.exec(
            "INSERT INTO events (job_id, seq, attempt, event) VALUES (?1, ?2, ?3, ?4) ON CONFLICT (job_id, seq) DO NOTHING",
            params![id, seq as i64, attempt, json],
        )?;
        Ok(inserted > 0)
    }

    async fn stored_event(&mut self, id: &str, seq: u64) -> Res<Option<(u32, String)>> {
        Ok(self
            .conn
            .prepare_cached("SELECT attempt, event FROM events WHERE job_id = ?1 AND seq = ?2")?
            .query_row(params![id, seq as i64], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?)
    }

    async fn last_seq(&mut self, id: &str) -> Res<u64> {
        let last = self.one_int(
            "SELECT COALESCE(MAX(seq), 0) FROM events WHERE job_id = ?1",
            [id],
        )?;
        Ok(last.max(0) as u64)
    }

    async fn last_event(&mut self, id: &str) -> Res<Option<String>> {
        self.first(
            "SELECT event FROM events WHERE job_id = ?1 ORDER BY seq DESC LIMIT 1",
            [id],
            |r| r.req_text(0),
        )
    }

    async fn events_after(&mut self, id: &str, after: u64, limit: usize) -> Res<Vec<StoredEvent>> {
        self.rows(
            "SELECT seq, event FROM events WHERE job_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
            params![id, after as i64, limit as i64],
            |r| {
                Ok(StoredEvent {
                    seq: r.req_int(0)?.max(0) as u64,
                    event_json: r.req_text(1)?,
                })
            },
        )
    }

    async fn journal(&mut self, id: &str) -> Res<Vec<JournalEntry>> {
        self.rows(
            "SELECT scope, turn, step, body FROM journal WHERE job_id = ?1 ORDER BY scope, turn, step",
            [id],
            |r| entry_from_row(r),
        )
    }

    async fn put_step(&mut self, id: &str, e: &JournalEntry, attempt: u32) -> Res<()> {
        self.exec(
            "INSERT OR REPLACE INTO journal (job_id, scope, turn, step, attempt, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![id, e.scope, e.turn, e.step, attempt, e.body],
        )?;
        Ok(())
    }

    async fn delete_step(&mut self, id: &str, scope: &str, turn: u32, step: &str) -> Res<()> {
        self.exec(
            "DELETE FROM journal WHERE job_id = ?1 AND scope = ?2 AND turn = ?3 AND step = ?4",
            params![id, scope, turn, step],
        )?;
        Ok(())
    }
}
