//! OpenAI-compatible chat completions over the job machinery:
//! `POST /v1/chat/completions` with `model: "bundle/<name>"` runs that bundle
//! as a job over the given messages (its system prompt first) and answers as
//! `chat.completion`, or as `chat.completion.chunk` SSE ending in `[DONE]`
//! with `stream: true`; `GET /v1/models` lists the bundles. Every request is
//! an ordinary job: in `jobs`, metrics and traces, retried and resumed like
//! any other, and it runs to completion even when the client hangs up.
//! Errors use OpenAI's shape `{"error": {"message", "type", "param", "code"}}`.

use crate::access::policy::{Action, Resource};
use std::convert::Infallible;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::AppState;
use super::admission::{Submission, admit, known_bundle};
use super::auth::Caller;
use super::error::{ApiError, ErrorCode};
use super::feed::{Feed, Item, listen_first};
use super::jobs::wait_finished;
use crate::events::EventEnvelope;
use crate::events::answer::AnswerStream;
use crate::queue::{CallerOutput, Controls, Job, JobId, NewJob, Resolution};
use crate::types::{AnswerFormat, Message, Role, ToolSchema};

/// The prefix that names a bundle as a model.
const MODEL_PREFIX: &str = "bundle/";

#[derive(Debug, Deserialize)]
struct ChatRequest {
    model: String,
    messages: Vec<Value>,
    #[serde(default)]
    stream: bool,
    /// `include_usage`: a last chunk carries the job's token usage (LangChain
    /// and LiteLLM read it there).
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    /// Clients send sampling parameters and more; the bundle decides those
    /// (those it cannot honour are refused, see [`refuse_unsupported`]).
    #[serde(flatten)]
    rest: Map<String, Value>,
}

#[derive(Debug, Default, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

/// How a streamed answer is sent: its job's feed, and whether a usage chunk
/// ends it.
struct Streamed {
    feed: Feed,
    include_usage: bool,
}

/// An error in OpenAI's shape.
#[derive(Debug)]
pub struct OpenAiError {
    status: StatusCode,
    message: String,
    kind: &'static str,
    param: Option<String>,
    code: Option<String>,
    /// Seconds before a retry (`Retry-After`), as the API's own error says.
    retry_after: Option<u64>,
}

impl OpenAiError {
    pub(super) fn invalid(param: &str, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: Some(param.into()),
            // Clients may branch on `code`; it is never null.
            code: Some("invalid_request".into()),
            retry_after: None,
        }
    }

    pub(super) fn status(&self) -> StatusCode {
        self.status
    }

    pub(super) fn body(&self) -> Value {
        json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}})
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body())).into_response();
        // As every 503 of the daemon (see `error.rs`): try again later.
        let retry_after = self
            .retry_after
            .or((self.status == StatusCode::SERVICE_UNAVAILABLE)
                .then_some(super::error::RETRY_AFTER_SECS));
        if let Some(seconds) = retry_after {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(seconds),
            );
        }
        response
    }
}

impl From<ApiError> for OpenAiError {
    fn from(e: ApiError) -> Self {
        // The API's status where OpenAI's SDKs act on it (429 and 503 are
        // retried, honouring Retry-After); 400 for the rest of the 4xx.
        let (status, kind) = match e.code {
            ErrorCode::UnknownBundle | ErrorCode::NotFound => {
                (StatusCode::NOT_FOUND, "invalid_request_error")
            }
            ErrorCode::Unauthorized => (StatusCode::UNAUTHORIZED, "authentication_error"),
            ErrorCode::Forbidden => (StatusCode::FORBIDDEN, "permission_error"),
            ErrorCode::BudgetExhausted | ErrorCode::QuotaExceeded => {
                (StatusCode::TOO_MANY_REQUESTS, "rate_limit_error")
            }
            ErrorCode::IdempotencyConflict => (StatusCode::CONFLICT, "invalid_request_error"),
            ErrorCode::Unavailable
            | ErrorCode::JobAwaitingApproval
            | ErrorCode::JobNeedsAttention => (StatusCode::SERVICE_UNAVAILABLE, "server_error"),
            ErrorCode::Internal | ErrorCode::JobFailed => {
                (StatusCode::INTERNAL_SERVER_ERROR, "server_error")
            }
            _ => (StatusCode::BAD_REQUEST, "invalid_request_error"),
        };
        // The API's own code (`not_found`, `quota_exceeded`), as every
        // other route spells it.
        let code = match e.code {
            ErrorCode::UnknownBundle => "model_not_found".to_string(),
            other => other.name().to_string(),
        };
        Self {
            status,
            message: e.message,
            kind,
            param: e.field,
            code: Some(code),
            retry_after: e.retry_after,
        }
    }
}

