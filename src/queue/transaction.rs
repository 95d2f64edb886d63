//! What one transaction of a dialect can run: the job statements
//! (`statements::JobStatements`), the outbox's (`outbox::OutboxStatements`), the
//! schedules' (`schedules::ScheduleStatements`), the release decisions'
//! (`releases::ReleaseStatements`), the threads' (`threads::ThreadStatements`) and
//! the items' (`items::ItemStatements`) and the custom assistants'
//! (`assistants::AssistantStatements`).
//! The lifecycle and every operation (`op`) are written over [`Tx`]; each
//! statement set stays beside the rules that use it, and the sets never name
//! one another, so `tx`, `outbox`, `schedules`, `releases`, `threads` and `items`
//! import each other in one direction only (`assistants` too).
//!
//! A dialect implements the seven sets; this trait adds nothing to them.

use super::assistants::AssistantStatements;
use super::items::ItemStatements;
use super::outbox::OutboxStatements;
use super::releases::ReleaseStatements;
use super::schedules::ScheduleStatements;
use super::statements::JobStatements;
use super::threads::ThreadStatements;

/// Every statement one transaction (or one read connection) of a dialect
/// can run: any type with the seven statement sets.
pub(crate) trait Tx:
    JobStatements
    + OutboxStatements
    + ScheduleStatements
    + ReleaseStatements
    + ThreadStatements
    + ItemStatements
    + AssistantStatements
{
}

impl<
    T: JobStatements
        + OutboxStatements
        + ScheduleStatements
        + ReleaseStatements
        + ThreadStatements
        + ItemStatements
        + AssistantStatements,
> Tx for T
{
}
