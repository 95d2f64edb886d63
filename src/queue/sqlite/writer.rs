//! Group commit: one thread owns the write connection and commits every
//! write that arrived meanwhile in one transaction (one fsync), each write in
//! its own savepoint so a failing one rolls back alone. A caller's write is
//! answered only once its transaction is durable, and its changes wake
//! the handle's subscribers and workers only then.
//!
//! The backlog is bounded: at most [`BACKLOG`] writes wait for the thread.
//! Past that, a write that may be refused (a submit) is answered
//! [`QueueError::Busy`] at once and others wait for room, so a slow or
//! stuck disk turns into 503s for new work instead of memory that grows
//! without bound.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc;

use rusqlite::Connection;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use super::dialect::SqliteTx;
use crate::queue::tx::{Change, Fail, Wakeups};
use crate::queue::{JobId, QueueError, WriteStats};

/// Writes taken into one transaction at most.
const MAX_BATCH: usize = 256;

/// Writes waiting for the writer thread at most (four full batches).
pub(super) const BACKLOG: usize = 4 * MAX_BATCH;

/// What a write does when the backlog is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WhenFull {
    /// Answer [`QueueError::Busy`] at once.
    Refuse,
    /// Wait (asynchronously) for room.
    Wait,
}

type Reply<T> = oneshot::Sender<Result<T, QueueError>>;

/// A write waiting for the writer thread.
trait Pending: Send {
    /// Runs the write inside the open transaction.
    fn run(self: Box<Self>, conn: &mut Connection, path: &str) -> Box<dyn Settle>;
    /// Answers without running (no transaction could be opened).
    fn abort(self: Box<Self>, path: &str, detail: &str);
}

/// A write that ran, waiting for its transaction's commit.
trait Settle: Send {
    fn settle(self: Box<Self>, path: &str, commit: Result<(), &rusqlite::Error>, wake: &Wakeups);
}

struct Write<T, F> {
    work: F,
    reply: Reply<T>,
    /// Its place in the backlog, given back when the thread takes it.
    slot: OwnedSemaphorePermit,
}

struct Ran<T> {
    result: Result<T, QueueError>,
    changes: Vec<(Change, JobId)>,
    reply: Reply<T>,
}

fn store_error(path: &str, detail: impl ToString) -> QueueError {
    QueueError::Store {
        path: path.to_string(),
        detail: detail.to_string(),
    }
}

impl<T, F> Pending for Write<T, F>
where
    T: Send + 'static,
    F: FnOnce(&mut SqliteTx<'_>) -> Result<T, Fail> + Send + 'static,
{
    fn run(self: Box<Self>, conn: &mut Connection, path: &str) -> Box<dyn Settle> {
        let Write { work, reply, slot } = *self;
        // Taken by the thread: it no longer waits.
        drop(slot);
        let mut changes = Vec::new();
        // The savepoint by its statements (what rusqlite's `Savepoint`
        // runs), so the write holds the connection itself, as a `Send`
        // transaction must (see `SqliteTx`).
        let result = match conn.execute_batch("SAVEPOINT w") {
            Err(e) => Err(store_error(path, e)),
            Ok(()) => {
                let mut tx = SqliteTx::new(conn);
                let done = work(&mut tx);
                changes = std::mem::take(&mut tx.changes);
                let kept = match done {
                    Ok(value) => conn
                        .execute_batch("RELEASE w")
                        .map(|()| value)
                        .map_err(|e| store_error(path, e)),
                    Err(e) => Err(e.into_error(path)),
                };
                if kept.is_err() {
                    // Rolls the write back alone; the group goes on.
                    let _ = conn.execute_batch("ROLLBACK TO w; RELEASE w");
                }
                kept
            }
        };
        if result.is_err() {
            changes.clear();
        }
        Box::new(Ran {
            result,
            changes,
            reply,
        })
    }

    fn abort(self: Box<Self>, path: &str, detail: &str) {
        let _ = self.reply.send(Err(store_error(
            path,
            format!("no transaction could be opened: {detail}"),
        )));
    }
}

impl<T: Send + 'static> Settle for Ran<T> {
    fn settle(self: Box<Self>, path: &str, commit: Result<(), &rusqlite::Error>, wake: &Wakeups) {
        let answer = match commit {
            Ok(()) => {
                wake.publish_all(&self.changes);
                self.result
            }
            Err(detail) => Err(store_error(
                path,
                format!("the transaction did not commit: {detail}"),
            )),
        };
        // The caller may have gone away (its task was cancelled); the write
        // is done either way.
        let _ = self.reply.send(answer);
    }
}

/// The handle to the writer thread.
pub(super) struct Writer {
    sender: mpsc::Sender<Box<dyn Pending>>,
    path: PathBuf,
    pub(super) stats: Arc<WriteStats>,
    /// Room in the backlog: the channel itself is unbounded so the thread
    /// never waits on it, and a sender waits (or is refused) here instead.
    slots: Arc<Semaphore>,
    backlog: usize,
}

impl Writer {
    /// Starts the writer thread owning `conn`; committed changes wake `wake`.
    pub(super) fn start(
        conn: Connection,
        path: PathBuf,
        wake: Wakeups,
    ) -> Result<Self, QueueError> {
        Self::start_with(conn, path, wake, BACKLOG)
    }