/// `GET /v1/models`: every loaded bundle the key may use, as
/// `bundle/<name>`.
pub async fn models(State(state): State<AppState>, caller: Caller) -> Json<Value> {
    let snapshot = state.registry.snapshot();
    let data: Vec<Value> = snapshot
        .loaded()
        .filter(|b| caller.allows(Action::ReadBundle, &Resource::bundle(b.name())))
        .map(|b| {
            json!({"id": format!("{MODEL_PREFIX}{}", b.name()), "object": "model", "created": 0, "owned_by": "structured-agents"})
        })
        .collect();
    Json(json!({"object": "list", "data": data}))
}

/// `POST /v1/chat/completions`.
pub async fn completions(
    State(state): State<AppState>,
    caller: Caller,
    trace: super::trace_context::CallerTrace,
    body: Bytes,
) -> Response {
    let traceparent = trace.or_body(None);
    match start(&state, &caller, &body, traceparent).await {
        Err(e) => e.into_response(),
        Ok((job, Some(streamed))) => {
            let answer = super::answer::answer_stream(&state, &job);
            stream(job, streamed, answer).into_response()
        }
        Ok((job, None)) => match wait_finished(&state, &job.id)
            .await
            .map_err(OpenAiError::from)
        {
            Ok(job) => match completion(&job) {
                Ok(body) => Json(body).into_response(),
                Err(e) => e.into_response(),
            },
            Err(e) => e.into_response(),
        },
    }
}

/// Validates the request and queues its job; with `stream`, follows the
/// job's feed from the start.
async fn start(
    state: &AppState,
    caller: &Caller,
    body: &[u8],
    traceparent: Option<String>,
) -> Result<(Job, Option<Streamed>), OpenAiError> {
    let Parsed {
        request,
        bundle,
        input,
        answer_format,
        caller_tools,
    } = parse(body)?;
    // Refused before the stream listens (admission checks again).
    caller.on_bundle(Action::SubmitJob, &bundle, "model")?;
    known_bundle(state, &bundle, "model")?;
    let caller_tools = super::caller_tools::admit(state, &bundle, caller_tools)?;
    if let Some((job_id, outputs)) = tool_outputs(&request.messages)? {
        if request.stream {
            return Err(OpenAiError::invalid(
                "stream",
                "a stream of a resumed completion is not supported yet: send the tool messages without `stream`",
            ));
        }
        let job = resume(state, caller, &bundle, &job_id, outputs).await?;
        return Ok((job, None));
    }
    if request.stream && !caller_tools.is_empty() {
        return Err(OpenAiError::invalid(
            "stream",
            "stream with caller tools is not supported yet: send the request without `stream` (or without `tools`)",
        ));
    }
    // The job's id is chosen here so the stream listens before the job can
    // start: its first model call already streams.
    let id = JobId::new();
    let feed = match request.stream {
        true => Some(Streamed {
            feed: listen_first(state, caller, &id)?,
            include_usage: request
                .stream_options
                .as_ref()
                .is_some_and(|o| o.include_usage),
        }),
        false => None,
    };
    let new_job = NewJob {
        id: Some(id),
        bundle,
        input,
        messages: Some(request.messages),
        traceparent,
        controls: Controls {
            answer_format,
            caller_tools,
            ..Controls::default()
        },
        ..Default::default()
    };
    let (job, _) = admit(state, caller, Submission::new(new_job, "model")).await?;
    Ok((job, feed))
}

/// The id a completion gives a caller's call of job `job`: the job and the
/// call, so the `tool` message that answers it finds the job.
fn wire_call_id(job: &JobId, call_id: &str) -> String {
    format!("{job}.{call_id}")
}

/// The job and the outputs of the `tool` messages that end `messages`, if
/// they do: the client's answers to the calls a completion handed over
/// (their ids name the job, see [`wire_call_id`]).
fn tool_outputs(messages: &[Value]) -> Result<Option<(JobId, Vec<CallerOutput>)>, OpenAiError> {
    let trailing = messages
        .iter()
        .enumerate()
        .rev()
        .take_while(|(_, m)| m["role"] == "tool");
    let mut job: Option<JobId> = None;
    let mut outputs = Vec::new();
    for (i, message) in trailing {
        let param = format!("messages[{i}]");
        let wire_id = message["tool_call_id"].as_str().unwrap_or_default();
        let Some((of, call_id)) = wire_id.split_once('.') else {
            return Err(OpenAiError::invalid(
                &param,
                format!(
                    "tool_call_id {wire_id:?} names no call this daemon handed over (those are `<job id>.<call id>`)"
                ),
            ));
        };
        if job.as_ref().is_some_and(|job| job.as_str() != of) {
            return Err(OpenAiError::invalid(
                &param,
                "the tool messages answer the calls of different completions: answer one at a time",
            ));
        }
        job = Some(JobId::from(of));
        let output = super::caller_tools::output_text(&message["content"]).ok_or_else(|| {
            OpenAiError::invalid(&param, "`content` must be a string or a list of text parts")
        })?;
        outputs.push(CallerOutput {
            call_id: call_id.to_string(),
            output,
        });
    }
    outputs.reverse();
    Ok(job.map(|job| (job, outputs)))
}

