//! Daemon configuration: built-in defaults < a TOML file (`--config FILE`, or
//! `/etc/structured-agents/config.toml` when present) < `STRUCTURED_AGENTS_*`
//! environment variables (nested keys joined with `__`).
//!
//! Raw settings only: resolving them (endpoints into clients, paths into a
//! registry) happens in the daemon. This module must not know about bundles.

mod agents_file;
mod check;
mod live;
mod load;
mod locate;
mod queue;
mod webhooks;

pub use load::{LoadConfig, LoadKind, LoadThresholds};
pub use queue::{QueueBackend, QueueConfig, QueueDurability, default_pool_size, heartbeat_every};

pub use live::LIVE_BESIDE_BINDINGS;
pub use webhooks::WebhookConfig;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration::HumanDuration;

/// The shortest `queue.lease` accepted.
pub const MIN_LEASE: std::time::Duration = std::time::Duration::from_secs(1);

/// The system-wide config file, read when no `--config` is given and it exists.
pub const SYSTEM_CONFIG: &str = "/etc/structured-agents/config.toml";

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub server: ServerConfig,
    /// API keys: who may call the daemon, with which scopes, bundles and
    /// quotas (docs/security.md).
    pub auth: AuthConfig,
    pub paths: PathsConfig,
    pub queue: QueueConfig,
    /// Named model servers that bundles refer to in `model.endpoint`.
    pub endpoints: BTreeMap<String, EndpointConfig>,
    pub telemetry: TelemetryConfig,
    pub observers: ObserversConfig,
    /// Remote agents that `http_agent` tools refer to by id.
    pub agents: Vec<crate::tools::http_agent::HttpAgentSpec>,
    /// The runtime API (`/api`): which bundles answer queries and host group chats.
    pub runtime: RuntimeConfig,
    /// Where bundles may make the daemon connect on their own (their
    /// `http_agent` tools' `url` and a model `endpoint` given as a URL).
    /// Endpoints and agents named in this config are always reachable.
    pub egress: EgressConfig,
    /// What each model's tokens cost, per million, by the model name a
    /// request sends (`[prices."gpt-4o-mini"] prompt_per_million = 0.15`):
    /// the `cost` budgets and the spend metrics read it.
    pub prices: crate::budget::Prices,
    /// Completion webhooks: signing secret, attempts, timeout, backoff.
    pub webhooks: WebhookConfig,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, Default, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// The API keys file (`structured-agents keys new NAME …` creates and
    /// fills it); read again by every reload. Besides these keys, the
    /// single `server.token_file` token keeps working as the key `token`
    /// with every scope.
    pub keys_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, Default, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct EgressConfig {
    /// The URLs the daemon may send to on a tenant's or a bundle's word
    /// (webhooks, A2A push configs, a bundle's MCP server, remote agent
    /// and model endpoint URLs), each an http(s) URL compared parsed:
    /// scheme, host, port (`:*` for any) and path prefix
    /// (`"https://hooks.example.com/"`, `"http://127.0.0.1:9000"`). Unset:
    /// any URL whose host is not, and does not resolve to, an address of
    /// this machine or a private, link-local or reserved network; set
    /// (even empty): only these, to whatever their hosts resolve.
    /// Endpoints and agents named in this config are always reachable.
    pub allow: Option<Vec<String>>,
}

