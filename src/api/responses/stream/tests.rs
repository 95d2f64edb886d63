//! The translator's events: numbering, resuming, calls, approvals and
//! parks on the caller's calls.

use super::super::object::response;
use super::*;
use crate::approval::CallerCall;

fn stored(turn: u32, event: Value) -> String {
    let mut envelope = json!({"run_id": "j", "bundle": "b", "bundle_version": "1", "seq": 1,
                              "timestamp": "2026-01-01T00:00:00.000Z", "turn": turn});
    for (k, v) in event.as_object().unwrap() {
        envelope[k] = v.clone();
    }
    envelope.to_string()
}

fn call() -> String {
    stored(
        1,
        json!({"type": "ToolCall", "tool_name": "add", "call_id": "c1", "arguments": {"a": 1}}),
    )
}

fn result() -> String {
    stored(
        1,
        json!({"type": "ToolResult", "tool_name": "add", "call_id": "c1", "is_error": false,
               "duration_ms": 3, "output_preview": "2"}),
    )
}

fn reply(content: &str) -> String {
    stored(
        2,
        json!({"type": "ModelResponse", "duration_ms": 1, "content": content, "tool_calls_count": 0,
               "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
               "parsed_content": content, "parsed_tool_calls_count": 0}),
    )
}

fn finished(answer: &str) -> Job {
    let mut job: Job = serde_json::from_value(json!({
        "id": "j", "bundle": "b", "input": "x", "variables": {}, "priority": 0, "state": "succeeded",
        "attempts": 1, "max_attempts": 3, "crash_resumes": 0, "cancel_requested": false,
        "run_at": "", "created_at": "", "updated_at": ""}))
    .unwrap();
    job.result = Some(json!({"output": answer}));
    job
}

/// Every frame of one run: start, a call, live tokens, the reply, end.
fn run(after: Option<u64>, live: &[&str]) -> Vec<Frame> {
    let no_markup: crate::events::answer::CallStart = std::sync::Arc::new(|_: &str| None);
    let answer = AnswerStream::new("j", Some(no_markup), false);
    let mut t = Translator::new("j", answer, after);
    let mut queued = finished("");
    queued.state = crate::queue::JobState::Queued;
    let mut out = t.start(response(&queued, &[]));
    out.extend(t.stored(1, &call()));
    out.extend(t.stored(2, &result()));
    for piece in live {
        out.extend(t.token("j", 2, piece));
    }
    out.extend(t.stored(3, &reply("Hello world")));
    let done = finished("Hello world");
    out.extend(t.end(&done, |items| response(&done, items)));
    out
}

fn text_of(frames: &[Frame]) -> String {
    frames
        .iter()
        .filter(|f| f.kind == "response.output_text.delta")
        .map(|f| f.body["delta"].as_str().unwrap())
        .collect()
}

#[test]
fn numbers_grow_and_the_stream_has_every_part() {
    let frames = run(None, &["Hel", "lo"]);
    let numbers: Vec<u64> = frames
        .iter()
        .map(|f| f.body["sequence_number"].as_u64().unwrap())
        .collect();
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");
    let kinds: Vec<&str> = frames.iter().map(|f| f.kind).collect();
    assert_eq!(kinds[..2], ["response.created", "response.in_progress"]);
    assert_eq!(kinds.last(), Some(&"response.completed"));
    assert_eq!(text_of(&frames), "Hello world");
    let added: Vec<&Value> = frames
        .iter()
        .filter(|f| f.kind == "response.output_item.added")
        .map(|f| &f.body["item"]["type"])
        .collect();
    assert_eq!(added, [&json!("mcp_call"), &json!("message")]);
    // The daemon ran the call: never a `function_call` the client
    // would have to run.
    let call_events: Vec<&str> = frames
        .iter()
        .filter(|f| f.kind.contains("mcp_call") || f.body["item"]["type"] == "mcp_call")
        .map(|f| f.kind)
        .collect();
    assert_eq!(
        call_events,
        [
            "response.output_item.added",
            "response.mcp_call.in_progress",
            "response.mcp_call_arguments.delta",
            "response.mcp_call_arguments.done",
            "response.mcp_call.completed",
            "response.output_item.done",
        ]
    );
    let done = frames
        .iter()
        .find(|f| f.kind == "response.output_item.done" && f.body["item"]["type"] == "mcp_call")
        .unwrap();
    assert_eq!(done.body["item"]["output"], "2");
    assert_eq!(done.body["item"]["status"], "completed");
    assert_eq!(done.body["item"]["arguments"], "{\"a\":1}");
    assert!(frames.iter().all(|f| !f.kind.contains("function_call")));
}

