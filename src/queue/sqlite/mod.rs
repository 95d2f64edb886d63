//! The embedded queue: one SQLite file (WAL). Writes go through one writer
//! thread that group-commits them (see `writer`), with `synchronous=FULL` by
//! default so an acknowledged write survives power loss; reads use their own
//! connection on the blocking pool (WAL readers never wait for the writer).

mod assistants;
mod dialect;
mod items;
mod outbox;
mod releases;
mod schedules;
mod threads;
mod writer;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::executor::block_on;
use rusqlite::Connection;

use super::backend::Driver;
use super::op::{self, FinishAndLease, Operation, Read, Write};
use super::tx::Wakeups;
use super::*;
use dialect::SqliteTx;
use writer::Writer;

/// Ordered schema migrations; the store records how many ran.
// Kept apart from `postgres/migrations/`, whose tables they match: each
// dialect has its own DDL (`INTEGER` for `BIGINT` and `BOOLEAN`, no `"C"`
// collation, `ALTER TABLE` limits) and its own numbering, and a migration
// that has shipped never changes.
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0001_jobs_and_events.sql"),
    include_str!("migrations/0002_digest_journal_leases.sql"),
    include_str!("migrations/0003_messages_conversations.sql"),
    include_str!("migrations/0004_crash_resumes.sql"),
    include_str!("migrations/0005_budgets.sql"),
    include_str!("migrations/0006_nested_spend.sql"),
    include_str!("migrations/0007_owners.sql"),
    include_str!("migrations/0008_outcomes.sql"),
    include_str!("migrations/0009_forks.sql"),
    include_str!("migrations/0010_schedules_outbox.sql"),
    include_str!("migrations/0011_a2a_push.sql"),
    include_str!("migrations/0012_delivery_claims.sql"),
    include_str!("migrations/0013_conversation_owners.sql"),
    include_str!("migrations/0014_budget_reservations.sql"),
    include_str!("migrations/0015_job_kind_controls.sql"),
    include_str!("migrations/0016_conversations_per_key.sql"),
    include_str!("migrations/0017_schedule_missed_fires.sql"),
    include_str!("migrations/0018_fair_lease.sql"),
    include_str!("migrations/0019_tracestate.sql"),
    include_str!("migrations/0020_release_decisions.sql"),
    include_str!("migrations/0021_thread_metadata.sql"),
    include_str!("migrations/0022_run_meta.sql"),
    include_str!("migrations/0023_store_items.sql"),
    include_str!("migrations/0024_queued_turns.sql"),
    include_str!("migrations/0025_assistants.sql"),
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

/// The SQLite driver: the writer thread's group commit for writes, one
/// reader connection on the blocking pool for reads.
pub struct Sqlite {
    label: String,
    writer: Writer,
    reader: Arc<Mutex<Connection>>,
    wake: Wakeups,
    /// The queue file as opened: a file deleted or replaced under the
    /// running daemon is noticed by [`Driver::ping`] (SQLite would go on
    /// writing to the deleted file, and every job would be lost at restart).
    file: FileIdentity,
    /// Why the file is no longer the one opened, once a ping found out:
    /// from then on every write is refused with it rather than written
    /// where the next start will not find it.
    lost: Arc<std::sync::OnceLock<String>>,
}

/// Which file a path named when the queue was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileIdentity {
    path: std::path::PathBuf,
    device: u64,
    inode: u64,
}

impl FileIdentity {
    fn of(path: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path)?;
        Ok(Self {
            path: path.to_path_buf(),
            device: meta.dev(),
            inode: meta.ino(),
        })
    }

    /// Whether the path still names the opened file (`Lost` when not), and
    /// the filesystem holding it still takes data: a small file written and
    /// synced beside the queue (a full disk fails here before the queue's
    /// next write would), then removed.
    fn check(&self) -> Result<(), Check> {
        match Self::of(&self.path) {
            Ok(now) if now == *self => {}
            Ok(_) => {
                return Err(Check::Lost(
                    "the queue file was replaced while the daemon ran; writes are refused until the daemon restarts on the file it should use"
                        .into(),
                ));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Check::Lost(
                    "the queue file was deleted while the daemon ran; writes are refused (they would be lost at the next start): stop the daemon and restore the file from a backup, or start it with --new-queue"
                        .into(),
                ));
            }
            Err(e) => return Err(Check::Failed(format!("cannot stat the queue file: {e}"))),
        }
        let mut probe = self.path.clone().into_os_string();
        probe.push(".probe");
        let probe = std::path::PathBuf::from(probe);
        let written = (|| {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&probe)?;
            // One page: what the next WAL frame needs.
            file.write_all(&[0u8; 4096])?;
            file.sync_data()
        })();
        let _ = std::fs::remove_file(&probe);
        written.map_err(|e| {
            Check::Failed(format!(
                "the queue's filesystem does not take writes ({e}); free disk space or fix the filesystem"
            ))
        })
    }
}

/// Why a [`FileIdentity::check`] failed.
enum Check {
    /// The path no longer names the opened file (for good).
    Lost(String),
    /// Something that may pass again (a full disk).
    Failed(String),
}

/// The embedded queue.
pub type SqliteQueue = Queue<Sqlite>;

