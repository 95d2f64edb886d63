//! The daemon's bundles as MCP tools over Streamable HTTP at `/mcp` (rmcp's
//! server side), behind the same bearer token as the rest of the API.
//! `tools/list` gives each loaded bundle with an input schema (`input` plus
//! its `variables`); `tools/call` runs the bundle as a job and answers with
//! its final answer, or an error result naming the job when it fails;
//! connected clients get `notifications/tools/list_changed` when a reload
//! changes the bundles.
//!
//! The 2025 revisions (a session per `initialize`) and the stateless
//! 2026-07-28 revision are both served: a long call from a client that
//! declared tasks becomes a task bound to its job (`tasks`); jobs are
//! resources (`resources`), bundles prompts (`prompts`), and a call reports
//! its job's events as log lines and progress (`notify`). A 2026-07-28
//! client hears of a job's changes and of the bundle list's over one
//! `subscriptions/listen` request (`listen`).
//!
//! Sessions are bounded (`sessions`): closed after `server.mcp.session_idle`
//! without a request, at most `server.mcp.max_sessions` open (the next
//! `initialize` is a 503, checked at the `door`, which also answers rmcp's
//! plain-text refusals in the API's JSON error shape).

mod approval;
mod doc;
mod door;
mod listen;
mod notify;
mod prompts;
mod resources;
mod sessions;
mod tasks;

