//! Group commit of hot-path writes: what SQLite's writer thread does for
//! every write, here for the writes of a job's hot path that stand alone —
//! a plain submit, a journal step (one statement each), and a worker
//! slot's finish with its next lease (two statements that commit together
//! or not at all, `settle`). A write waits in its group's queue; at most
//! [`LEADERS`] groups run at once, each taking every write waiting (up to
//! the group's bound) and sending `BEGIN` (with the hot path's planner
//! settings, `dialect::BEGIN_HOT`), their statements and `COMMIT`
//! pipelined on one connection: one round trip and one commit (one WAL
//! flush) for the group. While a group runs, the writes that arrive wait
//! for the next one, so a quiet queue sends each write in a group of its
//! own, and a busy one groups them.
//!
//! Each statement is guarded by its own job's row, so one write's refusal
//! (a stale attempt, a sequence number taken) changes nothing of the others
//! and is read from its own rows. A statement the database fails aborts the
//! group's transaction: the group rolls back, the write whose statement
//! failed hears of it ([`Write::alone`] says whether it first runs again on
//! its own) and the others run again as a group, so only the failing one
//! hears of it. A group runs in a task of its own: a caller that goes away
//! mid-group leaves the others answered.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use deadpool_postgres::Pool;
use tokio::sync::{Semaphore, oneshot};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::dialect::{PgTx, pipelined_hot};
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

/// One statement of a write.
pub(super) struct Statement {
    pub sql: &'static str,
    pub params: Params,
}

impl Statement {
    /// Its rows, sent on `pg`.
    async fn send(&self, pg: &PgTx<'_, deadpool_postgres::Object>) -> Res<Vec<Row>> {
        let p: Vec<&(dyn ToSql + Sync)> = self
            .params
            .iter()
            .map(|b| b.as_ref() as &(dyn ToSql + Sync))
            .collect();
        pg.rows(self.sql, &p).await
    }
}

/// Why a group did not answer a write with its rows.
#[derive(Debug)]
pub(super) enum Unanswered {
    /// Nothing of the write was committed: it was never sent, or its
    /// transaction rolled back (its own statement's error, or the group's).
    NotWritten(Fail),
    /// The commit's answer was lost: the write may have been committed.
    Unknown(Fail),
}

impl Unanswered {
    pub(super) fn into_fail(self) -> Fail {
        match self {
            Self::NotWritten(f) | Self::Unknown(f) => f,
        }
    }
}

/// What a write's statements answered, in order.
type Answer = Result<Vec<Vec<Row>>, Unanswered>;

/// What a write whose statement failed its group's transaction does.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Alone {
    /// It runs again on its own, each statement committed alone, and
    /// answers what that did (a one-statement write: as if it had never
    /// been grouped).
    Run,
    /// It answers [`Unanswered::NotWritten`] (statements that must commit
    /// together: its caller decides what to write instead).
    Refuse,
}

struct Waiting {
    statements: Vec<Statement>,
    alone: Alone,
    reply: oneshot::Sender<Answer>,
}

impl Waiting {
    /// Its statements, sent on `pg` in order: the first error, or each
    /// one's rows.
    async fn send(&self, pg: &PgTx<'_, deadpool_postgres::Object>) -> Res<Vec<Vec<Row>>> {
        let answers = futures::future::join_all(self.statements.iter().map(|s| s.send(pg))).await;
        answers.into_iter().collect()
    }

    fn answer(self, answer: Answer) {
        let _ = self.reply.send(answer);
    }
}

/// The writes waiting for a group of one kind, and the right to run one.
pub(super) struct Group {
    waiting: Mutex<VecDeque<Waiting>>,
    leaders: Arc<Semaphore>,
    /// Writes in one group at most.
    max: usize,
}

impl Group {
    /// Groups of at most `max` writes.
    pub(super) fn new(max: usize) -> Self {
        Self {
            waiting: Mutex::default(),
            leaders: Arc::new(Semaphore::new(LEADERS)),
            max,
        }
    }

    /// Runs `sql` with `params` in the next group; its rows once the group
    /// committed (or once it ran alone, after a group that failed).
    pub(super) async fn run(
        self: &Arc<Self>,
        pool: &Pool,
        stats: &Arc<WriteStats>,
        sql: &'static str,
        params: Params,
    ) -> Res<Vec<Row>> {
        let statements = vec![Statement { sql, params }];
        match self.together(pool, stats, statements, Alone::Run).await {
            Ok(mut rows) => rows
                .pop()
                .ok_or_else(|| Fail::Db("a write's group answered no rows".into())),
            Err(unanswered) => Err(unanswered.into_fail()),
        }
    }

