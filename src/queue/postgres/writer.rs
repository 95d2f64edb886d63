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
//! they wait for locks (`op::LockOrder`: conversations, keys, then job
//! ids, then what takes only unlocked rows): every daemon takes locks in one order, and no
//! two groups wait for each other in a cycle. A write the database gives up
//! on all the same (a deadlock or serialization failure) runs again in the
//! next group instead of failing its caller.
//!
//! The channel carries operations of every type: each write is boxed as a
//! [`Pending`] that runs its operation in the savepoint and keeps the typed
//! answer for its own reply until the group commits, so the task never
//! needs to know what an operation answers.

use std::sync::Arc;

use deadpool_postgres::{Pool, Transaction};
use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};

use super::dialect::PgTx;
use super::listen::{self, Sinks};
use super::{PostgresOptions, describe, pool_error};
use crate::queue::op::{FinishAndLease, LeaseJobs, LockOrder, Operation, Write};
use crate::queue::tx::{Change, Fail, Res};
use crate::queue::{Finished, JobId, Lease, QueueError, WriteStats};

/// Writes one transaction carries at most. Each savepoint that writes is a
/// subtransaction; past 64 of them PostgreSQL's snapshots overflow to
/// `pg_subtrans`, which slows every backend down. One savepoint each, and
/// one more for the leases of finish-and-lease writes (see `run_group`).
const MAX_BATCH: usize = 63;

/// Writes waiting for the writer at most; past it a submit is refused
/// (`QueueError::Busy`) and other writes wait to queue.
const BACKLOG: usize = 1024;

type Reply<T> = oneshot::Sender<Result<T, QueueError>>;

/// The changes a write made, announced once its group commits.
type Changes = Vec<(Change, JobId)>;

/// A write running in its savepoint: what ran, or the write given back
/// with why it did not.
type Running<'a> = BoxFuture<'a, Result<Ran, (Box<dyn Pending>, Fail)>>;

/// A write waiting for the writer task, its operation's type erased here,
/// at the channel, so one task carries every operation: each keeps its
/// typed answer and the reply it goes to ([`Queued`], [`Answering`]).
trait Pending: Send {
    fn name(&self) -> &'static str;
    fn lock_order(&self) -> LockOrder;
    /// Runs the write (a finish-and-lease: its finish) in the open
    /// savepoint: what ran, holding its answer until the group commits; or
    /// the write given back with why it did not (a conflict runs it again).
    fn run<'a>(self: Box<Self>, tx: &'a Transaction<'a>) -> Running<'a>;
    /// Answers without running.
    fn refuse(self: Box<Self>, error: QueueError);
}

/// A write that ran in its savepoint.
struct Ran {
    changes: Changes,
    statements: u64,
    next: Next,
}

/// What a write that ran waits for.
enum Next {
    /// Its group's commit.
    Commit(Box<dyn Answer>),
    /// A finish-and-lease whose finish ran: its lease, after every write
    /// that waits for locks (see [`run_group`]).
    Lease(Box<Leasing>),
}

/// A write's answer, held until its group commits.
trait Answer: Send {
    /// Sends the answer once committed, or why the group did not commit.
    fn send(self: Box<Self>, committed: Result<(), QueueError>);
}

/// A write of operation `O` and where its answer goes.
struct Queued<O: Operation> {
    op: O,
    reply: Reply<O::Output>,
}

/// An answer of type `T` waiting for the commit.
struct Answering<T> {
    answer: T,
    reply: Reply<T>,
}

impl<T: Send + 'static> Answer for Answering<T> {
    fn send(self: Box<Self>, committed: Result<(), QueueError>) {
        // The caller may have gone away (its task was cancelled); the write
        // is done either way.
        let Answering { answer, reply } = *self;
        let _ = reply.send(committed.map(|()| answer));
    }
}