impl EgressConfig {
    /// The rule these settings make (`egress.allow` parsed).
    pub fn policy(&self) -> Result<crate::egress::Egress, crate::egress::EgressError> {
        crate::egress::Egress::new(self.allow.as_deref())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeConfig {
    /// The bundle that answers `POST /api/query`, calling agents as tools.
    pub router: String,
    /// The bundle that hosts `POST /api/group-chat` (its `group_chat:`
    /// section; its own model is the default selector).
    pub group_chat: String,
    /// Which agents the router can call: `directory` (every agent of
    /// `GET /api/agents`, each a tool named after its id, besides the
    /// tools its bundle declares) or `declared` (only those tools).
    pub router_reach: RouterReach,
    /// With `router_reach = "directory"`: only these agent ids (all when unset).
    pub router_allow: Option<Vec<String>>,
    /// With `router_reach = "directory"`: never these agent ids.
    pub router_deny: Vec<String>,
    /// The `senderId` of the message envelopes the daemon sends to agents
    /// (`http_agent` tools, group chats, `structured-agents direct`).
    pub sender_id: String,
    /// A JSON file of remote agents in the multi-agent runtime's format
    /// (`agents.json`: `{"agents": [{id, name, description, capabilities,
    /// endpoint}]}` or the bare list), read beside `[[agents]]`; relative
    /// to the config file. Unset: `agents.json` beside the config file,
    /// when there is one (the runtime read `agents.json` by default).
    pub agents_file: Option<PathBuf>,
    /// How the router's reach of the directory is offered to its model:
    /// `agent_tools` (one tool per agent, named after its id, taking
    /// `content` or `input`) or `call_agent` (the multi-agent runtime's
    /// functions, for prompts written for it: `<id>-call_agent(query,
    /// sender_id, conversation_id)`).
    pub router_functions: RouterFunctions,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            router: "router".into(),
            group_chat: "group-chat".into(),
            router_reach: RouterReach::Directory,
            router_allow: None,
            router_deny: Vec::new(),
            sender_id: crate::tools::http_agent::DEFAULT_SENDER_ID.into(),
            agents_file: None,
            router_functions: RouterFunctions::AgentTools,
        }
    }
}

/// How the router's agent tools are named and called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RouterFunctions {
    /// One tool per agent named after its id, taking `content` (remote) or
    /// `input` (a bundle).
    AgentTools,
    /// The multi-agent runtime's `<id>-call_agent(query, sender_id,
    /// conversation_id)`: its plugin per agent, each with one function.
    CallAgent,
}

/// Which agents the runtime's router can call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RouterReach {
    /// Every agent of the directory (as in the multi-agent runtime).
    Directory,
    /// Only the agent tools the router bundle declares.
    Declared,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address of the HTTP API. A non-loopback address requires a token.
    pub listen: SocketAddr,
    /// A file holding the bearer token (first line).
    pub token_file: Option<PathBuf>,
    /// An environment variable holding the bearer token.
    pub token_env: Option<String>,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Interval of SSE heartbeat comments.
    pub sse_heartbeat: HumanDuration,
    /// Host names clients use to reach the daemon besides loopback names and
    /// IP literals (`agents.example.com`); any other `Host` is refused (421),
    /// which stops DNS-rebinding pages.
    pub public_hosts: Vec<String>,
    /// Origins of web pages allowed to call the API
    /// (`https://console.example.com`); requests from any other page are
    /// refused (403). Empty by default: no web page can drive the daemon.
    pub allowed_origins: Vec<String>,
    /// The MCP sessions of `/mcp`.
    pub mcp: McpServerConfig,
    /// Connections served at once. One more is answered 503 with
    /// `Retry-After` and closed, so the daemon keeps serving the clients it
    /// has. Keep `LimitNOFILE=` of the systemd unit well above it.
    pub max_connections: usize,
    /// Event streams (`GET /v1/jobs/{id}/events`) open at once, in all;
    /// one more is refused with 503 and `Retry-After`.
    pub max_event_streams: usize,
    /// Event streams one caller may hold open at once (a caller is the
    /// credential a request presents; with one shared token, or none,
    /// every client is the same caller). Unset: a fair share, a quarter of
    /// `max_event_streams` ([`ServerConfig::streams_per_caller`]), so one
    /// key's streams cannot take every place from the others.
    pub max_event_streams_per_caller: Option<usize>,
    /// Schedules made over the API (`POST /v1/schedules`) that may exist at
    /// once, in all; a bundle's own `schedule:` does not count.
    pub max_schedules: usize,
    /// The same per API key. Unset: a fair share, a quarter of
    /// `max_schedules` ([`ServerConfig::schedules_per_key`]).
    pub max_schedules_per_key: Option<usize>,
    /// A2A push notification configs that may be held at once, in all, on
    /// tasks not ended: each state change of a task is one delivery per
    /// config.
    pub max_push_configs: usize,
    /// The same per API key. Unset: a fair share, a quarter of
    /// `max_push_configs` ([`ServerConfig::push_configs_per_key`]).
    pub max_push_configs_per_key: Option<usize>,
    /// How long a connection has to send a request's headers, counted from
    /// the accept (a socket that sends nothing is closed after it) or from
    /// the end of the previous answer.
    pub header_timeout: HumanDuration,
    /// How long a request's body has to arrive whole; a slower one is
    /// answered 408 and its connection closed.
    pub body_timeout: HumanDuration,
    /// A kept-alive connection with no request in progress is closed after
    /// this (an open event stream is a request in progress).
    pub idle_timeout: HumanDuration,
}

