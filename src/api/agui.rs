//! AG-UI 1.0 over the job machinery: `POST /v1/agui/{bundle}` takes a
//! `RunAgentInput` and answers an SSE stream of AG-UI events told from one
//! job's feed — `RUN_STARTED`, `TEXT_MESSAGE_START`/`CONTENT`/`END` (the
//! job's answer stream, as chat completions'), `TOOL_CALL_START`/`ARGS`/
//! `END`/`RESULT` for its own tool calls, then `RUN_FINISHED` (or
//! `RUN_ERROR`). A call that waits for approval ends the run with the
//! `interrupt` outcome; the next run's `resume[]` decides it (through the
//! one decision path, `approvals::take`) and continues the same job.
//!
//! A new run is a job admitted like every other; an interrupt's id names
//! the job, the digest of the arguments shown and the call
//! (`<job>/<digest>/<call>`), so a resume is bound to what was shown.

use std::convert::Infallible;

use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::AppState;
use super::admission::{Submission, admit, known_bundle};
use super::auth::Caller;
use super::body::Path;
use super::error::{ApiError, ErrorCode};
use super::feed::{Item, job_feed};
use super::trace_context::CallerTrace;
use crate::access::policy::Action;
use crate::approval::{Decision, Verdict};
use crate::events::answer::AnswerStream;
use crate::events::{Event, EventEnvelope};
use crate::queue::{Job, JobId, JobState, NewJob};

/// The parts of a `RunAgentInput` the daemon reads (tools, context and
/// state are the bundle's to decide).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunInput {
    thread_id: String,
    run_id: String,
    #[serde(default)]
    messages: Vec<Value>,
    #[serde(default)]
    resume: Vec<ResumeEntry>,
    #[serde(default)]
    forwarded_props: Option<Value>,
    #[serde(flatten)]
    _rest: Map<String, Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResumeEntry {
    interrupt_id: String,
    status: String,
    #[serde(default)]
    payload: Option<Value>,
}

/// `POST /v1/agui/{bundle}`.
pub async fn run(
    State(state): State<AppState>,
    caller: Caller,
    Path(bundle): Path<String>,
    trace: CallerTrace,
    super::body::JsonBody(input): super::body::JsonBody<RunInput>,
) -> Response {
    // Before anything is decided or queued: a refused stream costs nothing.
    let permit = match state.streams.acquire(caller.name()) {
        Ok(permit) => permit,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let started = match input.resume.is_empty() {
        true => start(&state, &caller, &bundle, &trace, &input).await,
        false => resume(&state, &caller, &input.resume).await,
    };
    match started {
        Ok((job, after)) => {
            let feed = job_feed(state.clone(), job.id.clone(), after, false, permit);
            let answer = super::answer::answer_stream(&state, &job);
            let run = Run::new(&input, &job, answer);
            events(run, feed).into_response()
        }
        Err(e) => e.into_response(),
    }
}

/// A new run: its job, admitted, followed from its start.
async fn start(
    state: &AppState,
    caller: &Caller,
    bundle: &str,
    trace: &CallerTrace,
    input: &RunInput,
) -> Result<(Job, u64), ApiError> {
    caller.on_bundle(Action::SubmitJob, bundle, "bundle")?;
    known_bundle(state, bundle, "bundle")?;
    let (text, messages) = chat_of(&input.messages)?;
    let conversation_id = super::conversations::check_id(&input.thread_id)
        .is_ok()
        .then(|| input.thread_id.clone());
    let metadata = input.forwarded_props.as_ref();
    let new_job = NewJob {
        bundle: bundle.to_string(),
        input: text,
        messages,
        conversation_id,
        trace: trace.or_metadata(metadata),
        ..Default::default()
    };
    let (job, _) = admit(state, caller, Submission::new(new_job, "bundle")).await?;
    Ok((job, 0))
}

/// The last user text, and the chat when there is more than it.
fn chat_of(messages: &[Value]) -> Result<(String, Option<Vec<Value>>), ApiError> {
    let text_of = |content: &Value| match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter(|p| p["type"] == "text")
            .filter_map(|p| p["text"].as_str())
            .collect(),
        _ => String::new(),
    };
    let chat: Vec<Value> = messages
        .iter()
        .filter_map(|m| {
            let role = match m["role"].as_str()? {
                "developer" | "system" => "system",
                role @ ("user" | "assistant") => role,
                _ => return None,
            };
            let content = text_of(&m["content"]);
            (!content.is_empty()).then(|| json!({"role": role, "content": content}))
        })
        .collect();
    let last = chat
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .map(str::to_string)
        .ok_or_else(|| {
            ApiError::field(
                ErrorCode::InvalidRequest,
                "messages",
                "no user message with text: send at least one (role `user`)",
            )
        })?;
    Ok((last.clone(), (chat.len() > 1).then_some(chat)))
}

