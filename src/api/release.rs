//! `POST /v1/bundles/{name}/promote` and `…/reject`: the operator's word
//! on a version the release gate holds (`crate::release`). Promote serves
//! it from the reload the answer waits for (a rejected candidate too: the
//! operator overrides its eval); reject keeps it held, the version before
//! it serving, and its eval is not run again. Either is recorded like the
//! gate's own decision — a daemon event, a metric, a log line — with the
//! key that made it.

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::AppState;
use super::auth::Caller;
use super::body::{JsonBody, Path};
use super::document::answers;
use super::error::{ApiError, ErrorCode};
use crate::access::policy::Action;
use crate::queue::Replaces;
use crate::registry::ReleaseVerdict;
use crate::release::{Recorder, Ruling};

/// The body of a promote or a reject.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseRequest {
    /// The held version.
    pub version: String,
    /// Why (recorded with the decision).
    #[serde(default)]
    pub reason: Option<String>,
}

/// What a promote or a reject answers.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Released {
    pub bundle: String,
    pub version: String,
    /// `promoted` or `rejected`.
    pub verdict: &'static str,
    /// The version serving after the reload the decision asked for.
    pub serving: Option<String>,
}

/// `POST /v1/bundles/{name}/promote` in the API document.
pub(super) fn promote_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    documented(
        op.summary("Serve a version the release gate holds")
            .description(
                "The operator's override of the release gate: the held version (under \
                 evaluation, or rejected by its eval) serves from the reload the answer waits \
                 for. Recorded with the key that promoted it.",
            ),
    )
}

/// `POST /v1/bundles/{name}/reject` in the API document.
pub(super) fn reject_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    documented(
        op.summary("Keep a version the release gate holds from serving")
            .description(
                "The held version stays a candidate, the version before it serving; its eval \
                 is not run again. Dropping another version into the directory replaces it.",
            ),
    )
}

fn documented(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op.response_with::<200, Json<Released>, _>(|r| r.description("Decided and applied"));
    answers(
        op,
        &[
            (404, "No bundle by that name the key may use"),
            (
                409,
                "The gate holds no such version of the bundle (the message names the one it holds)",
            ),
            (
                500,
                "The decision cannot be recorded in the state directory",
            ),
        ],
    )
}

// `promote` and `reject` repeat their extractors: axum routes a handler, so
// each verdict is a function of its own around the one `decide`.
pub async fn promote(
    state: State<AppState>,
    caller: Caller,
    name: Path<String>,
    body: JsonBody<ReleaseRequest>,
) -> Result<Json<Released>, ApiError> {
    decide(state, caller, name, body, ReleaseVerdict::Promoted).await
}

pub async fn reject(
    state: State<AppState>,
    caller: Caller,
    name: Path<String>,
    body: JsonBody<ReleaseRequest>,
) -> Result<Json<Released>, ApiError> {
    decide(state, caller, name, body, ReleaseVerdict::Rejected).await
}

async fn decide(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    JsonBody(request): JsonBody<ReleaseRequest>,
    verdict: ReleaseVerdict,
) -> Result<Json<Released>, ApiError> {
    caller
        .on_bundle(Action::ReleaseBundle, &name, "name")
        .map_err(|e| e.bundle_in_path("name"))?;
    let snapshot = state.registry.snapshot();
    let entry = snapshot.bundles.get(&name).ok_or_else(|| {
        ApiError::field(
            ErrorCode::UnknownBundle,
            "name",
            format!("no loaded bundle named {name:?}"),
        )
        .bundle_in_path("name")
    })?;
    let held = entry
        .candidate
        .as_ref()
        .filter(|c| c.loaded.version() == request.version)
        .ok_or_else(|| not_held(&name, &request.version, entry))?;
    let serving = entry
        .current
        .as_ref()
        .map(|c| c.version().to_string())
        .unwrap_or_default();
    let word = verdict.as_str();
    let ruling = Ruling {
        verdict,
        by: caller.name().to_string(),
        reason: request
            .reason
            .unwrap_or_else(|| format!("{word} by the operator's key {}", caller.name())),
        eval_job: None,
        replaces: Replaces::Any,
    };
    let recorder = Recorder {
        queue: state.queue.clone(),
        registry: state.registry.clone(),
        reloads: state.reloads.clone(),
        bus: state.bus.clone(),
    };
    recorder
        .record(&held.loaded, &serving, ruling)
        .await
        .map_err(|e| {
            ApiError::internal(format!(
                "the decision about bundle {name:?} version {} cannot be recorded: {e}",
                request.version
            ))
        })?;
    Ok(Json(Released {
        bundle: name.clone(),
        version: request.version,
        verdict: word,
        serving: state
            .registry
            .snapshot()
            .bundle(&name)
            .map(|b| b.version().to_string()),
    }))
}

/// The 409 for a version the gate does not hold, naming the one it does.
fn not_held(name: &str, version: &str, entry: &crate::registry::BundleEntry) -> ApiError {
    let holds = match &entry.candidate {
        Some(c) => format!("it holds version {}", c.loaded.version()),
        None => "it holds no version of it".to_string(),
    };
    ApiError::field(
        ErrorCode::InvalidState,
        "version",
        format!(
            "the release gate does not hold version {version:?} of bundle {name:?}: {holds} (only a held version is promoted or rejected; a bundle without `release:` serves every version at once)"
        ),
    )
}
