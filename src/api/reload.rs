//! `POST /v1/reload`: every input reloaded now (as SIGHUP does), answered
//! with how the reload ended and what changed.

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use schemars::JsonSchema;
use serde::Serialize;

use super::AppState;
use super::auth::Caller;
use super::document::{answers, or_reload_key};
use super::error::{ApiError, ErrorCode};
use crate::events::daemon::{
    BundleCounts, Change, InputKind, KindChanges, ReloadOutcome, ReloadResult, ReloadTrigger,
};

/// What `POST /v1/reload` answers: how the reload ended and what changed.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ReloadReport {
    /// The snapshot generation now serving (unchanged when rejected).
    generation: u64,
    result: ReloadResult,
    trigger: ReloadTrigger,
    /// The bundles added, changed and removed (`changes` has every kind).
    added: Vec<String>,
    changed: Vec<String>,
    removed: Vec<String>,
    /// Bundles whose last edit failed (they keep their last good version,
    /// or are not served at all).
    failed: Vec<String>,
    /// Every error, located (file:line: key: message).
    errors: Vec<String>,
    /// Added / changed / removed, per kind of input (empty when rejected).
    changes: Vec<KindChanges>,
    /// What the registry serves after it, by status.
    bundles: BundleCounts,
}

impl From<&ReloadOutcome> for ReloadReport {
    fn from(outcome: &ReloadOutcome) -> Self {
        let bundles = |change| outcome.names(InputKind::Bundle, change).to_vec();
        Self {
            generation: outcome.generation,
            result: outcome.result,
            trigger: outcome.trigger,
            added: bundles(Change::Added),
            changed: bundles(Change::Changed),
            removed: bundles(Change::Removed),
            failed: outcome.failed.clone(),
            errors: outcome.errors.clone(),
            changes: outcome.changes.clone(),
            bundles: outcome.bundles,
        }
    }
}

/// Reloads every input now and answers with the outcome: 200 when applied
/// or partially applied (the failed bundles named), 422 when rejected.
pub(super) async fn reload(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<(StatusCode, Json<ReloadReport>), ApiError> {
    tracing::info!(by = caller.name(), "reload asked for over the API");
    let Some(outcome) = state.reloads.reload(ReloadTrigger::Api).await else {
        return Err(ApiError::new(
            ErrorCode::Unavailable,
            "the daemon is shutting down",
        ));
    };
    let status = if outcome.result == ReloadResult::Rejected {
        StatusCode::UNPROCESSABLE_ENTITY
    } else {
        StatusCode::OK
    };
    Ok((status, Json(ReloadReport::from(outcome.as_ref()))))
}

/// `POST /v1/reload` in the API document.
pub(super) fn reload_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Reload bundles, model configs, plugins and keys now (like SIGHUP)")
        .description(
            "Takes an API key with the `reload` scope, or the control file's reload key in its \
             header (a local operator applying an edit of the keys themselves).",
        )
        .response_with::<200, Json<ReloadReport>, _>(|r| {
            r.description("Applied, or partially applied: the failed bundles named")
        })
        .response_with::<422, Json<ReloadReport>, _>(|r| {
            r.description("Rejected: nothing changed, the last good state keeps serving")
        });
    answers(
        or_reload_key(op),
        &[(
            503,
            "The daemon is shutting down; Retry-After says when to try again",
        )],
    )
}
