//! OpenAI's Responses API (and the Open Responses spec of it) over the job
//! machinery: `POST /v1/responses` with `model: "bundle/<name>"` runs that
//! bundle as a job — answered as a `response` object, as an SSE stream of
//! Responses events with `stream: true`, or at once (`queued`) with
//! `background: true`; `GET /v1/responses/{id}` retrieves it, and with
//! `?stream=true&starting_after=N` resumes its stream after event `N`, also
//! across a daemon restart (see [`stream`] for how events are numbered,
//! [`events`] for where a stream ends);
//! `POST /v1/responses/{id}/cancel` cancels the job, `DELETE
//! /v1/responses/{id}` deletes an ended one;
//! `GET /v1/responses/{id}/input_items` lists what it was made from.
//!
//! A response is a job (`resp_<job id>`); it enters through admission like
//! every job, and `previous_response_id` continues the earlier response's
//! conversation. Errors use OpenAI's shape (see [`super::openai`]).

mod doc;
mod events;
pub mod input_items;
mod items;
mod object;
mod request;
mod shape;
mod stream;

pub(super) use doc::{cancel_doc, create_doc, delete_doc, retrieve_doc};

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::AppState;
use super::admission::{Submission, admit, known_bundle};
use super::auth::Caller;
use super::body::{Path, Query, WireBody};
use super::caller_tools;
use super::error::{ApiError, ErrorCode};
use super::feed::{Feed, job_feed, listen_first};
use super::openai::{OpenAiError, answer_format, bundle_of, refuse_unsupported};
use super::trace_context::CallerTrace;
use crate::access::policy::Action;
use crate::queue::{CallerOutput, Controls, Job, JobId, NewJob};
use events::event_stream;
use object::{PREVIOUS_RESPONSE, ResponseObject, job_of, response};
use request::{CreateRequest, Input, ResponsePath};
use shape::{DeletedKind, ResponseDeleted};
use stream::Translator;

/// Stored events read to build one response object.
const MAX_EVENTS: usize = 50_000;
/// Events per read of the store.
const PAGE: usize = 256;

/// `POST /v1/responses`.
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    trace: CallerTrace,
    body: WireBody<CreateRequest>,
) -> Response {
    match start(&state, &caller, &trace, body.read()).await {
        Err(e) => e.into_response(),
        Ok(Started::Stream(job, feed, view)) => {
            event_stream(&state, job, feed, None, view).into_response()
        }
        Ok(Started::Background(job, view)) => Json(view.name(response(&job, &[]))).into_response(),
        Ok(Started::Wait(job, view)) => match super::jobs::wait_finished(&state, &job.id).await {
            Ok(job) => answer(snapshot(&state, &job, &view).await),
            Err(e) => OpenAiError::from(e).into_response(),
        },
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct RetrieveQuery {
    /// Answer with the response's Responses events instead (from its
    /// start, or after `starting_after`), also across a daemon restart.
    #[serde(default)]
    stream: bool,
    /// With `stream`: the `sequence_number` of the last event the client
    /// has; the stream resumes after it.
    starting_after: Option<u64>,
}

/// `GET /v1/responses/{id}`, and with `?stream=true` its event stream
/// (from after `starting_after`).
pub async fn retrieve(
    State(state): State<AppState>,
    caller: Caller,
    Path(ResponsePath { id }): Path<ResponsePath>,
    Query(query): Query<RetrieveQuery>,
) -> Response {
    let job = match visible(&state, &caller, &id).await {
        Ok(job) => job,
        Err(e) => return e.into_response(),
    };
    let view = View::of(&id);
    if !query.stream {
        return answer(snapshot(&state, &job, &view).await);
    }
    let permit = match state.streams.acquire(caller.name()) {
        Ok(permit) => permit,
        Err(e) => return OpenAiError::from(ApiError::from(e)).into_response(),
    };
    let feed = job_feed(state.clone(), job.id.clone(), view.after, false, permit);
    event_stream(&state, job, Box::pin(feed), query.starting_after, view).into_response()
}

/// `POST /v1/responses/{id}/cancel`: cancels the job (as `POST
/// /v1/jobs/{id}/cancel`); a running one stops at its next step, then the
/// response is `cancelled`.
pub async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    Path(ResponsePath { id }): Path<ResponsePath>,
) -> Response {
    let job = match visible(&state, &caller, &id).await {
        Ok(job) => job,
        Err(e) => return e.into_response(),
    };
    let path = Path(job.id.to_string());
    match super::job_actions::cancel(State(state.clone()), caller, path).await {
        Ok(Json(job)) => answer(snapshot(&state, &job, &View::of(&id)).await),
        Err(e) => OpenAiError::from(e).into_response(),
    }
}

/// `DELETE /v1/responses/{id}`: deletes an ended response's job (as
/// `DELETE /v1/jobs/{id}`), answered as OpenAI's deletion object.
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(ResponsePath { id }): Path<ResponsePath>,
) -> Response {
    let deleted = match job_of(&id) {
        Some(job) => super::job_actions::delete_ended(&state, &caller, &job).await,
        None => Err(not_a_response(&id)),
    };
    match deleted {
        Ok(_) => Json(ResponseDeleted {
            id,
            object: DeletedKind::ResponseDeleted,
            deleted: true,
        })
        .into_response(),
        Err(e) => OpenAiError::from(e).into_response(),
    }
}

