//! What the chat completion wire answers, as types: a `chat.completion`,
//! the `chat.completion.chunk`s of its stream, the model list and an error
//! in OpenAI's shape. The handlers serialize these, and the API document
//! describes them, so the two cannot differ.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

/// `"chat.completion"`.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
pub enum CompletionObject {
    #[serde(rename = "chat.completion")]
    ChatCompletion,
}

/// `"chat.completion.chunk"`.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
pub enum ChunkObject {
    #[serde(rename = "chat.completion.chunk")]
    ChatCompletionChunk,
}

/// `"list"`.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ListObject {
    List,
}

/// `"model"`.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ModelObject {
    Model,
}

/// `"assistant"`: the role of every message a completion answers.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AssistantRole {
    Assistant,
}

/// `"function"`: the one kind of tool call a completion hands over.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FunctionKind {
    Function,
}

/// Why a choice ended.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The answer is complete.
    Stop,
    /// The job waits for the client's results of `tool_calls` (calls of
    /// the caller's own tools).
    ToolCalls,
}

/// A finished job's answer: `POST /v1/chat/completions` without `stream`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ChatCompletion {
    /// `chatcmpl-<job id>`.
    pub id: String,
    pub object: CompletionObject,
    /// Unix seconds.
    pub created: u64,
    /// `bundle/<name>`.
    pub model: String,
    /// One choice: a bundle answers once.
    pub choices: Vec<CompletionChoice>,
    pub usage: Usage,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CompletionChoice {
    pub index: u32,
    pub message: AssistantMessage,
    pub finish_reason: FinishReason,
}

/// The answer: its text, or the calls of the caller's tools it waits on.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AssistantMessage {
    pub role: AssistantRole,
    /// The job's answer; `null` when it hands `tool_calls` over.
    pub content: Option<String>,
    /// Calls of the caller's own tools for the client to run; it answers
    /// with `tool` messages whose `tool_call_id` is each call's `id`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<CompletionToolCall>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CompletionToolCall {
    /// `<job id>.<call id>`: the `tool` message that answers it finds
    /// the job by it.
    pub id: String,
    #[serde(rename = "type")]
    pub kind: FunctionKind,
    pub function: CompletionFunction,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CompletionFunction {
    pub name: String,
    /// The arguments as JSON text.
    pub arguments: String,
}

/// The job's token usage.
#[derive(Debug, Clone, Copy, Default, Serialize, JsonSchema)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

/// One event's data of a streamed completion (`stream: true`).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ChatCompletionChunk {
    /// `chatcmpl-<job id>`.
    pub id: String,
    pub object: ChunkObject,
    /// Unix seconds.
    pub created: u64,
    /// `bundle/<name>`.
    pub model: String,
    /// One choice; none in the last chunk with `stream_options.include_usage`.
    pub choices: Vec<ChunkChoice>,
    /// The job's usage, in the last chunk with `stream_options.include_usage`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The job parked on a call that waits for a person's decision: the
    /// call and where to decide (`POST /v1/jobs/{id}/approvals/{call}`);
    /// the stream goes on once someone decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_required: Option<Value>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ChunkChoice {
    pub index: u32,
    pub delta: Delta,
    /// `stop` in the chunk that ends the answer, `tool_calls` in the one
    /// after the calls handed over, else `null`.
    pub finish_reason: Option<FinishReason>,
}

/// What a chunk adds to the answer.
#[derive(Debug, Clone, Default, Serialize, JsonSchema)]
pub struct Delta {
    /// In the first chunk only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<AssistantRole>,
    /// The next piece of the answer: the pieces concatenated are the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// A call of the caller's own tools the job waits on, whole, one per
    /// chunk; the stream ends with `finish_reason: "tool_calls"`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ChunkToolCall>,
}

/// A call of the caller's tools in a chunk: as the completion's
/// `tool_calls` has it, with its place among the calls.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ChunkToolCall {
    /// The call's place among the calls handed over, from 0.
    pub index: u32,
    /// `<job id>.<call id>`: the `tool` message that answers it finds
    /// the job by it.
    pub id: String,
    #[serde(rename = "type")]
    pub kind: FunctionKind,
    pub function: CompletionFunction,
}

/// `GET /v1/models`: the bundles the key may use.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ModelList {
    pub object: ListObject,
    pub data: Vec<Model>,
}

/// A loaded bundle as a model.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Model {
    /// `bundle/<name>`: the `model` of a completion or a response.
    pub id: String,
    pub object: ModelObject,
    /// Always 0.
    pub created: u64,
    /// Always `structured-agents`.
    pub owned_by: String,
}

/// An error in OpenAI's shape, as the OpenAI wires answer their own
/// refusals (the request layer and the key's scope answer in the API's
/// shape, `ErrorBody`).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct OpenAiErrorBody {
    pub error: OpenAiErrorDetail,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct OpenAiErrorDetail {
    /// What went wrong and what to do.
    pub message: String,
    #[serde(rename = "type")]
    pub kind: OpenAiErrorType,
    /// The request parameter the error is about (`messages[0]`, `model`).
    pub param: Option<String>,
    /// The API's own code (`invalid_request`, `quota_exceeded`,
    /// `job_awaiting_approval`, …), or `model_not_found`.
    pub code: Option<String>,
}

/// OpenAI's error types, on which OpenAI's SDKs choose their exception.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
pub enum OpenAiErrorType {
    #[serde(rename = "invalid_request_error")]
    InvalidRequest,
    #[serde(rename = "authentication_error")]
    Authentication,
    #[serde(rename = "permission_error")]
    Permission,
    #[serde(rename = "rate_limit_error")]
    RateLimit,
    #[serde(rename = "server_error")]
    Server,
}
