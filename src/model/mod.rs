//! Model plugins: how a family of models wants its messages and tools
//! formatted, how its replies are parsed into tool calls, and which grammar
//! constrains its output.
//!
//! A plugin is pure: no IO, no HTTP. The kernel asks it to shape a request and
//! to read a reply; the client moves the bytes.

mod catalog;
mod openai;

pub use catalog::{ModelCatalog, ModelConfigError, ResolvedModel};
pub use openai::OpenAiPlugin;

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

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
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ebnf => "ebnf",
            Self::StructuralTag => "structural_tag",
            Self::JsonSchema => "json_schema",
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
    #[error("tool `{tool}`: {detail}")]
    Schema { tool: String, detail: String },
}

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
        (!tools.is_empty()).then(|| Value::Array(tools.iter().map(ToolSchema::to_wire).collect()))
    }

    /// Reads the assistant message returned by the server.
    fn parse_reply(&self, reply: &Message, tools: &[ToolSchema]) -> ParsedReply;

    /// The request keys that constrain output in `mode` (e.g.
    /// `structured_outputs`), to be merged into the request body.
    fn grammar(
        &self,
        mode: GrammarMode,
        tools: &[ToolSchema],
        allow_parallel_calls: bool,
    ) -> Result<Map<String, Value>, GrammarError> {
        let _ = (tools, allow_parallel_calls);
        Err(self.unsupported(mode))
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

/// The names `model.plugin` accepts.
pub const BUILTIN_PLUGINS: &[&str] = &["openai"];

/// A built-in plugin by name.
pub fn builtin(name: &str) -> Option<Arc<dyn ModelPlugin>> {
    match name {
        "openai" => Some(Arc::new(OpenAiPlugin)),
        _ => None,
    }
}

/// A fresh tool-call id with 128 random bits.
pub fn new_call_id() -> String {
    format!("call_{}", uuid::Uuid::new_v4().simple())
}
