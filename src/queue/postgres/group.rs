//! Group commit of hot-path writes: what SQLite's writer thread does for
//! every write, here for the writes of a job's hot path that stand alone. A
//! write waits in its group's queue; at most [`LEADERS`] groups of a kind
//! run at once, each taking the writes waiting (up to the kind's bound) and
//! committing them in one transaction: `BEGIN` (with the hot path's planner
//! settings, `sql::BEGIN_HOT`), their statements and `COMMIT` pipelined
//! on one connection, one round trip and one commit (one WAL flush) for the
//! group. While a group runs, the writes that arrive wait for the next one,
//! so a quiet queue sends each write in a group of its own, and a busy one
//! groups them. A group runs in a task of its own: a caller that goes away
//! mid-group leaves the others answered.
//!
//! Two kinds: one-statement writes ([`Singles`]: a plain submit, a journal
//! step) and worker slots' settles (`settle`: each slot's finish, and one
//! lease for the slots of each worker pool in the group). Each statement is guarded by its own
//! job's row, so one write's refusal (a stale attempt, a sequence number
//! taken) changes nothing of the others and is read from its own rows. A
//! statement the database fails aborts the group's transaction: the group
//! rolls back, the write that failed hears of it (a one-statement write
//! runs again alone first) and the others run again as a group.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex};

use deadpool_postgres::{Object, Pool};
use tokio::sync::{Semaphore, oneshot};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::sql::pipelined_hot;
use super::transaction::PgTx;
use crate::queue::WriteStats;
use crate::queue::tx::{Fail, Res};

/// Groups of one kind running at once.
const LEADERS: usize = 2;
/// One-statement writes in one group at most: as many as SQLite's writer
/// takes in one transaction, so a flood of submits drains as fast (at 64,
/// two groups drained 128 of the 1,024 waiting places a round, and a flood
/// of 7,000 submits got 0.70 of SQLite's acceptances).
pub(super) const MAX_WRITES: usize = 256;

/// A statement's parameters, owned while it waits for its group.
pub(super) type Params = Vec<Box<dyn ToSql + Sync + Send>>;

/// One statement of a write, owned while it waits for its group.
pub(super) struct Statement {
    pub sql: &'static str,
    pub params: Params,
}

impl Statement {
    /// Its rows, sent on `pg`.
    pub(super) async fn send(&self, pg: &PgTx<'_, Object>) -> Res<Vec<Row>> {
        let p: Vec<&(dyn ToSql + Sync)> = self
            .params
            .iter()
            .map(|b| b.as_ref() as &(dyn ToSql + Sync))
            .collect();
        pg.rows(self.sql, &p).await
    }
}

/// What a group commits and how it answers its writes.
pub(super) trait Kind: Send + Sync + 'static {
    /// A write waiting for a group, holding where its answer goes.
    type Write: Send + 'static;

    /// Whether `next` may go in a group with `first` (writes that may not
    /// wait for the next group).
    fn joins(&self, _first: &Self::Write, _next: &Self::Write) -> bool {
        true
    }

    /// Commits `group` on `client` and answers each of its writes.
    fn commit(
        &self,
        client: Object,
        stats: &WriteStats,
        group: Vec<Self::Write>,
    ) -> impl Future<Output = ()> + Send;

    /// Answers each write of `group`, which could not run (`why`: no
    /// connection).
    fn unrun(&self, group: Vec<Self::Write>, why: &str);
}

/// The writes of one kind waiting for a group, and the right to run one.
pub(super) struct Group<K: Kind> {
    waiting: Mutex<VecDeque<K::Write>>,
    leaders: Arc<Semaphore>,
    /// Writes in one group at most.
    max: usize,
    kind: Arc<K>,
}

impl<K: Kind> Group<K> {
    /// Groups of `kind`, of at most `max` writes.
    pub(super) fn new(kind: K, max: usize) -> Self {
        Self {
            waiting: Mutex::default(),
            leaders: Arc::new(Semaphore::new(LEADERS)),
            max,
            kind: Arc::new(kind),
        }
    }

    /// Puts `write` in the next group and runs groups until it is answered:
    /// its `answer`, or `None` when its group ended without answering it.
    pub(super) async fn run<A>(
        self: &Arc<Self>,
        pool: &Pool,
        stats: &Arc<WriteStats>,
        write: K::Write,
        mut answer: oneshot::Receiver<A>,
    ) -> Option<A> {
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(write);
        loop {
            let leader = tokio::select! {
                biased;
                answer = &mut answer => return answer.ok(),
                leader = self.leaders.clone().acquire_owned() => leader,
            };
            // The semaphore is never closed.
            let Ok(leader) = leader else {
                return answer.await.ok();
            };
            let group = self.take();
            if group.is_empty() {
                // This write is in a group another caller runs.
                drop(leader);
                return answer.await.ok();
            }
            let (pool, stats, kind) = (pool.clone(), stats.clone(), self.kind.clone());
            // Its own task: the group is answered whatever becomes of this caller.
            let ran = tokio::spawn(async move {
                match pool.get().await {
                    Ok(client) => kind.commit(client, &stats, group).await,
                    Err(e) => kind.unrun(group, &format!("no connection for the write: {e}")),
                }
                drop(leader);
            });
            let _ = ran.await;
        }
    }

