//! Running one tool call outside any job (issue 38 item 5): the CLI's
//! `tool run` on a bundle directory and on a bundle of the running daemon
//! (`--remote`), and `POST /v1/bundles/{name}/tools/{tool}:run` through
//! admission (scoped keys, bundle globs). The call goes through the
//! engine's pipeline: coerced arguments, the same error codes, the tool's
//! timeout and output cap; approval-gated calls are refused. In the daemon
//! the call is a `tool_run` job a worker runs, never the API process, and
//! an `unsafe` call is not run twice when the daemon dies under it.

mod common;

use std::path::Path;
use std::process::Command;

use common::daemon::{
    Daemon, SHORT_LEASE, Site, client, file_lines, get, new_key, run_cli, wait_terminal,
};
use common::mock_server;
use serde_json::{Value, json};

/// A bundle with an adder, a sleeper (timeout 1 s), a tool whose output
/// is over its cap and a payment tool gated over 100.
const CALC: &str = r#"name: calc
version: "1"
model: {endpoint: mock, name: m}
prompts: {user: "{{ input }}"}
tools:
  - name: add
    kind: process
    effect: read_only
    description: adds a and b
    parameters: {type: object, properties: {a: {type: integer}, b: {type: integer}}, required: [a, b]}
    command: [python3, -c, "import json,sys; a=json.load(sys.stdin); print(json.dumps({'sum': a['a'] + a['b']}))"]
  - name: sleep
    kind: process
    effect: read_only
    description: sleeps
    timeout: 1s
    command: [python3, -c, "import time; time.sleep(30)"]
  - name: flood
    kind: process
    effect: read_only
    description: too much output
    max_output_bytes: 1000
    command: [python3, -c, "print('x' * 100000)"]
  - name: pay
    kind: process
    description: pays
    parameters: {type: object, properties: {amount: {type: integer}}, required: [amount]}
    approval: {when: "args.amount > 100"}
    command: [python3, -c, "print('{\"paid\": true}')"]
"#;

/// `structured-agents tool run ARGS…` in-process on a bundle directory:
/// its exit code and stdout as JSON (Null when not JSON), and stderr.
fn tool_run_local(dir: &Path, args: &[&str]) -> (i32, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_structured-agents"))
        .args(["tool", "run"])
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    answer(out)
}

