//! Caller tools on the real daemon (issue 49): a bundle that declares
//! `caller_tools` takes a request's `tools`; the model's call of one parks
//! the job and the response hands it over as a `function_call`; the
//! client's `function_call_output` (with `previous_response_id`) resumes
//! the same job, also after the daemon was SIGKILLed while it waited, and
//! is fed to the model exactly once. The parameters that cannot be honoured
//! are 400s naming them.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use common::daemon::{Site, client, get, post_json};
use common::mock_server;
use serde_json::{Value, json};

const SCRIPT: &str = r#"
replies:
  - match: "Shout hi"
    turn: 1
    tool_calls: [{id: call-7, name: shout, arguments: {text: hi}}, {id: call-8, name: shout, arguments: {text: ho}}]
  - match: "Shout hi"
    turn: 2
    content: "Shouted."
"#;

const SHOUTER: &str = "name: shouter\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\ncaller_tools: {max: 2}\n";
const PLAIN: &str = "name: plain\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\n";

fn shout_tool() -> Value {
    json!({"type": "function", "name": "shout", "description": "Shouts the text.",
           "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}})
}

/// A kill while the job waits for the client neither loses the calls nor
/// asks the model again; the outputs resume the same job, which answers
/// once, and sending them again is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_resume_the_same_job_across_a_sigkill() {
    let mock = mock_server(SCRIPT).await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle("shouter", SHOUTER);
    let http = client();
    let daemon = site.start();
    let (status, first) = post_json(
        &http,
        &daemon,
        "/v1/responses",
        json!({"model": "bundle/shouter", "input": "Shout hi.", "tools": [shout_tool()]}),
    )
    .await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["status"], "completed", "{first}");
    let calls: Vec<&Value> = first["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["type"] == "function_call")
        .collect();
    assert_eq!(calls.len(), 2, "{first}");
    assert_eq!(
        (&calls[0]["call_id"], &calls[0]["name"]),
        (&json!("call-7"), &json!("shout"))
    );
    assert_eq!(calls[1]["arguments"], "{\"text\":\"ho\"}", "{first}");
    assert!(
        first["output"]
            .as_array()
            .unwrap()
            .iter()
            .all(|item| item["type"] != "mcp_call"),
        "{first}"
    );
    let response_id = first["id"].as_str().unwrap().to_string();
    let job_id = response_id.strip_prefix("resp_").unwrap().to_string();
    let job = get(&http, &daemon, &format!("/v1/jobs/{job_id}")).await;
    assert_eq!(job["state"], "needs_attention", "{job}");
    assert_eq!(job["pending_call"]["kind"], "caller_call", "{job}");

    daemon.kill9();
    let daemon = site.start();
    let job = get(&http, &daemon, &format!("/v1/jobs/{job_id}")).await;
    assert_eq!(job["state"], "needs_attention", "{job}");

    // An unknown or missing call id is refused naming it; the job waits on.
    let (status, refused) = post_json(
        &http,
        &daemon,
        "/v1/responses",
        json!({"model": "bundle/shouter", "previous_response_id": response_id,
               "input": [{"type": "function_call_output", "call_id": "call-9", "output": "x"}]}),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["param"], "input", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("call-9") && message.contains("call-7") && message.contains("call-8"),
        "{message}"
    );

    let outputs = json!({"model": "bundle/shouter", "previous_response_id": response_id,
        "input": [{"type": "function_call_output", "call_id": "call-7", "output": "HI!"},
                  {"type": "function_call_output", "call_id": "call-8", "output": "HO!"}]});
    let (status, second) = post_json(&http, &daemon, "/v1/responses", outputs.clone()).await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["status"], "completed", "{second}");
    assert_eq!(second["output_text"], "Shouted.", "{second}");
    assert_eq!(
        second["previous_response_id"],
        json!(response_id),
        "{second}"
    );
    assert!(
        second["output"]
            .as_array()
            .unwrap()
            .iter()
            .all(|item| item["type"] == "message"),
        "{second}"
    );
    let second_id = second["id"].as_str().unwrap();
    assert!(
        second_id.starts_with(&format!("{response_id}.")),
        "{second_id}"
    );
    let again = get(&http, &daemon, &format!("/v1/responses/{second_id}")).await;
    assert_eq!(again["output_text"], "Shouted.", "{again}");

    // The same outputs again: the job waits for none.
    let (status, refused) = post_json(&http, &daemon, "/v1/responses", outputs).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["param"], "input", "{refused}");

    let job = get(&http, &daemon, &format!("/v1/jobs/{job_id}")).await;
    assert_eq!(job["state"], "succeeded", "{job}");
    let requests = mock.requests();
    assert_eq!(
        requests.len(),
        2,
        "the model was asked once per turn: {requests:?}"
    );
    let fed: Vec<&Value> = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(fed.len(), 2, "{requests:?}");
    assert_eq!(
        (&fed[0]["content"], &fed[1]["content"]),
        (&json!("HI!"), &json!("HO!"))
    );
    assert_eq!(daemon.stop(), Some(0));
}

