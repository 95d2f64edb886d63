//! Group commit: one thread owns the write connection and commits every
//! write that arrived meanwhile in one transaction (one fsync), each write in
//! its own savepoint so a failing one rolls back alone. A caller's write is
//! answered only once its transaction is durable, and its changes wake
//! the handle's subscribers and workers only then.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc;

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::dialect::SqliteTx;
use crate::queue::tx::{Change, Fail, Wakeups};
use crate::queue::{JobId, QueueError, WriteStats};

/// Writes taken into one transaction at most.
const MAX_BATCH: usize = 256;

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
    fn settle(self: Box<Self>, path: &str, commit: Result<(), &str>, wake: &Wakeups);
}

struct Write<T, F> {
    work: F,
    reply: Reply<T>,
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
        let Write { work, reply } = *self;
        let mut changes = Vec::new();
        let result = match conn.savepoint() {
            Err(e) => Err(store_error(path, e)),
            // Dropping the savepoint without commit rolls it back.
            Ok(savepoint) => {
                let mut tx = SqliteTx::new(&savepoint);
                let done = work(&mut tx);
                changes = std::mem::take(&mut tx.changes);
                match done {
                    Ok(value) => savepoint
                        .commit()
                        .map(|()| value)
                        .map_err(|e| store_error(path, e)),
                    Err(e) => Err(e.into_error(path)),
                }
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
    fn settle(self: Box<Self>, path: &str, commit: Result<(), &str>, wake: &Wakeups) {
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
}

impl Writer {
    /// Starts the writer thread owning `conn`; committed changes wake `wake`.
    pub(super) fn start(
        conn: Connection,
        path: PathBuf,
        wake: Wakeups,
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
        })
    }

    /// Runs `work` in the next group commit; answers once it is durable.
    pub(super) async fn write<T, F>(&self, work: F) -> Result<T, QueueError>
    where
        T: Send + 'static,
        F: FnOnce(&mut SqliteTx<'_>) -> Result<T, Fail> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let stopped = || {
            store_error(
                &self.path.display().to_string(),
                "the writer thread stopped",
            )
        };
        self.sender
            .send(Box::new(Write { work, reply }))
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
        let committed = conn.execute_batch("COMMIT").map_err(|e| e.to_string());
        stats.count(ran.len());
        if committed.is_err() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        for settle in ran {
            let commit = committed.as_ref().map(|_| ()).map_err(String::as_str);
            settle.settle(path, commit, wake);
        }
    }
}
