//! The shared queue: PostgreSQL, for several daemons working one queue.
//!
//! Semantics are the SQLite backend's, statement for statement (both pass
//! `tests/queue_conformance.rs`); what differs is how writers are kept
//! apart. SQLite has one writer; here every write is a transaction that
//! locks the job's row first (`require_current` reads it `FOR UPDATE`), and
//! leasing takes the best row with `FOR UPDATE SKIP LOCKED`, so two daemons
//! never lease the same job and never interleave two writes to one job.
//!
//! Times are BIGINT milliseconds, as in SQLite, taken from the database's
//! clock: daemons on hosts whose clocks disagree still agree on when a lease
//! expires. Commits are durable under PostgreSQL's default
//! `synchronous_commit = on`.
//!
//! Every change also `NOTIFY`s the other daemons (see `listen`).

mod listen;
mod schema;

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use serde_json::Value;
use tokio::sync::broadcast;
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row};
use tokio_util::sync::{CancellationToken, DropGuard};

use super::*;
use listen::{Change, Sinks};
pub use schema::{PostgresOptions, SCHEMA_VERSION};

/// A PostgreSQL error with the server's message, detail and hint (the
/// driver's own `Display` says only "db error").
pub(crate) fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut out = format!("{} ({})", db.message(), db.code().code());
            if let Some(detail) = db.detail() {
                out.push_str(&format!("; {detail}"));
            }
            if let Some(hint) = db.hint() {
                out.push_str(&format!("; hint: {hint}"));
            }
            out
        }
        None => {
            let mut out = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                out.push_str(&format!(": {s}"));
                source = s.source();
            }
            out
        }
    }
}

fn pool_error(options: &PostgresOptions, e: deadpool_postgres::PoolError) -> QueueError {
    use deadpool_postgres::PoolError;
    let detail = match &e {
        PoolError::Backend(e) => describe(e),
        PoolError::Timeout(_) => format!(
            "{e} (all {} connections of queue.pool_size were busy, or the server did not answer)",
            options.pool_size
        ),
        other => other.to_string(),
    };
    QueueError::Connect {
        url: options.url.clone(),
        detail,
    }
}

/// Why a write did not happen: PostgreSQL failed, or the write refused
/// itself (stale attempt, duplicate event, ...); either way its transaction
/// rolls back.
enum Fail {
    Pg(tokio_postgres::Error),
    Refused(QueueError),
}

impl From<tokio_postgres::Error> for Fail {
    fn from(e: tokio_postgres::Error) -> Self {
        Fail::Pg(e)
    }
}

type Tx<'a> = deadpool_postgres::Transaction<'a>;

pub struct PostgresQueue {
    pool: Pool,
    options: PostgresOptions,
    label: String,
    channel: String,
    retry: RetryPolicy,
    sinks: Sinks,
    /// Stops the LISTEN task when the handle goes away.
    _listener: DropGuard,
}

impl PostgresQueue {
    /// Connects, applies pending migrations (once across daemons starting
    /// together), and starts listening for other daemons' changes.
    pub async fn open(options: PostgresOptions, retry: RetryPolicy) -> Result<Self, QueueError> {
        let config = options.connect_config()?;
        let pool = Self::pool(&options, config.clone())?;
        schema::migrate(&pool, &options, false).await?;
        let channel = format!("sa_jobs_{}", options.schema);
        let first = listen::listen(&config, &channel)
            .await
            .map_err(|e| QueueError::Connect {
                url: options.url.clone(),
                detail: format!("opening the LISTEN connection: {}", describe(&e)),
            })?;
        let (changes, _) = broadcast::channel(1024);
        let (runnable, _) = broadcast::channel(1024);
        let sinks = Sinks {
            instance: uuid::Uuid::new_v4().simple().to_string(),
            changes,
            runnable,
        };
        let stop = CancellationToken::new();
        let label = options.label();
        tokio::spawn(listen::run(
            Some(first),
            config,
            channel.clone(),
            sinks.clone(),
            stop.clone(),
            label.clone(),
        ));
        Ok(Self {
            pool,
            label,
            channel,
            retry,
            sinks,
            _listener: stop.drop_guard(),
            options,
        })
    }

    /// Applies pending migrations (or with `check_only` only reports them)
    /// without opening the queue: `structured-agents migrate`.
    pub async fn migrate(
        options: &PostgresOptions,
        check_only: bool,
    ) -> Result<MigrationStatus, QueueError> {
        let pool = Self::pool(options, options.connect_config()?)?;
        schema::migrate(&pool, options, check_only).await
    }

