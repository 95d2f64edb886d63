//! Bundles written for the Python agent kernel: recognising its
//! `bundle.yaml` keys (so a load error can name them and the command that
//! converts them) and converting such a file into this daemon's format,
//! with a report of what changed and what could not be carried over.
//!
//! The original format (its `BundleManifest`): `name`, `version` (default
//! "1.0"), `model.plugin` / `model.adapter` / `model.grammar.{mode,
//! allow_parallel_calls, args_format}`, `initial_context.system_prompt` /
//! `initial_context.user_template` (default `{{ input }}`), `max_turns`
//! (default 20), `termination_tool` (default `submit_result`),
//! `tools[]` of `{name, registry (default grail), description,
//! inputs_override, context_providers}` and `registries` (default
//! `[grail]`; grail tools are `tools/<name>.pym` in the bundle).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use super::locate::LineIndex;

/// The keys only the original format has, with where their content goes
/// here. `tools[]` stands for every item of `tools`.
const ORIGINAL_KEYS: &[(&str, &str)] = &[
    ("initial_context", "`prompts.system` and `prompts.user`"),
    ("max_turns", "`limits.max_turns`"),
    ("termination_tool", "`termination.tool`"),
    ("registries", "each tool's `kind`"),
    ("model.adapter", "`model.name`"),
    ("model.grammar.args_format", "no equivalent"),
    ("tools[].registry", "`kind`"),
    ("tools[].inputs_override", "`parameters`"),
    ("tools[].context_providers", "no equivalent"),
];

/// Where the original kernel's server was when the bundle does not say
/// (its `KernelConfig.base_url`, set in code): vLLM's default address.
pub const DEFAULT_ENDPOINT: &str = "http://localhost:8000/v1";

/// One original key that a load met: its path in the file and where its
/// content goes in this format.
#[derive(Debug, Clone, PartialEq)]
pub struct OriginalKey {
    pub path: String,
    pub goes_to: &'static str,
}

/// The original-format keys present in a parsed `bundle.yaml`, in the
/// order of [`ORIGINAL_KEYS`] (every tool's for the `tools[]` ones).
pub fn original_keys(value: &Value) -> Vec<OriginalKey> {
    let mut found = Vec::new();
    for (key, goes_to) in ORIGINAL_KEYS {
        if let Some(rest) = key.strip_prefix("tools[].") {
            let tools = value.get("tools").and_then(Value::as_array);
            for (i, tool) in tools.into_iter().flatten().enumerate() {
                if tool.get(rest).is_some() {
                    found.push(OriginalKey {
                        path: format!("tools[{i}].{rest}"),
                        goes_to,
                    });
                }
            }
        } else if lookup(value, key).is_some() {
            found.push(OriginalKey {
                path: (*key).to_string(),
                goes_to,
            });
        }
    }
    found
}

/// The message a load error gives for an original key met in `dir`.
/// `converted` says the rest of the file is already of this format (it has
/// `prompts`): `import` takes whole original bundles, so the key is moved
/// by hand.
pub fn original_key_message(key: &OriginalKey, dir: &Path, converted: bool) -> String {
    let what_to_do = if converted {
        format!(
            "the rest of this bundle is of this format: move it to {} (a whole original bundle converts with `structured-agents import {}`)",
            key.goes_to,
            dir.display()
        )
    } else {
        format!(
            "run `structured-agents import {}` to convert this bundle",
            dir.display()
        )
    };
    format!(
        "unknown key: `{}` belongs to the Python agent kernel's bundle format (here: {}); {what_to_do}",
        key.path, key.goes_to
    )
}

fn lookup<'a>(value: &'a Value, dotted: &str) -> Option<&'a Value> {
    dotted
        .split('.')
        .try_fold(value, |v, k| v.as_object().and_then(|m| m.get(k)))
}

/// What the converter is told beyond the file: the original took the
/// server and (without `model.adapter`) the model name from code.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// `model.endpoint` of the result.
    pub endpoint: String,
    /// `model.name` of the result; `model.adapter` when absent.
    pub model: Option<String>,
}

impl Default for ImportOptions {
    fn default() -> Self {
        Self {
            endpoint: DEFAULT_ENDPOINT.into(),
            model: None,
        }
    }
}

/// One line of the import report: an original key path (with its line in
/// the original file) and what became of it.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportItem {
    pub key: String,
    pub line: Option<usize>,
    pub note: String,
}

/// A converted bundle file and its report.
#[derive(Debug, Clone)]
pub struct Conversion {
    /// The new `bundle.yaml`.
    pub yaml: String,
    /// Keys carried over, each with what it became.
    pub changed: Vec<ReportItem>,
    /// Keys that have no equivalent here and were left out, each with why
    /// and what to do instead.
    pub not_converted: Vec<ReportItem>,
}

