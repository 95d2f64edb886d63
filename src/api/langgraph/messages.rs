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

use serde_json::{Map, Value, json};

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
    /// when no call of the turn is left to run after it.
    Result {
        turn: u32,
        position: usize,
        last: bool,
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
    let mut recorded: Vec<(u32, usize, &JournalEntry)> = journal
        .iter()
        .filter(|e| e.scope.is_empty())
        .filter_map(|e| Some((e.turn, order(&e.step)?, e)))
        .collect();
    recorded.sort_by_key(|(turn, place, _)| (*turn, *place));
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
                message: ai(&id, turn, &reply),
            });
        } else if let Ok(recorded) = serde_json::from_str::<RecordedResult>(&entry.body) {
            let position = place - 1;
            calls_left = calls_left.saturating_sub(1);
            steps.push(Step {
                kind: StepKind::Result {
                    turn,
                    position,
                    last: calls_left == 0,
                },
                message: tool(&format!("{id}:t{turn}:{position}"), &recorded),
            });
        }
    }
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
    json!({
        "type": "human", "id": id, "content": job.input,
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
