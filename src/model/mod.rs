//! Model plugins: how a family of models wants its messages and tools
//! formatted, how its replies are parsed into tool calls, and which grammar
//! constrains its output.
//!
//! A plugin is pure: no IO, no HTTP. The kernel asks it to shape a request and
//! to read a reply; the client moves the bytes.
//!
//! Built-ins: `openai` (native `tool_calls`), `qwen` (`qwen/`: Hermes, Qwen3
//! XML, bare `<function=...>`, whole-content JSON) and `function_gemma`.
//! Other families come as model plugin libraries (docs/plugins.md), which
//! the registry wraps in this trait; their calls may fail or take time, so
//! the kernel reaches them through [`ModelPlugin::prepare`] and
//! [`ModelPlugin::read_reply`], which for the built-ins answer at once.
//! `config` turns `config/models/*.toml` into an immutable [`ModelCatalog`]
//! of [`ResolvedModel`]s (plugin + options, default grammar, stop, wire key);
//! `schema_ebnf` turns JSON Schemas into XGrammar EBNF; `wire` places a
//! grammar in the request body for a server family (`gbnf` rewrites EBNF for
//! llama.cpp); `reply` holds what the text parsers share.
//!
//! Grammars in `ebnf` mode allow free text without `<` before the calls, so
//! the text cannot open a tag; `structural_tag` leaves text free and
//! constrains only inside the call tags.

mod config;
mod function_gemma;
pub mod fuzzing;
mod gbnf;
mod openai;
mod qwen;
mod reply;
mod schema_ebnf;
pub use schema_ebnf::SchemaError;
mod wire;

pub use config::{ModelCatalog, ModelConfigError, ResolvedModel};
pub use function_gemma::{FunctionGemmaOptions, FunctionGemmaPlugin};
pub use openai::OpenAiPlugin;
pub use qwen::{QwenCallStyle, QwenOptions, QwenPlugin};
pub use wire::{Grammar, ServerKind, WireKey};

pub(crate) use reply::marker_start;

use std::sync::Arc;

use futures::future::BoxFuture;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::types::{Message, ToolCall, ToolSchema};

/// How the model's output is constrained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GrammarMode {
    Ebnf,
    StructuralTag,
    JsonSchema,
}

impl GrammarMode {
    pub const ALL: [GrammarMode; 3] = [Self::Ebnf, Self::StructuralTag, Self::JsonSchema];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ebnf => "ebnf",
            Self::StructuralTag => "structural_tag",
            Self::JsonSchema => "json_schema",
        }
    }
}

/// What a grammar must allow besides the calls' syntax.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CallRules {
    /// One reply may hold several calls.
    pub parallel: bool,
    /// The reply must be calls (no free text, at least one call).
    pub required: bool,
}

/// Which tools the model may call in a turn: OpenAI's `tool_choice`, written
/// in a bundle as `auto`, `required`, `none` or a tool's name.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum ToolChoice {
    /// The model decides (the grammar allows text or calls).
    #[default]
    Auto,
    /// The reply must call at least one tool.
    Required,
    /// No tool may be called (and no grammar is sent).
    None,
    /// The reply must call this tool.
    Tool(String),
}

impl From<String> for ToolChoice {
    fn from(text: String) -> Self {
        match text.as_str() {
            "auto" => Self::Auto,
            "required" => Self::Required,
            "none" => Self::None,
            _ => Self::Tool(text),
        }
    }
}

impl From<ToolChoice> for String {
    fn from(choice: ToolChoice) -> Self {
        match choice {
            ToolChoice::Auto => "auto".into(),
            ToolChoice::Required => "required".into(),
            ToolChoice::None => "none".into(),
            ToolChoice::Tool(name) => name,
        }
    }
}

impl ToolChoice {
    /// The request's `tool_choice` value.
    pub fn to_wire(&self) -> Value {
        match self {
            Self::Auto => Value::from("auto"),
            Self::Required => Value::from("required"),
            Self::None => Value::from("none"),
            Self::Tool(name) => serde_json::json!({"type": "function", "function": {"name": name}}),
        }
    }

    /// The tools a grammar for this choice offers: all, none, or the named one.
    pub fn offered(&self, tools: &[ToolSchema]) -> Vec<ToolSchema> {
        match self {
            Self::Auto | Self::Required => tools.to_vec(),
            Self::None => Vec::new(),
            Self::Tool(name) => tools.iter().filter(|t| &t.name == name).cloned().collect(),
        }
    }

    /// The grammar's rules for this choice.
    pub fn rules(&self, allow_parallel_calls: bool) -> CallRules {
        CallRules {
            parallel: allow_parallel_calls,
            required: matches!(self, Self::Required | Self::Tool(_)),
        }
    }
}

