//! Writing a chat completion's answer: the finished job as one
//! `chat.completion` (its answer, usage and the caller's calls it handed
//! over), or its feed as `chat.completion.chunk` SSE word by word, ending in
//! `[DONE]`.

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
pub(super) fn completion(job: &Job) -> Result<Value, OpenAiError> {
    if let Some(calls) = crate::api::caller_tools::awaited(job) {
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
pub(super) fn stream(
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
                        if let Some(frame) =
                            crate::api::feed::approval_required(job.id.as_str(), &json)
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
