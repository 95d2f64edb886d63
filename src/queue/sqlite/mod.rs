//! The embedded queue: one SQLite file (WAL). Writes go through one writer
//! thread that group-commits them (see `writer`), with `synchronous=FULL` by
//! default so an acknowledged write survives power loss; reads use their own
//! connection on the blocking pool (WAL readers never wait for the writer).

mod writer;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, Row, params};
use serde_json::Value;
use tokio::sync::broadcast;

use super::*;
use writer::{WriteError, Writer};

/// Ordered schema migrations; the store records how many ran.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE jobs (
    id TEXT PRIMARY KEY,
    bundle TEXT NOT NULL,
    bundle_version TEXT,
    input TEXT NOT NULL,
    variables TEXT NOT NULL,
    priority INTEGER NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    idempotency_key TEXT UNIQUE,
    traceparent TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    result TEXT,
    error TEXT,
    run_at INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    started_at INTEGER,
    finished_at INTEGER,
    lease_owner TEXT,
    lease_expires_at INTEGER
);
CREATE INDEX jobs_due ON jobs (state, priority DESC, run_at);
CREATE INDEX jobs_bundle ON jobs (bundle, state);
CREATE TABLE events (
    job_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    event TEXT NOT NULL,
    PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;
"#,
    r#"
ALTER TABLE jobs ADD COLUMN bundle_digest TEXT;
CREATE INDEX jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;
ALTER TABLE jobs ADD COLUMN pending_call TEXT;
CREATE INDEX jobs_lease ON jobs (state, lease_expires_at);
CREATE TABLE journal (
    job_id TEXT NOT NULL,
    scope TEXT NOT NULL,
    turn INTEGER NOT NULL,
    step TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (job_id, scope, turn, step)
) WITHOUT ROWID;
"#,
    r#"
ALTER TABLE jobs ADD COLUMN messages TEXT;
ALTER TABLE jobs ADD COLUMN conversation_id TEXT;
CREATE INDEX jobs_conversation ON jobs (conversation_id, id) WHERE conversation_id IS NOT NULL;
"#,
    r#"
ALTER TABLE jobs ADD COLUMN crash_resumes INTEGER NOT NULL DEFAULT 0;
"#,
];

