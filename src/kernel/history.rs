//! History strategies: which messages of the conversation are sent to the
//! model each turn.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::types::{Message, Role};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HistoryStrategy {
    /// The first message (the system prompt, or the task when there is
    /// none, as the Python kernel kept `messages[0]`) plus the most recent
    /// messages, up to `max_history_messages` in all.
    #[default]
    SlidingWindow,
    /// Everything, always.
    KeepAll,
}

/// What a run that used its last turn without a final answer (its last
/// reply still called tools) ends as.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnMaxTurns {
    /// The run fails (`max_turns: …`), as the OpenAI Agents SDK raises
    /// `MaxTurnsExceeded`: its last reply is not an answer.
    #[default]
    Fail,
    /// The run succeeds with its last reply's text as the answer.
    Succeed,
}

/// The messages to send this turn.
pub fn trim(messages: &[Message], strategy: HistoryStrategy, max_messages: usize) -> Vec<Message> {
    match strategy {
        HistoryStrategy::KeepAll => messages.to_vec(),
        HistoryStrategy::SlidingWindow => sliding_window(messages, max_messages.max(1)),
    }
}

/// Keeps the first message plus the last N−1 messages, and never starts
/// the tail with a tool message whose assistant call was cut away. The
/// first message is kept whatever its role, as the Python kernel kept
/// `messages[0]`: without a system prompt it is the task itself.
fn sliding_window(messages: &[Message], max: usize) -> Vec<Message> {
    if messages.len() <= max {
        return messages.to_vec();
    }
    let (head, rest) = match messages.split_first() {
        Some((first, rest)) => (Some(first), rest),
        None => (None, messages),
    };
    let room = max - usize::from(head.is_some());
    let mut start = rest.len().saturating_sub(room);
    // Orphaned tool results (their assistant message fell outside the window)
    // would be rejected by servers; drop them from the front of the tail.
    while start < rest.len() && rest[start].role == Role::Tool {
        start += 1;
    }
    head.into_iter()
        .cloned()
        .chain(rest[start..].iter().cloned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{ToolCall, ToolResult};
    use serde_json::json;

    fn conversation() -> Vec<Message> {
        let call = ToolCall::new("c1", "add", json!({}));
        let result = ToolResult::ok(&call, "1");
        vec![
            Message::system("sys"),
            Message::user("u1"),
            Message::assistant(None, vec![call.clone()]),
            Message::tool(&result),
            Message::tool(&ToolResult {
                call_id: "c2".into(),
                ..result.clone()
            }),
            Message::assistant(Some("done".into()), vec![]),
        ]
    }

    fn roles(m: &[Message]) -> Vec<&str> {
        m.iter().map(|m| m.role.as_str()).collect()
    }

    #[test]
    fn keep_all_keeps_everything() {
        assert_eq!(trim(&conversation(), HistoryStrategy::KeepAll, 1).len(), 6);
    }

    #[test]
    fn window_keeps_system_and_tail_without_orphans() {
        let c = conversation();
        assert_eq!(
            roles(&trim(&c, HistoryStrategy::SlidingWindow, 6)),
            ["system", "user", "assistant", "tool", "tool", "assistant"]
        );
        // N = 4 would start at a tool message whose call is gone: both tool messages go.
        assert_eq!(
            roles(&trim(&c, HistoryStrategy::SlidingWindow, 4)),
            ["system", "assistant"]
        );
        assert_eq!(
            roles(&trim(&c, HistoryStrategy::SlidingWindow, 5)),
            ["system", "assistant", "tool", "tool", "assistant"]
        );
    }

    #[test]
    fn window_of_one_and_two() {
        let c = conversation();
        assert_eq!(
            roles(&trim(&c, HistoryStrategy::SlidingWindow, 1)),
            ["system"]
        );
        assert_eq!(
            roles(&trim(&c, HistoryStrategy::SlidingWindow, 2)),
            ["system", "assistant"]
        );
        // Without a system message the first message (the task) is kept.
        let no_sys = &c[1..];
        assert_eq!(
            roles(&trim(no_sys, HistoryStrategy::SlidingWindow, 1)),
            ["user"]
        );
        assert_eq!(
            roles(&trim(no_sys, HistoryStrategy::SlidingWindow, 2)),
            ["user", "assistant"]
        );
        // ...and never a lone orphan tool message after it.
        let ends_with_tool = &c[1..5];
        assert_eq!(
            roles(&trim(ends_with_tool, HistoryStrategy::SlidingWindow, 2)),
            ["user"]
        );
    }
}
