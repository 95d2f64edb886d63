//! A model plugin library (`kind: model`, docs/plugins.md) as a
//! [`ModelPlugin`]: the family's parser (and, when it has them, its tool
//! formatting) answered by the library over the plugin ABI, on the
//! plugin's own call threads within [`MODEL_PLUGIN_TIMEOUT`]. A library that
//! fails, panics, hangs or answers a value of the wrong shape fails the turn
//! that asked, naming itself; it never takes the daemon down.
//!
//! Dynamic plugins build no grammars (their grammar modes are none): a
//! grammar is built for the family's call syntax, which only the library
//! knows.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::model::{
    BUILTIN_PLUGINS, GrammarMode, ModelCatalog, ModelPlugin, ModelPluginError, ParsedCall,
    ParsedReply, add_to_system, hermes_declaration, marker_start, new_call_id, openai_tools,
};
use crate::plugins::{Instance, Plugin, PluginRegistry};
use crate::types::{Message, ToolCall, ToolSchema};

/// How long one call into a model plugin may take, waiting for a free call
/// thread included. Parsing one reply is quick work; a library that takes
/// this long is stuck.
pub const MODEL_PLUGIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Tool sets whose formatting a plugin remembers; past it the memory starts over.
const PREPARED_TOOL_SETS: usize = 64;

/// The model plugin libraries of `plugins`, each wrapped once: a library
/// `previous` already wrapped (the same file content) is reused with its
/// instance. A library named like a built-in plugin is refused into `errors`.
pub fn libraries(
    plugins: &PluginRegistry,
    previous: &ModelCatalog,
    errors: &mut Vec<String>,
) -> Vec<Arc<dyn ModelPlugin>> {
    plugins.wrapped(
        "model",
        ("model plugin", "a built-in model plugin", BUILTIN_PLUGINS),
        |name, sha256| {
            previous
                .resolve(name)
                .ok()
                .map(|m| m.plugin)
                .filter(|p| p.library_digest() == Some(sha256))
        },
        |plugin| {
            DynamicModelPlugin::new(plugin).map(|wrapped| Arc::new(wrapped) as Arc<dyn ModelPlugin>)
        },
        errors,
    )
}

/// A model plugin library, bound to one instance of it.
pub struct DynamicModelPlugin {
    plugin: Arc<Plugin>,
    instance: Arc<Instance>,
    markers: Vec<String>,
    /// The optional operations the library has.
    formats_tools: bool,
    declares_tools: bool,
    /// What `format_tools` and `declare_tools` answered, per tool set (the
    /// digest of its wire form), asked in [`ModelPlugin::prepare`].
    prepared: Mutex<HashMap<String, Formatting>>,
}

/// The library's formatting of one tool set.
#[derive(Clone, Default)]
struct Formatting {
    tools: Option<Value>,
    declaration: Option<String>,
}

/// A `parse_reply` answer as the ABI defines it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReply {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    calls: Vec<RawCall>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCall {
    #[serde(default)]
    id: Option<String>,
    name: String,
    #[serde(default)]
    arguments: Value,
    #[serde(default)]
    error: Option<String>,
}

impl DynamicModelPlugin {
    /// Wraps `plugin`, creating its instance. Blocking (runs plugin code).
    pub fn new(plugin: Arc<Plugin>) -> Result<Self, crate::plugins::PluginCallError> {
        let instance = Arc::new(plugin.instantiate(&Value::Null)?);
        let manifest = plugin.manifest.model.clone().unwrap_or_default();
        let has = |op: &str| manifest.ops.iter().any(|o| o == op);
        Ok(Self {
            formats_tools: has("format_tools"),
            declares_tools: has("declare_tools"),
            markers: manifest.call_markers.clone(),
            plugin,
            instance,
            prepared: Mutex::new(HashMap::new()),
        })
    }

    fn error(&self, op: &'static str, detail: String, retryable: bool) -> ModelPluginError {
        ModelPluginError {
            plugin: self.plugin.info.label(),
            op,
            detail,
            retryable,
        }
    }

