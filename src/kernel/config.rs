//! How one run behaves ([`KernelConfig`], built from a bundle): the model
//! and its turns, the history, tool concurrency, the deadline, the request
//! keys, and the caps a run is held to ([`CallBudget`], the job's
//! `Budget`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value};

use super::answer::AnswerShape;
use super::history::{History, HistoryStrategy, OnMaxTurns};
use super::shape::TurnShape;
use crate::budget::Budget;
use crate::types::{Message, ToolCall, ToolSchema};

/// Model calls per run unless the bundle says otherwise (the Python kernel's).
pub const DEFAULT_MAX_TURNS: u32 = 20;
/// Tool calls of one turn running at once unless the bundle says otherwise:
/// one at a time, as in the Python kernel.
pub const DEFAULT_MAX_CONCURRENCY: usize = 1;

/// How one run behaves; built from a bundle.
#[derive(Debug, Clone)]
pub struct KernelConfig {
    /// The request's `model`.
    pub model: String,
    /// A different model (e.g. a LoRA adapter) for particular turns.
    pub turn_models: BTreeMap<u32, String>,
    pub max_turns: u32,
    /// Whether a run that used `max_turns` without a final answer fails.
    pub on_max_turns: OnMaxTurns,
    pub history: History,
    pub max_history_messages: usize,
    /// Tool calls of one turn run at most this many at a time.
    pub max_concurrency: usize,
    /// A successful call of this tool ends the run; its output is the result.
    pub termination_tool: Option<String>,
    /// A deadline for the whole run.
    pub timeout: Option<Duration>,
    /// temperature, max_tokens, top_p, stop, ...
    pub sampling: Map<String, Value>,
    /// `tool_choice` and the model plugin's keys (grammar, stop sequences)
    /// for every turn without its own entry in `turn_shapes`.
    pub shape: TurnShape,
    /// Turns that differ (e.g. a named tool on turn 1).
    pub turn_shapes: BTreeMap<u32, TurnShape>,
    /// Merged into the request last, overriding anything else.
    pub extra_body: Map<String, Value>,
    /// Put the request's messages on ModelRequest events (for observers that
    /// record content, when the operator opted in); off saves a copy per turn.
    pub record_messages: bool,
    /// A cap on calls of some tools in one run (the runtime API's
    /// `max_agents`); calls beyond it get a tool error instead of running.
    pub call_budget: Option<CallBudget>,
    /// What the job may spend, shared with its other runs; checked before
    /// each model call and each tool call.
    pub budget: Option<Budget>,
    /// A caller's answer format, asked of the model on the turns that may
    /// answer (see [`AnswerShape::for_turn`]).
    pub answer: Option<AnswerShape>,
    /// The caller's own tools, offered beside the bundle's: the kernel
    /// never runs them; a call of one parks the run (`caller_call`) until
    /// its output is journaled as the call's result.
    pub caller_tools: Vec<ToolSchema>,
}

/// At most `max_calls` calls of `tools` per run.
#[derive(Debug, Clone, PartialEq)]
pub struct CallBudget {
    pub tools: std::collections::BTreeSet<String>,
    pub max_calls: usize,
    /// The tool error a refused call gets (it tells the model what to do).
    pub refusal: String,
}

impl CallBudget {
    /// For each of this turn's `calls`, the refusal when it is over the
    /// budget, counting the calls already in `history`. Replays agree with
    /// the first run: the count depends only on the conversation.
    pub(super) fn refusals(&self, history: &[Message], calls: &[ToolCall]) -> Vec<Option<String>> {
        let counted = |call: &&ToolCall| self.tools.contains(&call.name);
        let mut used = history
            .iter()
            .flat_map(|m| &m.tool_calls)
            .filter(counted)
            .count();
        calls
            .iter()
            .map(|call| {
                if !counted(&call) {
                    return None;
                }
                used += 1;
                (used > self.max_calls).then(|| self.refusal.clone())
            })
            .collect()
    }
}

impl Default for KernelConfig {
    fn default() -> Self {
        Self {
            model: "default".into(),
            turn_models: BTreeMap::new(),
            max_turns: DEFAULT_MAX_TURNS,
            on_max_turns: OnMaxTurns::Fail,
            history: History::Builtin(HistoryStrategy::SlidingWindow),
            max_history_messages: 50,
            max_concurrency: DEFAULT_MAX_CONCURRENCY,
            termination_tool: None,
            timeout: None,
            sampling: Map::new(),
            shape: TurnShape::default(),
            turn_shapes: BTreeMap::new(),
            extra_body: Map::new(),
            record_messages: false,
            call_budget: None,
            budget: None,
            answer: None,
            caller_tools: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str, name: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: Value::Null,
            raw_arguments: None,
        }
    }

    #[test]
    fn a_call_budget_counts_earlier_turns_and_refuses_only_its_tools_past_the_cap() {
        let budget = CallBudget {
            tools: ["ask_a".to_string(), "ask_b".to_string()].into(),
            max_calls: 2,
            refusal: "no more".into(),
        };
        let earlier = Message::assistant(None, vec![call("c1", "ask_a"), call("c2", "add")]);
        let refusals = budget.refusals(
            &[Message::user("q"), earlier],
            &[call("c3", "add"), call("c4", "ask_b"), call("c5", "ask_a")],
        );
        assert_eq!(refusals, vec![None, None, Some("no more".to_string())]);
    }
}
