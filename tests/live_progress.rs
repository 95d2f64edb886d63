//! Live progress on a job's event stream: a model call and a tool call are
//! shown as `progress` frames (no `id:`, never stored) as they start and
//! end, before the stored events of their step; a client that reconnects
//! with `Last-Event-ID` gets the stored events after it, then the live
//! frames. Every assertion is about order: the slow tool waits for a file
//! the test writes, so "while it runs" is a fact, not a timing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::path::Path;
use std::time::Duration;

use common::daemon::{Daemon, Site, client, submit};
use common::mock_server;
use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};
use serde_json::Value;

/// Turn 1 waits on `gate` (so the stream is open before turn 2's model
/// call), turn 2's model answers slowly with a call of `slow`, which runs
/// until the test releases it; turn 3 answers.
const SCRIPT: &str = r#"
replies:
  - turn: 1
    tool_calls: [{id: g1, name: gate, arguments: {}}]
  - turn: 2
    delay_ms: 300
    tool_calls: [{id: s1, name: slow, arguments: {n: 1}}]
  - turn: 3
    content: "done"
"#;

/// A process tool that answers once `file` exists. Idempotent: its start
/// is not journaled, so its stored `ToolCall` is held until its result is
/// (an `unsafe` tool's journaled start writes it out at once, and the
/// order of that commit and the live frame would be a race).
fn waiting_tool(name: &str, file: &Path) -> String {
    format!(
        r#"  - {{name: {name}, kind: process, effect: idempotent, timeout: 10m, command: [sh, -c, "while [ ! -e '{file}' ]; do sleep 0.02; done; echo '{{}}'"]}}"#,
        file = file.display()
    )
}

fn bundle(gate: &Path, slow: &Path) -> String {
    format!(
        "name: watched\nversion: \"1\"\nmodel: {{endpoint: mock, name: m}}\nprompts: {{user: \"{{{{ input }}}}\"}}\ntools:\n{}\n{}\n",
        waiting_tool("gate", gate),
        waiting_tool("slow", slow)
    )
}

/// One SSE frame: the last `id:` the client saw, the event name, the data.
#[derive(Debug, Clone)]
struct Frame {
    id: Option<u64>,
    kind: String,
    data: Value,
}

impl Frame {
    fn progress(&self, kind: &str, turn: u64) -> bool {
        self.kind == "progress" && self.data["kind"] == kind && self.data["turn"] == turn
    }

    fn stored(&self, kind: &str, turn: u64) -> bool {
        self.kind == "event" && self.data["type"] == kind && self.data["turn"] == turn
    }
}

async fn open(
    daemon: &Daemon,
    id: &str,
    last_event_id: Option<u64>,
) -> impl Stream<Item = Frame> + Unpin {
    // A stream lives as long as the test: no total timeout (the shared
    // client's 30 s cut it short on a loaded machine), only a limit on the
    // quiet between two reads.
    let streaming = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .read_timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let mut request = streaming.get(daemon.url(&format!("/v1/jobs/{id}/events")));
    if let Some(last) = last_event_id {
        request = request.header("Last-Event-ID", last.to_string());
    }
    let response = request.send().await.unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    Box::pin(response.bytes_stream().eventsource().map(|event| {
        let event = event.unwrap();
        Frame {
            id: event.id.parse().ok(),
            kind: event.event,
            data: serde_json::from_str(&event.data).unwrap_or(Value::Null),
        }
    }))
}

/// Reads frames into `seen` until one matches `until` (returned), or the
/// stream ends (a failure naming what was awaited).
async fn read_until(
    stream: &mut (impl Stream<Item = Frame> + Unpin),
    seen: &mut Vec<Frame>,
    what: &str,
    until: impl Fn(&Frame) -> bool,
) -> usize {
    while let Some(frame) = stream.next().await {
        seen.push(frame);
        if until(seen.last().unwrap()) {
            return seen.len() - 1;
        }
        assert_ne!(
            seen.last().unwrap().kind,
            "end",
            "ended before {what}: {seen:#?}"
        );
    }
    panic!("the stream ended before {what}: {seen:#?}")
}