/// A resume: each entry decides the call its interrupt names; the run
/// follows the job from before the decisions.
async fn resume(
    state: &AppState,
    caller: &Caller,
    entries: &[ResumeEntry],
) -> Result<(Job, u64), ApiError> {
    let mut resumed = None;
    for (i, entry) in entries.iter().enumerate() {
        let field = format!("resume[{i}]");
        let (job_id, digest, call) = interrupt_parts(&entry.interrupt_id).ok_or_else(|| {
            ApiError::field(
                ErrorCode::InvalidRequest,
                format!("{field}.interruptId"),
                format!(
                    "{:?} is not an interrupt of this daemon (`<job>/<digest>/<call>`); answer the ids of the last RUN_FINISHED",
                    entry.interrupt_id
                ),
            )
        })?;
        let verdict = verdict(entry).map_err(|why| {
            ApiError::field(
                ErrorCode::InvalidRequest,
                format!("{field}.{}", why.field()),
                why.to_string(),
            )
        })?;
        match &resumed {
            None => resumed = Some((job_id.clone(), state.queue.last_seq(&job_id).await?)),
            Some((first, _)) if *first != job_id => {
                return Err(ApiError::field(
                    ErrorCode::InvalidRequest,
                    format!("{field}.interruptId"),
                    format!(
                        "resume[0] answers job {first} and {field} job {job_id}: a run continues one job; resume them in separate runs"
                    ),
                ));
            }
            Some(_) => {}
        }
        let decision = Decision {
            verdict,
            digest: Some(digest.to_string()),
        };
        super::approvals::take(state, caller, &job_id, call, decision).await?;
    }
    let (id, after) = resumed.ok_or_else(|| ApiError::internal("a resume without entries"))?;
    let job = caller.job(Action::ReadJob, &id, state.queue.get(&id).await?)?;
    Ok((job, after))
}

/// An interrupt id's job, digest and call.
fn interrupt_parts(id: &str) -> Option<(JobId, &str, &str)> {
    let mut parts = id.splitn(3, '/');
    let (job, digest, call) = (parts.next()?, parts.next()?, parts.next()?);
    (!job.is_empty() && !digest.is_empty() && !call.is_empty())
        .then(|| (JobId::from(job), digest, call))
}

/// Why a resume entry decides nothing, naming the entry's field at fault.
#[derive(Debug, thiserror::Error)]
enum ResumeError {
    #[error("status {0:?}: use `resolved` or `cancelled`")]
    Status(String),
    #[error(
        "a resolved approval's payload is `{{\"approved\": true|false, \"reason\"?, \"arguments\"?}}` (or `true`/`false`)"
    )]
    Payload,
}

impl ResumeError {
    /// The resume entry's field the error is about.
    fn field(&self) -> &'static str {
        match self {
            ResumeError::Status(_) => "status",
            ResumeError::Payload => "payload",
        }
    }
}

/// What a resume entry decides: `cancelled` denies; `resolved` with
/// `true`/`{"approved": true}` approves (with `arguments`: runs those),
/// `false`/`{"approved": false, "reason"}` denies.
fn verdict(entry: &ResumeEntry) -> Result<Verdict, ResumeError> {
    if entry.status == "cancelled" {
        return Ok(Verdict::Deny {
            reason: Some("the AG-UI client cancelled the interrupt".into()),
        });
    }
    if entry.status != "resolved" {
        return Err(ResumeError::Status(entry.status.clone()));
    }
    let payload = entry.payload.clone().unwrap_or(Value::Null);
    let approved = payload.as_bool().or_else(|| payload["approved"].as_bool());
    match approved {
        Some(true) => Ok(match payload.get("arguments") {
            Some(arguments) => Verdict::Edit {
                arguments: arguments.clone(),
            },
            None => Verdict::Approve,
        }),
        Some(false) => Ok(Verdict::Deny {
            reason: payload["reason"].as_str().map(str::to_string),
        }),
        None => Err(ResumeError::Payload),
    }
}