impl<O: Write> Pending for Queued<O> {
    fn name(&self) -> &'static str {
        O::NAME
    }

    fn lock_order(&self) -> LockOrder {
        self.op.lock_order()
    }

    fn run<'a>(self: Box<Self>, tx: &'a Transaction<'a>) -> Running<'a> {
        Box::pin(async move {
            let mut pg = PgTx::new(tx);
            let ran = self.op.run(&mut pg).await;
            match ran {
                Ok(answer) => Ok(Ran {
                    statements: pg.statements(),
                    changes: pg.changes,
                    next: Next::Commit(Box::new(Answering {
                        answer,
                        reply: self.reply,
                    })),
                }),
                Err(fail) => Err((self as Box<dyn Pending>, fail)),
            }
        })
    }

    fn refuse(self: Box<Self>, error: QueueError) {
        let _ = self.reply.send(Err(error));
    }
}

/// A finish-and-lease and where its answer goes.
struct QueuedFinish {
    op: FinishAndLease,
    reply: Reply<(Finished, Vec<Lease>)>,
}

impl Pending for QueuedFinish {
    fn name(&self) -> &'static str {
        FinishAndLease::NAME
    }

    /// Its finish's: the job's row.
    fn lock_order(&self) -> LockOrder {
        self.op.finish.lock_order()
    }

    fn run<'a>(self: Box<Self>, tx: &'a Transaction<'a>) -> Running<'a> {
        Box::pin(async move {
            let mut pg = PgTx::new(tx);
            let ran = self.op.finish.run(&mut pg).await;
            match ran {
                Ok(finished) => Ok(Ran {
                    statements: pg.statements(),
                    changes: pg.changes,
                    next: Next::Lease(Box::new(Leasing {
                        lease: self.op.lease,
                        finished,
                        reply: self.reply,
                    })),
                }),
                Err(fail) => Err((self as Box<dyn Pending>, fail)),
            }
        })
    }

    fn refuse(self: Box<Self>, error: QueueError) {
        let _ = self.reply.send(Err(error));
    }
}

/// A finish-and-lease whose finish ran, waiting for its lease.
struct Leasing {
    lease: LeaseJobs,
    finished: Finished,
    reply: Reply<(Finished, Vec<Lease>)>,
}

impl Leasing {
    /// Its answer: the finish, and what was leased (nothing when the
    /// group's leases failed).
    fn answer(self, leases: Vec<Lease>) -> Box<dyn Answer> {
        Box::new(Answering {
            answer: (self.finished, leases),
            reply: self.reply,
        })
    }

    fn refuse(self, error: QueueError) {
        let _ = self.reply.send(Err(error));
    }
}

/// A write waiting for the writer task, and how often the database gave it
/// up to break a conflict.
struct Waiting {
    write: Box<dyn Pending>,
    conflicts: u32,
}

/// A write that ran and the changes it made, waiting for its group's
/// commit.
struct Done {
    answer: Box<dyn Answer>,
    changes: Changes,
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
    sender: mpsc::Sender<Waiting>,
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
    pub(super) async fn write<O: Write>(&self, op: O) -> Result<O::Output, QueueError> {
        let (reply, answer) = oneshot::channel();
        let write = Box::new(Queued { op, reply });
        self.queue(write, answer, O::REFUSED_WHEN_BUSY).await
    }

    /// Runs a finish in the next group commit, in its job's lock order,
    /// and its lease after the group's other writes; answers once durable.
    pub(super) async fn finish_and_lease(
        &self,
        op: FinishAndLease,
    ) -> Result<(Finished, Vec<Lease>), QueueError> {
        let (reply, answer) = oneshot::channel();
        let write = Box::new(QueuedFinish { op, reply });
        self.queue(write, answer, false).await
    }

    /// Queues `write` for the writer task and waits for its `answer`.
    async fn queue<T>(
        &self,
        write: Box<dyn Pending>,
        answer: oneshot::Receiver<Result<T, QueueError>>,
        refused_when_busy: bool,
    ) -> Result<T, QueueError> {
        let stopped = || QueueError::Store {
            path: self.label.clone(),
            detail: "the queue's writer task stopped (is the daemon shutting down?)".into(),
        };
        let waiting = Waiting {
            write,
            conflicts: 0,
        };
        if refused_when_busy {
            // New work is refused at once when the backlog is full; the
            // writes of running jobs wait for room (they drain it).
            self.sender.try_send(waiting).map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => QueueError::Busy {
                    store: self.label.clone(),
                    waiting: BACKLOG,
                },
                mpsc::error::TrySendError::Closed(_) => stopped(),
            })?;
        } else {
            self.sender.send(waiting).await.map_err(|_| stopped())?;
        }
        answer.await.map_err(|_| stopped())?
    }
}