use crate::access::policy::{Action, Resource};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use rmcp::model::SubscriptionFilter;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    CreateTaskResult, GetTaskParams, GetTaskResult, Implementation, JsonObject, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, UpdateTaskParams,
};
use rmcp::model::{
    GetPromptRequestParams, GetPromptResponse, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ReadResourceRequestParams, ReadResourceResponse, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::AppState;
use super::admission::{Submission, admit};
use super::auth::Caller;
use super::error::{ApiError, ErrorCode};
use super::feed::wait_finished;
use crate::events::daemon::{DaemonEvent, DaemonObserver};
use crate::queue::{Job, JobState, NewJob};

pub use doc::described;

/// The MCP clients connected now (sessions, and `subscriptions/listen`
/// requests that asked), told when the bundle list changes.
#[derive(Clone)]
pub struct McpHub {
    peers: Arc<Mutex<Vec<Peer<RoleServer>>>>,
    listens: tokio::sync::broadcast::Sender<()>,
}

impl Default for McpHub {
    fn default() -> Self {
        Self {
            peers: Arc::default(),
            listens: tokio::sync::broadcast::channel(4).0,
        }
    }
}

impl McpHub {
    fn register(&self, peer: Peer<RoleServer>) {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        peers.retain(|p| !p.is_transport_closed());
        peers.push(peer);
    }

    /// Sends `notifications/tools/list_changed` to every connected client; a
    /// slow or gone client is skipped after a few seconds.
    pub async fn notify_tools_changed(&self) {
        // No listen open is no one to tell.
        let _ = self.listens.send(());
        let peers = {
            let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
            peers.retain(|p| !p.is_transport_closed());
            peers.clone()
        };
        futures::future::join_all(peers.iter().map(|peer| async move {
            let sent =
                tokio::time::timeout(Duration::from_secs(5), peer.notify_tool_list_changed()).await;
            if !matches!(sent, Ok(Ok(()))) {
                tracing::debug!("an MCP client missed tools/list_changed");
            }
        }))
        .await;
    }
}

/// A reload that changed the bundles tells every MCP client to list them
/// again; a slow client must not hold up the reload.
impl DaemonObserver for McpHub {
    fn on_daemon_event(&self, event: &DaemonEvent) {
        if let DaemonEvent::Reload(outcome) = event
            && outcome.bundles_changed()
        {
            let hub = self.clone();
            tokio::spawn(async move { hub.notify_tools_changed().await });
        }
    }
}

fn input_schema() -> Arc<JsonObject> {
    let schema = json!({
        "type": "object",
        "properties": {
            "input": {"type": "string", "description": "The job's input."},
            "variables": {"type": "object", "description": "The bundle's template variables."}
        },
        "required": ["input"]
    });
    Arc::new(schema.as_object().cloned().unwrap_or_default())
}

/// One MCP session's view of the daemon.
#[derive(Clone)]
pub struct BundleTools {
    state: AppState,
    /// The session's `logging/setLevel`.
    log_level: notify::Level,
    /// The session's room for `resources/subscribe`.
    subscriptions: Arc<tokio::sync::Semaphore>,
}

impl BundleTools {
    /// The loaded bundles the caller may use: (name, description).
    fn bundles(&self, caller: &Caller) -> Vec<(String, String)> {
        self.state
            .registry
            .snapshot()
            .loaded()
            .filter(|b| caller.allows(Action::SubmitJob, &Resource::bundle(b.name())))
            .map(|b| (b.name().to_string(), b.bundle.raw.description.clone()))
            .collect()
    }

    /// How long a call may run before it becomes a task: only for a client
    /// that declared tasks.
    fn task_after(&self, context: &RequestContext<RoleServer>) -> Option<Duration> {
        // A client that declared tasks gets one for a long call.
        context
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks())
            .then(|| {
                self.state
                    .registry
                    .snapshot()
                    .config
                    .server
                    .mcp
                    .task_after
                    .into()
            })
    }

    /// Where a call's notifications go: the peer, at the log level it set
    /// (or the session's), with its progress token.
    fn notices(&self, context: &RequestContext<RoleServer>) -> notify::Notices {
        notify::Notices {
            peer: context.peer.clone(),
            level: context
                .meta
                .log_level()
                .or_else(|| notify::level_of(&self.log_level)),
            progress: context.meta.get_progress_token(),
        }
    }

    /// Runs `new_job` and waits for its answer; a decision the job waits
    /// for is asked of the client when it can be asked. With
    /// `task_after` (a client that takes tasks), a job still going after
    /// that long, or parked for a decision, is answered as its task.
    async fn run(
        &self,
        caller: &Caller,
        new_job: NewJob,
        task_after: Option<Duration>,
        notices: notify::Notices,
    ) -> Result<Called, CallError> {
        let peer = notices.peer.clone();
        let submission = Submission::new(new_job, "name");
        let (job, _) = admit(&self.state, caller, submission).await?;
        let following = notices.wanted().then(|| {
            tokio::spawn(notices.follow(
                self.state.clone(),
                caller.name().to_string(),
                job.id.clone(),
            ))
        });
        let deadline = task_after.map(|after| tokio::time::Instant::now() + after);
        loop {
            let waited = match deadline {
                None => wait_finished(&self.state, &job.id).await,
                Some(at) => {
                    match tokio::time::timeout_at(at, wait_finished(&self.state, &job.id)).await {
                        Ok(waited) => waited,
                        Err(_) => self.current(&job.id).await,
                    }
                }
            };
            let job = waited?;
            let going = !(job.state.is_terminal() || job.state.is_parked());
            if deadline.is_some() && (going || job.state == JobState::AwaitingApproval) {
                return Ok(Called::Task(Box::new(job)));
            }
            if job.state == JobState::AwaitingApproval && approval::can_ask(&peer, caller, &job) {
                approval::ask(&self.state, &peer, caller, &job).await?;
                continue;
            }
            // The job's last notices go out before the answer that ends
            // the call's stream.
            if let Some(following) = following {
                let _ = tokio::time::timeout(Duration::from_secs(5), following).await;
            }
            return Ok(Called::Answer(job.answer_or_error()?.to_string()));
        }
    }

    /// The job as it is now.
    async fn current(&self, id: &crate::queue::JobId) -> Result<Job, ApiError> {
        self.state
            .queue
            .get(id)
            .await?
            .ok_or_else(|| ApiError::new(ErrorCode::NotFound, format!("job {id} vanished")))
    }
}

/// How a bundle call ended: the job's answer, or the task the job became.
enum Called {
    Answer(String),
    Task(Box<Job>),
}

