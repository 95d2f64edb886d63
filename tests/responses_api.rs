//! `/v1/responses` through the official Python `openai` SDK (the current
//! major, `.venv-current`): a background streamed response whose daemon is
//! SIGKILLed mid-stream resumes with `starting_after` on the restarted
//! daemon with exactly the missing events and the same answer as a
//! non-streamed call; cancel (also with the `openai` npm package, whose
//! cancel has no body); `previous_response_id`; a client's
//! `traceparent` is the parent of the job's spans; and a stream whose job
//! waits for approval says so (an `mcp_approval_request` item) and goes on
//! after the decision. The calls the daemon runs are `mcp_call` items with
//! their output (never `function_call`, a call for the client to run), and
//! parameters the bundle cannot honour are a 400 naming them.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::daemon::{Daemon, SHORT_LEASE, Site, client};
use common::otlp::collector;
use common::{mock_server, peer, python_current, repo};
use serde_json::{Value, json};

const ANSWER: &str = "The echo said x is 1, so the answer is 42.";

/// A tool call, then a slow answer: the daemon is killed while the model
/// thinks.
fn script(answer_delay_ms: u64) -> String {
    format!(
        r#"
replies:
  - tool_calls: [{{id: call-1, name: echo, arguments: {{x: 1}}}}]
    usage: {{prompt_tokens: 10, completion_tokens: 5, total_tokens: 15}}
  - content: "{ANSWER}"
    delay_ms: {answer_delay_ms}
    usage: {{prompt_tokens: 20, completion_tokens: 9, total_tokens: 29}}
"#
    )
}

const BUNDLE: &str = r#"name: echoer
version: "1"
model: {endpoint: mock, name: mock-model}
prompts: {system: "You echo.", user: "{{ input }}"}
tools:
  - name: echo
    kind: process
    description: echo the arguments
    effect: read_only
    command: [python3, -c, "import json,sys; print(json.dumps(json.load(sys.stdin)))"]
"#;

const MODEL: &str = "bundle/echoer";

fn client_script() -> String {
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/responses/client.py"
    )
    .to_string()
}

/// Runs the client script to its end; its stdout lines as JSON.
async fn run_client(daemon: &Daemon, args: &[&str]) -> Vec<Value> {
    let base = daemon.url("/v1");
    let mut client = Command::new(python_current());
    client.arg(client_script()).arg(&base).arg(MODEL).args(args);
    peer::json_lines(daemon, client).await
}

fn seq(event: &Value) -> u64 {
    event["sequence_number"].as_u64().unwrap()
}

fn text(events: &[Value]) -> String {
    events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect()
}

