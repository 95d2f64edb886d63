//! The body of `POST /v1/responses` as the handler reads it, and the
//! parameters it reads by name beside its fields (described for the API
//! document; the handler takes them from the rest of the body).

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::super::caller_tools::CallerTool;
use super::super::openai::ToolChoice;
use super::object::TextFormat;

/// The path of a response's routes.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ResponsePath {
    /// `resp_<job id>`; `resp_<job id>.<n>` for the response of a request
    /// that resumed the job.
    pub(super) id: String,
}

/// The body of `POST /v1/responses`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct CreateRequest {
    /// `bundle/<name>`: the bundle that answers (`GET /v1/models` lists
    /// them); another name is a 404 `model_not_found`.
    #[schemars(example = "bundle/arithmetic")]
    pub(super) model: String,
    pub(super) input: Input,
    /// The system message the chat starts with.
    #[serde(default)]
    pub(super) instructions: Option<String>,
    /// Answer as Responses server-sent events (`response.created` …
    /// `response.completed`).
    #[serde(default)]
    pub(super) stream: bool,
    /// Answer at once with the `queued` response; retrieve it later.
    #[serde(default)]
    pub(super) background: bool,
    /// Continue that response's conversation (it must be this key's, made
    /// by `/v1/responses`); with `function_call_output` items, the response
    /// whose calls they answer.
    #[serde(default)]
    pub(super) previous_response_id: Option<String>,
    /// Kept by the client; a string `traceparent` in it joins the job's
    /// spans to the caller's trace (as the header does).
    #[serde(default)]
    pub(super) metadata: Option<Value>,
    /// Sampling parameters and more: the bundle decides those (those it
    /// cannot honour are refused, see `refuse_unsupported`).
    #[serde(flatten)]
    #[schemars(with = "ResponseParameters")]
    pub(super) rest: Map<String, Value>,
}

/// The request's input: a user's text, or items.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub(super) enum Input {
    Text(String),
    /// Messages (at least one from the user: the last one is the job's
    /// input), or only `function_call_output` items (with their calls'
    /// `function_call` items, if sent back) answering the calls of
    /// `previous_response_id`, which resume its job. `mcp_call` items of
    /// an earlier response are skipped.
    #[schemars(with = "Vec<RequestItem>")]
    Items(Vec<Value>),
}

/// An input item as the handler reads it.
// Only its schema is used: the handler reads each item as JSON.
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum RequestItem {
    Message(InputMessage),
    CallOutput(FunctionCallOutput),
    Other(SkippedItem),
}

/// A message (`type` `message`, or none).
// Only its schema is used.
#[derive(JsonSchema)]
#[allow(dead_code)]
struct InputMessage {
    #[serde(rename = "type")]
    kind: Option<MessageType>,
    role: InputRole,
    /// Text, or `input_text` (`output_text`, `text`) parts whose texts are
    /// joined.
    content: InputContent,
}

/// Who wrote it: `developer` and `system` are the system message.
// Only its schema is used.
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum InputRole {
    User,
    Assistant,
    System,
    Developer,
}

// Only its schema is used.
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum MessageType {
    Message,
}

// Only its schema is used.
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum InputContent {
    Text(String),
    Parts(Vec<TextPart>),
}

// Only its schema is used.
#[derive(JsonSchema)]
#[allow(dead_code)]
struct TextPart {
    #[serde(rename = "type")]
    kind: TextPartType,
    text: String,
}

// Only its schema is used.
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum TextPartType {
    InputText,
    OutputText,
    Text,
}

/// The client's output of a call a response handed over.
// Only its schema is used.
#[derive(JsonSchema)]
#[allow(dead_code)]
struct FunctionCallOutput {
    #[serde(rename = "type")]
    kind: CallOutputType,
    /// The `call_id` of the response's `function_call` item.
    call_id: String,
    /// Text, or parts whose texts are joined (at most 1 MiB).
    output: Value,
}

// Only its schema is used.
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum CallOutputType {
    FunctionCallOutput,
}

/// A `function_call` item sent back beside its output, or an `mcp_call`
/// item of an earlier response: taken and skipped.
// Only its schema is used.
#[derive(JsonSchema)]
#[allow(dead_code)]
struct SkippedItem {
    #[serde(rename = "type")]
    kind: SkippedType,
}

// Only its schema is used.
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum SkippedType {
    FunctionCall,
    McpCall,
}

/// The parameters of a response request that the handler reads by name
/// beside its fields; others (sampling parameters and the like) are taken
/// and left to the bundle.
// Only its schema is used: the handler reads these from the rest of the body.
#[derive(JsonSchema)]
#[allow(dead_code)]
struct ResponseParameters {
    /// A bundle answers once: any value but 1 is a 400 naming `n`.
    #[schemars(range(min = 1, max = 1))]
    n: Option<u32>,
    /// The caller's own function tools, which the client runs: taken only
    /// by a bundle that declares `caller_tools` (at most its `max`, none
    /// named as one of the bundle's tools), else a 400 naming `tools`. A
    /// call of one ends the response (`completed`) with a `function_call`
    /// item; `function_call_output` items with `previous_response_id`
    /// resume the job (without `stream`).
    tools: Option<Vec<CallerTool>>,
    tool_choice: Option<ToolChoice>,
    text: Option<TextParameter>,
}

// Only its schema is used.
#[derive(JsonSchema)]
#[allow(dead_code)]
struct TextParameter {
    /// `json_schema` (with `schema`) or `json_object`: the job's answer is
    /// held to it (asked of the model, checked at the end; docs/api.md,
    /// Answer formats); another type, a missing or invalid schema is a 400
    /// naming `text.format`.
    format: Option<TextFormat>,
}
