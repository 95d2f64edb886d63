//! `GET /v1/bundles` and `GET /v1/bundles/{name}`.

use std::path::PathBuf;

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::AppState;
use super::auth::Caller;
use super::body::Path;
use super::error::{ApiError, ErrorCode};
use crate::access::policy::{Action, Resource};
use crate::bundle::schema::LimitsSection;
use crate::registry::{BundleEntry, BundleStatus};

/// The bundles a key may use.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Bundles {
    /// The registry's generation these were read from (each reload that
    /// changes something adds one).
    pub generation: u64,
    pub bundles: Vec<BundleView>,
    /// Directories that never loaded.
    pub rejected: Vec<BundleView>,
}

/// A bundle as the registry has it: its status, the version serving, and
/// what its last failed load said.
#[derive(Debug, Serialize, JsonSchema)]
pub struct BundleView {
    pub name: String,
    pub status: BundleStatus,
    pub dir: PathBuf,
    /// The version serving (`None` when none ever loaded).
    pub version: Option<String>,
    pub description: Option<String>,
    /// RFC 3339 UTC.
    pub loaded_at: Option<String>,
    /// The binding's identity: content and everything it was bound with.
    pub digest: Option<String>,
    /// The digest of the bundle's files alone.
    pub content_digest: Option<String>,
    /// The errors of the last failed load, located (file:line: key: message).
    pub errors: Vec<String>,
    pub last_error: Option<String>,
    /// A new version the release gate holds (the bundle's `release:`):
    /// loaded, not serving, until its evals pass or an operator promotes it.
    pub candidate: Option<CandidateView>,
    /// With `GET /v1/bundles/{name}`: the limits, the model and the tools.
    #[serde(flatten)]
    pub detail: Option<BundleDetail>,
}

/// A version the release gate holds.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CandidateView {
    pub version: String,
    pub digest: String,
    /// `evaluating` (its eval is due or running), `canary` (its evals
    /// passed and it takes a share of new jobs while the gate watches),
    /// `rejected` (it stays held; `reason` says why).
    pub state: &'static str,
    pub reason: Option<String>,
    /// Who decided: `gate` or an operator's key.
    pub by: Option<String>,
    /// The eval job that decided (`GET /v1/jobs/{id}`: its report).
    pub eval_job: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct BundleDetail {
    pub limits: LimitsSection,
    pub model: ModelView,
    pub tools: Vec<ToolView>,
    /// The tools a verify answers by stand-ins unless it asks for
    /// `real_tools`: what really runs then, side effects and all, many
    /// times (the others, `read_only`, run in either mode).
    pub verify_stand_ins: Vec<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ModelView {
    pub endpoint: String,
    pub name: String,
    pub plugin: String,
}

/// A tool the model may call.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ToolView {
    pub name: String,
    /// Its backend: `process`, `http`, `mcp`, `plugin`, `agent`, ….
    pub kind: &'static str,
    /// What repeating a call does: `pure`, `idempotent` or `unsafe`.
    pub effect: &'static str,
    pub description: String,
    /// The JSON Schema of its arguments.
    pub parameters: Value,
    /// The rule that asks a person before a call, when one does.
    pub approval: Option<String>,
}

fn describe(entry: &BundleEntry, detailed: bool) -> BundleView {
    let current = entry.current.as_ref();
    let detail = current.filter(|_| detailed).map(|b| BundleDetail {
        limits: b.bundle.raw.limits.clone(),
        model: ModelView {
            endpoint: b.bundle.raw.model.endpoint.clone(),
            name: b.bundle.raw.model.name.clone(),
            plugin: b.bundle.raw.model.plugin.clone(),
        },
        tools: b
            .tools
            .schemas()
            .iter()
            .map(|s| ToolView {
                name: s.name.clone(),
                kind: b.tools.tool(&s.name).map_or("unknown", |t| t.kind()),
                effect: b.tools.effect(&s.name).as_str(),
                description: s.description.clone(),
                parameters: s.parameters.clone(),
                // The rule that asks for a person, as the console shows it.
                approval: b.tools.approval(&s.name).map(|p| p.describe()),
            })
            .collect(),
        verify_stand_ins: crate::verify::stand_in::stood_in(&b.tools),
    });
    BundleView {
        name: entry.name.clone(),
        status: entry.status,
        dir: entry.dir.clone(),
        version: current.map(|b| b.version().to_string()),
        description: current.map(|b| b.bundle.raw.description.clone()),
        loaded_at: current.map(|b| b.loaded_at.clone()),
        digest: current.map(|b| b.identity.to_string()),
        content_digest: current.map(|b| b.bundle.content_digest.to_string()),
        errors: entry.errors.clone(),
        last_error: entry.errors.first().cloned(),
        candidate: entry.candidate.as_ref().map(candidate),
        detail,
    }
}

fn candidate(held: &crate::registry::Candidate) -> CandidateView {
    let decision = held.decision.as_ref();
    CandidateView {
        version: held.loaded.version().to_string(),
        digest: held.loaded.identity.to_string(),
        state: decision.map_or("evaluating", |d| d.verdict.as_str()),
        reason: decision.map(|d| d.reason.clone()),
        by: decision.map(|d| d.by.clone()),
        eval_job: decision.and_then(|d| d.eval_job.clone()),
    }
}

/// `GET /v1/bundles` in the API document.
pub(super) fn list_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    op.summary("List the bundles the key may use")
        .response_with::<200, Json<Bundles>, _>(|r| r.description("The bundles"))
}

/// `GET /v1/bundles/{name}` in the API document.
pub(super) fn get_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    op.summary("A bundle with its tools")
        .response_with::<200, Json<BundleView>, _>(|r| r.description("The bundle"))
}

/// The bundles the key may use, with their status and errors.
pub async fn list(State(state): State<AppState>, caller: Caller) -> Json<Bundles> {
    let snapshot = state.registry.snapshot();
    let bundles = snapshot
        .bundles
        .values()
        .filter(|e| caller.allows(Action::ReadBundle, &Resource::bundle(&e.name)))
        .map(|e| describe(e, false))
        .collect();
    let rejected = snapshot
        .rejected
        .iter()
        .filter(|e| caller.allows(Action::ReadBundle, &Resource::bundle(&e.name)))
        .map(|e| describe(e, false))
        .collect();
    Json(Bundles {
        generation: snapshot.generation,
        bundles,
        rejected,
    })
}

pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Json<BundleView>, ApiError> {
    let snapshot = state.registry.snapshot();
    let entry = snapshot
        .bundles
        .get(&name)
        .filter(|_| caller.allows(Action::ReadBundle, &Resource::bundle(&name)))
        .ok_or_else(|| ApiError::new(ErrorCode::NotFound, format!("no bundle named {name:?}")))?;
    Ok(Json(describe(entry, true)))
}
