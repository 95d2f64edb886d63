//! A caller's answer format — `response_format` on chat completions,
//! `text.format` on Responses, of type `json_schema` or `json_object` — is
//! honoured (issue 49): the model server is asked for it on the turns that
//! may answer, on its family's wire (`response_format` for OpenAI,
//! `structured_outputs.json` for vLLM), and the final answer is checked
//! against the schema. A conforming answer comes back as the message
//! content; one that does not match fails the job with an error naming the
//! format and the schema path that failed; a format that cannot be held to
//! is a 400 naming the parameter. The format is stored with the job, so a
//! job resumed after its daemon died still holds to it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::time::Duration;

use common::daemon::{Daemon, SHORT_LEASE, Site, client, post_json};
use common::mock_server;
use serde_json::{Value, json};
use structured_agents::mock::MockServer;

/// Ada's answer matches the schema, Bob's age is text, Cy answers prose;
/// "2+3" calls `add` first.
const SCRIPT: &str = r#"
replies:
  - match: "Ada"
    content: '{"name": "Ada", "age": 36}'
  - match: "Bob"
    content: '{"name": "Bob", "age": "old"}'
  - match: "Cy"
    content: "Cy is 40."
  - match: "2+3"
    turn: 1
    tool_calls: [{id: call-1, name: add, arguments: {a: 2, b: 3}}]
  - match: "2+3"
    turn: 2
    content: '{"name": "five", "age": 5}'
"#;

/// A bundle without tools, on `server` (`openai`, `vllm`).
fn plain(name: &str, server: &str) -> String {
    format!(
        "name: {name}\nversion: \"1\"\nmodel: {{endpoint: mock, name: m, server: {server}}}\nprompts: {{user: \"{{{{ input }}}}\"}}\n"
    )
}

/// A bundle whose `add` tool the daemon runs, on `server`.
fn adder(name: &str, server: &str) -> String {
    format!(
        r#"name: {name}
version: "1"
model: {{endpoint: mock, name: m, server: {server}}}
prompts: {{user: "{{{{ input }}}}"}}
tools:
  - name: add
    kind: process
    description: adds a and b
    effect: read_only
    command: [python3, -c, "import json,sys; a=json.load(sys.stdin); print(a['a']+a['b'])"]
"#
    )
}

fn person() -> Value {
    json!({"type": "object",
           "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
           "required": ["name", "age"], "additionalProperties": false})
}

fn chat_format() -> Value {
    json!({"type": "json_schema", "json_schema": {"name": "person", "strict": true, "schema": person()}})
}

fn text_format() -> Value {
    json!({"format": {"type": "json_schema", "name": "person", "strict": true, "schema": person()}})
}

async fn site() -> (MockServer, Site) {
    let mock = mock_server(SCRIPT).await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle("people", &plain("people", "openai"));
    site.put_bundle("people-vllm", &plain("people-vllm", "vllm"));
    site.put_bundle("adder", &adder("adder", "openai"));
    site.put_bundle("adder-vllm", &adder("adder-vllm", "vllm"));
    (mock, site)
}

/// The model requests whose user message holds `text`.
fn requests_for(mock: &MockServer, text: &str) -> Vec<Value> {
    mock.requests()
        .into_iter()
        .filter(|r| {
            r["messages"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["role"] == "user" && m["content"].as_str().unwrap_or("").contains(text))
        })
        .collect()
}

async fn chat(daemon: &Daemon, model: &str, text: &str, format: Value) -> (u16, Value) {
    let body = json!({"model": model, "messages": [{"role": "user", "content": text}],
                      "response_format": format});
    post_json(&client(), daemon, "/v1/chat/completions", body).await
}

async fn respond(daemon: &Daemon, model: &str, text: &str) -> (u16, Value) {
    let body = json!({"model": model, "input": text, "text": text_format()});
    post_json(&client(), daemon, "/v1/responses", body).await
}

