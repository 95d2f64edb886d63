//! The runtime's agent directory — the loaded bundles but the router and
//! the group-chat host, then the remote agents of `[[agents]]` and the
//! agents file — and the router's reach of it: as in the multi-agent
//! runtime, where every configured agent is a tool of the router, the
//! router can call every agent of the directory (`[runtime] router_reach =
//! "directory"`, narrowed by `router_allow` and `router_deny`) besides the
//! agent tools its bundle declares.

use std::collections::BTreeMap;

use serde_json::json;

use super::{LoadedBundle, Snapshot};
use crate::bundle::ToolSpec;
use crate::config::{RouterFunctions, RouterReach};
use crate::tools::http_agent::HttpAgentSpec;
use crate::types::{AgentCatalog, AgentFacts, DeclaredTools};

/// One agent of the directory.
pub struct DirectoryAgent<'a> {
    pub id: String,
    pub name: String,
    pub description: String,
    pub capabilities: Vec<String>,
    pub conversation_starters: Vec<String>,
    /// The remote agent's definition; `None` for a local bundle.
    pub remote: Option<&'a HttpAgentSpec>,
}

/// The longest tool name model servers accept.
const MAX_TOOL_NAME: usize = 64;

impl Snapshot {
    /// Every agent: local bundles by name, then remote agents in config order.
    pub fn agent_directory(&self) -> Vec<DirectoryAgent<'_>> {
        let runtime = &self.config.runtime;
        let local = self
            .loaded()
            .filter(|b| b.name() != runtime.router && b.name() != runtime.group_chat)
            .map(|b| {
                let raw = &b.bundle.raw;
                let card = raw.agent.clone().unwrap_or_default();
                DirectoryAgent {
                    id: raw.name.clone(),
                    name: card.name.unwrap_or_else(|| raw.name.clone()),
                    description: raw.description.clone(),
                    capabilities: card
                        .capabilities
                        .unwrap_or_else(|| raw.tools.iter().map(|t| t.name.clone()).collect()),
                    conversation_starters: card.conversation_starters,
                    remote: None,
                }
            });
        let remote = self.config.agents.iter().map(|a| DirectoryAgent {
            id: a.id.clone(),
            name: a.name.clone(),
            description: a.description.clone(),
            capabilities: a.capabilities.clone(),
            conversation_starters: a.conversation_starters.clone(),
            remote: Some(a),
        });
        // `loaded()` is in name order already.
        local.chain(remote).collect()
    }

    /// The agent tools the router gains from the directory: one per agent
    /// its bundle does not already call, allowed by `router_allow` and not
    /// in `router_deny`, named after the agent (a name its declared tools
    /// take keeps the declared tool). Empty for any other bundle, and with
    /// `router_reach = "declared"`.
    pub fn router_reach(&self, loaded: &LoadedBundle) -> Vec<ToolSpec> {
        let runtime = &self.config.runtime;
        if loaded.name() != runtime.router || runtime.router_reach != RouterReach::Directory {
            return Vec::new();
        }
        let declared = loaded.bundle.agent_tools();
        let taken = |name: &str| loaded.tools.tool(name).is_some();
        self.agent_directory()
            .into_iter()
            .filter(|a| runtime.router_allow.as_ref().is_none_or(|allow| allow.contains(&a.id)))
            .filter(|a| !runtime.router_deny.contains(&a.id))
            .filter(|a| !declared.values().any(|id| *id == a.id))
            .filter_map(|a| {
                let call_agent = runtime.router_functions == RouterFunctions::CallAgent;
                let name = if call_agent {
                    call_agent_name(&a.id)
                } else {
                    tool_name(&a.id)
                };
                if taken(&name) {
                    return None;
                }
                let mut description = if a.description.is_empty() {
                    format!("Asks the agent {}.", a.name)
                } else {
                    a.description.clone()
                };
                if !a.capabilities.is_empty() {
                    description.push_str(&format!(" Capabilities: {}.", a.capabilities.join(", ")));
                }
                let mut spec = match a.remote {
                    None => json!({"name": name, "kind": "agent", "bundle": a.id,
                                   "description": description, "effect": "idempotent"}),
                    // The agent is sent an Idempotency-Key with each message;
                    // it may take its `[[agents]] timeout` (the runtime's 300 s).
                    Some(remote) => json!({"name": name, "kind": "http_agent", "agent": a.id,
                                           "description": description, "effect": "idempotent",
                                           "timeout": humantime::format_duration(remote.timeout()).to_string()}),
                };
                if call_agent {
                    spec["parameters"] = call_agent_parameters();
                }
                serde_json::from_value(spec)
                    .inspect_err(|e| tracing::warn!(agent = %a.id, error = %e, "the router cannot reach this agent"))
                    .ok()
            })
            .collect()
    }

    /// The tools of `loaded` that call agents, each with the agent's id:
    /// the ones its bundle declares and, for the router, its reach.
    pub fn agent_tools(&self, loaded: &LoadedBundle) -> BTreeMap<String, String> {
        let mut tools = loaded.bundle.agent_tools();
        for spec in self.router_reach(loaded) {
            let id = spec
                .bundle
                .or(spec.agent)
                .unwrap_or_else(|| spec.name.clone());
            tools.insert(spec.name, id);
        }
        tools
    }
}

