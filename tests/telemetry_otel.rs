//! The daemon's OTLP export, received over HTTP on 127.0.0.1 and decoded with
//! the official protobuf definitions: the span tree of a two-turn job with a
//! failing tool, GenAI attributes, and message content only when opted in.

mod common;

use std::time::Duration;

use common::daemon::{
    Site, client, eventually, metric_samples, submit_and_wait, submit_body, wait_terminal,
};
use common::mock_server;
use common::otlp::{attrs, collector};
use opentelemetry_proto::tonic::trace::v1::{Span, span::SpanKind, status::StatusCode};
use serde_json::json;

const SCRIPT: &str = r#"
replies:
  - tool_calls: [{id: ok-1, name: good, arguments: {q: "secret question"}}, {id: bad-1, name: bad, arguments: {}}]
    usage: {prompt_tokens: 11, completion_tokens: 7}
  - content: "final secret answer"
    usage: {prompt_tokens: 20, completion_tokens: 5}
"#;

const BUNDLE: &str = r#"name: traced
version: "3"
model: {endpoint: mock, name: mock-model, sampling: {temperature: 0.5, max_tokens: 64}}
prompts: {user: "{{ input }}"}
tools:
  - {name: good, kind: process, command: [python3, -c, "print('{\"ok\": 1}')"]}
  - {name: bad, kind: process, command: [python3, -c, "import sys; sys.exit(2)"]}
"#;

