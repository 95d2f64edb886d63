//! What a fork starts from: the source job's journal entries for the turns
//! it replays. A fork at turn `N` copies the top-level run's steps of
//! turns before `N` (replies, call starts and results, approvals and
//! decisions, budget marks) and every nested run started in those turns
//! (scopes `"{turn}:{key}/…"`), so the new job replays them — no model call,
//! no tool call — and runs live from turn `N`.
//!
//! The rendered input (turn 0's `input` step) is copied only when the fork
//! runs the source's own content on its own input: with an edited input or
//! another bundle version the fork renders its prompts again, and the
//! replayed turns follow that opening (the model sees the new opening from
//! turn `N` on, after the recorded turns).

use std::collections::BTreeMap;

use crate::journal::{JournalEntry, RecordedReply};

/// The turns a journal lets a fork start at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForkRange {
    /// The latest turn a fork may start at: the first turn the source did
    /// not finish (every turn before it has its reply and all results).
    pub last: u32,
    /// The turn a fork starts at when none is asked for: the source's last
    /// recorded turn, so its last model call is made again.
    pub default: u32,
}

/// The fork range of `journal` (the source's whole journal).
pub fn range(journal: &[JournalEntry]) -> ForkRange {
    let top: Vec<&JournalEntry> = journal.iter().filter(|e| e.scope.is_empty()).collect();
    let replies: BTreeMap<u32, Option<RecordedReply>> = top
        .iter()
        .filter(|e| e.step == "reply")
        .map(|e| (e.turn, serde_json::from_str(&e.body).ok()))
        .collect();
    let finished = |turn: u32| {
        let Some(Some(reply)) = replies.get(&turn) else {
            return false;
        };
        (0..reply.assistant.tool_calls.len()).all(|position| {
            let result = JournalEntry::result_key(position);
            let legacy = format!("result:{}", reply.assistant.tool_calls[position].id);
            top.iter()
                .any(|e| e.turn == turn && (e.step == result || e.step == legacy))
        })
    };
    let mut last = 1;
    while finished(last) {
        last += 1;
    }
    let recorded = replies.keys().next_back().copied().unwrap_or(1);
    ForkRange {
        last,
        default: recorded.clamp(1, last),
    }
}

/// The entries a fork at `at_turn` replays; `keep_input`: whether the
/// rendered input is copied (see the module's documentation).
pub fn seed(journal: &[JournalEntry], at_turn: u32, keep_input: bool) -> Vec<JournalEntry> {
    journal
        .iter()
        .filter(|e| match started_in(&e.scope) {
            Some(turn) => turn < at_turn,
            None => false,
        })
        .filter(|e| keep_input || !(e.scope.is_empty() && e.turn == 0 && e.step == "input"))
        .filter(|e| !e.scope.is_empty() || e.turn < at_turn)
        .cloned()
        .collect()
}

/// The top-level turn an entry's scope belongs to: `Some(0)` for the
/// top-level run's own scope (its turn decides), the starting turn for a
/// nested run's scope (`"2:0/…"`), `None` for a scope of something else (a
/// workflow's checkpoints, a group chat's replies), which no fork copies.
fn started_in(scope: &str) -> Option<u32> {
    if scope.is_empty() {
        return Some(0);
    }
    let (turn, _) = scope.split_once(':')?;
    turn.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Message, TokenUsage, ToolCall};

    fn reply(calls: usize) -> String {
        serde_json::to_string(&RecordedReply {
            assistant: Message::assistant(
                None,
                (0..calls)
                    .map(|i| ToolCall::new(format!("c{i}"), "t", serde_json::json!({})))
                    .collect(),
            ),
            parse_errors: vec![None; calls],
            usage: TokenUsage::default(),
            model: "m".into(),
            response_model: None,
            response_id: None,
            finish_reason: None,
        })
        .unwrap()
    }

    fn journal() -> Vec<JournalEntry> {
        vec![
            JournalEntry::new("", 0, "input", "[]".into()),
            JournalEntry::new("", 1, "reply", reply(1)),
            JournalEntry::new("", 1, "start@0", "{}".into()),
            JournalEntry::new("", 1, "result@0", "{}".into()),
            JournalEntry::new("1:0/", 0, "bundle", "{}".into()),
            JournalEntry::new("1:0/", 1, "reply", reply(0)),
            JournalEntry::new("", 2, "reply", reply(1)),
            JournalEntry::new("", 2, "result@0", "{}".into()),
            JournalEntry::new("2:0/", 1, "reply", reply(0)),
            JournalEntry::new("", 3, "reply", reply(0)),
            JournalEntry::new("workflow/", 1, "checkpoint", "{}".into()),
        ]
    }

    fn steps(entries: &[JournalEntry]) -> Vec<String> {
        entries
            .iter()
            .map(|e| format!("{}{}:{}", e.scope, e.turn, e.step))
            .collect()
    }

    #[test]
    fn a_fork_copies_the_turns_before_it_and_the_runs_they_started() {
        let journal = journal();
        assert_eq!(steps(&seed(&journal, 1, true)), ["0:input"]);
        assert_eq!(
            steps(&seed(&journal, 2, true)),
            [
                "0:input",
                "1:reply",
                "1:start@0",
                "1:result@0",
                "1:0/0:bundle",
                "1:0/1:reply"
            ]
        );
        let edited = seed(&journal, 3, false);
        assert!(!steps(&edited).contains(&"0:input".to_string()));
        assert!(steps(&edited).contains(&"2:0/1:reply".to_string()));
        assert!(!steps(&edited).iter().any(|s| s.starts_with("workflow")));
    }

    #[test]
    fn the_range_ends_at_the_first_unfinished_turn() {
        let journal = journal();
        assert_eq!(
            range(&journal),
            ForkRange {
                last: 4,
                default: 3
            }
        );
        // Turn 2's call has no result: a fork can start at 2 at the latest.
        let cut: Vec<JournalEntry> = journal
            .into_iter()
            .filter(|e| !(e.turn == 2 && e.step == "result@0") && e.turn != 3)
            .collect();
        assert_eq!(
            range(&cut),
            ForkRange {
                last: 2,
                default: 2
            }
        );
        assert_eq!(
            range(&[]),
            ForkRange {
                last: 1,
                default: 1
            }
        );
    }
}
