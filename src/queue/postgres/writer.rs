//! Group commit for PostgreSQL: one writer task per queue handle (per
//! daemon) takes the writes waiting on its channel, up to [`MAX_BATCH`], and
//! runs them in one transaction, each in its own savepoint so a failing
//! write rolls back alone; the whole group's changes go out in one
//! coalesced `NOTIFY`, and one commit (one WAL flush) makes them all
//! durable. A write is answered once its transaction committed (a refused
//! write at once: it left nothing to wait for), and its changes wake the
//! handle's subscribers only then.
//!
//! The group is what arrived while the previous commit was in flight: the
//! writer never waits to fill it, so a lone write costs one transaction as
//! before, and a busy daemon's writes share commits.

use std::sync::Arc;

use deadpool_postgres::{Pool, Transaction};
use tokio::sync::{mpsc, oneshot};

use super::dialect::PgTx;
use super::listen::{self, Sinks};
use super::{PostgresOptions, describe, pool_error};
use crate::queue::op::{Done, Op};
use crate::queue::tx::{Change, Res};
use crate::queue::{JobId, QueueError, WriteStats};

/// Writes one transaction carries at most. Each savepoint that writes is a
/// subtransaction; past 64 of them PostgreSQL's snapshots overflow to
/// `pg_subtrans`, which slows every backend down.
const MAX_BATCH: usize = 64;

/// Writes waiting for the writer at most; past it a submit is refused
/// (`QueueError::Busy`) and other writes wait to queue.
const BACKLOG: usize = 1024;

type Answer = Result<Done, QueueError>;

/// A write waiting for the writer task.
struct Pending {
    op: Op,
    reply: oneshot::Sender<Answer>,
}

/// A write that ran in its savepoint, waiting for its group's commit.
struct Ran {
    done: Done,
    changes: Vec<(Change, JobId)>,
    reply: oneshot::Sender<Answer>,
}

/// What the writer task needs of its handle.
pub(super) struct Shared {
    pub pool: Pool,
    pub options: PostgresOptions,
    pub label: String,
    pub channel: String,
    pub sinks: Sinks,
    pub stats: Arc<WriteStats>,
}

impl Shared {
    fn store(&self, detail: impl std::fmt::Display) -> QueueError {
        QueueError::Store {
            path: self.label.clone(),
            detail: detail.to_string(),
        }
    }
}

/// The handle to the writer task; the task ends when the handle is dropped.
pub(super) struct Writer {
    sender: mpsc::Sender<Pending>,
    label: String,
}

impl Writer {
    /// Starts the writer task (on the current Tokio runtime).
    pub(super) fn start(shared: Shared) -> Self {
        let (sender, receiver) = mpsc::channel(BACKLOG);
        let label = shared.label.clone();
        tokio::spawn(write_loop(receiver, shared));
        Self { sender, label }
    }

    /// Runs `op` in the next group commit; answers once it is durable.
    pub(super) async fn write(&self, op: Op) -> Answer {
        let stopped = || QueueError::Store {
            path: self.label.clone(),
            detail: "the queue's writer task stopped (is the daemon shutting down?)".into(),
        };
        let (reply, answer) = oneshot::channel();
        let pending = Pending { op, reply };
        if pending.op.refused_when_busy() {
            // New work is refused at once when the backlog is full; the
            // writes of running jobs wait for room (they drain it).
            self.sender.try_send(pending).map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => QueueError::Busy {
                    store: self.label.clone(),
                    waiting: BACKLOG,
                },
                mpsc::error::TrySendError::Closed(_) => stopped(),
            })?;
        } else {
            self.sender.send(pending).await.map_err(|_| stopped())?;
        }
        answer.await.map_err(|_| stopped())?
    }
}

async fn write_loop(mut receiver: mpsc::Receiver<Pending>, shared: Shared) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while receiver.recv_many(&mut batch, MAX_BATCH).await > 0 {
        commit_group(&shared, std::mem::take(&mut batch)).await;
    }
}

/// Answers every write of a group that could not run or commit.
fn fail_all(
    replies: impl IntoIterator<Item = oneshot::Sender<Answer>>,
    error: impl Fn() -> QueueError,
) {
    for reply in replies {
        // The caller may have gone away; the outcome is the same.
        let _ = reply.send(Err(error()));
    }
}

