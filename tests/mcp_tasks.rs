//! MCP 2026-07-28 on `/mcp`: stateless requests (no `initialize`, no
//! session), `server/discover`, and a long bundle call answered as a task
//! bound to its job — `tasks/get` polls it, `tasks/cancel` cancels the job,
//! and an approval the job waits for is `input_required`, answered with
//! `tasks/update`; and the rest of the server a client expects of a job
//! daemon: a call's log lines and progress as notifications, its job as a
//! resource, each bundle's templates as a prompt. The Python `mcp` client
//! (1.x and 2.x) speaks only the 2025 revisions' tasks, so these requests
//! are raw JSON-RPC over HTTP, the way the revision's specification writes
//! them.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::time::Duration;

use common::daemon::{Daemon, Site, eventually};
use common::mock_server;
use serde_json::{Value, json};

/// One stateless 2026-07-28 request (its `_meta` carries the version and
/// the client's capabilities: the tasks extension); the JSON-RPC answer.
async fn rpc(http: &reqwest::Client, daemon: &Daemon, method: &str, params: Value) -> Value {
    let text = rpc_text(http, daemon, method, params).await;
    answer_of(&text).unwrap_or_else(|| panic!("{method}: no JSON-RPC answer in {text}"))
}

/// The whole answer of one stateless request (JSON, or SSE with the
/// notifications before the answer); `params._meta` adds to the standard
/// metadata.
async fn rpc_text(http: &reqwest::Client, daemon: &Daemon, method: &str, params: Value) -> String {
    send(http, daemon, method, params)
        .await
        .text()
        .await
        .unwrap()
}

/// Sends one stateless request; its response, as it starts.
async fn send(
    http: &reqwest::Client,
    daemon: &Daemon,
    method: &str,
    params: Value,
) -> reqwest::Response {
    let mut params = params;
    let extra = params["_meta"].as_object().cloned().unwrap_or_default();
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "tasks-test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {
            "extensions": {"io.modelcontextprotocol/tasks": {}}
        }
    });
    for (key, value) in extra {
        params["_meta"][key] = value;
    }
    let mut request = http
        .post(daemon.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    // The standard headers (SEP-2243) repeat what routes the request.
    let name = ["name", "uri", "taskId"]
        .iter()
        .find_map(|key| params[*key].as_str());
    if let Some(name) = name {
        request = request.header("mcp-name", name);
    }
    let response = request
        .json(&json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}))
        .send()
        .await
        .unwrap();
    assert!(
        !response.headers().contains_key("mcp-session-id"),
        "a 2026-07-28 request opens no session"
    );
    response
}

/// An open `subscriptions/listen` request: its SSE answer, read message by
/// message.
struct Listening {
    response: reqwest::Response,
    buffer: String,
    heard: Vec<Value>,
}

impl Listening {
    /// Listens to the resources `uris` (with `http`'s API key).
    async fn open(http: &reqwest::Client, daemon: &Daemon, uris: &[String]) -> Self {
        let params = json!({"notifications": {"resourceSubscriptions": uris}});
        let response = send(http, daemon, "subscriptions/listen", params).await;
        assert!(response.status().is_success(), "{}", response.status());
        Self {
            response,
            buffer: String::new(),
            heard: Vec::new(),
        }
    }