/// The failed job's message names the format and where the answer fails it.
fn assert_names_the_failing_path(message: &str) {
    assert!(message.contains("\"person\""), "{message}");
    assert!(
        message.contains("at /age (schema path /properties/age/type)"),
        "{message}"
    );
    assert!(
        message.contains("have the bundle's model produce it"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_completions_hold_the_answer_to_the_response_format() {
    let (mock, site) = site().await;
    let daemon = site.start();

    let (status, body) = chat(&daemon, "bundle/people", "Who is Ada?", chat_format()).await;
    assert_eq!(status, 200, "{body}");
    let content = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(content).unwrap(),
        json!({"name": "Ada", "age": 36})
    );
    let asked = requests_for(&mock, "Ada");
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["response_format"], chat_format(), "{}", asked[0]);

    let (status, body) = chat(&daemon, "bundle/people", "Who is Bob?", chat_format()).await;
    assert_eq!(status, 500, "{body}");
    assert_eq!(body["error"]["code"], "job_failed", "{body}");
    assert_names_the_failing_path(body["error"]["message"].as_str().unwrap());
    // Not retried: a new attempt would read the same answer from the journal.
    assert_eq!(requests_for(&mock, "Bob").len(), 1);

    // Streamed, the answer's text has gone out when the check fails: the
    // last chunk before `[DONE]` is the error.
    let body = json!({"model": "bundle/people", "stream": true, "response_format": chat_format(),
                      "messages": [{"role": "user", "content": "Bob, streamed"}]});
    let response = client()
        .post(daemon.url("/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let events = common::daemon::read_sse_response(response, None).await;
    let data: Vec<&str> = events.iter().map(|(_, _, data)| data.as_str()).collect();
    assert_eq!(data.last(), Some(&"[DONE]"), "{data:?}");
    let error: Value = serde_json::from_str(data[data.len() - 2]).unwrap();
    assert_eq!(error["error"]["code"], "job_failed", "{error}");
    assert_names_the_failing_path(error["error"]["message"].as_str().unwrap());

    let (status, body) = chat(
        &daemon,
        "bundle/people",
        "Who is Cy?",
        json!({"type": "json_object"}),
    )
    .await;
    assert_eq!(status, 500, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("not JSON"), "{message}");
    assert_eq!(
        requests_for(&mock, "Cy")[0]["response_format"],
        json!({"type": "json_object"})
    );

    // A format that cannot be held to is refused naming it.
    for format in [
        json!({"type": "json_schema", "json_schema": {"name": "x"}}),
        json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 7}}}),
        json!({"type": "xml"}),
    ] {
        let (status, body) = chat(&daemon, "bundle/people", "Who is Ada?", format.clone()).await;
        assert_eq!(status, 400, "{format}: {body}");
        assert_eq!(body["error"]["param"], "response_format", "{body}");
    }
    assert_eq!(requests_for(&mock, "Ada").len(), 1, "a refused request ran");
    assert_eq!(daemon.stop(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_hold_the_answer_to_text_format() {
    let (mock, site) = site().await;
    let daemon = site.start();

    let (status, body) = respond(&daemon, "bundle/people", "Who is Ada?").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "completed", "{body}");
    let answer: Value = serde_json::from_str(body["output_text"].as_str().unwrap()).unwrap();
    assert_eq!(answer, json!({"name": "Ada", "age": 36}));
    // The response echoes the format it holds to, in the Responses shape.
    assert_eq!(body["text"], text_format(), "{body}");
    assert_eq!(
        requests_for(&mock, "Ada")[0]["response_format"],
        chat_format(),
        "the Responses format goes to the model as chat's response_format"
    );

    let (status, body) = respond(&daemon, "bundle/people", "Who is Bob?").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "failed", "{body}");
    assert_names_the_failing_path(body["error"]["message"].as_str().unwrap());

    let refused = json!({"model": "bundle/people", "input": "Who is Ada?",
                         "text": {"format": {"type": "json_schema", "name": "x"}}});
    let (status, body) = post_json(&client(), &daemon, "/v1/responses", refused).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "text.format", "{body}");
    assert_eq!(daemon.stop(), Some(0));
}

/// With tools, OpenAI gets the format beside them on every turn (a reply is
/// calls or an answer of that shape); vLLM would hold the calls to the
/// schema too, so its turns that offer tools go without it and the answer
/// is checked only. Without tools, vLLM gets it in `structured_outputs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_server_family_is_asked_for_the_format_on_its_own_wire() {
    let (mock, site) = site().await;
    let daemon = site.start();

    let (status, body) = respond(&daemon, "bundle/adder", "What is 2+3?").await;
    assert_eq!(body["status"], "completed", "{status} {body}");
    let turns = requests_for(&mock, "2+3");
    assert_eq!(turns.len(), 2);
    for turn in &turns {
        assert!(turn["tools"].is_array(), "{turn}");
        assert_eq!(turn["response_format"], chat_format(), "{turn}");
    }

    let (_, body) = respond(&daemon, "bundle/adder-vllm", "Again: 2+3?").await;
    assert_eq!(body["status"], "completed", "{body}");
    for turn in requests_for(&mock, "Again: 2+3") {
        assert!(turn["tools"].is_array(), "{turn}");
        assert!(turn.get("structured_outputs").is_none(), "{turn}");
        assert!(turn.get("response_format").is_none(), "{turn}");
    }

    let (_, body) = respond(&daemon, "bundle/people-vllm", "Is Ada here?").await;
    assert_eq!(body["status"], "completed", "{body}");
    let asked = requests_for(&mock, "Is Ada here?");
    assert_eq!(asked[0]["structured_outputs"], json!({"json": person()}));
    assert!(asked[0].get("response_format").is_none(), "{}", asked[0]);

    // Checked even where the model was not held: Bob's age is text.
    let (_, body) = respond(&daemon, "bundle/adder-vllm", "Who is Bob?").await;
    assert_eq!(body["status"], "failed", "{body}");
    assert_names_the_failing_path(body["error"]["message"].as_str().unwrap());
    assert_eq!(daemon.stop(), Some(0));
}

/// The format is the job's, stored with it: the daemon dies before the
/// model call; the restarted daemon's attempt asks for the format and holds
/// the answer to it. The daemon that dies holds a short lease, so the
/// restart takes the job over in seconds; the wait is a hang guard only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_resumed_after_its_daemon_died_still_holds_to_the_format() {
    let (mock, site) = site().await;
    let mut daemon = site.start_with_env(&[("SA_FAILPOINTS", "before_model_call"), SHORT_LEASE]);
    let body = json!({"model": "bundle/people", "input": "Who is Bob?", "text": text_format(),
                      "background": true});
    let (status, queued) = post_json(&client(), &daemon, "/v1/responses", body).await;
    assert_eq!(status, 200, "{queued}");
    let id = queued["id"].as_str().unwrap().to_string();
    daemon.wait_killed_at("before_model_call");
    assert!(mock.requests().is_empty());

    let daemon = site.start();
    let done = common::daemon::eventually(Duration::from_secs(180), "the resumed response", || {
        let url = daemon.url(&format!("/v1/responses/{id}"));
        async move {
            let body: Value = client().get(url).send().await.ok()?.json().await.ok()?;
            (body["status"] == "failed" || body["status"] == "completed").then_some(body)
        }
    })
    .await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_names_the_failing_path(done["error"]["message"].as_str().unwrap());
    let asked = requests_for(&mock, "Bob");
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["response_format"], chat_format());
    assert_eq!(daemon.stop(), Some(0));
}