#[test]
fn a_call_the_job_ended_without_a_result_for_is_incomplete() {
    let answer = AnswerStream::new("j", None, false);
    let mut t = Translator::new("j", answer, None);
    let mut frames = t.stored(1, &call());
    // A second attempt runs the call again: one item still.
    frames.extend(t.stored(2, &call()));
    let mut job = finished("");
    job.state = crate::queue::JobState::Cancelled;
    frames.extend(t.end(&job, |items| response(&job, items)));
    assert_eq!(t.items.len(), 1);
    assert_eq!(t.items[0]["status"], "incomplete");
    let kinds: Vec<&str> = frames.iter().map(|f| f.kind).collect();
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == "response.output_item.added")
            .count(),
        1
    );
    assert_eq!(kinds.last(), Some(&"response.cancelled"));
}

#[test]
fn resuming_after_any_event_sends_exactly_the_rest() {
    // The first stream streamed tokens live; the resumed one (after a
    // restart) knows only the stored events.
    let first = run(None, &["Hel", "lo"]);
    for cut in 0..first.len() {
        let after = first[cut].body["sequence_number"].as_u64().unwrap();
        let rest = run(Some(after), &[]);
        let had = &first[..=cut];
        assert_eq!(
            text_of(had) + &text_of(&rest),
            "Hello world",
            "resumed after event {cut}"
        );
        let kinds: Vec<&str> = had.iter().chain(&rest).map(|f| f.kind).collect();
        let count = |k: &str| kinds.iter().filter(|x| **x == k).count();
        assert_eq!(count("response.output_item.added"), 2, "{kinds:?}");
        assert_eq!(count("response.content_part.added"), 1, "{kinds:?}");
        assert_eq!(count("response.completed"), 1, "{kinds:?}");
        assert!(
            rest.iter()
                .all(|f| f.body["sequence_number"].as_u64().unwrap() > after)
        );
    }
}

#[test]
fn a_parked_call_is_an_approval_request_item_and_the_stream_goes_on() {
    let no_markup: crate::events::answer::CallStart = std::sync::Arc::new(|_: &str| None);
    let answer = AnswerStream::new("j", Some(no_markup), false);
    let mut t = Translator::new("j", answer, None);
    let parked = stored(
        1,
        json!({"type": "ApprovalRequested", "tool_name": "add", "call_id": "c1",
               "arguments": {"a": 1}, "digest": "sha256:d"}),
    );
    let frames = t.stored(1, &parked);
    let kinds: Vec<&str> = frames.iter().map(|f| f.kind).collect();
    assert_eq!(
        kinds,
        ["response.output_item.added", "response.output_item.done"]
    );
    let item = &frames[1].body["item"];
    assert_eq!(item["type"], "mcp_approval_request");
    assert_eq!(item["name"], "add");
    assert_eq!(item["arguments"], "{\"a\":1}");
    assert_eq!(item["server_label"], "b");
    assert_eq!(item["decide"], "POST /v1/jobs/j/approvals/c1");
    // The decision's events follow: the call, the answer, the end.
    let mut rest = t.stored(2, &call());
    rest.extend(t.stored(3, &result()));
    rest.extend(t.stored(4, &reply("Hello world")));
    let done = finished("Hello world");
    rest.extend(t.end(&done, |items| response(&done, items)));
    assert_eq!(text_of(&rest), "Hello world");
    assert_eq!(t.items[0]["type"], "mcp_approval_request");
    // Resumed after the request, the stream does not repeat it.
    let after = frames[1].body["sequence_number"].as_u64().unwrap();
    let answer = AnswerStream::new("j", None, false);
    let mut resumed = Translator::new("j", answer, Some(after));
    assert!(resumed.stored(1, &parked).is_empty());
}

