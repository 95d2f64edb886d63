//! One type per queue operation, as River's driver interface takes one
//! params struct per operation and answers with its own result type: each
//! struct owns what the operation needs (so it can cross to a writer thread
//! or task), names its answer ([`Operation::Output`]) and runs its rule in
//! `lifecycle` (or `decisions`, `reads`, `outbox`, `schedules`,
//! `versions`, `threads`), written once for every dialect over any [`Tx`]. The
//! operations are in `jobs.rs`, `schedule.rs`, `delivery.rs`,
//! `release.rs`, `thread.rs` and `queries.rs`; this file holds what they are. A backend's driver runs any of them
//! without knowing what they do, and a caller gets exactly the answer type
//! its operation names: a wrong one does not compile.
//!
//! Writes ([`Write`]) say whether a full backlog refuses them; reads
//! ([`Read`]) run outside any write. A driver's `read` takes only a `Read`
//! and its `write` only a `Write`, so a write cannot slip out of its
//! transaction. A finish and the worker slot's next lease
//! ([`FinishAndLease`]) is neither: it is a write in two parts that a
//! driver may run apart (PostgreSQL: the finish, then the lease, each one
//! statement), and drivers take it through a method of its own.
//!
//! A write that locks several rows takes them in one order inside itself
//! (a submit under daily budgets the budgets' one lock first, then a
//! batch's conversations, then its idempotency keys, sorted; a job's row
//! before its events, journal and deliveries), and no write holds another's
//! locks (each is its own transaction on PostgreSQL), so concurrent writes
//! do not wait for each other in a cycle.

/// Declares one operation: its struct as written, then the frame every
/// operation repeats — its [`Operation`] impl (the answer, the name, and
/// the rule over the operation and `tx`) and its [`Read`] or
/// [`Write`] impl, `write(FLAG, …)` setting those of the write's flags
/// that are `true`. Each operation still names its own input, answer and
/// rule; the frame is written once.
macro_rules! operation {
    (@side read $name:ident) => {
        impl Read for $name {}
    };
    (@side write $name:ident $($flag:ident),*) => {
        impl Write for $name {
            $(const $flag: bool = true;)*
        }
    };
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident $fields:tt
        $side:ident $(($($flag:ident),*))? $op_name:literal -> $output:ty =
            |$op:pat, $tx:ident| $rule:expr;
    ) => {
        $(#[$meta])*
        $vis struct $name $fields

        impl Operation for $name {
            type Output = $output;
            const NAME: &'static str = $op_name;
            async fn run<T: Tx>(&self, $tx: &mut T) -> Res<$output> {
                let $op = self;
                $rule
            }
        }

        operation!(@side $side $name $($($flag),*)?);
    };
}

mod assistant;
mod delivery;
mod item;
mod jobs;
mod queries;
mod release;
mod schedule;
mod thread;

pub(crate) use assistant::*;
pub(crate) use delivery::*;
pub(crate) use item::*;
pub(crate) use jobs::*;
pub(crate) use queries::*;
pub(crate) use release::*;
pub(crate) use schedule::*;
pub(crate) use thread::*;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::lifecycle::{self, Ending, LeaseAsk, Pinner};
use super::outbox::{
    self, Delivery, DeliveryFilter, DeliveryPage, DeliveryResult, Redrive, Settled,
};
use super::releases::{self, Replaces, StoredRelease};
use super::schedules::{self, FireRecord, StoredSchedule};
use super::transaction::Tx;
use super::tx::{Conversation, Pin, Res};
use super::*;

/// A queue operation: its parameters, owned, and the rule that runs it.
pub(crate) trait Operation: Send + Sync + 'static {
    /// What the operation answers.
    type Output: Send + 'static;
    /// Its name, for errors and logs.
    const NAME: &'static str;
    /// Runs the rule inside `tx` (the backend opened it and commits it). It
    /// borrows the operation, so a write the database gave up on
    /// (`Fail::Conflict`) can run again. The future is `Send` for every
    /// dialect, so a writer task can carry operations of any type.
    fn run<T: Tx>(&self, tx: &mut T) -> impl Future<Output = Res<Self::Output>> + Send;
}

/// An operation that writes: run in a transaction of its own (or, on
/// SQLite, a share of the writer's batch) and answered once committed.
pub(crate) trait Write: Operation {
    /// Whether a full write backlog refuses it (`QueueError::Busy`) rather
    /// than making it wait for room: only new work is refused; the writes
    /// of jobs already running (leases, heartbeats, outcomes, journal
    /// steps) and operators' decisions wait, because they are what drains
    /// the backlog.
    const REFUSED_WHEN_BUSY: bool = false;
    /// Whether it may queue a job at a place the leases have passed (put
    /// back with its old `run_at`, or new with one in the past): a store
    /// whose leases start where they last leased (PostgreSQL's cursors)
    /// then looks from every key's head at its next lease.
    const MAY_QUEUE_BEHIND: bool = false;
}

/// An operation that only reads: one statement or a few, no rule, outside
/// any write.
pub(crate) trait Read: Operation {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only new work is refused by a full backlog.
    #[test]
    fn only_submits_are_refused_when_busy() {
        const REFUSED: [bool; 4] = [
            Submit::REFUSED_WHEN_BUSY,
            SubmitMany::REFUSED_WHEN_BUSY,
            Finish::REFUSED_WHEN_BUSY,
            LeaseJobs::REFUSED_WHEN_BUSY,
        ];
        assert_eq!(REFUSED, [true, true, false, false]);
    }
}
