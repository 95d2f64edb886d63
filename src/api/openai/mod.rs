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

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use serde_json::Value;

mod reply;
mod request;
mod wire;

use reply::{completion, stream};
use request::{ChatRequest, MODEL_PREFIX, Parsed, checked};
pub(super) use request::{ToolChoice, answer_format, bundle_of, parse, refuse_unsupported};
use wire::{ChatCompletion, ChatCompletionChunk, Model, ModelList, ModelObject};
pub(super) use wire::{ListObject, OpenAiErrorBody, OpenAiErrorType};

use super::AppState;
use super::admission::{Submission, admit, known_bundle};
use super::auth::Caller;
use super::body::WireBody;
use super::document::{answers_in, event_stream};
use super::error::{ApiError, ErrorCode};
use super::feed::{Feed, Item, listen_first};
use super::jobs::wait_finished;
use crate::events::EventEnvelope;
use crate::events::answer::AnswerStream;
use crate::queue::{CallerOutput, Controls, Job, JobId, NewJob};

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
    kind: OpenAiErrorType,
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
            kind: OpenAiErrorType::InvalidRequest,
            param: Some(param.into()),
            // Clients may branch on `code`; it is never null.
            code: Some("invalid_request".into()),
            retry_after: None,
        }
    }

    pub(super) fn status(&self) -> StatusCode {
        self.status
    }

    /// The error as the wire answers it.
    pub(super) fn wire(&self) -> OpenAiErrorBody {
        OpenAiErrorBody {
            error: wire::OpenAiErrorDetail {
                message: self.message.clone(),
                kind: self.kind,
                param: self.param.clone(),
                code: self.code.clone(),
            },
        }
    }

    pub(super) fn body(&self) -> Value {
        serde_json::to_value(self.wire()).unwrap_or_default()
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.wire())).into_response();
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
        use OpenAiErrorType::*;
        let (status, kind) = match e.code {
            ErrorCode::UnknownBundle | ErrorCode::NotFound => {
                (StatusCode::NOT_FOUND, InvalidRequest)
            }
            ErrorCode::Unauthorized => (StatusCode::UNAUTHORIZED, Authentication),
            ErrorCode::Forbidden => (StatusCode::FORBIDDEN, Permission),
            ErrorCode::BudgetExhausted | ErrorCode::QuotaExceeded => {
                (StatusCode::TOO_MANY_REQUESTS, RateLimit)
            }
            ErrorCode::IdempotencyConflict => (StatusCode::CONFLICT, InvalidRequest),
            ErrorCode::Unavailable
            | ErrorCode::JobAwaitingApproval
            | ErrorCode::JobNeedsAttention => (StatusCode::SERVICE_UNAVAILABLE, Server),
            ErrorCode::Internal | ErrorCode::JobFailed => {
                (StatusCode::INTERNAL_SERVER_ERROR, Server)
            }
            _ => (StatusCode::BAD_REQUEST, InvalidRequest),
        };
        // The API's own code (`not_found`, `quota_exceeded`), as every
        // other route spells it.
        let code = match e.code {
            ErrorCode::UnknownBundle => "model_not_found".to_string(),
            other => other.name(),
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

/// `GET /v1/models` in the API document.
pub(super) fn models_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    op.summary("The loaded bundles the key may use, as OpenAI models (`bundle/<name>`)")
        .response_with::<200, Json<ModelList>, _>(|r| r.description("The models"))
}

/// `GET /v1/models`: every loaded bundle the key may use, as
/// `bundle/<name>`.
pub async fn models(State(state): State<AppState>, caller: Caller) -> Json<ModelList> {
    let snapshot = state.registry.snapshot();
    let data = snapshot
        .loaded()
        .filter(|b| caller.allows(Action::ReadBundle, &Resource::bundle(b.name())))
        .map(|b| Model {
            id: format!("{MODEL_PREFIX}{}", b.name()),
            object: ModelObject::Model,
            created: 0,
            owned_by: "structured-agents".into(),
        })
        .collect();
    Json(ModelList {
        object: ListObject::List,
        data,
    })
}

