//! Binding a bundle's tool specs to backends: building the `ToolEngine` a
//! run uses, and binding the specs the daemon makes up. The load-time
//! checks of the specs are in `bind/check.rs`, its errors in `bind/error.rs`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::schema::{ToolKind, ToolSpec};
use super::{Bundle, BundleError, BundleErrors};
use crate::approval::ApprovalSpec;
use crate::plugins::PluginRegistry;
use crate::tools::ToolPolicy;
use crate::tools::agent::AgentTool;
use crate::tools::grail::{GrailTool, GrailToolSpec, HostLaunch, HostPool};
use crate::tools::http_agent::{HttpAgentSpec, HttpAgentTool};
use crate::tools::mcp::{McpServerSpec, McpSource, McpTool};
use crate::tools::plugin::PluginTool;
use crate::tools::process::{DEFAULT_ENV_ALLOWLIST, ProcessSpec, ProcessTool};
use crate::tools::{Effect, Tool, ToolEngine};
use crate::types::ToolSchema;
use sha2::Digest;

mod check;
mod error;

pub(super) use check::{check_spec, grail_external_problems};
pub use error::BindError;

/// Default per-attempt tool deadline.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest output of a process, grail or mcp tool unless its
/// `max_output_bytes` says otherwise.
const DEFAULT_MAX_OUTPUT: usize = 1024 * 1024;

/// What tool backends need from the daemon.
#[derive(Clone, Default)]
pub struct ToolEnv {
    /// Whether `agent` tools can run (in the daemon, whose runner runs the
    /// bundles they name; not in `structured-agents run`).
    pub runs_agents: bool,
    /// Remote agents from the daemon config, for `http_agent` tools naming an `agent` id.
    pub remote_agents: Vec<HttpAgentSpec>,
    /// Plugins loaded from the plugins directory, for `plugin` tools.
    pub plugins: Option<Arc<PluginRegistry>>,
    /// Told when an MCP server announces that its tools changed (the daemon
    /// reloads, rebinding the bundles whose tools are stale).
    pub tools_changed: Option<crate::tools::mcp::OnToolsChanged>,
    /// The `senderId` of `http_agent` envelopes (`[runtime] sender_id`;
    /// default `runtime`).
    pub sender_id: Option<String>,
    /// Where the bundle's own MCP server and remote agent URLs may lead
    /// (the daemon's `egress.allow`; by default, nowhere on this machine
    /// or its networks).
    pub egress: Arc<crate::egress::Egress>,
}

/// The schema the model sees for a spec.
pub fn schema_of(spec: &ToolSpec) -> ToolSchema {
    ToolSchema {
        name: spec.name.clone(),
        description: spec.description.clone(),
        parameters: spec.parameters.clone(),
    }
}

/// Parses a `kind: mcp` entry's `server`.
pub(super) fn mcp_spec(spec: &ToolSpec) -> Result<McpServerSpec, BindError> {
    let server = spec.server.clone().ok_or(BindError::NoMcpServer)?;
    serde_json::from_value(server).map_err(BindError::McpServerInvalid)
}

/// Connects to the MCP server (blocking: call from a blocking thread inside
/// the runtime) and returns its allowed tools.
fn mcp_tools(
    spec: &ToolSpec,
    dir: &Path,
    egress: &crate::egress::Egress,
    on_change: Option<crate::tools::mcp::OnToolsChanged>,
) -> Result<Vec<Arc<dyn Tool>>, BindError> {
    let server = mcp_spec(spec)?;
    let handle = tokio::runtime::Handle::try_current().map_err(|_| BindError::NoRuntime)?;
    let prefix = spec.prefix.clone().unwrap_or_default();
    handle.block_on(async {
        let source = McpSource::connect_notifying(&spec.name, &server, dir, egress, on_change)
            .await
            .map_err(|e| BindError::Mcp(e.to_string()))?;
        let cap = spec.max_output_bytes.unwrap_or(DEFAULT_MAX_OUTPUT);
        let tools = McpTool::from_source(&source, spec.allow.as_deref(), &prefix, cap)
            .await
            .map_err(|e| BindError::Mcp(e.to_string()))?;
        Ok(tools
            .into_iter()
            .map(|t| Arc::new(t) as Arc<dyn Tool>)
            .collect())
    })
}

