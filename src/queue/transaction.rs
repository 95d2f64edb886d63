//! What one transaction of a dialect can run: the job statements
//! (`statements::JobStatements`), the outbox's (`outbox::OutboxStatements`), the
//! schedules' (`schedules::ScheduleStatements`), the release decisions'
//! (`releases::ReleaseStatements`) and the threads' (`threads::ThreadStatements`).
//! The lifecycle and every operation (`op`) are written over [`Tx`]; each
//! statement set stays beside the rules that use it, and the sets never name
//! one another, so `tx`, `outbox`, `schedules`, `releases` and `threads`
//! import each other in one direction only.
//!
//! A dialect implements the five sets; this trait adds nothing to them.

use super::outbox::OutboxStatements;
use super::releases::ReleaseStatements;
use super::schedules::ScheduleStatements;
use super::statements::JobStatements;
use super::threads::ThreadStatements;

/// Every statement one transaction (or one read connection) of a dialect
/// can run: any type with the five statement sets.
pub(crate) trait Tx:
    JobStatements + OutboxStatements + ScheduleStatements + ReleaseStatements + ThreadStatements
{
}

impl<
    T: JobStatements + OutboxStatements + ScheduleStatements + ReleaseStatements + ThreadStatements,
> Tx for T
{
}