fn answer(out: std::process::Output) -> (i32, Value, String) {
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    (
        out.status.code().unwrap_or(-1),
        serde_json::from_str(&stdout).unwrap_or(Value::Null),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn tool_run_on_a_bundle_directory_goes_through_the_pipeline() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bundle.yaml"), CALC).unwrap();

    // Arguments are coerced to the schema as in a job ("2" → 2).
    let (code, out, err) = tool_run_local(dir.path(), &["add", "--args", r#"{"a": "2", "b": 3}"#]);
    assert_eq!(code, 0, "{out} {err}");
    assert_eq!(out["value"], json!({"sum": 5}));
    assert_eq!(out["is_error"], false);
    assert_eq!(out["attempts"], 1);

    let (code, out, _) = tool_run_local(dir.path(), &["add", "--args", r#"{"a": 1}"#]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(out["error_code"], "bad_args");
    assert_eq!(out["output"], "bad_args:missing:b");

    let (code, out, _) = tool_run_local(dir.path(), &["sleep"]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(out["output"], "tool_error:timeout");

    let (code, out, _) = tool_run_local(dir.path(), &["flood"]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(out["error_code"], "tool_error");
    assert!(
        out["output"].as_str().unwrap().contains("1000"),
        "the error names the cap: {out}"
    );

    // Under the approval threshold it runs; over it, it needs a job.
    let (code, out, _) = tool_run_local(dir.path(), &["pay", "--args", r#"{"amount": 5}"#]);
    assert_eq!((code, &out["value"]), (0, &json!({"paid": true})), "{out}");
    let (code, _, err) = tool_run_local(dir.path(), &["pay", "--args", r#"{"amount": 500}"#]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("approval") && err.contains("submit"), "{err}");

    let (code, _, err) = tool_run_local(dir.path(), &["nope"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("no tool named \"nope\"") && err.contains("add"),
        "{err}"
    );
}

async fn post(daemon: &Daemon, token: &str, path: &str, body: Value) -> (u16, Value) {
    let response = client()
        .post(daemon.url(path))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_api_runs_a_tool_for_a_key_that_may_use_the_bundle() {
    let server = mock_server("replies:\n  - content: unused\n").await;
    let site = Site::new(&server.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    let file = site.path().join("keys.toml");
    let runner = new_key(
        &file,
        "runner",
        &["--scopes", "submit", "--bundles", "calc"],
    );
    let reader = new_key(&file, "reader", &["--scopes", "read"]);
    let elsewhere = new_key(
        &file,
        "elsewhere",
        &["--scopes", "submit", "--bundles", "other-*"],
    );
    site.put_bundle("calc", CALC);
    let daemon = site.start();
    let add = "/v1/bundles/calc/tools/add:run";

    let (status, out) = post(
        &daemon,
        &runner,
        add,
        json!({"arguments": {"a": 2, "b": "40"}}),
    )
    .await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["value"], json!({"sum": 42}));
    assert_eq!(
        (&out["bundle"], &out["tool"]),
        (&json!("calc"), &json!("add"))
    );
    // The colon-free spelling, and arguments as the text a model writes.
    let (status, out) = post(
        &daemon,
        &runner,
        "/v1/bundles/calc/tools/add/run",
        json!({"arguments": r#"{"a": 1, "b": 1}"#}),
    )
    .await;
    assert_eq!((status, &out["value"]), (200, &json!({"sum": 2})), "{out}");

    // The engine's error codes, as in a job.
    let (status, out) = post(&daemon, &runner, add, json!({"arguments": "{not json"})).await;
    assert_eq!(
        (status, &out["error_code"]),
        (200, &json!("bad_args")),
        "{out}"
    );
    let sleep = "/v1/bundles/calc/tools/sleep:run";
    let (status, out) = post(&daemon, &runner, sleep, json!({})).await;
    assert_eq!(
        (status, &out["output"]),
        (200, &json!("tool_error:timeout")),
        "{out}"
    );

    // What needs a job, or names no tool, is refused.
    let pay = "/v1/bundles/calc/tools/pay:run";
    let (status, out) = post(&daemon, &runner, pay, json!({"arguments": {"amount": 500}})).await;
    assert_eq!(status, 409, "{out}");
    assert!(out.to_string().contains("approval"), "{out}");
    let (status, out) = post(
        &daemon,
        &runner,
        "/v1/bundles/calc/tools/nope:run",
        json!({}),
    )
    .await;
    assert_eq!(status, 404, "{out}");
    assert_eq!(out["error"]["field"], "tool");
    let (status, _) = post(&daemon, &runner, "/v1/bundles/calc/tools/add", json!({})).await;
    assert_eq!(status, 404);

    // Admission: the `submit` scope and the key's bundle globs.
    let (status, out) = post(&daemon, &reader, add, json!({})).await;
    assert_eq!(status, 403, "{out}");
    assert!(out.to_string().contains("`submit` scope"), "{out}");
    let (status, out) = post(&daemon, &elsewhere, add, json!({})).await;
    assert_eq!(
        status, 404,
        "a bundle in the path the key may not use is not there for it: {out}"
    );
    assert!(out.to_string().contains("may not use bundle"), "{out}");
    let (status, _) = client()
        .post(daemon.url(add))
        .json(&json!({}))
        .send()
        .await
        .map(|r| (r.status().as_u16(), ()))
        .unwrap();
    assert_eq!(status, 401);

    // The CLI's --remote runs it in the daemon.
    let base = daemon.base.clone();
    let out = tokio::task::spawn_blocking(move || {
        run_cli(
            &base,
            &[
                "--token",
                &runner,
                "tool",
                "run",
                "calc",
                "add",
                "--remote",
                "--args",
                r#"{"a": 3, "b": 4}"#,
            ],
            "",
        )
    })
    .await
    .unwrap();
    let (code, out, err) = answer(out);
    assert_eq!(code, 0, "{out} {err}");
    assert_eq!(out["value"], json!({"sum": 7}));
    assert_eq!(daemon.stop(), Some(0));
}

/// A ledger whose one tool appends a line to `file` and then takes 30 s:
/// its effect is `unsafe` (the default), so running it twice writes twice.
fn ledger(file: &Path) -> String {
    format!(
        r#"name: ledger
version: "1"
model: {{endpoint: mock, name: m}}
prompts: {{user: "{{{{ input }}}}"}}
tools:
  - name: write
    kind: process
    description: writes a line, then takes its time
    timeout: 60s
    command: [python3, -c, "import time; open('{}', 'a').write('ran\\n'); time.sleep(30)"]
"#,
        file.display()
    )
}

/// The API makes a `tool_run` job that a worker runs: the answer names the
/// job, whose kind and result say what ran. Killed while its `unsafe` tool
/// runs, the daemon does not run the tool again when it comes back: the
/// job fails saying the call may have run, and the tool wrote once.
#[tokio::test(flavor = "multi_thread")]
async fn a_tool_run_is_a_job_and_an_unsafe_one_is_never_run_twice() {
    let server = mock_server("replies:\n  - content: unused\n").await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("calc", CALC);
    let written = site.path().join("ledger.txt");
    site.put_bundle("ledger", &ledger(&written));
    let daemon = site.start_with_env(&[SHORT_LEASE]);
    let http = client();

    let response = http
        .post(daemon.url("/v1/bundles/calc/tools/add:run"))
        .json(&json!({"arguments": {"a": 20, "b": 22}}))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let out: Value = response.json().await.unwrap();
    assert_eq!((status, &out["value"]), (200, &json!({"sum": 42})), "{out}");
    let id = out["job_id"].as_str().expect("the answer names its job");
    let job = get(&http, &daemon, &format!("/v1/jobs/{id}")).await;
    assert_eq!(job["state"], "succeeded", "{job}");
    assert_eq!(
        (&job["kind"]["type"], &job["kind"]["tool"]),
        (&json!("tool_run"), &json!("add")),
        "{job}"
    );
    assert_eq!(job["result"]["value"], json!({"sum": 42}), "{job}");

    // The unsafe call starts; the daemon dies under it.
    let base = daemon.base.clone();
    let call = tokio::spawn(async move {
        client()
            .post(format!("{base}/v1/bundles/ledger/tools/write:run"))
            .json(&json!({}))
            .send()
            .await
            .map(|r| r.status().as_u16())
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while file_lines(&written).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the ledger tool never ran:\n{}",
            daemon.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    daemon.kill9();
    assert!(
        call.await.unwrap().is_err(),
        "the caller's request died with the daemon"
    );

    let daemon = site.start_with_env(&[SHORT_LEASE]);
    let jobs = get(&http, &daemon, "/v1/jobs?bundle=ledger").await;
    let id = jobs["jobs"][0]["id"]
        .as_str()
        .expect("the ledger's job")
        .to_string();
    let job = wait_terminal(&http, &daemon, &id, std::time::Duration::from_secs(120)).await;
    assert_eq!(job["state"], "failed", "{job}");
    let error = job["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("may have run") && error.contains("write"),
        "{job}"
    );
    assert_eq!(file_lines(&written).len(), 1, "the unsafe tool ran once");
    assert_eq!(daemon.stop(), Some(0));
}