/// Why a bundle could not be converted at all.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{}: no bundle.yaml (or bundle.yml) in this directory: give the directory of an original bundle", .0.display())]
    NoBundleFile(PathBuf),
    #[error("{}: cannot read: {source}", file.display())]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("{}{}: not valid YAML: {message}", file.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
    Yaml {
        file: PathBuf,
        line: Option<usize>,
        message: String,
    },
    #[error("{}: the file is not a mapping of keys (an original bundle.yaml has `name`, `initial_context` and `tools`)", .0.display())]
    NotAMapping(PathBuf),
    #[error("{}: not an original bundle: it has none of the Python agent kernel's keys (`initial_context`, `max_turns`, `termination_tool`, `registries`, `tools[].registry`); `structured-agents validate` checks a bundle of this format", .0.display())]
    NotOriginal(PathBuf),
    #[error("{}{}: {key}: {message}", file.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
    Key {
        file: PathBuf,
        line: Option<usize>,
        key: String,
        message: String,
    },
    #[error("{}: cannot write: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: already exists: the original file is kept under this name when converting in place; move it away, or convert with --out DIR", .0.display())]
    BackupExists(PathBuf),
    #[error("{}: is not empty: give --out a new or empty directory", .0.display())]
    OutNotEmpty(PathBuf),
    #[error("{}: is inside the bundle being converted ({}): give --out a directory outside it", out.display(), dir.display())]
    OutInside { out: PathBuf, dir: PathBuf },
    #[error("the converted bundle cannot be written as YAML: {0}")]
    Serialize(String),
}

/// Converts the text of an original `bundle.yaml` (`file` in `dir`, which
/// grail scripts are looked up in).
pub fn convert(
    text: &str,
    dir: &Path,
    file: &Path,
    options: &ImportOptions,
) -> Result<Conversion, ImportError> {
    let value: Value = serde_saphyr::from_str(text).map_err(|e| ImportError::Yaml {
        file: file.to_path_buf(),
        line: e.location().map(|l| l.line() as usize),
        message: e
            .to_string()
            .lines()
            .next()
            .unwrap_or("invalid YAML")
            .to_string(),
    })?;
    let Some(original) = value.as_object() else {
        return Err(ImportError::NotAMapping(file.to_path_buf()));
    };
    if original_keys(&value).is_empty() {
        return Err(ImportError::NotOriginal(file.to_path_buf()));
    }
    let mut converter = Converter {
        index: LineIndex::build(text),
        file,
        dir,
        changed: Vec::new(),
        not_converted: Vec::new(),
    };
    let out = converter.bundle(original, options)?;
    let yaml = serde_saphyr::to_string(&Value::Object(out))
        .map_err(|e| ImportError::Serialize(e.to_string()))?;
    Ok(Conversion {
        yaml,
        changed: converter.changed,
        not_converted: converter.not_converted,
    })
}

struct Converter<'a> {
    index: LineIndex,
    file: &'a Path,
    dir: &'a Path,
    changed: Vec<ReportItem>,
    not_converted: Vec<ReportItem>,
}

/// The top-level keys both formats share, copied as they are.
const SHARED_KEYS: &[&str] = &["name", "version", "model", "tools"];

