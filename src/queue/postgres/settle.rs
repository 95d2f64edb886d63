//! A worker slot's finish and its next lease in one commit and one round
//! trip. Both are the one-statement forms (`ending`, `lease`); here they
//! are sent pipelined on one connection inside one transaction — `BEGIN`,
//! the finish, the lease and `COMMIT` at once — so a job's end and the
//! slot's next job cost one WAL flush and one round trip, and no
//! transaction waits open for the daemon between two (the second round
//! trip of `COMMIT` kept a quarter of the backends idle in a transaction,
//! docs/daemon.md). The commit is what PostgreSQL's throughput is bound by
//! (WAL writes and flushes), not the round trips.
//!
//! Every statement is prepared before the pipeline is sent, so each goes
//! out in order on its first poll. Both or neither: a finish that would be
//! refused raises in its statement (`ending::statement_raising`), and any
//! statement that fails aborts the transaction, whose `COMMIT` then rolls
//! it back on the server; the driver then writes the finish on its own
//! (which answers why it was refused) and leases on its own.

use super::cursor::Cursors;
use super::dialect::{BEGIN_HOT, PgTx};
use super::ending;
use super::ending::FinishEnd;
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

/// Sends `op`'s finish and lease in one transaction, in one round trip.
pub(super) async fn finish_and_lease(
    w: &Writes,
    pins: &Pins,
    cursors: &Cursors,
    op: &FinishAndLease,
) -> Result<Pipelined, QueueError> {
    let Some(end) = FinishEnd::of(&op.finish) else {
        return Ok(Pipelined::Neither);
    };
    let params = LeaseParams::of(pins, cursors, &op.lease);
    let client = w.client().await?;
    let label = &w.shared.label;
    // Prepared (or found in the connection's cache) first, so that each
    // statement below is sent on its first poll, in order.
    let store = |e: tokio_postgres::Error| w.shared.store(&e);
    client
        .prepare_cached(ending::statement_raising())
        .await
        .map_err(store)?;
    client
        .prepare_cached(params.statement())
        .await
        .map_err(store)?;
    let pg = PgTx::new(&client);
    let lease_params = params.get();
    let (begin, applied, rows, commit) = tokio::join!(
        client.batch_execute(BEGIN_HOT),
        end.apply(&pg),
        pg.rows(params.statement(), &lease_params),
        client.batch_execute("COMMIT"),
    );
    w.shared.stats.sent(1);
    begin.map_err(store)?;
    // A statement that failed (a finish refused raises) aborted the
    // transaction: its COMMIT rolled it back, both statements with it.
    let (applied, rows) = match (applied, rows) {
        (Ok(applied), Ok(rows)) => (Ok(applied), rows),
        (Err(_), _) | (_, Err(_)) => return Ok(Pipelined::Neither),
    };
    commit.map_err(store)?;
    let leases = params
        .committed(cursors, &rows)
        .map_err(|f| f.into_error(label))?;
    let mut changes = leases.as_deref().map(lease::changes).unwrap_or_default();
    let finish = end.concluded(w, applied)?;
    if let Some((_, Some(change))) = &finish {
        changes.push(change.clone());
    }
    w.shared.committed(&changes);
    let leases = match leases {
        Some(leases) => Some(lease::pinned(&pg, w, pins, &op.lease, leases).await?),
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
