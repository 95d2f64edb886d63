//! The embedded queue: one SQLite file (WAL). Writes go through one writer
//! thread that group-commits them (see `writer`), with `synchronous=FULL` by
//! default so an acknowledged write survives power loss; reads use their own
//! connection on the blocking pool (WAL readers never wait for the writer).

mod dialect;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use futures::executor::block_on;
use rusqlite::Connection;
use tokio::sync::broadcast;

use super::lifecycle::{self, Ending, LeaseAsk, Pinner};
use super::tx::{Res, Tx, Wakeups};
use super::*;
use dialect::SqliteTx;
use writer::Writer;

/// Ordered schema migrations; the store records how many ran.
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0001_jobs_and_events.sql"),
    include_str!("migrations/0002_digest_journal_leases.sql"),
    include_str!("migrations/0003_messages_conversations.sql"),
    include_str!("migrations/0004_crash_resumes.sql"),
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
    wake: Wakeups,
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
        let wake = Wakeups::new();
        Ok(Self {
            writer: Writer::start(write, path.clone(), wake.clone())?,
            reader: Arc::new(Mutex::new(read)),
            path,
            retry,
            wake,
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

    /// Runs a read with the reader connection on the blocking pool (the
    /// lifecycle's reads never wait: SQLite answers at once).
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut SqliteTx<'_>) -> Res<T> + Send + 'static,
    ) -> Result<T, QueueError> {
        let conn = self.reader.clone();
        let label = self.label();
        tokio::task::spawn_blocking(move || {
            let guard = conn.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut SqliteTx::new(&guard)).map_err(|e| e.into_error(&label))
        })
        .await
        .map_err(|e| QueueError::Store {
            path: self.label(),
            detail: e.to_string(),
        })?
    }

    /// Runs a write in the next group commit; returns once it is durable
    /// (and its changes have woken the subscribers).
    async fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut SqliteTx<'_>) -> Res<T> + Send + 'static,
    ) -> Result<T, QueueError> {
        self.writer.write(f).await
    }

    fn label(&self) -> String {
        self.path.display().to_string()
    }
}

#[async_trait]
impl JobQueue for SqliteQueue {
    async fn submit(&self, mut job: NewJob) -> Result<(Job, bool), QueueError> {
        let id = job.id.take().unwrap_or_default();
        let submitted = self
            .write(move |tx| block_on(lifecycle::submit(tx, id, job)))
            .await?;
        if submitted.1 {
            crate::failpoint::hit("after_submit_commit");
        }
        Ok(submitted)
    }

    async fn submit_many(&self, jobs: Vec<NewJob>) -> Result<Vec<(Job, bool)>, QueueError> {
        let jobs = with_ids(jobs);
        self.write(move |tx| block_on(lifecycle::submit_many(tx, jobs)))
            .await
    }

    async fn get(&self, id: &JobId) -> Result<Option<Job>, QueueError> {
        let id = id.clone();
        self.read(move |tx| block_on(tx.job(id.as_str(), false)))
            .await
    }

    async fn list(&self, filter: JobFilter) -> Result<Page, QueueError> {
        self.read(move |tx| block_on(lifecycle::list(tx, &filter)))
            .await
    }

    async fn counts_by_state(&self) -> Result<Vec<(String, JobState, u64)>, QueueError> {
        self.read(|tx| block_on(lifecycle::counts_by_state(tx)))
            .await
    }

    async fn live_counts(&self) -> Result<Vec<(JobState, u64)>, QueueError> {
        self.read(|tx| block_on(lifecycle::live_counts(tx))).await
    }

    async fn lease_many(
        &self,
        worker: &str,
        lease_for: Duration,
        n: usize,
        pin: Option<Arc<Pinner>>,
    ) -> Result<Vec<Lease>, QueueError> {
        let worker = worker.to_string();
        let max_crash_resumes = self.retry.max_crash_resumes;
        self.write(move |tx| {
            let ask = LeaseAsk {
                worker: &worker,
                lease_for,
                n,
                max_crash_resumes,
                pin: pin.as_deref(),
            };
            block_on(lifecycle::lease(tx, &ask))
        })
        .await
    }

