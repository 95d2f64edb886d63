//! The daemon's OTLP export, received over HTTP on 127.0.0.1 and decoded with
//! the official protobuf definitions: the span tree of a two-turn job with a
//! failing tool, GenAI attributes, a nested agent under the tool call that
//! started it, metric attributes and buckets, and message content (as
//! log-based events) only when opted in.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::daemon::{
    Site, client, eventually, metric_samples, submit_and_wait, submit_body, wait_terminal,
};
use common::mock_server;
use common::otlp::{Received, attrs, collector, key_values};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::metrics::v1::{HistogramDataPoint, metric::Data};
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
description: Answers traced questions
model: {endpoint: mock, name: mock-model, sampling: {temperature: 0.5, max_tokens: 64}}
prompts: {user: "{{ input }}"}
tools:
  - {name: good, kind: process, description: Looks the answer up, command: [python3, -c, "print('{\"ok\": 1}')"]}
  - {name: bad, kind: process, description: Always fails, command: [python3, -c, "import sys; sys.exit(2)"]}
"#;

/// Runs one job of `traced` in conversation `chat-9`; what the collector
/// received once the daemon stopped (shutdown flushes every exporter).
async fn run_job(capture: bool) -> (Vec<Span>, Arc<Received>) {
    let server = mock_server(SCRIPT).await;
    let (otlp, spans, received) = collector().await;
    let extra =
        format!("[telemetry]\notlp_endpoint = \"{otlp}\"\ncapture_message_content = {capture}\n");
    let site = Site::new(&server.base_url(), &extra);
    site.put_bundle("traced", BUNDLE);
    let daemon = site.start();
    let http = client();
    let done = submit_and_wait(&http, &daemon, json!({"bundle": "traced", "input": "secret input", "conversation_id": "chat-9", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}), Duration::from_secs(30)).await;
    assert_eq!(done["state"], "succeeded");
    // Shutdown flushes the exporter.
    assert_eq!(daemon.stop(), Some(0));
    let spans = spans.lock().unwrap().clone();
    let mut with_job = spans;
    with_job.retain(|s| !s.name.is_empty());
    (with_job, received)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn span_tree_of_a_two_turn_job_with_a_failing_tool() {
    let (spans, received) = run_job(false).await;
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
    assert_eq!(a["gen_ai.agent.id"], "traced");
    assert_eq!(a["gen_ai.agent.description"], "Answers traced questions");
    // The job's conversation, not the job.
    assert_eq!(a["gen_ai.conversation.id"], "chat-9");
    let job = &a["structured_agents.job.id"];
    assert!(!job.is_empty() && job != "chat-9", "{a:?}");
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
        assert_eq!(a["gen_ai.conversation.id"], "chat-9");
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
        // Tools the daemon runs itself are agent-side: `extension`.
        assert_eq!(a["gen_ai.tool.type"], "extension");
        assert!(
            !a.contains_key("gen_ai.tool.call.arguments"),
            "content is opt-in"
        );
    }
    assert_eq!(attrs(good[0])["gen_ai.tool.call.id"], "ok-1");
    assert_eq!(
        attrs(good[0])["gen_ai.tool.description"],
        "Looks the answer up"
    );
    assert_eq!(attrs(bad[0])["gen_ai.tool.description"], "Always fails");
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
    assert!(
        received.logs.lock().unwrap().is_empty(),
        "content events are opt-in"
    );
    // The same measurements arrived as OTLP metrics (flushed at shutdown).
    let names = received.metric_names();
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

/// The histogram data points of OTLP metric `name`.
fn histogram_points(received: &Received, name: &str) -> Vec<HistogramDataPoint> {
    received
        .metrics
        .lock()
        .unwrap()
        .iter()
        .filter(|m| m.name == name)
        .flat_map(|m| match &m.data {
            Some(Data::Histogram(h)) => h.data_points.clone(),
            other => panic!("{name} is not a histogram: {other:?}"),
        })
        .collect()
}

/// Token usage names its provider; job and tool durations have the
/// daemon's own buckets (documented in docs/telemetry.md), not the SDK's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_metrics_name_the_provider_and_bucket_agent_latencies() {
    let (_, received) = run_job(false).await;
    let usage = histogram_points(&received, "gen_ai.client.token.usage");
    assert!(!usage.is_empty(), "{:?}", received.metric_names());
    for point in &usage {
        let a = key_values(&point.attributes);
        assert_eq!(a["gen_ai.provider.name"], "openai", "{a:?}");
        assert_eq!(a["gen_ai.operation.name"], "chat");
        assert!(a.contains_key("gen_ai.token.type"));
    }
    let job_buckets = [
        0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
    ];
    let tool_buckets = [
        0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
        300.0, 600.0,
    ];
    for (name, buckets) in [
        ("structured_agents.job.duration", &job_buckets[..]),
        ("structured_agents.tool.duration", &tool_buckets[..]),
    ] {
        let points = histogram_points(&received, name);
        assert!(!points.is_empty(), "no {name} data point");
        for point in points {
            assert_eq!(point.explicit_bounds, buckets, "{name}");
        }
    }
}

