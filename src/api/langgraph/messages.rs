//! A thread's `messages` as LangGraph's clients read them (LangChain's
//! message dicts), rebuilt from each job's journal, one durable step at a
//! time: the job's input as a human message, each recorded reply as an AI
//! message with its tool calls, each recorded tool result as a tool
//! message — whole, as the model saw it. Ids are the same on every read:
//! the human message keeps the id its client gave it (so a graph that
//! sent it, `RemoteGraph` as a node, merges the answer without doubling
//! it), every other is the daemon's (`<job>:in` for a human message sent
//! without one, `<job>:t<turn>`, `<job>:t<turn>:<position>`), so a client
//! that merges messages by id (`add_messages`) never doubles one.

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use crate::events::{Event, EventEnvelope};
use crate::journal::{JournalEntry, RecordedReply, RecordedResult};
use crate::queue::Job;
use crate::types::ToolCall;

/// What a durable step of a job was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum StepKind {
    /// The job's input.
    Input,
    /// Turn `turn`'s reply, asking for `calls` tool calls.
    Reply { turn: u32, calls: usize },
    /// The result of the call at `position` of turn `turn`'s reply; `last`
    /// when no call of the turn is left to run after it; `nested` when the
    /// call ran a nested run (an agent call), which recorded steps of its
    /// own before it.
    Result {
        turn: u32,
        position: usize,
        last: bool,
        nested: bool,
    },
    /// The answer of a workflow or group chat (their stages record their
    /// replies apart).
    Answer,
}

/// One durable step of a job and the message it added to its thread.
#[derive(Debug, Clone)]
pub(super) struct Step {
    pub kind: StepKind,
    pub message: Value,
}

/// The steps of one job (a turn of its thread), in the order they were
/// made.
pub(super) fn steps_of(job: &Job, journal: &[JournalEntry]) -> Vec<Step> {
    let id = job.id.to_string();
    let mut steps = vec![Step {
        kind: StepKind::Input,
        message: human(job),
    }];
    steps.extend(recorded_steps(&id, journal, ""));
    let replied = steps
        .iter()
        .any(|s| matches!(s.kind, StepKind::Reply { .. }));
    if !replied && let Some(answer) = job.answer() {
        steps.push(Step {
            kind: StepKind::Answer,
            message: json!({
                "type": "ai", "id": format!("{id}:answer"), "content": answer,
                "name": null, "additional_kwargs": {}, "response_metadata": {},
                "tool_calls": [], "invalid_tool_calls": [], "usage_metadata": null,
            }),
        });
    }
    steps
}

/// The steps of run `run` nested in a job (an agent tool's, a workflow
/// stage's), journaled under `scope`: its input when it is known (what
/// the agent call asked), then its replies and tool results. Message ids
/// are the run's (`<run>:in`, `<run>:t<turn>`, …).
pub(super) fn nested_steps(
    run: &str,
    input: Option<&str>,
    journal: &[JournalEntry],
    scope: &str,
) -> Vec<Step> {
    let mut steps: Vec<Step> = input
        .map(|text| Step {
            kind: StepKind::Input,
            message: human_message(&format!("{run}:in"), &Value::from(text)),
        })
        .into_iter()
        .collect();
    steps.extend(recorded_steps(run, journal, scope));
    steps
}