fn answer(built: Result<ResponseObject, ApiError>) -> Response {
    match built {
        Ok(body) => Json(body).into_response(),
        Err(e) => OpenAiError::from(e).into_response(),
    }
}

fn not_a_response(id: &str) -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        format!("no response {id:?}: response ids are `resp_<job id>`"),
    )
}

/// The job response `id` names, if the caller may read it.
async fn visible(state: &AppState, caller: &Caller, id: &str) -> Result<Job, OpenAiError> {
    let job_id = job_of(id).ok_or_else(|| OpenAiError::from(not_a_response(id)))?;
    let job = state.queue.get(&job_id).await.map_err(ApiError::from)?;
    Ok(caller.job(Action::ReadJob, &job_id, job)?)
}

/// A created response: streamed, queued in the background, or waited for,
/// each as a view of its job (a resumed job's response shows only what
/// followed the client's outputs).
enum Started {
    Stream(Job, Feed, View),
    Background(Job, View),
    Wait(Job, View),
}

/// Which part of its job's log a response shows: all of it (`resp_<job>`),
/// or what followed stored event `after` — the response of a request
/// whose `function_call_output` items resumed the job
/// (`resp_<job>.<after>`), so the calls handed over before are not handed
/// over again.
#[derive(Debug, Clone, Default, PartialEq)]
struct View {
    after: u64,
    /// The `previous_response_id` the request that made it named.
    previous: Option<String>,
}

impl View {
    /// The view a response id names.
    fn of(id: &str) -> Self {
        Self {
            after: object::view_of(id).map_or(0, |(_, after)| after),
            previous: None,
        }
    }

    /// `body` (a response of the whole job) as this view's response.
    fn name(&self, mut body: ResponseObject) -> ResponseObject {
        if self.after > 0 {
            body.id = format!("{}.{}", body.id, self.after);
        }
        if let Some(previous) = &self.previous {
            body.previous_response_id = Some(previous.clone());
        }
        body
    }
}

/// Reads the request and admits its job; a stream listens before the job
/// can start.
async fn start(
    state: &AppState,
    caller: &Caller,
    trace: &CallerTrace,
    read: Result<CreateRequest, serde_json::Error>,
) -> Result<Started, OpenAiError> {
    let request =
        read.map_err(|e| OpenAiError::invalid("body", format!("invalid response request: {e}")))?;
    let bundle = bundle_of(&request.model)?;
    let format = request
        .rest
        .get("text")
        .map_or(&Value::Null, |text| &text["format"]);
    refuse_unsupported(&request.rest)?;
    let answer_format = answer_format("text.format", format)?;
    let caller_tools = caller_tools::read(&request.rest)?;
    caller.on_bundle(Action::SubmitJob, &bundle, "model")?;
    known_bundle(state, &bundle, "model")?;
    let caller_tools = caller_tools::admit(state, &bundle, caller_tools)?;
    if let Some(outputs) = function_outputs(&request)? {
        return resume(state, caller, &request, &bundle, outputs).await;
    }
    let id = JobId::new();
    let conversation_id = match &request.previous_response_id {
        Some(previous) => Some(conversation_of(state, caller, previous).await?),
        None => Some(object::response_id(id.as_str())),
    };
    let (input, messages) = input_of(&request)?;
    let feed = match request.stream {
        true => Some(listen_first(state, caller, &id)?),
        false => None,
    };
    // Kept with the job, so every view of the response echoes it.
    let variables = request
        .previous_response_id
        .iter()
        .map(|previous| (PREVIOUS_RESPONSE.to_string(), json!(previous)))
        .collect();
    let new_job = NewJob {
        id: Some(id),
        bundle,
        input,
        messages,
        variables,
        conversation_id,
        trace: trace.or_metadata(request.metadata.as_ref()),
        controls: Controls {
            answer_format,
            caller_tools,
            ..Controls::default()
        },
        ..Default::default()
    };
    let (job, _) = admit(state, caller, Submission::new(new_job, "model")).await?;
    Ok(match (feed, request.background) {
        (Some(feed), _) => Started::Stream(job, feed, View::default()),
        (None, true) => Started::Background(job, View::default()),
        (None, false) => Started::Wait(job, View::default()),
    })
}

