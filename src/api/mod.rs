//! The HTTP API (axum), versioned under `/v1`: jobs, their replayable event
//! streams (SSE), bundles, reload, health, metrics and the OpenAPI document;
//! the runtime API of the absorbed multi-agent runtime under `/api`; MCP at
//! `/mcp`; A2A at `/a2a` (`/.well-known/agent-card.json`); the operator's
//! console (a web page) at `/ui`.
//! One file per resource; errors come from one table (`error`).
//!
//! This module translates HTTP to calls on the queue and the registry; it
//! must not run jobs or load bundles itself.

mod a2a;
mod admission;
mod agui;
mod answer;
mod approvals;
mod artifacts;
mod auth;
mod body;
mod bundles;
mod caller_tools;
mod chat_input;
mod console;
mod conversations;
mod counts;
mod deliveries;
mod document;
pub mod error;
mod eval_runs;
mod evals;
mod feed;
mod fork;
pub mod fuzzing;
pub mod guard;
mod idempotency;
mod job_actions;
mod job_journal;
mod job_list;
mod job_trace;
mod jobs;
mod keys;
mod langgraph;
pub mod limits;
pub mod mcp;
pub mod on_behalf;
mod openai;
mod probes;
mod prompt;
mod release;
mod reload;
mod responses;
mod runtime;
pub mod schedules;
pub mod serve;
mod sse;
mod tool_run;
mod trace_context;
mod verify;
mod whoami;

pub use a2a::push::PushFormat as A2aPushFormat;
pub use auth::{Auth, Caller, RevokedStreams};
pub use feed::MIN_RECHECK as SSE_MIN_RECHECK;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use aide::axum::ApiRouter;
use aide::axum::routing::{ApiMethodRouter, delete_with, get_with, post_with, put_with};
use axum::extract::DefaultBodyLimit;
use axum::{Extension, Router, middleware};

use crate::access::policy::Action;
use crate::events::daemon::{DaemonBus, QueueHealth};
use crate::queue::JobQueue;
use crate::registry::{Registry, ReloadHandle};

/// Renders the Prometheus text exposition (live gauges read at scrape time).
#[async_trait::async_trait]
pub trait MetricsPage: Send + Sync {
    async fn render(&self) -> String;
}

/// What the handlers share: data and handles, no behaviour of its own.
#[derive(Clone)]
pub struct AppState {
    pub queue: Arc<dyn JobQueue>,
    pub registry: Arc<Registry>,
    pub auth: Auth,
    /// Which requests may come in at all (Host, Origin, JSON bodies).
    pub front_door: guard::FrontDoor,
    pub reloads: ReloadHandle,
    pub metrics: Option<Arc<dyn MetricsPage>>,
    /// Where the daemon's happenings are published (job submitted, …).
    pub bus: DaemonBus,
    /// Set once the first snapshot is loaded.
    pub ready: Arc<AtomicBool>,
    pub max_attempts: u32,
    pub sse_heartbeat: Duration,
    /// How often a worker renews a running job's lease (what a job's
    /// `heartbeat_every_ms` says).
    pub job_heartbeat: Duration,
    /// How long an SSE stream waits for a change notification before it
    /// reads the store anyway (notifications from other daemons can be
    /// missed while the LISTEN connection is down).
    pub sse_recheck: Duration,
    /// Told whether `/readyz`'s ping reached the queue (metrics, outage logs).
    pub queue_health: Arc<QueueHealth>,
    /// What jobs running in this daemon do now: their answer token by
    /// token and their live progress.
    pub live: Arc<crate::events::live::LiveHub>,
    /// MCP clients of `/mcp`, told when the bundles change.
    pub mcp: mcp::McpHub,
    /// Cancelled at shutdown: ends `/mcp`'s open streams.
    pub stop: tokio_util::sync::CancellationToken,
    /// What admission keeps between requests (each key's rate limiter).
    pub admission: Arc<crate::admit::Gate>,
    /// The event streams open now, against `server.max_event_streams`.
    pub streams: limits::StreamPermits,
    /// Held by the one verify (`POST /v1/bundles/{name}/verify`) running.
    pub verifying: Arc<tokio::sync::Mutex<()>>,
}