#[test]
fn positions_round_trip() {
    let place = Position {
        stored: 12345,
        text: 77,
        step: step::PART_DONE,
    };
    assert_eq!(Position::of(place.number()), place);
}

/// A job that parked on five calls of the caller's tools, then (resumed)
/// answered: the frames of the stream that ended at the park (`handed`)
/// or of a later one that goes on past it, after `after`.
fn parked_run(after: Option<u64>, handed: bool) -> Vec<Frame> {
    let no_markup: crate::events::answer::CallStart = std::sync::Arc::new(|_: &str| None);
    let answer = AnswerStream::new("j", Some(no_markup), true);
    let mut t = Translator::new("j", answer, after).handing_over(["shout".to_string()]);
    let mut queued = finished("");
    queued.state = crate::queue::JobState::Queued;
    let mut out = t.start(response(&queued, &[]));
    let calls: Vec<CallerCall> = (0..5)
        .map(|i| CallerCall {
            position: i,
            call_id: format!("c{i}"),
            tool: "shout".into(),
            arguments: json!({"text": i}),
        })
        .collect();
    for (seq, call) in (1..).zip(&calls) {
        let event = json!({"type": "ToolCall", "tool_name": "shout", "call_id": call.call_id,
                           "arguments": call.arguments});
        out.extend(t.stored(seq, &stored(1, event)));
    }
    let park = json!({"type": "JobState", "state": "needs_attention", "attempt": 1});
    out.extend(t.stored(6, &stored(1, park)));
    assert!(t.at_park());
    if handed {
        let mut parked = finished("");
        parked.state = crate::queue::JobState::NeedsAttention;
        out.extend(t.hand_over(&calls, |items| response(&parked, items)));
        return out;
    }
    let running = json!({"type": "JobState", "state": "running", "attempt": 2});
    out.extend(t.stored(7, &stored(2, running)));
    assert!(!t.at_park());
    out.extend(t.stored(8, &reply("Hello world")));
    let done = finished("Hello world");
    out.extend(t.end(&done, |items| response(&done, items)));
    out
}

#[test]
fn a_park_hands_every_call_over_and_a_resume_from_it_sends_the_rest() {
    let first = parked_run(None, true);
    let numbers: Vec<u64> = first
        .iter()
        .map(|f| f.body["sequence_number"].as_u64().unwrap())
        .collect();
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");
    let kinds: Vec<&str> = first.iter().map(|f| f.kind).collect();
    assert_eq!(kinds.len(), 2 + 5 * 4 + 1, "{kinds:?}");
    assert!(kinds.iter().all(|k| !k.contains("mcp_call")), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"response.completed"));
    let output = &first.last().unwrap().body["response"]["output"];
    assert_eq!(output.as_array().unwrap().len(), 5, "{output}");
    assert_eq!(output[4]["type"], "function_call");
    assert_eq!(output[4]["call_id"], "c4");
    // Picked up after any of the park's events once the job answered
    // (numbered past the step bits, for five calls): the answer whole,
    // in one message.
    for had in &first[2..] {
        let after = had.body["sequence_number"].as_u64().unwrap();
        let rest = parked_run(Some(after), false);
        assert_eq!(text_of(&rest), "Hello world", "after {}", had.kind);
        let opened = rest
            .iter()
            .filter(|f| f.kind == "response.output_item.added")
            .count();
        assert_eq!(opened, 1, "after {}", had.kind);
        assert!(
            rest.iter()
                .all(|f| f.body["sequence_number"].as_u64().unwrap() > after)
        );
    }
}
