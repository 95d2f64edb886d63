//! A plain submit on PostgreSQL in one statement: the job's insert, or the
//! job its idempotency key already names. "Plain" is a job that writes
//! nothing beside its row and takes no lock but its key's: no conversation
//! to claim, no daily budget to reserve, no fork's journal, no webhook or
//! push configs. Any other submit answers `None` here and runs the
//! lifecycle's `submit` in a transaction. The statement goes in the next
//! group commit (`group`): a flood of submits shares commits.

use super::group::Params;
use super::pool::Writes;
use super::sql::{KEYED, NOW};
use super::transaction::PgTx;
use crate::queue::op::Submit;
use crate::queue::tx::{Change, Columns, Fail, JOB_COLUMNS, JobValues, job_from_row};
use crate::queue::*;

/// Whether `job` is plain (see the module's header).
fn plain(job: &NewJob) -> bool {
    job.conversation_id.is_none()
        && job.daily.is_none()
        && job.fork.is_none()
        && job.webhook.is_none()
        && job.push.is_empty()
}

/// The insert, or the job of the key when it was taken before this
/// statement began; the first column says which (`TRUE`: inserted).
fn statement() -> &'static str {
    static STATEMENT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    STATEMENT.get_or_init(|| format!(
        "WITH t AS (SELECT {NOW} AS now),
         ins AS (INSERT INTO jobs (id, bundle, bundle_version, input, variables, priority, state, attempts, max_attempts,
                                   idempotency_key, traceparent, run_at, created_at, updated_at, messages, conversation_id,
                                   limits, owner, bundle_digest, forked_from, forked_at_turn, kind, controls, tracestate, run_meta)
                 SELECT $1, $2, $3, $4, $5, $6, 'queued', 0, $7, $8, $9, COALESCE($10, t.now), t.now, t.now, $11, NULL,
                        $12, $13, $14, NULL, NULL, $15, $16, $17, $18 FROM t
                 ON CONFLICT {KEYED} DO NOTHING RETURNING {JOB_COLUMNS})
         SELECT TRUE, ins.* FROM ins
         UNION ALL
         SELECT FALSE, {JOB_COLUMNS} FROM jobs
         WHERE $8::text IS NOT NULL AND idempotency_key = $8 AND NOT EXISTS (SELECT 1 FROM ins)"
    ))
}

/// One job's row read past the statement's first column.
struct Shifted<'a>(&'a tokio_postgres::Row);

impl Columns for Shifted<'_> {
    fn text(&self, i: usize) -> crate::queue::tx::Res<Option<String>> {
        self.0.text(i + 1)
    }
    fn int(&self, i: usize) -> crate::queue::tx::Res<Option<i64>> {
        self.0.int(i + 1)
    }
}

/// Submits a plain job in one statement: the job and whether it is new, or
/// `None` when it is not plain. A key taken by a submit that committed
/// while this statement waited for it is read in a second statement.
pub(super) async fn submit(w: &Writes, op: &Submit) -> Result<Option<(Job, bool)>, QueueError> {
    if !plain(&op.job) {
        return Ok(None);
    }
    let label = &w.shared.label;
    let v = JobValues::of(&op.id, &op.job, 0);
    let run_at = op.job.run_at.map(millis);
    let max_attempts = i32::try_from(v.max_attempts).unwrap_or(i32::MAX);
    let owned = |s: Option<&str>| s.map(str::to_string);
    let params: Params = vec![
        Box::new(v.id.to_string()),
        Box::new(v.bundle.to_string()),
        Box::new(owned(v.bundle_version)),
        Box::new(v.input.to_string()),
        Box::new(v.variables.clone()),
        Box::new(v.priority),
        Box::new(max_attempts),
        Box::new(v.idempotency_key.clone()),
        Box::new(owned(v.traceparent)),
        Box::new(run_at),
        Box::new(v.messages.clone()),
        Box::new(v.limits.clone()),
        Box::new(owned(v.owner)),
        Box::new(owned(v.bundle_digest)),
        Box::new(v.kind.clone()),
        Box::new(v.controls.clone()),
        Box::new(owned(v.tracestate)),
        Box::new(v.run_meta.clone()),
    ];
    let inserted = w.grouped(statement(), params).await;
    let found = async {
        if let Some(row) = inserted?.first() {
            let new = row.req_int(0)? != 0;
            return Ok(Some((job_from_row(&Shifted(row))?, new)));
        }
        // The key was taken by a submit that committed after this
        // statement's snapshot: its job is there now.
        let Some(key) = &v.idempotency_key else {
            return Ok(None);
        };
        let client = w.client().await.map_err(|e| Fail::Db(e.to_string()))?;
        let pg = PgTx::new(&client);
        let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE idempotency_key = $1");
        let row = pg.first(&sql, &[key]).await;
        w.shared.stats.sent(pg.statements());
        row?.map(|row| Ok((job_from_row(&row)?, false))).transpose()
    }
    .await;
    let found = found.map_err(|f: Fail| f.into_error(label))?;
    let (job, new) = found.ok_or_else(|| QueueError::Store {
        path: label.clone(),
        detail: "the job with this idempotency key vanished during the submit".into(),
    })?;
    if new {
        w.shared.announce(&[(Change::Runnable, job.id.clone())]);
    }
    Ok(Some((job, new)))
}
