//! The conversation vocabulary shared by every layer: messages, tool calls and
//! results, tool schemas, token usage and run outcomes, a remote agent's
//! message type, plus their exact
//! conversion to and from the OpenAI chat-completions wire format.
//!
//! A caller's answer format (a JSON Schema the final answer is held to) is
//! in [`answer`]; the rules of text fields (with their schema patterns) in
//! [`text`]; which tools a run answers by stand-ins in [`StandIns`].
//!
//! This module knows nothing about models, HTTP or tools; it is pure data.

pub mod answer;
mod stand_ins;
pub mod text;

pub use answer::AnswerFormat;
pub use stand_ins::StandIns;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// The message an agent call carries: its `content` (`http_agent`'s
/// default parameter), `input` (`agent`'s) or `query` (the router's
/// `call_agent` functions, `[runtime] router_functions = "call_agent"`);
/// without any, the whole arguments as JSON text. The agent tools send it,
/// and a stream that tells a nested run shows it as the run's input.
pub fn agent_message(arguments: &Value) -> String {
    let message = ["content", "input", "query"]
        .iter()
        .find_map(|key| arguments.get(*key));
    match message {
        Some(Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
        None => arguments.to_string(),
    }
}

/// The name under which a run is asked to offer only some of its bundle's
/// tools: a job's variable (lifted into its `tools` control) or a local
/// run's (`--var tools=a,b`).
pub const TOOLS_VARIABLE: &str = "tools";

/// Why a `tools` value (the tools a run offers the model) cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolNamesError {
    #[error("lists tool names; {0} is not a string")]
    NotAName(String),
    #[error("is a list of tool names (or one comma-separated string), not {0}")]
    NotAList(String),
}

/// The tool names a `tools` value lists: a list of names, or one
/// comma-separated string (as `--var tools=a,b` sends it). The one reading
/// of it, for a job's control and a local run's variable alike.
pub fn tool_names(value: &Value) -> Result<Vec<String>, ToolNamesError> {
    match value {
        Value::String(text) => Ok(text
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .collect()),
        Value::Array(items) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| ToolNamesError::NotAName(item.to_string()))
            })
            .collect(),
        other => Err(ToolNamesError::NotAList(other.to_string())),
    }
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    Developer,
    User,
    Assistant,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::Developer => "developer",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// A tool invocation requested by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// Parsed arguments. When the model sent something that is not JSON, this
    /// holds the raw text as a JSON string and [`ToolCall::raw_arguments`] keeps it.
    pub arguments: Value,
    /// The exact argument text the model produced, when it differs from the
    /// canonical serialization of `arguments` (cache keys use the exact text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_arguments: Option<String>,
}

impl ToolCall {
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments,
            raw_arguments: None,
        }
    }

    /// The argument text as the model wrote it.
    pub fn arguments_text(&self) -> String {
        match &self.raw_arguments {
            Some(raw) => raw.clone(),
            None => self.arguments.to_string(),
        }
    }

    fn to_wire(&self) -> Value {
        json!({
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments_text()},
        })
    }

    fn from_wire(value: &Value) -> Result<Self, WireError> {
        let function = value
            .get("function")
            .ok_or(WireError::Missing("tool_calls[].function"))?;
        let name = function
            .get("name")
            .and_then(Value::as_str)
            .ok_or(WireError::Missing("tool_calls[].function.name"))?;
        let id = value.get("id").and_then(Value::as_str).unwrap_or_default();
        let (arguments, raw) = match function.get("arguments") {
            None | Some(Value::Null) => (Value::Object(Map::new()), Some(String::new())),
            Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
                Ok(parsed) if parsed.to_string().as_str() == text.as_str() => (parsed, None),
                Ok(parsed) => (parsed, Some(text.clone())),
                Err(_) => (Value::String(text.clone()), Some(text.clone())),
            },
            // Some servers send the arguments as an object rather than a string.
            Some(other) => (other.clone(), None),
        };
        Ok(Self {
            id: id.to_string(),
            name: name.to_string(),
            arguments,
            raw_arguments: raw,
        })
    }
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Message {
    fn with(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: Some(content.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
        }
    }

    pub fn system(content: impl Into<String>) -> Self {
        Self::with(Role::System, content)
    }

    pub fn developer(content: impl Into<String>) -> Self {
        Self::with(Role::Developer, content)
    }

    pub fn user(content: impl Into<String>) -> Self {
        Self::with(Role::User, content)
    }

    pub fn assistant(content: Option<String>, tool_calls: Vec<ToolCall>) -> Self {
        Self {
            role: Role::Assistant,
            content,
            tool_calls,
            tool_call_id: None,
            name: None,
        }
    }

    pub fn tool(result: &ToolResult) -> Self {
        Self {
            role: Role::Tool,
            content: Some(result.output.clone()),
            tool_calls: Vec::new(),
            tool_call_id: Some(result.call_id.clone()),
            name: Some(result.name.clone()),
        }
    }

    /// The OpenAI chat-completions form: absent fields omitted, tool-call
    /// arguments as a JSON string.
    pub fn to_wire(&self) -> Value {
        let mut out = Map::new();
        out.insert("role".into(), json!(self.role.as_str()));
        if let Some(content) = &self.content {
            out.insert("content".into(), json!(content));
        } else if self.role == Role::Assistant && self.tool_calls.is_empty() {
            out.insert("content".into(), json!(""));
        }
        if !self.tool_calls.is_empty() {
            out.insert(
                "tool_calls".into(),
                Value::Array(self.tool_calls.iter().map(ToolCall::to_wire).collect()),
            );
        }
        if let Some(id) = &self.tool_call_id {
            out.insert("tool_call_id".into(), json!(id));
        }
        if let Some(name) = &self.name {
            out.insert("name".into(), json!(name));
        }
        Value::Object(out)
    }

    pub fn from_wire(value: &Value) -> Result<Self, WireError> {
        let role: Role = value
            .get("role")
            .cloned()
            .map(serde_json::from_value)
            .transpose()
            .map_err(|_| WireError::Invalid("role"))?
            .ok_or(WireError::Missing("role"))?;
        let content = match value.get("content") {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) => Some(text.clone()),
            // Content parts: keep the text parts joined, which is what a
            // text-only agent can use.
            Some(Value::Array(parts)) => Some(
                parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join(""),
            ),
            Some(_) => return Err(WireError::Invalid("content")),
        };
        let tool_calls = match value.get("tool_calls") {
            Some(Value::Array(calls)) => calls
                .iter()
                .map(ToolCall::from_wire)
                .collect::<Result<_, _>>()?,
            _ => Vec::new(),
        };
        let text = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_string);
        Ok(Self {
            role,
            content,
            tool_calls,
            tool_call_id: text("tool_call_id"),
            name: text("name"),
        })
    }
}