    /// Runs `statements` in the next group, all committed or none: each
    /// one's rows once the group committed.
    pub(super) async fn together(
        self: &Arc<Self>,
        pool: &Pool,
        stats: &Arc<WriteStats>,
        statements: Vec<Statement>,
        alone: Alone,
    ) -> Answer {
        let lost = || {
            Unanswered::Unknown(Fail::Db(
                "a write's group ended without answering it".into(),
            ))
        };
        let (reply, mut answer) = oneshot::channel();
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(Waiting {
                statements,
                alone,
                reply,
            });
        loop {
            let leader = tokio::select! {
                biased;
                answer = &mut answer => return answer.unwrap_or_else(|_| Err(lost())),
                leader = self.leaders.clone().acquire_owned() => leader,
            };
            let Ok(leader) = leader else {
                return Err(Unanswered::NotWritten(Fail::Db(
                    "the write groups were closed".into(),
                )));
            };
            let group: Vec<Waiting> = {
                let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
                let n = waiting.len().min(self.max);
                waiting.drain(..n).collect()
            };
            if group.is_empty() {
                // This write is in a group another caller runs.
                drop(leader);
                return answer.await.unwrap_or_else(|_| Err(lost()));
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

/// Runs `group` in one transaction and answers each write; a write whose
/// statement the database fails is answered on its own ([`Alone`]), and
/// the others run again as a group.
async fn commit_group(pool: &Pool, stats: &WriteStats, mut group: Vec<Waiting>) {
    let client = match pool.get().await {
        Ok(client) => client,
        Err(e) => {
            for w in group {
                let failed = Fail::Db(format!("no connection for the write: {e}"));
                w.answer(Err(Unanswered::NotWritten(failed)));
            }
            return;
        }
    };
    for s in group.iter().flat_map(|w| &w.statements) {
        if client.prepare_cached(s.sql).await.is_err() {
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
/// the transaction was answered on its own).
async fn once(
    client: &deadpool_postgres::Object,
    stats: &WriteStats,
    mut group: Vec<Waiting>,
) -> Option<Vec<Waiting>> {
    let pg = PgTx::new(client);
    // Prepared by the caller: one round trip for the group.
    let statements = futures::future::join_all(group.iter().map(|w| w.send(&pg)));
    let (begin, answers, commit) = pipelined_hot(client, statements).await;
    stats.sent(1);
    let failed = answers.iter().position(Result::is_err);
    if begin.is_err() || failed.is_some() {
        // Nothing committed: the transaction never began or was aborted.
        // COMMIT answered (as a ROLLBACK): the connection is sound, and the
        // write that failed (the first: the ones after it only heard that
        // the transaction was aborted) is answered on its own, the others
        // run again as a group (at 256 a group, each write alone cost a
        // commit each). Otherwise each hears its own error, as a statement
        // alone would.
        match (commit.is_ok(), failed) {
            (true, Some(failed)) if begin.is_ok() => {
                let culprit = group.remove(failed);
                match (culprit.alone, answers.into_iter().nth(failed)) {
                    (Alone::Refuse, Some(Err(e))) => culprit.answer(Err(Unanswered::NotWritten(e))),
                    _ => alone(client, stats, vec![culprit]).await,
                }
                return Some(group);
            }
            (true, _) => {
                alone(client, stats, group).await;
                return None;
            }
            (false, _) => {}
        }
        for (w, answer) in group.into_iter().zip(answers) {
            let failed =
                answer.and_then(|_| Err(Fail::Db("the write's group could not begin".into())));
            w.answer(failed.map_err(Unanswered::NotWritten));
        }
        return None;
    }
    // A commit whose answer is lost may have happened: the writes hear the
    // error and are not run again (as a statement alone whose connection
    // drops), never twice.
    if let Err(e) = commit {
        let failed = super::describe(&e);
        for w in group {
            let failed = Fail::Db(format!("the write's group commit failed: {failed}"));
            w.answer(Err(Unanswered::Unknown(failed)));
        }
        return None;
    }
    stats.count(group.len());
    for (w, answer) in group.into_iter().zip(answers) {
        w.answer(answer.map_err(Unanswered::NotWritten));
    }
    None
}

/// Runs each write on its own, each statement committed alone; a write
/// whose statements must commit together is answered
/// [`Unanswered::NotWritten`] without running.
async fn alone(client: &deadpool_postgres::Object, stats: &WriteStats, group: Vec<Waiting>) {
    let pg = PgTx::new(client);
    for w in group {
        if w.alone == Alone::Refuse {
            let refused = Fail::Db("the write's group failed before it ran".into());
            w.answer(Err(Unanswered::NotWritten(refused)));
            continue;
        }
        let answer = w.send(&pg).await;
        stats.sent(u64::try_from(w.statements.len()).unwrap_or(u64::MAX));
        if answer.is_ok() {
            stats.count(1);
        }
        w.answer(answer.map_err(Unanswered::NotWritten));
    }
}