    /// The library's `ok` value for `op` was not `wanted` (`a string`).
    fn wrong_answer(&self, op: &'static str, answer: &Value, wanted: &str) -> ModelPluginError {
        let shown = crate::events::preview(&answer.to_string(), 200);
        self.error(op, format!("it answered {shown}, not {wanted}"), false)
    }

    /// Asks the library `op` on its call threads; its `ok` value.
    async fn ask(&self, op: &'static str, input: Value) -> Result<Value, ModelPluginError> {
        let request = json!({"op": op, "input": input});
        let answer = self
            .plugin
            .pooled(
                Plugin::call_model,
                self.instance.clone(),
                request,
                MODEL_PLUGIN_TIMEOUT,
            )
            .await
            .map_err(|e| self.error(op, e.to_string(), e.is_retryable()))?
            .map_err(|e| self.error(op, e.to_string(), false))?;
        self.ok_value(op, answer)
    }

    /// Asks the library `op` on the calling thread (blocking).
    fn ask_here(&self, op: &'static str, input: Value) -> Result<Value, ModelPluginError> {
        let request = json!({"op": op, "input": input});
        let answer = self
            .plugin
            .call_model(&self.instance, &request)
            .map_err(|e| self.error(op, e.to_string(), false))?;
        self.ok_value(op, answer)
    }

    fn ok_value(&self, op: &'static str, mut answer: Value) -> Result<Value, ModelPluginError> {
        if let Some(ok) = answer.get_mut("ok") {
            return Ok(ok.take());
        }
        let message = answer
            .pointer("/error/message")
            .and_then(Value::as_str)
            .unwrap_or("no message");
        let detail = match answer.pointer("/error/kind").and_then(Value::as_str) {
            Some("panic") => format!("it panicked: {message}"),
            Some(_) => message.to_string(),
            None => format!(
                "it answered neither `ok` nor `error`: {}",
                crate::events::preview(&answer.to_string(), 200)
            ),
        };
        Err(self.error(op, detail, false))
    }

    /// The `parse_reply` input for `reply` offering `tools`.
    fn reply_input(reply: &Message, tools: &[ToolSchema]) -> Value {
        let native: Vec<Value> = reply
            .tool_calls
            .iter()
            .map(|c| json!({"id": c.id, "name": c.name, "arguments": c.arguments}))
            .collect();
        json!({
            "content": reply.content,
            "tool_calls": native,
            "tools": tools.iter().map(ToolSchema::to_wire).collect::<Vec<_>>(),
        })
    }

    /// A `parse_reply` answer read as the ABI defines it.
    fn parsed(&self, answer: Value) -> Result<ParsedReply, ModelPluginError> {
        let raw: RawReply = serde_json::from_value(answer.clone()).map_err(|e| {
            self.error(
                "parse_reply",
                format!(
                    "it answered a value of the wrong shape ({e}): {}; expected {{\"content\": string|null, \"calls\": [{{\"id\"?, \"name\", \"arguments\": object, \"error\"?}}]}}",
                    crate::events::preview(&answer.to_string(), 200)
                ),
                false,
            )
        })?;
        let calls = raw
            .calls
            .into_iter()
            .map(|c| {
                let id = c.id.filter(|id| !id.is_empty()).unwrap_or_else(new_call_id);
                let error = c.error.or_else(|| {
                    (!c.arguments.is_object()).then(|| {
                        format!(
                            "arguments of `{}` are not a JSON object: {}",
                            c.name,
                            crate::events::preview(&c.arguments.to_string(), 200)
                        )
                    })
                });
                let arguments = if c.arguments.is_object() {
                    c.arguments
                } else {
                    json!({})
                };
                ParsedCall {
                    call: ToolCall::new(id, c.name, arguments),
                    error,
                }
            })
            .collect();
        Ok(ParsedReply {
            content: raw.content.filter(|c| !c.is_empty()),
            calls,
        })
    }

    /// The key a tool set's formatting is remembered under.
    fn tool_set_key(tools: &[ToolSchema]) -> String {
        let wire: Vec<Value> = tools.iter().map(ToolSchema::to_wire).collect();
        crate::hex::sha256_hex(Value::Array(wire).to_string().as_bytes())
    }

