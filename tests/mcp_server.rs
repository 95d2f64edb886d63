//! The daemon's bundles as MCP tools at `/mcp`, driven by the Python `mcp`
//! client over Streamable HTTP: listing with input schemas, calls that run
//! jobs (and an error result when the job fails), the bearer token, and
//! `tools/list_changed` when a reload adds a bundle, and a session ended
//! the way the specification says (no warning from the client). The client
//! test runs with the pinned SDK (ci/requirements.txt) and the current major
//! (ci/requirements-current.txt).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use common::{mock_server, python, python_current};

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::daemon::{Site, get};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread")]
async fn the_mcp_client_lists_and_calls_bundles_and_hears_of_reloads() {
    the_client_lists_calls_and_hears_of_reloads(python()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_current_mcp_client_lists_and_calls_bundles_and_hears_of_reloads() {
    the_client_lists_calls_and_hears_of_reloads(python_current()).await;
}

async fn the_client_lists_calls_and_hears_of_reloads(python: std::path::PathBuf) {
    let mock = mock_server("replies:\n  - content: \"Hello from a bundle.\"\n").await;
    let site = Site::new(
        &mock.base_url(),
        "[endpoints.down]\nbase_url = \"http://127.0.0.1:9/v1\"\nmax_retries = 0\n",
    );
    site.put_bundle(
        "greeter",
        "name: greeter\nversion: \"1\"\ndescription: Greets.\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\n",
    );
    site.put_bundle(
        "broken",
        "name: broken\nversion: \"1\"\nmodel: {endpoint: down, name: m}\nprompts: {user: \"{{ input }}\"}\n",
    );
    let daemon = site.start_with_env(&[
        ("STRUCTURED_AGENTS_SERVER__TOKEN_ENV", "SA_TEST_TOKEN"),
        ("SA_TEST_TOKEN", "s3cret"),
    ]);
    let mut child = Command::new(&python)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/mcp/bundle_client.py"
        ))
        .args([&daemon.url("/mcp"), "s3cret"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let site_path = site.path().to_path_buf();
    let lines = tokio::task::spawn_blocking(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            if line == "LISTED" {
                // A new bundle while the client is connected: a reload.
                let dir = site_path.join("bundles/.new");
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(
                    dir.join("bundle.yaml"),
                    "name: latecomer\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\n",
                )
                .unwrap();
                std::fs::rename(&dir, site_path.join("bundles/latecomer")).unwrap();
            }
            lines.push(line);
        }
        lines
    })
    .await
    .unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{} {stderr}\n{}",
        python.display(),
        daemon.log()
    );
    // The client ends its session with DELETE /mcp on close and warns
    // (`Session termination failed: …`) about any answer but a success.
    assert!(
        !stderr.contains("Session termination failed"),
        "{}: {stderr}",
        python.display()
    );
    let seen: Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    assert_eq!(seen["tools"], serde_json::json!(["broken", "greeter"]));
    assert_eq!(seen["schema"]["required"], serde_json::json!(["input"]));
    assert_eq!(seen["ok"]["error"], false);
    assert_eq!(seen["ok"]["text"], "Hello from a bundle.");
    assert_eq!(seen["bad"]["error"], true);
    assert!(
        seen["bad"]["text"].as_str().unwrap().contains("ended"),
        "{}",
        seen["bad"]
    );
    assert_eq!(seen["missing_input"]["error"], true);
    assert_eq!(
        seen["tools_after"],
        serde_json::json!(["broken", "greeter", "latecomer"])
    );
    assert_eq!(seen["without_token"], 401);

    // Each call was a job.
    let jobs = get(&client_with_token(), &daemon, "/v1/jobs?bundle=greeter").await;
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 1, "{jobs}");
}

fn client_with_token() -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        "Bearer s3cret".parse().unwrap(),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap()
}

/// One JSON-RPC message to `/mcp`, in `session` when given.
async fn mcp_post(
    http: &reqwest::Client,
    daemon: &common::daemon::Daemon,
    session: Option<&str>,
    body: Value,
) -> reqwest::Response {
    let mut request = http
        .post(daemon.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(&body);
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    request.send().await.unwrap()
}

/// Opens a session (initialize, then initialized); its id.
async fn open_session(http: &reqwest::Client, daemon: &common::daemon::Daemon) -> String {
    let response = try_open_session(http, daemon).await;
    assert_eq!(response.status(), 200);
    let id = response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    let _ = response.text().await.unwrap();
    let initialized = mcp_post(
        http,
        daemon,
        Some(&id),
        serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(initialized.status(), 202);
    id
}

async fn try_open_session(
    http: &reqwest::Client,
    daemon: &common::daemon::Daemon,
) -> reqwest::Response {
    mcp_post(
        http,
        daemon,
        None,
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "bounds-test", "version": "1"}}}),
    )
    .await
}

const GREETER: &str = "name: greeter\nversion: \"1\"\ndescription: Greets.\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\n";