/// What an agent call asks (its `content`, `input` or `query` argument),
/// read as the agent tools read it, for the runtime's traces and frames.
pub fn agent_query(arguments: &serde_json::Value) -> String {
    crate::types::agent_message(arguments)
}

/// The multi-agent runtime's function of an agent, as a tool name:
/// `<id>-call_agent` (its plugin per agent, `-` joining plugin and
/// function as on OpenAI's wire), the id cut to fit 64 characters.
fn call_agent_name(id: &str) -> String {
    const FUNCTION: &str = "-call_agent";
    let id = tool_name(id);
    let room = MAX_TOOL_NAME - FUNCTION.len();
    format!("{}{FUNCTION}", id.chars().take(room).collect::<String>())
}

/// The parameters of `call_agent(query, sender_id, conversation_id)`; a
/// remote agent's envelope carries the given `sender_id` and
/// `conversation_id` (see `HttpAgentTool`).
fn call_agent_parameters() -> serde_json::Value {
    json!({
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to ask the agent"},
            "sender_id": {"type": "string", "description": "Who asks (the message's senderId)"},
            "conversation_id": {"type": "string", "description": "The conversation the message belongs to"}
        },
        "required": ["query"]
    })
}

impl Snapshot {
    /// Each loaded bundle's description and the tools it declares (its own
    /// and, for the router, the agents it reaches), with their descriptions.
    pub(super) fn agent_catalog(&self) -> AgentCatalog {
        self.loaded()
            .map(|b| {
                let reach = self
                    .router_reach(b)
                    .into_iter()
                    .map(|spec| (spec.name, spec.description));
                let tools = b
                    .tools
                    .schemas()
                    .iter()
                    .map(|t| (t.name.clone(), t.description.clone()))
                    .chain(reach)
                    .collect();
                let facts = AgentFacts {
                    description: b.bundle.raw.description.clone(),
                    tools,
                };
                (b.name().to_string(), facts)
            })
            .collect()
    }
}

/// The tools each loaded bundle declares: the names of its catalog entry's tools.
pub(super) fn declared_tools(agents: &AgentCatalog) -> DeclaredTools {
    agents
        .iter()
        .map(|(name, facts)| (name.clone(), facts.tools.keys().cloned().collect()))
        .collect()
}

/// An agent id as a tool name: letters, digits, `_` and `-` (anything else
/// becomes `_`), at most 64 characters.
fn tool_name(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(MAX_TOOL_NAME)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{call_agent_name, tool_name};

    #[test]
    fn agent_ids_become_tool_names_servers_accept() {
        assert_eq!(tool_name("weather.agent v2"), "weather_agent_v2");
        assert_eq!(tool_name(&"a".repeat(80)).len(), 64);
        assert_eq!(call_agent_name("news"), "news-call_agent");
        let long = call_agent_name(&"a".repeat(80));
        assert_eq!(long.len(), 64);
        assert!(long.ends_with("-call_agent"));
    }
}