fn plugin_tool(spec: &ToolSpec, env: &ToolEnv) -> Result<Arc<dyn Tool>, BindError> {
    let name = spec.plugin.as_deref().unwrap_or_default();
    let registry = env.plugins.as_ref().ok_or(BindError::NoPluginsDir)?;
    let plugin = registry.get(name).ok_or_else(|| BindError::NoPlugin {
        name: name.to_string(),
        loaded: registry.names().join(", "),
    })?;
    let inner = spec
        .plugin_tool
        .clone()
        .unwrap_or_else(|| spec.name.clone());
    let exported = plugin
        .manifest
        .tools
        .iter()
        .find(|t| t.name == inner)
        .ok_or_else(|| BindError::NoPluginTool {
            plugin: name.to_string(),
            tool: inner.clone(),
            exports: plugin.info.tools.join(", "),
        })?;
    let mut schema = schema_of(spec);
    if schema.parameters == super::schema::default_parameters() {
        schema.parameters = exported.parameters.clone();
    }
    if schema.description.is_empty() {
        schema.description = exported.description.clone();
    }
    let instance = plugin
        .instantiate(&serde_json::Value::Null)
        .map_err(|e| BindError::PluginInstance(e.to_string()))?;
    Ok(Arc::new(PluginTool::new(
        schema,
        plugin.clone(),
        Arc::new(instance),
        inner,
    )))
}

fn http_agent(spec: &ToolSpec, env: &ToolEnv) -> Result<Arc<dyn Tool>, BindError> {
    // An agent of the daemon config is the operator's; a URL the bundle
    // names is sent under the egress rule.
    let (endpoint, recipient, agent_cap, message_type, egress) = match (&spec.agent, &spec.url) {
        (Some(id), _) => {
            let agent = env
                .remote_agents
                .iter()
                .find(|a| &a.id == id)
                .ok_or_else(|| {
                    let known: Vec<&str> =
                        env.remote_agents.iter().map(|a| a.id.as_str()).collect();
                    BindError::NoAgent {
                        id: id.clone(),
                        known: known.join(", "),
                    }
                })?;
            (
                agent.endpoint.clone(),
                agent.id.clone(),
                agent.max_response_bytes,
                agent.message_type(),
                None,
            )
        }
        (None, Some(url)) => (
            url.clone(),
            spec.name.clone(),
            None,
            Default::default(),
            Some(env.egress.as_ref()),
        ),
        (None, None) => return Err(BindError::NoAgentOrUrl),
    };
    let mut schema = schema_of(spec);
    if schema.parameters == super::schema::default_parameters() {
        schema.parameters = HttpAgentTool::default_parameters();
    }
    let cap = spec
        .max_response_bytes
        .or(agent_cap)
        .unwrap_or(crate::tools::http_agent::DEFAULT_MAX_RESPONSE_BYTES);
    HttpAgentTool::new(schema, endpoint, recipient, cap, egress)
        .map(|t| t.with_message_type(message_type))
        .map(|t| match &env.sender_id {
            Some(sender) => t.with_sender(sender.clone()),
            None => t,
        })
        .map(|t| Arc::new(t) as Arc<dyn Tool>)
        .map_err(|e| BindError::HttpAgent(e.to_string()))
}