/// The schema version this binary writes.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// Where the file at `path` stands, without changing it (0: no file yet).
pub async fn schema_status(path: &Path) -> Result<MigrationStatus, QueueError> {
    let path = path.to_path_buf();
    let label = path.display().to_string();
    let found = tokio::task::spawn_blocking(move || -> Result<u32, QueueError> {
        if !path.exists() {
            return Ok(0);
        }
        let conn = Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(store_err(&path))?;
        conn.pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(store_err(&path))
    })
    .await
    .map_err(|e| QueueError::Store {
        path: label.clone(),
        detail: e.to_string(),
    })??;
    if found > SCHEMA_VERSION {
        return Err(QueueError::TooNew {
            path: label,
            found,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(MigrationStatus {
        found,
        supported: SCHEMA_VERSION,
        applied: Vec::new(),
    })
}

/// How hard a commit tries to survive a crash of the machine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Durability {
    /// `synchronous=FULL`: an acknowledged write survives power loss.
    #[default]
    Full,
    /// `synchronous=NORMAL`: survives a crash of the daemon, not of the
    /// machine (the last commits may be lost on power loss).
    Fast,
}

pub struct SqliteQueue {
    path: PathBuf,
    writer: Writer,
    reader: Arc<Mutex<Connection>>,
    retry: RetryPolicy,
    changes: broadcast::Sender<JobId>,
}

fn store_err(path: &Path) -> impl Fn(rusqlite::Error) -> QueueError + '_ {
    move |e| QueueError::Store {
        path: path.display().to_string(),
        detail: e.to_string(),
    }
}

impl SqliteQueue {
    /// Opens (creating if needed) the queue file with full durability and
    /// runs pending migrations.
    pub async fn open(path: &Path, retry: RetryPolicy) -> Result<Self, QueueError> {
        Self::open_with(path, retry, Durability::Full).await
    }

    pub async fn open_with(
        path: &Path,
        retry: RetryPolicy,
        durability: Durability,
    ) -> Result<Self, QueueError> {
        let path = path.to_path_buf();
        let (write, read) = tokio::task::spawn_blocking({
            let path = path.clone();
            move || -> Result<_, QueueError> {
                let write = Self::open_blocking(&path, durability)?;
                let read = Connection::open(&path).map_err(store_err(&path))?;
                read.busy_timeout(Duration::from_secs(5))
                    .map_err(store_err(&path))?;
                Ok((write, read))
            }
        })
        .await
        .map_err(|e| QueueError::Store {
            path: path.display().to_string(),
            detail: e.to_string(),
        })??;
        let (changes, _) = broadcast::channel(1024);
        Ok(Self {
            writer: Writer::start(write, path.clone())?,
            reader: Arc::new(Mutex::new(read)),
            path,
            retry,
            changes,
        })
    }

    fn open_blocking(path: &Path, durability: Durability) -> Result<Connection, QueueError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| QueueError::Store {
                path: path.display().to_string(),
                detail: format!("cannot create {}: {e}", dir.display()),
            })?;
        }
        let err = store_err(path);
        let mut conn = Connection::open(path).map_err(&err)?;
        conn.busy_timeout(Duration::from_secs(5)).map_err(&err)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(&err)?;
        let synchronous = match durability {
            Durability::Full => "FULL",
            Durability::Fast => "NORMAL",
        };
        conn.pragma_update(None, "synchronous", synchronous)
            .map_err(&err)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(&err)?;
        let version: u32 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(&err)?;
        let supported = MIGRATIONS.len() as u32;
        if version > supported {
            return Err(QueueError::TooNew {
                path: path.display().to_string(),
                found: version,
                supported,
            });
        }
        for (i, migration) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            let tx = conn.transaction().map_err(&err)?;
            tx.execute_batch(migration).map_err(&err)?;
            tx.pragma_update(None, "user_version", (i + 1) as u32)
                .map_err(&err)?;
            tx.commit().map_err(&err)?;
        }
        Ok(conn)
    }

    /// Runs a read with the reader connection on the blocking pool.
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, rusqlite::Error> + Send + 'static,
    ) -> Result<T, QueueError> {
        let conn = self.reader.clone();
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || {
            let guard = conn.lock().unwrap_or_else(|p| p.into_inner());
            f(&guard).map_err(|e| store_err(&path)(e))
        })
        .await
        .map_err(|e| QueueError::Store {
            path: self.path.display().to_string(),
            detail: e.to_string(),
        })?
    }

    /// Runs a write in the next group commit; returns once it is durable.
    async fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, WriteError> + Send + 'static,
    ) -> Result<T, QueueError> {
        self.writer.write(f).await
    }

    fn notify(&self, id: &JobId) {
        let _ = self.changes.send(id.clone());
    }
}

fn now_ms() -> i64 {
    millis(SystemTime::now())
}

const JOB_COLUMNS: &str = "id, bundle, bundle_version, input, variables, priority, state, attempts, max_attempts, idempotency_key, traceparent, cancel_requested, result, error, run_at, created_at, updated_at, started_at, finished_at, lease_expires_at, bundle_digest, pending_call, messages, conversation_id, crash_resumes";

fn job_from_row(row: &Row<'_>) -> rusqlite::Result<Job> {
    let variables: String = row.get(4)?;
    let state: String = row.get(6)?;
    let result: Option<String> = row.get(12)?;
    let pending: Option<String> = row.get(21)?;
    let messages: Option<String> = row.get(22)?;
    let ts = |i: usize| -> rusqlite::Result<Option<String>> {
        Ok(row.get::<_, Option<i64>>(i)?.map(rfc3339))
    };
    Ok(Job {
        id: JobId(row.get(0)?),
        bundle: row.get(1)?,
        bundle_version: row.get(2)?,
        bundle_digest: row.get(20)?,
        input: row.get(3)?,
        variables: serde_json::from_str(&variables).unwrap_or_default(),
        messages: messages.and_then(|m| serde_json::from_str(&m).ok()),
        conversation_id: row.get(23)?,
        priority: row.get(5)?,
        state: JobState::parse(&state).unwrap_or(JobState::Failed),
        attempts: row.get(7)?,
        max_attempts: row.get(8)?,
        crash_resumes: row.get(24)?,
        idempotency_key: row.get(9)?,
        traceparent: row.get(10)?,
        cancel_requested: row.get::<_, i64>(11)? != 0,
        result: result.and_then(|r| serde_json::from_str(&r).ok()),
        error: row.get(13)?,
        pending_call: pending.and_then(|p| serde_json::from_str(&p).ok()),
        run_at: rfc3339(row.get(14)?),
        created_at: rfc3339(row.get(15)?),
        updated_at: rfc3339(row.get(16)?),
        started_at: ts(17)?,
        finished_at: ts(18)?,
        lease_expires_at: ts(19)?,
    })
}

