//! A worker slot's finish and its next lease, committed together in the
//! next settle group: the finishes and leases of every worker slot that
//! ended a job while the group before ran share one transaction, one round
//! trip and one commit (`group`). Both statements are the one-statement
//! forms (`ending`, `lease`). The commit is what PostgreSQL's throughput
//! is bound by (WAL writes and flushes: 0.9 flushes a job when each slot
//! committed its own, docs/daemon.md), not the round trips.
//!
//! Both or neither: a finish that would be refused raises in its statement
//! (`ending::statement_raising`), which rolls back the group's transaction;
//! the group runs again without it, and the driver then writes that finish
//! on its own (which answers why it was refused) and leases on its own.

use super::cursor::Cursors;
use super::ending::FinishEnd;
use super::group::{Alone, Unanswered};
use super::lease::{self, LeaseParams, Pins};
use super::pool::Writes;
use crate::queue::op::FinishAndLease;
use crate::queue::*;

/// What the pipeline committed. `leases` is `None` where the lease
/// statement gave way to the lifecycle's transaction (it leased nothing).
pub(super) enum Pipelined {
    /// The finish and the lease, in one commit.
    Both {
        finished: Box<Finished>,
        leases: Option<Vec<Lease>>,
    },
    /// Only the lease: the finish is still to write, on its own (a park, or
    /// an end only the lifecycle's transaction writes; it wrote nothing).
    LeaseOnly { leases: Option<Vec<Lease>> },
    /// Nothing: a statement failed, or the finish would be refused, and the
    /// transaction rolled back whole (or the end is a park, sent nowhere).
    Neither,
}

/// Worker slots' settles in one group at most: a daemon's default worker
/// count, so that every slot that ended a job while a group ran goes in the
/// next one.
pub(super) const MAX_SETTLES: usize = 64;

/// Commits `op`'s finish and lease together in the next settle group.
pub(super) async fn finish_and_lease(
    w: &Writes,
    pins: &Pins,
    cursors: &Cursors,
    op: &FinishAndLease,
) -> Result<Pipelined, QueueError> {
    let Some(end) = FinishEnd::of(&op.finish) else {
        return Ok(Pipelined::Neither);
    };
    let label = &w.shared.label;
    let params = LeaseParams::of(pins, cursors, &op.lease);
    let statements = vec![
        end.statement().map_err(|f| f.into_error(label))?,
        params.statement_with_params(),
    ];
    let shared = &w.shared;
    let answer = w
        .settles
        .together(&shared.pool, &shared.stats, statements, Alone::Refuse)
        .await;
    let (finish_rows, lease_rows) = match answer {
        Ok(mut rows) if rows.len() == 2 => {
            let lease_rows = rows.pop().unwrap_or_default();
            (rows.pop().unwrap_or_default(), lease_rows)
        }
        Ok(_) => {
            return Err(QueueError::Store {
                path: label.clone(),
                detail: "a settle's group answered the wrong number of statements".into(),
            });
        }
        // Rolled back: a finish refused raised, or the group never ran it.
        Err(Unanswered::NotWritten(_)) => return Ok(Pipelined::Neither),
        Err(Unanswered::Unknown(f)) => return Err(f.into_error(label)),
    };
    let leases = params
        .committed(cursors, &lease_rows)
        .map_err(|f| f.into_error(label))?;
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