/// One run's translation of the job's feed into AG-UI events.
struct Run {
    thread_id: String,
    run_id: String,
    job_id: String,
    answer: AnswerStream,
    /// The answer's text message, once started.
    message_open: bool,
}

impl Run {
    fn new(input: &RunInput, job: &Job, answer: AnswerStream) -> Self {
        Self {
            thread_id: input.thread_id.clone(),
            run_id: input.run_id.clone(),
            job_id: job.id.to_string(),
            answer,
            message_open: false,
        }
    }

    fn message_id(&self) -> String {
        format!("{}-answer", self.job_id)
    }

    fn started(&self) -> Value {
        json!({"type": "RUN_STARTED", "threadId": self.thread_id, "runId": self.run_id})
    }

    fn text(&mut self, piece: &str) -> Vec<Value> {
        if piece.is_empty() {
            return Vec::new();
        }
        let id = self.message_id();
        let mut out = Vec::new();
        if !self.message_open {
            self.message_open = true;
            out.push(json!({"type": "TEXT_MESSAGE_START", "messageId": id, "role": "assistant"}));
        }
        out.push(json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": piece}));
        out
    }

    fn close_text(&mut self) -> Vec<Value> {
        if !std::mem::take(&mut self.message_open) {
            return Vec::new();
        }
        vec![json!({"type": "TEXT_MESSAGE_END", "messageId": self.message_id()})]
    }

    /// Events for a stored event, and whether the run ends with them.
    fn stored(&mut self, json_text: &str) -> (Vec<Value>, bool) {
        if let Some(parked) = super::feed::approval_required(&self.job_id, json_text) {
            let mut out = self.close_text();
            out.push(self.interrupted(&parked));
            return (out, true);
        }
        let Ok(envelope) = serde_json::from_str::<EventEnvelope>(json_text) else {
            return (Vec::new(), false);
        };
        let own = envelope.run_id == self.job_id && envelope.parent.is_none();
        let mut out = Vec::new();
        match &envelope.event {
            Event::ToolCall {
                tool_name,
                call_id,
                arguments,
                ..
            } if own => {
                out.extend(self.close_text());
                out.push(json!({"type": "TOOL_CALL_START", "toolCallId": call_id, "toolCallName": tool_name}));
                out.push(json!({"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": arguments.to_string()}));
                out.push(json!({"type": "TOOL_CALL_END", "toolCallId": call_id}));
            }
            Event::ToolResult {
                call_id,
                output_preview,
                ..
            } if own => {
                out.push(
                    json!({"type": "TOOL_CALL_RESULT", "messageId": format!("{call_id}-result"),
                                "toolCallId": call_id, "content": output_preview, "role": "tool"}),
                );
            }
            _ => {}
        }
        let piece = self.answer.event(&envelope);
        out.extend(self.text(&piece));
        (out, false)
    }

    /// `RUN_FINISHED` with the interrupt outcome for a parked call.
    fn interrupted(&self, parked: &Value) -> Value {
        let call = parked["call_id"].as_str().unwrap_or_default();
        let digest = parked["digest"].as_str().unwrap_or_default();
        let tool = parked["tool"].as_str().unwrap_or_default();
        let interrupt = json!({
            "id": format!("{}/{digest}/{call}", self.job_id),
            "reason": "tool_approval",
            "message": format!("approve the call of tool `{tool}` with {}?", parked["arguments"]),
            "toolCallId": call,
            "responseSchema": {"type": "object", "required": ["approved"], "properties": {
                "approved": {"type": "boolean"}, "reason": {"type": "string"}, "arguments": {"type": "object"}}},
            "metadata": {"job_id": self.job_id, "tool": tool, "arguments": parked["arguments"], "digest": digest},
        });
        json!({"type": "RUN_FINISHED", "threadId": self.thread_id, "runId": self.run_id,
               "outcome": {"type": "interrupt", "interrupts": [interrupt]}})
    }

    /// The job ended: the rest of the answer, then how the run finished.
    fn ended(&mut self, job: &Job) -> Vec<Value> {
        let mut out = Vec::new();
        if job.state == JobState::Succeeded {
            let answer = job.answer().unwrap_or_default().to_string();
            let rest = self.answer.end(&answer);
            out.extend(self.text(&rest));
            out.extend(self.close_text());
            out.push(
                json!({"type": "RUN_FINISHED", "threadId": self.thread_id, "runId": self.run_id,
                            "result": answer, "outcome": {"type": "success"}}),
            );
            return out;
        }
        out.extend(self.close_text());
        if job.state == JobState::Cancelled {
            out.push(
                json!({"type": "RUN_FINISHED", "threadId": self.thread_id, "runId": self.run_id,
                            "outcome": {"type": "cancelled"}}),
            );
        } else {
            let message = job
                .answer_or_error()
                .err()
                .map(|why| why.to_string())
                .unwrap_or_default();
            out.push(json!({"type": "RUN_ERROR", "message": message, "code": "job_failed"}));
        }
        out
    }
}

/// The run's SSE stream: `RUN_STARTED`, then the feed told as events
/// until the run finishes (the job ends or parks for a decision).
fn events(
    run: Run,
    feed: impl Stream<Item = Item> + Send + 'static,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let first = run.started();
    let body = futures::stream::unfold(
        (Box::pin(feed), Some(run)),
        |(mut feed, run)| async move {
            let mut run = run?;
            loop {
                let (out, last) = match feed.next().await {
                    Some(Item::Token(token)) => {
                        let piece = run.answer.token(&token.run_id, token.turn, &token.text);
                        (run.text(&piece), false)
                    }
                    Some(Item::Event { json, .. }) => run.stored(&json),
                    Some(Item::Progress(_)) => continue,
                    Some(Item::End(job)) => (run.ended(&job), true),
                    None => {
                        let lost = json!({"type": "RUN_ERROR", "code": "feed_lost",
                            "message": format!("lost the feed of job {} (the store could not be read); the job goes on: GET /v1/jobs/{}", run.job_id, run.job_id)});
                        (vec![lost], true)
                    }
                };
                if last {
                    return Some((out, (feed, None)));
                }
                if !out.is_empty() {
                    return Some((out, (feed, Some(run))));
                }
            }
        },
    )
    .flat_map(futures::stream::iter);
    let events = futures::stream::once(async { first })
        .chain(body)
        .map(|event| Ok(SseEvent::default().data(event.to_string())));
    Sse::new(events).keep_alive(KeepAlive::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(status: &str, payload: Value) -> ResumeEntry {
        ResumeEntry {
            interrupt_id: "j/sha256:ab/c".into(),
            status: status.into(),
            payload: Some(payload),
        }
    }

    #[test]
    fn interrupt_ids_carry_job_digest_and_call() {
        let (job, digest, call) = interrupt_parts("j1/sha256:ab/call/with/slashes").unwrap();
        assert_eq!(
            (job.as_str(), digest, call),
            ("j1", "sha256:ab", "call/with/slashes")
        );
        assert!(interrupt_parts("j1/sha256:ab").is_none());
        assert!(interrupt_parts("//x").is_none());
    }

    #[test]
    fn resume_entries_decide() {
        assert_eq!(
            verdict(&entry("resolved", json!(true))).unwrap(),
            Verdict::Approve
        );
        assert_eq!(
            verdict(&entry(
                "resolved",
                json!({"approved": false, "reason": "no"})
            ))
            .unwrap(),
            Verdict::Deny {
                reason: Some("no".into())
            }
        );
        assert_eq!(
            verdict(&entry(
                "resolved",
                json!({"approved": true, "arguments": {"a": 1}})
            ))
            .unwrap(),
            Verdict::Edit {
                arguments: json!({"a": 1})
            }
        );
        assert!(matches!(
            verdict(&entry("cancelled", Value::Null)).unwrap(),
            Verdict::Deny { .. }
        ));
        assert!(verdict(&entry("resolved", json!({"ok": 1}))).is_err());
        assert!(verdict(&entry("maybe", json!(true))).is_err());
    }

    #[test]
    fn the_chat_is_kept_only_when_there_is_more_than_one_message() {
        let one = [json!({"id": "1", "role": "user", "content": "hi"})];
        assert_eq!(chat_of(&one).unwrap(), ("hi".to_string(), None));
        let two = [
            json!({"id": "0", "role": "developer", "content": "be brief"}),
            json!({"id": "1", "role": "user", "content": [{"type": "text", "text": "hi"}]}),
        ];
        let (text, chat) = chat_of(&two).unwrap();
        assert_eq!(text, "hi");
        assert_eq!(chat.unwrap()[0]["role"], "system");
        assert!(chat_of(&[json!({"role": "assistant", "content": "x"})]).is_err());
    }
}
