//! The PostgreSQL dialect of the job statements ([`JobStatements`]): one statement per method, on a
//! transaction or (for reads) a pooled connection (`PgTx`, in
//! `transaction.rs`). Nothing here decides anything; the lifecycle does.
//!
//! What differs from SQLite is how writers are kept apart: the attempt row
//! and the lease candidates are read `FOR UPDATE` (candidates `SKIP LOCKED`),
//! so two daemons never lease one job and never interleave two writes to
//! it; and times come from the database's clock, so daemons whose clocks
//! disagree still agree on when a lease expires.

use deadpool_postgres::GenericClient;
use tokio_postgres::types::ToSql;

use super::sql::{FAIR_KEY, FAIR_ORDER, JOB_ROW, KEYED, NOW, int, ready_keys_sql};
use super::transaction::{Params, PgTx};
use crate::queue::statements::JobStatements;
use crate::queue::tx::{
    AttemptRow, AttemptStart, CANDIDATE_COLUMNS, Change, Columns, Conversation, Fail, JOB_COLUMNS,
    JobValues, Pin, Res, Settle, StoredSpend, TurnAhead, candidate_from_row, entry_from_row,
    insert_jobs_sql, job_from_row, start_attempt_sql,
};
use crate::queue::*;

/// The `type` of a job's `kind` (JSON text, read as `jsonb`), for a
/// listing by kind.
const KIND_TYPE: &str = "(kind::jsonb ->> 'type')";

