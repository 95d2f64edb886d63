//! Reading a chat completion request: its JSON, the bundle its `model`
//! names, the parameters a bundle cannot honour refused by name, the answer
//! format it asks for, the caller's own tools and the job's input (the last
//! user message). Responses reads its own body with the same rules.

use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::OpenAiError;
use crate::types::{AnswerFormat, Message, Role, ToolSchema};

/// The prefix that names a bundle as a model.
pub(super) const MODEL_PREFIX: &str = "bundle/";

#[derive(Debug, Deserialize)]
pub(super) struct ChatRequest {
    pub(super) model: String,
    pub(super) messages: Vec<Value>,
    #[serde(default)]
    pub(super) stream: bool,
    /// `include_usage`: a last chunk carries the job's token usage (LangChain
    /// and LiteLLM read it there).
    #[serde(default)]
    pub(super) stream_options: Option<StreamOptions>,
    /// Clients send sampling parameters and more; the bundle decides those
    /// (those it cannot honour are refused, see [`refuse_unsupported`]).
    #[serde(flatten)]
    pub(super) rest: Map<String, Value>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct StreamOptions {
    #[serde(default)]
    pub(super) include_usage: bool,
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
    let request: ChatRequest = serde_json::from_slice(body).map_err(|e| {
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
            kind: "invalid_request_error",
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
