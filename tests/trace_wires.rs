//! One trace across wires: a W3C `traceparent` a caller sends in its wire's
//! own place — A2A's message `metadata`, MCP's `_meta`, AG-UI's
//! `forwardedProps` — or as the HTTP header on any way in (what
//! OpenTelemetry's HTTP instrumentation sends) makes the job's
//! `invoke_agent` span a child of the caller's span; the `tracestate` sent
//! beside it is every span's `trace_state`, and one that is not W3C trace
//! context is left out.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use common::daemon::{Site, client, get};
use common::mock_server;
use common::otlp::collector;
use serde_json::{Value, json};

const SCRIPT: &str = r#"
replies:
  - content: "first answer"
  - content: "second answer"
"#;

const BUNDLE: &str = r#"name: helper
version: "1"
description: answers
model: {endpoint: mock, name: mock-model}
prompts: {system: "You help.", user: "{{ input }}"}
"#;

const A2A_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const MCP_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traceparent_in_a2a_metadata_and_mcp_meta_parents_the_jobs_spans() {
    let mock = mock_server(SCRIPT).await;
    let (otlp, spans, _) = collector().await;
    let site = Site::new(
        &mock.base_url(),
        &format!("[telemetry]\notlp_endpoint = \"{otlp}\"\n"),
    );
    site.put_bundle("helper", BUNDLE);
    let daemon = site.start();
    let http = client();

    let sent: Value = http
        .post(daemon.url("/a2a/helper"))
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
            "message": {"messageId": "m-trace", "role": "ROLE_USER", "parts": [{"text": "hello"}],
                        "metadata": {"traceparent": format!("00-{A2A_TRACE}-{CALLER_SPAN}-01"),
                                     "tracestate": "a2a=1"}}
        }}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        sent["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{sent}"
    );

    let called = http
        .post(daemon.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "helper")
        .json(
            &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "helper", "arguments": {"input": "hello again"},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientInfo": {"name": "trace-test", "version": "1"},
                    "io.modelcontextprotocol/clientCapabilities": {},
                    "traceparent": format!("00-{MCP_TRACE}-{CALLER_SPAN}-01"),
                    "tracestate": "mcp=1,rojo=00f067aa0ba902b7"
                }
            }}),
        )
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        called.contains(r#""isError":false"#) && called.contains(" answer"),
        "{called}"
    );
    assert_eq!(daemon.stop(), Some(0));

    let spans = spans.lock().unwrap().clone();
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    for (trace, state) in [
        (A2A_TRACE, "a2a=1"),
        (MCP_TRACE, "mcp=1,rojo=00f067aa0ba902b7"),
    ] {
        let root = spans
            .iter()
            .find(|s| s.name == "invoke_agent helper" && hex(&s.trace_id) == trace)
            .unwrap_or_else(|| panic!("no job span in the caller's trace {trace}"));
        assert_eq!(hex(&root.parent_span_id), CALLER_SPAN);
        assert_eq!(root.trace_state, state, "the caller's tracestate");
    }
}

const ANSWERS: &str = "replies:\n  - content: \"an answer\"\n";

/// The caller's traceparent of trace number `n`.
fn caller_trace(n: u8) -> (String, String) {
    let trace = format!("{n:02x}{}", "ab".repeat(15));
    (trace.clone(), format!("00-{trace}-{CALLER_SPAN}-01"))
}

