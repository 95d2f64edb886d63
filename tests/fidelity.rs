//! Fidelity to the systems the daemon absorbs (docs/differences.md): the
//! Python kernel's defaults, per-run tool subsets and history window, the
//! runtime's `agents.json`, `call_agent` functions and `ƒ(x)` lines — each
//! against the real daemon and the mock model server.

mod common;

use std::time::Duration;

use common::daemon::{Site, client, get, run_cli, submit_and_wait};
use common::fake_agent::FakeAgent;
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

/// The Python kernel's sliding window kept `messages[0]` whatever it was:
/// in a bundle without a system prompt that is the task, and every request
/// of a long run still carries it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_window_keeps_the_first_message_even_without_a_system_prompt() {
    let script = r#"
mode: sequential
replies:
  - tool_calls: [{name: echo, arguments: {step: 1}}]
  - tool_calls: [{name: echo, arguments: {step: 2}}]
  - tool_calls: [{name: echo, arguments: {step: 3}}]
  - content: done
"#;
    let server = mock_server(script).await;
    let site = Site::new(&server.base_url(), "");
    let bundle = TOOLS_BUNDLE.replace("prompts:", "limits: {max_history_messages: 3}\nprompts:");
    site.put_bundle("b", &bundle);
    let daemon = site.start();
    let job = submit_and_wait(
        &client(),
        &daemon,
        json!({"bundle": "b", "input": "the task"}),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(job["state"], "succeeded", "{job}");
    let requests = server.requests();
    assert_eq!(requests.len(), 4, "{requests:?}");
    for request in &requests {
        let messages = request["messages"].as_array().unwrap();
        assert!(messages.len() <= 3, "{request}");
        assert_eq!(messages[0]["role"], "user", "{request}");
        assert_eq!(messages[0]["content"], "the task", "{request}");
    }
    // The window moved on: the last request holds the last call, not the first.
    let last = requests[3]["messages"].to_string();
    assert!(
        last.contains("step") && last.contains('3') && !last.contains(r#"\"step\":1"#),
        "{last}"
    );
}

/// For prompts written for the multi-agent runtime: `agents.json` beside
/// the config file is read without `agents_file`; with `[runtime]
/// router_functions = "call_agent"` the router calls each agent as
/// `<id>-call_agent(query, sender_id, conversation_id)` and the envelope
/// carries those values; `query` and `interactive` print each call's
/// `ƒ(x)` lines as `chat` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_takes_the_originals_agents_json_call_agent_and_prints_fx_lines() {
    let script = r#"
replies:
  - tool_calls:
      - {name: news-call_agent, arguments: {query: "Any headlines?", sender_id: "user-7", conversation_id: "conv-original"}}
  - content: "Nothing new, says the news."
"#;
    let server = mock_server(script).await;
    let news = FakeAgent::start("Nothing new.").await;
    let site = Site::new(
        &server.base_url(),
        "[runtime]\nrouter = \"router\"\ngroup_chat = \"group-chat\"\nrouter_functions = \"call_agent\"\n",
    );
    std::fs::write(
        site.path().join("agents.json"),
        json!({"agents": [{"id": "news", "name": "News", "description": "Reads the news.", "endpoint": news.url}]})
            .to_string(),
    )
    .unwrap();
    site.put_bundle(
        "router",
        "name: router\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {system: \"You route questions.\", user: \"{{ input }}\"}\n",
    );
    let daemon = site.start();

    let listed = get(&client(), &daemon, "/api/agents").await;
    assert!(listed.to_string().contains("\"id\":\"news\""), "{listed}");

    let base = daemon.base.clone();
    let query = tokio::task::spawn_blocking(move || {
        let query = run_cli(&base, &["query", "Any headlines?"], "");
        let interactive = run_cli(&base, &["interactive"], "Any headlines?\nexit\n");
        (query, interactive)
    });
    let (query, interactive) = query.await.unwrap();
    for out in [query, interactive] {
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains("ƒ(x) calling news-call_agent...\n ↪ {\"query\":\"Any headlines?\",\"sender_id\":\"user-7\",\"conversation_id\":\"conv-original\"}\ntalking with the agent(s):\n"),
            "{text}"
        );
        assert!(text.contains(" ↪ news to runtime → Nothing new."), "{text}");
        assert!(text.contains("Nothing new, says the news."), "{text}");
    }

    let offered = &server.requests()[0]["tools"];
    let function = offered
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "news-call_agent")
        .unwrap_or_else(|| panic!("no news-call_agent: {offered}"));
    let parameters = &function["function"]["parameters"];
    assert_eq!(parameters["required"], json!(["query"]), "{parameters}");
    for name in ["query", "sender_id", "conversation_id"] {
        assert!(parameters["properties"][name].is_object(), "{parameters}");
    }
    let seen = news.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    for envelope in &seen {
        assert_eq!(envelope["content"], "Any headlines?", "{envelope}");
        assert_eq!(envelope["senderId"], "user-7", "{envelope}");
        assert_eq!(envelope["conversationId"], "conv-original", "{envelope}");
    }
    assert_eq!(daemon.stop(), Some(0));
}