impl Converter<'_> {
    fn item(&self, key: &str, note: String) -> ReportItem {
        ReportItem {
            key: key.to_string(),
            line: self.index.line_of(key),
            note,
        }
    }

    fn changed(&mut self, key: &str, note: impl Into<String>) {
        let item = self.item(key, note.into());
        self.changed.push(item);
    }

    fn not_converted(&mut self, key: &str, note: impl Into<String>) {
        let item = self.item(key, note.into());
        self.not_converted.push(item);
    }

    fn invalid(&self, key: &str, message: impl Into<String>) -> ImportError {
        ImportError::Key {
            file: self.file.to_path_buf(),
            line: self.index.line_of(key),
            key: key.to_string(),
            message: message.into(),
        }
    }

    fn string(
        &self,
        map: &Map<String, Value>,
        key: &str,
        path: &str,
    ) -> Result<Option<String>, ImportError> {
        match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(Value::Number(n)) if key == "version" => Ok(Some(n.to_string())),
            Some(other) => Err(self.invalid(path, format!("expected a string, got {other}"))),
        }
    }

    fn bundle(
        &mut self,
        original: &Map<String, Value>,
        options: &ImportOptions,
    ) -> Result<Map<String, Value>, ImportError> {
        let mut out = Map::new();

        let name = self
            .string(original, "name", "name")?
            .ok_or_else(|| self.invalid("name", "an original bundle has a `name`; add one"))?;
        let valid: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        if valid != name {
            self.changed(
                "name",
                format!("{name:?} became {valid:?}: bundle names here are letters, digits, `-` and `_` (jobs name the bundle by it)"),
            );
        }
        out.insert("name".into(), json!(valid));
        let version = self.string(original, "version", "version")?;
        if version.is_none() {
            self.changed("version", "absent: set to the original's default \"1.0\"");
        }
        out.insert(
            "version".into(),
            json!(version.unwrap_or_else(|| "1.0".into())),
        );

        out.insert(
            "model".into(),
            Value::Object(self.model(original, options)?),
        );
        out.insert("prompts".into(), Value::Object(self.prompts(original)?));

        // The original returned a run that reached max_turns as its result;
        // here such a run fails unless the bundle says otherwise.
        let mut limits = serde_json::Map::new();
        limits.insert("on_max_turns".into(), json!("succeed"));
        if let Some(turns) = original.get("max_turns") {
            if !turns.is_u64() {
                return Err(self.invalid(
                    "max_turns",
                    format!("expected a whole number of turns, got {turns}"),
                ));
            }
            limits.insert("max_turns".into(), turns.clone());
            self.changed(
                "max_turns",
                "became `limits.max_turns`, with `limits.on_max_turns: succeed`: the original returned a run that reached it as its result (here it would fail)",
            );
        } else {
            self.changed(
                "max_turns",
                "absent: `limits.on_max_turns: succeed` set, as the original returned a run that reached its default max_turns as its result (here it would fail)",
            );
        }
        out.insert("limits".into(), Value::Object(limits));

        let tools = self.tools(original)?;
        self.termination(original, &tools, &mut out)?;
        self.registries(original)?;
        out.insert("tools".into(), Value::Array(tools));

        for key in original.keys() {
            let known =
                SHARED_KEYS.contains(&key.as_str()) || ORIGINAL_KEYS.iter().any(|(k, _)| k == key);
            if !known {
                self.not_converted(
                    key,
                    "not a key of the original format nor of this one: left out",
                );
            }
        }
        Ok(out)
    }

    fn model(
        &mut self,
        original: &Map<String, Value>,
        options: &ImportOptions,
    ) -> Result<Map<String, Value>, ImportError> {
        let empty = Map::new();
        let model = match original.get("model") {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(m)) => m,
            Some(other) => {
                return Err(self.invalid(
                    "model",
                    format!("expected a mapping (`plugin`, `adapter`, `grammar`), got {other}"),
                ));
            }
        };
        let mut out = Map::new();
        out.insert("endpoint".into(), json!(options.endpoint));
        self.changed(
            "model",
            format!(
                "`model.endpoint` is {}: the original took the server from `KernelConfig.base_url` in code (give `import --endpoint` or edit it)",
                options.endpoint
            ),
        );
        let adapter = self.string(model, "adapter", "model.adapter")?;
        let name = match (&options.model, adapter) {
            (Some(name), adapter) => {
                if adapter.is_some() {
                    self.changed(
                        "model.adapter",
                        format!("replaced by --model {name:?} as `model.name`"),
                    );
                }
                name.clone()
            }
            (None, Some(adapter)) => {
                self.changed(
                    "model.adapter",
                    "became `model.name` (the model the requests name)",
                );
                adapter
            }
            (None, None) => {
                return Err(self.invalid(
                    "model.adapter",
                    "absent, and the original took the model's name from `KernelConfig.model` in code: give it with `structured-agents import DIR --model NAME`",
                ));
            }
        };
        out.insert("name".into(), json!(name));
        let plugin = self.string(model, "plugin", "model.plugin")?;
        if plugin.is_none() {
            self.changed(
                "model.plugin",
                "absent: set to the original's default `function_gemma`",
            );
        }
        out.insert(
            "plugin".into(),
            json!(plugin.unwrap_or_else(|| "function_gemma".into())),
        );

        // The original constrained every reply with a grammar (mode `ebnf`
        // unless told otherwise); leaving it out would change the replies.
        let grammar = match model.get("grammar") {
            None | Some(Value::Null) => {
                self.changed(
                    "model.grammar",
                    "absent: set to the original's default (`mode: ebnf`, parallel calls allowed)",
                );
                Map::new()
            }
            Some(Value::Object(g)) => g.clone(),
            Some(other) => {
                return Err(self.invalid("model.grammar", format!("expected a mapping (`mode`, `allow_parallel_calls`, `args_format`), got {other}")));
            }
        };
        let mut grammar_out = Map::new();
        grammar_out.insert(
            "mode".into(),
            grammar
                .get("mode")
                .cloned()
                .unwrap_or_else(|| json!("ebnf")),
        );
        grammar_out.insert(
            "allow_parallel_calls".into(),
            grammar
                .get("allow_parallel_calls")
                .cloned()
                .unwrap_or(json!(true)),
        );
        if let Some(format) = grammar.get("args_format") {
            self.not_converted(
                "model.grammar.args_format",
                format!("{format} left out: argument formats are fixed by each model config here (config/models/*.yaml), not chosen per bundle"),
            );
        }
        for key in grammar.keys() {
            if !["mode", "allow_parallel_calls", "args_format"].contains(&key.as_str()) {
                self.not_converted(
                    &format!("model.grammar.{key}"),
                    "not a grammar key of the original: left out",
                );
            }
        }
        out.insert("grammar".into(), Value::Object(grammar_out));
        for key in model.keys() {
            if !["plugin", "adapter", "grammar"].contains(&key.as_str()) {
                self.not_converted(
                    &format!("model.{key}"),
                    "not a model key of the original: left out",
                );
            }
        }
        Ok(out)
    }

    fn prompts(
        &mut self,
        original: &Map<String, Value>,
    ) -> Result<Map<String, Value>, ImportError> {
        let context = match original.get("initial_context") {
            Some(Value::Object(c)) => c,
            None | Some(Value::Null) => {
                return Err(self.invalid("initial_context", "an original bundle has `initial_context.system_prompt`; add it (it becomes `prompts.system`)"));
            }
            Some(other) => {
                return Err(self.invalid(
                    "initial_context",
                    format!("expected a mapping (`system_prompt`, `user_template`), got {other}"),
                ));
            }
        };
        let mut out = Map::new();
        if let Some(system) =
            self.string(context, "system_prompt", "initial_context.system_prompt")?
        {
            out.insert("system".into(), json!(system));
            self.changed(
                "initial_context.system_prompt",
                "became `prompts.system` (same template language: minijinja reads Jinja2)",
            );
        }
        match self.string(context, "user_template", "initial_context.user_template")? {
            Some(user) => {
                out.insert("user".into(), json!(user));
                self.changed("initial_context.user_template", "became `prompts.user`");
            }
            None => {
                out.insert("user".into(), json!("{{ input }}"));
            }
        }
        for key in context.keys() {
            if key != "system_prompt" && key != "user_template" {
                self.not_converted(
                    &format!("initial_context.{key}"),
                    "not a key of the original's initial_context: left out",
                );
            }
        }
        Ok(out)
    }

    fn tools(&mut self, original: &Map<String, Value>) -> Result<Vec<Value>, ImportError> {
        let items = match original.get("tools") {
            None | Some(Value::Null) => return Ok(Vec::new()),
            Some(Value::Array(items)) => items,
            Some(other) => {
                return Err(self.invalid("tools", format!("expected a list of tools, got {other}")));
            }
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let at = |key: &str| format!("tools[{i}].{key}");
            let Some(tool) = item.as_object() else {
                return Err(self.invalid(
                    &format!("tools[{i}]"),
                    format!("expected a mapping with `name`, got {item}"),
                ));
            };
            let name = self.string(tool, "name", &at("name"))?.ok_or_else(|| {
                self.invalid(&format!("tools[{i}]"), "a tool has a `name`; add one")
            })?;
            let registry = self
                .string(tool, "registry", &at("registry"))?
                .unwrap_or_else(|| "grail".into());
            if !registry.eq_ignore_ascii_case("grail") {
                let why = if registry.eq_ignore_ascii_case("python") {
                    "a `python` registry tool is a function registered in code, which has no file to convert: left out; run it as a `kind: process` tool (JSON arguments on stdin, a JSON value on stdout) or a `kind: plugin` tool".to_string()
                } else {
                    format!(
                        "unknown registry {registry:?} (the original knew `grail` and `python`): left out"
                    )
                };
                self.not_converted(&format!("tools[{i}]"), format!("tool {name:?}: {why}"));
                continue;
            }
            let Some(script) = grail_script(self.dir, &name) else {
                self.not_converted(
                    &format!("tools[{i}]"),
                    format!("tool {name:?}: no `tools/{name}.pym` in the bundle (the original also looked in `agents/` of its working directory): left out; copy the script into the bundle's `tools/` and import again"),
                );
                continue;
            };
            let mut spec = Map::new();
            spec.insert("name".into(), json!(name));
            spec.insert("kind".into(), json!("grail"));
            spec.insert("script".into(), json!(script));
            if let Some(description) = self.string(tool, "description", &at("description"))? {
                spec.insert("description".into(), json!(description));
            }
            let note = format!(
                "tool {name:?}: `registry: grail` became `kind: grail` with `script: {script}`"
            );
            if tool.contains_key("registry") {
                self.changed(&at("registry"), note);
            } else {
                self.changed(
                    &format!("tools[{i}]"),
                    format!("{note} (grail was the original's default registry)"),
                );
            }
            match tool.get("inputs_override") {
                Some(Value::Object(schema)) => {
                    spec.insert("parameters".into(), Value::Object(schema.clone()));
                    self.changed(&at("inputs_override"), "became `parameters`");
                }
                None | Some(Value::Null) => {
                    let source = self.dir.join(&script);
                    let text = std::fs::read_to_string(&source).map_err(|e| ImportError::Read {
                        file: source.clone(),
                        source: e,
                    })?;
                    let parameters = grail_inputs(&text);
                    let count = parameters["properties"].as_object().map_or(0, Map::len);
                    spec.insert("parameters".into(), parameters);
                    self.changed(
                        &format!("tools[{i}]"),
                        format!("tool {name:?}: `parameters` from the {count} `Input()` declaration(s) of {script}, as the original's grail registry read them"),
                    );
                }
                Some(other) => {
                    return Err(self.invalid(
                        &at("inputs_override"),
                        format!("expected a JSON Schema mapping, got {other}"),
                    ));
                }
            }
            if tool
                .get("context_providers")
                .is_some_and(|c| c.as_array().is_none_or(|a| !a.is_empty()))
            {
                self.not_converted(
                    &at("context_providers"),
                    format!("tool {name:?}: scripts whose output was put before the tool's result have no equivalent here: left out; call them from the tool's own script"),
                );
            }
            for key in tool.keys() {
                if ![
                    "name",
                    "registry",
                    "description",
                    "inputs_override",
                    "context_providers",
                ]
                .contains(&key.as_str())
                {
                    self.not_converted(&at(key), "not a tool key of the original: left out");
                }
            }
            out.push(Value::Object(spec));
        }
        Ok(out)
    }

    fn termination(
        &mut self,
        original: &Map<String, Value>,
        tools: &[Value],
        out: &mut Map<String, Value>,
    ) -> Result<(), ImportError> {
        let explicit = self.string(original, "termination_tool", "termination_tool")?;
        let tool = explicit.clone().unwrap_or_else(|| "submit_result".into());
        let declared = tools.iter().any(|t| t["name"] == tool.as_str());
        match (declared, explicit.is_some()) {
            (true, true) => {
                self.changed("termination_tool", "became `termination.tool`");
            }
            (true, false) => {
                self.changed(
                    "tools",
                    format!("`termination.tool: {tool}`: the original ended a run on `submit_result` by default"),
                );
            }
            (false, true) => {
                self.not_converted(
                    "termination_tool",
                    format!("no converted tool is named {tool:?}, and a termination tool here must be one of the bundle's tools: left out; add the tool and `termination: {{tool: {tool}}}`"),
                );
                return Ok(());
            }
            // The original's default named a tool the bundle does not have:
            // it never ended a run, and leaving it out keeps that.
            (false, false) => return Ok(()),
        }
        out.insert("termination".into(), json!({"tool": tool}));
        Ok(())
    }

    fn registries(&mut self, original: &Map<String, Value>) -> Result<(), ImportError> {
        let names = match original.get("registries") {
            None | Some(Value::Null) => return Ok(()),
            Some(Value::Array(names)) => names,
            Some(other) => {
                return Err(self.invalid(
                    "registries",
                    format!("expected a list of registry names, got {other}"),
                ));
            }
        };
        for (i, name) in names.iter().enumerate() {
            let key = format!("registries[{i}]");
            match name.as_str().map(str::to_ascii_lowercase).as_deref() {
                Some("grail") => self.changed(&key, "`grail` left out: a tool's `kind: grail` says where it comes from"),
                Some("python") => self.not_converted(&key, "`python` left out: its tools are functions registered in code (see the tools left out)"),
                _ => self.not_converted(&key, format!("unknown registry {name} (the original knew `grail` and `python`): left out")),
            }
        }
        Ok(())
    }
}