/// The error code of a tool call the job's cancel or deadline cut short:
/// the call did not fail, the job stopped — so it is never counted as a
/// tool error (`tool_errors`, the metrics' `tool_error` outcome).
pub const INTERRUPTED_CALL: &str = "interrupted";

/// What a tool call produced, as the model will see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    pub call_id: String,
    pub name: String,
    /// A JSON string (or the engine's error code text for errors).
    pub output: String,
    pub is_error: bool,
}

impl ToolResult {
    pub fn ok(call: &ToolCall, output: impl Into<String>) -> Self {
        Self {
            call_id: call.id.clone(),
            name: call.name.clone(),
            output: output.into(),
            is_error: false,
        }
    }

    pub fn error(call: &ToolCall, output: impl Into<String>) -> Self {
        Self {
            call_id: call.id.clone(),
            name: call.name.clone(),
            output: output.into(),
            is_error: true,
        }
    }
}

/// The `type` of a message envelope to a remote agent: a name such as
/// "Text", or a number for an agent whose message type is an enum read as
/// a number (the multi-agent runtime's .NET agent wanted `0`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum MessageType {
    Number(i64),
    Name(String),
}

impl Default for MessageType {
    /// What the multi-agent runtime sent.
    fn default() -> Self {
        Self::Name("Text".into())
    }
}

/// A tool as offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ToolSchema {
    pub name: String,
    pub description: String,
    /// A JSON Schema object describing the arguments.
    pub parameters: Value,
}

impl ToolSchema {
    pub fn to_wire(&self) -> Value {
        json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            }
        })
    }
}

/// Token accounting reported by the model server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

impl TokenUsage {
    pub fn add(&mut self, other: &TokenUsage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.total_tokens += other.total_tokens;
    }

    pub fn from_wire(value: &Value) -> Self {
        let n = |k: &str| value.get(k).and_then(Value::as_u64).unwrap_or(0);
        let prompt = n("prompt_tokens");
        let completion = n("completion_tokens");
        let total = value
            .get("total_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(prompt + completion);
        Self {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: total,
        }
    }
}

/// Why a run stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TerminationReason {
    NoToolCalls,
    MaxTurns,
    TerminationTool,
    Cancelled,
    Timeout,
    Error,
    /// A tool call with an `unsafe` effect was interrupted and its outcome is
    /// unknown: an operator decides (the job is `needs_attention`).
    NeedsAttention,
    /// A tool call waits for a person's decision (the job is
    /// `awaiting_approval`).
    AwaitingApproval,
    /// The job used up one of its budgets.
    BudgetExceeded,
    /// A workflow job reached its `finish` stage.
    WorkflowFinished,
}