    fn formatting(&self, tools: &[ToolSchema]) -> Option<Formatting> {
        let prepared = self.prepared.lock().unwrap_or_else(|p| p.into_inner());
        let found = prepared.get(&Self::tool_set_key(tools)).cloned();
        if found.is_none() {
            // The kernel prepares every turn before it formats one.
            tracing::error!(plugin = %self.plugin.info.name, "model plugin asked to format tools it was not prepared for; using the default formatting");
        }
        found
    }
}

impl ModelPlugin for DynamicModelPlugin {
    fn name(&self) -> &str {
        &self.plugin.info.name
    }

    fn grammar_modes(&self) -> &[GrammarMode] {
        &[]
    }

    fn format_tools(&self, tools: &[ToolSchema]) -> Option<Value> {
        if !self.formats_tools {
            return openai_tools(tools);
        }
        match self.formatting(tools) {
            Some(f) => f.tools,
            None => openai_tools(tools),
        }
    }

    fn declare_tools(&self, messages: &mut Vec<Value>, tools: &[ToolSchema]) {
        let declaration = self
            .declares_tools
            .then(|| self.formatting(tools).and_then(|f| f.declaration))
            .flatten()
            .unwrap_or_else(|| hermes_declaration(tools));
        add_to_system(messages, declaration);
    }

    fn prepare<'a>(
        &'a self,
        tools: &'a [ToolSchema],
    ) -> BoxFuture<'a, Result<(), ModelPluginError>> {
        Box::pin(async move {
            if !(self.formats_tools || self.declares_tools) || tools.is_empty() {
                return Ok(());
            }
            let key = Self::tool_set_key(tools);
            let known = self
                .prepared
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(&key);
            if known {
                return Ok(());
            }
            let input = json!({"tools": tools.iter().map(ToolSchema::to_wire).collect::<Vec<_>>()});
            let mut formatting = Formatting::default();
            if self.formats_tools {
                let answer = self.ask("format_tools", input.clone()).await?;
                if !(answer.is_array() || answer.is_null()) {
                    return Err(self.wrong_answer("format_tools", &answer, "an array or null"));
                }
                formatting.tools = (!answer.is_null()).then_some(answer);
            }
            if self.declares_tools {
                let answer = self.ask("declare_tools", input).await?;
                let Value::String(text) = answer else {
                    return Err(self.wrong_answer("declare_tools", &answer, "a string"));
                };
                formatting.declaration = Some(text);
            }
            let mut prepared = self.prepared.lock().unwrap_or_else(|p| p.into_inner());
            if prepared.len() >= PREPARED_TOOL_SETS {
                prepared.clear();
            }
            prepared.insert(key, formatting);
            Ok(())
        })
    }

    /// Blocking: runs the library on the calling thread, without the
    /// timeout. The kernel reads replies through [`Self::read_reply`]; this
    /// serves callers off the runtime (transcript tools, tests). A failure
    /// is logged and leaves the reply unparsed.
    fn parse_reply(&self, reply: &Message, tools: &[ToolSchema]) -> ParsedReply {
        let parsed = self
            .ask_here("parse_reply", Self::reply_input(reply, tools))
            .and_then(|answer| self.parsed(answer));
        parsed.unwrap_or_else(|e| {
            tracing::error!(error = %e, "model plugin could not parse a reply");
            ParsedReply {
                content: reply.content.clone(),
                calls: Vec::new(),
            }
        })
    }

    fn read_reply<'a>(
        &'a self,
        reply: &'a Message,
        tools: &'a [ToolSchema],
    ) -> BoxFuture<'a, Result<ParsedReply, ModelPluginError>> {
        Box::pin(async move {
            let answer = self
                .ask("parse_reply", Self::reply_input(reply, tools))
                .await?;
            self.parsed(answer)
        })
    }

    fn call_start(&self, partial: &str) -> Option<usize> {
        let markers: Vec<&str> = self.markers.iter().map(String::as_str).collect();
        marker_start(partial, &markers)
    }

    fn library_digest(&self) -> Option<&str> {
        Some(&self.plugin.info.sha256)
    }
}
