//! The OpenAI Agents SDK (Python `openai-agents`, in `.venv-current`; see
//! `scripts/python-env`) with a bundle as its model, through both of its
//! model classes: `OpenAIResponsesModel` (its default, over
//! `/v1/responses`) and `OpenAIChatCompletionsModel`. A plain bundle, a
//! bundle whose tools the daemon runs (the SDK must take those calls as
//! run, never as calls of its own to make: issue 49), a next turn that
//! sends that run's history back (the daemon's calls in it), streamed,
//! an agent with a tool of its own, which the daemon refuses with a 400
//! naming `tools` unless the bundle takes caller tools — then the SDK runs
//! it and its output resumes the same job, also in a streamed run — and an
//! agent's `output_type` (a pydantic model), which the daemon holds the
//! answer to (issue 49).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::process::Command;

use common::daemon::Site;
use common::{mock_server, peer, python_current, repo};
use serde_json::{Value, json};

/// A plain answer for "hello"; for "2+3" a call of `add`, then the answer;
/// a next turn ("again") after it.
const SCRIPT: &str = r#"
replies:
  - match: "hello"
    content: "Hello there."
  - match: "again"
    turn: 2
    content: "Again: 5."
  - match: "2+3"
    turn: 1
    tool_calls: [{id: call-1, name: add, arguments: {a: 2, b: 3}}]
  - match: "2+3"
    turn: 2
    content: "2+3 is 5."
"#;

const PLAIN: &str = "name: plain\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\n";

const ADDER: &str = r#"name: adder
version: "1"
model: {endpoint: mock, name: m}
prompts: {system: "You add.", user: "{{ input }}"}
tools:
  - name: add
    kind: process
    description: adds a and b
    effect: read_only
    command: [python3, -c, "import json,sys; a=json.load(sys.stdin); print(a['a']+a['b'])"]
"#;

/// Runs the driver with `class` against a daemon serving both bundles.
async fn drive(class: &str) -> Value {
    let mock = mock_server(SCRIPT).await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle("plain", PLAIN);
    site.put_bundle("adder", ADDER);
    let daemon = site.start();
    let base = daemon.url("/v1");
    let class = class.to_string();
    let mut driver = Command::new(python_current());
    driver.arg(repo("tests/data/agents_sdk/driver.py")).args([
        &base,
        &class,
        "bundle/plain",
        "bundle/adder",
    ]);
    let seen = peer::json(&daemon, driver).await;
    assert_eq!(daemon.stop(), Some(0));
    seen
}

/// What both model classes must see: the answers, and the refusal of the
/// agent's own tool.
fn check_common(seen: &Value) {
    assert_eq!(seen["plain"], "Hello there.", "{seen}");
    assert_eq!(seen["tools"]["final"], "2+3 is 5.", "{seen}");
    assert_eq!(seen["streamed"]["final"], "2+3 is 5.", "{seen}");
    assert_eq!(seen["follow"], "Again: 5.", "{seen}");
    let refused = &seen["own_tool"];
    assert_eq!(refused["status"], 400, "{seen}");
    assert_eq!(refused["param"], "tools", "{seen}");
    assert_eq!(refused["code"], "invalid_request", "{seen}");
}

