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
//!
//! A group holds the locks of all its writes until it commits, and other
//! daemons' groups lock the same jobs, so the writes run sorted by where
//! they wait for locks (`op::LockOrder`: keys, then job ids, then what
//! takes only unlocked rows): every daemon takes locks in one order, and no
//! two groups wait for each other in a cycle. A write the database gives up
//! on all the same (a deadlock or serialization failure) runs again in the
//! next group instead of failing its caller.

use std::sync::Arc;

use deadpool_postgres::{Pool, Transaction};
use tokio::sync::{mpsc, oneshot};

use super::dialect::PgTx;
use super::listen::{self, Sinks};
use super::{PostgresOptions, describe, pool_error};
#[cfg(doc)]
use crate::queue::op::LockOrder;
use crate::queue::op::{Done, Op};
use crate::queue::tx::{Change, Fail, Res};
use crate::queue::{Finished, JobId, QueueError, WriteStats};

/// Writes one transaction carries at most. Each savepoint that writes is a
/// subtransaction; past 64 of them PostgreSQL's snapshots overflow to
/// `pg_subtrans`, which slows every backend down. One savepoint each, and
/// one more for the leases of finish-and-lease writes (see `run_group`).
const MAX_BATCH: usize = 63;

/// Writes waiting for the writer at most; past it a submit is refused
/// (`QueueError::Busy`) and other writes wait to queue.
const BACKLOG: usize = 1024;

type Answer = Result<Done, QueueError>;

