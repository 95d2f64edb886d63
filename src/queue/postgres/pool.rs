//! Writes on a pool of connections: each write runs on a pooled connection
//! of its own, as soon as one is free, and PostgreSQL groups the commits of
//! concurrent writes itself (one WAL flush carries every commit waiting for
//! it). No transaction waits for a group to fill, and no savepoint wraps a
//! write.
//!
//! The operations of a job's hot path (lease, journal steps, heartbeat,
//! finish, release) are one statement each (`hot`, `ending`); a plain
//! submit and a journal step go in the next group commit
//! ([`Writes::grouped`], `group`: the writes waiting while a group runs
//! share the next one's transaction), a finish and its slot's next lease
//! go together in the next settle group, with other slots' (`settle`); every other write runs here in a short transaction
//! of its own ([`Writes::transaction`]): `BEGIN`, its statements, `COMMIT`.
//! Once a write committed its changes wake this handle's subscribers and
//! go to the notifier, which announces them to the other daemons (`notify`:
//! not inside the write, whose commit would then wait for every other
//! notifying commit). A write holds only its own rows' locks, taken in one
//! order inside it (see `op`), so no two writes
//! wait for each other in a cycle; one the database gives up all the same
//! (a deadlock or serialization failure) runs again, and its caller never
//! hears of it.
//!
//! The writes waiting for a connection are bounded ([`BACKLOG`]): past it a
//! submit is refused at once (`QueueError::Busy`, a 503) and the writes of
//! running jobs wait for room, as they drain it.

use std::sync::Arc;

use deadpool_postgres::{Object, Pool};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_postgres::Row;

use super::group::{Group, Params, Singles};
use super::listen::Sinks;
use super::notify::Notifier;
use super::transaction::PgTx;
use super::{PostgresOptions, pool_error};
use crate::queue::op::Operation;
use crate::queue::tx::{Change, Fail, Res};
use crate::queue::{JobId, QueueError, WriteStats};

/// Writes waiting for a connection at most; past it a submit is refused
/// (`QueueError::Busy`) and other writes wait for room.
pub(super) const BACKLOG: usize = 1024;

/// Times the database may give one write up to break a conflict (a
/// deadlock or serialization failure) before its caller hears of it.
const MAX_CONFLICTS: u32 = 10;

/// How long a write the database gave up waits before it runs again: a
/// few milliseconds, jittered and growing with each conflict, so the
/// transaction that won the lock takes the rows it was waiting for first.
/// Run again at once, the write can take a row back before the winner's
/// waiting statement does and close the same cycle a second time.
fn conflict_pause(conflicts: u32) -> std::time::Duration {
    use rand::Rng as _;
    let base_ms = 5u64 << conflicts.min(6);
    std::time::Duration::from_millis(rand::rng().random_range(base_ms / 2..=base_ms))
}

/// What every write needs of its queue handle.
pub(super) struct Shared {
    pub pool: Pool,
    pub options: PostgresOptions,
    pub label: String,
    pub sinks: Sinks,
    pub notifier: Notifier,
    pub stats: Arc<WriteStats>,
}

impl Shared {
    /// A driver error of this handle's store, as callers hear it.
    pub(super) fn store(&self, e: &tokio_postgres::Error) -> QueueError {
        QueueError::Store {
            path: self.label.clone(),
            detail: super::describe(e),
        }
    }

    /// Tells this handle's subscribers about a committed write's changes
    /// and has them announced to the other daemons; counts the write.
    pub(super) fn committed(&self, changes: &[(Change, JobId)]) {
        self.stats.count(1);
        self.announce(changes);
    }

    /// [`Shared::committed`] for a write whose group counted its commit.
    pub(super) fn announce(&self, changes: &[(Change, JobId)]) {
        self.sinks.wake.publish_all(changes);
        self.notifier.send(changes);
    }
}

/// The writes of one queue handle.
pub(super) struct Writes {
    pub(super) shared: Shared,
    waiting: Arc<Semaphore>,
    group: Arc<Group<Singles>>,
}

impl Writes {
    pub(super) fn new(shared: Shared) -> Self {
        Self {
            shared,
            waiting: Arc::new(Semaphore::new(BACKLOG)),
            group: Arc::new(Group::new(Singles, super::group::MAX_WRITES)),
        }
    }

    /// Runs a one-statement write in the next group commit (see `group`):
    /// its rows once committed. The caller announces its changes with
    /// [`Shared::announce`] (the group counted the commit).
    pub(super) async fn grouped(&self, sql: &'static str, params: Params) -> Res<Vec<Row>> {
        self.group
            .single(&self.shared.pool, &self.shared.stats, sql, params)
            .await
    }

    /// A place among the writes waiting for a connection: at once or
    /// refused when `refused_when_busy` (new work), else when one frees.
    pub(super) async fn admit(
        &self,
        refused_when_busy: bool,
    ) -> Result<OwnedSemaphorePermit, QueueError> {
        let busy = || QueueError::Busy {
            store: self.shared.label.clone(),
            waiting: BACKLOG,
        };
        if refused_when_busy {
            return self.waiting.clone().try_acquire_owned().map_err(|_| busy());
        }
        // The semaphore is never closed.
        self.waiting
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| busy())
    }

    /// A pooled connection.
    pub(super) async fn client(&self) -> Result<Object, QueueError> {
        self.shared
            .pool
            .get()
            .await
            .map_err(|e| pool_error(&self.shared.options, e))
    }

    /// Runs `op` in a transaction of its own on a pooled connection;
    /// answers once committed. The caller
    /// holds its place ([`Writes::admit`]). A conflict runs it again.
    pub(super) async fn transaction<O: Operation>(&self, op: &O) -> Result<O::Output, QueueError> {
        let mut conflicts = 0;
        loop {
            let mut client = self.client().await?;
            match self.once(&mut client, op).await {
                Ok(out) => return Ok(out),
                Err(Fail::Conflict(detail)) if conflicts < MAX_CONFLICTS => {
                    conflicts += 1;
                    tracing::warn!(
                        queue = %self.shared.label,
                        write = O::NAME,
                        error = %detail,
                        "the database gave a write up to break a lock conflict; it runs again"
                    );
                    tokio::time::sleep(conflict_pause(conflicts)).await;
                }
                Err(fail) => return Err(fail.into_error(&self.shared.label)),
            }
        }
    }

    async fn once<O: Operation>(&self, client: &mut Object, op: &O) -> Res<O::Output> {
        let shared = &self.shared;
        let tx = client.transaction().await?;
        let mut pg = PgTx::new(&tx);
        let ran = op.run(&mut pg).await;
        // BEGIN and COMMIT (or ROLLBACK), and what the write sent.
        shared.stats.sent(2 + pg.statements());
        let out = match ran {
            Ok(out) => out,
            Err(fail) => {
                // At once, so the row locks are freed (a broken connection
                // ends the transaction anyway).
                let _ = tx.rollback().await;
                return Err(fail);
            }
        };
        let changes = std::mem::take(&mut pg.changes);
        tx.commit().await?;
        shared.committed(&changes);
        Ok(out)
    }
}
