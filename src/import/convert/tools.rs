//! The original's `tools` converted: a grail tool becomes `kind: grail`
//! with its script found in the bundle and its `parameters` read from the
//! script's `Input()` declarations (or its `inputs_override`); a tool of
//! any other registry is reported as left out.

use std::path::Path;

use serde_json::{Map, Value, json};

use super::Converter;
use crate::import::ImportError;

impl Converter<'_> {
    /// The original's `tools`, each carried over or reported as left out.
    pub(super) fn tools(
        &mut self,
        original: &Map<String, Value>,
    ) -> Result<Vec<Value>, ImportError> {
        let items = match original.get("tools") {
            None | Some(Value::Null) => return Ok(Vec::new()),
            Some(Value::Array(items)) => items,
            Some(other) => {
                return Err(self.invalid("tools", format!("expected a list of tools, got {other}")));
            }
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            out.extend(self.tool(i, item)?);
        }
        Ok(out)
    }

    /// Tool `i` of the original: its spec here, or `None` when it cannot be
    /// carried over (reported).
    fn tool(&mut self, i: usize, item: &Value) -> Result<Option<Value>, ImportError> {
        let at = |key: &str| format!("tools[{i}].{key}");
        let Some(tool) = item.as_object() else {
            return Err(self.invalid(
                &format!("tools[{i}]"),
                format!("expected a mapping with `name`, got {item}"),
            ));
        };
        let name = self
            .string(tool, "name", &at("name"))?
            .ok_or_else(|| self.invalid(&format!("tools[{i}]"), "a tool has a `name`; add one"))?;
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
            return Ok(None);
        }
        let Some(script) = grail_script(self.dir, &name) else {
            self.not_converted(
                &format!("tools[{i}]"),
                format!("tool {name:?}: no `tools/{name}.pym` in the bundle (the original also looked in `agents/` of its working directory): left out; copy the script into the bundle's `tools/` and import again"),
            );
            return Ok(None);
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
        let parameters = self.parameters(i, &name, tool, &script)?;
        spec.insert("parameters".into(), parameters);
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
        Ok(Some(Value::Object(spec)))
    }

    /// A grail tool's `parameters`: its `inputs_override`, else what the
    /// script's `Input()` declarations say.
    fn parameters(
        &mut self,
        i: usize,
        name: &str,
        tool: &Map<String, Value>,
        script: &str,
    ) -> Result<Value, ImportError> {
        let at = |key: &str| format!("tools[{i}].{key}");
        match tool.get("inputs_override") {
            Some(Value::Object(schema)) => {
                self.changed(&at("inputs_override"), "became `parameters`");
                Ok(Value::Object(schema.clone()))
            }
            None | Some(Value::Null) => {
                let source = self.dir.join(script);
                let text = std::fs::read_to_string(&source).map_err(|e| ImportError::Read {
                    file: source.clone(),
                    source: e,
                })?;
                let parameters = grail_inputs(&text);
                let count = parameters["properties"].as_object().map_or(0, Map::len);
                self.changed(
                    &format!("tools[{i}]"),
                    format!("tool {name:?}: `parameters` from the {count} `Input()` declaration(s) of {script}, as the original's grail registry read them"),
                );
                Ok(parameters)
            }
            Some(other) => Err(self.invalid(
                &at("inputs_override"),
                format!("expected a JSON Schema mapping, got {other}"),
            )),
        }
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
