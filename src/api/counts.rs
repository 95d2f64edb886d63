//! `GET /v1/jobs/counts`: how many jobs are in each state, overall and per
//! bundle — the console's state filter and its "needs a person" count.
//! Every state is listed (zero when empty), so a client learns the states
//! this daemon has from the answer. Only what the key may list is counted
//! (the policy's `list_jobs`): its own jobs unless it has `read_all`, and
//! never a bundle outside its globs.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::AppState;
use super::auth::Caller;
use super::error::ApiError;
use crate::access::policy::{Action, Resource};
use crate::queue::JobState;

pub async fn counts(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<Value>, ApiError> {
    // Another key's jobs are counted only for a key that may list them.
    let owner = caller.listing_owner(Action::ListJobs);
    let rows = state.queue.counts_by_state(owner.as_deref()).await?;
    let mut states: BTreeMap<&str, u64> = JobState::ALL.iter().map(|s| (s.as_str(), 0)).collect();
    let mut bundles: BTreeMap<String, BTreeMap<&str, u64>> = BTreeMap::new();
    // Whether the key could list a job of its own of `bundle`: the
    // bundle's globs decide.
    let listed = rows.into_iter().filter(|(bundle, _, _)| {
        caller.allows(
            Action::ListJobs,
            &Resource::owned("job", Some(caller.name()), Some(bundle)),
        )
    });
    for (bundle, job_state, n) in listed {
        *states.entry(job_state.as_str()).or_default() += n;
        *bundles
            .entry(bundle)
            .or_default()
            .entry(job_state.as_str())
            .or_default() += n;
    }
    let total: u64 = states.values().sum();
    Ok(Json(
        json!({"total": total, "states": states, "bundles": bundles}),
    ))
}
