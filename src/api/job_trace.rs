//! What a runtime job did, read back from its durable record (for the
//! runtime API's answers and streams, and a conversation's turns): the agent
//! calls (from its `ToolCall` / `ToolResult` events, with the full reply
//! from its journal, since events carry only a preview), the other tool
//! calls and model turns for a verbose trace, and the agents used.

use std::collections::{BTreeMap, HashMap};

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::AppState;
use super::error::ApiError;
use crate::journal::{JournalEntry, RecordedReply, RecordedResult};
use crate::queue::Job;

/// Which of a job's tools call agents, and the agent each calls.
pub(super) enum AgentTools {
    /// A router's `agent` / `http_agent` tools: tool name → agent id.
    Tools(BTreeMap<String, String>),
    /// A group chat: every call is an agent, named by its id.
    All,
}

impl AgentTools {
    /// For `job`, from the bundle it ran (a group chat calls only agents).
    pub fn of(state: &AppState, job: &Job) -> Self {
        if job.kind.is_group_chat() {
            return Self::All;
        }
        let snapshot = state.registry.snapshot();
        Self::Tools(
            snapshot
                .bundle(&job.bundle)
                .map(|b| snapshot.agent_tools(b))
                .unwrap_or_default(),
        )
    }

    /// The agent `tool` calls, if it calls one.
    pub fn agent(&self, tool: &str) -> Option<String> {
        match self {
            Self::Tools(tools) => tools.get(tool).cloned(),
            Self::All => Some(tool.to_string()),
        }
    }
}

/// A stored event of the job's own run (not of a nested agent run).
pub(super) fn top_level(json: &str) -> Option<Value> {
    let mut event: Value = serde_json::from_str(json).ok()?;
    crate::events::legacy::upgrade(&mut event);
    event["parent"].is_null().then_some(event)
}

/// What was asked of an agent (its `content`, `input` or `query` argument).
pub(super) fn query_of(arguments: &Value) -> String {
    crate::registry::agent_query(arguments)
}

/// The full reply of call `call_id` in `turn`: a router's recorded tool
/// result, or a group chat's recorded reply.
pub(super) fn response_of(journal: &[JournalEntry], turn: u32, call_id: &str) -> Option<String> {
    // Results are journaled by the call's position in its turn's reply.
    let position = journal
        .iter()
        .find(|e| e.scope.is_empty() && e.turn == turn && e.step == "reply")
        .and_then(|e| serde_json::from_str::<RecordedReply>(&e.body).ok())
        .and_then(|reply| {
            let calls = reply.assistant.tool_calls;
            calls.iter().position(|call| call.id == call_id)
        });
    let result_key = position.map(JournalEntry::result_key);
    journal.iter().find_map(|e| {
        if e.scope.is_empty() && e.turn == turn && Some(&e.step) == result_key.as_ref() {
            let recorded: RecordedResult = serde_json::from_str(&e.body).ok()?;
            Some(plain(&recorded.result.output))
        } else if e.scope == "group/" && e.step == call_id {
            let reply: crate::group_chat::Reply = serde_json::from_str(&e.body).ok()?;
            Some(reply.response)
        } else {
            None
        }
    })
}

/// A tool output as text: the model sees JSON, people read the string.
fn plain(output: &str) -> String {
    match serde_json::from_str::<Value>(output) {
        Ok(Value::String(text)) => text,
        _ => output.to_string(),
    }
}

/// One entry of a runtime job's execution trace, in the order it happened.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum TraceEntry {
    /// A call of an agent: what it was asked and its whole reply.
    AgentCall {
        agent_id: String,
        tool: String,
        query: String,
        response: String,
        is_error: bool,
        /// The call was over the query's `max_agents` and never reached
        /// its agent.
        refused: bool,
    },
    /// With `verbose`: a call of another tool.
    ToolCall {
        tool: String,
        arguments: Value,
        result: String,
        is_error: bool,
    },
    /// With `verbose`: a model reply (its text without tool-call markup).
    ModelTurn { turn: u32, content: Option<String> },
}

/// The job's execution trace (agent calls; with `verbose` also other tool
/// calls and model turns) and the agents it used, distinct, in order of
/// first call.
pub(super) async fn execution_trace(
    state: &AppState,
    job: &Job,
    verbose: bool,
) -> Result<(Vec<TraceEntry>, Vec<String>), ApiError> {
    let agents = AgentTools::of(state, job);
    let events = state.queue.events_after(&job.id, 0, usize::MAX).await?;
    let journal = state.queue.journal(&job.id).await?;
    let mut calls: HashMap<String, Value> = HashMap::new();
    let mut trace = Vec::new();
    let mut used: Vec<String> = Vec::new();
    for event in events.iter().filter_map(|e| top_level(&e.event_json)) {
        let turn = event["turn"].as_u64().unwrap_or_default() as u32;
        let tool = event["tool_name"].as_str().unwrap_or_default();
        let call_id = event["call_id"].as_str().unwrap_or_default();
        match event["type"].as_str() {
            Some("ToolCall") => {
                calls.insert(call_id.to_string(), event["arguments"].clone());
            }
            Some("ToolResult") => {
                let arguments = calls.remove(call_id).unwrap_or(Value::Null);
                let response = response_of(&journal, turn, call_id).unwrap_or_else(|| {
                    event["output_preview"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string()
                });
                let is_error = event["is_error"].as_bool().unwrap_or(false);
                // A call over the query's `max_agents` never reached its agent.
                let refused = event["error_type"] == "refused";
                match agents.agent(tool) {
                    Some(agent) => {
                        if !refused && !used.contains(&agent) {
                            used.push(agent.clone());
                        }
                        trace.push(TraceEntry::AgentCall {
                            agent_id: agent,
                            tool: tool.to_string(),
                            query: query_of(&arguments),
                            response,
                            is_error,
                            refused,
                        });
                    }
                    None if verbose => trace.push(TraceEntry::ToolCall {
                        tool: tool.to_string(),
                        arguments,
                        result: response,
                        is_error,
                    }),
                    None => {}
                }
            }
            Some("ModelResponse") if verbose => {
                trace.push(TraceEntry::ModelTurn {
                    turn,
                    content: event["parsed_content"].as_str().map(str::to_string),
                });
            }
            _ => {}
        }
    }
    Ok((trace, used))
}

/// The agents a job used: a group chat's speakers as its result lists them
/// (its selector decides, it does not answer), else those of its trace
/// (see [`execution_trace`]).
pub(super) async fn agents_used(state: &AppState, job: &Job) -> Result<Vec<String>, ApiError> {
    match listed_agents(job) {
        Some(used) => Ok(used),
        None => Ok(execution_trace(state, job, false).await?.1),
    }
}

/// A finished job's execution trace as its answer carried it (verbose when
/// its query asked for it), and the agents it used (see [`agents_used`]).
pub(super) async fn answered_trace(
    state: &AppState,
    job: &Job,
) -> Result<(Vec<TraceEntry>, Vec<String>), ApiError> {
    let (trace, used) = execution_trace(state, job, job.controls.verbose).await?;
    Ok((trace, listed_agents(job).unwrap_or(used)))
}

/// The agents a group chat's result lists.
fn listed_agents(job: &Job) -> Option<Vec<String>> {
    let used = job.result.as_ref()?.get("agents_used")?;
    serde_json::from_value(used.clone()).ok()
}