fn load(conn: &Connection, id: &str) -> rusqlite::Result<Option<Job>> {
    conn.query_row(
        &format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?1"),
        [id],
        job_from_row,
    )
    .optional()
}

/// Deletes jobs with their events and journals.
fn delete_jobs(conn: &Connection, ids: &[String]) -> rusqlite::Result<()> {
    for id in ids {
        conn.prepare_cached("DELETE FROM events WHERE job_id = ?1")?
            .execute([id])?;
        conn.prepare_cached("DELETE FROM journal WHERE job_id = ?1")?
            .execute([id])?;
        conn.prepare_cached("DELETE FROM jobs WHERE id = ?1")?
            .execute([id])?;
    }
    Ok(())
}

/// Appends events; a sequence number already stored refuses the write.
fn insert_events(
    conn: &Connection,
    id: &JobId,
    attempt: u32,
    events: &[EventEnvelope],
) -> Result<(), WriteError> {
    let mut insert = conn.prepare_cached(
        "INSERT INTO events (job_id, seq, attempt, event) VALUES (?1, ?2, ?3, ?4) ON CONFLICT (job_id, seq) DO NOTHING",
    )?;
    let mut stored =
        conn.prepare_cached("SELECT attempt, event FROM events WHERE job_id = ?1 AND seq = ?2")?;
    for event in events {
        let json = serde_json::to_string(event).unwrap_or_default();
        if insert.execute(params![id.as_str(), event.seq as i64, attempt, json])? == 0 {
            let found: (u32, String) = stored
                .query_row(params![id.as_str(), event.seq as i64], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?;
            if !same_event(found, attempt, &json) {
                return Err(WriteError::Refused(QueueError::DuplicateEvent {
                    job: id.clone(),
                    seq: event.seq,
                }));
            }
        }
    }
    Ok(())
}

/// Refuses the write unless `attempt` is the running job's current attempt.
/// The job's `(max_attempts, cancel_requested)` while `attempt` is its
/// current running attempt; any other attempt is refused as stale.
fn require_current(conn: &Connection, id: &JobId, attempt: u32) -> Result<(u32, bool), WriteError> {
    // Attempts that resumed after a crash are not failures: they extend the
    // attempts a job may use.
    let found: Option<(String, u32, u32, i64)> = conn
        .query_row(
            "SELECT state, attempts, max_attempts + crash_resumes, cancel_requested FROM jobs WHERE id = ?1",
            [id.as_str()],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .optional()?;
    match found {
        Some((state, a, max_attempts, cancel)) if state == "running" && a == attempt => {
            Ok((max_attempts, cancel != 0))
        }
        _ => Err(WriteError::Refused(QueueError::StaleAttempt {
            job: id.clone(),
            attempt,
        })),
    }
}

/// [`require_current`] for recording an outcome: a stale attempt records
/// nothing (`Ok(None)`); a database error stays an error.
fn current_or_stale(
    conn: &Connection,
    id: &JobId,
    attempt: u32,
) -> Result<Option<(u32, bool)>, WriteError> {
    match require_current(conn, id, attempt) {
        Ok(current) => Ok(Some(current)),
        Err(WriteError::Refused(QueueError::StaleAttempt { .. })) => Ok(None),
        Err(e) => Err(e),
    }
}

fn candidate(r: &Row<'_>) -> rusqlite::Result<Candidate> {
    Ok(Candidate {
        id: r.get(0)?,
        running: r.get::<_, String>(1)? == "running",
        crash_resumes: r.get(2)?,
        priority: r.get(3)?,
        run_at: r.get(4)?,
    })
}

/// The best runnable job, if any. Two indexed lookups (due queued jobs,
/// expired leases) instead of one OR over the table.
fn next_candidate(conn: &Connection, now: i64) -> rusqlite::Result<Option<Candidate>> {
    let queued = conn
        .prepare_cached(
            "SELECT id, state, crash_resumes, priority, run_at FROM jobs INDEXED BY jobs_due
             WHERE state = 'queued' AND run_at <= ?1 ORDER BY priority DESC, run_at ASC, id ASC LIMIT 1",
        )?
        .query_row([now], candidate)
        .optional()?;
    let expired = conn
        .prepare_cached(
            "SELECT id, state, crash_resumes, priority, run_at FROM jobs INDEXED BY jobs_lease
             WHERE state = 'running' AND lease_expires_at <= ?1 ORDER BY priority DESC, run_at ASC, id ASC LIMIT 1",
        )?
        .query_row([now], candidate)
        .optional()?;
    Ok(Candidate::better(queued, expired))
}

/// Puts a resolved job back in the queue, with one more attempt than it used.
fn requeue(conn: &Connection, id: &JobId, now: i64) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE jobs SET state = 'queued', error = NULL, pending_call = NULL, run_at = ?2, updated_at = ?2, max_attempts = MAX(max_attempts, attempts + 1), crash_resumes = 0 WHERE id = ?1",
        params![id.as_str(), now],
    )?;
    Ok(())
}