/// The backend of a spec of any kind but `mcp` (which binds to many tools).
fn bound(spec: &ToolSpec, dir: &Path, env: &ToolEnv) -> Result<Arc<dyn Tool>, BindError> {
    match spec.kind {
        ToolKind::Process => {
            let (working_dir, env_allowlist, env) = process_env(spec, dir);
            Ok(Arc::new(ProcessTool::new(
                schema_of(spec),
                ProcessSpec {
                    command: spec.command.clone(),
                    working_dir,
                    env_allowlist,
                    env,
                    max_output_bytes: spec.max_output_bytes.unwrap_or(DEFAULT_MAX_OUTPUT),
                    timeout: spec.timeout.map_or(DEFAULT_TOOL_TIMEOUT, Into::into),
                },
            )))
        }
        ToolKind::Agent => match (env.runs_agents, &spec.bundle) {
            (true, Some(target)) => {
                let mut schema = schema_of(spec);
                if schema.parameters == super::schema::default_parameters() {
                    schema.parameters = AgentTool::default_parameters();
                }
                Ok(Arc::new(AgentTool::new(schema, target.clone())))
            }
            _ => Err(BindError::AgentNeedsDaemon),
        },
        ToolKind::HttpAgent => http_agent(spec, env),
        ToolKind::Plugin => plugin_tool(spec, env),
        other => Err(BindError::KindUnavailable(other)),
    }
}

/// The variables a process or grail tool passes through from the daemon.
/// Where a tool that runs a process (a `process` tool, a `grail` tool's
/// host) runs and with which environment: its working directory under the
/// bundle, the variables it inherits, the ones it sets.
fn process_env<E: FromIterator<(String, String)>>(
    spec: &ToolSpec,
    dir: &Path,
) -> (PathBuf, Vec<String>, E) {
    let env = spec
        .env
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    (
        dir.join(spec.working_dir.as_deref().unwrap_or(".")),
        env_allowlist(spec),
        env,
    )
}

fn env_allowlist(spec: &ToolSpec) -> Vec<String> {
    spec.env_allowlist.clone().unwrap_or_else(|| {
        DEFAULT_ENV_ALLOWLIST
            .iter()
            .map(|s| s.to_string())
            .collect()
    })
}

/// A grail tool, its externals answered by the bundle's `tools` bound so far.
fn grail_tool(
    spec: &ToolSpec,
    dir: &Path,
    tools: &BTreeMap<String, Arc<dyn Tool>>,
) -> Result<Arc<dyn Tool>, BindError> {
    let section = spec.grail.clone().unwrap_or_default();
    let script = dir.join(spec.script.as_deref().unwrap_or_default());
    let script = script.canonicalize().unwrap_or(script);
    let content = match std::fs::read(&script) {
        Ok(content) => content,
        Err(error) => return Err(BindError::ScriptUnreadable { script, error }),
    };
    let digest = crate::hex::hex(&sha2::Sha256::digest(&content));
    let externals = section
        .externals
        .iter()
        .map(|(function, name)| match tools.get(name) {
            Some(tool) if tool.kind() != "grail" => Ok((function.clone(), tool.clone())),
            _ => Err(BindError::NoExternal {
                tool: name.clone(),
                function: function.clone(),
            }),
        })
        .collect::<Result<Vec<_>, BindError>>()?;
    let (working_dir, env_allowlist, env) = process_env(spec, dir);
    let launch = HostLaunch {
        python: section
            .python
            .clone()
            .unwrap_or_else(|| crate::tools::grail::DEFAULT_PYTHON.into()),
        working_dir,
        env_allowlist,
        env,
    };
    let pool = HostPool::new(
        launch,
        section
            .pool_size
            .unwrap_or(crate::tools::grail::DEFAULT_POOL_SIZE),
    );
    Ok(Arc::new(GrailTool::new(
        schema_of(spec),
        GrailToolSpec {
            script,
            digest,
            limits: section.limits.effective(),
            externals,
            max_output_bytes: spec.max_output_bytes.unwrap_or(DEFAULT_MAX_OUTPUT),
            timeout: spec.timeout.map_or(DEFAULT_TOOL_TIMEOUT, Into::into),
        },
        pool,
    )))
}

