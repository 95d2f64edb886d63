//! Fidelity to the systems the daemon absorbs (docs/differences.md): the
//! Python kernel's defaults and per-run tool subsets, the runtime's router
//! reach, `agents.json` and envelopes — each against the real daemon and
//! the mock model server.

mod common;

use std::time::Duration;

use common::daemon::{Site, client, submit_and_wait};
use common::mock_server;
use serde_json::{Value, json};

const TOOLS_BUNDLE: &str = r#"name: b
version: "1"
model:
  endpoint: mock
  name: mock-model
prompts:
  user: "{{ input }}"
tools:
  - name: echo
    kind: process
    effect: read_only
    command: [python3, -c, "import json,sys; print(json.dumps(json.load(sys.stdin)))"]
  - name: shout
    kind: process
    effect: read_only
    command: [python3, -c, "import sys; print(sys.stdin.read().upper())"]
"#;

/// The names of the tools a recorded request offered.
fn offered(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap_or("?").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// A bundle without `model.sampling` sends the Python kernel's temperature
/// and max_tokens; a job's `tools` variable offers only the tools it names
/// (as a list or as `--var tools=a,b` sends it); unknown names are a 422
/// naming them and the bundle's tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defaults_and_a_jobs_tool_subset_shape_the_request() {
    let server = mock_server("replies:\n  - content: done\n").await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("b", TOOLS_BUNDLE);
    let daemon = site.start();
    let http = client();
    let within = Duration::from_secs(60);

    let all = submit_and_wait(&http, &daemon, json!({"bundle": "b", "input": "x"}), within).await;
    assert_eq!(all["state"], "succeeded", "{all}");
    let only_list = submit_and_wait(
        &http,
        &daemon,
        json!({"bundle": "b", "input": "y", "variables": {"tools": ["shout"]}}),
        within,
    )
    .await;
    assert_eq!(only_list["state"], "succeeded", "{only_list}");
    let only_text = submit_and_wait(
        &http,
        &daemon,
        json!({"bundle": "b", "input": "z", "variables": {"tools": "echo"}}),
        within,
    )
    .await;
    assert_eq!(only_text["state"], "succeeded", "{only_text}");

    let requests = server.requests();
    let by_input = |input: &str| {
        requests
            .iter()
            .find(|r| {
                r["messages"]
                    .to_string()
                    .contains(&format!("\"content\":\"{input}\""))
            })
            .unwrap_or_else(|| panic!("no request for input {input:?}: {requests:?}"))
            .clone()
    };
    let first = by_input("x");
    assert_eq!(first["temperature"], json!(0.1), "{first}");
    assert_eq!(first["max_tokens"], json!(4096), "{first}");
    assert_eq!(offered(&first), ["echo", "shout"]);
    assert_eq!(offered(&by_input("y")), ["shout"]);
    assert_eq!(offered(&by_input("z")), ["echo"]);

    let refused = http
        .post(daemon.url("/v1/jobs"))
        .json(&json!({"bundle": "b", "input": "w", "variables": {"tools": ["echo", "nope"]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 422);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["field"], "variables.tools", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("nope") && message.contains("echo, shout"),
        "{body}"
    );
    let malformed = http
        .post(daemon.url("/v1/jobs"))
        .json(&json!({"bundle": "b", "input": "w", "variables": {"tools": [1]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(malformed.status(), 422);
}
