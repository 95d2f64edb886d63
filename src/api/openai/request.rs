//! Reading a chat completion request: its JSON, the bundle its `model`
//! names, the parameters a bundle cannot honour refused by name, the answer
//! format it asks for, the caller's own tools and the job's input (the last
//! user message). Responses reads its own body with the same rules.

use axum::http::StatusCode;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::{OpenAiError, OpenAiErrorType};
use crate::api::caller_tools::CallerTool;
use crate::types::{AnswerFormat, Message, Role, ToolSchema};

/// The prefix that names a bundle as a model.
pub(super) const MODEL_PREFIX: &str = "bundle/";

/// The body of `POST /v1/chat/completions`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ChatRequest {
    /// `bundle/<name>`: the bundle that answers (`GET /v1/models` lists
    /// them); another name is a 404 `model_not_found`.
    #[schemars(example = "bundle/arithmetic")]
    pub(super) model: String,
    /// The chat, with at least one user message: the last one is the job's
    /// input, the bundle's system prompt comes first. `tool` messages at
    /// the end answer the calls a completion handed over and resume its job.
    #[schemars(schema_with = "chat_messages")]
    pub(super) messages: Vec<Value>,
    /// Answer as `chat.completion.chunk` server-sent events.
    #[serde(default)]
    pub(super) stream: bool,
    #[serde(default)]
    pub(super) stream_options: Option<StreamOptions>,
    /// Clients send sampling parameters and more; the bundle decides those
    /// (those it cannot honour are refused, see [`refuse_unsupported`]).
    #[serde(flatten)]
    #[schemars(with = "ChatParameters")]
    pub(super) rest: Map<String, Value>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
pub(super) struct StreamOptions {
    /// A last chunk, without choices, carries the job's token usage
    /// (LangChain and LiteLLM read it there).
    #[serde(default)]
    pub(super) include_usage: bool,
}

/// `messages` in the API document: chat messages, one of them the user's
/// (a chat without one is refused: the job's input is the last).
fn chat_messages(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let message = generator.subschema_for::<ChatMessage>();
    schemars::json_schema!({
        "type": "array",
        "items": message,
        "contains": {
            "type": "object",
            "properties": {"role": {"const": "user"}},
            "required": ["role"]
        }
    })
}

/// A chat message as `messages` takes it (`Message::from_wire` reads it).
// Only its schema is used: the handler reads each message as JSON.
#[derive(JsonSchema)]
#[allow(dead_code)]
struct ChatMessage {
    role: Role,
    /// Text, or content parts whose `text`s are joined.
    content: Option<ChatContent>,
    /// An assistant message's calls.
    tool_calls: Option<Vec<ChatToolCall>>,
    /// A `tool` message: the `id` of the call it answers.
    tool_call_id: Option<String>,
    name: Option<String>,
}

/// An assistant message's call, as `tool_calls` takes it
/// (`ToolCall::from_wire` reads it).
// Only its schema is used.
#[derive(JsonSchema)]
#[allow(dead_code)]
struct ChatToolCall {
    id: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    function: ChatFunction,
}

// Only its schema is used.
#[derive(JsonSchema)]
#[allow(dead_code)]
struct ChatFunction {
    name: String,
    /// JSON text (or, as some servers send them, a JSON value).
    arguments: Option<Value>,
}

// Only its schema is used: `Message::from_wire` reads the content.
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum ChatContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// A content part; its `text`, if any, is taken.
// Only its schema is used.
#[derive(JsonSchema)]
#[allow(dead_code)]
struct ContentPart {
    #[serde(rename = "type")]
    kind: Option<String>,
    text: Option<String>,
}

/// The parameters of a chat completion request that the handler reads by
/// name beside its fields; others (sampling parameters and the like) are
/// taken and left to the bundle.
// Only its schema is used: the handler reads these from the rest of the body.
#[derive(JsonSchema)]
#[allow(dead_code)]
struct ChatParameters {
    /// A bundle answers once: any value but 1 is a 400 naming `n`.
    #[schemars(range(min = 1, max = 1))]
    n: Option<u32>,
    /// The caller's own function tools, which the client runs: taken only
    /// by a bundle that declares `caller_tools` (at most its `max`, none
    /// named as one of the bundle's tools), else a 400 naming `tools`. A
    /// call of one ends the completion with `finish_reason: tool_calls`;
    /// `tool` messages with the calls' ids resume the job (without
    /// `stream`).
    tools: Option<Vec<CallerTool>>,
    tool_choice: Option<ToolChoice>,
    /// `json_schema` (with `json_schema.schema`) or `json_object`: the
    /// job's answer is held to it (asked of the model, checked at the end;
    /// docs/api.md, Answer formats); another type, a missing or invalid
    /// schema is a 400 naming `response_format`.
    response_format: Option<ResponseFormat>,
}

/// Which tools the model may call: the bundle's model chooses among its
/// tools and the caller's, so only `auto` and `none` are taken; another
/// choice is a 400 naming `tool_choice`.
#[derive(Debug, Clone, Copy, serde::Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    Auto,
    // Read from requests (described here); no answer says it.
    #[allow(dead_code)]
    None,
}

/// Chat completions' answer format (the Responses API's flat shape is
/// taken too).
// Only its schema is used: `AnswerFormat::from_wire` reads it.
#[derive(JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
#[allow(dead_code)]
enum ResponseFormat {
    Text,
    JsonObject,
    JsonSchema { json_schema: NamedSchema },
}

