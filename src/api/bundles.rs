//! `GET /v1/bundles` and `GET /v1/bundles/{name}`.

use crate::access::policy::{Action, Resource};
use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::AppState;
use super::auth::Caller;
use super::body::Path;
use super::error::{ApiError, ErrorCode};
use crate::registry::BundleEntry;

fn describe(entry: &BundleEntry, detailed: bool) -> Value {
    let current = entry.current.as_ref();
    let mut out = json!({
        "name": entry.name,
        "status": entry.status,
        "dir": entry.dir,
        "version": current.map(|b| b.version()),
        "description": current.map(|b| b.bundle.raw.description.clone()),
        "loaded_at": current.map(|b| b.loaded_at.clone()),
        "digest": current.map(|b| b.identity.to_string()),
        "content_digest": current.map(|b| b.bundle.content_digest.to_string()),
        "errors": entry.errors,
        "last_error": entry.errors.first(),
    });
    if let (true, Some(b)) = (detailed, current) {
        out["limits"] = json!(b.bundle.raw.limits);
        out["model"] = json!({"endpoint": b.bundle.raw.model.endpoint, "name": b.bundle.raw.model.name, "plugin": b.bundle.raw.model.plugin});
        out["tools"] = b
            .tools
            .schemas()
            .iter()
            .map(|s| {
                let kind = b.tools.tool(&s.name).map(|t| t.kind()).unwrap_or("unknown");
                let effect = b.tools.effect(&s.name).as_str();
                // The rule that asks for a person, as the console shows it.
                let approval = b.tools.approval(&s.name).map(|p| format!("{:?}", p.rule));
                json!({"name": s.name, "kind": kind, "effect": effect, "description": s.description, "parameters": s.parameters, "approval": approval})
            })
            .collect();
    }
    out
}

/// The bundles the key may use, with their status and errors.
pub async fn list(State(state): State<AppState>, caller: Caller) -> Json<Value> {
    let snapshot = state.registry.snapshot();
    let bundles: Vec<Value> = snapshot
        .bundles
        .values()
        .filter(|e| caller.allows(Action::ReadBundle, &Resource::bundle(&e.name)))
        .map(|e| describe(e, false))
        .collect();
    let rejected: Vec<Value> = snapshot
        .rejected
        .iter()
        .filter(|e| caller.allows(Action::ReadBundle, &Resource::bundle(&e.name)))
        .map(|e| describe(e, false))
        .collect();
    Json(json!({"generation": snapshot.generation, "bundles": bundles, "rejected": rejected}))
}

pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let snapshot = state.registry.snapshot();
    let entry = snapshot
        .bundles
        .get(&name)
        .filter(|_| caller.allows(Action::ReadBundle, &Resource::bundle(&name)))
        .ok_or_else(|| ApiError::new(ErrorCode::NotFound, format!("no bundle named {name:?}")))?;
    Ok(Json(describe(entry, true)))
}
