//! A job's budgets at its door: a submitter's limits may only lower the
//! bundle's, and a bundle whose jobs spent its daily budget takes no new
//! job (HTTP 429 naming the budget) until the rolling day frees some.

use std::time::{Duration, SystemTime};

use super::AppState;
use super::error::{ApiError, ErrorCode};
use crate::queue::NewJob;

const DAY: Duration = Duration::from_secs(24 * 60 * 60);

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
    let since = SystemTime::now() - DAY;
    let (tokens, cost) = state.queue.spend_since(&job.bundle, since).await?;
    let over = match (daily.tokens, daily.cost) {
        (Some(limit), _) if tokens >= limit => {
            Some(("tokens", limit.to_string(), tokens.to_string()))
        }
        (_, Some(limit)) if cost >= limit => {
            Some(("cost", limit.to_string(), format!("{cost:.6}")))
        }
        _ => None,
    };
    match over {
        Some((budget, limit, spent)) => Err(ApiError::new(
            ErrorCode::BudgetExhausted,
            format!(
                "bundle {:?} has used its daily budget: limits.per_day.{budget} is {limit} and its jobs of the last 24 hours spent {spent}; retry later, or raise the limit in its bundle.yaml",
                job.bundle
            ),
        )),
        None => Ok(()),
    }
}
