//! The embedded queue: one SQLite file (WAL). All SQLite work runs on the
//! blocking pool, one connection behind a mutex: SQLite serializes writers
//! anyway, and WAL keeps readers of the same file (other processes) cheap.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, Row, Transaction, params};
use serde_json::Value;
use tokio::sync::broadcast;

use super::*;

/// Ordered schema migrations; the store records how many ran.
const MIGRATIONS: &[&str] = &[r#"
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
"#];

pub struct SqliteQueue {
    path: PathBuf,
    conn: Arc<Mutex<Connection>>,
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
    /// Opens (creating if needed) the queue file and runs pending migrations.
    pub async fn open(path: &Path, retry: RetryPolicy) -> Result<Self, QueueError> {
        let path = path.to_path_buf();
        let opened = tokio::task::spawn_blocking({
            let path = path.clone();
            move || Self::open_blocking(&path)
        })
        .await
        .map_err(|e| QueueError::Store {
            path: path.display().to_string(),
            detail: e.to_string(),
        })??;
        let (changes, _) = broadcast::channel(1024);
        Ok(Self {
            path,
            conn: Arc::new(Mutex::new(opened)),
            retry,
            changes,
        })
    }

    fn open_blocking(path: &Path) -> Result<Connection, QueueError> {
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
        conn.pragma_update(None, "synchronous", "NORMAL")
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

    /// Runs `f` with the connection on the blocking pool.
    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, rusqlite::Error> + Send + 'static,
    ) -> Result<T, QueueError> {
        let conn = self.conn.clone();
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || {
            let mut guard = conn.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut guard).map_err(|e| store_err(&path)(e))
        })
        .await
        .map_err(|e| QueueError::Store {
            path: self.path.display().to_string(),
            detail: e.to_string(),
        })?
    }

    fn notify(&self, id: &JobId) {
        let _ = self.changes.send(id.clone());
    }
}

fn now_ms() -> i64 {
    millis(SystemTime::now())
}

const JOB_COLUMNS: &str = "id, bundle, bundle_version, input, variables, priority, state, attempts, max_attempts, idempotency_key, traceparent, cancel_requested, result, error, run_at, created_at, updated_at, started_at, finished_at, lease_expires_at";

