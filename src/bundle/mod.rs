//! Bundles: loading `bundle.yaml` from a directory into a validated, immutable
//! `Bundle` (templates compiled, references checked), with errors that name
//! file, line and key path; and binding a bundle's tools to their backends.
//!
//! This module must not know about the daemon, the queue or HTTP serving.

pub mod bind;
mod digest;
pub mod history_plugin;
pub mod locate;
pub mod original;
pub mod schema;
mod shape;
mod template;

pub use bind::{ToolEnv, build_tools};
pub use digest::{ContentDigest, content_digest};
pub use history_plugin::HistoryPlugins;
pub use schema::{OnNewVersion, RawBundle, ToolKind, ToolSpec};
pub use shape::{RequestShapes, Target};
pub use template::{PromptError, Prompts};

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::kernel::KernelConfig;
use locate::LineIndex;

/// The tool names a local run's `tools` variable asks for (`structured-agents
/// run` and `chat`, a verify); `None` when it does not set one (every tool is
/// offered).
pub fn requested_tools(
    variables: &Map<String, Value>,
) -> Result<Option<Vec<String>>, ToolsVariableError> {
    variables
        .get(crate::types::TOOLS_VARIABLE)
        .map(|value| crate::types::tool_names(value).map_err(ToolsVariableError))
        .transpose()
}

/// A local run's `tools` variable that lists no tool names.
#[derive(Debug, thiserror::Error)]
#[error("`{variable}` {0}", variable = crate::types::TOOLS_VARIABLE)]
pub struct ToolsVariableError(#[source] pub crate::types::ToolNamesError);

/// One problem in a bundle, located.
#[derive(Debug, Clone, PartialEq)]
pub struct BundleError {
    pub file: PathBuf,
    pub line: Option<usize>,
    /// The key path, e.g. `tools[2].timeout`; empty for the whole file.
    pub path: String,
    pub message: String,
}

impl fmt::Display for BundleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if !self.path.is_empty() {
            write!(f, ": {}", self.path)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Everything wrong with a bundle (all problems, not just the first).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct BundleErrors(pub Vec<BundleError>);

impl fmt::Display for BundleErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// What a bundle may refer to outside itself.
pub struct LoadContext<'a> {
    /// Named endpoints from the daemon config with their server families;
    /// `None` skips the check.
    pub endpoints: Option<&'a BTreeMap<String, crate::model::ServerKind>>,
    pub models: &'a crate::model::ModelCatalog,
    /// The history plugin libraries `limits.history` may name.
    pub histories: &'a HistoryPlugins,
}

/// Where the bundle's model requests go.
#[derive(Debug, Clone, PartialEq)]
pub enum EndpointRef {
    Named(String),
    Url(String),
    Scripted(PathBuf),
}

impl EndpointRef {
    fn parse(text: &str, dir: &Path) -> Self {
        if let Some(file) = text.strip_prefix("scripted:") {
            EndpointRef::Scripted(dir.join(file))
        } else if text.starts_with("http://") || text.starts_with("https://") {
            EndpointRef::Url(text.trim_end_matches('/').to_string())
        } else {
            EndpointRef::Named(text.to_string())
        }
    }
}

/// A validated bundle.
pub struct Bundle {
    pub raw: RawBundle,
    pub dir: PathBuf,
    pub file: PathBuf,
    pub endpoint: EndpointRef,
    pub model: crate::model::ResolvedModel,
    /// `limits.history` resolved: a built-in strategy or a plugin library.
    pub history: crate::kernel::History,
    pub prompts: Prompts,
    /// The server family requests go to and the wire grammars take there.
    pub target: Target,
    /// Per turn: `tool_choice` and the model plugin's keys (grammar, stop
    /// sequences). Rebuilt by [`build_tools`] from the bound tools.
    pub shapes: RequestShapes,
    /// The compiled workflow when the bundle is one.
    pub workflow: Option<std::sync::Arc<crate::workflow::Workflow>>,
    /// The digest of everything that resolves into the bundle (its files
    /// and its model config); the registry's identity of a bound bundle
    /// covers it (`registry::BundleIdentity`), and any change rebinds it.
    pub content_digest: ContentDigest,
}

impl fmt::Debug for Bundle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bundle")
            .field("name", &self.raw.name)
            .field("version", &self.raw.version)
            .field("dir", &self.dir)
            .finish()
    }
}

impl Bundle {
    pub fn name(&self) -> &str {
        &self.raw.name
    }

