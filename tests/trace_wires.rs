//! One trace across wires: a W3C `traceparent` a caller sends in its wire's
//! own place — A2A's message `metadata`, MCP's `_meta` — makes the job's
//! `invoke_agent` span a child of the caller's span (the HTTP header is
//! covered with the Responses API in tests/responses_api.rs).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use common::daemon::{Site, client};
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
                        "metadata": {"traceparent": format!("00-{A2A_TRACE}-{CALLER_SPAN}-01")}}
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
                    "traceparent": format!("00-{MCP_TRACE}-{CALLER_SPAN}-01")
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
    for trace in [A2A_TRACE, MCP_TRACE] {
        let root = spans
            .iter()
            .find(|s| s.name == "invoke_agent helper" && hex(&s.trace_id) == trace)
            .unwrap_or_else(|| panic!("no job span in the caller's trace {trace}"));
        assert_eq!(hex(&root.parent_span_id), CALLER_SPAN);
    }
}