fn job_from_row(row: &Row<'_>) -> rusqlite::Result<Job> {
    let variables: String = row.get(4)?;
    let state: String = row.get(6)?;
    let result: Option<String> = row.get(12)?;
    let ts = |i: usize| -> rusqlite::Result<Option<String>> {
        Ok(row.get::<_, Option<i64>>(i)?.map(rfc3339))
    };
    Ok(Job {
        id: JobId(row.get(0)?),
        bundle: row.get(1)?,
        bundle_version: row.get(2)?,
        input: row.get(3)?,
        variables: serde_json::from_str(&variables).unwrap_or_default(),
        priority: row.get(5)?,
        state: JobState::parse(&state).unwrap_or(JobState::Failed),
        attempts: row.get(7)?,
        max_attempts: row.get(8)?,
        idempotency_key: row.get(9)?,
        traceparent: row.get(10)?,
        cancel_requested: row.get::<_, i64>(11)? != 0,
        result: result.and_then(|r| serde_json::from_str(&r).ok()),
        error: row.get(13)?,
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

fn insert_events(
    tx: &Transaction<'_>,
    id: &str,
    attempt: u32,
    events: &[EventEnvelope],
) -> rusqlite::Result<()> {
    let mut insert = tx.prepare_cached(
        "INSERT INTO events (job_id, seq, attempt, event) VALUES (?1, ?2, ?3, ?4)",
    )?;
    for event in events {
        let json = serde_json::to_string(event).unwrap_or_default();
        insert.execute(params![id, event.seq as i64, attempt, json])?;
    }
    Ok(())
}

/// The current attempt of a running job, if `attempt` is it.
fn is_current(tx: &Transaction<'_>, id: &str, attempt: u32) -> rusqlite::Result<bool> {
    let found: Option<(String, u32)> = tx
        .query_row(
            "SELECT state, attempts FROM jobs WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    Ok(matches!(found, Some((state, a)) if state == "running" && a == attempt))
}

enum Appended {
    Ok,
    Stale,
    Duplicate(u64),
}

#[async_trait]
impl JobQueue for SqliteQueue {
    async fn submit(&self, job: NewJob) -> Result<(Job, bool), QueueError> {
        let id = JobId::new();
        let (job, created) = self
            .with(move |conn| {
                let tx = conn.transaction()?;
                if let Some(key) = &job.idempotency_key {
                    let existing: Option<String> = tx.query_row("SELECT id FROM jobs WHERE idempotency_key = ?1", [key], |r| r.get(0)).optional()?;
                    if let Some(existing) = existing {
                        let found = load(&tx, &existing)?;
                        return Ok((found, false));
                    }
                }
                let now = now_ms();
                tx.execute(
                    "INSERT INTO jobs (id, bundle, bundle_version, input, variables, priority, state, attempts, max_attempts, idempotency_key, traceparent, run_at, created_at, updated_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'queued', 0, ?7, ?8, ?9, ?10, ?11, ?11)",
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
                    ],
                )?;
                let created = load(&tx, id.as_str())?;
                tx.commit()?;
                Ok((created, true))
            })
            .await?;
        let job = job.ok_or_else(|| QueueError::Store {
            path: self.path.display().to_string(),
            detail: "job vanished after insert".into(),
        })?;
        Ok((job, created))
    }

    async fn get(&self, id: &JobId) -> Result<Option<Job>, QueueError> {
        let id = id.0.clone();
        self.with(move |conn| load(conn, &id)).await
    }

    async fn list(&self, filter: JobFilter) -> Result<Page, QueueError> {
        let cursor: Option<String> = filter.cursor.clone();
        let limit = filter.limit.clamp(1, 1000);
        let (jobs, more) = self
            .with(move |conn| {
                // Newest first; ids are UUIDv7 so they sort by creation time.
                let mut sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE 1=1");
                let mut args: Vec<String> = Vec::new();
                if let Some(state) = filter.state {
                    args.push(state.as_str().to_string());
                    sql.push_str(&format!(" AND state = ?{}", args.len()));
                }
                if let Some(bundle) = &filter.bundle {
                    args.push(bundle.clone());
                    sql.push_str(&format!(" AND bundle = ?{}", args.len()));
                }
                if let Some(c) = &cursor {
                    args.push(c.clone());
                    sql.push_str(&format!(" AND id < ?{}", args.len()));
                }
                sql.push_str(&format!(" ORDER BY id DESC LIMIT {}", limit + 1));
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
        self.with(|conn| {
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

    async fn lease(&self, worker: &str, lease_for: Duration) -> Result<Option<Lease>, QueueError> {
        let worker = worker.to_string();
        let leased = self
            .with(move |conn| {
                let tx = conn.transaction()?;
                let now = now_ms();
                loop {
                    let candidate: Option<(String, String, u32, u32, i64)> = tx
                        .query_row(
                            "SELECT id, state, attempts, max_attempts, cancel_requested FROM jobs
                             WHERE (state = 'queued' AND run_at <= ?1) OR (state = 'running' AND lease_expires_at <= ?1)
                             ORDER BY priority DESC, run_at ASC, id ASC LIMIT 1",
                            [now],
                            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
                        )
                        .optional()?;
                    let Some((id, state, attempts, max_attempts, cancel_requested)) = candidate else {
                        tx.commit()?;
                        return Ok(None);
                    };
                    // An abandoned run that was asked to stop, or that used up
                    // its attempts, ends here instead of running again.
                    if state == "running" && cancel_requested != 0 {
                        tx.execute("UPDATE jobs SET state = 'cancelled', finished_at = ?2, updated_at = ?2, lease_owner = NULL, lease_expires_at = NULL WHERE id = ?1", params![id, now])?;
                        continue;
                    }
                    if state == "running" && attempts >= max_attempts {
                        tx.execute(
                            "UPDATE jobs SET state = 'dead', error = ?3, finished_at = ?2, updated_at = ?2, lease_owner = NULL, lease_expires_at = NULL WHERE id = ?1",
                            params![id, now, format!("the worker's lease expired on attempt {attempts} of {max_attempts} (daemon killed or stuck)")],
                        )?;
                        continue;
                    }
                    let attempt = attempts + 1;
                    tx.execute(
                        "UPDATE jobs SET state = 'running', attempts = ?2, lease_owner = ?3, lease_expires_at = ?4, started_at = COALESCE(started_at, ?5), updated_at = ?5 WHERE id = ?1",
                        params![id, attempt, worker, now + lease_for.as_millis() as i64, now],
                    )?;
                    let job = load(&tx, &id)?;
                    tx.commit()?;
                    return Ok(job.map(|job| Lease { job, attempt }));
                }
            })
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
        self.with(move |conn| {
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

    async fn pin_version(&self, id: &JobId, attempt: u32, version: &str) -> Result<(), QueueError> {
        let (id, version) = (id.0.clone(), version.to_string());
        self.with(move |conn| {
            conn.execute(
                "UPDATE jobs SET bundle_version = ?3 WHERE id = ?1 AND attempts = ?2 AND bundle_version IS NULL",
                params![id, attempt, version],
            )?;
            Ok(())
        })
        .await
    }

    async fn complete(
        &self,
        id: &JobId,
        attempt: u32,
        outcome: Outcome,
        final_events: &[EventEnvelope],
    ) -> Result<CompleteReply, QueueError> {
        let job_id = id.clone();
        let events = final_events.to_vec();
        let retry = self.retry;
        let reply = self
            .with(move |conn| {
                let tx = conn.transaction()?;
                if !is_current(&tx, &job_id.0, attempt)? {
                    return Ok(CompleteReply::Stale);
                }
                let (max_attempts, cancel_requested): (u32, i64) =
                    tx.query_row("SELECT max_attempts, cancel_requested FROM jobs WHERE id = ?1", [&job_id.0], |r| Ok((r.get(0)?, r.get(1)?)))?;
                let now = now_ms();
                let (state, result, error, run_at) = match outcome {
                    Outcome::Succeeded(value) => (JobState::Succeeded, Some(value.to_string()), None, None),
                    Outcome::Failed { error, .. } if cancel_requested != 0 => (JobState::Cancelled, None, Some(error), None),
                    Outcome::Failed { error, retryable: true } if attempt < max_attempts => {
                        (JobState::Queued, None, Some(error), Some(now + retry.delay(attempt).as_millis() as i64))
                    }
                    Outcome::Failed { error, retryable: true } => (JobState::Dead, None, Some(error), None),
                    Outcome::Failed { error, retryable: false } => (JobState::Failed, None, Some(error), None),
                };
                let finished = state.is_terminal().then_some(now);
                tx.execute(
                    "UPDATE jobs SET state = ?2, result = ?3, error = ?4, run_at = COALESCE(?5, run_at), finished_at = ?6, updated_at = ?7, lease_owner = NULL, lease_expires_at = NULL WHERE id = ?1",
                    params![job_id.0, state.as_str(), result, error, run_at, finished, now],
                )?;
                insert_events(&tx, &job_id.0, attempt, &events)?;
                tx.commit()?;
                Ok(CompleteReply::Recorded(state))
            })
            .await?;
        self.notify(id);
        Ok(reply)
    }

    async fn release(&self, id: &JobId, attempt: u32) -> Result<(), QueueError> {
        let job_id = id.0.clone();
        self.with(move |conn| {
            conn.execute(
                "UPDATE jobs SET state = 'queued', attempts = attempts - 1, lease_owner = NULL, lease_expires_at = NULL, updated_at = ?3 WHERE id = ?1 AND attempts = ?2 AND state = 'running'",
                params![job_id, attempt, now_ms()],
            )?;
            Ok(())
        })
        .await?;
        self.notify(id);
        Ok(())
    }

    async fn cancel(&self, id: &JobId) -> Result<Option<Job>, QueueError> {
        let job_id = id.0.clone();
        let job = self
            .with(move |conn| {
                let now = now_ms();
                conn.execute(
                    "UPDATE jobs SET state = 'cancelled', finished_at = ?2, updated_at = ?2, error = 'cancelled by request' WHERE id = ?1 AND state = 'queued'",
                    params![job_id, now],
                )?;
                conn.execute("UPDATE jobs SET cancel_requested = 1, updated_at = ?2 WHERE id = ?1 AND state = 'running'", params![job_id, now])?;
                load(conn, &job_id)
            })
            .await?;
        self.notify(id);
        Ok(job)
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
        let job_id = id.0.clone();
        let events = events.to_vec();
        let appended = self
            .with(move |conn| {
                let tx = conn.transaction()?;
                if !is_current(&tx, &job_id, attempt)? {
                    return Ok(Appended::Stale);
                }
                match insert_events(&tx, &job_id, attempt, &events) {
                    Ok(()) => {}
                    Err(rusqlite::Error::SqliteFailure(e, _))
                        if e.code == rusqlite::ErrorCode::ConstraintViolation =>
                    {
                        return Ok(Appended::Duplicate(
                            events.first().map(|e| e.seq).unwrap_or_default(),
                        ));
                    }
                    Err(e) => return Err(e),
                }
                tx.commit()?;
                Ok(Appended::Ok)
            })
            .await?;
        match appended {
            Appended::Ok => {
                self.notify(id);
                Ok(())
            }
            Appended::Stale => Err(QueueError::StaleAttempt {
                job: id.clone(),
                attempt,
            }),
            Appended::Duplicate(seq) => Err(QueueError::DuplicateEvent {
                job: id.clone(),
                seq,
            }),
        }
    }

    async fn events_after(
        &self,
        id: &JobId,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, QueueError> {
        let job_id = id.0.clone();
        self.with(move |conn| {
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
        self.with(move |conn| {
            let seq: Option<i64> = conn.query_row(
                "SELECT MAX(seq) FROM events WHERE job_id = ?1",
                [job_id],
                |r| r.get(0),
            )?;
            Ok(seq.unwrap_or(0) as u64)
        })
        .await
    }

    fn subscribe(&self) -> broadcast::Receiver<JobId> {
        self.changes.subscribe()
    }

    async fn ping(&self) -> Result<(), QueueError> {
        self.with(|conn| conn.query_row("SELECT 1", [], |_| Ok(())))
            .await
    }
}