/// A call the parser found. `error` is set when the call was malformed; the
/// kernel then answers it with `bad_args:<error>` instead of running it.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedCall {
    pub call: ToolCall,
    pub error: Option<String>,
}

/// The model's reply after the plugin read it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ParsedReply {
    /// Text outside the calls.
    pub content: Option<String>,
    pub calls: Vec<ParsedCall>,
}

/// A grammar could not be built for these tools.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum GrammarError {
    #[error(
        "model plugin `{plugin}` does not support grammar mode `{mode}` (supported: {supported})"
    )]
    Unsupported {
        plugin: String,
        mode: &'static str,
        supported: String,
    },
    #[error("tool `{tool}`: cannot build a grammar for its parameters: {detail}")]
    Schema {
        tool: String,
        detail: schema_ebnf::SchemaError,
    },
    #[error(
        "grammar mode `{mode}` has no place on wire `{wire}` (model `{plugin}`); use wire `structured_outputs` or another grammar mode"
    )]
    NoWirePlacement {
        plugin: String,
        mode: &'static str,
        wire: &'static str,
    },
    #[error("grammar mode `{mode}` needs at least one tool, and the request has none")]
    NoTools { mode: &'static str },
}

impl GrammarError {
    /// Refuses a grammar in `mode` for a request without tools: the
    /// grammars the plugins build constrain calls of the offered tools.
    pub fn require_tools(mode: GrammarMode, tools: &[ToolSchema]) -> Result<(), Self> {
        if tools.is_empty() {
            return Err(Self::NoTools {
                mode: mode.as_str(),
            });
        }
        Ok(())
    }
}

/// A model plugin library failed a call (it answered an error, garbage or
/// nothing in time): the turn that asked cannot go on.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "model plugin `{plugin}` failed in {op}: {detail} (the plugin's library is at fault: fix or replace it, then reload)"
)]
pub struct ModelPluginError {
    pub plugin: String,
    /// The operation asked: `parse_reply`, `format_tools`, `declare_tools`.
    pub op: &'static str,
    pub detail: String,
    /// It did not answer in time: a retry may find it answering.
    pub retryable: bool,
}

// Every family's impl opens alike (`name`, `grammar_modes`, `call_start`
// and `build_grammar`'s signature: function_gemma.rs, qwen/), as an impl
// must; what each recognises and constrains is its own.
/// The seam between the kernel and a model family.
pub trait ModelPlugin: Send + Sync {
    fn name(&self) -> &str;

    /// The grammar modes this plugin can build.
    fn grammar_modes(&self) -> &[GrammarMode];

    /// Messages in the wire form this model expects.
    fn format_messages(&self, messages: &[Message]) -> Vec<Value> {
        messages.iter().map(Message::to_wire).collect()
    }

    /// The request's `tools` array, or `None` when there are no tools.
    fn format_tools(&self, tools: &[ToolSchema]) -> Option<Value> {
        openai_tools(tools)
    }

    /// Declares `tools` in the prompt, for requests that cannot list them
    /// (a server that refuses `tools` beside a grammar). The default adds a
    /// Hermes-style `<tools>` block, which chat templates of the Qwen,
    /// SmolLM and Llama families use, to the system message (or a new one).
    fn declare_tools(&self, messages: &mut Vec<Value>, tools: &[ToolSchema]) {
        add_to_system(messages, hermes_declaration(tools));
    }

