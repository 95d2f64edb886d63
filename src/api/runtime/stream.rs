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

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::time::Instant;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Serialize;
use serde_json::Value;

use super::super::AppState;
use super::super::document::{json_text, sse_event};
use super::super::feed::{Item, approval_required};
use super::super::job_trace::{AgentTools, query_of, response_of, top_level};
use crate::events::EventEnvelope;
use crate::events::answer::AnswerStream;
use crate::events::live::Token;
use crate::queue::Job;

/// One reply of a group chat.
#[derive(Debug, Serialize, serde::Deserialize, JsonSchema)]
pub(super) struct AgentResponse {
    pub agent_id: String,
    pub agent_name: String,
    pub response: String,
}

/// One event of the runtime's stream — for the API document only (no
/// value has this type): unnamed, its `data:` the JSON of a
/// [`RuntimeFrame`], or `[DONE]` (not JSON) last.
pub(super) enum RuntimeStreamEvent {}

impl JsonSchema for RuntimeStreamEvent {
    fn schema_name() -> Cow<'static, str> {
        "RuntimeStreamEvent".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let frame = json_text(generator.subschema_for::<RuntimeFrame>());
        sse_event(
            None,
            "The runtime's frames, one `data:` each (JSON), then `data: [DONE]`",
            json_schema!({"type": "string", "if": {"const": DONE}, "else": frame}),
        )
    }
}

/// The last event's data.
const DONE: &str = "[DONE]";

/// One frame of the runtime's stream: the JSON `data:` of one event, in
/// this order — the start chunk; then in arrival order `content` pieces of
/// the answer (together, the answer), an `agent_call` / `agent_response`
/// pair around each agent call (asked for with `function_calls`, also a
/// `function_call` before each tool call and a `function_result` after
/// each result of a tool that is not an agent), `approval_required` when
/// the job parks for a person's decision; then the complete frame and the
/// "Streaming complete" chunk — or an `error` frame. The last event's data
/// is `[DONE]` (not JSON).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(untagged)]
pub(super) enum RuntimeFrame {
    /// The first frame ("Starting streaming response...", not complete)
    /// and the one after the complete frame ("Streaming complete").
    Chunk { chunk: &'static str, complete: bool },
    /// A piece of the answer.
    Content { content: String },
    /// An agent is called with a query.
    AgentCall {
        agent_call: String,
        agent_query: String,
    },
    /// The agent's whole reply.
    AgentResponse {
        agent_id: String,
        agent_response: String,
    },
    /// With `function_calls`: a tool is called with these arguments.
    FunctionCall {
        function_call: String,
        arguments: Value,
    },
    /// With `function_calls`: a tool that is not an agent answered.
    FunctionResult {
        function_result: String,
        output_preview: String,
        is_error: bool,
    },
    /// The job parked for a person's decision on a call: `job_id`, `kind`,
    /// `turn`, `call_id`, `tool`, `arguments`, `digest` and `decide` (the
    /// route that decides it).
    ApprovalRequired { approval_required: Value },
    /// The job succeeded: its answer and what it used.
    Complete {
        chunk: (),
        complete: bool,
        response: String,
        conversation_id: Option<String>,
        /// Seconds since the request came in.
        processing_time: f64,
        agents_used: Vec<String>,
        /// A group chat's replies.
        #[serde(skip_serializing_if = "Option::is_none")]
        agent_responses: Option<Vec<AgentResponse>>,
    },
    /// The job ended without an answer, or its feed was lost; `[DONE]`
    /// follows.
    Error { error: String },
}

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
    let start = futures::stream::iter([data(&RuntimeFrame::Chunk {
        chunk: "Starting streaming response...",
        complete: false,
    })]);
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
                    data(&RuntimeFrame::Error {
                        error: format!(
                            "lost the feed of job {}; GET /v1/jobs/{} for its outcome",
                            frames.job_id, frames.job_id
                        ),
                    }),
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

fn data(frame: &RuntimeFrame) -> Frame {
    let json = serde_json::to_string(frame).unwrap_or_else(|_| "{}".into());
    (false, SseEvent::default().data(json))
}

fn done() -> Frame {
    (true, SseEvent::default().data(DONE))
}

fn is_done(frame: &Frame) -> bool {
    frame.0
}

/// A `{"content"}` frame of the answer, none for no text.
fn content(text: &str) -> Vec<Frame> {
    if text.is_empty() {
        Vec::new()
    } else {
        vec![data(&RuntimeFrame::Content {
            content: text.to_string(),
        })]
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
                vec![data(&RuntimeFrame::ApprovalRequired {
                    approval_required: frame,
                })]
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
                    out.push(data(&RuntimeFrame::FunctionCall {
                        function_call: tool.to_string(),
                        arguments: event["arguments"].clone(),
                    }));
                }
                if let Some(agent) = self.agents.agent(tool) {
                    out.push(data(&RuntimeFrame::AgentCall {
                        agent_call: agent.clone(),
                        agent_query: query_of(&event["arguments"]),
                    }));
                    self.calls.insert(call_id, agent);
                }
                out
            }
            "ToolResult" if self.answered.insert(call_id.clone()) => {
                match self.agent_response(&event, &call_id).await {
                    Some(frame) => vec![frame],
                    None if !self.functions => Vec::new(),
                    None => vec![data(&RuntimeFrame::FunctionResult {
                        function_result: tool.to_string(),
                        output_preview: event["output_preview"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                        is_error: event["is_error"].as_bool().unwrap_or_default(),
                    })],
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
        Some(data(&RuntimeFrame::AgentResponse {
            agent_id: agent,
            agent_response: response,
        }))
    }

    async fn end(&mut self, job: &Job) -> Vec<Frame> {
        let error = |error: String| vec![data(&RuntimeFrame::Error { error }), done()];
        let answer = match job.answer_or_error() {
            Ok(answer) => answer,
            Err(why) => return error(why.to_string()),
        };
        // What of the answer did not stream goes before the complete frame.
        let mut frames = content(&self.answer.end(answer));
        let used = match super::super::job_trace::agents_used(&self.state, job).await {
            Ok(used) => used,
            Err(e) => return error(e.message),
        };
        let agent_responses = job
            .result
            .as_ref()
            .and_then(|r| r.get("agent_responses"))
            .and_then(|responses| serde_json::from_value(responses.clone()).ok());
        let complete = RuntimeFrame::Complete {
            chunk: (),
            complete: true,
            response: answer.to_string(),
            conversation_id: job.conversation_id.clone(),
            processing_time: self.started.elapsed().as_secs_f64(),
            agents_used: used,
            agent_responses,
        };
        frames.extend([
            data(&complete),
            data(&RuntimeFrame::Chunk {
                chunk: "Streaming complete",
                complete: true,
            }),
            done(),
        ]);
        frames
    }
}
