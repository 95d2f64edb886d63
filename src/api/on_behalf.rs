//! The daemon's own loops' way in: [`Admission`] is the `admit::OnBehalf`
//! the daemon hands the scheduler (its fires) and the workers (an eval
//! run's cases), so a job they submit is admitted exactly as a request is
//! — as the key that owns it, as the key ring has it now, or as the
//! daemon itself (a bundle's schedule, a release gate's eval).

use std::sync::Arc;

use super::AppState;
use super::admission::{Submission, admit};
use super::auth::Caller;
use super::error::ErrorCode;
use crate::access::Principal;
use crate::admit::{NotAdmitted, OnBehalf};
use crate::queue::{JobId, NewJob};

/// The API's admission, for jobs submitted on a key's behalf.
pub struct Admission(pub AppState);

#[async_trait::async_trait]
impl OnBehalf for Admission {
    async fn submit(&self, owner: Option<&str>, job: NewJob) -> Result<JobId, NotAdmitted> {
        let state = &self.0;
        let caller = submitter(state, owner).ok_or_else(|| {
            NotAdmitted::Refused(format!(
                "the API key {:?} the job is submitted as is gone from the keys file; make what submits it (a schedule, an eval run) again with another key",
                owner.unwrap_or_default(),
            ))
        })?;
        match admit(state, &caller, Submission::new(job, "bundle")).await {
            Ok((job, _)) => Ok(job.id),
            Err(e) if e.code == ErrorCode::Unavailable || e.code == ErrorCode::Internal => {
                Err(NotAdmitted::Unavailable(e.message))
            }
            Err(e) if e.code == ErrorCode::QuotaExceeded => Err(NotAdmitted::Throttled(e.message)),
            Err(e) => Err(NotAdmitted::Refused(e.message)),
        }
    }
}

/// Who a job is submitted as: its owner key as the key ring now has it,
/// or the daemon (`owner` `None`, or the daemon's own reserved name: a job
/// the daemon submitted — a release gate's eval — submits its cases as
/// the daemon too; no key can take that name).
fn submitter(state: &AppState, owner: Option<&str>) -> Option<Caller> {
    let principal = match owner {
        None | Some(crate::access::SCHEDULER) => {
            Arc::new(Principal::unrestricted(crate::access::SCHEDULER))
        }
        Some(name) => state.registry.snapshot().keys.by_name(name)?,
    };
    Some(Caller(principal))
}
