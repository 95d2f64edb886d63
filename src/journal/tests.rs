//! Tests of `journal`.

use super::*;
use crate::types::{Role, ToolCall};
use serde_json::json;

fn reply(calls: &[&str]) -> String {
    serde_json::to_string(&RecordedReply {
        assistant: Message::assistant(
            None,
            calls
                .iter()
                .map(|id| ToolCall::new(*id, "t", json!({})))
                .collect(),
        ),
        parse_errors: vec![None; calls.len()],
        usage: TokenUsage::default(),
        model: "m".into(),
        response_model: None,
        response_id: None,
        finish_reason: None,
    })
    .unwrap()
}

struct Nowhere;
#[async_trait]
impl JournalStore for Nowhere {
    async fn record(&self, _: Vec<JournalEntry>) -> Result<(), StoreError> {
        Ok(())
    }
}

fn entry(scope: &str, turn: u32, step: &str, body: String) -> JournalEntry {
    JournalEntry::new(scope, turn, step, body)
}

#[test]
fn resume_turn_is_the_first_unfinished_turn() {
    let result = serde_json::to_string(&RecordedResult {
        result: ToolResult {
            call_id: "a".into(),
            name: "t".into(),
            output: "1".into(),
            is_error: false,
        },
        error_code: None,
    })
    .unwrap();
    let store: Arc<dyn JournalStore> = Arc::new(Nowhere);
    let empty = RunJournal::new("j", vec![], store.clone());
    assert_eq!(empty.resume_turn(), 1);
    assert!(!empty.has_records());

    let partial = RunJournal::new(
        "j",
        vec![
            entry("", 1, "reply", reply(&["a", "b"])),
            entry("", 1, "result@0", result.clone()),
        ],
        store.clone(),
    );
    assert_eq!(partial.resume_turn(), 1);

    let done = RunJournal::new(
        "j",
        vec![
            entry("", 1, "reply", reply(&["a"])),
            entry("", 1, "result@0", result.clone()),
            entry("2:0/", 1, "reply", reply(&[])),
        ],
        store.clone(),
    );
    assert_eq!(done.resume_turn(), 2);
    let child = done.child(2, "0");
    assert_eq!(child.resume_turn(), 2);
    assert_eq!(child.idempotency_key(1, "1"), "j:2:0:1:1");
    assert_eq!(done.idempotency_key(3, "0"), "j:3:0");

    // Two calls with one id are two steps; a journal of 0.1 (keyed by
    // the call id) still resumes.
    let same_id = RunJournal::new(
        "j",
        vec![
            entry("", 1, "reply", reply(&["a", "a"])),
            entry("", 1, "result@0", result.clone()),
        ],
        store.clone(),
    );
    assert_eq!(same_id.resume_turn(), 1);
    assert!(same_id.recorded_result(1, 1, "a/b").unwrap().is_none());
    let legacy = RunJournal::new(
        "j",
        vec![
            entry("", 1, "reply", reply(&["a"])),
            entry("", 1, "result:a", result),
        ],
        store,
    );
    assert_eq!(legacy.resume_turn(), 2);
    assert!(legacy.recorded_result(1, 0, "a").unwrap().is_some());
}

#[test]
fn a_corrupt_entry_is_an_error_naming_it() {
    let journal = RunJournal::new(
        "j",
        vec![entry("", 4, "reply", "{not json".into())],
        Arc::new(Nowhere),
    );
    let err = journal.recorded_reply(4).unwrap_err().to_string();
    assert!(err.contains("reply") && err.contains("turn 4"), "{err}");
}

#[test]
fn a_turns_conversation_is_the_input_then_each_earlier_turn_and_its_results() {
    let result = |id: &str, output: &str| {
        serde_json::to_string(&RecordedResult {
            result: ToolResult {
                call_id: id.into(),
                name: "t".into(),
                output: output.into(),
                is_error: false,
            },
            error_code: None,
        })
        .unwrap()
    };
    let input = serde_json::to_string(&vec![Message::user("add")]).unwrap();
    let journal = RunJournal::reading(
        "j",
        vec![
            entry("", 0, "input", input),
            entry("", 1, "reply", reply(&["a", "b"])),
            entry("", 1, "result@0", result("a", "1")),
            entry("", 1, "result@1", result("b", "2")),
            entry("", 2, "reply", reply(&["c"])),
        ],
    );
    let first = journal.conversation_before(1).unwrap().unwrap();
    assert_eq!(first, vec![Message::user("add")]);
    let second = journal.conversation_before(2).unwrap().unwrap();
    let said: Vec<_> = second
        .iter()
        .map(|m| (m.role, m.tool_call_id.as_deref(), m.content.as_deref()))
        .collect();
    assert_eq!(
        said,
        [
            (Role::User, None, Some("add")),
            (Role::Assistant, None, None),
            (Role::Tool, Some("a"), Some("1")),
            (Role::Tool, Some("b"), Some("2")),
        ]
    );
    // Turn 2's call has no result: turn 3 was never asked.
    assert_eq!(journal.conversation_before(3).unwrap(), None);
    assert!(!journal.is_durable(), "a journal to read records nothing");
}