/// Leases the best runnable job. An abandoned run (its worker's lease
/// expired) resumes without using an attempt, unless it is a poison pill
/// (it parks).
fn lease_next(
    conn: &Connection,
    worker: &str,
    lease_for: Duration,
    max_crash_resumes: u32,
) -> rusqlite::Result<Option<Lease>> {
    let now = now_ms();
    while let Some(candidate) = next_candidate(conn, now)? {
        let id = &candidate.id;
        if candidate.is_poison_pill(max_crash_resumes) {
            let last = last_event(conn, id)?;
            conn.execute(
                "UPDATE jobs SET state = 'needs_attention', error = ?3, pending_call = NULL, updated_at = ?2, lease_owner = NULL, lease_expires_at = NULL WHERE id = ?1",
                params![id, now, candidate.poison_reason(max_crash_resumes, last)],
            )?;
            continue;
        }
        conn.execute(
            "UPDATE jobs SET state = 'running', attempts = attempts + 1, crash_resumes = crash_resumes + ?2, lease_owner = ?3, lease_expires_at = ?4, started_at = COALESCE(started_at, ?5), updated_at = ?5 WHERE id = ?1",
            params![id, i64::from(candidate.running), worker, now + lease_for.as_millis() as i64, now],
        )?;
        let Some(job) = load(conn, id)? else {
            return Ok(None);
        };
        return Ok(Some(Lease {
            attempt: job.attempts,
            next_seq: last_seq(conn, id)? + 1,
            journal: read_journal(conn, id)?,
            job,
        }));
    }
    Ok(None)
}

/// The sequence number of a job's last stored event (0: none yet).
fn last_seq(conn: &Connection, id: &str) -> rusqlite::Result<u64> {
    let last: i64 = conn.query_row(
        "SELECT COALESCE(MAX(seq), 0) FROM events WHERE job_id = ?1",
        [id],
        |r| r.get(0),
    )?;
    Ok(last.max(0) as u64)
}

/// The job an operator's request left, with the final event it records
/// (as the next of the job's log) when the request `ended` the job.
fn record_ending(conn: &Connection, job: Job, ended: bool) -> Result<Changed, WriteError> {
    let final_event = if ended {
        ended_by_request(&job, last_seq(conn, job.id.as_str())? + 1)
    } else {
        None
    };
    insert_events(conn, &job.id, job.attempts, final_event.as_slice())?;
    Ok(Changed { job, final_event })
}