/// A route that declares the `action` it is (docs/security.md has the
/// table of actions and their scopes); its caller's key needs the
/// action's scope. Every authenticated route is made with this
/// (`tests/policy_routes.rs` checks it), so none can forget its action.
pub(super) fn with(
    action: Action,
    route: impl Into<ApiMethodRouter<AppState>>,
) -> ApiMethodRouter<AppState> {
    route
        .into()
        .route_layer(middleware::from_fn(move |request, next| {
            auth::require(action, request, next)
        }))
}

pub fn router(state: AppState, body: serve::BodyLimits) -> Router {
    use Action::*;
    let max_body_bytes = body.max_bytes;
    let auth = state.auth.clone();
    document::begin();
    let v1 = ApiRouter::new()
        .merge(job_routes())
        .merge(job_action_routes())
        .merge(wire_routes())
        .merge(bundle_routes())
        .merge(operator_routes())
        .route_layer(middleware::from_fn_with_state(
            auth.clone(),
            auth::authenticate,
        ))
        .api_route(
            "/reload",
            with(Reload, post_with(reload::reload, reload::reload_doc)).route_layer(
                middleware::from_fn_with_state(auth.clone(), auth::authenticate_or_reload_key),
            ),
        );
    let runtime = runtime::routes().route_layer(middleware::from_fn_with_state(
        auth.clone(),
        auth::authenticate,
    ));
    // LangGraph's server API, at the root where its SDKs look for it.
    let langgraph = langgraph::routes().route_layer(middleware::from_fn_with_state(
        auth.clone(),
        auth::authenticate,
    ));
    // A2A: the agent cards and the JSON-RPC interface (docs/api.md, A2A).
    let a2a = self::a2a::routes(auth.clone());
    // Each MCP tool call is a submission: the whole endpoint needs `submit`.
    let mcp: Router<AppState> = Router::new()
        .nest_service(
            "/mcp",
            mcp::service(state.clone(), max_body_bytes, state.stop.child_token()),
        )
        .route_layer(middleware::from_fn(|request, next| {
            auth::require(SubmitJob, request, next)
        }))
        .route_layer(middleware::from_fn_with_state(auth, auth::authenticate));
    let mut api = document::frame();
    let routes = ApiRouter::new()
        .nest("/v1", v1)
        .nest("/api", runtime)
        .merge(langgraph)
        .merge(a2a)
        .merge(probes::routes());
    let documented = mcp::described(routes).finish_api_with(&mut api, document::complete);
    // The document describes its own route, so it is made after the router
    // and reaches that route's handler as an extension.
    let documented = documented.layer(Extension(probes::Served::new(&document::served(&api))));
    documented
        .merge(mcp)
        .merge(console::routes())
        // After every route: it applies to the routes present.
        .method_not_allowed_fallback(|| async {
            error::ApiError::new(
                error::ErrorCode::MethodNotAllowed,
                "this route does not take that method; see /v1/openapi.json",
            )
        })
        .fallback(|| async {
            error::ApiError::new(
                error::ErrorCode::NotFound,
                "no such route; see /v1/openapi.json",
            )
        })
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(middleware::from_fn_with_state(body, serve::body_deadline))
        .layer(middleware::from_fn_with_state(
            state.front_door.clone(),
            guard::front_door,
        ))
        .with_state(state)
}