/// The `function_call_output` items of the request's input, if it has
/// any: the client's outputs of the calls an earlier response handed over.
/// Beside them only those calls' own `function_call` items are taken (a
/// client may send them back).
fn function_outputs(request: &CreateRequest) -> Result<Option<Vec<CallerOutput>>, OpenAiError> {
    let Input::Items(items) = &request.input else {
        return Ok(None);
    };
    if !items
        .iter()
        .any(|item| item["type"] == "function_call_output")
    {
        return Ok(None);
    }
    let mut outputs = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let param = format!("input[{i}]");
        match item["type"].as_str() {
            Some("function_call") => continue,
            Some("function_call_output") => {}
            _ => {
                return Err(OpenAiError::invalid(
                    &param,
                    format!(
                        "an input with function_call_output items resumes the job that handed the calls over; it takes no {} item: send the outputs alone, and the next message in a request of its own",
                        item["type"]
                    ),
                ));
            }
        }
        let call_id = item["call_id"].as_str().ok_or_else(|| {
            OpenAiError::invalid(&param, "a function_call_output needs its call's `call_id`")
        })?;
        let output = caller_tools::output_text(&item["output"]).ok_or_else(|| {
            OpenAiError::invalid(&param, "`output` must be a string or a list of text parts")
        })?;
        outputs.push(CallerOutput {
            call_id: call_id.to_string(),
            output,
        });
    }
    Ok(Some(outputs))
}

/// Resumes the job whose response `previous_response_id` handed calls
/// over, with the client's `outputs` of them: journaled as the calls'
/// results in the one write that queues the job again (a second request
/// with the same outputs finds it no longer waiting), then answered as a
/// view of the job from there; a stream listens on the job before the
/// outputs are handed back.
// Its refusals are shaped as chat completions' `resume` (api/openai), kept
// so: each wire names its own parameters and says its own words; what
// both do is `caller_tools`' (`check_outputs`, `hand_back`).
async fn resume(
    state: &AppState,
    caller: &Caller,
    request: &CreateRequest,
    bundle: &str,
    outputs: Vec<CallerOutput>,
) -> Result<Started, OpenAiError> {
    let previous = request.previous_response_id.as_deref().ok_or_else(|| {
        OpenAiError::invalid(
            "previous_response_id",
            "function_call_output items answer the calls a response handed over: send that response's id as previous_response_id",
        )
    })?;
    let job = visible(state, caller, previous).await.map_err(|_| {
        OpenAiError::invalid(
            "previous_response_id",
            format!("no response {previous:?} of this API key"),
        )
    })?;
    if job.bundle != bundle {
        return Err(OpenAiError::invalid(
            "model",
            format!(
                "response {previous:?} is of model bundle/{}: send the outputs to the same model",
                job.bundle
            ),
        ));
    }
    caller_tools::check_outputs(&job, &outputs, "input")?;
    let (feed, after) = match request.stream {
        true => {
            let (feed, after) = caller_tools::listen_from_last(state, caller, &job.id).await?;
            (Some(feed), after)
        }
        false => (None, caller_tools::last_event(state, &job.id).await?),
    };
    let job = caller_tools::hand_back(state, &job.id, outputs).await?;
    let view = View {
        after,
        previous: Some(previous.to_string()),
    };
    Ok(match (feed, request.background) {
        (Some(feed), _) => Started::Stream(job, feed, view),
        (None, true) => Started::Background(job, view),
        (None, false) => Started::Wait(job, view),
    })
}

