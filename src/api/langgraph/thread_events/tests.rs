use serde_json::json;

use super::*;

fn frame(event: &'static str, data: Value, id: Option<u64>) -> Frame {
    Frame::root(event, data, id)
}

fn methods(events: &[ProtocolEvent]) -> Vec<&str> {
    events.iter().map(|e| e.method).collect()
}

#[test]
fn numbers_are_the_runs_place_then_the_frames() {
    let mut run = RunEvents::new(1, "job", "talker");
    let base = 2 * RUN_ROOM;
    let opening = run.tell(&frame("metadata", json!({"run_id": "job"}), None));
    assert_eq!(opening[0].seq, Some(base));
    assert_eq!(opening[0].data["event"], "running");
    let values = run.tell(&frame("values", json!({"messages": []}), Some(5)));
    assert_eq!(values[0].seq, Some(base + 6 * FRAME_ROOM));
    let live = run.tell(&frame("custom", json!({"kind": "model_call"}), None));
    assert_eq!(live[0].seq, None);
    assert_eq!(live[0].data["name"], "progress");
    let end = run.tell(&frame("end", Value::Null, None));
    assert_eq!(end[0].seq, Some(run_base(2) - 1));
    assert_eq!(end[0].data["event"], "completed");
    let failed = run.tell(&frame("error", json!({"message": "boom"}), None));
    assert_eq!(failed[0].data["error"], "boom");
    let cancelled = run.tell(&frame("end", json!({"cancelled": "by its client"}), None));
    assert_eq!(cancelled[0].data["event"], "failed");
    assert_eq!(cancelled[0].data["error"], "cancelled: by its client");
    assert_eq!(cancelled[0].seq, end[0].seq);
    // The next run's numbers all come after.
    assert!(
        RunEvents::new(2, "next", "talker").tell(&frame("metadata", Value::Null, None))[0].seq
            > end[0].seq
    );
}

#[test]
fn an_interrupt_is_requested_then_answered_when_the_run_goes_on() {
    let mut run = RunEvents::new(0, "job", "bank");
    let interrupt = json!({"__interrupt__": [{"id": "job/d/c1", "value": {"call_id": "c1"}}]});
    let told = run.tell(&frame("updates", interrupt, Some(9)));
    assert_eq!(methods(&told), ["input.requested", "lifecycle"]);
    assert_eq!(told[0].data["interrupt_id"], "job/d/c1");
    assert_eq!(told[0].data["payload"], told[0].data["value"]);
    assert_eq!(told[1].data["event"], "interrupted");
    assert!(told[0].seq < told[1].seq);
    let resumed = run.tell(&frame(RESUMED, Value::Null, Some(100)));
    assert_eq!(methods(&resumed), ["input.answered", "lifecycle"]);
    assert_eq!(resumed[0].data["interrupt_ids"], json!(["job/d/c1"]));
    assert_eq!(resumed[1].data["event"], "running");
}

#[test]
fn a_message_starts_streams_its_new_text_and_finishes_once() {
    let mut run = RunEvents::new(0, "job", "talker");
    let metadata = json!({"job:t1": {"metadata": {"langgraph_node": "model"}}});
    let started = run.tell(&frame("messages/metadata", metadata, None));
    assert_eq!(started[0].data["event"], "message-start");
    assert_eq!(started[0].data["role"], "ai");
    assert_eq!(started[1].data["event"], "content-block-start");
    let he = run.tell(&frame(
        "messages/partial",
        json!([{"id": "job:t1", "content": "he"}]),
        None,
    ));
    assert_eq!(he[0].data["delta"]["text"], "he");
    let rest = run.tell(&frame(
        "messages/partial",
        json!([{"id": "job:t1", "content": "hello"}]),
        None,
    ));
    assert_eq!(rest[0].data["delta"]["text"], "llo");
    let message = json!({
        "type": "ai", "id": "job:t1", "content": "hello world",
        "tool_calls": [{"id": "c1", "name": "lookup", "args": {"q": 1}}],
        "usage_metadata": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5},
    });
    let done = run.tell(&frame("messages/complete", json!([message]), Some(7)));
    let events: Vec<&Value> = done.iter().map(|e| &e.data["event"]).collect();
    assert_eq!(
        events,
        [
            "content-block-delta",
            "content-block-finish",
            "content-block-start",
            "content-block-finish",
            "message-finish"
        ]
    );
    assert_eq!(done[0].data["delta"]["text"], " world");
    assert_eq!(done[1].data["content"]["text"], "hello world");
    assert_eq!(done[3].data["content"]["args"], json!({"q": 1}));
    assert_eq!(done[4].data["usage"]["total_tokens"], 5);
    assert!(done.windows(2).all(|w| w[0].seq < w[1].seq));
    // A message told whole, never seen live: its start comes with it.
    let tool = json!({"type": "tool", "id": "r1", "content": "42", "tool_call_id": "c1"});
    let whole = run.tell(&frame("messages/complete", json!([tool]), Some(8)));
    assert_eq!(whole[0].data["role"], "tool");
    assert_eq!(whole[2].data["delta"]["text"], "42");
}

