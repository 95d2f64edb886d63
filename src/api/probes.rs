//! The routes a caller reads without a key: liveness (`/healthz`),
//! readiness (`/readyz`), the Prometheus exposition (`/metrics`) and the
//! API document itself (`/v1/openapi.json`). None reveals a bundle's or a
//! job's content; the document says each needs no key (it states no
//! security requirement for them).

use std::sync::atomic::Ordering;

use aide::OperationOutput;
use aide::axum::ApiRouter;
use aide::axum::routing::get_with;
use aide::generate::GenContext;
use aide::openapi::{self, Operation};
use aide::transform::TransformOperation;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::AppState;
use super::document::{answer_of, answers};
use super::error::{ApiError, ErrorCode};

/// The unauthenticated routes, each described in the document. The
/// document's own route reads the served document from the request's
/// extensions: it is made from every route, this one included, so it
/// exists only once the router is (`api::router` adds it as a layer).
pub(super) fn routes() -> ApiRouter<AppState> {
    ApiRouter::new()
        .api_route("/v1/openapi.json", get_with(document, document_doc))
        .api_route("/healthz", get_with(healthz, healthz_doc))
        .api_route("/readyz", get_with(readyz, readyz_doc))
        .api_route("/metrics", get_with(metrics, metrics_doc))
}

/// The served document, serialized once (each answer shares its bytes).
#[derive(Clone)]
pub(super) struct Served(Bytes);

impl Served {
    pub(super) fn new(document: &Value) -> Self {
        Self(Bytes::from(document.to_string()))
    }
}

impl IntoResponse for Served {
    fn into_response(self) -> Response {
        ([(header::CONTENT_TYPE, "application/json")], self.0).into_response()
    }
}

/// The document describes itself as what it is: an OpenAPI 3.1 document
/// (whose schema is the OpenAPI specification's, not repeated here).
impl OperationOutput for Served {
    type Inner = Self;

    fn operation_response(_: &mut GenContext, _: &mut Operation) -> Option<openapi::Response> {
        let schema = schemars::json_schema!({
            "type": "object",
            "description": "An OpenAPI 3.1 document",
            "required": ["openapi", "info", "paths"],
        });
        Some(answer_of("This document", "application/json", schema))
    }
}

async fn document(Extension(served): Extension<Served>) -> Served {
    served
}

fn document_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    op.summary("This document: every route, generated from the code")
        .response_with::<200, Served, _>(|r| r.description("OpenAPI 3.1"))
}

/// `/healthz`'s answer: the process serves requests.
#[derive(Debug, Serialize, JsonSchema)]
pub(super) struct Liveness {
    status: Alive,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Alive {
    Alive,
}

async fn healthz() -> Json<Liveness> {
    Json(Liveness {
        status: Alive::Alive,
    })
}

fn healthz_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    op.summary("Alive: the daemon answers requests")
        .response_with::<200, Json<Liveness>, _>(|r| r.description("Alive"))
}

/// `/readyz`'s answer, ready or not: what it checked.
#[derive(Debug, Serialize, JsonSchema)]
pub(super) struct Readiness {
    /// The first snapshot of the bundles and models is loaded.
    snapshot_loaded: bool,
    /// The queue answered and can write (for SQLite: its file is still the
    /// one opened and its disk takes data).
    queue_reachable: bool,
    /// The registry's generation serving.
    generation: u64,
}

async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Readiness>) {
    let loaded = state.ready.load(Ordering::SeqCst);
    let queue_ok = super::check_queue(state.queue.as_ref(), &state.queue_health).await;
    let status = if loaded && queue_ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let readiness = Readiness {
        snapshot_loaded: loaded,
        queue_reachable: queue_ok,
        generation: state.registry.snapshot().generation,
    };
    (status, Json(readiness))
}

fn readyz_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    op.summary("Ready: the snapshot is loaded and the queue reachable")
        .response_with::<200, Json<Readiness>, _>(|r| r.description("Ready"))
        .response_with::<503, Json<Readiness>, _>(|r| {
            r.description("Not ready: the snapshot is not loaded yet, or the queue is down")
        })
}

/// The media type of the Prometheus text exposition.
const EXPOSITION: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The Prometheus text exposition, as `/metrics` answers it.
pub(super) struct Exposition(String);

impl IntoResponse for Exposition {
    fn into_response(self) -> Response {
        ([(header::CONTENT_TYPE, EXPOSITION)], self.0).into_response()
    }
}

impl OperationOutput for Exposition {
    type Inner = String;

    fn operation_response(_: &mut GenContext, _: &mut Operation) -> Option<openapi::Response> {
        let schema = schemars::json_schema!({"type": "string"});
        Some(answer_of("The metrics", EXPOSITION, schema))
    }
}

async fn metrics(State(state): State<AppState>) -> Result<Exposition, ApiError> {
    match &state.metrics {
        Some(page) => Ok(Exposition(page.render().await)),
        None => Err(ApiError::new(
            ErrorCode::NotFound,
            "metrics are disabled (telemetry.metrics = false)",
        )),
    }
}

fn metrics_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Prometheus metrics (the text exposition format; docs/telemetry.md)")
        .response_with::<200, Exposition, _>(|r| r.description("The metrics, read now"));
    answers(
        op,
        &[(404, "Metrics are disabled (telemetry.metrics = false)")],
    )
}