impl TerminationReason {
    /// Every reason, for metrics that label by it (a bounded set).
    pub const ALL: [TerminationReason; 10] = [
        Self::NoToolCalls,
        Self::MaxTurns,
        Self::TerminationTool,
        Self::Cancelled,
        Self::Timeout,
        Self::Error,
        Self::NeedsAttention,
        Self::AwaitingApproval,
        Self::BudgetExceeded,
        Self::WorkflowFinished,
    ];

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|reason| reason.as_str() == s)
    }

    /// Whether a run that ended so gave an answer.
    pub fn answered(self) -> bool {
        matches!(
            self,
            Self::NoToolCalls | Self::TerminationTool | Self::WorkflowFinished
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoToolCalls => "no_tool_calls",
            Self::MaxTurns => "max_turns",
            Self::TerminationTool => "termination_tool",
            Self::Cancelled => "cancelled",
            Self::Timeout => "timeout",
            Self::Error => "error",
            Self::NeedsAttention => "needs_attention",
            Self::AwaitingApproval => "awaiting_approval",
            Self::BudgetExceeded => "budget_exceeded",
            Self::WorkflowFinished => "workflow_finished",
        }
    }
}

impl std::fmt::Display for TerminationReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcome of one turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepResult {
    pub assistant: Message,
    pub tool_results: Vec<ToolResult>,
    pub usage: TokenUsage,
}

impl StepResult {
    /// The messages a finished turn adds to the conversation, in order: the
    /// reply, then each call's result as a `tool` message. The kernel grows
    /// its history by it and the journal rebuilds what a later turn sent by
    /// it, so the two cannot disagree.
    pub fn turn_messages(
        assistant: Message,
        results: &[ToolResult],
    ) -> impl Iterator<Item = Message> + '_ {
        std::iter::once(assistant).chain(results.iter().map(Message::tool))
    }
}

/// The outcome of a whole run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub final_message: Message,
    pub history: Vec<Message>,
    pub turn_count: u32,
    pub termination_reason: TerminationReason,
    pub usage: TokenUsage,
    /// The output of the termination tool, when that ended the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_output: Option<String>,
}

/// A wire message that does not have the chat-completions shape.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum WireError {
    #[error("missing field `{0}`")]
    Missing(&'static str),
    #[error("invalid field `{0}`")]
    Invalid(&'static str),
}

/// The tools each loaded bundle declares, by bundle name: the only tool
/// names that may become metric labels.
pub type DeclaredTools = std::collections::HashMap<String, std::collections::HashSet<String>>;

/// What a loaded bundle tells about itself as an agent: its description and
/// each tool's it declares (by tool name), as its model sees them. Spans
/// carry them (`gen_ai.agent.description`, `gen_ai.tool.description`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentFacts {
    pub description: String,
    pub tools: std::collections::HashMap<String, String>,
}

/// [`AgentFacts`] of every loaded bundle, by bundle name.
pub type AgentCatalog = std::collections::HashMap<String, AgentFacts>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assistant_tool_call_round_trips_with_string_arguments() {
        let msg = Message::assistant(None, vec![ToolCall::new("c1", "add", json!({"a": 1}))]);
        let wire = msg.to_wire();
        assert_eq!(
            wire,
            json!({"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "add", "arguments": "{\"a\":1}"}}]})
        );
        assert_eq!(Message::from_wire(&wire).unwrap(), msg);
    }

    #[test]
    fn absent_fields_are_omitted() {
        let wire = Message::user("hi").to_wire();
        assert_eq!(wire, json!({"role": "user", "content": "hi"}));
        let result = ToolResult {
            call_id: "c1".into(),
            name: "add".into(),
            output: "{\"sum\": 7}".into(),
            is_error: false,
        };
        assert_eq!(
            Message::tool(&result).to_wire(),
            json!({"role": "tool", "content": "{\"sum\": 7}", "tool_call_id": "c1", "name": "add"})
        );
    }

    #[test]
    fn unusual_argument_text_is_kept_verbatim() {
        let wire = json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "x", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}},
            {"id": "y", "type": "function", "function": {"name": "g", "arguments": "not json"}}
        ]});
        let msg = Message::from_wire(&wire).unwrap();
        assert_eq!(msg.tool_calls[0].arguments, json!({"a": 1}));
        assert_eq!(msg.tool_calls[0].arguments_text(), "{\"a\": 1}");
        assert_eq!(msg.tool_calls[1].arguments_text(), "not json");
        assert_eq!(
            msg.to_wire(),
            wire.as_object()
                .map(|o| {
                    let mut o = o.clone();
                    o.remove("content");
                    Value::Object(o)
                })
                .unwrap()
        );
    }

    #[test]
    fn usage_sums() {
        let mut total = TokenUsage::default();
        total.add(&TokenUsage::from_wire(
            &json!({"prompt_tokens": 3, "completion_tokens": 4}),
        ));
        total.add(&TokenUsage::from_wire(
            &json!({"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}),
        ));
        assert_eq!(
            total,
            TokenUsage {
                prompt_tokens: 4,
                completion_tokens: 5,
                total_tokens: 9
            }
        );
    }
}
