//! The load-time checks of a bundle's tool specs, before anything is
//! bound: keys set for another kind, what a spec's own kind needs and
//! lacks (a command, a script, a plugin, a server, an agent address, a
//! bundle), and a grail spec's externals naming tools that cannot answer.

use std::path::Path;

use super::mcp_spec;
use crate::bundle::schema::{ToolKind, ToolSpec};

/// Problems with a spec's backend keys: (key, message).
pub(in crate::bundle) fn check_spec(spec: &ToolSpec, dir: &Path) -> Vec<(&'static str, String)> {
    let mut problems = foreign_keys(spec);
    problems.extend(kind_problems(spec, dir));
    problems
}

/// The keys of other kinds a spec sets: each applies only to the kinds it
/// names.
fn foreign_keys(spec: &ToolSpec) -> Vec<(&'static str, String)> {
    let mut problems = Vec::new();
    let mut forbid = |present: bool, key: &'static str, kinds: &str| {
        if present {
            problems.push((key, format!("`{key}` only applies to kind {kinds}")));
        }
    };
    let kind = spec.kind;
    if kind != ToolKind::Process {
        forbid(!spec.command.is_empty(), "command", "process");
    }
    if kind != ToolKind::Grail {
        forbid(spec.script.is_some(), "script", "grail");
        forbid(spec.grail.is_some(), "grail", "grail");
    }
    if kind != ToolKind::Process && kind != ToolKind::Grail {
        let kinds = "process and grail";
        forbid(spec.working_dir.is_some(), "working_dir", kinds);
        forbid(!spec.env.is_empty(), "env", kinds);
        forbid(spec.env_allowlist.is_some(), "env_allowlist", kinds);
    }
    if !matches!(kind, ToolKind::Process | ToolKind::Grail | ToolKind::Mcp) {
        let kinds = "process, grail and mcp";
        forbid(spec.max_output_bytes.is_some(), "max_output_bytes", kinds);
    }
    if kind != ToolKind::Plugin {
        forbid(spec.plugin.is_some(), "plugin", "plugin");
        forbid(spec.plugin_tool.is_some(), "plugin_tool", "plugin");
    }
    if kind != ToolKind::Mcp {
        forbid(spec.server.is_some(), "server", "mcp");
        forbid(spec.allow.is_some(), "allow", "mcp");
        forbid(spec.prefix.is_some(), "prefix", "mcp");
    }
    if kind != ToolKind::HttpAgent {
        forbid(spec.agent.is_some(), "agent", "http_agent");
        forbid(spec.url.is_some(), "url", "http_agent");
        forbid(
            spec.max_response_bytes.is_some(),
            "max_response_bytes",
            "http_agent",
        );
    }
    if kind != ToolKind::Agent {
        forbid(spec.bundle.is_some(), "bundle", "agent");
    }
    problems
}

