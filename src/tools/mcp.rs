//! MCP servers as tool sources (`kind: mcp`), with the official `rmcp` SDK,
//! over stdio or Streamable HTTP. A stdio server is a child process the
//! source supervises: when it dies,
//! the call in flight fails (retryable) and the next call restarts it, with
//! exponential backoff between restarts. The server's tools are listed once
//! and cached until it sends `tools/list_changed`. Every connect, list and
//! call has a deadline; a cancelled job cancels its call.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rmcp::model::CallToolRequestParams;

/// The `_meta` key of a call's idempotency key.
pub const IDEMPOTENCY_META_KEY: &str = "structured-agents/idempotency-key";
use rmcp::service::{NotificationContext, RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};

use super::process::{DEFAULT_ENV_ALLOWLIST, GroupGuard, isolated_command};
use rmcp::{ClientHandler, ServiceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Tool, ToolContext, ToolError, ToolOutput};
use crate::duration::HumanDuration;
use crate::types::ToolSchema;

/// How to start an MCP server (the `server` key of a `kind: mcp` tool).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerSpec {
    /// The server command as an argv list (stdio transport).
    #[serde(default)]
    pub command: Vec<String>,
    /// Or the URL of a Streamable HTTP server (e.g. `http://127.0.0.1:8000/mcp`).
    #[serde(default)]
    pub url: Option<String>,
    /// Variables set for the server. Its environment is otherwise cleared
    /// but for `env_allowlist`: API keys in the daemon's environment never
    /// reach a bundle's server.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Variables passed through from the daemon's environment (default:
    /// PATH, LANG, LC_ALL, TZ, HOME, TMPDIR).
    #[serde(default)]
    pub env_allowlist: Option<Vec<String>>,
    /// Working directory, relative to the bundle.
    #[serde(default)]
    pub working_dir: Option<String>,
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout: HumanDuration,
    #[serde(default = "default_connect_timeout")]
    pub list_timeout: HumanDuration,
    /// Longest wait between restarts of a crashing server.
    #[serde(default = "default_max_backoff")]
    pub max_restart_backoff: HumanDuration,
}

fn default_connect_timeout() -> HumanDuration {
    HumanDuration::from_secs(10)
}

fn default_max_backoff() -> HumanDuration {
    HumanDuration::from_secs(30)
}

#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("mcp server `{name}`: {detail}")]
    Server { name: String, detail: String },
}

/// Told that a server's tool list changed (the daemon asks for a reload on
/// its one trigger channel). Called from the connection's task: must not block.
pub type OnToolsChanged = Arc<dyn Fn() + Send + Sync>;

/// Invalidates the tool cache when the server says its tools changed, and
/// tells whoever bound these tools (the daemon rebinds the bundle, so its
/// tool list and grammar follow).
#[derive(Clone)]
struct Handler {
    tools_changed: Arc<AtomicBool>,
    on_change: Option<OnToolsChanged>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.store(true, Ordering::SeqCst);
        if let Some(notify) = &self.on_change {
            notify();
        }
    }
}

type Connection = RunningService<RoleClient, Handler>;

struct State {
    connection: Option<Arc<Connection>>,
    /// The stdio server's process group, killed when replaced or dropped.
    group: Option<GroupGuard>,
    tools: Option<Vec<rmcp::model::Tool>>,
    failures: u32,
    next_attempt: Option<Instant>,
    /// Whether the server ever started (later starts are restarts).
    started: bool,
    restarts: u32,
}

/// One MCP server and its connection.
pub struct McpSource {
    name: String,
    spec: McpServerSpec,
    dir: PathBuf,
    tools_changed: Arc<AtomicBool>,
    on_change: Option<OnToolsChanged>,
    /// The rule a `url` server is reached under.
    egress: crate::egress::Egress,
    state: tokio::sync::Mutex<State>,
}