/// The replies and tool results run `id` recorded under `scope`, turn by
/// turn.
fn recorded_steps(id: &str, journal: &[JournalEntry], scope: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut recorded: Vec<(u32, usize, &JournalEntry)> = journal
        .iter()
        .filter(|e| e.scope == scope)
        .filter_map(|e| Some((e.turn, order(&e.step)?, e)))
        .collect();
    recorded.sort_by_key(|(turn, place, _)| (*turn, *place));
    // The runs nested under this one: `<turn>:<position>` (or an earlier
    // version's `<turn>:<call id>`), the first part of their scopes.
    let nested: HashSet<&str> = journal
        .iter()
        .filter_map(|e| e.scope.strip_prefix(scope)?.split_once('/'))
        .map(|(first, _)| first)
        .filter(|first| !first.is_empty())
        .collect();
    let mut calls_left = 0usize;
    for (turn, place, entry) in recorded {
        if place == 0 {
            let Ok(reply) = serde_json::from_str::<RecordedReply>(&entry.body) else {
                continue;
            };
            calls_left = reply.assistant.tool_calls.len();
            steps.push(Step {
                kind: StepKind::Reply {
                    turn,
                    calls: calls_left,
                },
                message: ai(id, turn, &reply),
            });
        } else if let Ok(recorded) = serde_json::from_str::<RecordedResult>(&entry.body) {
            let position = place - 1;
            calls_left = calls_left.saturating_sub(1);
            let call = &recorded.result.call_id;
            steps.push(Step {
                kind: StepKind::Result {
                    turn,
                    position,
                    last: calls_left == 0,
                    nested: nested.contains(format!("{turn}:{position}").as_str())
                        || nested.contains(format!("{turn}:{call}").as_str()),
                },
                message: tool(&format!("{id}:t{turn}:{position}"), &recorded),
            });
        }
    }
    steps
}

/// The journal scope of the run nested in the run journaled under
/// `parent` by `key` (the last part of its run id): `{parent}{key}/` for
/// an agent call (`<turn>:<position>`), `{parent}<turn>:{key}/` for a
/// workflow stage or a group chat's reply (the newest turn when several
/// have it).
pub(super) fn nested_scope(journal: &[JournalEntry], parent: &str, key: &str) -> Option<String> {
    let exact = format!("{parent}{key}/");
    if journal.iter().any(|e| e.scope == exact) {
        return Some(exact);
    }
    journal
        .iter()
        .filter_map(|e| {
            let (turn, rest) = e.scope.strip_prefix(parent)?.split_once(':')?;
            let turn: u32 = turn.parse().ok()?;
            (rest.strip_suffix('/') == Some(key)).then_some((turn, &e.scope))
        })
        .max_by_key(|(turn, _)| *turn)
        .map(|(_, scope)| scope.clone())
}

/// The durable step a stored event tells of a run: a model call's events
/// its reply; a tool call's start its result when the result was recorded
/// with it (a call that runs no nested run); a tool call's end its result;
/// the end of a run that one of its calls nested, that call's result
/// (recorded with that end). So a step is told at the same stored event
/// whether the stream reads the event as it happens or long after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Told {
    Reply(u32),
    Call(u32, String),
    Result(u32, String),
}

impl Told {
    /// What `envelope` tells of run `run`'s steps.
    pub fn of(envelope: &EventEnvelope, run: &str) -> Option<Self> {
        if envelope.run_id == run {
            return match &envelope.event {
                Event::ModelRequest { turn, .. } | Event::ModelResponse { turn, .. } => {
                    Some(Self::Reply(*turn))
                }
                Event::ToolCall { turn, call_id, .. } => Some(Self::Call(*turn, call_id.clone())),
                Event::ToolResult { turn, call_id, .. } => {
                    Some(Self::Result(*turn, call_id.clone()))
                }
                _ => None,
            };
        }
        let parent = envelope.parent.as_ref().filter(|p| p.run_id == run)?;
        if !matches!(envelope.event, Event::KernelEnd { .. }) {
            return None;
        }
        let key = envelope.run_id.strip_prefix(run)?.strip_prefix('/')?;
        let turn = key.split_once(':')?.0.parse().ok()?;
        Some(Self::Result(turn, parent.call_id.clone()))
    }