/// What the spec's own kind needs and lacks: a working directory that
/// exists, a command, a plugin's name, an MCP server, one agent address, a
/// bundle.
fn kind_problems(spec: &ToolSpec, dir: &Path) -> Vec<(&'static str, String)> {
    let mut problems = Vec::new();
    let kind = spec.kind;
    if matches!(kind, ToolKind::Process | ToolKind::Grail) {
        let wd = dir.join(spec.working_dir.as_deref().unwrap_or("."));
        if !wd.is_dir() {
            problems.push((
                "working_dir",
                format!("{} is not a directory", wd.display()),
            ));
        }
    }
    match kind {
        ToolKind::Process => {
            if spec.command.is_empty() || spec.command[0].is_empty() {
                problems.push((
                    "command",
                    "a process tool needs `command`, an argv list such as [\"python3\", \"tool.py\"]".into(),
                ));
            }
        }
        ToolKind::Grail => problems.extend(grail_problems(spec, dir)),
        ToolKind::Plugin => {
            if spec.plugin.is_none() {
                problems.push((
                    "plugin",
                    "a plugin tool needs `plugin`, the plugin's name".into(),
                ));
            }
        }
        ToolKind::Mcp => {
            if let Err(problem) = mcp_spec(spec) {
                problems.push(("server", problem.to_string()));
            }
            if let Some(cap) = spec.max_output_bytes
                && !(1..=crate::tools::mcp::MAX_OUTPUT_BYTES).contains(&cap)
            {
                problems.push((
                    "max_output_bytes",
                    format!(
                        "{cap} is outside 1..={} bytes (the MCP transport's bound on one message); leave it out for the default of 1 MiB",
                        crate::tools::mcp::MAX_OUTPUT_BYTES
                    ),
                ));
            }
        }
        ToolKind::HttpAgent => {
            if spec.agent.is_some() == spec.url.is_some() {
                problems.push((
                    "agent",
                    "an http_agent tool needs exactly one of `agent` (an id from the config) or `url`".into(),
                ));
            }
            if spec.max_response_bytes == Some(0) {
                problems.push((
                    "max_response_bytes",
                    "must be at least 1 (bytes); leave it out for the default of 1 MiB".into(),
                ));
            }
        }
        ToolKind::Agent => {
            if spec.bundle.is_none() {
                problems.push((
                    "bundle",
                    "an agent tool needs `bundle`, the name of another bundle".into(),
                ));
            }
        }
    }
    problems
}

/// What keeps a `kind: grail` spec from running: no `script`, a script
/// that is not a file, limits Grail would refuse, or no Python to host it.
fn grail_problems(spec: &ToolSpec, dir: &Path) -> Vec<(&'static str, String)> {
    let mut problems = Vec::new();
    match &spec.script {
        None => problems.push((
            "script",
            "a grail tool needs `script`, its `.pym` file relative to the bundle".into(),
        )),
        Some(script) if !dir.join(script).is_file() => problems.push((
            "script",
            format!("{} is not a file", dir.join(script).display()),
        )),
        Some(_) => {}
    }
    let section = spec.grail.clone().unwrap_or_default();
    for (key, problem) in section.limits.problems() {
        let key = match key {
            "max_memory" => "grail.limits.max_memory",
            _ => "grail.limits.max_duration",
        };
        problems.push((key, problem));
    }
    if section.pool_size == Some(0) {
        problems.push(("grail.pool_size", "must be at least 1".into()));
    }
    let python = section
        .python
        .as_deref()
        .unwrap_or(crate::tools::grail::DEFAULT_PYTHON);
    if !python.contains('/') && find_on_path(python).is_none() {
        problems.push((
            "grail.python",
            format!(
                "kind grail runs its scripts with Grail's Python API in `{python}`, which is not on the daemon's PATH: install Python with Grail, or set `grail.python` to the interpreter that has it"
            ),
        ));
    }
    problems
}

/// A grail spec's `grail.externals` naming no tool of the bundle that can
/// answer them (a grail tool cannot: its host is busy with the caller).
/// Names an MCP source may provide are only known when bound.
pub(in crate::bundle) fn grail_external_problems(
    spec: &ToolSpec,
    tools: &[ToolSpec],
) -> Vec<String> {
    let Some(section) = &spec.grail else {
        return Vec::new();
    };
    let has_mcp = tools.iter().any(|t| t.kind == ToolKind::Mcp);
    section
        .externals
        .iter()
        .filter_map(|(function, tool)| match tools.iter().find(|t| &t.name == tool) {
            Some(t) if t.kind == ToolKind::Grail => Some(format!(
                "external {function:?} names grail tool {tool:?}: a grail tool cannot answer another's externals (wire a process or plugin tool)"
            )),
            Some(_) => None,
            None if has_mcp => None,
            None => Some(format!(
                "external {function:?} names {tool:?}, which is not a tool of this bundle"
            )),
        })
        .collect()
}

/// The first executable file named `program` in the daemon's `PATH`.
fn find_on_path(program: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|path| {
            std::fs::metadata(path)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}