impl McpSource {
    /// Connects and lists the tools (with deadlines).
    /// A `url` server is reached under `egress` (checked, resolved through
    /// it, no redirects); a `command` server is not a connection.
    pub async fn connect(
        name: &str,
        spec: &McpServerSpec,
        bundle_dir: &Path,
        egress: &crate::egress::Egress,
    ) -> Result<Arc<Self>, McpError> {
        Self::connect_notifying(name, spec, bundle_dir, egress, None).await
    }

    /// [`Self::connect`], and a call of `on_change` whenever the server
    /// announces that its tool list changed.
    pub async fn connect_notifying(
        name: &str,
        spec: &McpServerSpec,
        bundle_dir: &Path,
        egress: &crate::egress::Egress,
        on_change: Option<OnToolsChanged>,
    ) -> Result<Arc<Self>, McpError> {
        let source = Arc::new(Self {
            on_change,
            egress: egress.clone(),
            name: name.to_string(),
            spec: spec.clone(),
            dir: bundle_dir.join(spec.working_dir.as_deref().unwrap_or(".")),
            tools_changed: Arc::new(AtomicBool::new(false)),
            state: tokio::sync::Mutex::new(State {
                connection: None,
                group: None,
                tools: None,
                failures: 0,
                next_attempt: None,
                started: false,
                restarts: 0,
            }),
        });
        source.tools().await?;
        Ok(source)
    }

    fn err(&self, detail: impl Into<String>) -> McpError {
        McpError::Server {
            name: self.name.clone(),
            detail: detail.into(),
        }
    }

    /// How many times the server was (re)started after the first start.
    pub async fn restarts(&self) -> u32 {
        self.state.lock().await.restarts
    }

    /// Starts (or connects to) the server; a stdio server comes with the
    /// guard of its process group.
    async fn start(&self) -> Result<(Connection, Option<GroupGuard>), McpError> {
        let handler = Handler {
            tools_changed: self.tools_changed.clone(),
            on_change: self.on_change.clone(),
        };
        let timeout: Duration = self.spec.connect_timeout.into();
        let serving = match (&self.spec.url, self.spec.command.split_first()) {
            (Some(_), Some(_)) => {
                return Err(
                    self.err("give either `command` (stdio) or `url` (Streamable HTTP), not both")
                );
            }
            (Some(url), None) => {
                // Checked at every (re)connect, through a client whose
                // resolver applies the same rule to the address it dials.
                let checked = self
                    .egress
                    .check(url)
                    .map_err(|e| self.err(e.to_string()))?;
                let client = self
                    .egress
                    .client()
                    .build()
                    .map_err(|e| self.err(format!("cannot build its HTTP client: {e}")))?;
                let config = StreamableHttpClientTransportConfig::with_uri(checked.as_str());
                tokio::time::timeout(
                    timeout,
                    handler.serve(StreamableHttpClientTransport::with_client(client, config)),
                )
                .await
            }
            (None, Some((program, args))) => {
                let command = isolated_command(
                    program,
                    args,
                    &self.dir,
                    match &self.spec.env_allowlist {
                        Some(keys) => keys.iter().map(String::as_str).collect::<Vec<_>>(),
                        None => DEFAULT_ENV_ALLOWLIST.to_vec(),
                    },
                    self.spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                );
                let transport = TokioChildProcess::new(command)
                    .map_err(|e| self.err(format!("cannot start {program}: {e}")))?;
                // The server runs in its own process group, killed as a group
                // when it is replaced or its bundle version is dropped.
                let group = GroupGuard::of(transport.id());
                return match tokio::time::timeout(timeout, handler.serve(transport)).await {
                    Ok(Ok(connection)) => Ok((connection, Some(group))),
                    Ok(Err(e)) => Err(self.err(format!("initialization failed: {e}"))),
                    Err(_) => Err(self.err(format!(
                        "did not initialize within {}",
                        self.spec.connect_timeout
                    ))),
                };
            }
            (None, None) => {
                return Err(self.err("give `command` (stdio) or `url` (Streamable HTTP)"));
            }
        };
        match serving {
            Ok(Ok(connection)) => Ok((connection, None)),
            Ok(Err(e)) => Err(self.err(format!("initialization failed: {e}"))),
            Err(_) => Err(self.err(format!(
                "did not initialize within {}",
                self.spec.connect_timeout
            ))),
        }
    }

