//! Streams carry the answer, and outcomes say what happened.
//!
//! - `/v1/chat/completions` with `stream: true`: the chunks' contents,
//!   concatenated, are the non-streamed answer — for every shipped bundle
//!   that answers, a Qwen-markup bundle, a FunctionGemma bundle and a model
//!   call that failed and was retried (a tool turn's text is never sent).
//! - A run that ends at `max_turns` without an answer fails (`max_turns:`)
//!   unless the bundle says `limits.on_max_turns: succeed`; the job records
//!   why it ended and its failed tool calls, and metrics count it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::time::Duration;

use common::daemon::{Site, client, metric, submit_and_wait};
use common::{mock_server, repo};
use serde_json::{Value, json};

/// The answer of a chat completion, streamed (the chunks' contents joined)
/// or not.
async fn complete(
    http: &reqwest::Client,
    daemon: &common::daemon::Daemon,
    bundle: &str,
    stream: bool,
) -> Result<String, String> {
    let response = http
        .post(daemon.url("/v1/chat/completions"))
        .json(
            &json!({"model": format!("bundle/{bundle}"), "stream": stream,
                      "messages": [{"role": "user", "content": "What is 2+3 and 4*5?"}]}),
        )
        .send()
        .await
        .unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    if !stream {
        let body: Value = serde_json::from_str(&text).unwrap();
        return match body["choices"][0]["message"]["content"].as_str() {
            Some(content) if status.is_success() => Ok(content.to_string()),
            _ => Err(format!("{status}: {body}")),
        };
    }
    let mut content = String::new();
    for line in text.lines() {
        let Some(data) = line.strip_prefix("data: ").or(line.strip_prefix("data:")) else {
            continue;
        };
        if data == "[DONE]" {
            continue;
        }
        let chunk: Value = serde_json::from_str(data).unwrap();
        if chunk.get("error").is_some() {
            return Err(chunk.to_string());
        }
        if let Some(piece) = chunk["choices"][0]["delta"]["content"].as_str() {
            content.push_str(piece);
        }
    }
    Ok(content)
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A bundle answered by the mock at `url` with `plugin`, and a `lookup` tool.
fn bundle(name: &str, url: &str, plugin: &str) -> String {
    format!(
        r#"name: {name}
version: "1"
model: {{endpoint: "{url}", name: m, plugin: {plugin}}}
prompts: {{user: "{{{{ input }}}}"}}
tools:
  - {{name: lookup, kind: process, effect: read_only, timeout: 10s, command: [sh, -c, "echo '{{}}'"]}}
"#
    )
}

const QWEN: &str = r#"
replies:
  - turn: 1
    content: "I'll look that up first.\n<tool_call>\n{\"name\": \"lookup\", \"arguments\": {}}\n</tool_call>"
  - turn: 2
    content: "2 + 3 = 5 and 4 × 5 = 20."
"#;

const GEMMA: &str = r#"
replies:
  - turn: 1
    content: "Looking it up. <start_function_call>call:lookup{}<end_function_call>"
  - turn: 2
    content: "Together they make 25."
"#;

/// Each model call fails once (HTTP 503) and succeeds when the client
/// retries it; the answer comes after a tool turn whose text is not it.
const RETRIED: &str = r#"
mode: sequential
replies:
  - status: 503
    error: "overloaded"
  - content: "Calling the tool now."
    tool_calls: [{name: lookup, arguments: {}}]
  - status: 503
    error: "overloaded"
  - content: "The tool says 25."
"#;

#[tokio::test(flavor = "multi_thread")]
async fn streamed_content_equals_the_answer_for_shipped_bundles_markups_and_retries() {
    let qwen = mock_server(QWEN).await;
    let gemma = mock_server(GEMMA).await;
    let retried = mock_server(RETRIED).await;
    let site = Site::new(&qwen.base_url(), "");
    let shipped = ["config/bundles", "config/examples"];
    let mut names = Vec::new();
    for root in shipped {
        for entry in std::fs::read_dir(repo(root)).unwrap() {
            let dir = entry.unwrap().path();
            let yaml = std::fs::read_to_string(dir.join("bundle.yaml")).unwrap();
            // A shipped bundle that needs a model server of its own, or a
            // workflow (its stages work on a repository, not a chat).
            if !yaml.contains("scripted:") || yaml.contains("\nworkflow:") {
                continue;
            }
            let name = dir.file_name().unwrap().to_string_lossy().to_string();
            copy_dir(&dir, &site.path().join("bundles").join(&name));
            names.push(yaml_name(&yaml));
        }
    }
    site.put_bundle(
        "qwen-markup",
        &bundle("qwen-markup", &qwen.base_url(), "qwen"),
    );
    site.put_bundle(
        "gemma-markup",
        &bundle("gemma-markup", &gemma.base_url(), "function_gemma"),
    );
    site.put_bundle("retried", &bundle("retried", &retried.base_url(), "openai"));
    let daemon = site.start();
    let http = client();
    let mut compared = Vec::new();
    for name in names.iter().map(String::as_str) {
        // A shipped bundle that does not answer a chat (it parks for an
        // approval, or needs a plan) has no answer to stream.
        let Ok(answer) = complete(&http, &daemon, name, false).await else {
            continue;
        };
        let streamed = complete(&http, &daemon, name, true).await.unwrap();
        assert_eq!(streamed, answer, "bundle {name}");
        compared.push(name.to_string());
    }
    assert!(
        compared.contains(&"arithmetic".to_string()) && compared.len() >= 3,
        "shipped bundles compared: {compared:?} of {names:?}"
    );
    for name in ["qwen-markup", "gemma-markup"] {
        let answer = complete(&http, &daemon, name, false).await.unwrap();
        let streamed = complete(&http, &daemon, name, true).await.unwrap();
        assert_eq!(streamed, answer, "bundle {name}");
        assert!(
            !streamed.contains("look"),
            "a tool turn's text streamed: {streamed}"
        );
    }
    // The retried bundle's script is sequential: the streamed request
    // takes its failures and replies first; then the last reply repeats.
    let streamed = complete(&http, &daemon, "retried", true).await.unwrap();
    let answer = complete(&http, &daemon, "retried", false).await.unwrap();
    assert_eq!(answer, "The tool says 25.");
    assert_eq!(streamed, answer);
}

fn yaml_name(yaml: &str) -> String {
    yaml.lines()
        .find_map(|l| l.strip_prefix("name: "))
        .unwrap()
        .trim()
        .trim_matches('"')
        .to_string()
}

/// Every turn calls a tool that fails.
const LOOPING: &str = r#"
replies:
  - content: "Let me look the customer up."
    tool_calls: [{name: lookup, arguments: {}}]
"#;

fn looping_bundle(name: &str, on_max_turns: &str) -> String {
    format!(
        r#"name: {name}
version: "1"
model: {{endpoint: mock, name: m}}
prompts: {{user: "{{{{ input }}}}"}}
limits: {{max_turns: 2{on_max_turns}}}
tools:
  - {{name: lookup, kind: process, effect: read_only, timeout: 10s, command: [sh, -c, "echo 'no such customer' >&2; exit 1"]}}
"#
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn max_turns_without_an_answer_fails_unless_the_bundle_accepts_it() {
    let mock = mock_server(LOOPING).await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle("looper", &looping_bundle("looper", ""));
    site.put_bundle(
        "accepting",
        &looping_bundle("accepting", ", on_max_turns: succeed"),
    );
    let daemon = site.start();
    let http = client();
    let within = Duration::from_secs(60);
    let failed = submit_and_wait(
        &http,
        &daemon,
        json!({"bundle": "looper", "input": "x"}),
        within,
    )
    .await;
    assert_eq!(failed["state"], "failed", "{failed}");
    let error = failed["error"].as_str().unwrap();
    assert!(
        error.starts_with("max_turns:") && error.contains("on_max_turns: succeed"),
        "{error}"
    );
    assert_eq!(failed["termination_reason"], "max_turns", "{failed}");
    assert_eq!(failed["tool_errors"], 2, "{failed}");
    assert!(failed["tokens_spent"].as_u64().unwrap() > 0, "{failed}");
    assert_eq!(failed["attempts"], 1, "a max_turns failure is not retried");

    let accepted = submit_and_wait(
        &http,
        &daemon,
        json!({"bundle": "accepting", "input": "x"}),
        within,
    )
    .await;
    assert_eq!(accepted["state"], "succeeded", "{accepted}");
    assert_eq!(accepted["termination_reason"], "max_turns");
    assert_eq!(accepted["result"]["output"], "Let me look the customer up.");
    assert_eq!(accepted["tool_errors"], 2);

    let ended = |bundle: &str| {
        format!("structured_agents_jobs_ended_total{{bundle=\"{bundle}\",reason=\"max_turns\"}}")
    };
    assert_eq!(metric(&http, &daemon, &ended("looper")).await, 1);
    assert_eq!(metric(&http, &daemon, &ended("accepting")).await, 1);
}