/// `POST /v1/chat/completions` in the API document.
pub(super) fn completions_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary(
            "OpenAI-compatible chat completion: runs the bundle named by `model` \
             (`bundle/<name>`) as a job over `messages`",
        )
        .description(
            "The job is an ordinary job (in `/v1/jobs`, retried and resumed like any other) and \
             runs to its end even when the client hangs up. Refusals of the request are in \
             OpenAI's error shape; the key's scope and the request layer answer in the API's.",
        )
        .response_with::<200, Json<ChatCompletion>, _>(|r| {
            r.description(
                "The `chat.completion`; with `stream: true` `chat.completion.chunk` \
                 server-sent events, ending in `data: [DONE]`. A job that waits on calls of \
                 the caller's tools answers them (`finish_reason: \"tool_calls\"`); the \
                 `tool` messages that answer them resume it, streamed or not",
            )
        });
    let op = event_stream::<ChatCompletionChunk>(
        op,
        "Each event's `data` is a `chat.completion.chunk` (a failed job's is an error in \
         OpenAI's shape); the last is `[DONE]`",
    );
    answers_in::<OpenAiErrorBody>(
        op,
        &[
            (
                400,
                "The request cannot be answered as sent (`param` names what): a body that is \
                 not a chat request, no user message, `n` other than 1, a `tool_choice` or \
                 `response_format` the job cannot hold to, caller tools the bundle does not \
                 take, tool messages that answer no call of this key's",
            ),
            (403, "The key may not use the model's bundle"),
            (
                404,
                "No such model (`model_not_found`): models are `bundle/<name>`",
            ),
            wire_quota(),
            (
                500,
                "The job ended without an answer (`job_failed`); the job's error says why",
            ),
            (
                503,
                "The job is parked for a person (`job_awaiting_approval`, \
                 `job_needs_attention`: the message names the job and what to do), or the \
                 queue or the event streams are full; Retry-After says when to try again",
            ),
        ],
    )
}

/// A key's quota or a bundle's daily budget used up, on either OpenAI wire.
pub(super) fn wire_quota() -> (u16, &'static str) {
    (
        429,
        "The key's rate limit, jobs in flight or daily budget, or the bundle's daily budget, \
         is used up (`rate_limit_error`); Retry-After says when to try again",
    )
}

/// `POST /v1/chat/completions`.
pub async fn completions(
    State(state): State<AppState>,
    caller: Caller,
    trace: super::trace_context::CallerTrace,
    body: WireBody<ChatRequest>,
) -> Response {
    match start(&state, &caller, body.read(), trace.or_body(None, None)).await {
        Err(e) => e.into_response(),
        Ok((job, Some(streamed))) => {
            let answer = super::answer::answer_stream(&state, &job);
            stream(state, job, streamed, answer).into_response()
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

/// Validates the request and queues its job — or resumes the job its
/// trailing `tool` messages answer; with `stream`, follows the job's feed
/// (from the start, or from where the resumed job waits).
async fn start(
    state: &AppState,
    caller: &Caller,
    read: Result<ChatRequest, serde_json::Error>,
    trace: Option<super::trace_context::TraceContext>,
) -> Result<(Job, Option<Streamed>), OpenAiError> {
    let Parsed {
        request,
        bundle,
        input,
        answer_format,
        caller_tools,
    } = checked(read)?;
    // Refused before the stream listens (admission checks again).
    caller.on_bundle(Action::SubmitJob, &bundle, "model")?;
    known_bundle(state, &bundle, "model")?;
    let caller_tools = super::caller_tools::admit(state, &bundle, caller_tools)?;
    let include_usage = request
        .stream_options
        .as_ref()
        .is_some_and(|o| o.include_usage);
    // A stream, if asked for, of what the job does from here.
    let streamed = |feed| Streamed {
        feed,
        include_usage,
    };
    if let Some((job_id, outputs)) = tool_outputs(&request.messages)? {
        let resumed = Resume {
            bundle: &bundle,
            id: &job_id,
            outputs,
            stream: request.stream,
        };
        let (job, feed) = resume(state, caller, resumed).await?;
        return Ok((job, feed.map(streamed)));
    }
    // The job's id is chosen here so the stream listens before the job can
    // start: its first model call already streams.
    let id = JobId::new();
    let feed = match request.stream {
        true => Some(streamed(listen_first(state, caller, &id)?)),
        false => None,
    };
    let new_job = NewJob {
        id: Some(id),
        bundle,
        input,
        messages: Some(request.messages),
        trace,
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

/// The client's outputs of the calls job `id` (of model `bundle`) waits
/// on, and whether it follows the resumed run as a stream.
struct Resume<'a> {
    bundle: &'a str,
    id: &'a JobId,
    outputs: Vec<CallerOutput>,
    stream: bool,
}

/// Resumes the job, parked on the caller's calls, with their outputs
/// (journaled in the one write that queues it again). With `stream`, its
/// feed from after its last event, listened on before the outputs are
/// handed back.
async fn resume(
    state: &AppState,
    caller: &Caller,
    resume: Resume<'_>,
) -> Result<(Job, Option<Feed>), OpenAiError> {
    let Resume {
        bundle,
        id,
        outputs,
        stream,
    } = resume;
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
    let feed = match stream {
        true => {
            let (feed, _) = super::caller_tools::listen_from_last(state, caller, id).await?;
            Some(feed)
        }
        false => None,
    };
    let job = super::caller_tools::hand_back(state, id, outputs).await?;
    Ok((job, feed))
}