/// The SDK's run items of a tool run: the call the daemon ran (with its
/// output), then the answer; never a `function_call` to run.
fn check_ran_call(items: &Value) {
    let kinds: Vec<(&str, &str)> = items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["kind"].as_str().unwrap(), i["type"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("tool_call_item", "mcp_call"),
            ("message_output_item", "message")
        ],
        "{items}"
    );
    assert_eq!(items[0]["name"], "add");
    assert_eq!(items[0]["output"].as_str().unwrap().trim(), "5");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_sdk_runs_bundles_over_responses() {
    let seen = drive("responses").await;
    check_common(&seen);
    check_ran_call(&seen["tools"]["items"]);
    check_ran_call(&seen["streamed"]["items"]);
    let events: Vec<&str> = seen["streamed"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    for expected in [
        "response.created",
        "response.mcp_call.in_progress",
        "response.mcp_call_arguments.done",
        "response.mcp_call.completed",
        "response.output_text.delta",
        "response.completed",
    ] {
        assert!(events.contains(&expected), "{expected} in {events:?}");
    }
    assert!(
        events.iter().all(|e| !e.contains("function_call")),
        "{events:?}"
    );
    assert_eq!(
        seen["streamed"]["deltas"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_str().unwrap())
            .collect::<String>(),
        "2+3 is 5."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_sdk_runs_bundles_over_chat_completions() {
    let seen = drive("chat").await;
    check_common(&seen);
    // Chat completions tell only the answer: the daemon's calls are not
    // the client's.
    let only_answer =
        json!([{"kind": "message_output_item", "type": "message", "output": null, "name": null}]);
    assert_eq!(seen["tools"]["items"], only_answer, "{seen}");
    assert_eq!(seen["streamed"]["items"], only_answer, "{seen}");
}

/// Ada matches the `Person` the agent asks for; Bob's age is text.
const PEOPLE_SCRIPT: &str = r#"
replies:
  - match: "Ada"
    content: '{"name": "Ada", "age": 36}'
  - match: "Bob"
    content: '{"name": "Bob", "age": "old"}'
"#;

/// A bundle on an OpenAI server, which takes the format as
/// `response_format`.
const PEOPLE: &str = "name: people\nversion: \"1\"\nmodel: {endpoint: mock, name: m, server: openai}\nprompts: {user: \"{{ input }}\"}\n";

/// Runs the `output_type` driver with `class`: what it saw, and the
/// `response_format` of each model request the daemon made.
async fn drive_output_type(class: &str) -> (Value, Vec<Value>) {
    let mock = mock_server(PEOPLE_SCRIPT).await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle("people", PEOPLE);
    let daemon = site.start();
    let base = daemon.url("/v1");
    let class = class.to_string();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python_current())
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/data/agents_sdk/output_type.py"
            ))
            .args([&base, &class, "bundle/people"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        daemon.log()
    );
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(daemon.stop(), Some(0));
    let formats = mock
        .requests()
        .iter()
        .map(|r| r["response_format"].clone())
        .collect();
    (seen, formats)
}

/// What both model classes must see: `Person`s for Ada, streamed or not;
/// the model asked for the SDK's schema each time; Bob's answer refused
/// naming the field that does not match.
fn check_output_type(seen: &Value, formats: &[Value]) {
    let ada = json!({"type": "Person", "value": {"name": "Ada", "age": 36}});
    assert_eq!(seen["ada"], ada, "{seen}");
    assert_eq!(seen["streamed"], ada, "{seen}");
    assert_eq!(formats.len(), 3, "{formats:?}");
    for format in formats {
        assert_eq!(format["type"], "json_schema", "{format}");
        let schema = &format["json_schema"]["schema"];
        assert_eq!(schema["properties"]["age"]["type"], "integer", "{format}");
    }
    let bob = &seen["bob"];
    assert!(bob.get("error").is_some(), "{seen}");
    let message = bob["message"].as_str().unwrap();
    assert!(message.contains("at /age"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_sdk_gets_its_output_type_over_responses() {
    let (seen, formats) = drive_output_type("responses").await;
    check_output_type(&seen, &formats);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_sdk_gets_its_output_type_over_chat_completions() {
    let (seen, formats) = drive_output_type("chat").await;
    check_output_type(&seen, &formats);
    assert_eq!(seen["bob"]["status"], 500, "{seen}");
}

/// The model calls the caller's `shout`, then answers once it has the
/// output.
const SHOUT_SCRIPT: &str = r#"
replies:
  - match: "Shout hi"
    turn: 1
    tool_calls: [{id: call-7, name: shout, arguments: {text: hi}}]
  - match: "Shout hi"
    turn: 2
    content: "Shouted."
"#;

/// A bundle that takes the caller's tools, with none of its own.
const SHOUTER: &str = "name: shouter\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\ncaller_tools: {max: 4}\n";

/// Runs the caller-tool driver with `class` (`streamed`: with
/// `Runner.run_streamed`): what it saw, and the model requests the daemon
/// made.
async fn drive_caller_tool(class: &str, streamed: bool) -> (Value, Vec<Value>) {
    let mock = mock_server(SHOUT_SCRIPT).await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle("shouter", SHOUTER);
    let daemon = site.start();
    let base = daemon.url("/v1");
    let mut driver = Command::new(python_current());
    driver
        .arg(repo("tests/data/agents_sdk/caller_tool.py"))
        .args([&base, class, "bundle/shouter"]);
    if streamed {
        driver.arg("streamed");
    }
    let seen = peer::json(&daemon, driver).await;
    // One job, which the client's output resumed, and it succeeded.
    let jobs = common::daemon::get(&common::daemon::client(), &daemon, "/v1/jobs").await;
    let jobs = jobs["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0]["state"], "succeeded", "{jobs:?}");
    assert_eq!(daemon.stop(), Some(0));
    (seen, mock.requests())
}

/// What both model classes must see: the SDK ran its tool once, with the
/// model's argument; the model was offered the tool and read its output
/// on the next turn; the answer came after.
fn check_caller_tool(seen: &Value, requests: &[Value]) {
    assert_eq!(seen["calls"], json!(["hi"]), "{seen}");
    assert_eq!(seen["final"], "Shouted.", "{seen}");
    assert_eq!(requests.len(), 2, "{requests:?}");
    let offered = requests[0]["tools"].to_string();
    assert!(offered.contains("\"shout\""), "{offered}");
    let fed: Vec<&Value> = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(fed.len(), 1, "{requests:?}");
    assert_eq!(fed[0]["content"], "HI!", "{requests:?}");
    assert_eq!(fed[0]["tool_call_id"], "call-7", "{requests:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_sdk_runs_its_own_tool_over_responses() {
    let (seen, requests) = drive_caller_tool("responses", false).await;
    check_caller_tool(&seen, &requests);
    check_item_types(&seen);
}

/// The run's items over Responses: the call, its output, the answer.
fn check_item_types(seen: &Value) {
    let kinds: Vec<&str> = seen["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        kinds,
        ["function_call", "function_call_output", "message"],
        "{seen}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_sdk_runs_its_own_tool_over_chat_completions() {
    let (seen, requests) = drive_caller_tool("chat", false).await;
    check_caller_tool(&seen, &requests);
}

/// A streamed run: the answer's deltas are the answer, after the
/// call handed over in the first stream.
fn check_streamed_caller_tool(seen: &Value) {
    let deltas: String = seen["deltas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    assert_eq!(deltas, "Shouted.", "{seen}");
    let events: Vec<&str> = seen["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    let completed: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| **e == "response.completed")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(completed.len(), 2, "one per stream: {events:?}");
    let handed = events
        .iter()
        .position(|e| *e == "response.function_call_arguments.delta");
    assert!(
        handed.is_some_and(|at| at < completed[0]),
        "the call is in the first stream: {events:?}"
    );
}

/// `Runner.run_streamed` with the agent's own tool over Responses: the
/// first stream hands the call over, the SDK runs it, and its streamed
/// output resumes the same job (`previous_response_id`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_sdk_streams_a_run_with_its_own_tool_over_responses() {
    let (seen, requests) = drive_caller_tool("responses", true).await;
    check_caller_tool(&seen, &requests);
    check_item_types(&seen);
    check_streamed_caller_tool(&seen);
}

/// The same over chat completions: the call in the chunks' `tool_calls`,
/// its output a streamed `tool` message resuming the same job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_sdk_streams_a_run_with_its_own_tool_over_chat_completions() {
    let (seen, requests) = drive_caller_tool("chat", true).await;
    check_caller_tool(&seen, &requests);
    check_streamed_caller_tool(&seen);
}

/// A run outlives the daemon: while the SDK's own tool runs, the daemon is
/// killed (SIGKILL) and started again on the same address; the tool's
/// output then resumes the same durable job from the store, on both model
/// classes.
#[tokio::test(flavor = "multi_thread")]
async fn an_agents_sdk_run_goes_on_across_a_daemon_kill() {
    for class in ["responses", "chat"] {
        let mock = mock_server(SHOUT_SCRIPT).await;
        let site = Site::new(&mock.base_url(), "");
        site.put_bundle("shouter", SHOUTER);
        let daemon = site.start();
        // The daemon comes back where the SDK's client points.
        let address = daemon.base.trim_start_matches("http://").to_string();
        let config = std::fs::read_to_string(site.path().join("config.toml")).unwrap();
        let pinned = config.replace("127.0.0.1:0", &address);
        std::fs::write(site.path().join("config.toml"), pinned).unwrap();
        let hold = tempfile::tempdir().unwrap();
        let mut driver = std::process::Command::new(python_current());
        driver
            .arg(repo("tests/data/agents_sdk/caller_tool.py"))
            .args([&daemon.url("/v1"), class, "bundle/shouter"])
            .arg(format!("hold={}", hold.path().display()))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let running = driver.spawn().unwrap();
        let finished = tokio::task::spawn_blocking(move || running.wait_with_output().unwrap());
        let started = hold.path().join("tool-started");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !started.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "{class}: the SDK never ran its tool; daemon log:\n{}",
                daemon.log()
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        daemon.kill9();
        let daemon = site.start();
        assert_eq!(daemon.base, format!("http://{address}"), "{class}");
        std::fs::write(hold.path().join("go"), "").unwrap();
        let output = finished.await.unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{class}: {stdout}\n{}\n== daemon log\n{}",
            String::from_utf8_lossy(&output.stderr),
            daemon.log()
        );
        let seen: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
            .unwrap_or_else(|e| panic!("{class}: {e}: {stdout}"));
        assert_eq!(seen["calls"], json!(["hi"]), "{class}: {seen}");
        assert_eq!(seen["final"], "Shouted.", "{class}: {seen}");
        // One job: parked on the client's call before the kill, resumed
        // by its output after, and no model call twice.
        let jobs = common::daemon::get(&common::daemon::client(), &daemon, "/v1/jobs").await;
        let jobs = jobs["jobs"].as_array().unwrap();
        assert_eq!(jobs.len(), 1, "{class}: {jobs:?}");
        assert_eq!(jobs[0]["state"], "succeeded", "{class}: {jobs:?}");
        assert_eq!(mock.requests().len(), 2, "{class}");
        assert_eq!(daemon.stop(), Some(0));
    }
}
