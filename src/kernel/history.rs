//! History strategies: which messages of the conversation are sent to the
//! model each turn — a built-in ([`HistoryStrategy`]) or a
//! [`HistoryPlugin`] the kernel is handed (a library, docs/plugins.md,
//! "History plugins"), whose choice is checked here before it is sent.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;
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

/// A history strategy outside the kernel: it names the messages to send
/// by their indices (it cannot invent content).
pub trait HistoryPlugin: Send + Sync {
    fn name(&self) -> &str;

    /// The indices of `messages` to send to `model` this turn, at most
    /// `max_messages` by the bundle's wish (the kernel checks order, range
    /// and tool results, not the count: the cap is the strategy's to read).
    fn select<'a>(
        &'a self,
        messages: &'a [Message],
        max_messages: usize,
        model: &'a str,
    ) -> BoxFuture<'a, Result<Vec<usize>, HistoryPluginError>>;

    /// The content hash of the library behind it: part of the identity of
    /// every bundle using it, so a job resumes with the strategy it started with.
    fn library_digest(&self) -> Option<&str>;
}

/// A history plugin could not choose, or chose what cannot be sent: the
/// turn that asked cannot go on.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "history plugin `{plugin}` failed: {detail} (the plugin's library is at fault: fix or replace it, then reload)"
)]
pub struct HistoryPluginError {
    /// The plugin's name and library file.
    pub plugin: String,
    pub detail: String,
    /// It did not answer in time: a retry may find it answering.
    pub retryable: bool,
}

/// The strategy a run trims its history with.
#[derive(Clone)]
pub enum History {
    Builtin(HistoryStrategy),
    Plugin(Arc<dyn HistoryPlugin>),
}

impl Default for History {
    fn default() -> Self {
        History::Builtin(HistoryStrategy::default())
    }
}

impl fmt::Debug for History {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            History::Builtin(strategy) => write!(f, "{strategy:?}"),
            History::Plugin(plugin) => write!(f, "Plugin({})", plugin.name()),
        }
    }
}

impl History {
    /// The content hash of the plugin library, when it is one.
    pub fn library_digest(&self) -> Option<&str> {
        match self {
            History::Builtin(_) => None,
            History::Plugin(plugin) => plugin.library_digest(),
        }
    }
}

/// The messages to send to `model` this turn.
pub async fn window(
    history: &History,
    messages: &[Message],
    max_messages: usize,
    model: &str,
) -> Result<Vec<Message>, HistoryPluginError> {
    match history {
        History::Builtin(strategy) => Ok(trim(messages, *strategy, max_messages)),
        History::Plugin(plugin) => {
            let indices = plugin.select(messages, max_messages, model).await?;
            chosen(messages, &indices).map_err(|e| HistoryPluginError {
                plugin: plugin.name().to_string(),
                detail: e.to_string(),
                retryable: false,
            })
        }
    }
}

/// Why the indices a history plugin chose cannot be sent. Where: the
/// caller wraps it in [`HistoryPluginError`], which names the plugin.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ChoiceError {
    #[error("it chose no message; a request needs at least one")]
    NoMessage,
    #[error(
        "it chose message {index}, but the conversation has {len} messages (indices start at 0)"
    )]
    OutOfRange { index: usize, len: usize },
    #[error("it chose message {index} after message {previous}; indices must increase")]
    NotIncreasing { index: usize, previous: usize },
    #[error(
        "it chose message {index}, the result of tool call {call:?}, without the assistant message that made the call (servers refuse an orphan tool result)"
    )]
    OrphanToolResult { index: usize, call: String },
}

/// The messages at `indices`, when they can be sent: at least one, each in
/// range, increasing, and no tool result without its assistant call.
pub fn chosen(messages: &[Message], indices: &[usize]) -> Result<Vec<Message>, ChoiceError> {
    if indices.is_empty() {
        return Err(ChoiceError::NoMessage);
    }
    let mut calls: HashSet<&str> = HashSet::new();
    let mut previous: Option<usize> = None;
    let mut out = Vec::with_capacity(indices.len());
    for &index in indices {
        let Some(message) = messages.get(index) else {
            return Err(ChoiceError::OutOfRange {
                index,
                len: messages.len(),
            });
        };
        if let Some(previous) = previous.filter(|&p| index <= p) {
            return Err(ChoiceError::NotIncreasing { index, previous });
        }
        previous = Some(index);
        calls.extend(message.tool_calls.iter().map(|c| c.id.as_str()));
        if message.role == Role::Tool {
            let id = message.tool_call_id.as_deref().unwrap_or_default();
            if !calls.contains(id) {
                return Err(ChoiceError::OrphanToolResult {
                    index,
                    call: id.to_string(),
                });
            }
        }
        out.push(message.clone());
    }
    Ok(out)
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
    fn chosen_indices_are_checked() {
        let c = conversation();
        let picked = chosen(&c, &[0, 2, 3, 5]).unwrap();
        assert_eq!(roles(&picked), ["system", "assistant", "tool", "assistant"]);
        let err = chosen(&c, &[0, 6]).unwrap_err().to_string();
        assert!(err.contains("message 6") && err.contains("has 6"), "{err}");
        let err = chosen(&c, &[2, 1]).unwrap_err().to_string();
        assert!(err.contains("must increase"), "{err}");
        let err = chosen(&c, &[1, 1]).unwrap_err().to_string();
        assert!(err.contains("must increase"), "{err}");
        assert_eq!(chosen(&c, &[]).unwrap_err(), ChoiceError::NoMessage);
    }

    #[test]
    fn an_orphan_tool_result_is_refused() {
        let c = conversation();
        let err = chosen(&c, &[0, 3]).unwrap_err().to_string();
        assert!(err.contains("orphan") && err.contains("\"c1\""), "{err}");
        // Message 4 answers call c2, which no assistant message made.
        let err = chosen(&c, &[0, 2, 3, 4]).unwrap_err().to_string();
        assert!(err.contains("message 4") && err.contains("\"c2\""), "{err}");
    }

    // A test double: its signatures repeat `HistoryPlugin`'s, as the
    // plugin library's (`bundle/history_plugin.rs`) do.
    struct Fixed(Vec<usize>);

    impl HistoryPlugin for Fixed {
        fn name(&self) -> &str {
            "fixed"
        }
        fn select<'a>(
            &'a self,
            _: &'a [Message],
            _: usize,
            _: &'a str,
        ) -> BoxFuture<'a, Result<Vec<usize>, HistoryPluginError>> {
            Box::pin(async move { Ok(self.0.clone()) })
        }
        fn library_digest(&self) -> Option<&str> {
            None
        }
    }

    #[tokio::test]
    async fn a_plugin_window_is_what_it_chose_or_an_error_naming_it() {
        let c = conversation();
        let plugin = History::Plugin(Arc::new(Fixed(vec![1, 5])));
        let sent = window(&plugin, &c, 50, "m").await.unwrap();
        assert_eq!(roles(&sent), ["user", "assistant"]);
        let bad = History::Plugin(Arc::new(Fixed(vec![9])));
        let err = window(&bad, &c, 50, "m").await.unwrap_err().to_string();
        assert!(
            err.starts_with("history plugin `fixed` failed: it chose message 9"),
            "{err}"
        );
        let builtin = History::Builtin(HistoryStrategy::KeepAll);
        assert_eq!(window(&builtin, &c, 1, "m").await.unwrap().len(), 6);
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