/// What cannot be honoured is refused naming the parameter: tools for a
/// bundle that takes none, more than it takes, a name of its own tools,
/// `n > 1`, and `tool_choice: required` without tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_cannot_be_honoured_is_a_400_naming_it() {
    let mock = mock_server(SCRIPT).await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle("shouter", SHOUTER);
    site.put_bundle("plain", PLAIN);
    let http = client();
    let daemon = site.start();
    let other = |name: &str| json!({"type": "function", "name": name});
    for (path, body, param, said) in [
        (
            "/v1/responses",
            json!({"model": "bundle/plain", "input": "x", "tools": [shout_tool()]}),
            "tools",
            "caller_tools",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "bundle/plain", "messages": [{"role": "user", "content": "x"}],
                   "tools": [{"type": "function", "function": {"name": "shout"}}]}),
            "tools",
            "caller_tools",
        ),
        (
            "/v1/responses",
            json!({"model": "bundle/shouter", "input": "x",
                   "tools": [other("a"), other("b"), other("c")]}),
            "tools",
            "at most 2",
        ),
        (
            "/v1/responses",
            json!({"model": "bundle/shouter", "input": "x", "tools": [other("bad name")]}),
            "tools[0]",
            "letters",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "bundle/shouter", "messages": [{"role": "user", "content": "x"}], "n": 2}),
            "n",
            "n = 2",
        ),
        (
            "/v1/responses",
            json!({"model": "bundle/plain", "input": "x", "tool_choice": "required"}),
            "tool_choice",
            "needs caller tools",
        ),
        (
            "/v1/responses",
            json!({"model": "bundle/shouter", "input": "x", "stream": true, "tools": [shout_tool()]}),
            "stream",
            "stream",
        ),
        (
            "/v1/responses",
            json!({"model": "bundle/shouter",
                   "input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]}),
            "previous_response_id",
            "previous_response_id",
        ),
    ] {
        let (status, refused) = post_json(&http, &daemon, path, body.clone()).await;
        assert_eq!(status, 400, "{body}: {refused}");
        assert_eq!(refused["error"]["param"], param, "{body}: {refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains(said), "{body}: {message}");
    }
    assert!(mock.requests().is_empty());
    assert_eq!(daemon.stop(), Some(0));
}

/// Chat completions: the call is handed over as `tool_calls` (its id names
/// the job), and the `tool` message that answers it resumes the same job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_messages_resume_the_same_job_over_chat_completions() {
    let mock = mock_server(SCRIPT).await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle("shouter", SHOUTER);
    let http = client();
    let daemon = site.start();
    let tools = json!([{"type": "function", "function": {"name": "shout", "parameters": {"type": "object"}}}]);
    let mut messages = vec![json!({"role": "user", "content": "Shout hi."})];
    let (status, first) = post_json(
        &http,
        &daemon,
        "/v1/chat/completions",
        json!({"model": "bundle/shouter", "messages": messages, "tools": tools}),
    )
    .await;
    assert_eq!(status, 200, "{first}");
    let choice = &first["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{first}");
    let calls = choice["message"]["tool_calls"].as_array().unwrap().clone();
    assert_eq!(calls.len(), 2, "{first}");
    assert_eq!(calls[0]["function"]["name"], "shout");
    messages.push(choice["message"].clone());
    for (call, output) in calls.iter().zip(["HI!", "HO!"]) {
        messages.push(json!({"role": "tool", "tool_call_id": call["id"], "content": output}));
    }
    let (status, second) = post_json(
        &http,
        &daemon,
        "/v1/chat/completions",
        json!({"model": "bundle/shouter", "messages": messages, "tools": tools}),
    )
    .await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["choices"][0]["finish_reason"], "stop", "{second}");
    assert_eq!(
        second["choices"][0]["message"]["content"], "Shouted.",
        "{second}"
    );
    assert_eq!(first["id"], second["id"], "one job: {first} {second}");
    let jobs = get(&http, &daemon, "/v1/jobs").await;
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 1, "{jobs}");
    assert_eq!(mock.requests().len(), 2);
    assert_eq!(daemon.stop(), Some(0));
}