    /// Whether `step` is the one told.
    pub fn is(&self, step: &Step) -> bool {
        let call_of = |step: &Step| step.message["tool_call_id"].as_str().map(str::to_string);
        match (self, &step.kind) {
            (Self::Reply(turn), StepKind::Reply { turn: t, .. }) => t == turn,
            (
                Self::Call(turn, call),
                StepKind::Result {
                    turn: t, nested, ..
                },
            ) => t == turn && !nested && call_of(step).as_ref() == Some(call),
            (Self::Result(turn, call), StepKind::Result { turn: t, .. }) => {
                t == turn && call_of(step).as_ref() == Some(call)
            }
            _ => false,
        }
    }
}

/// Where a step of a turn goes among its messages: the reply (0), then
/// each result after its position; other steps (input, starts) make none.
fn order(step: &str) -> Option<usize> {
    if step == "reply" {
        return Some(0);
    }
    let position: usize = step.strip_prefix("result@")?.parse().ok()?;
    Some(position.saturating_add(1))
}

fn human(job: &Job) -> Value {
    let id = sent_id(job).unwrap_or_else(|| format!("{}:in", job.id));
    human_message(&id, &Value::from(job.input.as_str()))
}

fn human_message(id: &str, content: &Value) -> Value {
    json!({
        "type": "human", "id": id, "content": content,
        "name": null, "additional_kwargs": {}, "response_metadata": {},
    })
}

/// The id the client gave the human message of a LangGraph run's input
/// (kept with the job: `run_meta`), if it gave one.
fn sent_id(job: &Job) -> Option<String> {
    let messages = job.run_meta.as_ref()?["kwargs"]["input"]["messages"].as_array()?;
    let human = messages
        .iter()
        .rev()
        .find(|m| m["type"] == "human" || m["role"] == "user" || m["role"] == "human")?;
    human["id"]
        .as_str()
        .filter(|id| !id.is_empty())
        .map(str::to_string)
}

fn ai(job: &str, turn: u32, reply: &RecordedReply) -> Value {
    let calls: Vec<Value> = reply.assistant.tool_calls.iter().map(tool_call).collect();
    json!({
        "type": "ai",
        "id": format!("{job}:t{turn}"),
        "content": reply.assistant.content.clone().unwrap_or_default(),
        "name": null,
        "additional_kwargs": {},
        "response_metadata": {
            "model_name": reply.response_model.as_deref().unwrap_or(&reply.model),
            "finish_reason": reply.finish_reason,
        },
        "tool_calls": calls,
        "invalid_tool_calls": [],
        "usage_metadata": {
            "input_tokens": reply.usage.prompt_tokens,
            "output_tokens": reply.usage.completion_tokens,
            "total_tokens": reply.usage.total_tokens,
        },
    })
}

fn tool_call(call: &ToolCall) -> Value {
    json!({"name": call.name, "args": call.arguments, "id": call.id, "type": "tool_call"})
}

fn tool(id: &str, recorded: &RecordedResult) -> Value {
    let result = &recorded.result;
    json!({
        "type": "tool", "id": id, "content": result.output,
        "tool_call_id": result.call_id, "name": result.name,
        "status": if result.is_error { "error" } else { "success" },
        "artifact": null, "additional_kwargs": {}, "response_metadata": {},
    })
}

/// A piece of an AI message, as LangChain's `AIMessageChunk` dict.
pub(super) fn chunk(
    id: &str,
    text: &str,
    calls: Vec<Value>,
    usage: Value,
    response: Value,
) -> Value {
    let call_chunks: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(index, call)| {
            json!({
                "name": call["name"], "args": call["args"].to_string(), "id": call["id"],
                "index": index, "type": "tool_call_chunk",
            })
        })
        .collect();
    json!({
        "type": "AIMessageChunk", "id": id, "content": text, "name": null,
        "additional_kwargs": {},
        "response_metadata": if response.is_null() { Value::Object(Map::new()) } else { response },
        "tool_calls": calls, "invalid_tool_calls": [], "tool_call_chunks": call_chunks,
        "usage_metadata": usage,
    })
}
