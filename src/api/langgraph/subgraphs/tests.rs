//! A nested run told as a subgraph, without a daemon.

use serde_json::json;

use super::*;
use crate::events::ParentRun;
use crate::journal::{RecordedReply, RecordedResult};
use crate::types::{Message, TokenUsage, ToolCall, ToolResult};

fn job() -> RunInfo {
    RunInfo {
        job: "j".into(),
        thread: Some("t".into()),
        graph: "boss".into(),
        assistant: "a".into(),
        prior: vec![json!({"type": "human", "id": "old:in"})],
        namespace: Vec::new(),
    }
}

fn envelope(run: &str, seq: u64, event: Event) -> EventEnvelope {
    let parent = run.rsplit_once('/').map(|(parent, _)| ParentRun {
        run_id: parent.into(),
        call_id: "c1".into(),
        depth: 1,
    });
    EventEnvelope {
        run_id: run.into(),
        bundle: "adder".into(),
        bundle_version: "1".into(),
        parent,
        seq,
        timestamp: "2026-12-01T00:00:00.000Z".into(),
        event,
    }
}

fn reply(content: Option<&str>, calls: &[&str]) -> String {
    let calls = calls
        .iter()
        .map(|id| ToolCall::new(*id, "add", json!({"a": 2, "b": 3})))
        .collect();
    serde_json::to_string(&RecordedReply {
        assistant: Message::assistant(content.map(str::to_string), calls),
        parse_errors: Vec::new(),
        usage: TokenUsage::default(),
        model: "m".into(),
        response_model: None,
        response_id: None,
        finish_reason: None,
    })
    .unwrap()
}

/// The nested run `j/1:0` (the agent call `c1` of the job's turn 1) as
/// recorded: a call of `add`, its result, the answer.
fn journal() -> Vec<JournalEntry> {
    let result = serde_json::to_string(&RecordedResult {
        result: ToolResult {
            call_id: "n1".into(),
            name: "add".into(),
            output: "5".into(),
            is_error: false,
        },
        error_code: None,
    })
    .unwrap();
    vec![
        JournalEntry::new("", 1, "reply", reply(None, &["c1"])),
        JournalEntry::new("1:0/", 1, "reply", reply(None, &["n1"])),
        JournalEntry::new("1:0/", 1, "result@0", result),
        JournalEntry::new("1:0/", 2, "reply", reply(Some("5"), &[])),
    ]
}

fn model(turn: u32) -> Event {
    Event::ModelRequest {
        turn,
        messages_count: 1,
        tools_count: 1,
        model: "m".into(),
        parameters: Value::Null,
        messages: Value::Null,
    }
}

fn tool(turn: u32, call: &str, arguments: Value) -> Event {
    Event::ToolCall {
        turn,
        tool_name: "helper".into(),
        call_id: call.into(),
        arguments,
    }
}

/// The job's log from its agent call to the nested run's end.
fn log() -> Vec<EventEnvelope> {
    let end = Event::KernelEnd {
        turn_count: 2,
        termination_reason: crate::types::TerminationReason::NoToolCalls,
        total_duration_ms: 1,
        error: None,
        error_type: None,
    };
    vec![
        envelope("j", 1, model(1)),
        envelope("j", 2, tool(1, "c1", json!({"input": "2+3"}))),
        envelope("j/1:0", 3, model(1)),
        envelope("j/1:0", 4, tool(1, "n1", json!({"a": 2, "b": 3}))),
        envelope("j/1:0", 5, model(2)),
        envelope("j/1:0", 6, end),
    ]
}

fn told(after: Option<u64>) -> Vec<Frame> {
    let modes = Modes::read(["values", "updates", "messages-tuple"]).unwrap();
    let mut subgraphs = Subgraphs::new(&job(), modes, after);
    let journal = journal();
    let mut frames = Vec::new();
    for envelope in log() {
        let read = subgraphs
            .wants_journal(&envelope)
            .then_some(journal.as_slice());
        frames.extend(subgraphs.stored(envelope.seq, &envelope, read));
    }
    frames
}

#[test]
fn an_agent_calls_run_is_told_in_its_subgraphs_namespace() {
    let frames = told(None);
    let namespace = frames[0].namespace.clone();
    assert_eq!(namespace.len(), 1);
    let (node, task) = namespace[0].split_once(':').unwrap();
    assert_eq!(node, "tools");
    assert!(Uuid::parse_str(task).is_ok(), "{task}");
    assert!(frames.iter().all(|f| f.namespace == namespace));
    assert!(frames[0].name().starts_with("values|tools:"));
    // Its input is what the agent call asked; then each super-step.
    let values: Vec<&Value> = frames
        .iter()
        .filter(|f| f.event == "values")
        .map(|f| &f.data["messages"])
        .collect();
    assert_eq!(
        values[0],
        &json!([{
            "type": "human", "id": "j/1:0:in", "content": "2+3", "name": null,
            "additional_kwargs": {}, "response_metadata": {},
        }])
    );
    assert_eq!(values.len(), 4, "input, reply, tool result, answer");
    assert_eq!(values[3].as_array().unwrap().len(), 4);
    assert_eq!(values[3][3]["content"], "5");
    let updates: Vec<&Value> = frames
        .iter()
        .filter(|f| f.event == "updates")
        .map(|f| &f.data)
        .collect();
    assert!(updates[0].get("model").is_some() && updates[1].get("tools").is_some());
    let tuple = frames.iter().find(|f| f.event == "messages").unwrap();
    let checkpoint_ns = tuple.data[1]["langgraph_checkpoint_ns"].as_str().unwrap();
    assert!(
        checkpoint_ns.starts_with(&format!("{}|model:", namespace[0])),
        "{checkpoint_ns}"
    );
    // Numbered where they stand in the job's log, in order.
    let ids: Vec<u64> = frames.iter().filter_map(|f| f.id).collect();
    assert_eq!(ids.len(), frames.len());
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
}