/// Every way in reads the `traceparent` and `tracestate` headers (issue
/// 49): the job API, a batch, chat completions, Responses, AG-UI (and its
/// `forwardedProps`), the runtime API's agent message and query, A2A and
/// MCP. Each job keeps the caller's traceparent and tracestate, its
/// `invoke_agent` span is the caller span's child, and every span of its
/// trace carries the tracestate; an invalid tracestate is left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_traceparent_header_joins_the_callers_trace_on_every_way_in() {
    let mock = mock_server(ANSWERS).await;
    let (otlp, spans, _) = collector().await;
    let site = Site::new(
        &mock.base_url(),
        &format!("[telemetry]\notlp_endpoint = \"{otlp}\"\n[runtime]\nrouter = \"router\"\n"),
    );
    site.put_bundle("helper", BUNDLE);
    site.put_bundle("router", &BUNDLE.replace("name: helper", "name: router"));
    let daemon = site.start();
    let http = client();
    let mcp_call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "helper", "arguments": {"input": "hello"},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "trace-test", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}
        }
    }});
    let ways: Vec<(&str, &str, Value)> = vec![
        (
            "job",
            "/v1/jobs",
            json!({"bundle": "helper", "input": "hello"}),
        ),
        (
            "batch",
            "/v1/jobs/batch",
            json!({"jobs": [{"bundle": "helper", "input": "hello"}]}),
        ),
        (
            "chat",
            "/v1/chat/completions",
            json!({"model": "bundle/helper", "messages": [{"role": "user", "content": "hello"}]}),
        ),
        (
            "responses",
            "/v1/responses",
            json!({"model": "bundle/helper", "input": "hello"}),
        ),
        (
            "agui",
            "/v1/agui/helper",
            json!({"threadId": "t-1", "runId": "r-1",
            "messages": [{"id": "m1", "role": "user", "content": "hello"}]}),
        ),
        (
            "agent message",
            "/api/agents/helper/message",
            json!({"content": "hello"}),
        ),
        ("query", "/api/query", json!({"query": "hello"})),
        (
            "a2a",
            "/a2a/helper",
            json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
            "message": {"messageId": "m-header", "role": "ROLE_USER", "parts": [{"text": "hello"}]}}}),
        ),
        ("mcp", "/mcp", mcp_call),
    ];
    let mut expected = Vec::new();
    for (n, (way, path, body)) in ways.into_iter().enumerate() {
        let (trace, traceparent) = caller_trace(n as u8 + 1);
        let tracestate = format!("sa=way{n},rojo=00f067aa0ba902b7");
        let mut request = http
            .post(daemon.url(path))
            .header("traceparent", &traceparent)
            .header("tracestate", &tracestate)
            .json(&body);
        if way == "mcp" {
            request = request
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", "2026-07-28")
                .header("mcp-method", "tools/call")
                .header("mcp-name", "helper");
        }
        let answer = request.send().await.unwrap();
        let status = answer.status();
        let text = answer.text().await.unwrap();
        assert!(status.is_success(), "{way}: {status} {text}");
        expected.push((way, trace, traceparent, Some(tracestate)));
    }
    // AG-UI's forwardedProps carry them when no header does.
    let (trace, traceparent) = caller_trace(0x20);
    let answer = http
        .post(daemon.url("/v1/agui/helper"))
        .json(&json!({"threadId": "t-2", "runId": "r-2",
                      "forwardedProps": {"traceparent": traceparent, "tracestate": "agui=1"},
                      "messages": [{"id": "m1", "role": "user", "content": "hello"}]}))
        .send()
        .await
        .unwrap();
    assert!(answer.status().is_success());
    answer.text().await.unwrap();
    expected.push((
        "agui forwardedProps",
        trace,
        traceparent,
        Some("agui=1".into()),
    ));
    // The job's own fields; then a tracestate that is not W3C trace context
    // (a key in capitals), dropped while its traceparent is kept.
    for (way, n, tracestate, kept) in [
        ("job fields", 0x21, "body=1", Some("body=1")),
        ("job, invalid tracestate", 0x22, "Bad=1", None),
    ] {
        let (trace, traceparent) = caller_trace(n);
        let answer = http
            .post(daemon.url("/v1/jobs"))
            .json(&json!({"bundle": "helper", "input": "hello",
                          "traceparent": traceparent, "tracestate": tracestate}))
            .send()
            .await
            .unwrap();
        assert!(answer.status().is_success(), "{way}");
        expected.push((way, trace, traceparent, kept.map(str::to_string)));
    }
    let (trace, traceparent) = caller_trace(0x23);
    let answer = http
        .post(daemon.url("/v1/jobs"))
        .header("traceparent", &traceparent)
        .header("tracestate", "a=1,a=2")
        .json(&json!({"bundle": "helper", "input": "hello"}))
        .send()
        .await
        .unwrap();
    assert!(answer.status().is_success());
    expected.push(("job, invalid tracestate header", trace, traceparent, None));

    let jobs = common::daemon::eventually(
        std::time::Duration::from_secs(30),
        "every job to end",
        || async {
            let jobs = get(&http, &daemon, "/v1/jobs?limit=100").await["jobs"].clone();
            let jobs = jobs.as_array().cloned().unwrap_or_default();
            jobs.iter()
                .all(|j| j["state"] == "succeeded")
                .then_some(jobs)
        },
    )
    .await;
    for (way, _, traceparent, tracestate) in &expected {
        let job = jobs
            .iter()
            .find(|j| j["traceparent"] == traceparent.as_str())
            .unwrap_or_else(|| {
                panic!("{way}: no job with the caller's traceparent {traceparent}: {jobs:?}")
            });
        assert_eq!(job["tracestate"], json!(tracestate), "{way}");
    }
    assert_eq!(daemon.stop(), Some(0));
    let spans = spans.lock().unwrap().clone();
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    for (way, trace, _, tracestate) in &expected {
        // The query's job is the router's.
        let root = spans
            .iter()
            .find(|s| s.name.starts_with("invoke_agent ") && hex(&s.trace_id) == *trace)
            .unwrap_or_else(|| panic!("{way}: no job span in the caller's trace {trace}"));
        assert_eq!(hex(&root.parent_span_id), CALLER_SPAN, "{way}");
        let tracestate = tracestate.as_deref().unwrap_or_default();
        for span in spans.iter().filter(|s| hex(&s.trace_id) == *trace) {
            assert_eq!(span.trace_state, tracestate, "{way}: span {}", span.name);
        }
    }
}