    fn pool(options: &PostgresOptions, config: tokio_postgres::Config) -> Result<Pool, QueueError> {
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                // `Fast` still drops connections the driver saw close.
                recycling_method: RecyclingMethod::Fast,
            },
        );
        Pool::builder(manager)
            .max_size(options.pool_size)
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(Duration::from_secs(10)))
            .wait_timeout(Some(Duration::from_secs(30)))
            .build()
            .map_err(|e| QueueError::Connect {
                url: options.url.clone(),
                detail: e.to_string(),
            })
    }

    /// Ids of jobs that became runnable, here or on any daemon sharing the
    /// database (submitted, released, resolved). A daemon wakes its idle
    /// workers from it, e.g.
    /// `while rx.recv().await.is_ok() { wake.notify_one() }` (a lagged
    /// receiver should wake them too).
    pub fn runnable(&self) -> broadcast::Receiver<JobId> {
        self.sinks.runnable.subscribe()
    }

    fn store(&self, e: &tokio_postgres::Error) -> QueueError {
        QueueError::Store {
            path: self.label.clone(),
            detail: describe(e),
        }
    }

    fn fail(&self, e: Fail) -> QueueError {
        match e {
            Fail::Pg(e) => self.store(&e),
            Fail::Refused(e) => e,
        }
    }

    /// Deletes the jobs `doomed` selects (`SELECT id … FOR UPDATE SKIP
    /// LOCKED`) with their events and journals, in one statement.
    async fn delete_jobs(
        &self,
        client: &deadpool_postgres::Object,
        doomed: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, QueueError> {
        client
            .execute(
                &format!(
                    "WITH doomed AS ({doomed}),
                     gone_events AS (DELETE FROM events WHERE job_id IN (SELECT id FROM doomed)),
                     gone_steps AS (DELETE FROM journal WHERE job_id IN (SELECT id FROM doomed))
                     DELETE FROM jobs WHERE id IN (SELECT id FROM doomed)"
                ),
                params,
            )
            .await
            .map_err(|e| self.store(&e))
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, QueueError> {
        self.pool
            .get()
            .await
            .map_err(|e| pool_error(&self.options, e))
    }

    /// Commits `tx` when `outcome` is a success, else rolls it back.
    async fn settle<T>(&self, tx: Tx<'_>, outcome: Result<T, Fail>) -> Result<T, QueueError> {
        match outcome {
            Ok(value) => {
                tx.commit().await.map_err(|e| self.store(&e))?;
                Ok(value)
            }
            Err(e) => {
                // Rolled back now rather than whenever the dropped
                // transaction's ROLLBACK gets sent, so its row locks go at
                // once; if this fails the connection is broken, which ends
                // the transaction as well.
                let _ = tx.rollback().await;
                Err(self.fail(e))
            }
        }
    }

    /// Queues a notification; PostgreSQL delivers it at commit.
    async fn notify_in(&self, tx: &Tx<'_>, change: Change, id: &JobId) -> Result<(), Fail> {
        let statement = tx.prepare_cached("SELECT pg_notify($1, $2)").await?;
        tx.execute(
            &statement,
            &[
                &self.channel,
                &listen::payload(&self.sinks.instance, change, id),
            ],
        )
        .await?;
        Ok(())
    }
}

const JOB_COLUMNS: &str = "id, bundle, bundle_version, input, variables, priority, state, attempts, max_attempts, idempotency_key, traceparent, cancel_requested, result, error, run_at, created_at, updated_at, started_at, finished_at, lease_expires_at, bundle_digest, pending_call, messages, conversation_id, crash_resumes";

/// The database's clock in milliseconds: every daemon measures leases
/// against the same clock.
const NOW: &str = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT";

fn job_from_row(row: &Row) -> Result<Job, tokio_postgres::Error> {
    let variables: String = row.try_get(4)?;
    let state: String = row.try_get(6)?;
    let result: Option<String> = row.try_get(12)?;
    let pending: Option<String> = row.try_get(21)?;
    let messages: Option<String> = row.try_get(22)?;
    let ts = |i: usize| -> Result<Option<String>, tokio_postgres::Error> {
        Ok(row.try_get::<_, Option<i64>>(i)?.map(rfc3339))
    };
    Ok(Job {
        id: JobId(row.try_get(0)?),
        bundle: row.try_get(1)?,
        bundle_version: row.try_get(2)?,
        bundle_digest: row.try_get(20)?,
        input: row.try_get(3)?,
        variables: serde_json::from_str(&variables).unwrap_or_default(),
        messages: messages.and_then(|m| serde_json::from_str(&m).ok()),
        conversation_id: row.try_get(23)?,
        priority: row.try_get(5)?,
        state: JobState::parse(&state).unwrap_or(JobState::Failed),
        attempts: count(row.try_get(7)?),
        max_attempts: count(row.try_get(8)?),
        crash_resumes: count(row.try_get(24)?),
        idempotency_key: row.try_get(9)?,
        traceparent: row.try_get(10)?,
        cancel_requested: row.try_get(11)?,
        result: result.and_then(|r| serde_json::from_str(&r).ok()),
        error: row.try_get(13)?,
        pending_call: pending.and_then(|p| serde_json::from_str(&p).ok()),
        run_at: rfc3339(row.try_get(14)?),
        created_at: rfc3339(row.try_get(15)?),
        updated_at: rfc3339(row.try_get(16)?),
        started_at: ts(17)?,
        finished_at: ts(18)?,
        lease_expires_at: ts(19)?,
    })
}

/// Attempt counters are stored as INTEGER and never negative.
fn count(n: i32) -> u32 {
    n.max(0) as u32
}

/// Counters and sequence numbers as PostgreSQL integers (saturating: no
/// real job gets near the limits).
fn int(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn big(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

async fn db_now(tx: &Tx<'_>) -> Result<i64, Fail> {
    let statement = tx.prepare_cached(&format!("SELECT {NOW}")).await?;
    Ok(tx.query_one(&statement, &[]).await?.try_get(0)?)
}

async fn load(tx: &Tx<'_>, id: &str) -> Result<Option<Job>, Fail> {
    let statement = tx
        .prepare_cached(&format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1"))
        .await?;
    match tx.query_opt(&statement, &[&id]).await? {
        Some(row) => Ok(Some(job_from_row(&row)?)),
        None => Ok(None),
    }
}

/// Appends events; a sequence number already stored refuses the write.
async fn insert_events(
    tx: &Tx<'_>,
    id: &JobId,
    attempt: u32,
    events: &[EventEnvelope],
) -> Result<(), Fail> {
    if events.is_empty() {
        return Ok(());
    }
    let insert = tx
        .prepare_cached("INSERT INTO events (job_id, seq, attempt, event) VALUES ($1, $2, $3, $4) ON CONFLICT (job_id, seq) DO NOTHING")
        .await?;
    let stored = tx
        .prepare_cached("SELECT attempt, event FROM events WHERE job_id = $1 AND seq = $2")
        .await?;
    for event in events {
        let json = serde_json::to_string(event).unwrap_or_default();
        let inserted = tx
            .execute(
                &insert,
                &[&id.as_str(), &big(event.seq), &int(attempt), &json],
            )
            .await?;
        if inserted == 0 {
            let row = tx
                .query_one(&stored, &[&id.as_str(), &big(event.seq)])
                .await?;
            let found = (count(row.try_get(0)?), row.try_get::<_, String>(1)?);
            if !same_event(found, attempt, &json) {
                return Err(Fail::Refused(QueueError::DuplicateEvent {
                    job: id.clone(),
                    seq: event.seq,
                }));
            }
        }
    }
    Ok(())
}

/// Locks the job's row and refuses the write unless `attempt` is the
/// running job's current attempt; returns (max_attempts, cancel_requested).
async fn require_current(tx: &Tx<'_>, id: &JobId, attempt: u32) -> Result<(u32, bool), Fail> {
    let statement = tx
        .prepare_cached(
            // Attempts that resumed after a crash are not failures.
            "SELECT state, attempts, max_attempts + crash_resumes, cancel_requested FROM jobs WHERE id = $1 FOR UPDATE",
        )
        .await?;
    let row = tx.query_opt(&statement, &[&id.as_str()]).await?;
    if let Some(row) = row {
        let state: String = row.try_get(0)?;
        let attempts: i32 = row.try_get(1)?;
        if state == "running" && count(attempts) == attempt {
            return Ok((count(row.try_get(2)?), row.try_get(3)?));
        }
    }
    Err(Fail::Refused(QueueError::StaleAttempt {
        job: id.clone(),
        attempt,
    }))
}

fn candidate(r: &Row) -> Result<Candidate, tokio_postgres::Error> {
    Ok(Candidate {
        id: r.try_get(0)?,
        running: r.try_get::<_, String>(1)? == "running",
        crash_resumes: count(r.try_get(2)?),
        priority: r.try_get(3)?,
        run_at: r.try_get(4)?,
    })
}

/// The best runnable job no other transaction holds, locked. Two indexed
/// lookups (due queued jobs, expired leases) instead of one OR over the
/// table, as in SQLite; the loser of the two stays locked only until commit.
async fn next_candidate(tx: &Tx<'_>, now: i64) -> Result<Option<Candidate>, Fail> {
    let queued = tx
        .prepare_cached(
            "SELECT id, state, crash_resumes, priority, run_at FROM jobs
             WHERE state = 'queued' AND run_at <= $1 ORDER BY priority DESC, run_at ASC, id ASC
             LIMIT 1 FOR UPDATE SKIP LOCKED",
        )
        .await?;
    let expired = tx
        .prepare_cached(
            "SELECT id, state, crash_resumes, priority, run_at FROM jobs
             WHERE state = 'running' AND lease_expires_at <= $1 ORDER BY priority DESC, run_at ASC, id ASC
             LIMIT 1 FOR UPDATE SKIP LOCKED",
        )
        .await?;
    let queued = match tx.query_opt(&queued, &[&now]).await? {
        Some(row) => Some(candidate(&row)?),
        None => None,
    };
    let expired = match tx.query_opt(&expired, &[&now]).await? {
        Some(row) => Some(candidate(&row)?),
        None => None,
    };
    Ok(Candidate::better(queued, expired))
}

/// Leases the best runnable job. An abandoned run (its worker's lease
/// expired) resumes without using an attempt, unless it is a poison pill
/// (it parks).
async fn lease_next(
    tx: &Tx<'_>,
    worker: &str,
    lease_for: Duration,
    max_crash_resumes: u32,
) -> Result<Option<Lease>, Fail> {
    let now = db_now(tx).await?;
    while let Some(candidate) = next_candidate(tx, now).await? {
        let id = &candidate.id;
        if candidate.is_poison_pill(max_crash_resumes) {
            let last = tx
                .query_opt(
                    "SELECT event FROM events WHERE job_id = $1 ORDER BY seq DESC LIMIT 1",
                    &[id],
                )
                .await?
                .map(|row| row.try_get::<_, String>(0))
                .transpose()?
                .map(|event| describe_event(&event));
            tx.execute(
                "UPDATE jobs SET state = 'needs_attention', error = $3, pending_call = NULL, updated_at = $2, lease_owner = NULL, lease_expires_at = NULL WHERE id = $1",
                &[id, &now, &candidate.poison_reason(max_crash_resumes, last)],
            )
            .await?;
            continue;
        }
        let statement = tx
            .prepare_cached(&format!(
                "UPDATE jobs SET state = 'running', attempts = attempts + 1, crash_resumes = crash_resumes + $2, lease_owner = $3, lease_expires_at = $4, started_at = COALESCE(started_at, $5), updated_at = $5 WHERE id = $1 RETURNING {JOB_COLUMNS}"
            ))
            .await?;
        let row = tx
            .query_one(
                &statement,
                &[
                    &id,
                    &i32::from(candidate.running),
                    &worker,
                    &now.saturating_add(ms(lease_for)),
                    &now,
                ],
            )
            .await?;
        let job = job_from_row(&row)?;
        return Ok(Some(Lease {
            attempt: job.attempts,
            next_seq: last_seq(tx, id).await? + 1,
            journal: read_journal(tx, id).await?,
            job,
        }));
    }
    Ok(None)
}

/// Puts a resolved job back in the queue, with one more attempt than it used.
async fn requeue(tx: &Tx<'_>, id: &JobId, now: i64) -> Result<(), Fail> {
    tx.execute(
        "UPDATE jobs SET state = 'queued', error = NULL, pending_call = NULL, run_at = $2, updated_at = $2, max_attempts = GREATEST(max_attempts, attempts + 1), crash_resumes = 0 WHERE id = $1",
        &[&id.as_str(), &now],
    )
    .await?;
    Ok(())
}

async fn put_journal(
    tx: &Tx<'_>,
    id: &JobId,
    scope: &str,
    turn: u32,
    step: &str,
    attempt: u32,
    body: &str,
) -> Result<(), Fail> {
    let statement = tx
        .prepare_cached(
            "INSERT INTO journal (job_id, scope, turn, step, attempt, body) VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (job_id, scope, turn, step) DO UPDATE SET attempt = EXCLUDED.attempt, body = EXCLUDED.body",
        )
        .await?;
    tx.execute(
        &statement,
        &[
            &id.as_str(),
            &scope,
            &int(turn),
            &step,
            &int(attempt),
            &body,
        ],
    )
    .await?;
    Ok(())
}

impl PostgresQueue {
    async fn submit_in(&self, tx: &Tx<'_>, id: &JobId, job: NewJob) -> Result<(Job, bool), Fail> {
        let now = db_now(tx).await?;
        // ON CONFLICT waits for a concurrent submit with the same key and then
        // inserts nothing; the following read sees that job.
        let insert = tx
            .prepare_cached(&format!(
                "INSERT INTO jobs (id, bundle, bundle_version, input, variables, priority, state, attempts, max_attempts, idempotency_key, traceparent, run_at, created_at, updated_at, messages, conversation_id)
                 VALUES ($1, $2, $3, $4, $5, $6, 'queued', 0, $7, $8, $9, $10, $11, $11, $12, $13)
                 ON CONFLICT (idempotency_key) DO NOTHING RETURNING {JOB_COLUMNS}"
            ))
            .await?;
        let variables = Value::Object(job.variables).to_string();
        let messages = job.messages.map(|m| Value::Array(m).to_string());
        let run_at = job.run_at.map(millis).unwrap_or(now);
        let inserted = tx
            .query_opt(
                &insert,
                &[
                    &id.as_str(),
                    &job.bundle,
                    &job.bundle_version,
                    &job.input,
                    &variables,
                    &job.priority,
                    &int(job.max_attempts.unwrap_or(3).max(1)),
                    &job.idempotency_key,
                    &job.traceparent,
                    &run_at,
                    &now,
                    &messages,
                    &job.conversation_id,
                ],
            )
            .await?;
        if let Some(row) = inserted {
            let job = job_from_row(&row)?;
            self.notify_in(tx, Change::Runnable, &job.id).await?;
            return Ok((job, true));
        }
        let existing = tx
            .prepare_cached(&format!(
                "SELECT {JOB_COLUMNS} FROM jobs WHERE idempotency_key = $1"
            ))
            .await?;
        match tx.query_opt(&existing, &[&job.idempotency_key]).await? {
            Some(row) => Ok((job_from_row(&row)?, false)),
            None => Err(Fail::Refused(QueueError::Store {
                path: self.label.clone(),
                detail: "the job with this idempotency key vanished during the submit".into(),
            })),
        }
    }

    async fn finish_in(
        &self,
        tx: &Tx<'_>,
        id: &JobId,
        attempt: u32,
        outcome: Outcome,
        events: &[EventEnvelope],
        final_event: Option<EventEnvelope>,
    ) -> Result<Finished, Fail> {
        let (max_attempts, cancel_requested) = match require_current(tx, id, attempt).await {
            Ok(found) => found,
            Err(Fail::Refused(QueueError::StaleAttempt { .. })) => return Ok(Finished::stale()),
            Err(e) => return Err(e),
        };
        let decision = decide(&outcome, attempt, max_attempts, cancel_requested);
        let now = db_now(tx).await?;
        let run_at = decision
            .retry
            .then(|| now.saturating_add(ms(self.retry.delay(attempt))));
        let (result, pending) = decision.stored(&outcome);
        let finished_at = decision.state.is_terminal().then_some(now);
        let update = tx
            .prepare_cached(
                "UPDATE jobs SET state = $2, result = $3, error = $4, run_at = COALESCE($5, run_at), finished_at = $6, updated_at = $7, pending_call = $8, lease_owner = NULL, lease_expires_at = NULL WHERE id = $1",
            )
            .await?;
        tx.execute(
            &update,
            &[
                &id.as_str(),
                &decision.state.as_str(),
                &result,
                &decision.error,
                &run_at,
                &finished_at,
                &now,
                &pending,
            ],
        )
        .await?;
        let final_event = final_event.map(|e| stamp_final(e, &decision));
        insert_events(tx, id, attempt, events).await?;
        insert_events(tx, id, attempt, final_event.as_slice()).await?;
        self.notify_in(tx, Change::Updated, id).await?;
        Ok(Finished {
            reply: CompleteReply::Recorded(decision.state),
            final_event,
        })
    }

    async fn release_in(
        &self,
        tx: &Tx<'_>,
        id: &JobId,
        attempt: u32,
        events: &[EventEnvelope],
        final_event: Option<EventEnvelope>,
    ) -> Result<Finished, Fail> {
        let cancel_requested = match require_current(tx, id, attempt).await {
            Ok((_, cancel_requested)) => cancel_requested,
            Err(Fail::Refused(QueueError::StaleAttempt { .. })) => return Ok(Finished::stale()),
            Err(e) => return Err(e),
        };
        let now = db_now(tx).await?;
        // A job someone asked to cancel ends here rather than run again.
        let decision = decide_release(cancel_requested);
        let change = if cancel_requested {
            tx.execute(
                "UPDATE jobs SET state = 'cancelled', error = 'cancelled by request', finished_at = $2, updated_at = $2, lease_owner = NULL, lease_expires_at = NULL WHERE id = $1",
                &[&id.as_str(), &now],
            )
            .await?;
            Change::Updated
        } else {
            tx.execute(
                "UPDATE jobs SET state = 'queued', attempts = attempts - 1, lease_owner = NULL, lease_expires_at = NULL, updated_at = $2 WHERE id = $1",
                &[&id.as_str(), &now],
            )
            .await?;
            Change::Runnable
        };
        let final_event = final_event.map(|e| stamp_final(e, &decision));
        insert_events(tx, id, attempt, events).await?;
        insert_events(tx, id, attempt, final_event.as_slice()).await?;
        self.notify_in(tx, change, id).await?;
        Ok(Finished {
            reply: CompleteReply::Recorded(decision.state),
            final_event,
        })
    }

    async fn resolve_in(
        &self,
        tx: &Tx<'_>,
        id: &JobId,
        resolution: &Resolution,
    ) -> Result<(Changed, Change), Fail> {
        let lock = tx
            .prepare_cached("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE")
            .await?;
        tx.query_opt(&lock, &[&id.as_str()]).await?;
        let job = load(tx, id.as_str())
            .await?
            .ok_or_else(|| Fail::Refused(QueueError::NotFound(id.clone())))?;
        let pending = parked_call(&job, resolution, &self.label).map_err(Fail::Refused)?;
        let now = db_now(tx).await?;
        let change = match resolution {
            Resolution::Fail { reason } => {
                let error = Resolution::failure(reason, pending.as_ref());
                tx.execute(
                    "UPDATE jobs SET state = 'failed', error = $2, pending_call = NULL, finished_at = $3, updated_at = $3 WHERE id = $1",
                    &[&id.as_str(), &error, &now],
                )
                .await?;
                Change::Updated
            }
            Resolution::Retry => {
                // Without its start marker the next attempt runs the call afresh.
                if let Some(pending) = &pending {
                    tx.execute(
                        "DELETE FROM journal WHERE job_id = $1 AND scope = $2 AND turn = $3 AND step = $4",
                        &[
                            &id.as_str(),
                            &pending.scope,
                            &int(pending.turn),
                            &pending.steps().0,
                        ],
                    )
                    .await?;
                }
                requeue(tx, id, now).await?;
                Change::Runnable
            }
            Resolution::Skip { output, is_error } => {
                let Some(pending) = &pending else {
                    return Err(Fail::Refused(QueueError::NoCallToSkip(id.clone())));
                };
                let body = Resolution::skipped_result(pending, output, *is_error);
                put_journal(
                    tx,
                    id,
                    &pending.scope,
                    pending.turn,
                    &pending.steps().1,
                    job.attempts,
                    &body,
                )
                .await?;
                requeue(tx, id, now).await?;
                Change::Runnable
            }
        };
        self.notify_in(tx, change, id).await?;
        let job = load(tx, id.as_str())
            .await?
            .ok_or_else(|| Fail::Refused(QueueError::NotFound(id.clone())))?;
        let failed = matches!(resolution, Resolution::Fail { .. });
        Ok((record_ending(tx, job, failed).await?, change))
    }
}

/// A job's journal in (scope, turn, step) order.
async fn read_journal(tx: &Tx<'_>, id: &str) -> Result<Vec<JournalEntry>, Fail> {
    let statement = tx
        .prepare_cached(
            "SELECT scope, turn, step, body FROM journal WHERE job_id = $1 ORDER BY scope, turn, step",
        )
        .await?;
    let rows = tx.query(&statement, &[&id]).await?;
    let entries = rows
        .iter()
        .map(|r| {
            Ok(JournalEntry {
                scope: r.try_get(0)?,
                turn: count(r.try_get(1)?),
                step: r.try_get(2)?,
                body: r.try_get(3)?,
            })
        })
        .collect::<Result<_, tokio_postgres::Error>>()?;
    Ok(entries)
}

/// The sequence number of a job's last stored event (0: none yet).
async fn last_seq(tx: &Tx<'_>, id: &str) -> Result<u64, Fail> {
    let statement = tx
        .prepare_cached("SELECT COALESCE(MAX(seq), 0)::BIGINT FROM events WHERE job_id = $1")
        .await?;
    let last: i64 = tx.query_one(&statement, &[&id]).await?.try_get(0)?;
    Ok(last.max(0) as u64)
}

/// The job an operator's request left, with the final event it records (as
/// the next of the job's log) when the request `ended` the job.
async fn record_ending(tx: &Tx<'_>, job: Job, ended: bool) -> Result<Changed, Fail> {
    let final_event = if ended {
        ended_by_request(&job, last_seq(tx, job.id.as_str()).await? + 1)
    } else {
        None
    };
    insert_events(tx, &job.id, job.attempts, final_event.as_slice()).await?;
    Ok(Changed { job, final_event })
}

#[async_trait]
impl JobQueue for PostgresQueue {
    async fn submit(&self, mut job: NewJob) -> Result<(Job, bool), QueueError> {
        let id = job.id.take().unwrap_or_default();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.store(&e))?;
        let outcome = self.submit_in(&tx, &id, job).await;
        let (job, created) = self.settle(tx, outcome).await?;
        if created {
            self.sinks.publish(Change::Runnable, &job.id);
            crate::failpoint::hit("after_submit_commit");
        }
        Ok((job, created))
    }

    async fn get(&self, id: &JobId) -> Result<Option<Job>, QueueError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(&format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1"))
            .await
            .map_err(|e| self.store(&e))?;
        let row = client
            .query_opt(&statement, &[&id.as_str()])
            .await
            .map_err(|e| self.store(&e))?;
        row.map(|r| job_from_row(&r))
            .transpose()
            .map_err(|e| self.store(&e))
    }

    async fn list(&self, filter: JobFilter) -> Result<Page, QueueError> {
        let limit = filter.limit.clamp(1, 1000);
        // Newest first; ids are UUIDv7 so they sort by creation time.
        let (conditions, args) = filter.conditions(|n| format!("${n}"));
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE TRUE{conditions} ORDER BY id DESC LIMIT {}",
            limit + 1
        );
        let params: Vec<&(dyn ToSql + Sync)> =
            args.iter().map(|a| a as &(dyn ToSql + Sync)).collect();
        let client = self.client().await?;
        let rows = client
            .query(&sql, &params)
            .await
            .map_err(|e| self.store(&e))?;
        let mut jobs = rows
            .iter()
            .map(job_from_row)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.store(&e))?;
        let more = jobs.len() > limit;
        jobs.truncate(limit);
        let next_cursor = if more {
            jobs.last().map(|j| j.id.0.clone())
        } else {
            None
        };
        Ok(Page { jobs, next_cursor })
    }

    async fn counts_by_state(&self) -> Result<Vec<(String, JobState, u64)>, QueueError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT bundle, state, COUNT(*) FROM jobs GROUP BY bundle, state",
                &[],
            )
            .await
            .map_err(|e| self.store(&e))?;
        let mut out = Vec::new();
        for row in rows {
            let read = || -> Result<(String, String, i64), tokio_postgres::Error> {
                Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?))
            };
            let (bundle, state, n) = read().map_err(|e| self.store(&e))?;
            if let Some(state) = JobState::parse(&state) {
                out.push((bundle, state, n.max(0) as u64));
            }
        }
        Ok(out)
    }

    async fn live_counts(&self) -> Result<Vec<(JobState, u64)>, QueueError> {
        let client = self.client().await?;
        let mut out = Vec::new();
        // One statement per state, so each count walks its partial index.
        for state in JobState::LIVE {
            let sql = format!(
                "SELECT COUNT(*) FROM jobs WHERE state = '{}'",
                state.as_str()
            );
            let n: i64 = client
                .query_one(&sql, &[])
                .await
                .and_then(|row| row.try_get(0))
                .map_err(|e| self.store(&e))?;
            out.push((state, n.max(0) as u64));
        }
        Ok(out)
    }

    async fn forget_conversation(
        &self,
        conversation_id: &str,
    ) -> Result<(usize, usize), QueueError> {
        let client = self.client().await?;
        let forgotten = self
            .delete_jobs(
                &client,
                "SELECT id FROM jobs WHERE conversation_id = $1 AND finished_at IS NOT NULL
                 FOR UPDATE SKIP LOCKED",
                &[&conversation_id],
            )
            .await?;
        let left: i64 = client
            .query_one(
                "SELECT COUNT(*) FROM jobs WHERE conversation_id = $1",
                &[&conversation_id],
            )
            .await
            .map_err(|e| self.store(&e))?
            .get(0);
        Ok((forgotten as usize, left as usize))
    }

    async fn purge_finished(
        &self,
        finished_before: SystemTime,
        limit: usize,
    ) -> Result<usize, QueueError> {
        let client = self.client().await?;
        let cutoff = crate::queue::millis(finished_before);
        let limit = limit as i64;
        let purged = self
            .delete_jobs(
                &client,
                "SELECT id FROM jobs WHERE finished_at IS NOT NULL AND finished_at < $1
                 ORDER BY finished_at LIMIT $2 FOR UPDATE SKIP LOCKED",
                &[&cutoff, &limit],
            )
            .await?;
        Ok(purged as usize)
    }

    async fn lease(&self, worker: &str, lease_for: Duration) -> Result<Option<Lease>, QueueError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.store(&e))?;
        let outcome = match lease_next(&tx, worker, lease_for, self.retry.max_crash_resumes).await {
            Ok(Some(lease)) => self
                .notify_in(&tx, Change::Updated, &lease.job.id)
                .await
                .map(|()| Some(lease)),
            other => other,
        };
        let leased = self.settle(tx, outcome).await?;
        if let Some(lease) = &leased {
            self.sinks.publish(Change::Updated, &lease.job.id);
        }
        Ok(leased)
    }

    async fn heartbeat(
        &self,
        id: &JobId,
        attempt: u32,
        lease_for: Duration,
    ) -> Result<HeartbeatReply, QueueError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(&format!(
                "UPDATE jobs SET lease_expires_at = {NOW} + $3, updated_at = {NOW} WHERE id = $1 AND attempts = $2 AND state = 'running' RETURNING cancel_requested"
            ))
            .await
            .map_err(|e| self.store(&e))?;
        let row = client
            .query_opt(&statement, &[&id.as_str(), &int(attempt), &ms(lease_for)])
            .await
            .map_err(|e| self.store(&e))?;
        Ok(match row {
            None => HeartbeatReply::Lost,
            Some(row) => {
                let cancel: bool = row.try_get(0).map_err(|e| self.store(&e))?;
                if cancel {
                    HeartbeatReply::CancelRequested
                } else {
                    HeartbeatReply::Ok
                }
            }
        })
    }

    async fn pin_version(
        &self,
        id: &JobId,
        attempt: u32,
        version: &str,
        digest: &str,
    ) -> Result<(), QueueError> {
        let client = self.client().await?;
        client
            .execute(
                "UPDATE jobs SET bundle_version = COALESCE(bundle_version, $3), bundle_digest = $4 WHERE id = $1 AND attempts = $2 AND bundle_digest IS NULL",
                &[&id.as_str(), &int(attempt), &version, &digest],
            )
            .await
            .map_err(|e| self.store(&e))?;
        Ok(())
    }

    async fn finish(
        &self,
        id: &JobId,
        attempt: u32,
        outcome: Outcome,
        events: &[EventEnvelope],
        final_event: Option<EventEnvelope>,
    ) -> Result<Finished, QueueError> {
        crate::failpoint::hit("before_completion_commit");
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.store(&e))?;
        let outcome = self
            .finish_in(&tx, id, attempt, outcome, events, final_event)
            .await;
        let finished = self.settle(tx, outcome).await?;
        self.sinks.publish(Change::Updated, id);
        Ok(finished)
    }

    async fn release(
        &self,
        id: &JobId,
        attempt: u32,
        events: &[EventEnvelope],
        final_event: Option<EventEnvelope>,
    ) -> Result<Finished, QueueError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.store(&e))?;
        let outcome = self.release_in(&tx, id, attempt, events, final_event).await;
        let finished = self.settle(tx, outcome).await?;
        let change = match finished.reply {
            CompleteReply::Recorded(JobState::Queued) => Change::Runnable,
            _ => Change::Updated,
        };
        self.sinks.publish(change, id);
        Ok(finished)
    }

    async fn cancel(&self, id: &JobId) -> Result<Option<Changed>, QueueError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.store(&e))?;
        let outcome = async {
            let now = db_now(&tx).await?;
            let ended = tx.execute(
                "UPDATE jobs SET state = 'cancelled', finished_at = $2, updated_at = $2, error = 'cancelled by request', pending_call = NULL WHERE id = $1 AND state IN ('queued', 'needs_attention')",
                &[&id.as_str(), &now],
            )
            .await?;
            tx.execute(
                "UPDATE jobs SET cancel_requested = TRUE, updated_at = $2 WHERE id = $1 AND state = 'running'",
                &[&id.as_str(), &now],
            )
            .await?;
            let Some(job) = load(&tx, id.as_str()).await? else {
                return Ok(None);
            };
            self.notify_in(&tx, Change::Updated, id).await?;
            Ok(Some(record_ending(&tx, job, ended > 0).await?))
        }
        .await;
        let changed = self.settle(tx, outcome).await?;
        self.sinks.publish(Change::Updated, id);
        Ok(changed)
    }

    async fn append_events(
        &self,
        id: &JobId,
        attempt: u32,
        events: &[EventEnvelope],
    ) -> Result<(), QueueError> {
        if events.is_empty() {
            return Ok(());
        }
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.store(&e))?;
        let outcome = async {
            require_current(&tx, id, attempt).await?;
            insert_events(&tx, id, attempt, events).await?;
            self.notify_in(&tx, Change::Updated, id).await
        }
        .await;
        self.settle(tx, outcome).await?;
        self.sinks.publish(Change::Updated, id);
        Ok(())
    }

    async fn events_after(
        &self,
        id: &JobId,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, QueueError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(
                "SELECT seq, event FROM events WHERE job_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
            )
            .await
            .map_err(|e| self.store(&e))?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = client
            .query(&statement, &[&id.as_str(), &big(after_seq), &limit])
            .await
            .map_err(|e| self.store(&e))?;
        rows.iter()
            .map(|r| {
                Ok(StoredEvent {
                    seq: r.try_get::<_, i64>(0)?.max(0) as u64,
                    event_json: r.try_get(1)?,
                })
            })
            .collect::<Result<_, tokio_postgres::Error>>()
            .map_err(|e| self.store(&e))
    }

    async fn last_seq(&self, id: &JobId) -> Result<u64, QueueError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.store(&e))?;
        let outcome = last_seq(&tx, id.as_str()).await;
        self.settle(tx, outcome).await
    }

    async fn journal(&self, id: &JobId) -> Result<Vec<JournalEntry>, QueueError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.store(&e))?;
        let outcome = read_journal(&tx, id.as_str()).await;
        self.settle(tx, outcome).await
    }

    async fn record_steps(
        &self,
        id: &JobId,
        attempt: u32,
        entries: &[JournalEntry],
        events: &[EventEnvelope],
    ) -> Result<(), QueueError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.store(&e))?;
        let outcome = async {
            require_current(&tx, id, attempt).await?;
            insert_events(&tx, id, attempt, events).await?;
            for entry in entries {
                put_journal(
                    &tx,
                    id,
                    &entry.scope,
                    entry.turn,
                    &entry.step,
                    attempt,
                    &entry.body,
                )
                .await?;
            }
            if !events.is_empty() {
                self.notify_in(&tx, Change::Updated, id).await?;
            }
            Ok(())
        }
        .await;
        self.settle(tx, outcome).await?;
        if !events.is_empty() {
            self.sinks.publish(Change::Updated, id);
        }
        lost_reply(&self.label)
    }

    async fn resolve(&self, id: &JobId, resolution: Resolution) -> Result<Changed, QueueError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.store(&e))?;
        let outcome = self.resolve_in(&tx, id, &resolution).await;
        let (changed, change) = self.settle(tx, outcome).await?;
        self.sinks.publish(change, id);
        Ok(changed)
    }

    fn subscribe(&self) -> broadcast::Receiver<JobId> {
        self.sinks.changes.subscribe()
    }

    fn runnable(&self) -> Option<broadcast::Receiver<JobId>> {
        Some(PostgresQueue::runnable(self))
    }

    async fn ping(&self) -> Result<(), QueueError> {
        let client = self.client().await?;
        client
            .simple_query("SELECT 1")
            .await
            .map_err(|e| self.store(&e))?;
        Ok(())
    }
}
