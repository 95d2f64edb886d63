//! The runtime's SSE frames for a query or group-chat job, from the job's
//! feed: a start chunk; then in arrival order `{"content"}` pieces of the
//! answer (the job's answer stream, [`crate::events::answer`]: together,
//! the answer) and an `{"agent_call", "agent_query"}` / `{"agent_id",
//! "agent_response"}` pair around each agent call — asked for with
//! `function_calls` (our CLI does), also a `{"function_call", "arguments"}`
//! frame before each tool call and a `{"function_result", "output_preview",
//! "is_error"}` after each result of a tool that is not an agent (the CLI's
//! `ƒ(x)` lines) —, an `{"approval_required"}`
//! frame when the job parks for a person's decision; then the complete frame,
//! "Streaming complete" and `[DONE]` — or `{"error"}` and `[DONE]`. A
//! client that hangs up only stops the frames: the job runs on.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::time::Instant;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use serde_json::{Value, json};

use super::super::AppState;
use super::super::feed::{Item, approval_required};
use super::super::job_trace::{AgentTools, query_of, response_of, top_level};
use crate::events::EventEnvelope;
use crate::events::answer::AnswerStream;
use crate::events::live::Token;
use crate::queue::Job;

/// What the stream remembers between items.
struct Frames {
    state: AppState,
    job_id: String,
    agents: AgentTools,
    /// Tool calls announced (each arrives live and again from the store).
    announced: HashSet<String>,
    /// Agent calls announced: call id → agent id.
    calls: HashMap<String, String>,
    /// Agent calls answered (each call arrives live and again from the store).
    answered: HashSet<String>,
    started: Instant,
    answer: AnswerStream,
    /// Frames for every tool call, not only agent calls (asked for).
    functions: bool,
}

pub(super) fn frames(
    state: AppState,
    job: Job,
    feed: impl Stream<Item = Item> + Send + 'static,
    started: Instant,
    asked: super::Stream,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let frames = Frames {
        functions: asked == super::Stream::Frames { functions: true },
        answer: super::super::answer::answer_stream(&state, &job),
        agents: AgentTools::of(&state, &job),
        job_id: job.id.to_string(),
        state,
        announced: HashSet::new(),
        calls: HashMap::new(),
        answered: HashSet::new(),
        started,
    };
    let start = futures::stream::iter([data(
        &json!({"chunk": "Starting streaming response...", "complete": false}),
    )]);
    // The feed ends after the job's end; if it ends early (the store could
    // not be read) the client still gets an error and `[DONE]`.
    let body = futures::stream::unfold(
        (Box::pin(feed), Some(frames)),
        |(mut feed, frames)| async move {
            let mut frames = frames?;
            let out = match feed.next().await {
                Some(Item::End(job)) => {
                    let out = frames.end(&job).await;
                    return Some((out, (feed, None)));
                }
                Some(item) => frames.item(item).await,
                None => vec![
                    data(&json!({"error": format!("lost the feed of job {}; GET /v1/jobs/{} for its outcome", frames.job_id, frames.job_id)})),
                    done(),
                ],
            };
            let next = (!out.iter().any(is_done)).then_some(frames);
            Some((out, (feed, next)))
        },
    )
    .flat_map(futures::stream::iter);
    Sse::new(start.chain(body).map(|(_, e)| Ok(e))).keep_alive(KeepAlive::default())
}

/// A frame and whether it is `[DONE]`.
type Frame = (bool, SseEvent);

fn data(value: &Value) -> Frame {
    (false, SseEvent::default().data(value.to_string()))
}

fn done() -> Frame {
    (true, SseEvent::default().data("[DONE]"))
}

fn is_done(frame: &Frame) -> bool {
    frame.0
}

/// A `{"content"}` frame of the answer, none for no text.
fn content(text: &str) -> Vec<Frame> {
    if text.is_empty() {
        Vec::new()
    } else {
        vec![data(&json!({"content": text}))]
    }
}