/// Runs a group of writes in one transaction and commits it.
async fn commit_group(shared: &Shared, batch: Vec<Pending>) {
    let mut client = match shared.pool.get().await {
        Ok(client) => client,
        Err(e) => {
            let error = pool_error(&shared.options, e);
            let detail = error.to_string();
            return fail_all(batch.into_iter().map(|p| p.reply), || QueueError::Connect {
                url: shared.options.url.clone(),
                detail: detail.clone(),
            });
        }
    };
    let tx = match client.transaction().await {
        Ok(tx) => tx,
        Err(e) => {
            let detail = format!("no transaction could be opened: {}", describe(&e));
            return fail_all(batch.into_iter().map(|p| p.reply), || shared.store(&detail));
        }
    };
    let Some(mut ran) = run_group(shared, &tx, batch).await else {
        // Every write was answered with the reason; rolling back now frees
        // the row locks at once (a broken connection ends it anyway).
        let _ = tx.rollback().await;
        return;
    };
    let changes: Vec<(Change, JobId)> = ran
        .iter_mut()
        .flat_map(|r| std::mem::take(&mut r.changes))
        .collect();
    let committed = match notify_in(shared, &tx, &changes).await {
        Ok(()) => tx.commit().await.map_err(|e| describe(&e)),
        Err(e) => {
            let _ = tx.rollback().await;
            Err(e.into_error(&shared.label).to_string())
        }
    };
    match committed {
        Ok(()) => {
            shared.stats.count(ran.len());
            shared.sinks.wake.publish_all(&changes);
            for r in ran {
                let _ = r.reply.send(Ok(r.done));
            }
        }
        Err(detail) => fail_all(ran.into_iter().map(|r| r.reply), || {
            shared.store(format!("the transaction did not commit: {detail}"))
        }),
    }
}

/// Runs each write in its savepoint. A refused or failed write is answered
/// at once (its savepoint rolled back); when the transaction itself breaks
/// (a savepoint cannot be taken or rolled back), every write of the group is
/// answered with why, and there is nothing to commit (`None`).
async fn run_group(shared: &Shared, tx: &Transaction<'_>, batch: Vec<Pending>) -> Option<Vec<Ran>> {
    let mut ran: Vec<Ran> = Vec::with_capacity(batch.len());
    let mut pending = batch.into_iter();
    while let Some(Pending { op, reply }) = pending.next() {
        if let Err(e) = tx.batch_execute("SAVEPOINT w").await {
            let detail = format!("the group commit's transaction broke: {}", describe(&e));
            let replies = ran.into_iter().map(|r| r.reply);
            let rest = pending.map(|p| p.reply);
            fail_all(std::iter::once(reply).chain(replies).chain(rest), || {
                shared.store(&detail)
            });
            return None;
        }
        let mut pg = PgTx::new(tx);
        match op.run(&mut pg).await {
            Ok(done) => ran.push(Ran {
                done,
                changes: std::mem::take(&mut pg.changes),
                reply,
            }),
            Err(fail) => {
                let rolled_back = tx.batch_execute("ROLLBACK TO SAVEPOINT w").await;
                let _ = reply.send(Err(fail.into_error(&shared.label)));
                if let Err(e) = rolled_back {
                    let detail = format!(
                        "the group commit's transaction broke after a failed write: {}",
                        describe(&e)
                    );
                    let replies = ran.into_iter().map(|r| r.reply);
                    let rest = pending.map(|p| p.reply);
                    fail_all(replies.chain(rest), || shared.store(&detail));
                    return None;
                }
            }
        }
    }
    Some(ran)
}

/// Queues the notifications of a group's changes, coalesced; PostgreSQL
/// delivers them at commit.
async fn notify_in(shared: &Shared, tx: &Transaction<'_>, changes: &[(Change, JobId)]) -> Res<()> {
    if changes.is_empty() {
        return Ok(());
    }
    let statement = tx.prepare_cached("SELECT pg_notify($1, $2)").await?;
    for payload in listen::payloads(&shared.sinks.instance, changes) {
        tx.execute(&statement, &[&shared.channel, &payload]).await?;
    }
    Ok(())
}
