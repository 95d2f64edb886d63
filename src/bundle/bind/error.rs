//! [`BindError`]: why a tool spec does not bind to a backend. It owns the
//! messages only; `bind` decides when each happens.

use std::path::PathBuf;

use crate::approval::ApprovalSpecError;
use crate::bundle::schema::ToolKind;

/// Why a tool spec does not bind to a backend: what is missing or refused,
/// quoting the name it looked for and what there is instead. Where: the
/// caller names the key (`tools[i]`, `tools[i].server`) or wraps it in
/// [`BindError::Tool`].
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("an mcp tool source needs `server`")]
    NoMcpServer,
    #[error("invalid MCP server: {0}")]
    McpServerInvalid(serde_json::Error),
    #[error("MCP tools need the async runtime")]
    NoRuntime,
    /// The MCP server could not be reached or listed (the tools module's
    /// message, which names the server).
    #[error("{0}")]
    Mcp(String),
    #[error("plugin tools need the plugins directory (paths.plugins_dir)")]
    NoPluginsDir,
    #[error("no plugin named {name:?} in the plugins directory (loaded: {loaded})")]
    NoPlugin { name: String, loaded: String },
    #[error("plugin {plugin:?} has no tool {tool:?} (it exports: {exports})")]
    NoPluginTool {
        plugin: String,
        tool: String,
        exports: String,
    },
    /// The plugin's library could not be instantiated.
    #[error("{0}")]
    PluginInstance(String),
    #[error("no agent {id:?} in the daemon config's [[agents]] (known: {known})")]
    NoAgent { id: String, known: String },
    #[error("an http_agent tool needs `agent` or `url`")]
    NoAgentOrUrl,
    /// The http_agent's endpoint or settings were refused.
    #[error("{0}")]
    HttpAgent(String),
    #[error("`agent` tools run other bundles and need the daemon (`structured-agents serve`)")]
    AgentNeedsDaemon,
    #[error("tool kind {0:?} is not available in this build")]
    KindUnavailable(ToolKind),
    #[error("cannot read the script {}: {error}", .script.display())]
    ScriptUnreadable {
        script: PathBuf,
        error: std::io::Error,
    },
    #[error("grail.externals: no tool {tool:?} (not grail) to answer external {function:?}")]
    NoExternal { tool: String, function: String },
    #[error("approval: {0}")]
    Approval(#[from] ApprovalSpecError),
    /// Timeout, retries, cache or guardrails were refused.
    #[error("{0}")]
    Policy(String),
    /// One of several specs bound at once: which one.
    #[error("tool {name:?}: {error}")]
    Tool { name: String, error: Box<BindError> },
}