fn position(seen: &[Frame], what: &str, matches: impl Fn(&Frame) -> bool) -> usize {
    seen.iter()
        .position(matches)
        .unwrap_or_else(|| panic!("no {what} in {seen:#?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_in_progress_show_before_their_stored_events_and_survive_a_reconnect() {
    let mock = mock_server(SCRIPT).await;
    let site = Site::new(&mock.base_url(), "");
    let (gate, slow) = (site.path().join("gate"), site.path().join("slow"));
    site.put_bundle("watched", &bundle(&gate, &slow));
    let daemon = site.start();
    let job = submit(&client(), &daemon, "watched", "go").await;
    let id = job["id"].as_str().unwrap();
    let mut first = open(&daemon, id, None).await;
    // The stream listens (it subscribed before answering): turn 2 may start.
    std::fs::write(&gate, "").unwrap();
    let mut seen = Vec::new();
    let started = read_until(&mut first, &mut seen, "the slow tool's start", |f| {
        f.progress("tool_call_started", 2)
    })
    .await;
    let call = &seen[started].data;
    assert_eq!(
        (&call["call_id"], &call["tool"], &call["arguments"]),
        (
            &Value::from("s1"),
            &Value::from("slow"),
            &serde_json::json!({"n": 1})
        )
    );
    assert_eq!(call["run_id"], id);
    // The tool runs (it waits for the test): neither its end nor its stored
    // `ToolCall` (held until its result is journaled) can have come.
    assert!(
        !seen.iter().any(|f| f.progress("tool_call_ended", 2)
            || f.stored("ToolCall", 2)
            || f.stored("ToolResult", 2)),
        "{seen:#?}"
    );
    // The model call of turn 2 showed as it started and ended, before any
    // stored event of its turn (its `ModelRequest` is stored with its reply).
    let model_started = position(&seen, "model_call_started", |f| {
        f.progress("model_call_started", 2)
    });
    let model_ended = position(&seen, "model_call_ended", |f| {
        f.progress("model_call_ended", 2)
    });
    // Its stored events were written with its reply, before the tool
    // started, but the live frame of the tool's start can overtake the
    // store read they come by: read on until they are there (the tool
    // still waits, so nothing of its own can be stored meanwhile).
    if !seen.iter().any(|f| f.stored("ModelRequest", 2)) {
        read_until(&mut first, &mut seen, "the stored ModelRequest", |f| {
            f.stored("ModelRequest", 2)
        })
        .await;
    }
    let stored_request = position(&seen, "stored ModelRequest", |f| {
        f.stored("ModelRequest", 2)
    });
    assert!(
        !seen.iter().any(|f| f.progress("tool_call_ended", 2)
            || f.stored("ToolCall", 2)
            || f.stored("ToolResult", 2)),
        "{seen:#?}"
    );
    assert!(
        model_started < model_ended && model_ended < stored_request,
        "{seen:#?}"
    );
    let frame = &seen[model_started].data;
    assert_eq!(
        (frame["model"].as_str(), frame["attempt"].as_u64()),
        (Some("m"), Some(1))
    );
    assert!(frame["messages"].as_u64().unwrap() >= 3, "{frame}");
    assert_eq!(seen[model_ended].data["ok"], true);
    // Progress frames have no id of their own: the client still reports
    // the last stored one, which `Last-Event-ID` resumption needs.
    let mut last_stored = None;
    for frame in &seen {
        match frame.kind.as_str() {
            "event" => last_stored = frame.id,
            "progress" => assert_eq!(frame.id, last_stored, "{frame:?}"),
            _ => {}
        }
    }

    // A client that reconnects while the tool runs: stored events after its
    // Last-Event-ID, then the live frames.
    let resume_after = last_stored.unwrap();
    let mut second = open(&daemon, id, Some(resume_after)).await;
    std::fs::write(&slow, "").unwrap();
    read_until(&mut first, &mut seen, "the end", |f| f.kind == "end").await;
    let mut resumed = Vec::new();
    read_until(&mut second, &mut resumed, "the end", |f| f.kind == "end").await;

    let ended = position(&seen, "tool_call_ended", |f| {
        f.progress("tool_call_ended", 2)
    });
    let stored_result = position(&seen, "stored ToolResult", |f| f.stored("ToolResult", 2));
    assert!(started < ended && ended < stored_result, "{seen:#?}");
    assert_eq!(seen[ended].data["ok"], true);

    let ids = |frames: &[Frame]| -> Vec<u64> {
        frames
            .iter()
            .filter(|f| f.kind == "event")
            .filter_map(|f| f.id)
            .collect()
    };
    let after: Vec<u64> = ids(&seen)
        .into_iter()
        .filter(|&n| n > resume_after)
        .collect();
    assert_eq!(
        ids(&resumed),
        after,
        "the same stored events, no gap, no repeat"
    );
    assert!(
        resumed.iter().any(|f| f.progress("tool_call_ended", 2)),
        "the reconnected stream has the live frames too: {resumed:#?}"
    );
    assert!(
        resumed.iter().any(|f| f.progress("model_call_started", 3)),
        "{resumed:#?}"
    );
}

/// Turn 1 waits on `gate`; turn 2 calls `wire`, which needs approval.
const APPROVAL_SCRIPT: &str = r#"
replies:
  - turn: 1
    tool_calls: [{id: g1, name: gate, arguments: {}}]
  - turn: 2
    tool_calls: [{id: w1, name: wire, arguments: {amount: 500}}]
"#;

/// A job that parks for a person tells its watchers what it waits for:
/// a `waiting` frame for `approval` naming the call and when its timeout
/// denies it.
#[tokio::test(flavor = "multi_thread")]
async fn a_job_parked_for_approval_shows_what_it_waits_for() {
    let mock = mock_server(APPROVAL_SCRIPT).await;
    let site = Site::new(&mock.base_url(), "");
    let gate = site.path().join("gate");
    let wire = r#"  - {name: wire, kind: process, effect: idempotent, parameters: {type: object, properties: {amount: {type: integer}}}, approval: {when: "args.amount > 100", timeout: 1h}, command: [sh, -c, "echo '{}'"]}"#;
    site.put_bundle(
        "watched",
        &format!(
            "name: watched\nversion: \"1\"\nmodel: {{endpoint: mock, name: m}}\nprompts: {{user: \"{{{{ input }}}}\"}}\ntools:\n{}\n{wire}\n",
            waiting_tool("gate", &gate)
        ),
    );
    let daemon = site.start();
    let job = submit(&client(), &daemon, "watched", "go").await;
    let id = job["id"].as_str().unwrap();
    let mut stream = open(&daemon, id, None).await;
    std::fs::write(&gate, "").unwrap();
    let mut seen = Vec::new();
    let waiting = read_until(&mut stream, &mut seen, "the approval wait", |f| {
        f.progress("waiting", 2)
    })
    .await;
    let wait = &seen[waiting].data;
    assert_eq!(
        (&wait["for"], &wait["call_id"], &wait["tool"]),
        (
            &Value::from("approval"),
            &Value::from("w1"),
            &Value::from("wire")
        )
    );
    assert!(wait["until"].is_string(), "the approval timeout: {wait}");
    // The stored `JobState` that parked it comes too (before or after the
    // frame: the frame is published once the park is committed).
    let parking = |f: &Frame| {
        f.kind == "event" && f.data["type"] == "JobState" && f.data["state"] == "awaiting_approval"
    };
    if !seen.iter().any(parking) {
        read_until(&mut stream, &mut seen, "the parking JobState", parking).await;
    }
}