#[test]
fn a_stream_resumed_after_an_id_gets_exactly_what_follows() {
    let whole = told(None);
    let cut = whole[3].id.unwrap();
    let rest = told(Some(cut));
    assert_eq!(rest, whole[4..].to_vec());
}

#[test]
fn a_nested_runs_tokens_stream_in_its_namespace_and_the_jobs_are_not_its() {
    let modes = Modes::read(["messages-tuple"]).unwrap();
    let mut subgraphs = Subgraphs::new(&job(), modes, None);
    let token = |run: &str| Token {
        run_id: run.into(),
        turn: 2,
        text: "5".into(),
        event: None,
    };
    assert!(subgraphs.token(&token("j")).is_empty());
    let frames = subgraphs.token(&token("j/1:0"));
    assert_eq!(frames.len(), 1);
    assert!(frames[0].name().starts_with("messages|tools:"));
    assert_eq!(frames[0].data[0]["id"], "j/1:0:t2");
    assert_eq!(frames[0].id, None);
}

#[test]
fn a_stage_is_its_own_node_and_a_run_it_nests_goes_below_it() {
    let stage = segment("j/review", "review");
    assert!(stage.starts_with("review:"));
    assert_eq!(
        segment("j/review", "review"),
        stage,
        "the same id on every read"
    );
    assert_ne!(segment("j/2:1", "2:1"), segment("j/1:0", "1:0"));
    assert!(segment("j/2:1", "2:1").starts_with("tools:"));
    let journal = vec![JournalEntry::new(
        "0:review/",
        1,
        "reply",
        reply(Some("ok"), &[]),
    )];
    assert_eq!(
        nested_scope(&journal, "", "review").as_deref(),
        Some("0:review/")
    );
    assert_eq!(nested_scope(&journal, "", "other"), None);
}

/// An agent call's result is recorded with its nested run's end, long
/// after the call's start was stored: it is told there, whether a stream
/// reads the log as it happens or after.
#[test]
fn an_agent_calls_result_is_told_at_its_nested_runs_end() {
    let mut journal = journal();
    let result = serde_json::to_string(&RecordedResult {
        result: ToolResult {
            call_id: "c1".into(),
            name: "helper".into(),
            output: "\"5\"".into(),
            is_error: false,
        },
        error_code: None,
    })
    .unwrap();
    journal.push(JournalEntry::new("", 1, "result@0", result));
    let steps = nested_steps("j", None, &journal, "");
    let agent_result = steps.last().unwrap();
    assert!(matches!(
        agent_result.kind,
        super::super::messages::StepKind::Result { nested: true, .. }
    ));
    let log = log();
    let call = Told::of(&log[1], "j").unwrap();
    assert!(!call.is(agent_result), "not at the call's start");
    let end = Told::of(&log[5], "j").unwrap();
    assert_eq!(end, Told::Result(1, "c1".into()));
    assert!(end.is(agent_result));
    // The nested run's own events tell its steps, not the job's.
    assert_eq!(Told::of(&log[3], "j"), None);
    assert!(
        Told::of(&log[3], "j/1:0")
            .unwrap()
            .is(&nested_steps("j/1:0", None, &journal, "1:0/")[1])
    );
}

/// For the Agent Protocol's `lifecycle`: a nested run starts, caused by
/// its agent call, and completes, in its namespace; numbered whether a
/// stream tells lifecycles or not.
#[test]
fn a_nested_run_starts_by_its_call_and_completes_in_its_namespace() {
    let modes = Modes::read(["values"]).unwrap();
    let lifecycle = modes
        .clone()
        .with(super::super::stream_modes::Mode::Lifecycle);
    let tell = |modes: Modes| {
        let mut subgraphs = Subgraphs::new(&job(), modes, None);
        let journal = journal();
        log()
            .iter()
            .flat_map(|e| {
                let read = subgraphs.wants_journal(e).then_some(journal.as_slice());
                subgraphs.stored(e.seq, e, read)
            })
            .collect::<Vec<Frame>>()
    };
    let told = tell(lifecycle);
    let ends: Vec<&Frame> = told.iter().filter(|f| f.event == "lifecycle").collect();
    assert_eq!(ends.len(), 2);
    assert_eq!(
        ends[0].data,
        json!({"event": "started", "graph_name": "adder", "cause": {"type": "toolCall", "tool_call_id": "c1"}})
    );
    assert_eq!(ends[1].data["event"], "completed");
    assert_eq!(ends[0].namespace, told[1].namespace);
    // The values carry the same numbers either way.
    let values = |frames: &[Frame]| -> Vec<Option<u64>> {
        frames
            .iter()
            .filter(|f| f.event == "values")
            .map(|f| f.id)
            .collect()
    };
    assert_eq!(values(&told), values(&tell(modes)));
}