    /// The next group: the first write waiting and those after it that may
    /// join it, at most `max`.
    fn take(&self) -> Vec<K::Write> {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        let mut group = Vec::new();
        while group.len() < self.max {
            let joins = match (group.first(), waiting.front()) {
                (_, None) => false,
                (None, Some(_)) => true,
                (Some(first), Some(next)) => self.kind.joins(first, next),
            };
            match waiting.pop_front() {
                Some(write) if joins => group.push(write),
                Some(write) => {
                    waiting.push_front(write);
                    break;
                }
                None => break,
            }
        }
        group
    }
}

/// One-statement writes: a write the database fails in a group runs again
/// alone, so it hears its own error, as a statement alone would.
#[derive(Default)]
pub(super) struct Singles;

/// A one-statement write and where its rows go.
pub(super) struct Single {
    statement: Statement,
    reply: oneshot::Sender<Res<Vec<Row>>>,
}

impl Group<Singles> {
    /// Runs `sql` with `params` in the next group; its rows once the group
    /// committed (or once it ran alone, after a group that failed).
    pub(super) async fn single(
        self: &Arc<Self>,
        pool: &Pool,
        stats: &Arc<WriteStats>,
        sql: &'static str,
        params: Params,
    ) -> Res<Vec<Row>> {
        let (reply, answer) = oneshot::channel();
        let statement = Statement { sql, params };
        let write = Single { statement, reply };
        self.run(pool, stats, write, answer)
            .await
            .unwrap_or_else(|| {
                Err(Fail::Db(
                    "a write's group ended without answering it".into(),
                ))
            })
    }
}

impl Kind for Singles {
    type Write = Single;

    async fn commit(&self, client: Object, stats: &WriteStats, mut group: Vec<Single>) {
        for w in &group {
            if client.prepare_cached(w.statement.sql).await.is_err() {
                return alone(&client, stats, group).await;
            }
        }
        // Each round takes one failing write out, so this ends.
        while !group.is_empty() {
            match once(&client, stats, group).await {
                Some(rest) => group = rest,
                None => return,
            }
        }
    }

    fn unrun(&self, group: Vec<Single>, why: &str) {
        for w in group {
            let _ = w.reply.send(Err(Fail::Db(why.to_string())));
        }
    }
}

/// One try of `group` in one transaction: `None` once every write is
/// answered, or the writes to try again as a group (the write that failed
/// the transaction ran alone).
async fn once(client: &Object, stats: &WriteStats, mut group: Vec<Single>) -> Option<Vec<Single>> {
    let pg = PgTx::new(client);
    // Prepared by the caller: one round trip for the group.
    let statements = futures::future::join_all(group.iter().map(|w| w.statement.send(&pg)));
    let (begin, rows, commit) = pipelined_hot(client, statements).await;
    stats.sent(1);
    let failed = rows.iter().position(Result::is_err);
    if begin.is_err() || failed.is_some() {
        // Nothing committed: the transaction never began or was aborted.
        // COMMIT answered (as a ROLLBACK): the connection is sound, and the
        // write that failed (the first: the ones after it only heard that
        // the transaction was aborted) runs alone, the others again as a
        // group (at 256 a group, each write alone cost a commit each).
        // Otherwise each hears its own error, as a statement alone would.
        match (commit.is_ok(), failed) {
            (true, Some(failed)) if begin.is_ok() => {
                let culprit = group.remove(failed);
                alone(client, stats, vec![culprit]).await;
                return Some(group);
            }
            (true, _) => {
                alone(client, stats, group).await;
                return None;
            }
            (false, _) => {}
        }
        for (w, rows) in group.into_iter().zip(rows) {
            let failed =
                rows.and_then(|_| Err(Fail::Db("the write's group could not begin".into())));
            let _ = w.reply.send(failed);
        }
        return None;
    }
    // A commit whose answer is lost may have happened: the writes hear the
    // error and are not run again (as a statement alone whose connection
    // drops), never twice.
    if let Err(e) = commit {
        let failed = super::describe(&e);
        for w in group {
            let _ = w.reply.send(Err(Fail::Db(format!(
                "the write's group commit failed: {failed}"
            ))));
        }
        return None;
    }
    stats.count(group.len());
    for (w, rows) in group.into_iter().zip(rows) {
        let _ = w.reply.send(rows);
    }
    None
}

/// Runs each write as a statement of its own.
async fn alone(client: &Object, stats: &WriteStats, group: Vec<Single>) {
    let pg = PgTx::new(client);
    for w in group {
        let rows = w.statement.send(&pg).await;
        stats.sent(1);
        if rows.is_ok() {
            stats.count(1);
        }
        let _ = w.reply.send(rows);
    }
}
