//! `/v1/chat/completions` and `/v1/models` through the official Python
//! `openai` SDK, the pinned major (`.venv`) and the current one
//! (`.venv-current`; see `scripts/python-env`): a bundle answers as a model,
//! non-streaming and streaming (with the usage chunk `include_usage` asks
//! for), every request is a job, and a missing model is a 404 in OpenAI's
//! error shape.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use common::{mock_server, peer, python, python_current, repo};

use std::time::Duration;

use common::daemon::{Site, client, get};
use serde_json::Value;

const SCRIPT: &str = r#"
replies:
  - content: "Open sesame, said the daemon."
    delay_ms: 50
    usage: {prompt_tokens: 12, completion_tokens: 6, total_tokens: 18}
"#;

#[tokio::test(flavor = "multi_thread")]
async fn the_openai_sdk_talks_to_bundles_streaming_and_not() {
    the_sdk_talks_to_bundles_streaming_and_not(python()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_current_openai_sdk_talks_to_bundles_streaming_and_not() {
    the_sdk_talks_to_bundles_streaming_and_not(python_current()).await;
}

async fn the_sdk_talks_to_bundles_streaming_and_not(python: std::path::PathBuf) {
    let mock = mock_server(SCRIPT).await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle(
        "greeter",
        "name: greeter\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {system: \"You greet.\", user: \"{{ input }}\"}\n",
    );
    let daemon = site.start();
    let mut sdk_client = std::process::Command::new(python);
    sdk_client
        .arg(repo("tests/data/openai/client.py"))
        .args([&daemon.url("/v1"), "bundle/greeter"]);
    let seen = peer::json(&daemon, sdk_client).await;
    assert_eq!(seen["models"], serde_json::json!(["bundle/greeter"]));
    assert_eq!(seen["object"], "chat.completion");
    assert_eq!(seen["answer"], "Open sesame, said the daemon.");
    assert_eq!(seen["finish_reason"], "stop");
    assert_eq!(seen["usage"], 18);
    let pieces: Vec<String> = serde_json::from_value(seen["pieces"].clone()).unwrap();
    assert_eq!(pieces.concat(), "Open sesame, said the daemon.");
    assert!(pieces.len() > 1, "not streamed token by token: {pieces:?}");
    assert_eq!(seen["stream_finish"], "stop");
    assert_eq!(
        seen["stream_usage"],
        serde_json::json!({"total": 18, "choices": 0}),
        "include_usage: a last chunk without choices carries the usage"
    );
    assert_eq!(seen["missing"]["status"], 404);
    assert_eq!(seen["missing"]["code"], "model_not_found");

    // The model saw the bundle's system prompt, then the client's messages.
    let request = &mock.requests()[0];
    let roles: Vec<&str> = request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "system", "user", "assistant", "user"]);
    assert_eq!(request["messages"][0]["content"], "You greet.");

    // Every request was a job.
    let http = client();
    let jobs = get(&http, &daemon, "/v1/jobs?bundle=greeter").await;
    let jobs = jobs["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 3, "{jobs:?}");
    assert!(
        jobs.iter()
            .all(|j| j["state"] == "succeeded" && j["input"] == "Say the magic words.")
    );
    let _ = Duration::ZERO;
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_requests_get_openai_errors_naming_the_field() {
    let site = Site::new("http://127.0.0.1:9/v1", "");
    site.put_bundle(
        "greeter",
        "name: greeter\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\n",
    );
    let daemon = site.start();
    let http = client();
    for (body, status, param) in [
        (
            serde_json::json!({"model": "bundle/greeter", "messages": []}),
            400,
            "messages",
        ),
        (
            serde_json::json!({"model": "bundle/greeter", "messages": [{"role": "wizard", "content": "x"}]}),
            400,
            "messages[0]",
        ),
        (
            serde_json::json!({"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]}),
            404,
            "model",
        ),
        (
            serde_json::json!({"messages": [{"role": "user", "content": "x"}]}),
            400,
            "body",
        ),
        // What the bundle cannot honour is refused, never dropped.
        (
            serde_json::json!({"model": "bundle/greeter", "n": 2, "messages": [{"role": "user", "content": "x"}]}),
            400,
            "n",
        ),
        (
            serde_json::json!({"model": "bundle/greeter", "tool_choice": "required", "messages": [{"role": "user", "content": "x"}]}),
            400,
            "tool_choice",
        ),
        (
            serde_json::json!({"model": "bundle/greeter", "messages": [{"role": "user", "content": "x"}],
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}),
            400,
            "tools",
        ),
        (
            serde_json::json!({"model": "bundle/greeter", "messages": [{"role": "user", "content": "x"}],
                "response_format": {"type": "json_schema", "json_schema": {"name": "o"}}}),
            400,
            "response_format",
        ),
    ] {
        let response = http
            .post(daemon.url("/v1/chat/completions"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), status, "{body}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["param"], param, "{error}");
        assert!(
            error["error"]["message"].as_str().unwrap().len() > 10,
            "{error}"
        );
        assert!(error["error"]["type"].is_string(), "{error}");
    }
}

/// A streamed completion carries the job's own answer only: the tokens a
/// nested agent streams while it runs are not the answer, and the streamed
/// text equals the non-streamed one.
#[tokio::test(flavor = "multi_thread")]
async fn a_stream_carries_the_answer_not_a_nested_agents_text() {
    let server = mock_server(
        r#"
replies:
  - {match: parent question, turn: 1, tool_calls: [{id: h, name: helper, arguments: {input: child question}}]}
  - {match: parent question, turn: 2, content: "The parent answers plainly."}
  - {match: child question, content: "The child whispers secrets."}
"#,
    )
    .await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("child", "name: child\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\n");
    site.put_bundle("parent", "name: parent\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\ntools:\n  - {name: helper, kind: agent, bundle: child}\n");
    let daemon = site.start();
    let http = client();
    let body = serde_json::json!({"model": "bundle/parent", "stream": true, "messages": [{"role": "user", "content": "parent question"}]});
    let response = http
        .post(daemon.url("/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    let streamed: String = text
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .filter_map(|chunk| {
            chunk["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(streamed, "The parent answers plainly.", "{text}");
    assert_eq!(server.requests().len(), 3, "parent, child, parent");
}
