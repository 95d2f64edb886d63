//! A job's budgets at its door: a submitter's limits may only lower the
//! bundle's, and a bundle whose jobs spent its daily budget takes no new
//! job (HTTP 429 naming the budget) until the rolling day frees some.

use std::time::SystemTime;

use super::AppState;
use super::error::{ApiError, ErrorCode};
use crate::queue::NewJob;

/// Refuses a job whose limits raise its bundle's, or whose bundle has used
/// up its daily budget.
pub(super) async fn admit(state: &AppState, job: &NewJob) -> Result<(), ApiError> {
    let snapshot = state.registry.snapshot();
    let Some(loaded) = snapshot.bundle(&job.bundle) else {
        // An unknown bundle is refused elsewhere, naming the loaded ones.
        return Ok(());
    };
    let limits = loaded.bundle.raw.limits.clone();
    if let Some(asked) = &job.limits {
        limits
            .budget()
            .lowered_by(asked)
            .map_err(|e| ApiError::field(ErrorCode::InvalidRequest, "limits", e))?;
    }
    let Some(daily) = &limits.per_day else {
        return Ok(());
    };
    let since = SystemTime::now() - crate::budget::DAY;
    let (tokens, cost) = state.queue.spend_since(&job.bundle, since).await?;
    daily
        .admit(&job.bundle, tokens, cost)
        .map_err(|stop| ApiError::new(ErrorCode::BudgetExhausted, stop.to_string()))
}