fn store_err(path: &Path) -> impl Fn(rusqlite::Error) -> QueueError + '_ {
    move |e| QueueError::Store {
        path: path.display().to_string(),
        detail: e.to_string(),
    }
}

impl Queue<Sqlite> {
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
                let write = Sqlite::open_blocking(&path, durability)?;
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
        let file = FileIdentity::of(&path).map_err(|e| QueueError::Store {
            path: path.display().to_string(),
            detail: format!("cannot stat the queue file just opened: {e}"),
        })?;
        let wake = Wakeups::new();
        let driver = Sqlite {
            file,
            lost: Arc::default(),
            writer: Writer::start(write, path.clone(), wake.clone())?,
            reader: Arc::new(Mutex::new(read)),
            label: path.display().to_string(),
            wake,
        };
        Ok(Queue::new(driver, retry))
    }
}

impl Sqlite {
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
}

impl Sqlite {
    /// Refuses every write once the file is known to be lost (see `lost`).
    fn check_not_lost(&self) -> Result<(), QueueError> {
        match self.lost.get() {
            Some(lost) => Err(QueueError::Store {
                path: self.label.clone(),
                detail: lost.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Runs `op` in the writer thread's next group commit.
    async fn commit<O: Operation>(
        &self,
        when_full: writer::WhenFull,
        op: O,
    ) -> Result<O::Output, QueueError> {
        self.check_not_lost()?;
        self.writer
            .write(when_full, move |tx| block_on(op.run(tx)))
            .await
    }
}

impl Driver for Sqlite {
    async fn write<O: Write>(&self, op: O) -> Result<O::Output, QueueError> {
        let when_full = if O::REFUSED_WHEN_BUSY {
            writer::WhenFull::Refuse
        } else {
            writer::WhenFull::Wait
        };
        self.commit(when_full, op).await
    }

    /// One write like any other: SQLite's single writer runs the finish
    /// and the lease in one savepoint, both or neither.
    async fn finish_and_lease(
        &self,
        op: FinishAndLease,
    ) -> Result<(Finished, Vec<Lease>), QueueError> {
        self.commit(writer::WhenFull::Wait, op).await
    }

    /// Runs a read with the reader connection on the blocking pool (SQLite
    /// answers at once: the lifecycle's futures never wait).
    async fn read<O: Read>(&self, op: O) -> Result<O::Output, QueueError> {
        let conn = self.reader.clone();
        let label = self.label.clone();
        tokio::task::spawn_blocking(move || {
            let mut guard = conn.lock().unwrap_or_else(|p| p.into_inner());
            block_on(op.run(&mut SqliteTx::new(&mut guard))).map_err(|e| e.into_error(&label))
        })
        .await
        .map_err(|e| QueueError::Store {
            path: self.label.clone(),
            detail: format!("the read task failed: {e}"),
        })?
    }

    /// The file is still the one opened, its filesystem takes writes, and
    /// a read answers.
    async fn ping(&self) -> Result<(), QueueError> {
        self.check_not_lost()?;
        let file = self.file.clone();
        let checked = tokio::task::spawn_blocking(move || file.check())
            .await
            .unwrap_or_else(|e| Err(Check::Failed(format!("the probe task failed: {e}"))));
        let detail = match checked {
            Ok(()) => None,
            Err(Check::Lost(detail)) => Some(self.lost.get_or_init(|| detail).clone()),
            Err(Check::Failed(detail)) => Some(detail),
        };
        if let Some(detail) = detail {
            return Err(QueueError::Store {
                path: self.label.clone(),
                detail,
            });
        }
        let probe = op::LastSeq {
            id: JobId::from(""),
        };
        self.read(probe).await.map(|_| ())
    }

    fn label(&self) -> &str {
        &self.label
    }

    fn wakeups(&self) -> &Wakeups {
        &self.wake
    }

    fn write_counts(&self) -> WriteCounts {
        self.writer.stats.counts()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_deleted_queue_file_fails_the_ping_saying_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("queue.db");
        let queue = SqliteQueue::open(&path, RetryPolicy::default())
            .await
            .unwrap();
        queue.driver.ping().await.unwrap();
        assert!(!dir.path().join("queue.db.probe").exists());
        std::fs::remove_file(&path).unwrap();
        let err = queue.driver.ping().await.unwrap_err();
        assert!(err.is_unavailable());
        let message = err.to_string();
        assert!(message.contains("deleted"), "{message}");
        assert!(message.contains("queue.db"), "{message}");
        // From then on writes are refused, not written where no start finds them.
        let job = NewJob {
            bundle: "b".into(),
            ..NewJob::default()
        };
        let refused = queue.submit(job).await.unwrap_err();
        assert!(refused.to_string().contains("deleted"), "{refused}");
    }

    #[tokio::test]
    async fn a_replaced_queue_file_fails_the_ping() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("queue.db");
        let queue = SqliteQueue::open(&path, RetryPolicy::default())
            .await
            .unwrap();
        std::fs::rename(&path, dir.path().join("moved.db")).unwrap();
        std::fs::write(&path, b"").unwrap();
        let message = queue.driver.ping().await.unwrap_err().to_string();
        assert!(message.contains("replaced"), "{message}");
    }
}