    /// [`Writer::start`] with a backlog of `backlog` writes.
    pub(super) fn start_with(
        conn: Connection,
        path: PathBuf,
        wake: Wakeups,
        backlog: usize,
    ) -> Result<Self, QueueError> {
        let (sender, receiver) = mpsc::channel::<Box<dyn Pending>>();
        let label = path.display().to_string();
        let stats = Arc::new(WriteStats::default());
        let counted = stats.clone();
        std::thread::Builder::new()
            .name("sa-queue-writer".into())
            .spawn(move || write_loop(conn, receiver, &label, &wake, &counted))
            .map_err(|e| store_error(&path.display().to_string(), e))?;
        Ok(Self {
            sender,
            path,
            stats,
            slots: Arc::new(Semaphore::new(backlog)),
            backlog,
        })
    }

    /// Runs `work` in the next group commit; answers once it is durable.
    /// With a full backlog, `when_full` decides between waiting for room
    /// and [`QueueError::Busy`].
    pub(super) async fn write<T, F>(&self, when_full: WhenFull, work: F) -> Result<T, QueueError>
    where
        T: Send + 'static,
        F: FnOnce(&mut SqliteTx<'_>) -> Result<T, Fail> + Send + 'static,
    {
        let stopped = || {
            store_error(
                &self.path.display().to_string(),
                "the writer thread stopped",
            )
        };
        let slot = match when_full {
            WhenFull::Wait => self.slots.clone().acquire_owned().await.ok(),
            WhenFull::Refuse => match self.slots.clone().try_acquire_owned() {
                Ok(slot) => Some(slot),
                Err(tokio::sync::TryAcquireError::NoPermits) => {
                    return Err(QueueError::Busy {
                        store: self.path.display().to_string(),
                        waiting: self.backlog,
                    });
                }
                Err(tokio::sync::TryAcquireError::Closed) => None,
            },
        };
        let slot = slot.ok_or_else(stopped)?;
        let (reply, answer) = oneshot::channel();
        self.sender
            .send(Box::new(Write { work, reply, slot }))
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

fn write_loop(
    mut conn: Connection,
    receiver: mpsc::Receiver<Box<dyn Pending>>,
    path: &str,
    wake: &Wakeups,
    stats: &WriteStats,
) {
    while let Ok(first) = receiver.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match receiver.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
            let detail = e.to_string();
            for pending in batch {
                pending.abort(path, &detail);
            }
            continue;
        }
        let ran: Vec<Box<dyn Settle>> = batch
            .into_iter()
            .map(|pending| pending.run(&mut conn, path))
            .collect();
        let committed = conn.execute_batch("COMMIT");
        stats.count(ran.len());
        if committed.is_err() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        for settle in ran {
            let commit = committed.as_ref().map(|_| ());
            settle.settle(path, commit, wake);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer over a scratch file whose thread is held inside a write
    /// until the returned sender is dropped.
    async fn held_writer(backlog: usize) -> (tempfile::TempDir, Arc<Writer>, mpsc::Sender<()>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("queue.db");
        let writer = Writer::start_with(
            Connection::open(&path).unwrap(),
            path,
            Wakeups::new(),
            backlog,
        )
        .unwrap();
        let writer = Arc::new(writer);
        let (started, is_started) = oneshot::channel();
        let (release, held) = mpsc::channel::<()>();
        let holder = writer.clone();
        tokio::spawn(async move {
            let _ = holder
                .write(WhenFull::Wait, move |_tx| {
                    let _ = started.send(());
                    let _ = held.recv();
                    Ok(())
                })
                .await;
        });
        is_started.await.unwrap();
        (dir, writer, release)
    }

    #[tokio::test]
    async fn a_full_backlog_refuses_a_submit_at_once_and_lets_others_wait() {
        let (_dir, writer, release) = held_writer(2).await;
        let mut waiting = Vec::new();
        for n in 0..2u32 {
            let writer = writer.clone();
            waiting.push(tokio::spawn(async move {
                writer.write(WhenFull::Refuse, move |_tx| Ok(n)).await
            }));
        }
        while writer.slots.available_permits() > 0 {
            tokio::task::yield_now().await;
        }
        let refused = writer.write(WhenFull::Refuse, |_tx| Ok(9)).await;
        match refused {
            Err(QueueError::Busy { waiting, ref store }) => {
                assert_eq!(waiting, 2);
                assert!(store.ends_with("queue.db"), "{store}");
            }
            other => panic!("expected Busy, got {other:?}"),
        }
        let patient = {
            let writer = writer.clone();
            tokio::spawn(async move { writer.write(WhenFull::Wait, |_tx| Ok(7)).await })
        };
        drop(release);
        for (n, task) in waiting.into_iter().enumerate() {
            assert_eq!(task.await.unwrap().unwrap(), n as u32);
        }
        assert_eq!(patient.await.unwrap().unwrap(), 7);
        // Room again: a submit is taken.
        assert_eq!(
            writer.write(WhenFull::Refuse, |_tx| Ok(1)).await.unwrap(),
            1
        );
    }
}