/// The script of an original grail tool, relative to the bundle: the
/// original's registry looked for it in the bundle's `tools/`.
fn grail_script(dir: &Path, name: &str) -> Option<String> {
    let relative = format!("tools/{name}.pym");
    dir.join(&relative).is_file().then_some(relative)
}

/// The arguments a Grail script declares (`x: int = Input("x")`, with
/// `default=` making one optional) as a JSON Schema, as the original's
/// grail registry derived its tools' parameters.
fn grail_inputs(script: &str) -> Value {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for line in script.lines() {
        let line = line.trim();
        let Some((target, call)) = line.split_once('=') else {
            continue;
        };
        let call = call.trim();
        if !call.starts_with("Input(") {
            continue;
        }
        let (name, annotation) = match target.split_once(':') {
            Some((n, t)) => (n.trim(), t.trim()),
            None => (target.trim(), ""),
        };
        if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let mut schema = Map::new();
        if let Some(kind) = json_type(annotation) {
            schema.insert("type".into(), json!(kind));
        }
        properties.insert(name.to_string(), Value::Object(schema));
        if !call.contains("default") {
            required.push(json!(name));
        }
    }
    let mut schema = Map::new();
    schema.insert("type".into(), json!("object"));
    schema.insert("properties".into(), Value::Object(properties));
    if !required.is_empty() {
        schema.insert("required".into(), Value::Array(required));
    }
    Value::Object(schema)
}