    pub fn version(&self) -> &str {
        &self.raw.version
    }

    /// The request shapes for a server of `target`'s family offering
    /// `tools` (the bound tools; see [`build_tools`]).
    pub fn request_shapes(
        &self,
        target: Target,
        tools: &[crate::types::ToolSchema],
    ) -> Result<RequestShapes, BundleErrors> {
        shape::for_target(
            self.name(),
            &self.raw.model,
            &self.model,
            target,
            tools,
            true,
        )
        .map_err(|problems| {
            // The file is read again only to name the lines.
            let index = std::fs::read_to_string(&self.file)
                .ok()
                .map(|text| LineIndex::build(&text));
            BundleErrors(
                problems
                    .into_iter()
                    .map(|(path, message)| BundleError {
                        file: self.file.clone(),
                        line: index.as_ref().and_then(|i| i.line_of(&path)),
                        path,
                        message,
                    })
                    .collect(),
            )
        })
    }

    /// The tools that call agents (`agent` and `http_agent`), each with the
    /// id of the agent it calls: the bundle name, the config's agent id, or
    /// for an `http_agent` with a `url` the tool's own name.
    pub fn agent_tools(&self) -> BTreeMap<String, String> {
        self.raw
            .tools
            .iter()
            .filter_map(|t| {
                let agent = match t.kind {
                    ToolKind::Agent => t.bundle.clone(),
                    ToolKind::HttpAgent => t.agent.clone(),
                    _ => return None,
                };
                Some((t.name.clone(), agent.unwrap_or_else(|| t.name.clone())))
            })
            .collect()
    }

    /// The kernel settings this bundle asks for.
    pub fn kernel_config(&self) -> KernelConfig {
        let raw = &self.raw;
        let mut sampling = Map::new();
        let s = &raw.model.sampling;
        if let Some(v) = s.temperature {
            sampling.insert("temperature".into(), json!(v));
        }
        if let Some(v) = s.max_tokens {
            sampling.insert("max_tokens".into(), json!(v));
        }
        if let Some(v) = s.top_p {
            sampling.insert("top_p".into(), json!(v));
        }
        if let Some(v) = s.seed {
            sampling.insert("seed".into(), json!(v));
        }
        if !s.stop.is_empty() {
            sampling.insert("stop".into(), json!(s.stop));
        }
        KernelConfig {
            model: raw.model.name.clone(),
            turn_models: raw.model.turn_models.clone(),
            max_turns: raw.limits.max_turns,
            on_max_turns: raw.limits.on_max_turns,
            history: self.history.clone(),
            max_history_messages: raw.limits.max_history_messages,
            max_concurrency: raw.limits.max_concurrency,
            termination_tool: raw.termination.as_ref().map(|t| t.tool.clone()),
            timeout: raw.limits.timeout.map(Into::into),
            sampling,
            shape: self.shapes.default.clone(),
            turn_shapes: self.shapes.turns.clone(),
            extra_body: raw.model.extra_body.clone(),
            record_messages: false,
            call_budget: None,
            budget: None,
            answer: None,
            caller_tools: Vec::new(),
        }
    }

    /// How many tools of the caller's one request may bring (`None`: the
    /// bundle takes none: `caller_tools` is not set).
    pub fn caller_tools_max(&self) -> Option<usize> {
        self.raw.caller_tools.as_ref().map(|c| c.max)
    }

    /// Whether the bundle has a tool named `name` of its own.
    pub fn has_tool(&self, name: &str) -> bool {
        self.raw.tools.iter().any(|t| t.name == name)
    }

    /// A caller's answer format as this bundle's requests ask for it: on
    /// the wire of its server family, beside the tools where the server
    /// keeps the two apart (OpenAI).
    pub fn answer_shape(&self, format: &crate::types::AnswerFormat) -> crate::kernel::AnswerShape {
        crate::kernel::AnswerShape {
            fragment: self.target.wire.answer(format),
            beside_tools: self.target.server == crate::model::ServerKind::Openai,
        }
    }
}

impl Bundle {
    /// The same bundle run from `to`, a verified copy of its directory: its
    /// file, its directory and a scripted endpoint's script point into it.
    pub fn relocate(&mut self, to: &Path) {
        let from = std::mem::replace(&mut self.dir, to.to_path_buf());
        let moved = |path: &Path| path.strip_prefix(&from).ok().map(|r| to.join(r));
        if let Some(file) = moved(&self.file) {
            self.file = file;
        }
        if let EndpointRef::Scripted(script) = &mut self.endpoint
            && let Some(moved) = moved(script)
        {
            *script = moved;
        }
    }
}