#[test]
fn a_tool_call_starts_and_finishes_by_its_call_id() {
    let mut run = RunEvents::new(0, "job", "talker");
    let start = json!({"event": "on_tool_start", "name": "lookup", "run_id": "job:t1:c:1", "data": {"input": {"q": 1}}});
    let started = run.tell(&frame("events", start, Some(3)));
    assert_eq!(started[0].data["tool_call_id"], "c:1");
    assert_eq!(started[0].data["tool_name"], "lookup");
    let end = json!({"event": "on_tool_end", "run_id": "job:t1:c:1", "data": {"output": {"content": "42", "status": "success"}}});
    assert_eq!(
        run.tell(&frame("events", end, Some(4)))[0].data["event"],
        "tool-finished"
    );
    let failed = json!({"event": "on_tool_end", "run_id": "job:t1:c:1", "data": {"output": {"content": "no", "status": "error"}}});
    assert_eq!(
        run.tell(&frame("events", failed, Some(5)))[0].data["event"],
        "tool-error"
    );
    let model = json!({"event": "on_chat_model_stream", "run_id": "job:t1"});
    assert!(run.tell(&frame("events", model, None)).is_empty());
}

#[test]
fn a_filter_keeps_its_channels_after_since() {
    let names = |all: &[&str]| all.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let filter = Filter::read(
        &names(&["lifecycle", "input", "custom:progress"]),
        None,
        None,
        Some(10),
    )
    .unwrap();
    let event = |seq, method, data| ProtocolEvent {
        seq,
        method,
        data,
        namespace: Vec::new(),
    };
    assert!(filter.admits(&event(Some(11), "lifecycle", json!({}))));
    assert!(!filter.admits(&event(Some(10), "lifecycle", json!({}))));
    assert!(filter.admits(&event(Some(12), "input.requested", json!({}))));
    assert!(!filter.admits(&event(Some(12), "values", json!({}))));
    assert!(filter.admits(&event(None, "custom", json!({"name": "progress"}))));
    assert!(!filter.admits(&event(None, "custom", json!({"name": "other"}))));
    let below = Filter::read(
        &names(&["values"]),
        Some(&[vec!["sub".to_string()]]),
        None,
        None,
    )
    .unwrap();
    assert!(!below.admits(&event(Some(1), "values", json!({}))));
    let unknown = Filter::read(&names(&["values", "nope"]), None, None, None).unwrap_err();
    assert!(unknown.message.contains("\"nope\""), "{}", unknown.message);
}

#[test]
fn an_event_on_the_wire_names_its_seq_as_its_id() {
    let numbered = ProtocolEvent {
        seq: Some(7),
        method: "values",
        data: json!({"a": 1}),
        namespace: Vec::new(),
    };
    let wire = numbered.json(1_000);
    assert_eq!(wire["type"], "event");
    assert_eq!(wire["event_id"], "7");
    assert_eq!(wire["params"]["namespace"], json!([]));
    assert_eq!(wire["params"]["timestamp"], 1_000);
    let live = ProtocolEvent {
        seq: None,
        method: "custom",
        data: json!({}),
        namespace: vec!["tools:x".to_string()],
    }
    .json(1);
    assert!(live.get("seq").is_none() && live.get("event_id").is_none());
    assert_eq!(live["params"]["namespace"], json!(["tools:x"]));
}

/// Namespaces match as LangGraph's clients match them: by prefix, a part
/// asked without `:` matching by its name, within `depth` of the prefix.
#[test]
fn a_subscription_keeps_the_namespaces_under_its_prefixes_within_its_depth() {
    let at = |namespace: &[&str]| ProtocolEvent {
        seq: Some(1),
        method: "values",
        data: json!({}),
        namespace: namespace.iter().map(|part| part.to_string()).collect(),
    };
    let (root, child, grandchild) = (at(&[]), at(&["tools:a1"]), at(&["tools:a1", "tools:b2"]));
    let read = |namespaces: Option<Vec<Vec<&str>>>, depth| {
        let namespaces: Option<Vec<Vec<String>>> = namespaces.map(|all| {
            all.into_iter()
                .map(|ns| ns.into_iter().map(str::to_string).collect())
                .collect()
        });
        Filter::read(&["values".to_string()], namespaces.as_deref(), depth, None).unwrap()
    };
    let every = read(None, None);
    assert!(every.admits(&root) && every.admits(&child) && every.admits(&grandchild));
    assert!(every.reaches_nested());
    let only_root = read(Some(vec![vec![]]), Some(0));
    assert!(only_root.admits(&root) && !only_root.admits(&child));
    assert!(!only_root.reaches_nested());
    let one_down = read(Some(vec![vec![]]), Some(1));
    assert!(one_down.admits(&child) && !one_down.admits(&grandchild));
    let by_name = read(Some(vec![vec!["tools"]]), None);
    assert!(!by_name.admits(&root) && by_name.admits(&child) && by_name.admits(&grandchild));
    let by_id = read(Some(vec![vec!["tools:a1", "tools"]]), Some(0));
    assert!(!by_id.admits(&child) && by_id.admits(&grandchild));
    let other = read(Some(vec![vec!["tools:zz"]]), None);
    assert!(!other.admits(&child) && other.reaches_nested());
}