/// The JSON Schema type of a Python annotation (`None` when it says none
/// plainly: any value is accepted).
fn json_type(annotation: &str) -> Option<&'static str> {
    let base = annotation.split('[').next().unwrap_or_default().trim();
    Some(match base {
        "int" => "integer",
        "float" => "number",
        "str" => "string",
        "bool" => "boolean",
        "list" | "List" | "tuple" => "array",
        "dict" | "Dict" => "object",
        _ => return None,
    })
}

/// What [`import_dir`] did: the conversion of `source` and where it went.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The original bundle file, where it is now.
    pub source: PathBuf,
    pub conversion: Conversion,
    pub written: Written,
}

/// Where [`import_dir`] put the converted bundle.
#[derive(Debug, Clone)]
pub enum Written {
    /// Nothing written (a dry run).
    Nothing,
    /// Converted in place; the original file is kept at `original`.
    InPlace { file: PathBuf, original: PathBuf },
    /// A copy of the bundle directory with the converted file.
    Copy { dir: PathBuf },
}

/// The name an in-place conversion keeps the original file under (not a
/// bundle file, so loads ignore it).
pub const ORIGINAL_BACKUP: &str = "bundle.original.yaml";

/// Converts the original bundle in `dir`: in place (keeping the original
/// file as [`ORIGINAL_BACKUP`]), into a copy of the directory at `out`, or
/// (`dry_run`) nowhere. Blocking.
pub fn import_dir(
    dir: &Path,
    out: Option<&Path>,
    dry_run: bool,
    options: &ImportOptions,
) -> Result<Imported, ImportError> {
    let file =
        super::bundle_file(dir).ok_or_else(|| ImportError::NoBundleFile(dir.to_path_buf()))?;
    let text = std::fs::read_to_string(&file).map_err(|e| ImportError::Read {
        file: file.clone(),
        source: e,
    })?;
    let conversion = convert(&text, dir, &file, options)?;
    if dry_run {
        return Ok(Imported {
            source: file,
            conversion,
            written: Written::Nothing,
        });
    }
    let write = |path: &Path, content: &str| {
        std::fs::write(path, content).map_err(|e| ImportError::Write {
            path: path.to_path_buf(),
            source: e,
        })
    };
    let written = match out {
        Some(target) => {
            // Copying a directory into itself would never end.
            let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
            if absolute(target).starts_with(absolute(dir)) {
                return Err(ImportError::OutInside {
                    out: target.to_path_buf(),
                    dir: dir.to_path_buf(),
                });
            }
            let occupied =
                std::fs::read_dir(target).is_ok_and(|mut entries| entries.next().is_some());
            if occupied {
                return Err(ImportError::OutNotEmpty(target.to_path_buf()));
            }
            copy_dir(dir, target, &file)?;
            write(&target.join("bundle.yaml"), &conversion.yaml)?;
            Written::Copy {
                dir: target.to_path_buf(),
            }
        }
        None => {
            let backup = dir.join(ORIGINAL_BACKUP);
            if backup.exists() {
                return Err(ImportError::BackupExists(backup));
            }
            std::fs::rename(&file, &backup).map_err(|e| ImportError::Write {
                path: backup.clone(),
                source: e,
            })?;
            let target = dir.join("bundle.yaml");
            write(&target, &conversion.yaml)?;
            Written::InPlace {
                file: target,
                original: backup,
            }
        }
    };
    let source = match &written {
        Written::InPlace { original, .. } => original.clone(),
        _ => file,
    };
    Ok(Imported {
        source,
        conversion,
        written,
    })
}