/// The bundle file of a directory: `bundle.yaml`, else `bundle.yml`.
pub fn bundle_file(dir: &Path) -> Option<PathBuf> {
    ["bundle.yaml", "bundle.yml"]
        .iter()
        .map(|n| dir.join(n))
        .find(|p| p.is_file())
}

/// Every directory [`load_dir`] parsed, so tests count parses where they
/// happen (each test filters by its own temporary directory).
#[cfg(test)]
pub(crate) static PARSED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// Loads and validates the bundle in `dir`. Blocking (reads files).
pub fn load_dir(dir: &Path, ctx: &LoadContext<'_>) -> Result<Bundle, BundleErrors> {
    #[cfg(test)]
    PARSED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(dir.to_path_buf());
    let Some(file) = bundle_file(dir) else {
        return Err(BundleErrors(vec![BundleError {
            file: dir.join("bundle.yaml"),
            line: None,
            path: String::new(),
            message: "no bundle.yaml (or bundle.yml) in this directory".into(),
        }]));
    };
    let text = std::fs::read_to_string(&file).map_err(|e| {
        BundleErrors(vec![BundleError {
            file: file.clone(),
            line: None,
            path: String::new(),
            message: format!("cannot read: {e}"),
        }])
    })?;
    let mut bundle = load_str(&text, dir, &file, ctx)?;
    bundle.content_digest =
        content_digest(dir, bundle.model.source.as_deref()).map_err(|e| BundleErrors(vec![e]))?;
    Ok(bundle)
}

/// Parses and validates bundle text as if it were `file` in `dir`.
pub fn load_str(
    text: &str,
    dir: &Path,
    file: &Path,
    ctx: &LoadContext<'_>,
) -> Result<Bundle, BundleErrors> {
    let index = LineIndex::build(text);
    let raw = parse(text, file, &index)?;
    let endpoint = EndpointRef::parse(&raw.model.endpoint, dir);
    let mut problems = identity_problems(&raw);
    problems.extend(endpoint_problems(&raw, &endpoint, ctx));
    problems.extend(limit_problems(&raw));
    let prompts = match Prompts::compile(&raw.prompts) {
        Ok(p) => Some(p),
        Err(PromptError { key, message }) => {
            problems.push((format!("prompts.{key}"), message));
            None
        }
    };
    problems.extend(tool_problems(&raw, dir));
    let model = match ctx.models.resolve(&raw.model.plugin) {
        Ok(m) => Some(m),
        Err(e) => {
            problems.push(("model.plugin".into(), e.to_string()));
            None
        }
    };
    let history = match ctx.histories.resolve(&raw.limits.history) {
        Ok(h) => Some(h),
        Err(e) => {
            problems.push(("limits.history".into(), e.to_string()));
            None
        }
    };
    let (target, shapes) = request_target(&raw, &endpoint, ctx, model.as_ref(), &mut problems);
    let workflow = compile_workflow(&raw, &mut problems);

    match (problems.is_empty(), prompts, model, history) {
        (true, Some(prompts), Some(model), Some(history)) => Ok(Bundle {
            history,
            content_digest: ContentDigest::of_text(text),
            raw,
            dir: dir.to_path_buf(),
            file: file.to_path_buf(),
            endpoint,
            model,
            prompts,
            target,
            shapes,
            workflow,
        }),
        _ => Err(BundleErrors(
            problems
                .into_iter()
                .map(|(path, message)| BundleError {
                    file: file.to_path_buf(),
                    line: index.line_of(&path),
                    path,
                    message,
                })
                .collect(),
        )),
    }
}

/// A problem of a bundle file: the key path it is at, and what is wrong.
type Problem = (String, String);

/// The bundle's name and version.
fn identity_problems(raw: &RawBundle) -> Vec<Problem> {
    let mut problems = Vec::new();
    if !is_valid_name(&raw.name) {
        problems.push((
            "name".into(),
            format!(
                "invalid bundle name {:?} (use letters, digits, `-` and `_`)",
                raw.name
            ),
        ));
    }
    if raw.version.trim().is_empty() {
        problems.push(("version".into(), "must not be empty".into()));
    }
    problems
}