/// A job's journal in (scope, turn, step) order.
fn read_journal(conn: &Connection, id: &str) -> rusqlite::Result<Vec<JournalEntry>> {
    let mut stmt = conn.prepare_cached(
        "SELECT scope, turn, step, body FROM journal WHERE job_id = ?1 ORDER BY scope, turn, step",
    )?;
    let rows = stmt.query_map([id], |r| {
        Ok(JournalEntry {
            scope: r.get(0)?,
            turn: r.get(1)?,
            step: r.get(2)?,
            body: r.get(3)?,
        })
    })?;
    rows.collect()
}

/// The event a job's log recorded last, as people read it.
fn last_event(conn: &Connection, id: &str) -> rusqlite::Result<Option<String>> {
    conn.query_row(
        "SELECT event FROM events WHERE job_id = ?1 ORDER BY seq DESC LIMIT 1",
        [id],
        |r| Ok(describe_event(&r.get::<_, String>(0)?)),
    )
    .optional()
}

#[async_trait]
impl JobQueue for SqliteQueue {
    async fn submit(&self, mut job: NewJob) -> Result<(Job, bool), QueueError> {
        let id = job.id.take().unwrap_or_default();
        let path = self.path.display().to_string();
        let (job, created) = self
            .write(move |conn| {
                if let Some(key) = &job.idempotency_key {
                    let existing: Option<String> = conn
                        .query_row("SELECT id FROM jobs WHERE idempotency_key = ?1", [key], |r| r.get(0))
                        .optional()?;
                    if let Some(existing) = existing {
                        return Ok((load(conn, &existing)?, false));
                    }
                }
                let now = now_ms();
                conn.execute(
                    "INSERT INTO jobs (id, bundle, bundle_version, input, variables, priority, state, attempts, max_attempts, idempotency_key, traceparent, run_at, created_at, updated_at, messages, conversation_id)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'queued', 0, ?7, ?8, ?9, ?10, ?11, ?11, ?12, ?13)",
                    params![
                        id.as_str(),
                        job.bundle,
                        job.bundle_version,
                        job.input,
                        Value::Object(job.variables).to_string(),
                        job.priority,
                        job.max_attempts.unwrap_or(3).max(1),
                        job.idempotency_key,
                        job.traceparent,
                        job.run_at.map(millis).unwrap_or(now),
                        now,
                        job.messages.map(|m| Value::Array(m).to_string()),
                        job.conversation_id,
                    ],
                )?;
                Ok((load(conn, id.as_str())?, true))
            })
            .await?;
        let job = job.ok_or_else(|| QueueError::Store {
            path,
            detail: "job vanished after insert".into(),
        })?;
        if created {
            crate::failpoint::hit("after_submit_commit");
        }
        Ok((job, created))
    }

    async fn get(&self, id: &JobId) -> Result<Option<Job>, QueueError> {
        let id = id.0.clone();
        self.read(move |conn| load(conn, &id)).await
    }

    async fn list(&self, filter: JobFilter) -> Result<Page, QueueError> {
        let limit = filter.limit.clamp(1, 1000);
        let (jobs, more) = self
            .read(move |conn| {
                // Newest first; ids are UUIDv7 so they sort by creation time.
                let (conditions, args) = filter.conditions(|n| format!("?{n}"));
                let sql = format!(
                    "SELECT {JOB_COLUMNS} FROM jobs WHERE 1=1{conditions} ORDER BY id DESC LIMIT {}",
                    limit + 1
                );
                let mut stmt = conn.prepare(&sql)?;
                let mut jobs: Vec<Job> = stmt
                    .query_map(rusqlite::params_from_iter(args.iter()), job_from_row)?
                    .collect::<Result<_, _>>()?;
                let more = jobs.len() > limit;
                jobs.truncate(limit);
                Ok((jobs, more))
            })
            .await?;
        let next_cursor = if more {
            jobs.last().map(|j| j.id.0.clone())
        } else {
            None
        };
        Ok(Page { jobs, next_cursor })
    }

