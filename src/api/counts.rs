//! `GET /v1/jobs/counts`: how many jobs are in each state, overall and per
//! bundle — the console's state filter and its "needs a person" count.
//! Every state is listed (zero when empty), so a client learns the states
//! this daemon has from the answer. Only what the key may list is counted
//! (the policy's `list_jobs`): its own jobs unless it has `read_all`, and
//! never a bundle outside its globs.

use std::collections::BTreeMap;

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use schemars::JsonSchema;
use serde::Serialize;

use super::AppState;
use super::auth::Caller;
use super::error::ApiError;
use crate::access::policy::{Action, Resource};
use crate::queue::JobState;

/// How many jobs are in each state.
#[derive(Debug, Serialize, JsonSchema)]
pub struct JobCounts {
    /// Every job the key may list.
    pub total: u64,
    /// Jobs by state; every state is listed, zero when empty.
    pub states: BTreeMap<&'static str, u64>,
    /// Jobs by bundle, then by state (the states that have jobs).
    pub bundles: BTreeMap<String, BTreeMap<&'static str, u64>>,
}

/// `GET /v1/jobs/counts` in the API document.
pub(super) fn counts_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    op.summary(
        "How many jobs are in each state, overall and per bundle (every state listed, zero \
         when empty)",
    )
    .response_with::<200, Json<JobCounts>, _>(|r| r.description("The counts"))
}

pub async fn counts(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<JobCounts>, ApiError> {
    // Another key's jobs are counted only for a key that may list them.
    let owner = caller.listing_owner(Action::ListJobs);
    let rows = state.queue.counts_by_state(owner.as_deref()).await?;
    let mut states: BTreeMap<&'static str, u64> =
        JobState::ALL.iter().map(|s| (s.as_str(), 0)).collect();
    let mut bundles: BTreeMap<String, BTreeMap<&'static str, u64>> = BTreeMap::new();
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
    Ok(Json(JobCounts {
        total,
        states,
        bundles,
    }))
}