/// Copies `from` into `to` (created), every file but `skip` (the original
/// bundle file, replaced by the converted one).
fn copy_dir(from: &Path, to: &Path, skip: &Path) -> Result<(), ImportError> {
    let write_err = |path: &Path, e| ImportError::Write {
        path: path.to_path_buf(),
        source: e,
    };
    let read_err = |path: &Path, e| ImportError::Read {
        file: path.to_path_buf(),
        source: e,
    };
    std::fs::create_dir_all(to).map_err(|e| write_err(to, e))?;
    for entry in std::fs::read_dir(from).map_err(|e| read_err(from, e))? {
        let entry = entry.map_err(|e| read_err(from, e))?;
        let path = entry.path();
        if path == skip {
            continue;
        }
        let target = to.join(entry.file_name());
        if path.is_dir() {
            copy_dir(&path, &target, skip)?;
        } else {
            std::fs::copy(&path, &target).map_err(|e| write_err(&target, e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORIGINAL: &str = r#"name: summariser
version: "2.0"
model:
  plugin: qwen
  adapter: Qwen/Qwen2.5-7B-Instruct
  grammar:
    mode: ebnf
    allow_parallel_calls: false
    args_format: escaped_strings
initial_context:
  system_prompt: "You summarise {{ topic }}."
  user_template: "Summarise: {{ input }}"
max_turns: 6
termination_tool: submit_result
tools:
  - name: count_words
    registry: grail
    description: Counts words
  - name: submit_result
    inputs_override: {type: object, properties: {summary: {type: string}}, required: [summary]}
    context_providers: [tools/ctx.pym]
  - name: lookup
    registry: python
registries: [grail, python]
"#;

    fn bundle_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("tools")).unwrap();
        std::fs::write(
            dir.path().join("tools/count_words.pym"),
            "from grail import Input\ntext: str = Input(\"text\")\nlimit: int = Input(\"limit\", default=10)\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("tools/submit_result.pym"),
            "summary: str = Input(\"summary\")\n",
        )
        .unwrap();
        dir
    }

    fn converted(text: &str, dir: &Path) -> (Value, Conversion) {
        let conversion = convert(
            text,
            dir,
            &dir.join("bundle.yaml"),
            &ImportOptions::default(),
        )
        .unwrap();
        let value: Value = serde_saphyr::from_str(&conversion.yaml).unwrap();
        (value, conversion)
    }

    #[test]
    fn every_original_key_lands_in_its_place_here() {
        let dir = bundle_dir();
        let (value, _) = converted(ORIGINAL, dir.path());
        assert_eq!(value["model"]["endpoint"], DEFAULT_ENDPOINT);
        assert_eq!(value["model"]["name"], "Qwen/Qwen2.5-7B-Instruct");
        assert_eq!(value["model"]["plugin"], "qwen");
        assert_eq!(
            value["model"]["grammar"],
            json!({"mode": "ebnf", "allow_parallel_calls": false})
        );
        assert_eq!(
            value["prompts"],
            json!({"system": "You summarise {{ topic }}.", "user": "Summarise: {{ input }}"})
        );
        assert_eq!(
            value["limits"],
            json!({"max_turns": 6, "on_max_turns": "succeed"})
        );
        assert_eq!(value["termination"], json!({"tool": "submit_result"}));
        assert_eq!(value["version"], "2.0");
        let tools = value["tools"].as_array().unwrap();
        assert_eq!(tools.len(), 2, "the python tool is left out: {tools:?}");
        assert_eq!(tools[0]["kind"], "grail");
        assert_eq!(tools[0]["script"], "tools/count_words.pym");
        assert_eq!(tools[0]["description"], "Counts words");
        assert_eq!(
            tools[0]["parameters"],
            json!({"type": "object", "properties": {"text": {"type": "string"}, "limit": {"type": "integer"}}, "required": ["text"]})
        );
        assert_eq!(tools[1]["parameters"]["required"], json!(["summary"]));
    }

    #[test]
    fn what_has_no_equivalent_is_reported_with_its_original_key_and_line() {
        let dir = bundle_dir();
        let (_, conversion) = converted(ORIGINAL, dir.path());
        let keys: Vec<_> = conversion
            .not_converted
            .iter()
            .map(|i| (i.key.as_str(), i.line))
            .collect();
        assert_eq!(
            keys,
            [
                ("model.grammar.args_format", Some(9)),
                ("tools[1].context_providers", Some(21)),
                ("tools[2]", Some(22)),
                ("registries[1]", Some(24)),
            ]
        );
        let changed: Vec<_> = conversion.changed.iter().map(|i| i.key.as_str()).collect();
        for key in [
            "initial_context.system_prompt",
            "initial_context.user_template",
            "max_turns",
            "termination_tool",
            "tools[0].registry",
            "tools[1].inputs_override",
            "model.adapter",
            "registries[0]",
        ] {
            assert!(changed.contains(&key), "{key} in {changed:?}");
        }
    }

    #[test]
    fn the_originals_defaults_are_written_out() {
        let dir = bundle_dir();
        let text = "name: my agent\ninitial_context: {system_prompt: hi}\ntools: [{name: submit_result}]\n";
        let options = ImportOptions {
            endpoint: "http://gpu:8000/v1".into(),
            model: Some("m".into()),
        };
        let conversion =
            convert(text, dir.path(), &dir.path().join("bundle.yaml"), &options).unwrap();
        let value: Value = serde_saphyr::from_str(&conversion.yaml).unwrap();
        assert_eq!(value["name"], "my_agent");
        assert_eq!(value["version"], "1.0");
        assert_eq!(
            value["model"],
            json!({"endpoint": "http://gpu:8000/v1", "name": "m", "plugin": "function_gemma", "grammar": {"mode": "ebnf", "allow_parallel_calls": true}})
        );
        assert_eq!(value["prompts"]["user"], "{{ input }}");
        assert_eq!(
            value["termination"],
            json!({"tool": "submit_result"}),
            "the default termination tool exists"
        );
        assert!(
            conversion.not_converted.is_empty(),
            "{:?}",
            conversion.not_converted
        );
    }

    #[test]
    fn a_bundle_without_a_model_name_or_original_keys_is_refused_with_what_to_do() {
        let dir = bundle_dir();
        let file = dir.path().join("bundle.yaml");
        let no_model = convert(
            "name: a\ninitial_context: {system_prompt: hi}\n",
            dir.path(),
            &file,
            &ImportOptions::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            no_model.contains("model.adapter") && no_model.contains("--model NAME"),
            "{no_model}"
        );
        let ours = convert(
            "name: a\nversion: 1\nmodel: {endpoint: x, name: m}\nprompts: {user: hi}\n",
            dir.path(),
            &file,
            &ImportOptions::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(ours.contains("not an original bundle"), "{ours}");
    }

    #[test]
    fn import_dir_writes_a_copy_or_in_place_and_never_into_itself() {
        let dir = bundle_dir();
        std::fs::write(dir.path().join("bundle.yaml"), ORIGINAL).unwrap();
        let options = ImportOptions::default();
        let inside = import_dir(dir.path(), Some(&dir.path().join("new")), false, &options)
            .unwrap_err()
            .to_string();
        assert!(
            inside.contains("is inside the bundle being converted"),
            "{inside}"
        );
        assert!(!dir.path().join("new").exists());

        let out = tempfile::tempdir().unwrap();
        let copy = out.path().join("copy");
        let imported = import_dir(dir.path(), Some(&copy), false, &options).unwrap();
        assert_eq!(imported.source, dir.path().join("bundle.yaml"));
        assert!(copy.join("tools/count_words.pym").is_file());
        assert_eq!(
            std::fs::read_to_string(copy.join("bundle.yaml")).unwrap(),
            imported.conversion.yaml
        );
        let again = import_dir(dir.path(), Some(&copy), false, &options)
            .unwrap_err()
            .to_string();
        assert!(again.contains("is not empty"), "{again}");

        let imported = import_dir(dir.path(), None, false, &options).unwrap();
        assert_eq!(imported.source, dir.path().join(ORIGINAL_BACKUP));
        assert_eq!(std::fs::read_to_string(&imported.source).unwrap(), ORIGINAL);
        let twice = import_dir(dir.path(), None, false, &options)
            .unwrap_err()
            .to_string();
        assert!(twice.contains("not an original bundle"), "{twice}");
    }

    #[test]
    fn original_keys_are_found_with_their_paths() {
        let value: Value = serde_saphyr::from_str(ORIGINAL).unwrap();
        let paths: Vec<_> = original_keys(&value).into_iter().map(|k| k.path).collect();
        assert_eq!(
            paths,
            [
                "initial_context",
                "max_turns",
                "termination_tool",
                "registries",
                "model.adapter",
                "model.grammar.args_format",
                "tools[0].registry",
                "tools[2].registry",
                "tools[1].inputs_override",
                "tools[1].context_providers",
            ]
        );
    }
}
