//! Group commit of one-statement writes (a plain submit, a journal step):
//! what SQLite's writer thread does for every write, here for the writes of
//! a job's hot path that are one statement each and stand alone. A write
//! waits in one queue; at most [`LEADERS`] groups run at once, each taking
//! every write waiting (up to [`MAX_GROUP`]) and sending `BEGIN` (with the
//! hot path's planner settings, `dialect::BEGIN_HOT`), their statements and
//! `COMMIT` pipelined on one connection: one round trip and one commit (one
//! WAL flush) for the group. While a group runs, the writes that arrive
//! wait for the next one, so a quiet queue sends each write in a group of
//! its own, and a busy one groups them.
//!
//! Each statement is guarded by its own job's row, so one write's refusal
//! (a stale attempt, a sequence number taken) changes nothing of the others
//! and is read from its own rows. A statement the database fails aborts the
//! group's transaction: the group rolls back, the failing write runs again
//! alone and the others again as a group, so only the failing one hears of
//! it. A group runs in a task of
//! its own: a caller that goes away mid-group leaves the others answered.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use deadpool_postgres::Pool;
use tokio::sync::{Semaphore, oneshot};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::dialect::{PgTx, pipelined_hot};
use crate::queue::WriteStats;
use crate::queue::tx::{Fail, Res};

/// Groups running at once.
const LEADERS: usize = 2;
/// Writes in one group at most: as many as SQLite's writer takes in one
/// transaction, so a flood of submits drains as fast (at 64, two groups
/// drained 128 of the 1,024 waiting places a round, and a flood of 7,000
/// submits got 0.70 of SQLite's acceptances).
const MAX_GROUP: usize = 256;

/// A statement's parameters, owned while it waits for its group.
pub(super) type Params = Vec<Box<dyn ToSql + Sync + Send>>;

struct Waiting {
    sql: &'static str,
    params: Params,
    reply: oneshot::Sender<Res<Vec<Row>>>,
}

impl Waiting {
    /// Its statement, sent on `pg`.
    async fn send(&self, pg: &PgTx<'_, deadpool_postgres::Object>) -> Res<Vec<Row>> {
        let p: Vec<&(dyn ToSql + Sync)> = self
            .params
            .iter()
            .map(|b| b.as_ref() as &(dyn ToSql + Sync))
            .collect();
        pg.rows(self.sql, &p).await
    }
}

/// The writes waiting for a group, and the right to run one.
pub(super) struct Group {
    waiting: Mutex<VecDeque<Waiting>>,
    leaders: Arc<Semaphore>,
}

impl Default for Group {
    fn default() -> Self {
        Self {
            waiting: Mutex::default(),
            leaders: Arc::new(Semaphore::new(LEADERS)),
        }
    }
}

impl Group {
    /// Runs `sql` with `params` in the next group; its rows once the group
    /// committed (or once it ran alone, after a group that failed).
    pub(super) async fn run(
        self: &Arc<Self>,
        pool: &Pool,
        stats: &Arc<WriteStats>,
        sql: &'static str,
        params: Params,
    ) -> Res<Vec<Row>> {
        let (reply, mut answer) = oneshot::channel();
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(Waiting { sql, params, reply });
        loop {
            let leader = tokio::select! {
                biased;
                answer = &mut answer => {
                    return answer.unwrap_or_else(|_| Err(Fail::Db("a write's group ended without answering it".into())));
                }
                leader = self.leaders.clone().acquire_owned() => leader,
            };
            let Ok(leader) = leader else {
                return Err(Fail::Db("the write groups were closed".into()));
            };
            let group: Vec<Waiting> = {
                let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
                let n = waiting.len().min(MAX_GROUP);
                waiting.drain(..n).collect()
            };
            if group.is_empty() {
                // This write is in a group another caller runs.
                drop(leader);
                return answer.await.unwrap_or_else(|_| {
                    Err(Fail::Db(
                        "a write's group ended without answering it".into(),
                    ))
                });
            }
            let (pool, stats) = (pool.clone(), stats.clone());
            // Its own task: the group is answered whatever becomes of this caller.
            let ran = tokio::spawn(async move {
                commit_group(&pool, &stats, group).await;
                drop(leader);
            });
            let _ = ran.await;
        }
    }
}

/// Runs `group` in one transaction and answers each write; a write the
/// database fails runs again alone, and the others again as a group.
async fn commit_group(pool: &Pool, stats: &WriteStats, mut group: Vec<Waiting>) {
    let client = match pool.get().await {
        Ok(client) => client,
        Err(e) => {
            for w in group {
                let _ = w
                    .reply
                    .send(Err(Fail::Db(format!("no connection for the write: {e}"))));
            }
            return;
        }
    };
    for w in &group {
        if client.prepare_cached(w.sql).await.is_err() {
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

/// One try of `group` in one transaction: `None` once every write is
/// answered, or the writes to try again as a group (the write that failed
/// the transaction ran alone).
async fn once(
    client: &deadpool_postgres::Object,
    stats: &WriteStats,
    mut group: Vec<Waiting>,
) -> Option<Vec<Waiting>> {
    let pg = PgTx::new(client);
    // Prepared by the caller: one round trip for the group.
    let statements = futures::future::join_all(group.iter().map(|w| w.send(&pg)));
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
async fn alone(client: &deadpool_postgres::Object, stats: &WriteStats, group: Vec<Waiting>) {
    let pg = PgTx::new(client);
    for w in group {
        let rows = w.send(&pg).await;
        stats.sent(1);
        if rows.is_ok() {
            stats.count(1);
        }
        let _ = w.reply.send(rows);
    }
}