/// With content opted in, each model call's messages go out as one
/// `gen_ai.client.inference.operation.details` log record in its `chat`
/// span's context, in structured form; never as attributes of the span.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_content_only_when_opted_in() {
    let (spans, received) = run_job(true).await;
    let chats: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name == "chat mock-model")
        .collect();
    assert_eq!(chats.len(), 2);
    for chat in &chats {
        let a = attrs(chat);
        assert!(
            !a.contains_key("gen_ai.input.messages") && !a.contains_key("gen_ai.output.messages"),
            "content is an event, not the span's"
        );
    }
    let logs = received.logs.lock().unwrap().clone();
    assert_eq!(logs.len(), 2, "one event per model call: {logs:?}");
    for record in &logs {
        assert_eq!(
            record.event_name,
            "gen_ai.client.inference.operation.details"
        );
        let chat = chats
            .iter()
            .find(|c| c.span_id == record.span_id)
            .expect("the event is in a chat span's context");
        assert_eq!(record.trace_id, chat.trace_id);
        let a = key_values(&record.attributes);
        assert_eq!(a["gen_ai.operation.name"], "chat");
        assert_eq!(a["gen_ai.request.model"], "mock-model");
        assert_eq!(a["gen_ai.conversation.id"], "chat-9");
        assert_eq!(a["gen_ai.response.id"], attrs(chat)["gen_ai.response.id"]);
        for key in ["gen_ai.input.messages", "gen_ai.output.messages"] {
            let value = record
                .attributes
                .iter()
                .find(|kv| kv.key == key)
                .and_then(|kv| kv.value.as_ref()?.value.clone());
            assert!(
                matches!(value, Some(AnyValue::ArrayValue(_))),
                "{key} is structured: {value:?}"
            );
        }
    }
    let all = format!("{logs:?}");
    assert!(all.contains("secret input"), "input messages captured");
    assert!(
        all.contains("final secret answer"),
        "output messages captured"
    );
    assert!(all.contains("\"parts\""), "messages as role and parts");
    let tools = format!(
        "{:?}",
        spans
            .iter()
            .filter(|s| s.name.starts_with("execute_tool"))
            .map(attrs)
            .collect::<Vec<_>>()
    );
    assert!(tools.contains("secret question"), "tool arguments captured");
}

/// A bundle calling another bundle as a tool: the child's `invoke_agent`
/// hangs under the `execute_tool` span of the call that started it. A job
/// outside any conversation carries no conversation id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_agent_sits_under_the_tool_call_that_started_it() {
    let script = r#"
replies:
  - match: parent question
    turn: 1
    tool_calls: [{id: call-7, name: ask_child, arguments: {input: "child question"}}]
  - match: parent question
    turn: 2
    content: parent done
  - match: child question
    content: child answer
