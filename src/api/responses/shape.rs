//! What the Responses wire answers, as types: the `response` object, the
//! deletion object, the input item list, and (described for the API
//! document only) the output items and the stream's events, which the
//! stream builds as JSON as it goes. The handlers serialize the types, and
//! the API document describes them, so the two cannot differ.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::super::openai::{ListObject, ToolChoice};
use crate::types::AnswerFormat;

/// `"response"`.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResponseKind {
    Response,
}

/// Where the response's job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResponseStatus {
    Queued,
    /// Running, or parked for a person's decision.
    InProgress,
    /// Answered, or ended with calls of the caller's tools for the client
    /// to run (`function_call` items).
    Completed,
    Cancelled,
    Failed,
}

/// A response: its job as the Responses API tells it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ResponseObject {
    /// `resp_<job id>`; `resp_<job id>.<n>` is the response of a request
    /// that resumed the job (what followed its stored event `n`).
    pub id: String,
    pub object: ResponseKind,
    /// Unix seconds: when the job was created.
    pub created_at: u64,
    pub status: ResponseStatus,
    /// `bundle/<name>`.
    pub model: String,
    pub previous_response_id: Option<String>,
    /// The job's own tool calls (`mcp_call`), calls waiting for a decision
    /// (`mcp_approval_request`), calls of the caller's tools
    /// (`function_call`) and the answer (`message`).
    #[schemars(with = "Vec<OutputItem>")]
    pub output: Vec<Value>,
    /// The texts of the output's messages, joined.
    pub output_text: String,
    /// Why the job failed (status `failed`).
    pub error: Option<ResponseError>,
    /// Always `null`.
    pub incomplete_details: (),
    /// Always `null`: the instructions are the job's system message.
    pub instructions: (),
    pub metadata: ResponseMetadata,
    /// Always `true`.
    pub parallel_tool_calls: bool,
    /// Always `null`: the bundle decides.
    pub temperature: (),
    /// Always `null`: the bundle decides.
    pub top_p: (),
    /// Always `auto`.
    pub tool_choice: ToolChoice,
    /// Always empty.
    pub tools: [Value; 0],
    pub text: TextConfig,
    /// Always `null`.
    pub background: (),
    pub usage: ResponseUsage,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ResponseError {
    pub code: ResponseErrorCode,
    /// Why the job ended without an answer.
    pub message: String,
}

/// `"server_error"`.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResponseErrorCode {
    ServerError,
}

/// The response's job and conversation.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ResponseMetadata {
    pub job_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TextConfig {
    pub format: TextFormat,
}

/// An answer format in the Responses API's (flat) shape: `text` (none), or
/// the one the job's answer is held to.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum TextFormat {
    Plain(PlainText),
    Held(AnswerFormat),
}

/// `{"type": "text"}`.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PlainText {
    Text,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ResponseUsage {
    pub input_tokens: u64,
    pub input_tokens_details: CachedTokens,
    pub output_tokens: u64,
    pub output_tokens_details: ReasoningTokens,
    pub total_tokens: u64,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CachedTokens {
    /// Always 0.
    pub cached_tokens: u64,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ReasoningTokens {
    /// Always 0.
    pub reasoning_tokens: u64,
}

/// `DELETE /v1/responses/{id}`: OpenAI's deletion object.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ResponseDeleted {
    pub id: String,
    pub object: DeletedKind,
    /// Always `true`.
    pub deleted: bool,
}

/// `"response.deleted"`.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
pub enum DeletedKind {
    #[serde(rename = "response.deleted")]
    ResponseDeleted,
}

/// `GET /v1/responses/{id}/input_items`: a page of the items the response
/// was made from.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct InputItemList {
    pub object: ListObject,
    pub data: Vec<InputItem>,
    /// The page's first item's id.
    pub first_id: Option<String>,
    /// The page's last item's id.
    pub last_id: Option<String>,
    /// Whether more items follow the page.
    pub has_more: bool,
}

/// An input message of the response's job.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct InputItem {
    /// `msg_<job id>_in<n>`.
    pub id: String,
    #[serde(rename = "type")]
    pub kind: MessageKind,
    /// `system` (the request's `instructions` or a developer message),
    /// `user` or `assistant`.
    pub role: String,
    /// Always `completed`.
    pub status: String,
    /// One text part: `output_text` for the assistant, else `input_text`.
    pub content: Vec<InputText>,
}

/// `"message"`.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MessageKind {
    Message,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct InputText {
    #[serde(rename = "type")]
    pub kind: TextKind,
    pub text: String,
}

#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TextKind {
    InputText,
    OutputText,
}

