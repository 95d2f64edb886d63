//! The embedded queue: one SQLite file (WAL). Writes go through one writer
//! thread that group-commits them (see `writer`), with `synchronous=FULL` by
//! default so an acknowledged write survives power loss; reads use their own
//! connection on the blocking pool (WAL readers never wait for the writer).

mod dialect;
mod writer;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::executor::block_on;
use rusqlite::Connection;

use super::driver::Driver;
use super::op::{Done, Op};
use super::tx::Wakeups;
use super::*;
use dialect::SqliteTx;
use writer::Writer;

/// Ordered schema migrations; the store records how many ran.
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0001_jobs_and_events.sql"),
    include_str!("migrations/0002_digest_journal_leases.sql"),
    include_str!("migrations/0003_messages_conversations.sql"),
    include_str!("migrations/0004_crash_resumes.sql"),
    include_str!("migrations/0005_budgets.sql"),
    include_str!("migrations/0006_nested_spend.sql"),
    include_str!("migrations/0007_owners.sql"),
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
        let wake = Wakeups::new();
        let driver = Sqlite {
            writer: Writer::start(write, path.clone(), wake.clone())?,
            reader: Arc::new(Mutex::new(read)),
            label: path.display().to_string(),
            wake,
        };
        Ok(Queue { driver, retry })
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

#[async_trait]
impl Driver for Sqlite {
    async fn write(&self, op: Op) -> Result<Done, QueueError> {
        self.writer.write(move |tx| block_on(op.run(tx))).await
    }

    /// Runs a read with the reader connection on the blocking pool (SQLite
    /// answers at once: the lifecycle's futures never wait).
    async fn read(&self, op: Op) -> Result<Done, QueueError> {
        let conn = self.reader.clone();
        let label = self.label.clone();
        tokio::task::spawn_blocking(move || {
            let guard = conn.lock().unwrap_or_else(|p| p.into_inner());
            block_on(op.run(&mut SqliteTx::new(&guard))).map_err(|e| e.into_error(&label))
        })
        .await
        .map_err(|e| QueueError::Store {
            path: self.label.clone(),
            detail: format!("the read task failed: {e}"),
        })?
    }

    async fn ping(&self) -> Result<(), QueueError> {
        self.read(Op::LastSeq(JobId::from(""))).await.map(|_| ())
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
