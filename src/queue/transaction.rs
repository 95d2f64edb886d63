//! What one transaction of a dialect can run: the job statements
//! (`statements::JobStatements`), the outbox's (`outbox::OutboxStatements`), the
//! schedules' (`schedules::ScheduleStatements`) and the release decisions'
//! (`releases::ReleaseStatements`). The lifecycle and every operation
//! (`op`) are written over [`Tx`]; each statement set stays beside the rules
//! that use it, and the sets never name one another, so `tx`, `outbox`,
//! `schedules` and `releases` import each other in one direction only.
//!
//! A dialect implements the four sets; this trait adds nothing to them.

use super::outbox::OutboxStatements;
use super::releases::ReleaseStatements;
use super::schedules::ScheduleStatements;
use super::statements::JobStatements;

/// Every statement one transaction (or one read connection) of a dialect
/// can run: any type with the four statement sets.
pub(crate) trait Tx:
    JobStatements + OutboxStatements + ScheduleStatements + ReleaseStatements
{
}

impl<T: JobStatements + OutboxStatements + ScheduleStatements + ReleaseStatements> Tx for T {}