/// Why a bundle call has no answer: its error result's text.
#[derive(Debug, thiserror::Error)]
enum CallError {
    /// The job was not admitted, or vanished while the call waited.
    #[error("{}", .0.message)]
    Refused(ApiError),
    #[error(transparent)]
    Approval(#[from] approval::ApprovalError),
    #[error(transparent)]
    NoAnswer(#[from] crate::queue::NoAnswer),
    #[error("cancelled by the client")]
    Cancelled,
}

impl From<ApiError> for CallError {
    fn from(error: ApiError) -> Self {
        CallError::Refused(error)
    }
}

// Its methods are alike in shape (rmcp's signature, the caller, then one
// call into `mcp/`), kept so: each is one MCP method, answered by its own
// part of `mcp/`.
impl ServerHandler for BundleTools {
    #[expect(
        deprecated,
        reason = "rmcp marks MCP logging deprecated (SEP-2577); the revisions clients use have it"
    )]
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_logging()
                // Declared with rmcp's answer (no suggestions): bundle
                // arguments are free text.
                .enable_completions()
                .enable_prompts()
                .enable_resources()
                .enable_resources_subscribe()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new(
            "structured-agents",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions("Each tool runs one bundle as a job and answers with its final answer.")
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.state.mcp.register(context.peer);
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let caller = caller_of(&context)?;
        let schema = input_schema();
        let tools = self
            .bundles(&caller)
            .into_iter()
            .map(|(name, description)| Tool::new(name, description, schema.clone()))
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let caller = caller_of(&context)?;
        let name = request.name.to_string();
        let bundles = self.bundles(&caller);
        if !bundles.iter().any(|(n, _)| *n == name) {
            let known: Vec<String> = bundles.into_iter().map(|(n, _)| n).collect();
            return Err(McpError::invalid_params(
                format!("no bundle named `{name}` (tools: {})", known.join(", ")),
                None,
            ));
        }
        let (input, variables) = match call_arguments(&request.arguments.unwrap_or_default()) {
            Ok(arguments) => arguments,
            Err(problem) => {
                return Ok(
                    CallToolResult::error(vec![ContentBlock::text(problem.to_string())]).into(),
                );
            }
        };
        let task_after = self.task_after(&context);
        let notices = self.notices(&context);
        let trace = context
            .extensions
            .get::<axum::http::request::Parts>()
            .map(|parts| super::trace_context::CallerTrace::of(&parts.headers))
            .unwrap_or_default();
        let new_job = NewJob {
            bundle: name,
            input,
            variables,
            trace: trace.or_body(
                context.meta.get_traceparent(),
                context.meta.get_tracestate(),
            ),
            ..Default::default()
        };
        // A client that cancels stops waiting; the job itself runs on, like
        // any job whose submitter went away.
        let outcome = tokio::select! {
            outcome = self.run(&caller, new_job, task_after, notices) => outcome,
            () = context.ct.cancelled() => Err(CallError::Cancelled),
        };
        Ok(match outcome {
            Ok(Called::Answer(answer)) => {
                CallToolResult::success(vec![ContentBlock::text(answer)]).into()
            }
            Ok(Called::Task(job)) => {
                CallToolResponse::Task(CreateTaskResult::new(tasks::detailed(&job).task))
            }
            Err(error) => CallToolResult::error(vec![ContentBlock::text(error.to_string())]).into(),
        })
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let caller = caller_of(&context)?;
        let job = tasks::job_of(&self.state, &caller, &request.task_id).await?;
        Ok(GetTaskResult::new(tasks::detailed(&job)))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let caller = caller_of(&context)?;
        tasks::update(
            &self.state,
            &caller,
            &request.task_id,
            &request.input_responses,
        )
        .await
    }