/// Where the model is: a script that exists, an endpoint the daemon has.
fn endpoint_problems(
    raw: &RawBundle,
    endpoint: &EndpointRef,
    ctx: &LoadContext<'_>,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    match (endpoint, ctx.endpoints) {
        (EndpointRef::Scripted(path), _) if !path.is_file() => {
            problems.push((
                "model.endpoint".into(),
                format!("script file {} does not exist", path.display()),
            ));
        }
        (EndpointRef::Named(name), Some(known)) if !known.contains_key(name) => {
            let known: Vec<_> = known.keys().map(String::as_str).collect();
            problems.push((
                "model.endpoint".into(),
                format!(
                    "unknown endpoint {name:?} (configured: {}; or give a URL or `scripted:<file>`)",
                    known.join(", ")
                ),
            ));
        }
        _ => {}
    }
    if raw.model.name.trim().is_empty() {
        problems.push(("model.name".into(), "must not be empty".into()));
    }
    problems
}

/// Limits and a group chat's rounds and stop word.
fn limit_problems(raw: &RawBundle) -> Vec<Problem> {
    let mut problems = Vec::new();
    let limits = &raw.limits;
    for (key, value) in [
        ("limits.max_turns", limits.max_turns as usize),
        ("limits.max_concurrency", limits.max_concurrency),
        ("limits.max_history_messages", limits.max_history_messages),
    ] {
        if value == 0 {
            problems.push((key.into(), "must be at least 1".into()));
        }
    }
    if let Some(caller) = &raw.caller_tools
        && !(1..=schema::MAX_CALLER_TOOLS).contains(&caller.max)
    {
        problems.push((
            "caller_tools.max".into(),
            format!(
                "must be between 1 and {} (it is {})",
                schema::MAX_CALLER_TOOLS,
                caller.max
            ),
        ));
    }
    if let Some(chat) = &raw.group_chat {
        if chat.max_rounds == 0 {
            problems.push(("group_chat.max_rounds".into(), "must be at least 1".into()));
        }
        if chat.stop_word.trim().is_empty() {
            problems.push((
                "group_chat.stop_word".into(),
                "must not be empty: it is the word a selector answers to end a chat".into(),
            ));
        }
    }
    problems
}

/// Each tool (names, schema, guardrails, approval, its backend's keys), the
/// bundle's approval default and its termination tool.
fn tool_problems(raw: &RawBundle, dir: &Path) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut names = HashSet::new();
    for (i, tool) in raw.tools.iter().enumerate() {
        let at = |key: &str| format!("tools[{i}].{key}");
        if tool.kind != ToolKind::Mcp && !names.insert(tool.name.clone()) {
            problems.push((at("name"), format!("duplicate tool name {:?}", tool.name)));
        }
        if tool.name.is_empty()
            || !tool
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            problems.push((
                at("name"),
                format!(
                    "invalid tool name {:?} (use letters, digits, `-`, `_`, `.`)",
                    tool.name
                ),
            ));
        }
        if tool.parameters.get("type").and_then(Value::as_str) != Some("object") {
            problems.push((
                at("parameters"),
                "must be a JSON Schema with `type: object`".into(),
            ));
        } else if let Err(e) = jsonschema::meta::validate(&tool.parameters) {
            problems.push((at("parameters"), format!("not a valid JSON Schema: {e}")));
        }
        if let Some(guards) = &tool.guardrails
            && let Err(e) = crate::tools::guardrails::Guardrails::compile(guards)
        {
            problems.push((
                at(&format!("guardrails.{}", e.key)),
                format!("invalid regex {:?}: {}", e.pattern, e.detail),
            ));
        }
        if let Some(approval) = &tool.approval
            && let Err(e) = approval.compile()
        {
            problems.push((at("approval"), e.to_string()));
        }
        for (problem_key, problem) in bind::check_spec(tool, dir) {
            problems.push((at(problem_key), problem));
        }
        for problem in bind::grail_external_problems(tool, &raw.tools) {
            problems.push((at("grail.externals"), problem));
        }
    }
    if let Some(approval) = &raw.approval
        && let Err(e) = approval.compile()
    {
        problems.push(("approval".into(), e.to_string()));
    }
    if let Some(schedule) = &raw.schedule
        && let Err(e) = schedule.compile()
    {
        let text = e.to_string();
        let (key, detail) = text.split_once(": ").unwrap_or(("schedule", &text));
        problems.push((key.into(), detail.into()));
    }
    if let Some(term) = &raw.termination
        && !raw
            .tools
            .iter()
            .any(|t| t.name == term.tool || t.kind == ToolKind::Mcp)
    {
        problems.push((
            "termination.tool".into(),
            format!("no tool named {:?} in `tools`", term.tool),
        ));
    }
    problems
}