    /// Gets ready to format a request offering `tools`. A plugin whose
    /// formatting asks a library (and so may fail or take time) asks it
    /// here, once per tool set, so that [`Self::format_tools`] and
    /// [`Self::declare_tools`] answer at once; the built-ins need nothing.
    fn prepare<'a>(
        &'a self,
        tools: &'a [ToolSchema],
    ) -> BoxFuture<'a, Result<(), ModelPluginError>> {
        let _ = tools;
        Box::pin(std::future::ready(Ok(())))
    }

    /// [`Self::parse_reply`] as the kernel asks it: a plugin whose parser
    /// is a library runs it off the runtime, within a timeout, and its
    /// failure is the turn's error; the built-ins parse in place.
    fn read_reply<'a>(
        &'a self,
        reply: &'a Message,
        tools: &'a [ToolSchema],
    ) -> BoxFuture<'a, Result<ParsedReply, ModelPluginError>> {
        Box::pin(std::future::ready(Ok(self.parse_reply(reply, tools))))
    }

    /// The SHA-256 of the code behind the plugin when it is not built into
    /// the daemon (a plugin library): part of the identity of every bundle
    /// that uses it, so a job replays with the parser it started with.
    fn library_digest(&self) -> Option<&str> {
        None
    }

    /// Reads the assistant message returned by the server.
    fn parse_reply(&self, reply: &Message, tools: &[ToolSchema]) -> ParsedReply;

    // The families (`function_gemma.rs`, `qwen/`) write these signatures
    // again, as an impl must; their bodies are their own formats'.
    /// Where a tool call written in the text could begin in `partial`, a
    /// reply's text so far while it streams: the byte offset from which the
    /// text might be (the start of) a call, `None` when no call can begin
    /// in it yet. Text before the offset is never call markup. The default
    /// is for families whose calls never appear in the text (the server's
    /// `tool_calls`): `None`.
    fn call_start(&self, partial: &str) -> Option<usize> {
        let _ = partial;
        None
    }

    /// The grammar that constrains output in `mode`, before it is placed
    /// on the wire. Plugins override this; the default supports nothing.
    /// [`ResolvedModel::request_fragment`] places it on a server's wire.
    fn build_grammar(
        &self,
        mode: GrammarMode,
        tools: &[ToolSchema],
        rules: CallRules,
    ) -> Result<Grammar, GrammarError> {
        let _ = (tools, rules);
        Err(self.unsupported(mode))
    }

    /// How the model itself writes `call` in its text output, when it
    /// writes calls as text at all. Used to build replay transcripts and
    /// round-trip tests.
    fn render_call(&self, call: &ToolCall) -> Option<String> {
        let _ = call;
        None
    }

    fn unsupported(&self, mode: GrammarMode) -> GrammarError {
        GrammarError::Unsupported {
            plugin: self.name().to_string(),
            mode: mode.as_str(),
            supported: self
                .grammar_modes()
                .iter()
                .map(|m| m.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

/// The OpenAI `tools` array for `tools`, or `None` when there are none.
pub fn openai_tools(tools: &[ToolSchema]) -> Option<Value> {
    (!tools.is_empty()).then(|| Value::Array(tools.iter().map(ToolSchema::to_wire).collect()))
}

/// The Hermes-style `<tools>` block that declares `tools` in a prompt.
pub fn hermes_declaration(tools: &[ToolSchema]) -> String {
    let listing: Vec<String> = tools.iter().map(|t| t.to_wire().to_string()).collect();
    format!(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags.",
        listing.join("\n")
    )
}

/// Adds `block` to the first system (or developer) message of wire
/// `messages`, after its text, or as a new system message in front.
pub fn add_to_system(messages: &mut Vec<Value>, block: String) {
    let system = messages.iter_mut().find(|m| {
        matches!(
            m.get("role").and_then(Value::as_str),
            Some("system" | "developer")
        )
    });
    match system {
        Some(message) => {
            let text = message
                .get("content")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let joined = if text.is_empty() {
                block
            } else {
                format!("{text}\n\n{block}")
            };
            message["content"] = Value::String(joined);
        }
        None => messages.insert(0, serde_json::json!({"role": "system", "content": block})),
    }
}

/// The role system and developer messages are sent with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SystemRole {
    /// Both go as `system` (templates that know no `developer`, e.g. Qwen).
    System,
    /// Both go as `developer` (FunctionGemma declares tools in that turn).
    Developer,
    /// Each goes as written.
    Keep,
}

impl SystemRole {
    /// `message` with its role rewritten when it is a system or developer message.
    pub fn apply(self, message: &Message) -> Message {
        use crate::types::Role;
        let mut out = message.clone();
        if matches!(message.role, Role::System | Role::Developer) {
            out.role = match self {
                Self::System => Role::System,
                Self::Developer => Role::Developer,
                Self::Keep => message.role,
            };
        }
        out
    }
}

/// The names `model.plugin` accepts.
pub const BUILTIN_PLUGINS: &[&str] = &["openai", "qwen", "function_gemma"];

/// A built-in plugin by name, with its default options.
pub fn builtin(name: &str) -> Option<Arc<dyn ModelPlugin>> {
    match name {
        "openai" => Some(Arc::new(OpenAiPlugin)),
        "qwen" => Some(Arc::new(QwenPlugin::default())),
        "function_gemma" => Some(Arc::new(FunctionGemmaPlugin::default())),
        _ => None,
    }
}

/// A fresh tool-call id: `call_` and a UUIDv4 in hex (122 random bits,
/// above the 96 that make collisions within a job negligible).
pub fn new_call_id() -> String {
    format!("call_{}", uuid::Uuid::new_v4().simple())
}
