//! A worker slot's finish and its next lease, committed together in the
//! next settle group (a `group::Kind`): the finishes of every worker slot
//! that ended a job while the group before ran, and one lease for the
//! slots of each worker pool among them, share one transaction, one round trip and one commit. The
//! statements are the one-statement forms (`ending`, `lease`); the lease's
//! cost is mostly per statement (1.2 ms a call on `scale`, docs/daemon.md),
//! and the commit is what PostgreSQL's throughput is bound by (WAL writes
//! and flushes), not the round trips.
//!
//! Both or neither: a finish that would be refused raises in its statement
//! (`ending::statement_raising`), which rolls back the group's transaction;
//! the group runs again without it, and the driver then writes that finish
//! on its own (which answers why it was refused) and leases on its own.

use std::sync::Arc;

use deadpool_postgres::Object;
use tokio::sync::oneshot;
use tokio_postgres::Row;

use super::cursor::Cursors;
use super::ending::FinishEnd;
use super::group::{Group, Kind, Statement};
use super::lease::{self, LeaseParams, Pinning, Pins};
use super::pool::Writes;
use super::sql::pipelined_hot;
use super::transaction::PgTx;
use crate::queue::WriteStats;
use crate::queue::op::{FinishAndLease, LeaseJobs};
use crate::queue::tx::Res;
use crate::queue::*;

/// What a settle committed. `leases` is `None` where the lease statement
/// gave way to the lifecycle's transaction (it leased nothing).
pub(super) enum Pipelined {
    /// The finish and the lease, in one commit.
    Both {
        finished: Box<Finished>,
        leases: Option<Vec<Lease>>,
    },
    /// Only the lease: the finish is still to write, on its own (an end
    /// only the lifecycle's transaction writes; it wrote nothing).
    LeaseOnly { leases: Option<Vec<Lease>> },
    /// Nothing: the finish would be refused, or a statement failed, and it
    /// rolled back (or the end is a park, sent nowhere).
    Neither,
}

/// Worker slots' settles in one group at most: a daemon's default worker
/// count, so that every slot that ended a job while a group ran goes in the
/// next one.
pub(super) const MAX_SETTLES: usize = 64;

/// Worker slots' settles: each slot's finish, then one lease for the slots
/// of each worker pool in the group, its jobs handed out in lease order.
pub(super) struct Settles {
    pins: Arc<Pins>,
    cursors: Arc<Cursors>,
}

impl Settles {
    pub(super) fn new(pins: Arc<Pins>, cursors: Arc<Cursors>) -> Self {
        Self { pins, cursors }
    }
}

/// A slot's settle waiting for its group.
pub(super) struct Settle {
    finish: Statement,
    lease: LeaseJobs,
    reply: oneshot::Sender<Answer>,
}

/// A slot's leases, `None` where the lease gave way to the lifecycle's
/// transaction.
type Leased = Option<Vec<(Lease, Pinning)>>;

/// What a group answered a settle: its finish's rows and its leases.
type Answer = Result<(Vec<Row>, Leased), Unanswered>;

/// Why a group did not answer a settle with its rows.
enum Unanswered {
    /// Nothing of it was committed: its finish would be refused, a
    /// statement failed, or it never ran.
    NotWritten,
    /// It may have been committed: the commit's answer was lost, or the
    /// lease's rows could not be read (`detail`).
    Unknown(String),
}

/// Whether two slots lease alike (one worker pool): their jobs can come
/// from one lease statement.
fn alike(a: &LeaseJobs, b: &LeaseJobs) -> bool {
    a.worker == b.worker
        && a.lease_for == b.lease_for
        && a.max_crash_resumes == b.max_crash_resumes
        && a.pin.is_some() == b.pin.is_some()
}

/// Tells every settle of `group` that whether it was written is unknown,
/// and why (`detail`); nothing of the group is tried again.
fn unknown(group: Vec<Settle>, detail: String) -> Option<Vec<Settle>> {
    for s in group {
        let _ = s.reply.send(Err(Unanswered::Unknown(detail.clone())));
    }
    None
}

/// `lease` asking for `n` jobs.
fn asking(lease: &LeaseJobs, n: usize) -> LeaseJobs {
    LeaseJobs {
        worker: lease.worker.clone(),
        lease_for: lease.lease_for,
        n,
        max_crash_resumes: lease.max_crash_resumes,
        pin: lease.pin.clone(),
        shares: lease.shares.clone(),
    }
}

impl Kind for Settles {
    type Write = Settle;

    async fn commit(&self, client: Object, stats: &WriteStats, mut group: Vec<Settle>) {
        // Each round takes one refused finish out, so this ends.
        while !group.is_empty() {
            match self.once(&client, stats, group).await {
                Some(rest) => group = rest,
                None => return,
            }
        }
    }

    fn unrun(&self, group: Vec<Settle>, _why: &str) {
        // Each settle is written on its own instead, which says why.
        for s in group {
            let _ = s.reply.send(Err(Unanswered::NotWritten));
        }
    }
}

