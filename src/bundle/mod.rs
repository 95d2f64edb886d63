//! Bundles: loading `bundle.yaml` from a directory into a validated, immutable
//! `Bundle` (templates compiled, references checked), with errors that name
//! file, line and key path; and binding a bundle's tools to their backends.
//!
//! This module must not know about the daemon, the queue or HTTP serving.

pub mod bind;
mod copy;
mod digest;
pub mod history_plugin;
pub mod locate;
pub mod original;
mod release_section;
pub mod schema;
mod shape;
mod template;
mod validate;

pub use bind::{ToolEnv, build_tools};
pub use copy::{CopyError, copy_dir};
pub use digest::{ContentDigest, content_digest};
pub use history_plugin::HistoryPlugins;
pub use release_section::{CanarySection, ReleaseGate, ReleaseSection};
pub use schema::{OnNewVersion, RawBundle, ToolKind, ToolSpec};
pub use shape::{RequestShapes, Target};
pub use template::{PromptError, Prompts};

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::kernel::KernelConfig;
use locate::LineIndex;
use validate::{
    compile_workflow, endpoint_problems, identity_problems, limit_problems, release_problems,
    request_target, tool_problems,
};

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

/// The messages a turn sent and how they were chosen
/// ([`Bundle::history_sent`]).
#[derive(Debug, Clone, PartialEq)]
pub struct HistorySent {
    pub messages: Vec<crate::types::Message>,
    /// `sliding_window`, `keep_all`, or `plugin` (the whole conversation).
    pub how: &'static str,
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
    /// What a turn over the conversation `messages` sent the model by the
    /// bundle's `limits.history`: a built-in strategy's window, as the
    /// kernel takes it (`kernel::history::trim`); with a history plugin,
    /// whose choice only it knows, the whole conversation.
    pub fn history_sent(&self, messages: Vec<crate::types::Message>) -> HistorySent {
        use crate::kernel::{History, HistoryStrategy};
        match &self.history {
            History::Builtin(strategy) => HistorySent {
                messages: crate::kernel::history::trim(
                    &messages,
                    *strategy,
                    self.raw.limits.max_history_messages,
                ),
                how: match strategy {
                    HistoryStrategy::SlidingWindow => "sliding_window",
                    HistoryStrategy::KeepAll => "keep_all",
                },
            },
            History::Plugin(_) => HistorySent {
                messages,
                how: "plugin",
            },
        }
    }

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
    problems.extend(release_problems(&raw, dir));
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