impl Frames {
    async fn item(&mut self, item: Item) -> Vec<Frame> {
        match item {
            // A tool call as it starts or ends.
            Item::Token(Token {
                event: Some(event), ..
            }) => {
                let text = self.answer.event(&event);
                let mut out = content(&text);
                if let Ok(event) = serde_json::to_value(&*event) {
                    out.extend(self.event(event).await);
                }
                out
            }
            Item::Token(token) => {
                content(&self.answer.token(&token.run_id, token.turn, &token.text))
            }
            Item::Event { json, .. }
                if let Some(frame) = approval_required(&self.job_id, &json) =>
            {
                vec![data(&json!({"approval_required": frame}))]
            }
            Item::Event { json, .. } => {
                let mut out = match serde_json::from_str::<EventEnvelope>(&json) {
                    Ok(event) => content(&self.answer.event(&event)),
                    Err(_) => Vec::new(),
                };
                if let Some(event) = top_level(&json) {
                    out.extend(self.event(event).await);
                }
                out
            }
            _ => Vec::new(),
        }
    }

    /// The frames of a tool call of the router starting or ending, once
    /// per call: for an agent call the agent's pair; asked for, also
    /// `{"function_call", "arguments"}` for every call and, for a tool that
    /// is not an agent, its `{"function_result", "output_preview", "is_error"}`.
    async fn event(&mut self, event: Value) -> Vec<Frame> {
        if !event["parent"].is_null() {
            return Vec::new();
        }
        let (Some(tool), Some(call_id), Some(kind)) = (
            event["tool_name"].as_str(),
            event["call_id"].as_str(),
            event["type"].as_str(),
        ) else {
            return Vec::new();
        };
        let call_id = call_id.to_string();
        match kind {
            "ToolCall" if self.announced.insert(call_id.clone()) => {
                let mut out = Vec::new();
                if self.functions {
                    out.push(data(
                        &json!({"function_call": tool, "arguments": event["arguments"]}),
                    ));
                }
                if let Some(agent) = self.agents.agent(tool) {
                    out.push(data(
                        &json!({"agent_call": agent, "agent_query": query_of(&event["arguments"])}),
                    ));
                    self.calls.insert(call_id, agent);
                }
                out
            }
            "ToolResult" if self.answered.insert(call_id.clone()) => {
                match self.agent_response(&event, &call_id).await {
                    Some(frame) => vec![frame],
                    None if !self.functions => Vec::new(),
                    None => vec![data(&json!({
                        "function_result": tool,
                        "output_preview": event["output_preview"],
                        "is_error": event["is_error"],
                    }))],
                }
            }
            _ => Vec::new(),
        }
    }

    /// The `{"agent_id", "agent_response"}` frame of an agent call's
    /// result; `None` for a call of another tool.
    async fn agent_response(&self, event: &Value, call_id: &str) -> Option<Frame> {
        let agent = self.calls.get(call_id)?.clone();
        let turn = event["turn"].as_u64().unwrap_or_default() as u32;
        // Events carry a preview; the journal holds the whole reply
        // (recorded before the event was emitted).
        let journal = self
            .state
            .queue
            .journal(&crate::queue::JobId::from(self.job_id.clone()))
            .await
            .unwrap_or_default();
        let response = response_of(&journal, turn, call_id).unwrap_or_else(|| {
            event["output_preview"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        });
        Some(data(
            &json!({"agent_id": agent, "agent_response": response}),
        ))
    }

    async fn end(&mut self, job: &Job) -> Vec<Frame> {
        let answer = match job.answer_or_error() {
            Ok(answer) => answer,
            Err(error) => return vec![data(&json!({"error": error.to_string()})), done()],
        };
        // What of the answer did not stream goes before the complete frame.
        let mut frames = content(&self.answer.end(answer));
        let used = match super::super::job_trace::agents_used(&self.state, job).await {
            Ok(used) => used,
            Err(e) => return vec![data(&json!({"error": e.message})), done()],
        };
        let mut complete = json!({
            "chunk": null,
            "complete": true,
            "response": answer,
            "conversation_id": job.conversation_id,
            "processing_time": self.started.elapsed().as_secs_f64(),
            "agents_used": used,
        });
        if let Some(responses) = job.result.as_ref().and_then(|r| r.get("agent_responses")) {
            complete["agent_responses"] = responses.clone();
        }
        frames.extend([
            data(&complete),
            data(&json!({"chunk": "Streaming complete", "complete": true})),
            done(),
        ]);
        frames
    }
}