async fn write_loop(mut receiver: mpsc::Receiver<Waiting>, shared: Shared) {
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
                    Ok(waiting) => batch.push(waiting),
                    Err(_) => break,
                }
            }
        }
        batch = commit_group(&shared, std::mem::take(&mut batch)).await;
    }
}

/// Everything of a group still to be answered when it cannot run or
/// commit: writes not run, writes that ran, finishes waiting for leases.
#[derive(Default)]
struct Unanswered {
    waiting: Vec<Waiting>,
    done: Vec<Done>,
    leasing: Vec<Leasing>,
}

impl Unanswered {
    /// Answers them all with `error`.
    fn fail(self, error: impl Fn() -> QueueError) {
        for waiting in self.waiting {
            waiting.write.refuse(error());
        }
        for done in self.done {
            done.answer.send(Err(error()));
        }
        for leasing in self.leasing {
            leasing.refuse(error());
        }
    }
}

/// Runs a group of writes in one transaction and commits it; returns the
/// writes that did not run (the database gave one up to break a conflict,
/// and those after it wait for the next group, see [`run_group`]).
async fn commit_group(shared: &Shared, batch: Vec<Waiting>) -> Vec<Waiting> {
    let mut client = match shared.pool.get().await {
        Ok(client) => client,
        Err(e) => {
            let error = pool_error(&shared.options, e);
            let detail = error.to_string();
            let unanswered = Unanswered {
                waiting: batch,
                ..Default::default()
            };
            unanswered.fail(|| QueueError::Connect {
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
            let unanswered = Unanswered {
                waiting: batch,
                ..Default::default()
            };
            unanswered.fail(|| shared.store(&detail));
            return Vec::new();
        }
    };
    let Some(Group { mut done, later }) = run_group(shared, &tx, batch).await else {
        // Every write was answered with the reason; rolling back now frees
        // the row locks at once (a broken connection ends it anyway).
        let _ = tx.rollback().await;
        return Vec::new();
    };
    let changes: Changes = done
        .iter_mut()
        .flat_map(|d| std::mem::take(&mut d.changes))
        .collect();
    // BEGIN, one NOTIFY a payload, COMMIT.
    let notices = listen::payloads(&shared.sinks.instance, &changes).len() as u64;
    shared.stats.sent(2 + notices);
    let committed = match notify_in(shared, &tx, &changes).await {
        Ok(()) => tx.commit().await.map_err(|e| describe(&e)),
        Err(e) => {
            let _ = tx.rollback().await;
            Err(e.into_error(&shared.label).to_string())
        }
    };
    match committed {
        Ok(()) => {
            shared.stats.count(done.len());
            shared.sinks.wake.publish_all(&changes);
            for d in done {
                d.answer.send(Ok(()));
            }
        }
        Err(detail) => {
            let unanswered = Unanswered {
                done,
                ..Default::default()
            };
            unanswered.fail(|| shared.store(format!("the transaction did not commit: {detail}")));
        }
    }
    later
}

/// Times the database may give one write up to break a conflict (a
/// deadlock or serialization failure) before its caller hears of it. With
/// every group locking in [`LockOrder`] this is a backstop, not a path.
const MAX_CONFLICTS: u32 = 10;

/// What a group ran, and the writes it gave back to run in the next one.
struct Group {
    done: Vec<Done>,
    later: Vec<Waiting>,
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
    mut batch: Vec<Waiting>,
) -> Option<Group> {
    batch.sort_by_cached_key(|w| w.write.lock_order());
    let mut done: Vec<Done> = Vec::with_capacity(batch.len());
    let mut leasing: Vec<(Leasing, Changes)> = Vec::new();
    let mut later = Vec::new();
    let mut pending = batch.into_iter();
    while let Some(w) = pending.next() {
        if let Err(e) = tx.batch_execute("SAVEPOINT w").await {
            let detail = format!("the group commit's transaction broke: {}", describe(&e));
            let waiting = std::iter::once(w).chain(pending).collect();
            broken(shared, &detail, waiting, done, leasing);
            return None;
        }
        let Waiting { write, conflicts } = w;
        let (write, fail) = match write.run(tx).await {
            Ok(Ran {
                changes,
                next,
                statements,
            }) => {
                // Its savepoint and its statements.
                shared.stats.sent(1 + statements);
                match next {
                    Next::Commit(answer) => done.push(Done { answer, changes }),
                    Next::Lease(half) => leasing.push((*half, changes)),
                }
                continue;
            }
            Err(failed) => failed,
        };
        if let Err(e) = tx.batch_execute("ROLLBACK TO SAVEPOINT w").await {
            write.refuse(fail.into_error(&shared.label));
            let detail = format!(
                "the group commit's transaction broke after a failed write: {}",
                describe(&e)
            );
            broken(shared, &detail, pending.collect(), done, leasing);
            return None;
        }
        match fail {
            Fail::Conflict(detail) if conflicts < MAX_CONFLICTS => {
                tracing::warn!(
                    queue = %shared.label,
                    write = write.name(),
                    error = %detail,
                    "the database gave a write up to break a lock conflict; it runs again after this group commits"
                );
                later.push(Waiting {
                    write,
                    conflicts: conflicts + 1,
                });
                later.extend(pending);
                break;
            }
            fail => write.refuse(fail.into_error(&shared.label)),
        }
    }
    if !leasing.is_empty() {
        match lease_halves(shared, tx, leasing).await {
            Ok(leased) => done.extend(leased),
            Err((detail, leasing)) => {
                let leasing = leasing.into_iter().map(|l| (l, Changes::new())).collect();
                broken(shared, &detail, Vec::new(), done, leasing);
                return None;
            }
        }
    }
    Some(Group { done, later })
}

/// Answers every write of a group whose transaction broke.
fn broken(
    shared: &Shared,
    detail: &str,
    waiting: Vec<Waiting>,
    done: Vec<Done>,
    leasing: Vec<(Leasing, Changes)>,
) {
    let unanswered = Unanswered {
        waiting,
        done,
        leasing: leasing.into_iter().map(|(l, _)| l).collect(),
    };
    unanswered.fail(|| shared.store(detail));
}

/// The leases of finish-and-lease writes whose finishes ran, in one
/// savepoint: a lease takes only unlocked rows and never waits. Should one
/// fail all the same, they are all rolled back and each write answers its
/// finish with nothing leased (the worker leases again on its own), so an
/// error still records nothing. An error when the transaction broke (the
/// writes are left to answer, with why).
async fn lease_halves(
    shared: &Shared,
    tx: &Transaction<'_>,
    halves: Vec<(Leasing, Changes)>,
) -> Result<Vec<Done>, (String, Vec<Leasing>)> {
    let halves_only = |halves: Vec<(Leasing, Changes)>| -> Vec<Leasing> {
        halves.into_iter().map(|(l, _)| l).collect()
    };
    if let Err(e) = tx.batch_execute("SAVEPOINT leases").await {
        let detail = format!("the group commit's transaction broke: {}", describe(&e));
        return Err((detail, halves_only(halves)));
    }
    let mut pg = PgTx::new(tx);
    shared.stats.sent(1);
    let mut leased: Vec<(Vec<Lease>, Changes)> = Vec::with_capacity(halves.len());
    let mut failed = None;
    for (half, _) in &halves {
        match half.lease.run(&mut pg).await {
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
            return Err((detail, halves_only(halves)));
        }
        tracing::warn!(
            queue = %shared.label,
            error = %fail.into_error(&shared.label),
            "the leases of finish-and-lease writes failed; their finishes are recorded with nothing leased"
        );
        leased.clear();
    }
    shared.stats.sent(pg.statements());
    leased.resize_with(halves.len(), Default::default);
    Ok(halves
        .into_iter()
        .zip(leased)
        .map(|((half, mut changes), (leases, leased_changes))| {
            changes.extend(leased_changes);
            Done {
                answer: half.answer(leases),
                changes,
            }
        })
        .collect())
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