/// The part of a daemon-wide cap one API key gets unless its own cap is
/// set: a quarter, so at least four keys can each hold their whole share.
pub const FAIR_SHARE: usize = 4;

impl ServerConfig {
    /// Event streams one caller may hold open: `max_event_streams_per_caller`,
    /// or a fair share of `max_event_streams` (at least one).
    pub fn streams_per_caller(&self) -> usize {
        self.max_event_streams_per_caller
            .unwrap_or((self.max_event_streams / FAIR_SHARE).max(1))
    }

    /// API schedules one key may have: `max_schedules_per_key`, or a fair
    /// share of `max_schedules` (at least one).
    pub fn schedules_per_key(&self) -> usize {
        self.max_schedules_per_key
            .unwrap_or((self.max_schedules / FAIR_SHARE).max(1))
    }

    /// Push configs one key may hold: `max_push_configs_per_key`, or a
    /// fair share of `max_push_configs` (at least one).
    pub fn push_configs_per_key(&self) -> usize {
        self.max_push_configs_per_key
            .unwrap_or((self.max_push_configs / FAIR_SHARE).max(1))
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 7860)),
            token_file: None,
            token_env: None,
            max_body_bytes: 1024 * 1024,
            sse_heartbeat: HumanDuration::from_secs(15),
            public_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            mcp: McpServerConfig::default(),
            max_connections: 4096,
            max_event_streams: 2048,
            max_event_streams_per_caller: None,
            max_schedules: 1000,
            max_schedules_per_key: None,
            max_push_configs: 10_000,
            max_push_configs_per_key: None,
            header_timeout: HumanDuration::from_secs(10),
            body_timeout: HumanDuration::from_secs(30),
            idle_timeout: HumanDuration::from_secs(5),
        }
    }
}

/// `[server.mcp]`: how many MCP sessions `/mcp` keeps, and for how long.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct McpServerConfig {
    /// A session with no request for this long is closed (a `tools/call`
    /// still running keeps its session open); its client must initialize
    /// a new one.
    pub session_idle: HumanDuration,
    /// Sessions open at once; the next `initialize` is refused with a 503
    /// until one ends (`DELETE /mcp`) or expires.
    pub max_sessions: usize,
    /// A `tools/call` from a client that declared the tasks extension
    /// (`io.modelcontextprotocol/tasks`) whose job runs longer than this, or
    /// parks for an approval, answers with a task bound to the job.
    pub task_after: HumanDuration,
}