/// Resumes job `id`, parked on the caller's calls, with their `outputs`
/// (journaled in the one write that queues it again), and waits for it.
async fn resume(
    state: &AppState,
    caller: &Caller,
    bundle: &str,
    id: &JobId,
    outputs: Vec<CallerOutput>,
) -> Result<Job, OpenAiError> {
    let job = state.queue.get(id).await.map_err(ApiError::from)?;
    let job = caller.job(Action::ReadJob, id, job).map_err(|_| {
        OpenAiError::invalid(
            "messages",
            format!("no completion of job {id} of this API key"),
        )
    })?;
    if job.bundle != bundle {
        return Err(OpenAiError::invalid(
            "model",
            format!(
                "the tool messages answer a completion of model bundle/{}: send them to the same model",
                job.bundle
            ),
        ));
    }
    super::caller_tools::check_outputs(&job, &outputs, "messages")?;
    let resolution = Resolution::CallerOutputs { outputs };
    let changed = state
        .queue
        .resolve(id, resolution)
        .await
        .map_err(ApiError::from)?;
    Ok(super::jobs::settled(state, changed))
}

/// A chat completion request as read from its body, before the bundle is
/// looked up.
pub(super) struct Parsed {
    request: ChatRequest,
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
pub(super) fn parse(body: &[u8]) -> Result<Parsed, OpenAiError> {
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
    let caller_tools = super::caller_tools::read(&request.rest)?;
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
pub(super) fn bundle_of(model: &str) -> Result<String, OpenAiError> {
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
pub(super) fn refuse_unsupported(rest: &Map<String, Value>) -> Result<(), OpenAiError> {
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
pub(super) fn answer_format(
    param: &str,
    format: &Value,
) -> Result<Option<AnswerFormat>, OpenAiError> {
    AnswerFormat::from_wire(format).map_err(|e| OpenAiError::invalid(param, format!("{param} {e}")))
}

/// The text of the last user message (the job's `input`), checking that
/// every message is a chat message.
fn last_user_text(messages: &[Value]) -> Result<String, OpenAiError> {
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

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The answer of a finished job, or in OpenAI's shape why there is none: it
/// failed, or it is parked until an operator resolves it (a 503 naming the
/// job and what to do, never an answer).
fn answer(job: &Job) -> Result<String, OpenAiError> {
    use crate::queue::NoAnswer;
    job.answer_or_error()
        .map(str::to_string)
        .map_err(|why| OpenAiError {
            status: if why.is_parked() {
                StatusCode::SERVICE_UNAVAILABLE
            } else {
                StatusCode::INTERNAL_SERVER_ERROR
            },
            kind: "server_error",
            param: None,
            code: Some(
                match why {
                    NoAnswer::NeedsAttention { .. } => "job_needs_attention",
                    NoAnswer::AwaitingApproval { .. } => "job_awaiting_approval",
                    NoAnswer::Ended { .. } => "job_failed",
                }
                .into(),
            ),
            message: why.to_string(),
            retry_after: None,
        })
}

/// The job's token usage in OpenAI's shape.
fn usage(job: &Job) -> Value {
    let usage = job
        .result
        .as_ref()
        .map(|r| r["usage"].clone())
        .unwrap_or(Value::Null);
    json!({
        "prompt_tokens": usage["prompt_tokens"].as_u64().unwrap_or(0),
        "completion_tokens": usage["completion_tokens"].as_u64().unwrap_or(0),
        "total_tokens": usage["total_tokens"].as_u64().unwrap_or(0),
    })
}

/// The completion of a finished job — or of one parked on calls of the
/// caller's tools: those calls, for the client to run
/// (`finish_reason: "tool_calls"`).
fn completion(job: &Job) -> Result<Value, OpenAiError> {
    if let Some(calls) = super::caller_tools::awaited(job) {
        let tool_calls: Vec<Value> = calls
            .iter()
            .map(|call| {
                json!({"id": wire_call_id(&job.id, &call.call_id), "type": "function",
                       "function": {"name": call.tool, "arguments": call.arguments.to_string()}})
            })
            .collect();
        let message = json!({"role": "assistant", "content": null, "tool_calls": tool_calls});
        return Ok(completion_body(job, message, "tool_calls"));
    }
    let content = answer(job)?;
    let message = json!({"role": "assistant", "content": content});
    Ok(completion_body(job, message, "stop"))
}

/// A chat completion of `job` with one choice: `message`, ended by `finish`.
fn completion_body(job: &Job, message: Value, finish: &str) -> Value {
    json!({
        "id": format!("chatcmpl-{}", job.id),
        "object": "chat.completion",
        "created": now_secs(),
        "model": format!("{MODEL_PREFIX}{}", job.bundle),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage(job),
    })
}

fn chunk_body(job: &Job, delta: Value, finish: Option<&str>) -> Value {
    json!({
        "id": format!("chatcmpl-{}", job.id),
        "object": "chat.completion.chunk",
        "created": now_secs(),
        "model": format!("{MODEL_PREFIX}{}", job.bundle),
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    })
}

fn chunk(job: &Job, delta: Value, finish: Option<&str>) -> SseEvent {
    SseEvent::default().data(chunk_body(job, delta, finish).to_string())
}

/// `chat.completion.chunk`s as the answer streams (the job's answer
/// stream, [`crate::events::answer`]: their contents concatenated are the
/// answer), the final chunk when the job ends (with `include_usage`, then a
/// chunk without choices carrying the usage), then `[DONE]`; a failed job
/// sends `{"error": …}` then `[DONE]`. A client that goes away leaves the
/// job running.
fn stream(
    job: Job,
    streamed: Streamed,
    answer: AnswerStream,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let Streamed {
        feed,
        include_usage,
    } = streamed;
    let first = chunk(&job, json!({"role": "assistant", "content": ""}), None);
    let body = futures::stream::unfold(
        (feed, Some(job), answer),
        move |(mut feed, job, mut answer)| async move {
            let job = job?;
            loop {
                let text = match feed.next().await {
                    Some(Item::Token(token)) => {
                        answer.token(&token.run_id, token.turn, &token.text)
                    }
                    Some(Item::End(ended)) => {
                        let events = last(&ended, &mut answer, include_usage);
                        return Some((events, (feed, None, answer)));
                    }
                    // The job parks for a person: an empty chunk that says
                    // so (clients that do not know the field ignore it); the
                    // stream goes on once someone decides.
                    Some(Item::Event { json, .. }) => {
                        if let Some(frame) = super::feed::approval_required(job.id.as_str(), &json)
                        {
                            let mut body = chunk_body(&job, json!({}), None);
                            body["approval_required"] = frame;
                            let event = SseEvent::default().data(body.to_string());
                            return Some((vec![event], (feed, Some(job), answer)));
                        }
                        match serde_json::from_str::<EventEnvelope>(&json) {
                            Ok(event) => answer.event(&event),
                            Err(_) => continue,
                        }
                    }
                    // Progress is for watchers of the run, not the answer.
                    Some(Item::Progress(_)) => continue,
                    None => {
                        let lost = OpenAiError::from(ApiError::internal(format!(
                            "lost the feed of job {}",
                            job.id
                        )));
                        let events =
                            vec![SseEvent::default().data(lost.body().to_string()), done()];
                        return Some((events, (feed, None, answer)));
                    }
                };
                if !text.is_empty() {
                    let event = chunk(&job, json!({"content": text}), None);
                    return Some((vec![event], (feed, Some(job), answer)));
                }
            }
        },
    )
    .flat_map(futures::stream::iter);
    let events = futures::stream::once(async { first }).chain(body).map(Ok);
    Sse::new(events).keep_alive(KeepAlive::default())
}

/// The chunks that end a stream: what of the answer did not stream (a
/// resumed job whose model call was journaled earlier, a termination
/// tool's output), the stop chunk and the usage chunk if asked for, or the
/// failure; then `[DONE]`.
fn last(job: &Job, stream: &mut AnswerStream, include_usage: bool) -> Vec<SseEvent> {
    let mut events = Vec::new();
    match answer(job) {
        Ok(answer) => {
            let rest = stream.end(&answer);
            if !rest.is_empty() {
                events.push(chunk(job, json!({"content": rest}), None));
            }
            events.push(chunk(job, json!({}), Some("stop")));
            if include_usage {
                let mut body = chunk_body(job, json!({}), None);
                body["choices"] = json!([]);
                body["usage"] = usage(job);
                events.push(SseEvent::default().data(body.to_string()));
            }
        }
        Err(e) => events.push(SseEvent::default().data(e.body().to_string())),
    }
    events.push(done());
    events
}

fn done() -> SseEvent {
    SseEvent::default().data("[DONE]")
}