"#;
    let server = mock_server(script).await;
    let (otlp, spans, _) = collector().await;
    let site = Site::new(
        &server.base_url(),
        &format!("[telemetry]\notlp_endpoint = \"{otlp}\"\n"),
    );
    site.put_bundle(
        "child",
        "name: child\nversion: \"1\"\ndescription: Answers for the parent\nmodel: {endpoint: mock, name: mock-model}\nprompts: {user: \"{{ input }}\"}\n",
    );
    site.put_bundle(
        "parent",
        "name: parent\nversion: \"1\"\nmodel: {endpoint: mock, name: mock-model}\nprompts: {user: \"{{ input }}\"}\ntools:\n  - {name: ask_child, kind: agent, bundle: child, description: Asks the child agent}\n",
    );
    let daemon = site.start();
    let http = client();
    let done = submit_and_wait(
        &http,
        &daemon,
        json!({"bundle": "parent", "input": "parent question"}),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(daemon.stop(), Some(0));
    let spans = spans.lock().unwrap().clone();
    let span = |name: &str| {
        let found: Vec<&Span> = spans.iter().filter(|s| s.name == name).collect();
        assert_eq!(
            found.len(),
            1,
            "{name}: {:?}",
            spans.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
        found[0].clone()
    };
    let (parent, tool, child) = (
        span("invoke_agent parent"),
        span("execute_tool ask_child"),
        span("invoke_agent child"),
    );
    assert_eq!(tool.parent_span_id, parent.span_id);
    assert_eq!(
        child.parent_span_id, tool.span_id,
        "the child run is the tool call's"
    );
    assert_eq!(
        (&tool.trace_id, &child.trace_id),
        (&parent.trace_id, &parent.trace_id)
    );
    let child_chat = spans
        .iter()
        .find(|s| s.name == "chat mock-model" && s.parent_span_id == child.span_id)
        .expect("the child's model call under the child run");
    assert_eq!(child_chat.trace_id, parent.trace_id);
    let (p, t, c) = (attrs(&parent), attrs(&tool), attrs(&child));
    assert_eq!(t["gen_ai.tool.type"], "extension");
    assert_eq!(t["gen_ai.tool.description"], "Asks the child agent");
    assert_eq!(c["gen_ai.agent.id"], "child");
    assert_eq!(c["gen_ai.agent.description"], "Answers for the parent");
    assert!(
        !p.contains_key("gen_ai.agent.description"),
        "no description, none made up"
    );
    for run in [&p, &c] {
        assert!(!run.contains_key("gen_ai.conversation.id"), "{run:?}");
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An unreachable collector never fails a job; the failure is logged once
/// per signal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_collector_is_logged_once_and_never_fatal() {
    let server = mock_server(SCRIPT).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // Content opted in: its events fail to export like the spans.
    let extra = format!(
        "[telemetry]\notlp_endpoint = \"http://127.0.0.1:{closed}\"\ncapture_message_content = true\n"
    );
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
    assert_eq!(
        log.matches("OTLP log event export failed").count(),
        1,
        "{log}"
    );
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

/// Each grade of an eval run is one `gen_ai.evaluation.result` log record,
/// parented to the `invoke_agent` span of the case's job, with the
/// grader, score and label; its explanation quotes the answer, so it
/// goes out only with content opted in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_grade_of_an_eval_is_an_evaluation_event_under_its_cases_run() {
    let script = r#"
replies:
  - {match: "say hi", content: "hello there"}
  - {match: "say bye", content: "ciao"}
"#;
    let server = mock_server(script).await;
    let (otlp, spans, received) = collector().await;
    let site = Site::new(
        &server.base_url(),
        &format!("[telemetry]\notlp_endpoint = \"{otlp}\"\n"),
    );
    let evals = site.path().join("bundles/graded/evals");
    std::fs::create_dir_all(&evals).unwrap();
    std::fs::write(
        evals.join("cases.jsonl"),
        "{\"id\": \"hi\", \"input\": \"say hi\", \"expected\": {\"answer\": \"hello\"}}\n{\"id\": \"bye\", \"input\": \"say bye\", \"expected\": {\"answer\": \"goodbye\"}}\n",
    )
    .unwrap();
    std::fs::write(
        evals.join("suite.yaml"),
        "graders:\n  - type: contains\n    expected: answer\n",
    )
    .unwrap();
    site.put_bundle(
        "graded",
        "name: graded\nversion: \"4\"\nmodel: {endpoint: mock, name: mock-model}\nprompts: {user: \"{{ input }}\"}\n",
    );
    let daemon = site.start();
    let http = client();
    let (status, job) =
        common::daemon::post_json(&http, &daemon, "/v1/bundles/graded/evals", json!({})).await;
    assert_eq!(status, 201, "{job}");
    let done = wait_terminal(
        &http,
        &daemon,
        job["id"].as_str().unwrap(),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(daemon.stop(), Some(0));

    let spans = spans.lock().unwrap().clone();
    let logs = received.logs.lock().unwrap().clone();
    let records: Vec<_> = logs
        .iter()
        .filter(|r| r.event_name == "gen_ai.evaluation.result")
        .collect();
    assert_eq!(records.len(), 2, "one grade per case: {logs:?}");
    for record in records {
        let a = key_values(&record.attributes);
        let case_job = &a["structured_agents.job.id"];
        let run = spans
            .iter()
            .find(|s| {
                s.name == "invoke_agent graded" && attrs(s)["structured_agents.job.id"] == *case_job
            })
            .unwrap_or_else(|| panic!("the case job {case_job}'s run was exported"));
        assert_eq!(
            (&record.trace_id, &record.span_id),
            (&run.trace_id, &run.span_id),
            "parented to the run it grades"
        );
        assert_eq!(a["gen_ai.evaluation.name"], "contains");
        assert_eq!(a["gen_ai.agent.name"], "graded");
        assert_eq!(a["gen_ai.agent.version"], "4");
        assert_eq!(
            a["structured_agents.eval.job.id"],
            job["id"].as_str().unwrap()
        );
        let expected = match a["structured_agents.eval.case"].as_str() {
            "hi" => ("1", "pass"),
            "bye" => ("0", "fail"),
            other => panic!("no case {other}"),
        };
        assert_eq!(
            (
                a["gen_ai.evaluation.score.value"].as_str(),
                a["gen_ai.evaluation.score.label"].as_str()
            ),
            expected,
            "{a:?}"
        );
        assert!(
            !a.contains_key("gen_ai.evaluation.explanation"),
            "a reason quotes the answer: content, not opted in"
        );
    }
}