/// A write waiting for the writer task.
struct Pending {
    op: Op,
    reply: oneshot::Sender<Answer>,
    /// Times the database gave it up to break a conflict.
    conflicts: u32,
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
        let pending = Pending {
            op,
            reply,
            conflicts: 0,
        };
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
    loop {
        if batch.is_empty() {
            if receiver.recv_many(&mut batch, MAX_BATCH).await == 0 {
                break;
            }
        } else {
            // Writes the last group gave back run at once; what else
            // waits joins them, without waiting for more.
            while batch.len() < MAX_BATCH {
                match receiver.try_recv() {
                    Ok(pending) => batch.push(pending),
                    Err(_) => break,
                }
            }
        }
        batch = commit_group(&shared, std::mem::take(&mut batch)).await;
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

/// Runs a group of writes in one transaction and commits it; returns the
/// writes that did not run (the database gave one up to break a conflict,
/// and those after it wait for the next group, see [`run_group`]).
async fn commit_group(shared: &Shared, batch: Vec<Pending>) -> Vec<Pending> {
    let mut client = match shared.pool.get().await {
        Ok(client) => client,
        Err(e) => {
            let error = pool_error(&shared.options, e);
            let detail = error.to_string();
            fail_all(batch.into_iter().map(|p| p.reply), || QueueError::Connect {
                url: shared.options.url.clone(),
                detail: detail.clone(),
            });
            return Vec::new();
        }
    };
    let tx = match client.transaction().await {
        Ok(tx) => tx,
        Err(e) => {
            let detail = format!("no transaction could be opened: {}", describe(&e));
            fail_all(batch.into_iter().map(|p| p.reply), || shared.store(&detail));
            return Vec::new();
        }
    };
    let Some(Group { mut ran, later }) = run_group(shared, &tx, batch).await else {
        // Every write was answered with the reason; rolling back now frees
        // the row locks at once (a broken connection ends it anyway).
        let _ = tx.rollback().await;
        return Vec::new();
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
    later
}

/// Answers every write of a group whose transaction broke.
fn broken(shared: &Shared, detail: &str, ran: Vec<Ran>, unanswered: impl Iterator<Item = Pending>) {
    let replies = ran.into_iter().map(|r| r.reply);
    fail_all(replies.chain(unanswered.map(|p| p.reply)), || {
        shared.store(detail)
    });
}

/// Times the database may give one write up to break a conflict (a
/// deadlock or serialization failure) before its caller hears of it. With
/// every group locking in [`LockOrder`] this is a backstop, not a path.
const MAX_CONFLICTS: u32 = 10;

/// What a group ran, and the writes it gave back to run in the next one.
struct Group {
    ran: Vec<Ran>,
    later: Vec<Pending>,
}

/// A finish-and-lease whose finish ran in its savepoint; its lease runs
/// after every write that waits for locks (see [`run_group`]).
struct HalfDone {
    finished: Finished,
    changes: Vec<(Change, JobId)>,
    pending: Pending,
}

/// Runs each write in its savepoint, in [`LockOrder`]: submits by key,
/// then writes to one job by its id, then what takes only unlocked rows
/// (leases and sweeps, and last the leases of finish-and-lease writes,
/// whose finishes ran with the other writes to one job). So this transaction only
/// ever waits for a lock that comes after every lock it holds, as every
/// other daemon's does, and no two wait for each other in a cycle.
///
/// A refused or failed write is answered at once (its savepoint rolled
/// back). A write the database gave up on to break a conflict all the same
/// (a deadlock: a batch whose keys interleave with another's, or a
/// serialization failure) is rolled back and given back with every write
/// after it, to run in the next group, which starts at once: this group
/// commits what ran, which frees its locks, so the conflict cannot recur
/// between the same two transactions. When the transaction itself breaks (a savepoint cannot
/// be taken or rolled back), every write of the group is answered with why,
/// and there is nothing to commit (`None`).
async fn run_group(
    shared: &Shared,
    tx: &Transaction<'_>,
    mut batch: Vec<Pending>,
) -> Option<Group> {
    batch.sort_by_cached_key(|p| p.op.lock_order());
    let mut ran: Vec<Ran> = Vec::with_capacity(batch.len());
    let mut halves: Vec<HalfDone> = Vec::new();
    let mut later = Vec::new();
    let mut pending = batch.into_iter();
    while let Some(p) = pending.next() {
        if let Err(e) = tx.batch_execute("SAVEPOINT w").await {
            let detail = format!("the group commit's transaction broke: {}", describe(&e));
            let unanswered = std::iter::once(p).chain(halves.into_iter().map(|h| h.pending));
            broken(shared, &detail, ran, unanswered.chain(pending));
            return None;
        }
        let mut pg = PgTx::new(tx);
        let fail = match &p.op {
            Op::FinishAndLease(finish, _) => match finish.run(&mut pg).await {
                Ok(finished) => {
                    halves.push(HalfDone {
                        finished,
                        changes: std::mem::take(&mut pg.changes),
                        pending: p,
                    });
                    continue;
                }
                Err(fail) => fail,
            },
            op => match op.run(&mut pg).await {
                Ok(done) => {
                    ran.push(Ran {
                        done,
                        changes: std::mem::take(&mut pg.changes),
                        reply: p.reply,
                    });
                    continue;
                }
                Err(fail) => fail,
            },
        };
        if let Err(e) = tx.batch_execute("ROLLBACK TO SAVEPOINT w").await {
            let _ = p.reply.send(Err(fail.into_error(&shared.label)));
            let detail = format!(
                "the group commit's transaction broke after a failed write: {}",
                describe(&e)
            );
            let unanswered = halves.into_iter().map(|h| h.pending);
            broken(shared, &detail, ran, unanswered.chain(pending));
            return None;
        }
        match fail {
            Fail::Conflict(detail) if p.conflicts < MAX_CONFLICTS => {
                tracing::warn!(
                    queue = %shared.label,
                    write = p.op.name(),
                    error = %detail,
                    "the database gave a write up to break a lock conflict; it runs again after this group commits"
                );
                later.push(Pending {
                    conflicts: p.conflicts + 1,
                    ..p
                });
                later.extend(pending);
                break;
            }
            fail => {
                let _ = p.reply.send(Err(fail.into_error(&shared.label)));
            }
        }
    }
    if !halves.is_empty() {
        ran.extend(lease_halves(shared, tx, halves).await?);
    }
    Some(Group { ran, later })
}

/// The leases of finish-and-lease writes whose finishes ran, in one
/// savepoint: a lease takes only unlocked rows and never waits. Should it
/// fail all the same, it is rolled back and each write answers its finish
/// with nothing leased (the worker leases again on its own), so an error
/// still records nothing. `None` when the transaction broke (every write
/// answered).
async fn lease_halves(
    shared: &Shared,
    tx: &Transaction<'_>,
    halves: Vec<HalfDone>,
) -> Option<Vec<Ran>> {
    if let Err(e) = tx.batch_execute("SAVEPOINT leases").await {
        let detail = format!("the group commit's transaction broke: {}", describe(&e));
        fail_all(halves.into_iter().map(|h| h.pending.reply), || {
            shared.store(&detail)
        });
        return None;
    }
    let mut pg = PgTx::new(tx);
    let mut leased = Vec::with_capacity(halves.len());
    let mut failed = None;
    for half in &halves {
        let Op::FinishAndLease(_, lease) = &half.pending.op else {
            leased.push((Vec::new(), Vec::new()));
            continue;
        };
        match lease.run(&mut pg).await {
            Ok(leases) => leased.push((leases, std::mem::take(&mut pg.changes))),
            Err(fail) => {
                failed = Some(fail);
                break;
            }
        }
    }
    if let Some(fail) = failed {
        if let Err(e) = tx.batch_execute("ROLLBACK TO SAVEPOINT leases").await {
            let detail = format!(
                "the group commit's transaction broke after a failed lease: {}",
                describe(&e)
            );
            fail_all(halves.into_iter().map(|h| h.pending.reply), || {
                shared.store(&detail)
            });
            return None;
        }
        tracing::warn!(
            queue = %shared.label,
            error = %fail.into_error(&shared.label),
            "the leases of finish-and-lease writes failed; their finishes are recorded with nothing leased"
        );
        leased.clear();
    }
    leased.resize_with(halves.len(), || (Vec::new(), Vec::new()));
    Some(
        halves
            .into_iter()
            .zip(leased)
            .map(|(half, (leases, changes))| {
                let mut all = half.changes;
                all.extend(changes);
                Ran {
                    done: Done::FinishedAndLeased((half.finished, leases)),
                    changes: all,
                    reply: half.pending.reply,
                }
            })
            .collect(),
    )
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
