//! A worker slot's finish and its next lease in one commit. Both are the
//! one-statement forms (`ending`, `hot`); here they are sent pipelined on
//! one connection inside one transaction — `BEGIN`, the finish and the
//! lease in one round trip, then `COMMIT` — so a job's end and the slot's
//! next job cost one WAL flush, not two. The commit is what PostgreSQL's
//! throughput is bound by (WAL writes and flushes, docs/daemon.md), not the
//! round trips.
//!
//! Both statements are prepared before the pipeline is sent, so each goes
//! out in order on its first poll. A finish that is refused or fails rolls
//! the lease back with it (both or neither, as a failed write records
//! nothing); a lease that fails rolls the finish back, which then runs
//! alone.

use super::cursor::Cursors;
use super::dialect::{BEGIN_HOT, PgTx};
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
    /// Nothing: the lease failed and rolled the finish back with it.
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
        .prepare_cached(super::ending::statement())
        .await
        .map_err(store)?;
    client
        .prepare_cached(params.statement())
        .await
        .map_err(store)?;
    let pg = PgTx::new(&client);
    let lease_params = params.get();
    let (begin, applied, rows) = tokio::join!(
        client.batch_execute(BEGIN_HOT),
        end.apply(&pg),
        pg.rows(params.statement(), &lease_params),
    );
    // BEGIN and the two statements went in one round trip; COMMIT or
    // ROLLBACK is the second.
    w.shared.stats.sent(2);
    begin.map_err(store)?;
    // A finish refused (a stale sequence number, say) or failed takes the
    // lease back with it; a lease that failed takes the finish back.
    let rows = match (&applied, rows) {
        (Ok(_), Ok(rows)) => rows,
        (Err(_), _) | (_, Err(_)) => {
            client.batch_execute("ROLLBACK").await.map_err(store)?;
            return match applied {
                Err(fail) => Err(fail.into_error(label)),
                Ok(_) => Ok(Pipelined::Neither),
            };
        }
    };
    client.batch_execute("COMMIT").await.map_err(store)?;
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