    async fn counts_by_state(&self) -> Result<Vec<(String, JobState, u64)>, QueueError> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT bundle, state, COUNT(*) FROM jobs GROUP BY bundle, state",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (bundle, state, n) = row?;
                if let Some(state) = JobState::parse(&state) {
                    out.push((bundle, state, n as u64));
                }
            }
            Ok(out)
        })
        .await
    }

    async fn live_counts(&self) -> Result<Vec<(JobState, u64)>, QueueError> {
        self.read(|conn| {
            let mut count = conn
                .prepare_cached("SELECT COUNT(*) FROM jobs INDEXED BY jobs_due WHERE state = ?1")?;
            JobState::LIVE
                .into_iter()
                .map(|state| {
                    let n: i64 = count.query_row([state.as_str()], |r| r.get(0))?;
                    Ok((state, n as u64))
                })
                .collect()
        })
        .await
    }

    async fn lease(&self, worker: &str, lease_for: Duration) -> Result<Option<Lease>, QueueError> {
        let worker = worker.to_string();
        let max_crash_resumes = self.retry.max_crash_resumes;
        let leased = self
            .write(move |conn| Ok(lease_next(conn, &worker, lease_for, max_crash_resumes)?))
            .await?;
        if let Some(lease) = &leased {
            self.notify(&lease.job.id);
        }
        Ok(leased)
    }

    async fn heartbeat(
        &self,
        id: &JobId,
        attempt: u32,
        lease_for: Duration,
    ) -> Result<HeartbeatReply, QueueError> {
        let id = id.0.clone();
        self.write(move |conn| {
            let now = now_ms();
            let renewed = conn.execute(
                "UPDATE jobs SET lease_expires_at = ?3, updated_at = ?4 WHERE id = ?1 AND attempts = ?2 AND state = 'running'",
                params![id, attempt, now + lease_for.as_millis() as i64, now],
            )?;
            if renewed == 0 {
                return Ok(HeartbeatReply::Lost);
            }
            let cancel: i64 = conn.query_row("SELECT cancel_requested FROM jobs WHERE id = ?1", [&id], |r| r.get(0))?;
            Ok(if cancel != 0 { HeartbeatReply::CancelRequested } else { HeartbeatReply::Ok })
        })
        .await
    }

    async fn pin_version(
        &self,
        id: &JobId,
        attempt: u32,
        version: &str,
        digest: &str,
    ) -> Result<(), QueueError> {
        let (id, version, digest) = (id.0.clone(), version.to_string(), digest.to_string());
        self.write(move |conn| {
            conn.execute(
                "UPDATE jobs SET bundle_version = COALESCE(bundle_version, ?3), bundle_digest = ?4 WHERE id = ?1 AND attempts = ?2 AND bundle_digest IS NULL",
                params![id, attempt, version, digest],
            )?;
            Ok(())
        })
        .await
    }

    async fn finish(
        &self,
        id: &JobId,
        attempt: u32,
        outcome: Outcome,
        events: &[EventEnvelope],
        final_event: Option<EventEnvelope>,
    ) -> Result<Finished, QueueError> {
        let job_id = id.clone();
        let events = events.to_vec();
        let retry = self.retry;
        crate::failpoint::hit("before_completion_commit");
        let finished = self
            .write(move |conn| {
                let Some((max_attempts, cancel_requested)) =
                    current_or_stale(conn, &job_id, attempt)?
                else {
                    return Ok(Finished::stale());
                };
                let decision = decide(&outcome, attempt, max_attempts, cancel_requested);
                let now = now_ms();
                let run_at = decision
                    .retry
                    .then(|| now + retry.delay(attempt).as_millis() as i64);
                let (result, pending) = decision.stored(&outcome);
                let finished_at = decision.state.is_terminal().then_some(now);
                conn.execute(
                    "UPDATE jobs SET state = ?2, result = ?3, error = ?4, run_at = COALESCE(?5, run_at), finished_at = ?6, updated_at = ?7, pending_call = ?8, lease_owner = NULL, lease_expires_at = NULL WHERE id = ?1",
                    params![job_id.as_str(), decision.state.as_str(), result, decision.error, run_at, finished_at, now, pending],
                )?;
                let final_event = final_event.map(|e| stamp_final(e, &decision));
                insert_events(conn, &job_id, attempt, &events)?;
                insert_events(conn, &job_id, attempt, final_event.as_slice())?;
                Ok(Finished {
                    reply: CompleteReply::Recorded(decision.state),
                    final_event,
                })
            })
            .await?;
        self.notify(id);
        Ok(finished)
    }

    async fn release(
        &self,
        id: &JobId,
        attempt: u32,
        events: &[EventEnvelope],
        final_event: Option<EventEnvelope>,
    ) -> Result<Finished, QueueError> {
        let job_id = id.clone();
        let events = events.to_vec();
        let finished = self
            .write(move |conn| {
                let Some((_, cancel_requested)) = current_or_stale(conn, &job_id, attempt)? else {
                    return Ok(Finished::stale());
                };
                let now = now_ms();
                // A job someone asked to cancel ends here rather than run again.
                let decision = decide_release(cancel_requested);
                if cancel_requested {
                    conn.execute(
                        "UPDATE jobs SET state = 'cancelled', error = 'cancelled by request', finished_at = ?2, updated_at = ?2, lease_owner = NULL, lease_expires_at = NULL WHERE id = ?1",
                        params![job_id.as_str(), now],
                    )?;
                } else {
                    conn.execute(
                        "UPDATE jobs SET state = 'queued', attempts = attempts - 1, lease_owner = NULL, lease_expires_at = NULL, updated_at = ?2 WHERE id = ?1",
                        params![job_id.as_str(), now],
                    )?;
                }
                let final_event = final_event.map(|e| stamp_final(e, &decision));
                insert_events(conn, &job_id, attempt, &events)?;
                insert_events(conn, &job_id, attempt, final_event.as_slice())?;
                Ok(Finished {
                    reply: CompleteReply::Recorded(decision.state),
                    final_event,
                })
            })
            .await?;
        self.notify(id);
        Ok(finished)
    }

    async fn cancel(&self, id: &JobId) -> Result<Option<Changed>, QueueError> {
        let job_id = id.clone();
        let changed = self
            .write(move |conn| {
                let now = now_ms();
                let ended = conn.execute(
                    "UPDATE jobs SET state = 'cancelled', finished_at = ?2, updated_at = ?2, error = 'cancelled by request', pending_call = NULL WHERE id = ?1 AND state IN ('queued', 'needs_attention')",
                    params![job_id.as_str(), now],
                )?;
                conn.execute("UPDATE jobs SET cancel_requested = 1, updated_at = ?2 WHERE id = ?1 AND state = 'running'", params![job_id.as_str(), now])?;
                let Some(job) = load(conn, job_id.as_str())? else {
                    return Ok(None);
                };
                Ok(Some(record_ending(conn, job, ended > 0)?))
            })
            .await?;
        self.notify(id);
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
        let job_id = id.clone();
        let events = events.to_vec();
        self.write(move |conn| {
            require_current(conn, &job_id, attempt)?;
            insert_events(conn, &job_id, attempt, &events)
        })
        .await?;
        self.notify(id);
        Ok(())
    }

    async fn events_after(
        &self,
        id: &JobId,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, QueueError> {
        let job_id = id.0.clone();
        self.read(move |conn| {
            let mut stmt = conn
                .prepare_cached("SELECT seq, event FROM events WHERE job_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3")?;
            let rows = stmt.query_map(params![job_id, after_seq as i64, limit as i64], |r| {
                Ok(StoredEvent { seq: r.get::<_, i64>(0)? as u64, event_json: r.get(1)? })
            })?;
            rows.collect()
        })
        .await
    }

    async fn last_seq(&self, id: &JobId) -> Result<u64, QueueError> {
        let job_id = id.0.clone();
        self.read(move |conn| last_seq(conn, &job_id)).await
    }

    async fn forget_conversation(
        &self,
        conversation_id: &str,
    ) -> Result<(usize, usize), QueueError> {
        let conversation = conversation_id.to_string();
        self.write(move |conn| {
            let ids: Vec<String> = conn
                .prepare_cached(
                    "SELECT id FROM jobs WHERE conversation_id = ?1 AND finished_at IS NOT NULL",
                )?
                .query_map([&conversation], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            delete_jobs(conn, &ids)?;
            let left: i64 = conn.query_row(
                "SELECT COUNT(*) FROM jobs WHERE conversation_id = ?1",
                [&conversation],
                |r| r.get(0),
            )?;
            Ok((ids.len(), left as usize))
        })
        .await
    }

    async fn purge_finished(
        &self,
        finished_before: SystemTime,
        limit: usize,
    ) -> Result<usize, QueueError> {
        let cutoff = millis(finished_before);
        self.write(move |conn| {
            let ids: Vec<String> = conn
                .prepare_cached(
                    "SELECT id FROM jobs INDEXED BY jobs_finished WHERE finished_at IS NOT NULL AND finished_at < ?1 ORDER BY finished_at LIMIT ?2",
                )?
                .query_map(params![cutoff, limit as i64], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            delete_jobs(conn, &ids)?;
            Ok(ids.len())
        })
        .await
    }

    async fn journal(&self, id: &JobId) -> Result<Vec<JournalEntry>, QueueError> {
        let job_id = id.0.clone();
        self.read(move |conn| read_journal(conn, &job_id)).await
    }

    async fn record_steps(
        &self,
        id: &JobId,
        attempt: u32,
        entries: &[JournalEntry],
        events: &[EventEnvelope],
    ) -> Result<(), QueueError> {
        let job_id = id.clone();
        let notify = !events.is_empty();
        let (entries, events) = (entries.to_vec(), events.to_vec());
        self.write(move |conn| {
            require_current(conn, &job_id, attempt)?;
            insert_events(conn, &job_id, attempt, &events)?;
            let mut insert = conn.prepare_cached(
                "INSERT OR REPLACE INTO journal (job_id, scope, turn, step, attempt, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?;
            for entry in &entries {
                insert.execute(params![job_id.as_str(), entry.scope, entry.turn, entry.step, attempt, entry.body])?;
            }
            Ok(())
        })
        .await?;
        if notify {
            self.notify(id);
        }
        lost_reply(&self.path.display().to_string())
    }

    async fn resolve(&self, id: &JobId, resolution: Resolution) -> Result<Changed, QueueError> {
        let job_id = id.clone();
        let path = self.path.display().to_string();
        let job = self
            .write(move |conn| {
                let job = load(conn, job_id.as_str())?
                    .ok_or_else(|| WriteError::Refused(QueueError::NotFound(job_id.clone())))?;
                let pending =
                    parked_call(&job, &resolution, &path).map_err(WriteError::Refused)?;
                let now = now_ms();
                match &resolution {
                    Resolution::Fail { reason } => {
                        let error = Resolution::failure(reason, pending.as_ref());
                        conn.execute(
                            "UPDATE jobs SET state = 'failed', error = ?2, pending_call = NULL, finished_at = ?3, updated_at = ?3 WHERE id = ?1",
                            params![job_id.as_str(), error, now],
                        )?;
                    }
                    Resolution::Retry => {
                        // Without its start marker the next attempt runs the call afresh.
                        if let Some(pending) = &pending {
                            conn.execute(
                                "DELETE FROM journal WHERE job_id = ?1 AND scope = ?2 AND turn = ?3 AND step = ?4",
                                params![job_id.as_str(), pending.scope, pending.turn, pending.steps().0],
                            )?;
                        }
                        requeue(conn, &job_id, now)?;
                    }
                    Resolution::Skip { output, is_error } => {
                        let Some(pending) = &pending else {
                            return Err(WriteError::Refused(QueueError::NoCallToSkip(job_id.clone())));
                        };
                        let body = Resolution::skipped_result(pending, output, *is_error);
                        conn.execute(
                            "INSERT OR REPLACE INTO journal (job_id, scope, turn, step, attempt, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                            params![job_id.as_str(), pending.scope, pending.turn, pending.steps().1, job.attempts, body],
                        )?;
                        requeue(conn, &job_id, now)?;
                    }
                }
                let job = load(conn, job_id.as_str())?
                    .ok_or_else(|| WriteError::Refused(QueueError::NotFound(job_id.clone())))?;
                let failed = matches!(resolution, Resolution::Fail { .. });
                record_ending(conn, job, failed)
            })
            .await?;
        self.notify(id);
        Ok(job)
    }

    fn subscribe(&self) -> broadcast::Receiver<JobId> {
        self.changes.subscribe()
    }

    async fn ping(&self) -> Result<(), QueueError> {
        self.read(|conn| conn.query_row("SELECT 1", [], |_| Ok(())))
            .await
    }
}