    async fn heartbeat(
        &self,
        id: &JobId,
        attempt: u32,
        lease_for: Duration,
    ) -> Result<HeartbeatReply, QueueError> {
        let id = id.clone();
        self.write(move |tx| block_on(lifecycle::heartbeat(tx, &id, attempt, lease_for)))
            .await
    }

    async fn pin_version(
        &self,
        id: &JobId,
        attempt: u32,
        version: &str,
        digest: &str,
    ) -> Result<(), QueueError> {
        let id = id.clone();
        let pin = Pin {
            version: version.to_string(),
            digest: digest.to_string(),
        };
        self.write(move |tx| block_on(lifecycle::pin_version(tx, &id, attempt, &pin)))
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
        let (id, events, retry) = (id.clone(), events.to_vec(), self.retry);
        crate::failpoint::hit("before_completion_commit");
        self.write(move |tx| {
            let ending = Ending {
                events: &events,
                final_event,
            };
            block_on(lifecycle::finish(tx, &id, attempt, outcome, ending, &retry))
        })
        .await
    }

    async fn release(
        &self,
        id: &JobId,
        attempt: u32,
        events: &[EventEnvelope],
        final_event: Option<EventEnvelope>,
    ) -> Result<Finished, QueueError> {
        let (id, events) = (id.clone(), events.to_vec());
        self.write(move |tx| {
            let ending = Ending {
                events: &events,
                final_event,
            };
            block_on(lifecycle::release(tx, &id, attempt, ending))
        })
        .await
    }

    async fn cancel(&self, id: &JobId) -> Result<Option<Changed>, QueueError> {
        let id = id.clone();
        self.write(move |tx| block_on(lifecycle::cancel(tx, &id)))
            .await
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
        let (id, events) = (id.clone(), events.to_vec());
        self.write(move |tx| block_on(lifecycle::append_events(tx, &id, attempt, &events)))
            .await
    }

    async fn events_after(
        &self,
        id: &JobId,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, QueueError> {
        let id = id.clone();
        self.read(move |tx| block_on(tx.events_after(id.as_str(), after_seq, limit)))
            .await
    }

    async fn last_seq(&self, id: &JobId) -> Result<u64, QueueError> {
        let id = id.clone();
        self.read(move |tx| block_on(tx.last_seq(id.as_str())))
            .await
    }

    async fn forget_conversation(
        &self,
        conversation_id: &str,
    ) -> Result<(usize, usize), QueueError> {
        let conversation = conversation_id.to_string();
        self.write(move |tx| block_on(lifecycle::forget_conversation(tx, &conversation)))
            .await
    }

    async fn purge_finished(
        &self,
        finished_before: SystemTime,
        limit: usize,
    ) -> Result<usize, QueueError> {
        let cutoff = millis(finished_before);
        self.write(move |tx| block_on(lifecycle::purge_finished(tx, cutoff, limit)))
            .await
    }

    async fn journal(&self, id: &JobId) -> Result<Vec<JournalEntry>, QueueError> {
        let id = id.clone();
        self.read(move |tx| block_on(tx.journal(id.as_str()))).await
    }

    async fn record_steps(
        &self,
        id: &JobId,
        attempt: u32,
        entries: &[JournalEntry],
        events: &[EventEnvelope],
    ) -> Result<(), QueueError> {
        let (id, entries, events) = (id.clone(), entries.to_vec(), events.to_vec());
        self.write(move |tx| {
            block_on(lifecycle::record_steps(tx, &id, attempt, &entries, &events))
        })
        .await?;
        lost_reply(&self.label())
    }

    async fn resolve(&self, id: &JobId, resolution: Resolution) -> Result<Changed, QueueError> {
        let (id, label) = (id.clone(), self.label());
        self.write(move |tx| block_on(lifecycle::resolve(tx, &id, &resolution, &label)))
            .await
    }

    fn subscribe(&self) -> broadcast::Receiver<JobId> {
        self.wake.changes.subscribe()
    }

    fn runnable(&self) -> Option<broadcast::Receiver<JobId>> {
        Some(self.wake.runnable.subscribe())
    }

    fn write_stats(&self) -> WriteCounts {
        self.writer.stats.counts()
    }

    async fn ping(&self) -> Result<(), QueueError> {
        self.read(|tx| block_on(tx.last_seq(""))).await.map(|_| ())
    }
}
