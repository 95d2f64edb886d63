//! The scheduler's way in: [`Fires`] is the `scheduler::FireAdmission`
//! the daemon hands the scheduler's loop (`crate::scheduler`), so a fire
//! is admitted exactly as a request is — as the schedule's owner key as
//! the key ring has it now, or as the daemon for a bundle's schedule.

use std::sync::Arc;

use super::super::AppState;
use super::super::admission::{Submission, admit};
use super::super::auth::Caller;
use super::super::error::ErrorCode;
use crate::access::Principal;
use crate::queue::{JobId, NewJob};
use crate::scheduler::{FireAdmission, FireRefused};

/// Admission for the scheduler's fires.
pub struct Fires(pub AppState);

#[async_trait::async_trait]
impl FireAdmission for Fires {
    async fn submit(&self, owner: Option<&str>, job: NewJob) -> Result<JobId, FireRefused> {
        let state = &self.0;
        let caller = submitter(state, owner).ok_or_else(|| {
            FireRefused::Refused(format!(
                "the API key {:?} that owns the schedule is gone from the keys file; delete the schedule or make it again with another key",
                owner.unwrap_or_default(),
            ))
        })?;
        match admit(state, &caller, Submission::new(job, "bundle")).await {
            Ok((job, _)) => Ok(job.id),
            Err(e) if e.code == ErrorCode::Unavailable || e.code == ErrorCode::Internal => {
                Err(FireRefused::Unavailable(e.message))
            }
            Err(e) => Err(FireRefused::Refused(e.message)),
        }
    }
}

/// Who a schedule's fires are submitted as: its owner key as the key ring
/// now has it, or the daemon for a bundle's schedule.
fn submitter(state: &AppState, owner: Option<&str>) -> Option<Caller> {
    let principal = match owner {
        None => Arc::new(Principal::unrestricted(crate::access::SCHEDULER)),
        Some(name) => state.registry.snapshot().keys.by_name(name)?,
    };
    Some(Caller(principal))
}
