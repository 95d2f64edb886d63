//! Writing a chat completion's answer: the finished job as one
//! `chat.completion` (its answer, usage and the caller's calls it handed
//! over), or its feed as `chat.completion.chunk` SSE word by word, ending in
//! `[DONE]`.

use super::wire::{AssistantMessage, AssistantRole, Delta, FinishReason, Usage};
use super::*;
use crate::api::feed::{Step, Stepper, batches};

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
            kind: OpenAiErrorType::Server,
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
fn usage(job: &Job) -> Usage {
    let usage = job.result.as_ref().map(|r| &r["usage"]);
    let count = |field: &str| usage.and_then(|u| u[field].as_u64()).unwrap_or(0);
    Usage {
        prompt_tokens: count("prompt_tokens"),
        completion_tokens: count("completion_tokens"),
        total_tokens: count("total_tokens"),
    }
}

/// The calls of the caller's tools `job` waits on, as a completion hands
/// them over.
fn tool_calls(job: &Job) -> Option<Vec<wire::CompletionToolCall>> {
    let calls = crate::api::caller_tools::awaited(job)?;
    let calls = calls
        .iter()
        .map(|call| wire::CompletionToolCall {
            id: wire_call_id(&job.id, &call.call_id),
            kind: wire::FunctionKind::Function,
            function: wire::CompletionFunction {
                name: call.tool.clone(),
                arguments: call.arguments.to_string(),
            },
        })
        .collect();
    Some(calls)
}

/// The completion of a finished job — or of one parked on calls of the
/// caller's tools: those calls, for the client to run
/// (`finish_reason: "tool_calls"`).
pub(super) fn completion(job: &Job) -> Result<ChatCompletion, OpenAiError> {
    if let Some(tool_calls) = tool_calls(job) {
        let message = AssistantMessage {
            role: AssistantRole::Assistant,
            content: None,
            tool_calls,
        };
        return Ok(completion_body(job, message, FinishReason::ToolCalls));
    }
    let message = AssistantMessage {
        role: AssistantRole::Assistant,
        content: Some(answer(job)?),
        tool_calls: Vec::new(),
    };
    Ok(completion_body(job, message, FinishReason::Stop))
}

/// The completion's id, the same in its answer and in every chunk.
fn completion_id(job: &Job) -> String {
    format!("chatcmpl-{}", job.id)
}

/// The model a completion names: its job's bundle, as `/v1/models` lists it.
fn model_name(job: &Job) -> String {
    format!("{MODEL_PREFIX}{}", job.bundle)
}

/// A chat completion of `job` with one choice: `message`, ended by `finish`.
fn completion_body(job: &Job, message: AssistantMessage, finish: FinishReason) -> ChatCompletion {
    ChatCompletion {
        id: completion_id(job),
        object: wire::CompletionObject::ChatCompletion,
        created: now_secs(),
        model: model_name(job),
        choices: vec![wire::CompletionChoice {
            index: 0,
            message,
            finish_reason: finish,
        }],
        usage: usage(job),
    }
}

/// A chunk of `job`'s stream with one choice.
fn chunk_body(job: &Job, delta: Delta, finish: Option<FinishReason>) -> ChatCompletionChunk {
    ChatCompletionChunk {
        id: completion_id(job),
        object: wire::ChunkObject::ChatCompletionChunk,
        created: now_secs(),
        model: model_name(job),
        choices: vec![wire::ChunkChoice {
            index: 0,
            delta,
            finish_reason: finish,
        }],
        usage: None,
        approval_required: None,
    }
}

fn event(chunk: &ChatCompletionChunk) -> SseEvent {
    SseEvent::default().data(serde_json::to_string(chunk).unwrap_or_default())
}

fn chunk(job: &Job, delta: Delta, finish: Option<FinishReason>) -> SseEvent {
    event(&chunk_body(job, delta, finish))
}

/// A delta of the answer's next piece.
fn text(content: String) -> Delta {
    Delta {
        content: Some(content),
        ..Delta::default()
    }
}

/// `chat.completion.chunk`s as the answer streams (the job's answer
/// stream, [`crate::events::answer`]: their contents concatenated are the
/// answer), the final chunk when the job ends (with `include_usage`, then a
/// chunk without choices carrying the usage), then `[DONE]`; a failed job
/// sends `{"error": …}` then `[DONE]`. A job that parks on calls of the
/// caller's tools ends the stream with those calls (`delta.tool_calls`)
/// and `finish_reason: "tool_calls"`. A client that goes away leaves the
/// job running.
pub(super) fn stream(
    state: AppState,
    job: Job,
    streamed: Streamed,
    answer: AnswerStream,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let opening = Delta {
        role: Some(AssistantRole::Assistant),
        content: Some(String::new()),
        ..Delta::default()
    };
    let first = chunk(&job, opening, None);
    let chunks = Chunks {
        state,
        feed: streamed.feed,
        include_usage: streamed.include_usage,
        job,
        answer,
    };
    let body = batches(chunks);
    let events = futures::stream::once(async { first }).chain(body).map(Ok);
    Sse::new(events).keep_alive(KeepAlive::default())
}

