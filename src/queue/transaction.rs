//! What one transaction of a dialect can run: the job statements
//! (`statements::JobStatements`), the outbox's (`outbox::OutboxStatements`) and the
//! schedules' (`schedules::ScheduleStatements`). The lifecycle and every
//! operation (`op`) are written over [`Tx`]; each statement set stays beside
//! the rules that use it, and the sets never name one another, so `tx`,
//! `outbox` and `schedules` import each other in one direction only.
//!
//! A dialect implements the three sets; this trait adds nothing to them.

use super::outbox::OutboxStatements;
use super::schedules::ScheduleStatements;
use super::statements::JobStatements;

/// Every statement one transaction (or one read connection) of a dialect
/// can run: any type with the three statement sets.
pub(crate) trait Tx: JobStatements + OutboxStatements + ScheduleStatements {}

impl<T: JobStatements + OutboxStatements + ScheduleStatements> Tx for T {}