/// Streams a background response until its tool call is done, then kills
/// the daemon: the events the client got.
async fn stream_until_the_call(daemon: Daemon) -> Vec<Value> {
    let mut child = Command::new(python_current())
        .arg(client_script())
        .arg(daemon.url("/v1"))
        .arg(MODEL)
        .args(["stream", "What is x?"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let seen = tokio::task::spawn_blocking(move || {
        let mut seen = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let event: Value = serde_json::from_str(&line.unwrap()).unwrap();
            let call_done =
                event["type"] == "response.output_item.done" && event["item"]["type"] == "mcp_call";
            seen.push(event);
            if call_done {
                break;
            }
        }
        seen
    })
    .await
    .unwrap();
    daemon.kill9();
    let _ = child.kill();
    let _ = child.wait();
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_resumes_after_a_sigkill_with_exactly_the_missing_events() {
    let mock = mock_server(&script(2000)).await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle("echoer", BUNDLE);
    let first = stream_until_the_call(site.start_with_env(&[SHORT_LEASE])).await;
    let kinds: Vec<&str> = first.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds[..2],
        ["response.created", "response.in_progress"],
        "{kinds:?}"
    );
    assert_eq!(first.last().unwrap()["item"]["name"], "echo");
    assert_eq!(first.last().unwrap()["item"]["arguments"], r#"{"x":1}"#);
    // The daemon ran the call: its item carries the tool's output.
    assert_eq!(first.last().unwrap()["item"]["status"], "completed");
    assert_eq!(
        first.last().unwrap()["item"]["output"]
            .as_str()
            .unwrap()
            .trim(),
        r#"{"x": 1}"#
    );
    assert_eq!(text(&first), "", "the answer was not due before the kill");
    let id = first[0]["response"]["id"].as_str().unwrap().to_string();
    assert_eq!(first[0]["response"]["status"], "queued");
    let last = seq(first.last().unwrap());

    // The restarted daemon takes the job over once its lease expires.
    let daemon = site.start_with_env(&[SHORT_LEASE]);
    let rest = run_client(&daemon, &["resume", &id, &last.to_string()]).await;
    assert!(rest.iter().all(|e| seq(e) > last), "{rest:?}");
    assert!(rest.windows(2).all(|w| seq(&w[0]) < seq(&w[1])));
    let end = rest.last().unwrap();
    assert_eq!(end["type"], "response.completed", "{rest:?}");
    assert_eq!(text(&rest), ANSWER);
    // Nothing the client had comes again: one call item, one message.
    let added = |events: &[Value]| -> Vec<String> {
        events
            .iter()
            .filter(|e| e["type"] == "response.output_item.added")
            .map(|e| e["item"]["type"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(added(&first), ["mcp_call"]);
    assert_eq!(added(&rest), ["message"]);

    // Exactly the missing events: the whole stream read now, past `last`.
    let whole = run_client(&daemon, &["resume", &id, "0"]).await;
    let missing: Vec<&Value> = whole.iter().filter(|e| seq(e) > last).collect();
    assert_eq!(missing, rest.iter().collect::<Vec<_>>());
    let had: Vec<&Value> = whole.iter().filter(|e| seq(e) <= last).collect();
    assert_eq!(had, first.iter().collect::<Vec<_>>());

    // The same answer as a non-streamed call; a follow-up continues it.
    let finish = run_client(&daemon, &["finish", &id, "What is x?"]).await;
    let finish = &finish[0];
    assert_eq!(finish["status"], "completed");
    assert_eq!(finish["text"], ANSWER);
    assert_eq!(finish["output_types"], json!(["mcp_call", "message"]));
    assert_eq!(finish["again_status"], "completed");
    assert_eq!(finish["again_text"], finish["text"]);
    assert_eq!(finish["again_usage"], 15 + 29, "both model calls");
    assert_eq!(finish["follow_status"], "completed");
    // The follow-up echoes the response it continues, as created and as
    // retrieved; a first response continues none.
    assert_eq!(finish["again_previous"], Value::Null, "{finish}");
    assert_eq!(finish["follow_previous"], finish["again_id"], "{finish}");
    assert_eq!(
        finish["follow_previous_retrieved"], finish["again_id"],
        "{finish}"
    );
    let follow_up = mock.requests().last().cloned().unwrap();
    let said: Vec<&str> = follow_up["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(said.contains(&"What is x?"), "{said:?}");
    assert!(said.contains(&"And again?"), "{said:?}");
    assert!(said.contains(&ANSWER), "the earlier answer: {said:?}");
    assert_eq!(daemon.stop(), Some(0));
}

/// A bundle without tools streams its answer token by token, through the
/// SDK's stream helper (which accumulates the events into the response).
/// The model sends its tokens 20 ms apart: sent at once, a loaded machine
/// read several in one step and the stream rightly sent them as one delta.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_streams_token_by_token() {
    let mock = mock_server(&format!(
        "replies:\n  - content: \"{ANSWER}\"\n    chunk_delay_ms: 20\n"
    ))
    .await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle(
        "echoer",
        "name: echoer\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\n",
    );
    let daemon = site.start();
    let events = run_client(&daemon, &["live", "Say it."]).await;
    let (last, events) = events.split_last().unwrap();
    assert_eq!(last["text"], ANSWER);
    assert_eq!(text(events), ANSWER);
    let deltas = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .count();
    assert!(deltas > 1, "not streamed token by token: {events:?}");
    assert!(events.windows(2).all(|w| seq(&w[0]) < seq(&w[1])));
    assert_eq!(events.last().unwrap()["type"], "response.completed");
    assert_eq!(daemon.stop(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_response_is_cancelled() {
    let mock = mock_server(&script(20_000)).await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle("echoer", BUNDLE);
    let daemon = site.start();
    let out = run_client(&daemon, &["cancel", "What is x?"]).await;
    assert_eq!(out[0]["started"], "queued");
    assert_eq!(out[0]["final"], "cancelled", "{}", daemon.log());
    assert_eq!(
        out[0]["missing"],
        json!({"status": 404, "code": "not_found"}),
        "spelt as every other route spells it"
    );
    let id = out[0]["id"].as_str().unwrap();
    let http = client();
    let job = common::daemon::get(
        &http,
        &daemon,
        &format!("/v1/jobs/{}", id.trim_start_matches("resp_")),
    )
    .await;
    assert_eq!(job["state"], "cancelled");
    assert_eq!(daemon.stop(), Some(0));
}

/// The `openai` npm package (`SA_TEST_OPENAI_JS` names its
/// `node_modules`; `./scripts/test` installs it): `client.responses.cancel(id)`
/// POSTs with no body and no Content-Type, which is an empty body, not a
/// 415 (issue 49); an unknown response is `not_found`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_npm_package_cancels_a_background_response() {
    let modules = std::env::var_os("SA_TEST_OPENAI_JS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(std::env::var("HOME").unwrap_or_default())
                .join(".cache/structured-agents/openai-js/node_modules")
        });
    assert!(
        modules.join("openai/package.json").is_file(),
        "the openai npm package is needed in {}; ./scripts/test installs it (npm install --prefix ~/.cache/structured-agents/openai-js openai@6)",
        modules.display()
    );
    let mock = mock_server(&script(20_000)).await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle("echoer", BUNDLE);
    let daemon = site.start();
    let base = daemon.url("/v1");
    let mut cancel = Command::new("node");
    cancel
        .arg(repo("tests/data/responses/cancel.cjs"))
        .arg(&modules)
        .arg(&base)
        .arg(MODEL);
    let seen = peer::json(&daemon, cancel).await;
    assert_eq!(seen["started"], "queued", "{seen}");
    assert_eq!(seen["final"], "cancelled", "{seen}");
    assert_eq!(
        seen["missing"],
        json!({"status": 404, "code": "not_found"}),
        "{seen}"
    );
    assert_eq!(daemon.stop(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_traceparent_is_the_parent_of_the_jobs_spans() {
    let mock = mock_server(&script(10)).await;
    let (otlp, spans, _) = collector().await;
    let site = Site::new(
        &mock.base_url(),
        &format!("[telemetry]\notlp_endpoint = \"{otlp}\"\n"),
    );
    site.put_bundle("echoer", BUNDLE);
    let daemon = site.start();
    let http = client();
    let created: Value = http
        .post(daemon.url("/v1/responses"))
        .header(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        )
        .json(&json!({"model": MODEL, "input": "What is x?"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(created["status"], "completed", "{created}");
    assert_eq!(daemon.stop(), Some(0));
    let spans = spans.lock().unwrap().clone();
    let root = spans
        .iter()
        .find(|s| s.name == "invoke_agent echoer")
        .expect("the job's span");
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    assert_eq!(hex(&root.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(hex(&root.parent_span_id), "00f067aa0ba902b7");
    let model_call = spans
        .iter()
        .find(|s| s.name == "chat mock-model")
        .expect("a model call span");
    let attrs = common::otlp::attrs(model_call);
    assert_eq!(attrs["gen_ai.provider.name"], "openai");
}

/// A stream (raw SSE) whose job parks for approval sends the parked call
/// as an `mcp_approval_request` item, stays open, and after the decision
/// goes on to the call, the answer and `response.completed`.
#[tokio::test(flavor = "multi_thread")]
async fn a_stream_says_when_its_job_awaits_approval_and_goes_on_after_the_decision() {
    use eventsource_stream::Eventsource;
    use futures::StreamExt;
    let mock = mock_server(&script(0)).await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle(
        "echoer",
        &BUNDLE.replace(
            "effect: read_only",
            "effect: read_only\n    approval: always",
        ),
    );
    let daemon = site.start();
    let http = client();
    let response = http
        .post(daemon.url("/v1/responses"))
        .json(&json!({"model": MODEL, "input": "What is x?", "stream": true}))
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    let mut stream = response.bytes_stream().eventsource();
    let mut seen: Vec<Value> = Vec::new();
    let mut decided = false;
    while let Some(Ok(event)) = stream.next().await {
        let body: Value = serde_json::from_str(&event.data).unwrap();
        seen.push(body.clone());
        let kind = body["type"].as_str().unwrap_or_default();
        if kind == "response.completed" || kind == "response.failed" {
            break;
        }
        if kind != "response.output_item.done" || body["item"]["type"] != "mcp_approval_request" {
            continue;
        }
        // The model's call (its mcp_call item) waits for a person: the
        // response is in progress with the request among its output.
        let item = &body["item"];
        assert_eq!(item["name"], "echo", "{item}");
        assert_eq!(item["arguments"], "{\"x\":1}", "{item}");
        assert_eq!(item["server_label"], "echoer", "{item}");
        assert_eq!(item["call_id"], "call-1", "{item}");
        let id = seen[0]["response"]["id"].as_str().unwrap();
        let got = common::daemon::get(&http, &daemon, &format!("/v1/responses/{id}")).await;
        assert_eq!(got["status"], "in_progress", "{got}");
        assert_eq!(got["output"][1]["type"], "mcp_approval_request", "{got}");
        let path = item["decide"]
            .as_str()
            .unwrap()
            .strip_prefix("POST ")
            .unwrap();
        let decision = http
            .post(daemon.url(path))
            .json(&json!({"decision": "approve", "digest": item["digest"]}))
            .send()
            .await
            .unwrap();
        assert!(decision.status().is_success(), "{}", decision.status());
        decided = true;
    }
    assert!(decided, "no approval request came: {seen:?}");
    let last = seen.last().unwrap();
    assert_eq!(last["type"], "response.completed", "{seen:?}");
    assert_eq!(text(&seen), ANSWER);
    let output: Vec<&str> = last["response"]["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["type"].as_str().unwrap())
        .collect();
    assert_eq!(output, ["mcp_call", "mcp_approval_request", "message"]);
    // The call, run once approved, names the request it waited on.
    let call = &last["response"]["output"][0];
    assert_eq!(call["status"], "completed", "{call}");
    assert_eq!(call["approval_request_id"], "mcpr_call-1", "{call}");
    let numbers: Vec<u64> = seen.iter().map(seq).collect();
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");
}

/// Parameters that would change what the client is promised, and that a
/// bundle does not honour, are refused naming the parameter; those that
/// change nothing pass.
#[tokio::test(flavor = "multi_thread")]
async fn parameters_a_bundle_cannot_honour_are_refused_by_name() {
    let mock = mock_server(&format!("replies:\n  - content: \"{ANSWER}\"\n")).await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle("echoer", BUNDLE);
    let daemon = site.start();
    let http = client();
    let refused = [
        (json!({"n": 2}), "n"),
        (json!({"tool_choice": "required"}), "tool_choice"),
        (
            json!({"tool_choice": {"type": "function", "name": "echo"}}),
            "tool_choice",
        ),
        (
            json!({"tools": [{"type": "function", "name": "f", "parameters": {}}]}),
            "tools",
        ),
        (
            json!({"text": {"format": {"type": "json_schema", "name": "o"}}}),
            "text.format",
        ),
    ];
    for (extra, param) in refused {
        let mut body = json!({"model": MODEL, "input": "What is x?"});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let response = http
            .post(daemon.url("/v1/responses"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 400, "{body}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["param"], param, "{error}");
        assert_eq!(error["error"]["code"], "invalid_request", "{error}");
    }
    let fine = json!({"model": MODEL, "input": "What is x?", "n": 1, "tools": [],
                      "tool_choice": "auto", "text": {"format": {"type": "text"}}});
    let response = http
        .post(daemon.url("/v1/responses"))
        .json(&fine)
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["status"], "completed", "{answer}");
    assert_eq!(daemon.stop(), Some(0));
}

/// `client.responses.input_items.list` (issue 49): the items a response was
/// made from, as the official SDK pages them — newest first by default,
/// `order`, `limit` with `has_more`, `after` — and a follow-up's one user
/// text; `client.responses.delete` deletes an ended one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_lists_a_responses_input_items() {
    let mock = mock_server(&script(0)).await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle("echoer", BUNDLE);
    let daemon = site.start();
    let out = run_client(&daemon, &["items", "What is x?"]).await;
    let listed = &out[0];
    assert_eq!(
        listed["oldest"]["texts"],
        json!(["Be brief.", "Hi", "Hello.", "What is x?"]),
        "{listed:#}"
    );
    assert_eq!(
        listed["oldest"]["roles"],
        json!(["system", "user", "assistant", "user"])
    );
    assert_eq!(
        listed["oldest"]["parts"],
        json!(["input_text", "input_text", "output_text", "input_text"])
    );
    let mut newest = listed["oldest"]["ids"].as_array().unwrap().clone();
    newest.reverse();
    assert_eq!(listed["newest"]["ids"], json!(newest));
    assert_eq!(listed["newest"]["has_more"], false);
    assert_eq!(listed["one"]["texts"], json!(["Be brief."]));
    assert_eq!(listed["one"]["has_more"], true);
    assert_eq!(listed["after"]["texts"], json!(["Hi"]));
    assert_eq!(listed["follow"]["texts"], json!(["And then?"]));
    assert_eq!(
        listed["deleted"],
        json!({"status": 404, "code": "not_found"}),
        "a deleted response is gone"
    );
    assert_eq!(daemon.stop(), Some(0));
}
