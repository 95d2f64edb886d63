//! A job's budgets at its door (called by `admission`): a submitter's
//! limits may only lower the bundle's, and a bundle whose jobs spent its
//! daily budget takes no new job (HTTP 429 naming the budget, with
//! `Retry-After`) until the rolling day frees some. The same rule of a
//! day's spend serves an API key's own `per_day`.

use std::time::{Duration, SystemTime};

use super::AppState;
use super::error::{ApiError, ErrorCode};
use crate::budget::{BudgetLimits, DailyLimits};

const DAY: Duration = Duration::from_secs(24 * 60 * 60);

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

/// Which daily limit `tokens` and `cost` reached, if any: (budget, limit,
/// spent) as people read them.
pub(super) fn day_left(
    daily: &DailyLimits,
    tokens: u64,
    cost: f64,
) -> Result<(), (&'static str, String, String)> {
    match (daily.tokens, daily.cost) {
        (Some(limit), _) if tokens >= limit => {
            Err(("tokens", limit.to_string(), tokens.to_string()))
        }
        (_, Some(limit)) if cost >= limit => Err(("cost", limit.to_string(), format!("{cost:.6}"))),
        _ => Ok(()),
    }
}

/// Refuses a job of a bundle that has used up its daily budget.
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
    let (tokens, cost) = state
        .queue
        .spend_since(bundle, SystemTime::now() - DAY)
        .await?;
    day_left(&daily, tokens, cost).map_err(|(budget, limit, spent)| {
        ApiError::new(
            ErrorCode::BudgetExhausted,
            format!(
                "bundle {bundle:?} has used its daily budget: limits.per_day.{budget} is {limit} and its jobs of the last 24 hours spent {spent}; retry later, or raise the limit in its bundle.yaml"
            ),
        )
        .retry_after(RETRY_AFTER_SPENT.as_secs())
    })
}