impl Settles {
    /// One try of `group` in one transaction: `None` once every settle is
    /// answered, or the settles to try again (a refused finish's settle
    /// was answered and taken out).
    async fn once(
        &self,
        client: &Object,
        stats: &WriteStats,
        mut group: Vec<Settle>,
    ) -> Option<Vec<Settle>> {
        // One lease statement for each way the group's slots lease (one
        // worker pool: one), asking for all of its slots' jobs.
        let ways = ways(&group);
        let leasings = self.leasings(&group, &ways);
        // Prepared first, so that each statement goes out on its first
        // poll, in order.
        let sqls = group.iter().map(|s| s.finish.sql);
        for sql in sqls.chain(leasings.iter().map(|(_, st)| st.sql)) {
            if client.prepare_cached(sql).await.is_err() {
                self.unrun(group, "");
                return None;
            }
        }
        let pg = PgTx::new(client);
        let statements = async {
            let finishes = futures::future::join_all(group.iter().map(|s| s.finish.send(&pg)));
            let leases = futures::future::join_all(leasings.iter().map(|(_, st)| st.send(&pg)));
            tokio::join!(finishes, leases)
        };
        let (begin, (finishes, leased), commit) = pipelined_hot(client, statements).await;
        stats.sent(1);
        if let Err(e) = begin {
            // Whether anything ran outside a transaction is not known.
            let detail = format!("the settle group could not begin: {}", super::describe(&e));
            return unknown(group, detail);
        }
        if let Some(at) = finishes.iter().position(Result::is_err) {
            // The transaction was aborted, and its COMMIT rolled it back.
            let culprit = group.remove(at);
            let _ = culprit.reply.send(Err(Unanswered::NotWritten));
            if commit.is_ok() {
                return Some(group);
            }
            // The connection is not sound: the others are written on
            // their own (nothing of them was committed either).
            self.unrun(group, "");
            return None;
        }
        let Ok(leased) = leased.into_iter().collect::<Result<Vec<_>, _>>() else {
            self.unrun(group, "");
            return None;
        };
        if let Err(e) = commit {
            let detail = format!("the settle group's commit failed: {}", super::describe(&e));
            return unknown(group, detail);
        }
        stats.count(group.len());
        let shares = match self.shares(&group, &ways, &leasings, &leased) {
            Ok(shares) => shares,
            Err(f) => {
                let detail = format!("the settle group's leases cannot be read: {f:?}");
                return unknown(group, detail);
            }
        };
        for ((s, rows), share) in group.into_iter().zip(finishes).zip(shares) {
            let _ = s.reply.send(Ok((rows.unwrap_or_default(), share)));
        }
        None
    }

    /// One lease statement for each way the group's slots lease, asking for
    /// all of its slots' jobs.
    fn leasings(&self, group: &[Settle], ways: &[Vec<usize>]) -> Vec<(LeaseParams, Statement)> {
        ways.iter()
            .map(|way| {
                let n = way.iter().map(|&i| group[i].lease.n).sum();
                let params =
                    LeaseParams::of(&self.pins, &self.cursors, &asking(&group[way[0]].lease, n));
                let statement = params.statement_with_params();
                (params, statement)
            })
            .collect()
    }

    /// Each slot's share of its way's committed leases, in lease order.
    fn shares(
        &self,
        group: &[Settle],
        ways: &[Vec<usize>],
        leasings: &[(LeaseParams, Statement)],
        leased: &[Vec<Row>],
    ) -> Res<Vec<Leased>> {
        let mut shares: Vec<Leased> = group.iter().map(|_| None).collect();
        for ((way, (params, _)), rows) in ways.iter().zip(leasings).zip(leased) {
            let mut leases = params.committed(&self.cursors, rows)?.map(Vec::into_iter);
            for &i in way {
                let n = group[i].lease.n;
                shares[i] = leases.as_mut().map(|all| all.by_ref().take(n).collect());
            }
        }
        Ok(shares)
    }
}

/// The group's slots by the way they lease (indexes into `group`).
fn ways(group: &[Settle]) -> Vec<Vec<usize>> {
    let mut ways: Vec<Vec<usize>> = Vec::new();
    for (i, settle) in group.iter().enumerate() {
        match ways
            .iter_mut()
            .find(|way| alike(&group[way[0]].lease, &settle.lease))
        {
            Some(way) => way.push(i),
            None => ways.push(vec![i]),
        }
    }
    ways
}

/// Commits `op`'s finish and its slot's next lease in the next settle group.
pub(super) async fn finish_and_lease(
    w: &Writes,
    settles: &Arc<Group<Settles>>,
    pins: &Pins,
    op: &FinishAndLease,
) -> Result<Pipelined, QueueError> {
    let Some(end) = FinishEnd::of(&op.finish) else {
        return Ok(Pipelined::Neither);
    };
    let shared = &w.shared;
    let label = &shared.label;
    let store = |detail: String| QueueError::Store {
        path: label.clone(),
        detail,
    };
    let (reply, answer) = oneshot::channel();
    let settle = Settle {
        finish: end.statement().map_err(|f| f.into_error(label))?,
        lease: asking(&op.lease, op.lease.n),
        reply,
    };
    let answered = settles
        .run(&shared.pool, &shared.stats, settle, answer)
        .await;
    let (finish_rows, leases) = match answered {
        Some(Ok(answer)) => answer,
        Some(Err(Unanswered::NotWritten)) => return Ok(Pipelined::Neither),
        Some(Err(Unanswered::Unknown(detail))) => return Err(store(detail)),
        None => return Err(store("a settle's group ended without answering it".into())),
    };
    let mut changes = leases.as_deref().map(lease::changes).unwrap_or_default();
    let applied = end.applied(&finish_rows);
    let finish = end.concluded(w, applied)?;
    if let Some((_, Some(change))) = &finish {
        changes.push(change.clone());
    }
    // The group counted the commit.
    shared.announce(&changes);
    let leases = match leases {
        Some(leases) => Some(lease::pinned(w, pins, &op.lease, leases).await?),
        None => None,
    };
    Ok(match finish {
        Some((finished, _)) => Pipelined::Both {
            finished: Box::new(finished),
            leases,
        },
        None => Pipelined::LeaseOnly { leases },
    })
}
