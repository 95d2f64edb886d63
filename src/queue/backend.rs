//! What a backend provides to the one [`JobQueue`] (`driver.rs`'s `Queue`):
//! the [`Driver`] trait, which SQLite's and PostgreSQL's drivers implement —
//! run an operation durably, the hot path's cheaper ways where a backend
//! has them, a read, and the handle's wake-ups.

use std::future::Future;

use super::op::{self, FinishAndLease, LeaseJobs, Read, Write};
use super::tx::Wakeups;
use super::*;

/// What a backend provides: a way to run an operation durably (`write`:
/// its own transaction, or a share of SQLite's group commit, answered once
/// committed and announced), cheaper ways for a job's hot path where it
/// has them, and a way to read.
pub(crate) trait Driver: Send + Sync + 'static {
    /// Runs `op` in a transaction; answers once it committed and its changes
    /// were announced.
    fn write<O: Write>(&self, op: O) -> impl Future<Output = Result<O::Output, QueueError>> + Send;
    /// Runs a finish and its worker slot's next lease in one transaction
    /// (see [`FinishAndLease`]); answers as `write`.
    fn finish_and_lease(
        &self,
        op: FinishAndLease,
    ) -> impl Future<Output = Result<(Finished, Vec<Lease>), QueueError>> + Send;
    /// A submit, a write like any other unless the backend has a cheaper
    /// way (PostgreSQL: one statement for a plain job, see
    /// `postgres::submit`).
    fn submit(
        &self,
        op: op::Submit,
    ) -> impl Future<Output = Result<(Job, bool), QueueError>> + Send {
        self.write(op)
    }
    /// The operations of a job's hot path, each a write like any other
    /// unless the backend has a cheaper way (PostgreSQL: one statement
    /// each, see `postgres::hot`).
    fn lease(&self, op: LeaseJobs) -> impl Future<Output = Result<Vec<Lease>, QueueError>> + Send {
        self.write(op)
    }
    fn heartbeat(
        &self,
        op: op::Heartbeat,
    ) -> impl Future<Output = Result<HeartbeatReply, QueueError>> + Send {
        self.write(op)
    }
    fn record_steps(
        &self,
        op: op::RecordSteps,
    ) -> impl Future<Output = Result<(), QueueError>> + Send {
        self.write(op)
    }
    fn finish(&self, op: op::Finish) -> impl Future<Output = Result<Finished, QueueError>> + Send {
        self.write(op)
    }
    fn release(
        &self,
        op: op::Release,
    ) -> impl Future<Output = Result<Finished, QueueError>> + Send {
        self.write(op)
    }
    /// Runs a read outside any write.
    fn read<O: Read>(&self, op: O) -> impl Future<Output = Result<O::Output, QueueError>> + Send;
    /// Checks that the store answers.
    fn ping(&self) -> impl Future<Output = Result<(), QueueError>> + Send;
    /// The store, as errors name it.
    fn label(&self) -> &str;
    /// This handle's wake-ups (fed at commit, and by other daemons where
    /// the store is shared).
    fn wakeups(&self) -> &Wakeups;
    fn write_counts(&self) -> WriteCounts;
}
