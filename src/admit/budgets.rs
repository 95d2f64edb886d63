//! A job's budgets at its door: a submitter's limits may only lower the
//! bundle's, and the daily budgets the job is queued under — its key's
//! `per_day`, its bundle's `limits.per_day` — go with it to the queue with
//! the most it may spend. The queue reserves the job's share in the write
//! that queues it (`budget::reserve`), so concurrent submits cannot
//! overrun a day; a day with nothing left is the queue's refusal, not this.

use super::refusal::Refusal;
use crate::access::Principal;
use crate::budget::{DailyBudgets, JobMax};
use crate::queue::NewJob;
use crate::registry::Snapshot;

/// The daily budgets `job`, submitted by `key`, is queued under (`None`
/// when neither the key nor the bundle has one, or the bundle is not
/// loaded), after refusing limits that raise the bundle's.
pub fn daily_budgets(
    snapshot: &Snapshot,
    key: &Principal,
    job: &NewJob,
) -> Result<Option<DailyBudgets>, Refusal> {
    let Some(loaded) = snapshot.bundle(&job.bundle) else {
        return Ok(None);
    };
    let section = &loaded.bundle.raw.limits;
    let limits = match &job.limits {
        Some(asked) => section.budget().lowered_by(asked)?,
        None => section.budget(),
    };
    if key.per_day.is_none() && section.per_day.is_none() {
        return Ok(None);
    }
    Ok(Some(DailyBudgets {
        key: key.per_day.clone(),
        bundle: section.per_day.clone(),
        max: JobMax::from(&limits),
    }))
}