// Only its schema is used.
#[derive(JsonSchema)]
#[allow(dead_code)]
struct NamedSchema {
    /// The schema's name (`answer` when left out).
    name: Option<String>,
    #[schemars(schema_with = "crate::types::answer::schema_value")]
    schema: Value,
    strict: Option<bool>,
}

/// A chat completion request as read from its body, before the bundle is
/// looked up.
pub(in crate::api) struct Parsed {
    pub(super) request: ChatRequest,
    /// The model's name without `bundle/`.
    pub bundle: String,
    /// The last user message's text: the job's input.
    pub input: String,
    /// The `response_format` the answer is held to.
    pub answer_format: Option<AnswerFormat>,
    /// The caller's own `tools` (not yet checked against the bundle).
    pub caller_tools: Vec<ToolSchema>,
}

/// Reads a request body: JSON of the right shape, a `bundle/<name>` model,
/// chat messages with a user message among them.
pub(in crate::api) fn parse(body: &[u8]) -> Result<Parsed, OpenAiError> {
    checked(serde_json::from_slice(body))
}

/// A request as read ([`parse`]): refused, or what its job needs.
pub(super) fn checked(read: Result<ChatRequest, serde_json::Error>) -> Result<Parsed, OpenAiError> {
    let request = read.map_err(|e| {
        let param = if e.to_string().contains("messages") {
            "messages"
        } else {
            "body"
        };
        OpenAiError::invalid(param, format!("invalid chat completion request: {e}"))
    })?;
    let bundle = bundle_of(&request.model)?;
    refuse_unsupported(&request.rest)?;
    let format = request.rest.get("response_format").unwrap_or(&Value::Null);
    let answer_format = answer_format("response_format", format)?;
    let caller_tools = crate::api::caller_tools::read(&request.rest)?;
    let input = last_user_text(&request.messages)?;
    Ok(Parsed {
        request,
        bundle,
        input,
        answer_format,
        caller_tools,
    })
}

/// The bundle a `model` names (`bundle/<name>`), or OpenAI's 404 for a
/// model that does not exist.
pub(in crate::api) fn bundle_of(model: &str) -> Result<String, OpenAiError> {
    model
        .strip_prefix(MODEL_PREFIX)
        .map(str::to_string)
        .ok_or_else(|| OpenAiError {
            status: StatusCode::NOT_FOUND,
            message: format!(
                "the model {model:?} does not exist: models here are bundles, named `bundle/<name>` (GET /v1/models lists them)"
            ),
            kind: OpenAiErrorType::InvalidRequest,
            param: Some("model".into()),
            code: Some("model_not_found".into()),
            retry_after: None,
        })
}

/// Refuses the parameters (of a chat completion or a response, `rest`)
/// that would change what the client is promised and that a bundle does
/// not honour: silently dropped, they break the client later and worse (a
/// forced tool call never comes, a structured `output_type` fails to
/// parse). A bundle answers once, and its model chooses its tool calls;
/// the caller's own `tools` are taken by [`super::caller_tools`].
pub(in crate::api) fn refuse_unsupported(rest: &Map<String, Value>) -> Result<(), OpenAiError> {
    if let Some(n) = rest
        .get("n")
        .filter(|n| !n.is_null() && n.as_u64() != Some(1))
    {
        return Err(OpenAiError::invalid(
            "n",
            format!(
                "n = {n} is not supported: a bundle answers once per request; leave n out or send 1"
            ),
        ));
    }
    // Caller tools are read and taken (or refused) by `caller_tools`.
    let has_tools = rest
        .get("tools")
        .and_then(Value::as_array)
        .is_some_and(|tools| !tools.is_empty());
    match rest.get("tool_choice") {
        None | Some(Value::Null) => {}
        Some(Value::String(choice)) if choice == "auto" || choice == "none" => {}
        Some(choice) if !has_tools => {
            return Err(OpenAiError::invalid(
                "tool_choice",
                format!(
                    "tool_choice {choice} needs caller tools, and there are none (the bundle's own tools are its to choose): send \"auto\" or leave it out"
                ),
            ));
        }
        Some(choice) => {
            return Err(OpenAiError::invalid(
                "tool_choice",
                format!(
                    "tool_choice {choice} is not supported: the bundle's model chooses among its tools and the caller's; send \"auto\" or leave it out"
                ),
            ));
        }
    }
    Ok(())
}

/// The answer format a request asks for in `format`, the structured-output
/// parameter named `param` (`response_format`, or `text.format` on
/// responses): held to by the job (asked of the model, checked at the
/// end), or refused naming the parameter when it cannot be.
pub(in crate::api) fn answer_format(
    param: &str,
    format: &Value,
) -> Result<Option<AnswerFormat>, OpenAiError> {
    AnswerFormat::from_wire(format).map_err(|e| OpenAiError::invalid(param, format!("{param} {e}")))
}

/// The text of the last user message (the job's `input`), checking that
/// every message is a chat message.
pub(super) fn last_user_text(messages: &[Value]) -> Result<String, OpenAiError> {
    let mut last = None;
    for (i, value) in messages.iter().enumerate() {
        let message = Message::from_wire(value)
            .map_err(|e| OpenAiError::invalid(&format!("messages[{i}]"), e.to_string()))?;
        if message.role == Role::User {
            last = Some(message.content.unwrap_or_default());
        }
    }
    last.ok_or_else(|| OpenAiError::invalid("messages", "no user message: send at least one"))
}