    /// The live connection, (re)starting the server if needed, with backoff.
    async fn connection(&self, state: &mut State) -> Result<Arc<Connection>, McpError> {
        if let Some(c) = state
            .connection
            .as_ref()
            .filter(|c| !c.is_transport_closed())
        {
            return Ok(c.clone());
        }
        if let Some(at) = state.next_attempt.filter(|at| *at > Instant::now()) {
            return Err(self.err(format!(
                "restarting after a failure; next attempt in {:?}",
                at - Instant::now()
            )));
        }
        state.connection = None;
        state.group = None;
        match self.start().await {
            Ok((connection, group)) => {
                state.group = group;
                if std::mem::replace(&mut state.started, true) {
                    state.restarts += 1;
                    tracing::warn!(mcp = %self.name, restarts = state.restarts, "mcp server restarted");
                }
                state.failures = 0;
                state.next_attempt = None;
                state.tools = None;
                let connection = Arc::new(connection);
                state.connection = Some(connection.clone());
                Ok(connection)
            }
            Err(e) => {
                state.failures += 1;
                let backoff = Duration::from_millis(200)
                    .saturating_mul(2u32.saturating_pow(state.failures.min(10)));
                state.next_attempt =
                    Some(Instant::now() + backoff.min(self.spec.max_restart_backoff.into()));
                Err(e)
            }
        }
    }

    /// The server's tools (cached until it reports a change).
    pub async fn tools(&self) -> Result<Vec<rmcp::model::Tool>, McpError> {
        let mut state = self.state.lock().await;
        if self.tools_changed.swap(false, Ordering::SeqCst) {
            state.tools = None;
        }
        if let (Some(tools), Some(c)) = (&state.tools, &state.connection)
            && !c.is_transport_closed()
        {
            return Ok(tools.clone());
        }
        let connection = self.connection(&mut state).await?;
        let tools =
            tokio::time::timeout(self.spec.list_timeout.into(), connection.list_all_tools())
                .await
                .map_err(|_| {
                    self.err(format!(
                        "tools/list did not answer within {}",
                        self.spec.list_timeout
                    ))
                })?
                .map_err(|e| self.err(format!("tools/list failed: {e}")))?;
        state.tools = Some(tools.clone());
        Ok(tools)
    }