async fn run_job(capture: bool) -> (Vec<Span>, Vec<String>) {
    let server = mock_server(SCRIPT).await;
    let (otlp, spans, names) = collector().await;
    let extra =
        format!("[telemetry]\notlp_endpoint = \"{otlp}\"\ncapture_message_content = {capture}\n");
    let site = Site::new(&server.base_url(), &extra);
    site.put_bundle("traced", BUNDLE);
    let daemon = site.start();
    let http = client();
    let done = submit_and_wait(&http, &daemon, json!({"bundle": "traced", "input": "secret input", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}), Duration::from_secs(30)).await;
    assert_eq!(done["state"], "succeeded");
    // Shutdown flushes the exporter.
    assert_eq!(daemon.stop(), Some(0));
    let spans = spans.lock().unwrap().clone();
    let mut with_job = spans;
    with_job.retain(|s| !s.name.is_empty());
    let names = names.lock().unwrap().clone();
    (with_job, names)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn span_tree_of_a_two_turn_job_with_a_failing_tool() {
    let (spans, names) = run_job(false).await;
    let by_name = |name: &str| spans.iter().filter(|s| s.name == name).collect::<Vec<_>>();
    let roots = by_name("invoke_agent traced");
    assert_eq!(
        roots.len(),
        1,
        "{:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let root = roots[0];
    assert_eq!(root.kind, SpanKind::Internal as i32);
    // Joined the submitted trace.
    assert_eq!(hex(&root.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(hex(&root.parent_span_id), "00f067aa0ba902b7");
    let a = attrs(root);
    assert_eq!(a["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(a["gen_ai.agent.name"], "traced");
    assert_eq!(a["gen_ai.agent.version"], "3");
    assert_eq!(a["gen_ai.request.model"], "mock-model");
    assert!(!a["gen_ai.conversation.id"].is_empty());
    assert_eq!(root.events.iter().filter(|e| e.name == "turn").count(), 2);

    let chats = by_name("chat mock-model");
    assert_eq!(chats.len(), 2);
    for chat in &chats {
        assert_eq!(chat.kind, SpanKind::Client as i32);
        assert_eq!(chat.parent_span_id, root.span_id);
        assert_eq!(chat.trace_id, root.trace_id);
        let a = attrs(chat);
        assert_eq!(a["gen_ai.operation.name"], "chat");
        assert_eq!(a["gen_ai.provider.name"], "openai");
        assert_eq!(a["gen_ai.request.model"], "mock-model");
        assert_eq!(a["server.address"], "127.0.0.1");
        assert!(a["server.port"].parse::<u16>().is_ok());
        assert_eq!(a["gen_ai.request.temperature"], "0.5");
        assert_eq!(a["gen_ai.request.max_tokens"], "64");
        assert!(a["gen_ai.response.id"].starts_with("chatcmpl-"));
        assert!(a.contains_key("gen_ai.response.finish_reasons"));
        assert!(
            a.contains_key("gen_ai.usage.input_tokens")
                && a.contains_key("gen_ai.usage.output_tokens")
        );
        assert!(
            !a.contains_key("gen_ai.input.messages") && !a.contains_key("gen_ai.output.messages"),
            "content is opt-in"
        );
    }
    let first = chats
        .iter()
        .find(|c| attrs(c)["gen_ai.usage.input_tokens"] == "11")
        .unwrap();
    assert_eq!(attrs(first)["gen_ai.usage.output_tokens"], "7");

    let good = by_name("execute_tool good");
    let bad = by_name("execute_tool bad");
    assert_eq!((good.len(), bad.len()), (1, 1));
    for tool in [good[0], bad[0]] {
        assert_eq!(tool.kind, SpanKind::Internal as i32);
        assert_eq!(tool.parent_span_id, root.span_id);
        let a = attrs(tool);
        assert_eq!(a["gen_ai.tool.type"], "function");
        assert!(
            !a.contains_key("gen_ai.tool.call.arguments"),
            "content is opt-in"
        );
    }
    assert_eq!(attrs(good[0])["gen_ai.tool.call.id"], "ok-1");
    assert!(!attrs(good[0]).contains_key("error.type"));
    let bad_attrs = attrs(bad[0]);
    assert_eq!(bad_attrs["gen_ai.tool.name"], "bad");
    assert_eq!(bad_attrs["error.type"], "tool_error");
    assert_eq!(
        bad[0].status.as_ref().unwrap().code,
        StatusCode::Error as i32
    );
    for span in &spans {
        let text = format!("{:?}", span.attributes);
        assert!(
            !text.contains("secret"),
            "message content leaked into {}",
            span.name
        );
    }
    // Reloads are spans of their own (the initial load is one).
    let reload = spans
        .iter()
        .find(|s| s.name == "reload")
        .expect("a reload span");
    assert_eq!(attrs(reload)["structured_agents.reload.result"], "applied");
    // The same measurements arrived as OTLP metrics (flushed at shutdown).
    for name in [
        "gen_ai.client.operation.duration",
        "gen_ai.client.token.usage",
        "structured_agents.jobs.finished",
        "structured_agents.tool.calls",
        "structured_agents.jobs.submitted",
    ] {
        assert!(
            names.iter().any(|n| n == name),
            "OTLP metric {name} missing from {names:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_content_only_when_opted_in() {
    let (spans, _) = run_job(true).await;
    let all = format!("{:?}", spans.iter().map(attrs).collect::<Vec<_>>());
    assert!(all.contains("secret input"), "input messages captured");
    assert!(
        all.contains("final secret answer"),
        "output messages captured"
    );
    assert!(all.contains("secret question"), "tool arguments captured");
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An unreachable collector never fails a job; the failure is logged once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_collector_is_logged_once_and_never_fatal() {
    let server = mock_server(SCRIPT).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let extra = format!("[telemetry]\notlp_endpoint = \"http://127.0.0.1:{closed}\"\n");
    let site = Site::new(&server.base_url(), &extra);
    site.put_bundle("traced", BUNDLE);
    let daemon = site.start();
    let http = client();
    for i in 0..3 {
        let done = submit_and_wait(
            &http,
            &daemon,
            json!({"bundle": "traced", "input": format!("x{i}")}),
            Duration::from_secs(30),
        )
        .await;
        assert_eq!(done["state"], "succeeded");
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    let log_path = daemon.stderr_log.clone();
    assert_eq!(daemon.stop(), Some(0));
    let log = std::fs::read_to_string(log_path).unwrap();
    assert_eq!(log.matches("OTLP span export failed").count(), 1, "{log}");
}

/// Concurrent tools of different lengths: each `execute_tool` span covers
/// its own call. Proven by order, never by duration: the slow tool blocks
/// until the test releases it, which it does only after it has seen the fast
/// tool's result counted, so the fast call provably ends first
/// however loaded the machine is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_spans_cover_their_own_call_when_tools_run_together() {
    let script = r#"
replies:
  - tool_calls: [{id: s-1, name: slow, arguments: {}}, {id: f-1, name: fast, arguments: {}}]
  - content: done
"#;
    let server = mock_server(script).await;
    let (otlp, spans, _) = collector().await;
    let site = Site::new(
        &server.base_url(),
        &format!("[telemetry]\notlp_endpoint = \"{otlp}\"\n"),
    );
    let release = site.path().join("release-slow");
    let bundle = format!(
        r#"name: timed
version: "1"
model: {{endpoint: mock, name: mock-model}}
prompts: {{user: "{{{{ input }}}}"}}
limits: {{max_concurrency: 2}}
tools:
  - {{name: slow, kind: process, timeout: 10m, command: [sh, -c, "while [ ! -e '{release}' ]; do sleep 0.02; done; echo '{{}}'"]}}
  - {{name: fast, kind: process, command: [python3, -c, "print('{{}}')"]}}
"#,
        release = release.display()
    );
    site.put_bundle("timed", &bundle);
    let daemon = site.start();
    let http = client();
    let job = submit_body(&http, &daemon, json!({"bundle": "timed", "input": "go"})).await;
    let id = job["id"].as_str().unwrap();
    // The metrics observer counts a call when it sees its `ToolResult`
    // event, which is stamped (the span's end) before that: once the fast
    // call is counted, its span has ended.
    eventually(
        Duration::from_secs(120),
        "the fast tool's result",
        || async {
            let calls = metric_samples(&http, &daemon, "structured_agents_tool_calls_total").await;
            calls
                .keys()
                .any(|series| series.contains(r#"tool="fast""#))
                .then_some(())
        },
    )
    .await;
    let released = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    std::fs::write(&release, "").unwrap();
    let done = wait_terminal(&http, &daemon, id, Duration::from_secs(120)).await;
    assert_eq!(done["state"], "succeeded");
    assert_eq!(daemon.stop(), Some(0));
    let spans = spans.lock().unwrap().clone();
    let span = |name: &str| {
        spans
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no span {name}"))
            .clone()
    };
    let (slow, fast) = (span("execute_tool slow"), span("execute_tool fast"));
    let ms = |nanos: u64| nanos / 1_000_000;
    assert!(
        ms(fast.end_time_unix_nano) <= released,
        "the fast span ends with its own call, before the slow tool was released"
    );
    assert!(
        ms(slow.end_time_unix_nano) >= released,
        "the slow span ends with its own call, after it was released"
    );
    assert!(
        slow.start_time_unix_nano < fast.end_time_unix_nano
            && fast.start_time_unix_nano < slow.end_time_unix_nano,
        "the two calls ran together (their spans overlap)"
    );
}
