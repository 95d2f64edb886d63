//! `POST /v1/bundles/{name}/verify`: the crash matrix of a loaded bundle
//! (`crate::verify`), as `structured-agents verify --json` prints it. It
//! runs inside the daemon's limits: on the registry's current version,
//! copied into a work directory under the state directory (never the
//! operator's directory), one verify at a time per daemon, at most
//! [`MAX_DURATION`], and never against a model server — the replies come
//! from the body's `exchange` or the bundle's own `scripted:` endpoint.
//! Tools with a side effect are answered by stand-ins (the body's
//! `tool_results`) unless the body asks for `"real_tools": true`; a verify
//! is admitted like a direct tool run (the key's rate and in-flight cap).

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::AppState;
use super::auth::Caller;
use super::body::{JsonBody, Path};
use super::error::{ApiError, ErrorCode};
use crate::access::policy::Action;
use crate::verify::{self, Report, VerifyError};

/// How long one verify may take, all crash points together.
pub const MAX_DURATION: Duration = Duration::from_secs(60);

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyRequest {
    /// The reply script (the mock server's format): an object, or its
    /// YAML or JSON text.
    #[serde(default)]
    pub exchange: Option<Value>,
    #[serde(default)]
    pub input: Option<String>,
    #[serde(default)]
    pub variables: Map<String, Value>,
    /// Really run the tools whose effect is not `read_only`, once per
    /// crash point (default: stand-ins answer them).
    #[serde(default)]
    pub real_tools: bool,
    /// What the stand-ins answer, by tool name.
    #[serde(default)]
    pub tool_results: Option<std::collections::BTreeMap<String, Value>>,
}

/// `POST /v1/bundles/{name}/verify`.
pub async fn verify(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    JsonBody(request): JsonBody<VerifyRequest>,
) -> Result<Json<Report>, ApiError> {
    let tools = match (request.real_tools, request.tool_results) {
        (true, Some(_)) => {
            return Err(ApiError::field(
                ErrorCode::InvalidRequest,
                "tool_results",
                "tool_results answers the stand-ins, and real_tools runs the real tools instead: send one of them",
            ));
        }
        (true, None) => verify::ToolMode::Real,
        (false, results) => verify::ToolMode::StandIns {
            results: results.unwrap_or_default(),
        },
    };
    // Counted as the key's in flight until the verify ends.
    let (loaded, _in_flight) =
        super::admission::admit_direct(&state, &caller, Action::VerifyBundle, &name).await?;
    let snapshot = state.registry.snapshot();
    let exchange = request.exchange.as_ref().map(exchange).transpose()?;
    let Ok(_only_one) = state.verifying.try_lock() else {
        return Err(ApiError::new(
            ErrorCode::Busy,
            "another verify is running in this daemon (one at a time); try again when it ends",
        )
        .retry_after(10));
    };
    let work_root = snapshot.config.paths.state_dir.join("verify");
    // One verify at a time: whatever is under its directory now was left by
    // a verify this daemon did not finish (killed mid-run).
    if let Err(e) = tokio::fs::remove_dir_all(&work_root).await
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(dir = %work_root.display(), error = %e, "verify: cannot remove what an unfinished verify left");
    }
    let run = verify::verify(verify::Request {
        dir: loaded.bundle.dir.clone(),
        models: snapshot.models.clone(),
        exchange,
        input: request.input.unwrap_or_else(|| "verify".into()),
        variables: request.variables,
        plugins: Some(snapshot.plugins.clone()),
        egress: snapshot.egress.clone(),
        work_root,
        tools,
    });
    drop(snapshot);
    let report = match tokio::time::timeout(MAX_DURATION, run).await {
        Ok(report) => report.map_err(|e| refused(&name, e))?,
        Err(_) => {
            return Err(ApiError::new(
                ErrorCode::TimedOut,
                format!(
                    "verifying bundle {name:?} took longer than {}s and was stopped: its tools or its reply script are too slow for a verify in the daemon; run `structured-agents verify` on its directory instead",
                    MAX_DURATION.as_secs()
                ),
            ));
        }
    };
    tracing::info!(
        bundle = %name,
        version = %report.version,
        crash_points = report.crash_points.len(),
        violations = report.violations,
        by = caller.name(),
        "verify: the bundle's crash matrix was run"
    );
    Ok(Json(report))
}

/// The body's reply script, or a 422 saying what is wrong with it.
fn exchange(value: &Value) -> Result<verify::Exchange, ApiError> {
    let text = match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    verify::parse_exchange(&text)
        .map_err(|e| ApiError::field(ErrorCode::InvalidRequest, "exchange", e.to_string()))
}

fn refused(name: &str, e: VerifyError) -> ApiError {
    match e {
        VerifyError::NeedsExchange { .. } | VerifyError::Script(_) => {
            ApiError::field(ErrorCode::InvalidRequest, "exchange", e.to_string())
        }
        VerifyError::Invalid { .. } | VerifyError::Run { .. } => {
            ApiError::new(ErrorCode::InvalidRequest, e.to_string())
        }
        VerifyError::Work { .. } | VerifyError::Task(_) => {
            ApiError::internal(format!("verifying bundle {name:?}: {e}"))
        }
    }
}