/// An output item (`items.rs` and the stream build them as JSON).
// Only its schema is used.
#[derive(JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
#[allow(dead_code)]
enum OutputItem {
    /// The answer.
    Message {
        /// `msg_<job id>`.
        id: String,
        /// `assistant`.
        role: String,
        status: ItemStatus,
        /// One `output_text` part: `{type, text, annotations, logprobs}`.
        content: Vec<Value>,
    },
    /// A call of one of the job's own tools, which the daemon ran.
    McpCall {
        /// `mcp_<call id>`.
        id: String,
        call_id: String,
        /// The bundle whose tool it is.
        server_label: String,
        name: String,
        /// The arguments as JSON text.
        arguments: String,
        /// The tool's output (a preview), once it worked.
        output: Option<String>,
        /// `{type: mcp_tool_execution_error, content, error_type}`, once
        /// it failed.
        error: Option<Value>,
        status: ItemStatus,
        /// The `mcp_approval_request` the call waited on.
        approval_request_id: Option<String>,
    },
    /// A call that waits for a person's decision (`decide` says where).
    McpApprovalRequest {
        /// `mcpr_<call id>`.
        id: String,
        server_label: String,
        name: Value,
        arguments: String,
        call_id: String,
        digest: Value,
        /// `POST /v1/jobs/{id}/approvals/{call}`.
        decide: Value,
    },
    /// A call of one of the caller's tools, for the client to run and
    /// answer with a `function_call_output` item.
    FunctionCall {
        /// `fc_<call id>`.
        id: String,
        call_id: String,
        name: String,
        /// The arguments as JSON text (`""` in the stream's
        /// `response.output_item.added`).
        arguments: String,
        /// `in_progress` when the stream opens it, else `completed`.
        status: ItemStatus,
    },
}

// Only its schema is used.
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum ItemStatus {
    InProgress,
    Completed,
    Failed,
    Incomplete,
}

/// One event's data of a response's stream: its `type` (also the SSE
/// `event:`), its `sequence_number` (send it back as `starting_after` to
/// resume after it), and the fields of its type.
// Only its schema is used: the stream builds each event as JSON.
#[derive(JsonSchema)]
#[allow(dead_code)]
pub(super) struct ResponseStreamEvent {
    #[serde(rename = "type")]
    kind: StreamEventType,
    /// Grows along the stream, not one by one; a pure function of where
    /// the event stands in the job's log, so a resumed stream (also after
    /// a restart) numbers the same. Every event but `error` has one.
    sequence_number: Option<u64>,
    /// The response (`response.created`, `.in_progress`, and the last
    /// event).
    response: Option<ResponseObject>,
    /// The item opened or done (`response.output_item.*`).
    #[schemars(with = "Option<OutputItem>")]
    item: Option<Value>,
    output_index: Option<u64>,
    item_id: Option<String>,
    content_index: Option<u64>,
    /// The next piece of the answer (`response.output_text.delta`) or of a
    /// call's arguments.
    delta: Option<String>,
    /// The whole answer (`response.output_text.done`).
    text: Option<String>,
    /// A call's arguments (`response.mcp_call_arguments.done`,
    /// `response.function_call_arguments.done`).
    arguments: Option<String>,
    /// The tool of a call handed over
    /// (`response.function_call_arguments.done`).
    name: Option<String>,
    /// The content part (`response.content_part.*`).
    part: Option<Value>,
    /// An `error` event's reason: the job's feed was lost; retrieve the
    /// response again with `starting_after`.
    message: Option<String>,
    /// An `error` event's code (`server_error`).
    code: Option<String>,
}

// Only its schema is used.
#[derive(JsonSchema)]
#[allow(dead_code)]
enum StreamEventType {
    #[serde(rename = "response.created")]
    Created,
    #[serde(rename = "response.in_progress")]
    InProgress,
    #[serde(rename = "response.output_item.added")]
    ItemAdded,
    #[serde(rename = "response.output_item.done")]
    ItemDone,
    #[serde(rename = "response.mcp_call.in_progress")]
    CallInProgress,
    #[serde(rename = "response.mcp_call_arguments.delta")]
    CallArgumentsDelta,
    #[serde(rename = "response.mcp_call_arguments.done")]
    CallArgumentsDone,
    #[serde(rename = "response.mcp_call.completed")]
    CallCompleted,
    #[serde(rename = "response.mcp_call.failed")]
    CallFailed,
    /// A call of the caller's tools handed over (the job waits on it).
    #[serde(rename = "response.function_call_arguments.delta")]
    FunctionArgumentsDelta,
    #[serde(rename = "response.function_call_arguments.done")]
    FunctionArgumentsDone,
    #[serde(rename = "response.content_part.added")]
    PartAdded,
    #[serde(rename = "response.output_text.delta")]
    TextDelta,
    #[serde(rename = "response.output_text.done")]
    TextDone,
    #[serde(rename = "response.content_part.done")]
    PartDone,
    #[serde(rename = "response.completed")]
    Completed,
    #[serde(rename = "response.cancelled")]
    Cancelled,
    #[serde(rename = "response.failed")]
    Failed,
    #[serde(rename = "error")]
    Error,
}