/// `/v1`'s jobs: submit, list, read and follow one — its journal, a turn's
/// prompt, artifacts and events; and conversations. Acting on a job is
/// [`job_action_routes`].
fn job_routes() -> ApiRouter<AppState> {
    use Action::*;
    ApiRouter::new()
        .api_route(
            "/jobs",
            with(SubmitJob, post_with(jobs::submit, jobs::submit_doc))
                .merge(with(ListJobs, get_with(job_list::list, job_list::list_doc))),
        )
        .api_route(
            "/jobs/batch",
            with(
                SubmitJob,
                post_with(jobs::submit_batch, jobs::submit_batch_doc),
            ),
        )
        .api_route(
            "/jobs/counts",
            with(ListJobs, get_with(counts::counts, counts::counts_doc)),
        )
        .api_route(
            "/jobs/{id}",
            with(ReadJob, get_with(jobs::get, jobs::get_doc)).merge(with(
                DeleteJob,
                delete_with(job_actions::delete, job_actions::delete_doc),
            )),
        )
        .api_route(
            "/jobs/{id}/journal",
            with(
                ReadJob,
                get_with(job_journal::journal, job_journal::journal_doc),
            ),
        )
        .api_route(
            "/jobs/{id}/turns/{turn}/prompt",
            with(ReadJob, get_with(prompt::prompt, prompt::prompt_doc)),
        )
        .api_route(
            "/conversations/{id}",
            with(
                ReadConversation,
                get_with(conversations::get, conversations::get_doc),
            )
            .merge(with(
                DeleteConversation,
                delete_with(conversations::delete, conversations::delete_doc),
            )),
        )
        .api_route(
            "/jobs/{id}/artifacts",
            with(ReadJob, get_with(artifacts::list, artifacts::list_doc)),
        )
        .api_route(
            "/jobs/{id}/artifacts/{name}",
            with(ReadJob, get_with(artifacts::get, artifacts::get_doc)),
        )
        .api_route(
            "/jobs/{id}/events",
            with(ReadJob, get_with(sse::events, sse::events_doc)),
        )
}

/// `/v1`'s actions on a job that exists: cancel, rerun, fork, resolve, and
/// its approvals (listed and decided).
fn job_action_routes() -> ApiRouter<AppState> {
    use Action::*;
    ApiRouter::new()
        .api_route(
            "/jobs/{id}/cancel",
            with(
                CancelJob,
                post_with(job_actions::cancel, job_actions::cancel_doc),
            ),
        )
        .api_route(
            "/jobs/{id}/rerun",
            with(
                RerunJob,
                post_with(job_actions::rerun, job_actions::rerun_doc),
            ),
        )
        .api_route(
            "/jobs/{id}/fork",
            with(ForkJob, post_with(fork::fork, fork::fork_doc)),
        )
        .api_route(
            "/jobs/{id}/resolve",
            with(
                ResolveJob,
                post_with(job_actions::resolve, job_actions::resolve_doc),
            ),
        )
        .api_route(
            "/jobs/{id}/approvals",
            with(ReadJob, get_with(approvals::list, approvals::list_doc)),
        )
        .api_route(
            "/jobs/{id}/approvals/{call}",
            with(
                DecideApproval,
                post_with(approvals::decide, approvals::decide_doc),
            ),
        )
}

/// `/v1`'s OpenAI and AG-UI wires: chat completions, models, responses.
fn wire_routes() -> ApiRouter<AppState> {
    use Action::*;
    ApiRouter::new()
        .api_route(
            "/chat/completions",
            with(
                SubmitJob,
                post_with(openai::completions, openai::completions_doc),
            ),
        )
        .api_route(
            "/models",
            with(ReadBundle, get_with(openai::models, openai::models_doc)),
        )
        .api_route(
            "/responses",
            with(
                SubmitJob,
                post_with(responses::create, responses::create_doc),
            ),
        )
        .api_route(
            "/responses/{id}",
            with(
                ReadJob,
                get_with(responses::retrieve, responses::retrieve_doc),
            )
            .merge(with(
                DeleteJob,
                delete_with(responses::delete, responses::delete_doc),
            )),
        )
        .api_route(
            "/responses/{id}/cancel",
            with(
                CancelJob,
                post_with(responses::cancel, responses::cancel_doc),
            ),
        )
        .api_route(
            "/responses/{id}/input_items",
            with(
                ReadJob,
                get_with(
                    responses::input_items::list,
                    responses::input_items::list_doc,
                ),
            ),
        )
        .api_route(
            "/agui/{bundle}",
            with(SubmitJob, post_with(agui::run, agui::run_doc)),
        )
}