/// `server.mcp.max_sessions` open sessions at most: the next `initialize`
/// is a 503 naming the setting (with `Retry-After`); ending a session
/// (`DELETE /mcp`) makes room.
#[tokio::test(flavor = "multi_thread")]
async fn mcp_sessions_are_capped_in_number() {
    let mock = mock_server("replies:\n  - content: hi\n").await;
    let site = Site::new(&mock.base_url(), "[server.mcp]\nmax_sessions = 2\n");
    site.put_bundle("greeter", GREETER);
    let daemon = site.start();
    let http = common::daemon::client();
    let first = open_session(&http, &daemon).await;
    let _second = open_session(&http, &daemon).await;

    let refused = try_open_session(&http, &daemon).await;
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().contains_key("retry-after"));
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unavailable", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("too many MCP sessions: 2 of server.mcp.max_sessions (2)")
            && message.contains("DELETE /mcp"),
        "{message}"
    );

    let ended = http
        .delete(daemon.url("/mcp"))
        .header("mcp-session-id", &first)
        .send()
        .await
        .unwrap();
    // 200, as the MCP specification's clients expect (rmcp says 202).
    assert_eq!(ended.status(), 200);
    let _third = open_session(&http, &daemon).await;
    assert_eq!(daemon.stop(), Some(0));
}

/// A session without a request for `server.mcp.session_idle` is closed
/// (its id is then unknown, and its place free), but never while one of
/// its calls runs, however long that takes.
#[tokio::test(flavor = "multi_thread")]
async fn idle_mcp_sessions_expire_but_not_during_a_call() {
    // The model answers after 3 s: a call three times the idle timeout.
    let mock = mock_server("replies:\n  - content: \"slow hello\"\n    delay_ms: 3000\n").await;
    let site = Site::new(
        &mock.base_url(),
        "[server.mcp]\nmax_sessions = 1\nsession_idle = \"1s\"\n",
    );
    site.put_bundle("greeter", GREETER);
    let daemon = site.start();
    let http = common::daemon::client();
    let busy = open_session(&http, &daemon).await;
    let call = mcp_post(
        &http,
        &daemon,
        Some(&busy),
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "greeter", "arguments": {"input": "hello"}}}),
    )
    .await;
    assert_eq!(call.status(), 200);
    let answer = call.text().await.unwrap();
    assert!(
        answer.contains("slow hello") && !answer.contains("\"isError\":true"),
        "the session closed during its call: {answer}"
    );

    // Now idle: it expires, which frees the only place.
    let _next = common::daemon::eventually(
        std::time::Duration::from_secs(60),
        "the idle session to expire and free its place",
        || async {
            let response = try_open_session(&http, &daemon).await;
            (response.status() == 200).then_some(())
        },
    )
    .await;
    let gone = mcp_post(
        &http,
        &daemon,
        Some(&busy),
        serde_json::json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}),
    )
    .await;
    assert_eq!(gone.status(), 404, "an expired session is unknown");
    assert_eq!(daemon.stop(), Some(0));
}

/// A bundle called as an MCP tool whose call needs approval: a client that
/// declared elicitation is asked and its answer decides (approve runs the
/// tool once, deny never runs it); any other client gets an error result
/// naming the job to approve.
#[tokio::test(flavor = "multi_thread")]
async fn an_approval_is_asked_through_elicitation_or_named_in_the_error() {
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
    let url = daemon.url("/mcp");
    let run = |mode: &'static str| {
        let url = url.clone();
        tokio::task::spawn_blocking(move || {
            let out = Command::new(python())
                .arg(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/tests/data/mcp/approval_client.py"
                ))
                .args([&url, mode])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{mode}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let line = String::from_utf8_lossy(&out.stdout)
                .lines()
                .last()
                .unwrap()
                .to_string();
            serde_json::from_str::<Value>(&line).unwrap()
        })
    };
    let approved = run("approve").await.unwrap();
    assert_eq!(approved["error"], false, "{approved}");
    assert_eq!(approved["text"], "done");
    let question = approved["asked"][0].as_str().unwrap();
    assert!(
        question.contains("tool `wire` wants to run with {\"amount\":500}"),
        "{question}"
    );
    assert_eq!(std::fs::read_to_string(&effects).unwrap(), "wired\n");

    let denied = run("deny").await.unwrap();
    assert_eq!(denied["error"], false, "the run goes on: {denied}");
    assert_eq!(
        std::fs::read_to_string(&effects).unwrap(),
        "wired\n",
        "never ran"
    );

    let unasked = run("none").await.unwrap();
    assert_eq!(unasked["error"], true, "{unasked}");
    let text = unasked["text"].as_str().unwrap();
    assert!(
        text.contains("awaits approval") && text.contains("structured-agents approve"),
        "{text}"
    );
    let jobs = get(
        &reqwest::Client::new(),
        &daemon,
        "/v1/jobs?state=awaiting_approval",
    )
    .await;
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 1, "{jobs}");
}
