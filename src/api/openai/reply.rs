//! Writing a chat completion's answer: the finished job as one
//! `chat.completion` (its answer, usage and the caller's calls it handed
//! over), or its feed as `chat.completion.chunk` SSE word by word, ending in
//! `[DONE]`.

use super::wire::{AssistantMessage, AssistantRole, Delta, FinishReason, Usage};
use super::*;

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

/// The completion of a finished job — or of one parked on calls of the
/// caller's tools: those calls, for the client to run
/// (`finish_reason: "tool_calls"`).
pub(super) fn completion(job: &Job) -> Result<ChatCompletion, OpenAiError> {
    if let Some(calls) = crate::api::caller_tools::awaited(job) {
        let tool_calls = calls
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
        role: None,
        content: Some(content),
    }
}

/// `chat.completion.chunk`s as the answer streams (the job's answer
/// stream, [`crate::events::answer`]: their contents concatenated are the
/// answer), the final chunk when the job ends (with `include_usage`, then a
/// chunk without choices carrying the usage), then `[DONE]`; a failed job
/// sends `{"error": …}` then `[DONE]`. A client that goes away leaves the
/// job running.
pub(super) fn stream(
    job: Job,
    streamed: Streamed,
    answer: AnswerStream,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let Streamed {
        feed,
        include_usage,
    } = streamed;
    let opening = Delta {
        role: Some(AssistantRole::Assistant),
        content: Some(String::new()),
    };
    let first = chunk(&job, opening, None);
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
                        if let Some(frame) =
                            crate::api::feed::approval_required(job.id.as_str(), &json)
                        {
                            let mut body = chunk_body(&job, Delta::default(), None);
                            body.approval_required = Some(frame);
                            return Some((vec![event(&body)], (feed, Some(job), answer)));
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
                    let event = chunk(&job, self::text(text), None);
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
                events.push(chunk(job, text(rest), None));
            }
            events.push(chunk(job, Delta::default(), Some(FinishReason::Stop)));
            if include_usage {
                let mut body = chunk_body(job, Delta::default(), None);
                body.choices.clear();
                body.usage = Some(usage(job));
                events.push(event(&body));
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
