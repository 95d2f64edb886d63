//! A job's budgets at its door (called by `admission`): a submitter's
//! limits may only lower the bundle's, and a bundle whose jobs spent its
//! daily budget takes no new job (HTTP 429 naming the budget, with
//! `Retry-After`) until the rolling day frees some. The comparison itself is
//! `budget::DailyLimits`'s, shared with nested runs and API keys.

use std::time::{Duration, SystemTime};

use super::AppState;
use super::error::{ApiError, ErrorCode};
use crate::budget::BudgetLimits;

/// When a client refused for a spent daily budget should ask again: the
/// rolling day frees spend as old jobs age out of it.
pub(super) const RETRY_AFTER_SPENT: Duration = Duration::from_secs(60);

/// Refuses limits that raise the bundle's.
pub(super) fn lowered(
    state: &AppState,
    bundle: &str,
    asked: &BudgetLimits,
) -> Result<(), ApiError> {
    let snapshot = state.registry.snapshot();
    let Some(loaded) = snapshot.bundle(bundle) else {
        return Ok(());
    };
    loaded
        .bundle
        .raw
        .limits
        .budget()
        .lowered_by(asked)
        .map(|_| ())
        .map_err(|e| ApiError::field(ErrorCode::InvalidRequest, "limits", e))
}

/// Refuses a job of a bundle that has used up its daily budget (its jobs'
/// and its nested runs' spend).
pub(super) async fn bundle_day(state: &AppState, bundle: &str) -> Result<(), ApiError> {
    let daily = {
        let snapshot = state.registry.snapshot();
        let Some(loaded) = snapshot.bundle(bundle) else {
            return Ok(());
        };
        match &loaded.bundle.raw.limits.per_day {
            Some(daily) => daily.clone(),
            None => return Ok(()),
        }
    };
    let since = SystemTime::now() - crate::budget::DAY;
    let (tokens, cost) = state.queue.spend_since(bundle, since).await?;
    daily.admit(bundle, tokens, cost).map_err(|stop| {
        ApiError::new(ErrorCode::BudgetExhausted, stop.to_string())
            .retry_after(RETRY_AFTER_SPENT.as_secs())
    })
}