fn big(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn big_usize(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The statements' shared shapes: a job, lease candidates, ids.
impl<C: GenericClient> PgTx<'_, C> {
    async fn job_where(&self, sql: &str, p: Params<'_>) -> Res<Option<Job>> {
        self.first(sql, p)
            .await?
            .as_ref()
            .map(job_from_row)
            .transpose()
    }

    async fn candidates(&self, sql: &str, now: i64, n: usize) -> Res<Vec<Candidate>> {
        let rows = self.rows(sql, &[&now, &big_usize(n)]).await?;
        rows.iter().map(candidate_from_row).collect()
    }

    async fn ids(&self, sql: &str, p: Params<'_>) -> Res<Vec<String>> {
        self.rows(sql, p)
            .await?
            .iter()
            .map(|r| r.req_text(0))
            .collect()
    }
}

impl<C: GenericClient> JobStatements for PgTx<'_, C> {
    async fn now(&mut self) -> Res<i64> {
        self.one_int(&format!("SELECT {NOW}"), &[]).await
    }

    fn changed(&mut self, change: Change, id: &JobId) {
        self.changes.push((change, id.clone()));
    }

    async fn job(&mut self, id: &str, lock: bool) -> Res<Option<Job>> {
        let lock = if lock { " FOR UPDATE" } else { "" };
        let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1{lock}");
        self.job_where(&sql, &[&id]).await
    }

    async fn job_by_key(&mut self, key: &str) -> Res<Option<Job>> {
        let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE idempotency_key = $1");
        self.job_where(&sql, &[&key]).await
    }

    async fn attempt_row(&mut self, id: &str) -> Res<Option<AttemptRow>> {
        let sql = "SELECT state, attempts, max_attempts + crash_resumes, cancel_requested FROM jobs WHERE id = $1 FOR UPDATE";
        let row = self.first(sql, &[&id]).await?;
        row.as_ref().map(AttemptRow::from_row).transpose()
    }

    async fn ready_keys(&mut self, now: i64) -> Res<Vec<ReadyKey>> {
        let rows = self.rows(&ready_keys_sql("$1"), &[&now]).await?;
        rows.iter()
            .map(|r| {
                Ok(ReadyKey {
                    key: r.req_text(0)?,
                    pass: r.int(1)?,
                })
            })
            .collect()
    }

    async fn due_of(&mut self, key: &str, now: i64, n: usize) -> Res<Vec<Candidate>> {
        let sql = format!(
            "SELECT {CANDIDATE_COLUMNS} FROM jobs
             WHERE state = 'queued' AND {FAIR_KEY} = $1 AND run_at <= $2
             ORDER BY {FAIR_ORDER}
             LIMIT $3 FOR UPDATE SKIP LOCKED"
        );
        let rows = self.rows(&sql, &[&key, &now, &big_usize(n)]).await?;
        rows.iter().map(candidate_from_row).collect()
    }

    async fn expired(&mut self, now: i64, n: usize) -> Res<Vec<Candidate>> {
        let sql = format!(
            "SELECT {CANDIDATE_COLUMNS} FROM jobs
             WHERE state = 'running' AND lease_expires_at <= $1 ORDER BY COALESCE(fair_pass, 0), run_at ASC, id ASC
             LIMIT $2 FOR UPDATE SKIP LOCKED"
        );
        self.candidates(&sql, now, n).await
    }

    async fn list(&mut self, filter: &JobFilter, limit: usize) -> Res<Vec<Job>> {
        let (conditions, args) = filter
            .conditions(|n| format!("${n}"), KIND_TYPE)
            .map_err(Fail::Refused)?;
        let order = filter.order.sql();
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE TRUE{conditions} ORDER BY {order} LIMIT {limit}"
        );
        let rows = self.filtered(&sql, &args).await?;
        rows.iter().map(job_from_row).collect()
    }

    async fn count_jobs(&mut self, filter: &JobFilter) -> Res<i64> {
        let (conditions, args) = filter
            .conditions(|n| format!("${n}"), KIND_TYPE)
            .map_err(Fail::Refused)?;
        let sql = format!("SELECT COUNT(*) FROM jobs WHERE TRUE{conditions}");
        let rows = self.filtered(&sql, &args).await?;
        match rows.first() {
            Some(row) => row.req_int(0),
            None => Ok(0),
        }
    }

    async fn counts_by_state(&mut self, owner: Option<&str>) -> Res<Vec<(String, String, i64)>> {
        let rows = match owner {
            Some(owner) => {
                let sql = "SELECT bundle, state, COUNT(*) FROM jobs WHERE owner = $1
                           GROUP BY bundle, state";
                self.rows(sql, &[&owner]).await?
            }
            None => {
                let sql = "SELECT bundle, state, COUNT(*) FROM jobs GROUP BY bundle, state";
                self.rows(sql, &[]).await?
            }
        };
        rows.iter()
            .map(|r| Ok((r.req_text(0)?, r.req_text(1)?, r.req_int(2)?)))
            .collect()
    }

    async fn count_in_state(&mut self, state: JobState) -> Res<i64> {
        // The state as a literal, so each count walks its partial index.
        let sql = format!(
            "SELECT COUNT(*) FROM jobs WHERE state = '{}'",
            state.as_str()
        );
        self.one_int(&sql, &[]).await
    }

    async fn add_tool_errors(&mut self, id: &str, n: i64) -> Res<()> {
        let sql = "UPDATE jobs SET tool_errors = tool_errors + $2 WHERE id = $1";
        self.exec(sql, &[&id, &n]).await?;
        Ok(())
    }

    async fn record_spend(&mut self, id: &str, tokens: i64, cost_micros: i64) -> Res<()> {
        let sql = "UPDATE jobs SET tokens_spent = $2, cost_micros = $3 WHERE id = $1";
        self.exec(sql, &[&id, &tokens, &cost_micros]).await?;
        Ok(())
    }

    async fn owner_load(&mut self, owner: &str, since: i64) -> Res<(i64, StoredSpend)> {
        let sql = "SELECT COUNT(*) FILTER (WHERE finished_at IS NULL),
                          COALESCE(SUM(tokens_spent) FILTER (WHERE created_at >= $2), 0)::BIGINT,
                          COALESCE(SUM(cost_micros) FILTER (WHERE created_at >= $2), 0)::BIGINT,
                          COALESCE(SUM(GREATEST(reserved_tokens - tokens_spent, 0)) FILTER (WHERE created_at >= $2 AND finished_at IS NULL), 0)::BIGINT,
                          COALESCE(SUM(GREATEST(reserved_cost_micros - cost_micros, 0)) FILTER (WHERE created_at >= $2 AND finished_at IS NULL), 0)::BIGINT
                   FROM jobs WHERE owner = $1 AND (finished_at IS NULL OR created_at >= $2)";
        let row = self.one_unprepared(sql, &[&owner, &since]).await?;
        let spend = StoredSpend {
            tokens: row.req_int(1)?,
            cost_micros: row.req_int(2)?,
            held_tokens: row.req_int(3)?,
            held_cost_micros: row.req_int(4)?,
        };
        Ok((row.req_int(0)?, spend))
    }

    async fn record_nested_spend(
        &mut self,
        id: &str,
        bundle: &str,
        tokens: i64,
        cost_micros: i64,
    ) -> Res<()> {
        let sql = "INSERT INTO nested_spend (job_id, bundle, created_at, tokens, cost_micros)
                   SELECT id, $2, created_at, $3, $4 FROM jobs WHERE id = $1
                   ON CONFLICT (job_id, bundle) DO UPDATE SET tokens = EXCLUDED.tokens, cost_micros = EXCLUDED.cost_micros";
        self.exec(sql, &[&id, &bundle, &tokens, &cost_micros])
            .await?;
        Ok(())
    }

    async fn spend_since(&mut self, bundle: &str, since: i64) -> Res<StoredSpend> {
        let sql = "SELECT (j.tokens + n.tokens)::BIGINT, (j.micros + n.micros)::BIGINT, j.held_tokens::BIGINT, j.held_micros::BIGINT
                   FROM (SELECT COALESCE(SUM(tokens_spent), 0) AS tokens, COALESCE(SUM(cost_micros), 0) AS micros,
                                COALESCE(SUM(GREATEST(reserved_tokens - tokens_spent, 0)) FILTER (WHERE finished_at IS NULL), 0) AS held_tokens,
                                COALESCE(SUM(GREATEST(reserved_cost_micros - cost_micros, 0)) FILTER (WHERE finished_at IS NULL), 0) AS held_micros
                         FROM jobs WHERE bundle = $1 AND created_at >= $2) j,
                        (SELECT COALESCE(SUM(tokens), 0) AS tokens, COALESCE(SUM(cost_micros), 0) AS micros
                         FROM nested_spend WHERE bundle = $1 AND created_at >= $2) n";
        let row = self.one_unprepared(sql, &[&bundle, &since]).await?;
        Ok(StoredSpend {
            tokens: row.req_int(0)?,
            cost_micros: row.req_int(1)?,
            held_tokens: row.req_int(2)?,
            held_cost_micros: row.req_int(3)?,
        })
    }

    async fn lock_daily_budgets(&mut self) -> Res<()> {
        // One lock for every daily budget: a submit takes it before any
        // other lock of its own (`reservations::DayLedger::lock`), so no two
        // writes wait on each other around it. Keyed by the schema, as the
        // migrations' lock: queues in other schemas do not wait for it.
        let sql = "SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || ':daily_budgets', 0))";
        self.exec(sql, &[]).await?;
        Ok(())
    }

    async fn set_reservation(&mut self, id: &str, tokens: i64, cost_micros: i64) -> Res<()> {
        let sql = "UPDATE jobs SET reserved_tokens = $2, reserved_cost_micros = $3 WHERE id = $1";
        self.exec(sql, &[&id, &tokens, &cost_micros]).await?;
        Ok(())
    }

    async fn approvals_due(&mut self, now: i64, limit: usize) -> Res<Vec<String>> {
        // Several daemons sweep: each takes rows no other holds.
        let sql = "SELECT id FROM jobs WHERE state = 'awaiting_approval' AND run_at <= $1
                   ORDER BY run_at LIMIT $2 FOR UPDATE SKIP LOCKED";
        self.ids(sql, &[&now, &big_usize(limit)]).await
    }

    async fn finished_before(&mut self, cutoff: i64, limit: usize) -> Res<Vec<String>> {
        let sql = "SELECT id FROM jobs WHERE finished_at IS NOT NULL AND finished_at < $1
                   ORDER BY finished_at LIMIT $2 FOR UPDATE SKIP LOCKED";
        self.ids(sql, &[&cutoff, &big_usize(limit)]).await
    }

    async fn finished_in_conversation(&mut self, c: &Conversation<'_>) -> Res<Vec<String>> {
        let sql = "SELECT id FROM jobs WHERE conversation_id = $1 AND COALESCE(owner, '') = $2
                   AND finished_at IS NOT NULL FOR UPDATE SKIP LOCKED";
        self.ids(sql, &[&c.id, &c.owner]).await
    }

    async fn count_in_conversation(&mut self, c: &Conversation<'_>) -> Res<i64> {
        let sql =
            "SELECT COUNT(*) FROM jobs WHERE conversation_id = $1 AND COALESCE(owner, '') = $2";
        self.one_int(sql, &[&c.id, &c.owner]).await
    }

    async fn claim_conversation(&mut self, c: &Conversation<'_>, now: i64) -> Res<()> {
        // A concurrent claim of the same conversation is waited for; once
        // it commits the primary key makes this one insert nothing.
        let sql = "INSERT INTO conversations (owner, id, created_at) VALUES ($1, $2, $3)
                   ON CONFLICT (owner, id) DO NOTHING";
        self.exec(sql, &[&c.owner, &c.id, &now]).await?;
        Ok(())
    }

    async fn has_conversation(&mut self, c: &Conversation<'_>, lock: bool) -> Res<bool> {
        let sql = if lock {
            "SELECT 1 FROM conversations WHERE owner = $1 AND id = $2 FOR UPDATE"
        } else {
            "SELECT 1 FROM conversations WHERE owner = $1 AND id = $2"
        };
        Ok(self.first(sql, &[&c.owner, &c.id]).await?.is_some())
    }

    async fn delete_conversation(&mut self, c: &Conversation<'_>) -> Res<()> {
        let sql = "DELETE FROM conversations WHERE owner = $1 AND id = $2";
        self.exec(sql, &[&c.owner, &c.id]).await?;
        Ok(())
    }

    async fn follow_newest_turn(&mut self, c: &Conversation<'_>) -> Res<TurnAhead> {
        // The update locks the turn until commit: an ending that races this
        // submit waits for it, and its trigger then sees the follower. A
        // turn that ended after the read fails the state test: `Moved`.
        let sql = "WITH newest AS (
                       SELECT id FROM jobs WHERE conversation_id = $1 AND COALESCE(owner, '') = $2
                       AND state IN ('queued', 'running') AND after_job IS NULL
                       ORDER BY created_at DESC, id DESC LIMIT 1),
                   marked AS (
                       UPDATE jobs SET followed = TRUE FROM newest
                       WHERE jobs.id = newest.id AND jobs.state IN ('queued', 'running') AND jobs.after_job IS NULL
                       RETURNING jobs.id)
                   SELECT (SELECT id FROM newest), (SELECT id FROM marked)";
        let row = self.first(sql, &[&c.id, &c.owner]).await?;
        let (newest, marked) = match &row {
            Some(row) => (row.text(0)?, row.text(1)?),
            None => (None, None),
        };
        Ok(match (newest, marked) {
            (_, Some(id)) => TurnAhead::Followed(id),
            (Some(_), None) => TurnAhead::Moved,
            (None, None) => TurnAhead::Idle,
        })
    }

    async fn set_after(&mut self, id: &str, ahead: &str) -> Res<()> {
        let sql = "UPDATE jobs SET after_job = $2 WHERE id = $1";
        self.exec(sql, &[&id, &ahead]).await?;
        Ok(())
    }

    async fn insert_jobs(&mut self, jobs: &[(&JobId, &NewJob)], now: i64) -> Res<Vec<Job>> {
        let values: Vec<JobValues> = jobs
            .iter()
            .map(|(id, job)| JobValues::of(id, job, now))
            .collect();
        let max_attempts: Vec<i32> = values.iter().map(|v| int(v.max_attempts)).collect();
        let fork_turns: Vec<Option<i32>> = values
            .iter()
            .map(|v| {
                v.forked_at_turn
                    .map(|t| i32::try_from(t).unwrap_or(i32::MAX))
            })
            .collect();
        let mut p: Vec<&(dyn ToSql + Sync)> = vec![&now];
        for ((v, max_attempts), fork_turn) in values.iter().zip(&max_attempts).zip(&fork_turns) {
            p.extend([
                &v.id as &(dyn ToSql + Sync),
                &v.bundle,
                &v.bundle_version,
                &v.input,
                &v.variables,
                &v.priority,
                max_attempts,
                &v.idempotency_key,
                &v.traceparent,
                &v.run_at,
                &v.messages,
                &v.conversation_id,
                &v.limits,
                &v.owner,
                &v.bundle_digest,
                &v.forked_from,
                fork_turn,
                &v.kind,
                &v.controls,
                &v.tracestate,
                &v.run_meta,
            ]);
        }
        // Not cached: the statement's shape depends on the number of rows.
        let sql = insert_jobs_sql(jobs.len(), |n| format!("${n}"), KEYED);
        let rows = self.rows_unprepared(&sql, &p).await?;
        rows.iter().map(job_from_row).collect()
    }

    async fn start_attempt(&mut self, start: &AttemptStart<'_>) -> Res<Job> {
        let sql = start_attempt_sql(|n| format!("${n}"));
        let (c, pin) = (start.candidate, start.pin);
        let (version, digest) = (pin.map(|p| &p.version), pin.map(|p| &p.digest));
        let resumed = i32::from(c.running);
        let p: Params = &[
            &c.id,
            &resumed,
            &start.worker,
            &start.expires,
            &start.now,
            &version,
            &digest,
            &c.fair_pass,
        ];
        self.job_where(&sql, p)
            .await?
            .ok_or_else(|| Fail::Db(format!("job {} vanished while it was leased", c.id)))
    }

    async fn renew(&mut self, id: &str, attempt: u32, expires: i64, now: i64) -> Res<Option<bool>> {
        let sql = format!(
            "WITH {JOB_ROW} UPDATE jobs SET lease_expires_at = $3, updated_at = $4 FROM job
             WHERE jobs.id = job.id AND job.attempts = $2 AND job.state = 'running' RETURNING jobs.cancel_requested"
        );
        let row = self
            .first(&sql, &[&id, &int(attempt), &expires, &now])
            .await?;
        Ok(match row {
            Some(row) => Some(row.try_get::<_, bool>(0)?),
            None => None,
        })
    }

    async fn pin(&mut self, id: &str, attempt: u32, pin: &Pin) -> Res<()> {
        let sql = "UPDATE jobs SET bundle_version = COALESCE(bundle_version, $3), bundle_digest = $4 WHERE id = $1 AND attempts = $2 AND bundle_digest IS NULL";
        self.exec(sql, &[&id, &int(attempt), &pin.version, &pin.digest])
            .await?;
        Ok(())
    }

    async fn repin(&mut self, id: &str, from: &str, to: &Pin, now: i64) -> Res<bool> {
        let sql = "UPDATE jobs SET bundle_version = $3, bundle_digest = $4, updated_at = $5 WHERE id = $1 AND bundle_digest = $2 AND state IN ('queued', 'needs_attention', 'awaiting_approval')";
        let changed = self
            .exec(sql, &[&id, &from, &to.version, &to.digest, &now])
            .await?;
        Ok(changed > 0)
    }

    async fn settle(&mut self, id: &str, s: &Settle<'_>, now: i64) -> Res<()> {
        let sql = "UPDATE jobs SET state = $2, result = $3, error = $4, run_at = COALESCE($5, run_at), finished_at = $6, updated_at = $7, pending_call = $8, termination_reason = $9, lease_owner = NULL, lease_expires_at = NULL WHERE id = $1";
        let state = s.state.as_str();
        let p: Params = &[
            &id,
            &state,
            &s.result,
            &s.error,
            &s.run_at,
            &s.finished_at,
            &now,
            &s.pending_call,
            &s.termination_reason,
        ];
        self.exec(sql, p).await?;
        Ok(())
    }

    async fn unlease(&mut self, id: &str, now: i64) -> Res<()> {
        let sql = "UPDATE jobs SET state = 'queued', attempts = attempts - 1, lease_owner = NULL, lease_expires_at = NULL, updated_at = $2 WHERE id = $1";
        self.exec(sql, &[&id, &now]).await?;
        Ok(())
    }

    async fn cancel_waiting(&mut self, id: &str, now: i64) -> Res<bool> {
        let sql = "UPDATE jobs SET state = 'cancelled', finished_at = $2, updated_at = $2, error = 'cancelled by request', pending_call = NULL, termination_reason = 'cancelled' WHERE id = $1 AND state IN ('queued', 'needs_attention', 'awaiting_approval')";
        Ok(self.exec(sql, &[&id, &now]).await? > 0)
    }

    async fn request_cancel(&mut self, id: &str, now: i64) -> Res<()> {
        let sql = "UPDATE jobs SET cancel_requested = TRUE, updated_at = $2 WHERE id = $1 AND state = 'running'";
        self.exec(sql, &[&id, &now]).await?;
        Ok(())
    }

    async fn requeue(&mut self, id: &str, now: i64) -> Res<()> {
        let sql = "UPDATE jobs SET state = 'queued', error = NULL, pending_call = NULL, termination_reason = NULL, run_at = $2, updated_at = $2, attempts = GREATEST(attempts - 1, 0), crash_resumes = 0 WHERE id = $1";
        self.exec(sql, &[&id, &now]).await?;
        Ok(())
    }

    async fn delete_jobs(&mut self, ids: &[String]) -> Res<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let sql = "WITH gone_events AS (DELETE FROM events WHERE job_id = ANY($1)),
                        gone_steps AS (DELETE FROM journal WHERE job_id = ANY($1)),
                        gone_spend AS (DELETE FROM nested_spend WHERE job_id = ANY($1)),
                        gone_hooks AS (DELETE FROM job_webhooks WHERE job_id = ANY($1)),
                        gone_pushes AS (DELETE FROM a2a_push_configs WHERE job_id = ANY($1)),
                        gone_deliveries AS (DELETE FROM deliveries WHERE job_id = ANY($1))
                   DELETE FROM jobs WHERE id = ANY($1)";
        self.exec(sql, &[&ids]).await?;
        Ok(())
    }

    async fn insert_event(&mut self, id: &str, seq: u64, attempt: u32, json: &str) -> Res<bool> {
        let sql = "INSERT INTO events (job_id, seq, attempt, event) VALUES ($1, $2, $3, $4) ON CONFLICT (job_id, seq) DO NOTHING";
        Ok(self
            .exec(sql, &[&id, &big(seq), &int(attempt), &json])
            .await?
            > 0)
    }

    async fn stored_event(&mut self, id: &str, seq: u64) -> Res<Option<(u32, String)>> {
        let sql = "SELECT attempt, event FROM events WHERE job_id = $1 AND seq = $2";
        let Some(row) = self.first(sql, &[&id, &big(seq)]).await? else {
            return Ok(None);
        };
        let attempt = u32::try_from(row.req_int(0)?.max(0)).unwrap_or(u32::MAX);
        Ok(Some((attempt, row.req_text(1)?)))
    }

    async fn last_seq(&mut self, id: &str) -> Res<u64> {
        let sql = "SELECT COALESCE(MAX(seq), 0)::BIGINT FROM events WHERE job_id = $1";
        Ok(self.one_int(sql, &[&id]).await?.max(0) as u64)
    }

    async fn last_event(&mut self, id: &str) -> Res<Option<String>> {
        let sql = "SELECT event FROM events WHERE job_id = $1 ORDER BY seq DESC LIMIT 1";
        let row = self.first(sql, &[&id]).await?;
        row.map(|r| r.req_text(0)).transpose()
    }

    async fn events_after(&mut self, id: &str, after: u64, limit: usize) -> Res<Vec<StoredEvent>> {
        let sql =
            "SELECT seq, event FROM events WHERE job_id = $1 AND seq > $2 ORDER BY seq LIMIT $3";
        let rows = self
            .rows(sql, &[&id, &big(after), &big_usize(limit)])
            .await?;
        rows.iter()
            .map(|r| {
                Ok(StoredEvent {
                    seq: r.req_int(0)?.max(0) as u64,
                    event_json: r.req_text(1)?,
                })
            })
            .collect()
    }

    async fn journal(&mut self, id: &str) -> Res<Vec<JournalEntry>> {
        let sql = "SELECT scope, turn, step, body FROM journal WHERE job_id = $1 ORDER BY scope, turn, step";
        self.rows(sql, &[&id])
            .await?
            .iter()
            .map(entry_from_row)
            .collect()
    }

    async fn put_step(&mut self, id: &str, e: &JournalEntry, attempt: u32) -> Res<()> {
        let sql = "INSERT INTO journal (job_id, scope, turn, step, attempt, body) VALUES ($1, $2, $3, $4, $5, $6)
                   ON CONFLICT (job_id, scope, turn, step) DO UPDATE SET attempt = EXCLUDED.attempt, body = EXCLUDED.body";
        let p: Params = &[&id, &e.scope, &int(e.turn), &e.step, &int(attempt), &e.body];
        self.exec(sql, p).await?;
        Ok(())
    }

    async fn delete_step(&mut self, id: &str, scope: &str, turn: u32, step: &str) -> Res<()> {
        let sql =
            "DELETE FROM journal WHERE job_id = $1 AND scope = $2 AND turn = $3 AND step = $4";
        self.exec(sql, &[&id, &scope, &int(turn), &step]).await?;
        Ok(())
    }
}