/// Where the grammar goes (the bundle's `server`, else the named endpoint's,
/// else vLLM's wire: URLs and scripts declare none) and the request shapes
/// its model plugin builds for it.
fn request_target(
    raw: &RawBundle,
    endpoint: &EndpointRef,
    ctx: &LoadContext<'_>,
    model: Option<&crate::model::ResolvedModel>,
    problems: &mut Vec<Problem>,
) -> (Target, RequestShapes) {
    let server = raw
        .model
        .server
        .or_else(|| match (endpoint, ctx.endpoints) {
            (EndpointRef::Named(name), Some(known)) => known.get(name).copied(),
            _ => None,
        })
        .unwrap_or_default();
    let mut target = Target {
        server,
        wire: server.default_wire(),
    };
    let mut shapes = RequestShapes::default();
    if let Some(model) = model {
        target.wire = model.wire_for(server);
        // MCP tools are known only once bound; until then a grammar that
        // needs them is not judged.
        let has_mcp = raw.tools.iter().any(|t| t.kind == ToolKind::Mcp);
        let schemas: Vec<_> = raw
            .tools
            .iter()
            .filter(|t| t.kind != ToolKind::Mcp)
            .map(bind::schema_of)
            .collect();
        match shape::for_target(&raw.name, &raw.model, model, target, &schemas, !has_mcp) {
            Ok(built) => shapes = built,
            Err(found) => problems.extend(found),
        }
    }
    (target, shapes)
}

/// The bundle's workflow, compiled; its problems' paths start at `workflow`.
fn compile_workflow(
    raw: &RawBundle,
    problems: &mut Vec<Problem>,
) -> Option<std::sync::Arc<crate::workflow::Workflow>> {
    let spec = raw.workflow.as_ref()?;
    // Checkpoints carry this version: a job never resumes a checkpoint of a
    // different workflow definition.
    let version = serde_json::to_string(spec)
        .map(|t| digest(&t))
        .unwrap_or_default();
    match crate::workflow::Workflow::compile(spec.clone(), version) {
        Ok(w) => Some(std::sync::Arc::new(w)),
        Err(crate::workflow::SpecErrors(found)) => {
            for p in found {
                let path = if p.path.is_empty() {
                    "workflow".to_string()
                } else {
                    p.path
                };
                problems.push((path, p.message));
            }
            None
        }
    }
}

fn parse(text: &str, file: &Path, index: &LineIndex) -> Result<RawBundle, BundleErrors> {
    let one = |line: Option<usize>, path: String, message: String| {
        BundleErrors(vec![BundleError {
            file: file.to_path_buf(),
            line,
            path,
            message,
        }])
    };
    // YAML → JSON value keeps syntax errors' locations; value → typed struct
    // gives the key path, whose line the index knows.
    let value: Value = serde_saphyr::from_str(text).map_err(|e| {
        let line = e.location().map(|l| l.line() as usize);
        let message = e
            .to_string()
            .lines()
            .next()
            .unwrap_or("invalid YAML")
            .to_string();
        one(line, String::new(), message)
    })?;
    if value.is_null() {
        return Err(one(None, String::new(), "the file is empty".into()));
    }
    // An original bundle fails on whichever of its keys serde meets first;
    // naming all of them, with the command that converts them, says more.
    let original = original::original_keys(&value);
    let converted = value.get("prompts").is_some();
    serde_path_to_error::deserialize::<_, RawBundle>(value).map_err(|e| {
        if !original.is_empty() {
            let dir = file.parent().unwrap_or(Path::new("."));
            return BundleErrors(
                original
                    .iter()
                    .map(|key| BundleError {
                        file: file.to_path_buf(),
                        line: index.line_of(&key.path),
                        path: key.path.clone(),
                        message: original::original_key_message(key, dir, converted),
                    })
                    .collect(),
            );
        }
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        // The path ends at the offending key (also for unknown keys).
        one(index.line_of(&path), path.clone(), e.inner().to_string())
    })
}

fn digest(text: &str) -> String {
    use sha2::{Digest, Sha256};
    crate::hex::short_hex(&Sha256::digest(text.as_bytes()))
}
/// Whether `name` may name a bundle: letters, digits, `-` and `_`.
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}
