//! The HTTP API (axum), versioned under `/v1`: jobs, their replayable event
//! streams (SSE), bundles, reload, health, metrics and the OpenAPI document;
//! the runtime API of the absorbed multi-agent runtime under `/api`; MCP at
//! `/mcp`.
//! One file per resource; errors come from one table (`error`).
//!
//! This module translates HTTP to calls on the queue and the registry; it
//! must not run jobs or load bundles itself.

mod artifacts;
mod auth;
mod body;
mod bundles;
mod conversations;
pub mod error;
mod feed;
mod jobs;
pub mod mcp;
mod openai;
mod runtime;
mod sse;

pub use auth::Auth;
pub use feed::MIN_RECHECK as SSE_MIN_RECHECK;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router, middleware};
use futures::future::BoxFuture;
use serde_json::json;
use tokio::sync::Notify;

use crate::queue::{HealthProbe, JobQueue};
use crate::registry::{Registry, RegistryError, ReloadReport};

/// Triggers a reload the way SIGHUP does (with notifications and events).
pub type ReloadFn =
    Arc<dyn Fn() -> BoxFuture<'static, Result<ReloadReport, RegistryError>> + Send + Sync>;

/// Renders the Prometheus text exposition.
pub type MetricsFn = Arc<dyn Fn() -> BoxFuture<'static, String> + Send + Sync>;

#[derive(Clone)]
pub struct AppState {
    pub queue: Arc<dyn JobQueue>,
    pub registry: Arc<Registry>,
    pub reload: ReloadFn,
    pub metrics: Option<MetricsFn>,
    /// Wakes idle workers after a submission.
    pub wake: Arc<Notify>,
    /// Set once the first snapshot is loaded.
    pub ready: Arc<AtomicBool>,
    pub max_attempts: u32,
    pub sse_heartbeat: Duration,
    /// How long an SSE stream waits for a change notification before it
    /// reads the store anyway (notifications from other daemons can be
    /// missed while the LISTEN connection is down).
    pub sse_recheck: Duration,
    /// Called after a job is accepted (metrics).
    pub on_submit: Arc<dyn Fn(&str) + Send + Sync>,
    /// Called with the final event of a job an operator's request ended
    /// (a cancelled queued or parked job, a failed resolve): metrics.
    pub on_ended: Arc<dyn Fn(&crate::events::EventEnvelope) + Send + Sync>,
    /// Told whether `/readyz`'s ping reached the queue (metrics, outage logs).
    pub queue_probe: Option<HealthProbe>,
    /// The answer token by token while a job runs in this daemon.
    pub tokens: Arc<crate::events::tokens::TokenHub>,
    /// MCP clients of `/mcp`, told when the bundles change.
    pub mcp: mcp::McpHub,
    /// Cancelled at shutdown: ends `/mcp`'s open streams.
    pub stop: tokio_util::sync::CancellationToken,
}

pub fn router(state: AppState, auth: Auth, max_body_bytes: usize) -> Router {
    let v1 = Router::new()
        .route("/jobs", post(jobs::submit).get(jobs::list))
        .route("/jobs/{id}", get(jobs::get))
        .route("/jobs/{id}/cancel", post(jobs::cancel))
        .route("/jobs/{id}/resolve", post(jobs::resolve))
        .route("/jobs/{id}/journal", get(jobs::journal))
        .route(
            "/conversations/{id}",
            get(conversations::get).delete(conversations::delete),
        )
        .route("/chat/completions", post(openai::completions))
        .route("/models", get(openai::models))
        .route("/jobs/{id}/artifacts", get(artifacts::list))
        .route("/jobs/{id}/artifacts/{name}", get(artifacts::get))
        .route("/jobs/{id}/events", get(sse::events))
        .route("/bundles", get(bundles::list))
        .route("/bundles/{name}", get(bundles::get))
        .route("/reload", post(reload))
        .route_layer(middleware::from_fn_with_state(
            auth.clone(),
            auth::require_token,
        ));
    let runtime = runtime::routes().route_layer(middleware::from_fn_with_state(
        auth.clone(),
        auth::require_token,
    ));
    let mcp: Router<AppState> = Router::new()
        .nest_service(
            "/mcp",
            mcp::service(state.clone(), max_body_bytes, state.stop.child_token()),
        )
        .route_layer(middleware::from_fn_with_state(auth, auth::require_token));
    Router::new()
        .nest("/v1", v1)
        .nest("/api", runtime)
        .merge(mcp)
        .route("/v1/openapi.json", get(openapi))
        .route(
            "/healthz",
            get(|| async { Json(json!({"status": "alive"})) }),
        )
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(|| async {
            error::ApiError::new(
                error::ErrorCode::NotFound,
                "no such route; see /v1/openapi.json",
            )
        })
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(state)
}

async fn reload(State(state): State<AppState>) -> Result<Json<ReloadReport>, error::ApiError> {
    (state.reload)().await.map(Json).map_err(|e| {
        error::ApiError::new(
            error::ErrorCode::InvalidRequest,
            format!("reload rejected: {e}"),
        )
    })
}

async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let loaded = state.ready.load(Ordering::SeqCst);
    let queue_ok = state.queue.ping().await.is_ok();
    if let Some(probe) = &state.queue_probe {
        probe("ping", queue_ok);
    }
    let status = if loaded && queue_ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        Json(
            json!({"snapshot_loaded": loaded, "queue_reachable": queue_ok, "generation": state.registry.snapshot().generation}),
        ),
    )
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    match &state.metrics {
        Some(render) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            render().await,
        )
            .into_response(),
        None => error::ApiError::new(
            error::ErrorCode::NotFound,
            "metrics are disabled (telemetry.metrics = false)",
        )
        .into_response(),
    }
}

async fn openapi() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        include_str!("openapi.json"),
    )
}
