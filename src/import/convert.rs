//! One original `bundle.yaml` converted: the text parsed, every original
//! key carried to its place here (or reported as having none). Its tools,
//! with the grail scripts' inputs, are converted in `convert/tools.rs`.

use std::path::Path;

use serde_json::{Map, Value, json};

use super::{Conversion, ImportError, ImportOptions, ReportItem};
use crate::bundle::locate::LineIndex;
use crate::bundle::original::{ORIGINAL_KEYS, original_keys};

mod tools;

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

        out.insert("limits".into(), Value::Object(self.limits(original)?));

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

    /// `limits`: `max_turns`, and `on_max_turns: succeed` always.
    fn limits(&mut self, original: &Map<String, Value>) -> Result<Map<String, Value>, ImportError> {
        // The original returned a run that reached max_turns as its result;
        // here such a run fails unless the bundle says otherwise.
        let mut limits = Map::new();
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
        Ok(limits)
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
        let name = self.model_name(model, options)?;
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

        let grammar = self.grammar(model)?;
        out.insert("grammar".into(), Value::Object(grammar));
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

    /// `model.name`: `--model`, else the original's `model.adapter`.
    fn model_name(
        &mut self,
        model: &Map<String, Value>,
        options: &ImportOptions,
    ) -> Result<String, ImportError> {
        let adapter = self.string(model, "adapter", "model.adapter")?;
        Ok(match (&options.model, adapter) {
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
        })
    }

    /// `model.grammar`: the original's (defaults written out), without the
    /// keys that have no equivalent here.
    fn grammar(&mut self, model: &Map<String, Value>) -> Result<Map<String, Value>, ImportError> {
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
        Ok(grammar_out)
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