/// Binds specs the daemon makes up for a bundle (the router's reach of the
/// agent directory: `agent` and `http_agent` specs), each with its policy
/// under the bundle's default `approval`.
pub fn bind_specs(
    specs: &[ToolSpec],
    dir: &Path,
    default_approval: Option<&ApprovalSpec>,
    env: &ToolEnv,
) -> Result<Vec<crate::tools::engine::BoundTool>, BindError> {
    specs
        .iter()
        .map(|spec| {
            let in_tool = |e| BindError::Tool {
                name: spec.name.clone(),
                error: Box::new(e),
            };
            let tool = bound(spec, dir, env).map_err(in_tool)?;
            let policy = policy_of(spec, default_approval).map_err(in_tool)?;
            Ok((tool, policy))
        })
        .collect()
}

fn policy_of(
    spec: &ToolSpec,
    default_approval: Option<&ApprovalSpec>,
) -> Result<ToolPolicy, BindError> {
    let approval = match spec.approval.as_ref().or(default_approval) {
        Some(approval) => approval.compile()?,
        None => Default::default(),
    };
    ToolPolicy::compile(
        spec.timeout.map_or(DEFAULT_TOOL_TIMEOUT, Into::into),
        spec.retries,
        spec.cache.as_ref(),
        spec.guardrails.as_ref(),
    )
    .map(|mut policy| {
        policy.effect = spec.effect.unwrap_or(match spec.kind {
            ToolKind::Agent => Effect::Idempotent,
            _ => Effect::Unsafe,
        });
        policy.approval = approval;
        policy
    })
    .map_err(|e| BindError::Policy(e.to_string()))
}

/// Builds the run's tool engine: every tool bound to its backend. The
/// bundle's request shapes are rebuilt from the bound tools, so tools that
/// MCP servers announce take part in its grammars.
pub fn build_tools(bundle: &mut Bundle, env: &ToolEnv) -> Result<ToolEngine, BundleErrors> {
    let mut errors = Vec::new();
    let error = |path: String, message: String| BundleError {
        file: bundle.file.clone(),
        line: None,
        path,
        message,
    };
    // Every tool but the grail ones first, so grail tools find the tools
    // answering their externals; the engine keeps the bundle's order.
    let mut bound_at: Vec<Vec<Arc<dyn Tool>>> = vec![Vec::new(); bundle.raw.tools.len()];
    let mut by_name = BTreeMap::new();
    for (i, spec) in bundle.raw.tools.iter().enumerate() {
        let tools = match spec.kind {
            ToolKind::Grail => continue,
            ToolKind::Mcp => mcp_tools(spec, &bundle.dir, &env.egress, env.tools_changed.clone())
                .map_err(|e| error(format!("tools[{i}].server"), e.to_string())),
            _ => bound(spec, &bundle.dir, env)
                .map(|tool| vec![tool])
                .map_err(|e| error(format!("tools[{i}]"), e.to_string())),
        };
        match tools {
            Ok(tools) => {
                for tool in &tools {
                    by_name.insert(tool.schema().name.clone(), tool.clone());
                }
                bound_at[i] = tools;
            }
            Err(e) => errors.push(e),
        }
    }
    for (i, spec) in bundle.raw.tools.iter().enumerate() {
        if spec.kind == ToolKind::Grail {
            match grail_tool(spec, &bundle.dir, &by_name) {
                Ok(tool) => bound_at[i] = vec![tool],
                Err(e) => errors.push(error(format!("tools[{i}]"), e.to_string())),
            }
        }
    }
    let mut engine = ToolEngine::new();
    for (spec, (i, tools)) in bundle
        .raw
        .tools
        .iter()
        .zip(bound_at.into_iter().enumerate())
    {
        for tool in tools {
            match policy_of(spec, bundle.raw.approval.as_ref()) {
                Ok(policy) => engine.add(tool, policy),
                Err(e) => errors.push(error(format!("tools[{i}]"), e.to_string())),
            }
        }
    }
    if errors.is_empty() {
        match bundle.request_shapes(bundle.target, engine.schemas()) {
            Ok(shapes) => bundle.shapes = shapes,
            Err(BundleErrors(problems)) => errors.extend(problems),
        }
    }
    if errors.is_empty() {
        Ok(engine)
    } else {
        Err(BundleErrors(errors))
    }
}