    #[expect(
        deprecated,
        reason = "rmcp marks MCP logging deprecated (SEP-2577); the revisions clients use have it"
    )]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        notify::set(&self.log_level, request.level);
        Ok(())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let caller = caller_of(&context)?;
        Ok(ListPromptsResult::with_all_items(prompts::list(
            &self.state,
            &caller,
        )))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let caller = caller_of(&context)?;
        prompts::get(
            &self.state,
            &caller,
            &request.name,
            request.arguments.as_ref(),
        )
        .map(Into::into)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let caller = caller_of(&context)?;
        Ok(ListResourcesResult::with_all_items(
            resources::list(&self.state, &caller).await?,
        ))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Ok(ListResourceTemplatesResult::with_all_items(
            resources::templates(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let caller = caller_of(&context)?;
        resources::read(&self.state, &caller, &request.uri)
            .await
            .map(Into::into)
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let caller = caller_of(&context)?;
        resources::subscribe(
            &self.state,
            &caller,
            context.peer.clone(),
            &self.subscriptions,
            &request.uri,
        )
        .await
    }

    /// A subscription ends by itself when its job ends or the session
    /// closes; unsubscribing earlier is accepted and changes nothing.
    async fn unsubscribe(
        &self,
        _request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        Ok(())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(listen::accepted(requested))
    }

    async fn listen(&self, subscription: SubscriptionContext) -> Result<(), McpError> {
        let caller = caller_of(subscription.request_context())?;
        let tools_changed = self.state.mcp.listens.subscribe();
        listen::listen(&self.state, &caller, subscription, tools_changed).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let caller = caller_of(&context)?;
        tasks::cancel(&self.state, &caller, &request.task_id).await
    }
}

/// Why a bundle call's arguments cannot be used (the call's error result).
#[derive(Debug, thiserror::Error)]
enum BadArguments {
    #[error("`input` (a string) is required")]
    NoInput,
    #[error("`variables` must be an object")]
    VariablesNotAnObject,
}

/// A bundle call's `input` (a string, required) and `variables` (an
/// object, if given).
fn call_arguments(args: &JsonObject) -> Result<(String, JsonObject), BadArguments> {
    let Some(input) = args.get("input").and_then(Value::as_str).map(str::to_owned) else {
        return Err(BadArguments::NoInput);
    };
    let variables = match args.get("variables") {
        None | Some(Value::Null) => JsonObject::new(),
        Some(Value::Object(map)) => map.clone(),
        Some(_) => return Err(BadArguments::VariablesNotAnObject),
    };
    Ok((input, variables))
}

/// The API key of the HTTP request that carried an MCP message (the API's
/// authentication put it in the request's extensions).
fn caller_of(context: &RequestContext<RoleServer>) -> Result<Caller, McpError> {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Caller>())
        .cloned()
        .ok_or_else(|| McpError::internal_error("the request carries no API key", None))
}

/// The `/mcp` service. `stop` ends open streams at shutdown.
pub fn service(state: AppState, max_body_bytes: usize, stop: CancellationToken) -> Router {
    let server = state.registry.snapshot().config.server.clone();
    let sessions = sessions::Sessions::new(server.mcp.session_idle.into(), stop.clone());
    // The front door already refuses other hosts; the SDK's own check stays
    // on as a second line, with the same names.
    let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    hosts.extend(server.public_hosts.iter().cloned());
    if !server.listen.ip().is_unspecified() {
        hosts.push(server.listen.ip().to_string());
    }
    let config = StreamableHttpServerConfig::default()
        .with_max_request_body_bytes(max_body_bytes)
        .with_cancellation_token(stop)
        .with_allowed_hosts(hosts);
    let mcp = StreamableHttpService::new(
        move || {
            Ok(BundleTools {
                state: state.clone(),
                log_level: notify::Level::default(),
                subscriptions: resources::subscriptions(),
            })
        },
        sessions.clone(),
        config,
    );
    let door = door::Door {
        sessions,
        max_sessions: server.mcp.max_sessions,
        max_body_bytes,
    };
    Router::new()
        .fallback_service(mcp)
        .layer(axum::middleware::from_fn_with_state(
            door,
            door::at_the_door,
        ))
}