/// `/v1`'s bundles: list and read them, run one of their tools, verify
/// one, evaluate one (its runs, its suite), promote or reject a held
/// version, move its parked jobs to another version.
fn bundle_routes() -> ApiRouter<AppState> {
    use Action::*;
    ApiRouter::new()
        .api_route(
            "/bundles/{name}/migrate-jobs",
            with(
                MigrateJobs,
                post_with(fork::migrate_jobs, fork::migrate_jobs_doc),
            ),
        )
        .api_route(
            "/bundles/{name}/promote",
            with(
                ReleaseBundle,
                post_with(release::promote, release::promote_doc),
            ),
        )
        .api_route(
            "/bundles/{name}/reject",
            with(
                ReleaseBundle,
                post_with(release::reject, release::reject_doc),
            ),
        )
        .api_route(
            "/bundles/{name}/evals",
            with(SubmitJob, post_with(evals::run, evals::run_doc)).merge(with(
                ListJobs,
                get_with(eval_runs::list, eval_runs::list_doc),
            )),
        )
        .api_route(
            "/bundles/{name}/evals/suite",
            with(ReadBundle, get_with(eval_runs::suite, eval_runs::suite_doc)),
        )
        .api_route(
            "/bundles/{name}/verify",
            with(VerifyBundle, post_with(verify::verify, verify::verify_doc)),
        )
        .api_route(
            "/bundles",
            with(ReadBundle, get_with(bundles::list, bundles::list_doc)),
        )
        .api_route(
            "/bundles/{name}",
            with(ReadBundle, get_with(bundles::get, bundles::get_doc)),
        )
        // Described as `…/tools/{tool}:run` (document::SPELLED).
        .api_route(
            "/bundles/{name}/tools/{tool_run}",
            with(
                RunTool,
                post_with(tool_run::run_suffixed, tool_run::run_doc),
            ),
        )
        .api_route(
            "/bundles/{name}/tools/{tool}/run",
            with(RunTool, post_with(tool_run::run, tool_run::run_doc)),
        )
}

/// `/v1`'s schedules, webhook deliveries, the caller's own key and the
/// keys file.
fn operator_routes() -> ApiRouter<AppState> {
    use Action::*;
    ApiRouter::new()
        // Any key may learn who it is: no action (tests/policy_routes.rs).
        .api_route("/whoami", get_with(whoami::whoami, whoami::whoami_doc))
        .api_route(
            "/keys",
            with(ManageKeys, get_with(keys::list, keys::doc::list))
                .merge(with(ManageKeys, post_with(keys::create, keys::doc::create))),
        )
        .api_route(
            "/keys/{name}",
            with(ManageKeys, delete_with(keys::revoke, keys::doc::revoke)),
        )
        .api_route(
            "/schedules",
            with(
                CreateSchedule,
                post_with(schedules::create, schedules::doc::create),
            )
            .merge(with(
                ReadSchedule,
                get_with(schedules::list, schedules::doc::list),
            )),
        )
        .api_route(
            "/schedules/{id}",
            with(ReadSchedule, get_with(schedules::get, schedules::doc::get))
                .merge(with(
                    ManageSchedule,
                    delete_with(schedules::delete, schedules::doc::delete),
                ))
                .merge(with(
                    ManageSchedule,
                    put_with(schedules::edit, schedules::edit_doc),
                )),
        )
        .api_route(
            "/schedules/{id}/pause",
            with(
                ManageSchedule,
                post_with(schedules::pause, schedules::doc::pause),
            ),
        )
        .api_route(
            "/schedules/{id}/resume",
            with(
                ManageSchedule,
                post_with(schedules::resume, schedules::doc::resume),
            ),
        )
        .api_route(
            "/schedules/{id}/run",
            with(RunSchedule, post_with(schedules::run, schedules::doc::run)),
        )
        .api_route(
            "/deliveries",
            with(
                ReadDeliveries,
                get_with(deliveries::list, deliveries::list_doc),
            ),
        )
        .api_route(
            "/deliveries/{id}/redrive",
            with(
                RedriveDelivery,
                post_with(deliveries::redrive, deliveries::redrive_doc),
            ),
        )
}

/// Checks that the queue answers and can write (for SQLite: its file is
/// still the one opened and its disk takes data), tells `health`, and logs
/// why when it just stopped working. `/readyz` and the daemon's periodic
/// check both ask here.
pub async fn check_queue(queue: &dyn JobQueue, health: &QueueHealth) -> bool {
    let checked = queue.ping().await;
    if let Err(e) = &checked
        && health.is_up()
    {
        tracing::error!(error = %e, "the queue failed its health check: /readyz answers 503 and submits 503 until it passes");
    }
    health.report("ping", checked.is_ok());
    checked.is_ok()
}
