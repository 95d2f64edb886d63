//! What one transaction of a dialect can run: the job statements
//! (`statements::JobStatements`), the outbox's (`outbox::OutboxStatements`), the
//! schedules' (`schedules::ScheduleStatements`), the release decisions'
//! (`releases::ReleaseStatements`), the threads' (`threads::ThreadStatements`) and
//! the items' (`items::ItemStatements`).
//! The lifecycle and every operation (`op`) are written over [`Tx`]; each
//! statement set stays beside the rules that use it, and the sets never name
//! one another, so `tx`, `outbox`, `schedules`, `releases`, `threads` and `items`
//! import each other in one direction only.
//!
//! A dialect implements the six sets; this trait adds nothing to them.

use super::items::ItemStatements;
use super::outbox::OutboxStatements;
use super::releases::ReleaseStatements;
use super::schedules::ScheduleStatements;
use super::statements::JobStatements;
use super::threads::ThreadStatements;

/// Every statement one transaction (or one read connection) of a dialect
/// can run: any type with the six statement sets.
pub(crate) trait Tx:
    JobStatements
    + OutboxStatements
    + ScheduleStatements
    + ReleaseStatements
    + ThreadStatements
    + ItemStatements
{
}

impl<
    T: JobStatements
        + OutboxStatements
        + ScheduleStatements
        + ReleaseStatements
        + ThreadStatements
        + ItemStatements,
> Tx for T
{
}