/// A streamed completion between its chunks.
struct Chunks {
    state: AppState,
    feed: Feed,
    include_usage: bool,
    job: Job,
    answer: AnswerStream,
}

impl Stepper for Chunks {
    type Sent = SseEvent;

    async fn step(&mut self) -> Step<SseEvent> {
        loop {
            let text = match self.feed.next().await {
                Some(Item::Token(token)) => {
                    self.answer.token(&token.run_id, token.turn, &token.text)
                }
                Some(Item::End(ended)) => {
                    return Step::Last(last(&ended, &mut self.answer, self.include_usage));
                }
                // The job parks for a person: an empty chunk that says
                // so (clients that do not know the field ignore it); the
                // stream goes on once someone decides.
                Some(Item::Event { seq, json }) => {
                    if let Some(frame) =
                        crate::api::feed::approval_required(self.job.id.as_str(), &json)
                    {
                        let mut body = chunk_body(&self.job, Delta::default(), None);
                        body.approval_required = Some(frame);
                        return Step::More(vec![event(&body)]);
                    }
                    let Ok(stored) = serde_json::from_str::<EventEnvelope>(&json) else {
                        continue;
                    };
                    if crate::api::caller_tools::parks(self.job.id.as_str(), &stored) {
                        let waiting =
                            crate::api::caller_tools::waiting_since(&self.state, &self.job.id, seq);
                        match waiting.await {
                            Ok(Some(parked)) => {
                                return Step::Last(handed_over(&parked, self.include_usage));
                            }
                            Ok(None) => {}
                            Err(e) => return Step::Last(failed(OpenAiError::from(e))),
                        }
                    }
                    self.answer.event(&stored)
                }
                // Progress is for watchers of the run, not the answer.
                Some(Item::Progress(_)) => continue,
                None => {
                    let lost = ApiError::internal(format!("lost the feed of job {}", self.job.id));
                    return Step::Last(failed(OpenAiError::from(lost)));
                }
            };
            if !text.is_empty() {
                return Step::More(vec![chunk(&self.job, self::text(text), None)]);
            }
        }
    }
}

/// The chunks that end a stream: what of the answer did not stream (a
/// resumed job whose model call was journaled earlier, a termination
/// tool's output), the stop chunk and the usage chunk if asked for, or the
/// failure; then `[DONE]`.
fn last(job: &Job, stream: &mut AnswerStream, include_usage: bool) -> Vec<SseEvent> {
    match answer(job) {
        Ok(answer) => {
            let rest = stream.end(&answer);
            let mut events = Vec::new();
            if !rest.is_empty() {
                events.push(chunk(job, text(rest), None));
            }
            events.extend(finish(job, FinishReason::Stop, include_usage));
            events
        }
        Err(e) => failed(e),
    }
}

/// The chunks that end a stream whose job waits on calls of the caller's
/// tools: one per call (`delta.tool_calls`, as the completion's
/// `tool_calls`), the `tool_calls` chunk, the usage chunk if asked for,
/// `[DONE]`.
fn handed_over(job: &Job, include_usage: bool) -> Vec<SseEvent> {
    let calls = tool_calls(job).unwrap_or_default();
    let mut events: Vec<SseEvent> = calls
        .into_iter()
        .zip(0..)
        .map(|(call, index)| {
            let delta = Delta {
                tool_calls: vec![wire::ChunkToolCall {
                    index,
                    id: call.id,
                    kind: call.kind,
                    function: call.function,
                }],
                ..Delta::default()
            };
            chunk(job, delta, None)
        })
        .collect();
    events.extend(finish(job, FinishReason::ToolCalls, include_usage));
    events
}

/// The chunk that ends the choice with `reason`, the usage chunk if asked
/// for, `[DONE]`.
fn finish(job: &Job, reason: FinishReason, include_usage: bool) -> Vec<SseEvent> {
    let mut events = vec![chunk(job, Delta::default(), Some(reason))];
    if include_usage {
        let mut body = chunk_body(job, Delta::default(), None);
        body.choices.clear();
        body.usage = Some(usage(job));
        events.push(event(&body));
    }
    events.push(done());
    events
}

/// A stream's end when there is no answer: the error, `[DONE]`.
fn failed(error: OpenAiError) -> Vec<SseEvent> {
    vec![SseEvent::default().data(error.body().to_string()), done()]
}

fn done() -> SseEvent {
    SseEvent::default().data("[DONE]")
}