    /// The next message that `wanted`, reading on (within a minute); the
    /// messages read on the way are kept in `heard`.
    async fn until(&mut self, wanted: impl Fn(&Value) -> bool) -> Value {
        let read = async {
            loop {
                while let Some(end) = self.buffer.find("\n\n") {
                    let event: String = self.buffer.drain(..end + 2).collect();
                    let data: String = event
                        .lines()
                        .filter_map(|line| line.strip_prefix("data:"))
                        .map(str::trim)
                        .collect();
                    let Ok(message) = serde_json::from_str::<Value>(&data) else {
                        continue;
                    };
                    self.heard.push(message.clone());
                    if wanted(&message) {
                        return message;
                    }
                }
                match self.response.chunk().await.unwrap() {
                    Some(chunk) => self.buffer.push_str(&String::from_utf8_lossy(&chunk)),
                    None => panic!("the listen ended; it said {:#?}", self.heard),
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(60), read)
            .await
            .unwrap_or_else(|_| panic!("nothing wanted within a minute"))
    }
}

fn is_method(message: &Value, method: &str) -> bool {
    message["method"] == method
}

/// The JSON-RPC answer (the message with an id) in a JSON or SSE body.
fn answer_of(text: &str) -> Option<Value> {
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        return Some(value);
    }
    text.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .find(|message| message.get("id").is_some())
}

/// Polls `tasks/get` until the task's status is `status`.
async fn task_until(http: &reqwest::Client, daemon: &Daemon, task: &str, status: &str) -> Value {
    eventually(
        Duration::from_secs(60),
        &format!("task {task} to be {status}"),
        || async {
            let got = rpc(http, daemon, "tasks/get", json!({"taskId": task})).await;
            assert!(got["error"].is_null(), "{got}");
            (got["result"]["status"] == status).then_some(got["result"].clone())
        },
    )
    .await
}

/// Calls `bundle` with tasks declared; the task it answers with.
async fn call_as_task(http: &reqwest::Client, daemon: &Daemon, bundle: &str) -> Value {
    let called = rpc(
        http,
        daemon,
        "tools/call",
        json!({"name": bundle, "arguments": {"input": "go"}}),
    )
    .await;
    assert_eq!(called["result"]["resultType"], "task", "{called}");
    called["result"].clone()
}

const SLOW: &str = "name: slow\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\n";

#[tokio::test(flavor = "multi_thread")]
async fn a_long_call_is_a_task_polled_to_its_answer_and_discover_names_the_revision() {
    let mock = mock_server("replies:\n  - content: \"slow answer\"\n    delay_ms: 3000\n").await;
    let site = Site::new(&mock.base_url(), "[server.mcp]\ntask_after = \"500ms\"\n");
    site.put_bundle("slow", SLOW);
    let daemon = site.start();
    let http = common::daemon::client();

    let discovered = rpc(&http, &daemon, "server/discover", json!({})).await;
    let result = &discovered["result"];
    assert!(
        result["supportedVersions"]
            .as_array()
            .is_some_and(|v| v.contains(&json!("2026-07-28")) && v.contains(&json!("2025-06-18"))),
        "{discovered}"
    );
    assert!(
        result["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"].is_object(),
        "{discovered}"
    );

    let task = call_as_task(&http, &daemon, "slow").await;
    let id = task["taskId"].as_str().unwrap().to_string();
    assert_eq!(task["status"], "working", "{task}");
    // The task is the job.
    let job = common::daemon::get(&http, &daemon, &format!("/v1/jobs/{id}")).await;
    assert_eq!(job["bundle"], "slow", "{job}");

    let done = task_until(&http, &daemon, &id, "completed").await;
    assert_eq!(
        done["result"]["content"][0]["text"], "slow answer",
        "{done}"
    );
    assert_eq!(done["result"]["isError"], false, "{done}");

    // A task id that names no job the caller sees.
    let missing = rpc(
        &http,
        &daemon,
        "tasks/get",
        json!({"taskId": "no-such-job"}),
    )
    .await;
    assert!(
        missing["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no task no-such-job")),
        "{missing}"
    );
    assert_eq!(daemon.stop(), Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn tasks_cancel_cancels_the_job() {
    let mock = mock_server("replies:\n  - content: \"never\"\n    delay_ms: 60000\n").await;
    let site = Site::new(&mock.base_url(), "[server.mcp]\ntask_after = \"200ms\"\n");
    site.put_bundle("slow", SLOW);
    let daemon = site.start();
    let http = common::daemon::client();
    let task = call_as_task(&http, &daemon, "slow").await;
    let id = task["taskId"].as_str().unwrap().to_string();

    let acked = rpc(&http, &daemon, "tasks/cancel", json!({"taskId": id})).await;
    assert!(acked["result"].is_object(), "{acked}");
    task_until(&http, &daemon, &id, "cancelled").await;
    let job = common::daemon::get(&http, &daemon, &format!("/v1/jobs/{id}")).await;
    assert_eq!(job["state"], "cancelled", "{job}");
    assert_eq!(daemon.stop(), Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_is_input_required_and_tasks_update_decides_it() {
    let mock = mock_server(
        "replies:\n  - {turn: 1, tool_calls: [{id: w1, name: wire, arguments: {amount: 500}}]}\n  - {turn: 2, content: done}\n",
    )
    .await;
    let site = Site::new(&mock.base_url(), "");
    let effects = site.path().join("effects.txt");
    site.put_bundle(
        "bank",
        &format!(
            "name: bank\nversion: \"1\"\nmodel: {{endpoint: mock, name: m}}\nprompts: {{user: \"{{{{ input }}}}\"}}\ntools:\n  - name: wire\n    kind: process\n    approval: always\n    command: [python3, -c, \"open('{}', 'a').write('wired' + chr(10)); print('{{}}')\"]\n",
            effects.display()
        ),
    );
    let daemon = site.start();
    let http = common::daemon::client();
    let task = call_as_task(&http, &daemon, "bank").await;
    let id = task["taskId"].as_str().unwrap().to_string();

    let waiting = task_until(&http, &daemon, &id, "input_required").await;
    let asked = &waiting["inputRequests"]["approval-w1"];
    assert_eq!(asked["method"], "elicitation/create", "{waiting}");
    let question = asked["params"]["message"].as_str().unwrap();
    assert!(
        question.contains("tool `wire` wants to run with {\"amount\":500}"),
        "{question}"
    );
    assert!(!effects.exists(), "nothing ran before the decision");

    let wrong = rpc(
        &http,
        &daemon,
        "tasks/update",
        json!({"taskId": id, "inputResponses": {"approval-zz": {"action": "accept"}}}),
    )
    .await;
    assert!(
        wrong["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("approval-w1")),
        "{wrong}"
    );
    let updated = rpc(
        &http,
        &daemon,
        "tasks/update",
        json!({"taskId": id, "inputResponses": {"approval-w1": {
            "action": "accept", "content": {"approve": true}}}}),
    )
    .await;
    assert!(updated["result"].is_object(), "{updated}");
    let done = task_until(&http, &daemon, &id, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "done", "{done}");
    assert_eq!(std::fs::read_to_string(&effects).unwrap(), "wired\n");
    assert_eq!(daemon.stop(), Some(0));
}

/// The messages of an SSE answer.
fn messages_of(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_logs_and_reports_progress_and_its_job_is_a_resource_and_bundles_are_prompts() {
    let mock = mock_server("replies:\n  - content: \"Hello, Ada.\"\n").await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle(
        "greeter",
        "name: greeter\nversion: \"1\"\ndescription: Greets.\nmodel: {endpoint: mock, name: m}\nprompts: {system: \"You greet {{ name }}.\", user: \"{{ input }}\"}\n",
    );
    let daemon = site.start();
    let http = common::daemon::client();

    // A call with a log level and a progress token hears of its job.
    let text = rpc_text(
        &http,
        &daemon,
        "tools/call",
        json!({"name": "greeter", "arguments": {"input": "hi", "variables": {"name": "Ada"}},
               "_meta": {"io.modelcontextprotocol/logLevel": "info", "progressToken": "p1"}}),
    )
    .await;
    let messages = messages_of(&text);
    let answer = messages.iter().find(|m| m.get("id").is_some()).unwrap();
    assert_eq!(
        answer["result"]["content"][0]["text"], "Hello, Ada.",
        "{text}"
    );
    let logged: Vec<&Value> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/message")
        .collect();
    assert!(
        logged
            .iter()
            .any(|m| m["params"]["data"]["state"] == "succeeded"),
        "{text}"
    );
    let job_id = logged[0]["params"]["data"]["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    let progress: Vec<&Value> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert!(
        !progress.is_empty()
            && progress
                .iter()
                .all(|m| m["params"]["progressToken"] == "p1"),
        "{text}"
    );

    // The job is a resource.
    let listed = rpc(&http, &daemon, "resources/list", json!({})).await;
    let uri = format!("sa://jobs/{job_id}");
    assert!(
        listed["result"]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["uri"] == uri.as_str()),
        "{listed}"
    );
    let read = rpc(&http, &daemon, "resources/read", json!({"uri": uri})).await;
    let job: Value =
        serde_json::from_str(read["result"]["contents"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(job["state"], "succeeded", "{read}");
    let unknown = rpc(
        &http,
        &daemon,
        "resources/read",
        json!({"uri": "sa://jobs/nope"}),
    )
    .await;
    assert!(
        unknown["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("sa://jobs/nope")),
        "{unknown}"
    );

    // The bundle is a prompt with its template's variables as arguments.
    let prompts = rpc(&http, &daemon, "prompts/list", json!({})).await;
    let greeter = &prompts["result"]["prompts"][0];
    assert_eq!(greeter["name"], "greeter", "{prompts}");
    let arguments: Vec<&str> = greeter["arguments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(arguments, ["input", "name"], "{prompts}");
    let got = rpc(
        &http,
        &daemon,
        "prompts/get",
        json!({"name": "greeter", "arguments": {"input": "hello", "name": "Bo"}}),
    )
    .await;
    let rendered = &got["result"]["messages"];
    assert_eq!(rendered[0]["content"]["text"], "You greet Bo.", "{got}");
    assert_eq!(rendered[1]["content"]["text"], "hello", "{got}");
    let missing = rpc(
        &http,
        &daemon,
        "prompts/get",
        json!({"name": "greeter", "arguments": {"input": "hello"}}),
    )
    .await;
    assert!(
        missing["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("prompts.system")),
        "{missing}"
    );
    assert_eq!(daemon.stop(), Some(0));
}

/// A session (2025-06-18) that subscribes to a job's resource hears of
/// each change on its notification stream (`GET /mcp`).
#[tokio::test(flavor = "multi_thread")]
async fn a_session_subscribed_to_a_job_hears_of_its_changes() {
    let mock = mock_server("replies:\n  - content: \"later\"\n    delay_ms: 2000\n").await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle("slow", SLOW);
    let daemon = site.start();
    let http = common::daemon::client();
    let opened = http
        .post(daemon.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "subscriber", "version": "1"}}}),
        )
        .send()
        .await
        .unwrap();
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    let _ = opened.text().await.unwrap();
    let post = |body: Value| {
        http.post(daemon.url("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", &session)
            .json(&body)
            .send()
    };
    let initialized = post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await
        .unwrap();
    assert_eq!(initialized.status(), 202);
    let mut stream = http
        .get(daemon.url("/mcp"))
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();

    let job = common::daemon::submit(&http, &daemon, "slow", "go").await;
    let uri = format!("sa://jobs/{}", job["id"].as_str().unwrap());
    let subscribed = post(
        json!({"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe",
        "params": {"uri": uri}}),
    )
    .await
    .unwrap()
    .text()
    .await
    .unwrap();
    assert!(subscribed.contains("\"result\""), "{subscribed}");

    let mut heard = String::new();
    while !heard.contains("notifications/resources/updated") {
        let chunk = stream
            .chunk()
            .await
            .unwrap()
            .expect("the stream ended unheard");
        heard.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(heard.contains(&uri), "{heard}");
    assert_eq!(daemon.stop(), Some(0));
}

/// A key with only `submit` polls the task of its own call, but reading
/// jobs as resources takes `read` and cancelling a task `operate`, as on
/// their HTTP routes.
#[tokio::test(flavor = "multi_thread")]
async fn resources_and_tasks_cancel_take_the_scopes_of_their_routes() {
    let mock = mock_server("replies:\n  - content: \"later\"\n    delay_ms: 2000\n").await;
    let site = Site::new(
        &mock.base_url(),
        "[auth]\nkeys_file = \"keys.toml\"\n\n[server.mcp]\ntask_after = \"200ms\"\n",
    );
    let token = common::daemon::new_key(
        &site.path().join("keys.toml"),
        "submitter",
        &["--scopes", "submit"],
    );
    site.put_bundle("slow", SLOW);
    let daemon = site.start();
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {token}").parse().unwrap(),
    );
    let http = reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap();

    let task = call_as_task(&http, &daemon, "slow").await;
    let id = task["taskId"].as_str().unwrap().to_string();
    let refused = rpc(&http, &daemon, "tasks/cancel", json!({"taskId": id})).await;
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("`operate` scope")),
        "{refused}"
    );
    let listed = rpc(&http, &daemon, "resources/list", json!({})).await;
    assert!(
        listed["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("`read` scope")),
        "{listed}"
    );
    let done = task_until(&http, &daemon, &id, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "later", "{done}");
    assert_eq!(daemon.stop(), Some(0));
}

/// A 2026-07-28 client listens to a job's resource (`subscriptions/listen`):
/// the acknowledgment names what is accepted (the job; not a URI that names
/// no resource here), each change of the job arrives as
/// `notifications/resources/updated` tagged with the listen's id, and once
/// the job has ended the listen ends with its final result.
#[tokio::test(flavor = "multi_thread")]
async fn a_listen_hears_of_its_jobs_changes_until_the_job_ends() {
    let mock = mock_server("replies:\n  - content: \"later\"\n    delay_ms: 3000\n").await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle("slow", SLOW);
    let daemon = site.start();
    let http = common::daemon::client();
    let job = common::daemon::submit(&http, &daemon, "slow", "go").await;
    let id = job["id"].as_str().unwrap().to_string();
    let uri = format!("sa://jobs/{id}");
    let asked = [uri.clone(), "test://static-text".to_string()];
    let mut listening = Listening::open(&http, &daemon, &asked).await;
    let ack = listening
        .until(|m| is_method(m, "notifications/subscriptions/acknowledged"))
        .await;
    assert_eq!(
        ack["params"]["notifications"]["resourceSubscriptions"],
        json!([uri]),
        "{ack}"
    );
    let updated = listening
        .until(|m| is_method(m, "notifications/resources/updated"))
        .await;
    assert_eq!(updated["params"]["uri"], uri, "{updated}");
    assert_eq!(
        updated["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 7,
        "{updated}"
    );
    let end = listening.until(|m| m.get("id").is_some()).await;
    assert_eq!(end["result"]["resultType"], "complete", "{end}");
    let done = common::daemon::get(&http, &daemon, &format!("/v1/jobs/{id}")).await;
    assert_eq!(
        done["state"], "succeeded",
        "the listen ended with its job: {done}"
    );
    assert_eq!(daemon.stop(), Some(0));
}

/// A listen hears only of jobs its API key may read: naming another key's
/// job ends it at once with the error `resources/read` gives, and nothing
/// of that job is told; the same key's listen on its own job hears it.
#[tokio::test(flavor = "multi_thread")]
async fn a_listen_never_hears_of_another_keys_job() {
    let mock = mock_server("replies:\n  - content: \"later\"\n    delay_ms: 3000\n").await;
    let site = Site::new(&mock.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    let keys = site.path().join("keys.toml");
    let key = |name: &str| {
        let token = common::daemon::new_key(&keys, name, &["--scopes", "submit,read"]);
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        );
        reqwest::Client::builder()
            .default_headers(headers)
            .build()
            .unwrap()
    };
    let (alice, bob) = (key("alice"), key("bob"));
    site.put_bundle("slow", SLOW);
    let daemon = site.start();
    let alices = common::daemon::submit(&alice, &daemon, "slow", "hers").await;
    let alices = format!("sa://jobs/{}", alices["id"].as_str().unwrap());
    let bobs = common::daemon::submit(&bob, &daemon, "slow", "his").await;
    let bobs = format!("sa://jobs/{}", bobs["id"].as_str().unwrap());

    let mut prying = Listening::open(&bob, &daemon, std::slice::from_ref(&alices)).await;
    let refused = prying.until(|m| m.get("id").is_some()).await;
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&alices) && message.contains("no job with id"),
        "{refused}"
    );
    assert!(
        !prying
            .heard
            .iter()
            .any(|m| is_method(m, "notifications/resources/updated")),
        "{:#?}",
        prying.heard
    );

    let mut own = Listening::open(&bob, &daemon, std::slice::from_ref(&bobs)).await;
    let updated = own
        .until(|m| is_method(m, "notifications/resources/updated"))
        .await;
    assert_eq!(updated["params"]["uri"], bobs, "{updated}");
    let end = own.until(|m| m.get("id").is_some()).await;
    assert_eq!(end["result"]["resultType"], "complete", "{end}");
    assert!(
        own.heard.iter().all(|m| m["params"]["uri"] != alices),
        "{:#?}",
        own.heard
    );
    assert_eq!(daemon.stop(), Some(0));
}