impl Default for McpServerConfig {
    fn default() -> Self {
        Self {
            session_idle: HumanDuration::from_secs(600),
            max_sessions: 64,
            task_after: HumanDuration::from_secs(3),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PathsConfig {
    /// Watched directory of bundle directories.
    pub bundles_dir: PathBuf,
    /// Watched directory of model-plugin configs (`<name>.toml`).
    pub models_dir: PathBuf,
    /// Directory of plugin libraries (`lib*.so`).
    pub plugins_dir: PathBuf,
    /// Where the queue database and the plugin cache live.
    pub state_dir: PathBuf,
    /// Accept group- or world-writable bundles and models directories, or
    /// ones owned by another user. Whoever can write a bundle runs code as
    /// the daemon user, so leave this off unless you mean it.
    pub allow_insecure_dirs: bool,
}

impl Default for PathsConfig {
    fn default() -> Self {
        Self {
            bundles_dir: "config/bundles".into(),
            models_dir: "config/models".into(),
            plugins_dir: "plugins-enabled".into(),
            state_dir: "state".into(),
            allow_insecure_dirs: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum EndpointKind {
    #[default]
    Http,
    Scripted,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct EndpointConfig {
    pub kind: EndpointKind,
    /// http: up to and including `/v1`.
    pub base_url: Option<String>,
    /// scripted: the reply script.
    pub script: Option<PathBuf>,
    /// The environment variable holding the API key (never the key itself).
    pub api_key_env: Option<String>,
    pub connect_timeout: HumanDuration,
    pub request_timeout: HumanDuration,
    pub max_retries: u32,
    /// The longest wait between attempts; a server's `Retry-After` is capped to it.
    pub backoff_max: HumanDuration,
    /// The largest reply body accepted from this server, in bytes.
    pub max_response_bytes: usize,
    /// Model requests in flight at once to this server, across all jobs.
    pub max_concurrent: usize,
    /// `gen_ai.provider.name` in telemetry.
    pub provider: String,
    /// The server's family (`vllm`, `llama_cpp`, `ollama`, `sglang`,
    /// `openai`): where bundles using this endpoint put their grammars.
    pub server: crate::model::ServerKind,
    /// Load-aware admission: where the server's load is read and past
    /// which values new model calls wait (unset: the fixed permit only).
    pub load: Option<LoadConfig>,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        Self {
            kind: EndpointKind::Http,
            base_url: None,
            script: None,
            api_key_env: None,
            connect_timeout: HumanDuration::from_secs(5),
            request_timeout: HumanDuration::from_secs(120),
            max_retries: 2,
            backoff_max: HumanDuration(crate::client::DEFAULT_BACKOFF_MAX),
            max_response_bytes: crate::client::DEFAULT_MAX_RESPONSE_BYTES,
            max_concurrent: 16,
            provider: "openai".into(),
            server: crate::model::ServerKind::default(),
            load: None,
        }
    }
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default, clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    pub log_format: LogFormat,
    /// `tracing` filter, e.g. "info,structured_agents=debug".
    pub log_filter: String,
    /// Serve Prometheus metrics on `/metrics`.
    pub metrics: bool,
    /// OTLP endpoint (e.g. http://127.0.0.1:4318); `OTEL_EXPORTER_OTLP_ENDPOINT` also enables export.
    pub otlp_endpoint: Option<String>,
    /// `http/protobuf` (default) or `grpc`.
    pub otlp_protocol: Option<String>,
    /// Send message content (as `gen_ai.client.inference.operation.details`
    /// log events over OTLP) and tool arguments/results (on `execute_tool`
    /// spans); off by default.
    pub capture_message_content: bool,
    /// Spans queued for export before new ones are dropped (and counted).
    pub max_queue_size: usize,
    /// How long shutdown waits for the last export.
    pub shutdown_timeout: HumanDuration,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            log_format: LogFormat::Text,
            log_filter: "info".into(),
            metrics: true,
            otlp_endpoint: None,
            otlp_protocol: None,
            capture_message_content: false,
            max_queue_size: 2048,
            shutdown_timeout: HumanDuration::from_secs(5),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ObserversConfig {
    /// Observer plugins that receive every bundle's events.
    pub enabled: Vec<String>,
    /// Per-plugin init config (JSON-compatible table).
    pub config: BTreeMap<String, serde_json::Value>,
    /// Events queued per observer plugin before new ones are dropped.
    pub queue_capacity: Option<usize>,
}

/// A config that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{location}{key}: {message}")]
    Invalid {
        location: String,
        key: String,
        message: String,
    },
    #[error("config file {0} does not exist")]
    Missing(PathBuf),
}

impl Config {
    /// Loads defaults < file < environment. `file` is `--config`; without it
    /// the system file is used when it exists.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        let file = match file {
            Some(f) if !f.exists() => return Err(ConfigError::Missing(f.to_path_buf())),
            Some(f) => Some(f.to_path_buf()),
            None => Some(PathBuf::from(SYSTEM_CONFIG)).filter(|p| p.exists()),
        };
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(f) = &file {
            figment = figment.merge(Toml::file_exact(f));
        }
        // Settings are SECTION__KEY; the command line's own variables
        // (STRUCTURED_AGENTS_CONFIG, which the systemd unit sets, _SERVER,
        // _TOKEN, _LOG_FORMAT) share the prefix but name no section.
        figment = figment.merge(
            Env::prefixed("STRUCTURED_AGENTS_")
                .split("__")
                .filter(|key| key.as_str().contains('.')),
        );
        let mut config: Config = figment
            .extract()
            .map_err(|e| locate::describe(e, file.as_deref()))?;
        config.validate(file.as_deref())?;
        if let Some(f) = &file {
            config.resolve_relative_paths(f.parent().unwrap_or(Path::new(".")));
        }
        agents_file::merge(&mut config, file.as_deref())?;
        Ok(config)
    }

    /// Relative paths in a config file are relative to that file.
    fn resolve_relative_paths(&mut self, base: &Path) {
        let fix = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        fix(&mut self.paths.bundles_dir);
        fix(&mut self.paths.models_dir);
        fix(&mut self.paths.plugins_dir);
        fix(&mut self.paths.state_dir);
        if let Some(p) = &mut self.queue.path {
            fix(p);
        }
        for ep in self.endpoints.values_mut() {
            if let Some(s) = &mut ep.script {
                fix(s);
            }
        }
        if let Some(t) = &mut self.server.token_file {
            fix(t);
        }
        if let Some(k) = &mut self.auth.keys_file {
            fix(k);
        }
        if let Some(f) = &mut self.runtime.agents_file {
            fix(f);
        }
    }

    /// What is wrong with the directories this config points at (for
    /// `validate --config`), one line each.
    pub fn check_paths(&self) -> Vec<String> {
        [
            ("paths.bundles_dir", &self.paths.bundles_dir),
            ("paths.models_dir", &self.paths.models_dir),
        ]
        .into_iter()
        .filter(|(_, dir)| !dir.is_dir())
        .map(|(key, dir)| format!("{key}: {} is not a directory", dir.display()))
        .collect()
    }

    /// The API token from `server.token_file` (its first line) or the
    /// variable `server.token_env` names; `None` when neither is set.
    pub fn read_token(&self) -> Result<Option<String>, ConfigError> {
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            location: String::new(),
            key: key.to_string(),
            message,
        };
        if let Some(file) = &self.server.token_file {
            let text = std::fs::read_to_string(file).map_err(|e| {
                invalid(
                    "server.token_file",
                    format!(
                        "cannot read {}: {e}; create it with the token on its first line",
                        file.display()
                    ),
                )
            })?;
            let token = text.lines().next().unwrap_or_default().trim();
            if token.is_empty() {
                return Err(invalid(
                    "server.token_file",
                    format!(
                        "{} is empty; put the token on its first line",
                        file.display()
                    ),
                ));
            }
            return Ok(Some(token.to_string()));
        }
        if let Some(var) = &self.server.token_env {
            return match std::env::var(var) {
                Ok(t) if !t.trim().is_empty() => Ok(Some(t.trim().to_string())),
                _ => Err(invalid(
                    "server.token_env",
                    format!(
                        "the environment variable {var} is not set; export it or remove server.token_env"
                    ),
                )),
            };
        }
        Ok(None)
    }

    pub fn queue_path(&self) -> PathBuf {
        self.queue
            .path
            .clone()
            .unwrap_or_else(|| self.paths.state_dir.join("queue.db"))
    }
}

#[cfg(test)]
mod tests;