/// The conversation a `previous_response_id` continues.
async fn conversation_of(
    state: &AppState,
    caller: &Caller,
    previous: &str,
) -> Result<String, OpenAiError> {
    let refused = |message: String| OpenAiError::invalid("previous_response_id", message);
    let job = visible(state, caller, previous)
        .await
        .map_err(|_| refused(format!("no response {previous:?} of this API key")))?;
    job.conversation_id.ok_or_else(|| {
        refused(format!(
            "response {previous:?} is not part of a conversation (it was not made by /v1/responses); leave previous_response_id out"
        ))
    })
}

/// The job's input (the last user text) and, when the request carries more
/// than one user message or instructions, the chat it starts from. A
/// continued conversation gets only its next user text: the worker reads
/// the earlier turns.
fn input_of(request: &CreateRequest) -> Result<(String, Option<Vec<Value>>), OpenAiError> {
    let items = match &request.input {
        Input::Text(text) if request.instructions.is_none() => return Ok((text.clone(), None)),
        Input::Text(text) => vec![json!({"role": "user", "content": text})],
        Input::Items(items) => items.clone(),
    };
    let mut chat: Vec<Value> = request
        .instructions
        .iter()
        .map(|text| json!({"role": "system", "content": text}))
        .collect();
    for (i, item) in items.iter().enumerate() {
        // The calls an earlier response ran come back when a client sends
        // its history (the Agents SDK's `to_input_list()`): they were the
        // daemon's, and the answer that followed them says what came of them.
        if item["type"] == "mcp_call" {
            continue;
        }
        chat.push(
            chat_message(item)
                .map_err(|e| OpenAiError::invalid(&format!("input[{i}]"), e.to_string()))?,
        );
    }
    let last_user = chat
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .map(str::to_string)
        .ok_or_else(|| OpenAiError::invalid("input", "no user message: send at least one"))?;
    let plain = chat.len() == 1 || request.previous_response_id.is_some();
    Ok((last_user, (!plain).then_some(chat)))
}

/// Why an input item cannot be a chat message (said of `input[i]`).
#[derive(Debug, thiserror::Error)]
enum InputItemError {
    #[error("input items of type {0} are not taken here; send messages (role and content)")]
    NotAMessage(Value),
    #[error("unknown role {0:?}: use user, assistant, system or developer")]
    Role(Option<String>),
    #[error("content parts of type {0:?} are not taken here; send input_text")]
    Part(Option<String>),
    #[error("`content` must be a string or a list of input_text parts")]
    Content,
}

/// An input message item as a chat message: its role and its text.
fn chat_message(item: &Value) -> Result<Value, InputItemError> {
    if item.get("type").is_some_and(|t| t != "message") {
        return Err(InputItemError::NotAMessage(item["type"].clone()));
    }
    let role = match item["role"].as_str() {
        Some("developer" | "system") => "system",
        Some(role @ ("user" | "assistant")) => role,
        other => return Err(InputItemError::Role(other.map(str::to_string))),
    };
    let text = match &item["content"] {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .map(|part| match part["type"].as_str() {
                Some("input_text" | "output_text" | "text") => {
                    Ok(part["text"].as_str().unwrap_or_default())
                }
                other => Err(InputItemError::Part(other.map(str::to_string))),
            })
            .collect::<Result<String, _>>()?,
        _ => return Err(InputItemError::Content),
    };
    Ok(json!({"role": role, "content": text}))
}

/// The response object of `job` as its stored events tell it, from the
/// view's place on. A job parked on calls of the caller's tools is a
/// `completed` response that ends with those calls as `function_call`
/// items, for the client to run.
async fn snapshot(state: &AppState, job: &Job, view: &View) -> Result<ResponseObject, ApiError> {
    let answer = super::answer::answer_stream(state, job);
    let mut translator = Translator::new(job.id.as_str(), answer, None)
        .handing_over(job.controls.caller_tools.iter().map(|t| t.name.clone()));
    let mut after = view.after;
    let mut read = 0;
    while read < MAX_EVENTS {
        let page = state.queue.events_after(&job.id, after, PAGE).await?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        read += page.len();
        for event in &page {
            translator.stored(event.seq, &event.event_json);
        }
    }
    if let Some(calls) = caller_tools::awaited(job) {
        let mut output = translator.items;
        output.extend(calls.iter().map(items::function_call));
        return Ok(view.name(response(job, &output)));
    }
    if !job.state.is_terminal() {
        return Ok(view.name(response(job, &translator.items)));
    }
    let mut built = None;
    translator.end(job, |items| built.insert(response(job, items)).clone());
    Ok(view.name(built.unwrap_or_else(|| response(job, &translator.items))))
}