    /// Calls `tool`; a result over `max_output_bytes` (counted as the JSON
    /// the model would read) is a tool error naming the tool and the cap.
    /// The transport itself never buffers more than rmcp's bound on one
    /// message ([`MAX_OUTPUT_BYTES`]), so a larger cap is refused at load.
    async fn call(
        &self,
        tool: &str,
        arguments: Value,
        ctx: &ToolContext<'_>,
        max_output_bytes: usize,
    ) -> Result<ToolOutput, ToolError> {
        let connection = {
            let mut state = self.state.lock().await;
            self.connection(&mut state)
                .await
                .map_err(|e| ToolError::Retryable(e.to_string()))?
        };
        let mut params = CallToolRequestParams::new(tool.to_string());
        params.arguments = arguments.as_object().cloned();
        // The same key on every attempt of this call, so a server can
        // recognize a repetition after a crash.
        let mut meta = serde_json::Map::new();
        meta.insert(
            IDEMPOTENCY_META_KEY.into(),
            Value::String(ctx.idempotency_key()),
        );
        params.meta = Some(meta.into());
        let result = tokio::select! {
            r = tokio::time::timeout(ctx.remaining(), connection.call_tool(params)) => r,
            _ = ctx.cancel.cancelled() => return Err(ToolError::Failed("cancelled".into())),
        };
        let result = match result {
            Err(_) => return Err(ToolError::Failed("timeout".into())),
            Ok(Err(e)) => {
                // The server died or the pipe broke: drop the connection so
                // the next call restarts it.
                let mut state = self.state.lock().await;
                if state
                    .connection
                    .as_ref()
                    .is_some_and(|c| Arc::ptr_eq(c, &connection))
                {
                    state.connection = None;
                }
                return Err(ToolError::Retryable(format!(
                    "mcp server `{}`: {e} (it will be restarted)",
                    self.name
                )));
            }
            Ok(Ok(result)) => result,
        };
        let content = serde_json::to_value(&result.content).unwrap_or(Value::Null);
        let text: Vec<String> = content
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c.get("text").and_then(Value::as_str).map(str::to_string))
            .collect();
        if result.is_error == Some(true) {
            return Err(ToolError::Failed(format!(
                "mcp tool `{tool}`: {}",
                text.join("\n")
            )));
        }
        let output = match (result.structured_content, text.len()) {
            (Some(structured), _) => ToolOutput::Json(structured),
            (None, 1) => ToolOutput::Text(text.into_iter().next().unwrap_or_default()),
            (None, _) => ToolOutput::Json(content),
        };
        let size = match &output {
            ToolOutput::Text(text) => text.len(),
            ToolOutput::Json(value) => value.to_string().len(),
            ToolOutput::Bytes(bytes) => bytes.len(),
            ToolOutput::Null => 0,
        };
        if size > max_output_bytes {
            return Err(ToolError::Failed(format!(
                "mcp tool `{tool}` of server `{}` answered with {size} bytes, more than its max_output_bytes of {max_output_bytes}; raise `max_output_bytes` on the tool's entry in bundle.yaml (at most {MAX_OUTPUT_BYTES}) or ask for less",
                self.name
            )));
        }
        Ok(output)
    }
}

/// The largest `max_output_bytes` an MCP tool may have: rmcp's bound on one
/// incoming message (a stdio line, an SSE event), past which a result never
/// reaches the tool at all.
pub const MAX_OUTPUT_BYTES: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

/// One tool of an MCP server.
pub struct McpTool {
    schema: ToolSchema,
    remote: String,
    source: Arc<McpSource>,
    /// The largest result accepted, in bytes.
    max_output_bytes: usize,
}

impl McpTool {
    /// The source's tools, filtered by `allow` and renamed with `prefix`,
    /// each accepting results of at most `max_output_bytes`.
    pub async fn from_source(
        source: &Arc<McpSource>,
        allow: Option<&[String]>,
        prefix: &str,
        max_output_bytes: usize,
    ) -> Result<Vec<McpTool>, McpError> {
        let tools = source.tools().await?;
        if let Some(allow) = allow {
            for name in allow {
                if !tools.iter().any(|t| t.name == name.as_str()) {
                    let offered: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
                    return Err(source.err(format!(
                        "has no tool {name:?} (it offers: {})",
                        offered.join(", ")
                    )));
                }
            }
        }
        Ok(tools
            .into_iter()
            .filter(|t| allow.is_none_or(|a| a.iter().any(|n| n.as_str() == t.name.as_ref())))
            .map(|t| McpTool {
                schema: ToolSchema {
                    name: format!("{prefix}{}", t.name),
                    description: t.description.as_deref().unwrap_or_default().to_string(),
                    parameters: Value::Object((*t.input_schema).clone()),
                },
                remote: t.name.to_string(),
                source: source.clone(),
                max_output_bytes,
            })
            .collect())
    }
}

#[async_trait]
impl Tool for McpTool {
    fn schema(&self) -> &ToolSchema {
        &self.schema
    }

    fn kind(&self) -> &'static str {
        "mcp"
    }

    fn stale(&self) -> bool {
        self.source.tools_changed.load(Ordering::SeqCst)
    }

    async fn invoke(
        &self,
        arguments: Value,
        ctx: ToolContext<'_>,
    ) -> Result<ToolOutput, ToolError> {
        self.source
            .call(&self.remote, arguments, &ctx, self.max_output_bytes)
            .await
    }
}
