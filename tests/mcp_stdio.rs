//! A real MCP server over stdio (written with the Python `mcp` package) as a
//! tool source: listing with allow list and prefix, calls end to end, error
//! results, and a server killed mid-call that is restarted.

mod common;

use common::python;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use common::Recorder;
use common::daemon::eventually;
use serde_json::json;
use structured_agents::egress::Egress;
use structured_agents::events::{EventSink, RunContext};
use structured_agents::tools::ToolEngine;
use structured_agents::tools::ToolPolicy;
use structured_agents::tools::mcp::{McpServerSpec, McpSource, McpTool};
use structured_agents::types::ToolCall;
use tokio_util::sync::CancellationToken;

fn spec() -> McpServerSpec {
    let server = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/mcp/server.py");
    serde_json::from_value(json!({
        "command": [python(), server],
        "connect_timeout": "30s",
        "list_timeout": "10s",
        "max_restart_backoff": "1s",
    }))
    .unwrap()
}

async fn engine(source: &Arc<McpSource>, allow: Option<&[String]>) -> ToolEngine {
    capped_engine(source, allow, 1024 * 1024).await
}

async fn capped_engine(
    source: &Arc<McpSource>,
    allow: Option<&[String]>,
    max_output_bytes: usize,
) -> ToolEngine {
    let mut engine = ToolEngine::new();
    for tool in McpTool::from_source(source, allow, "t_", max_output_bytes)
        .await
        .unwrap()
    {
        engine.add(
            Arc::new(tool),
            ToolPolicy::compile(Duration::from_secs(20), 0, None, None).unwrap(),
        );
    }
    engine
}

async fn call(
    engine: &ToolEngine,
    name: &str,
    args: serde_json::Value,
) -> structured_agents::tools::ToolOutcome {
    let sink = EventSink::new(RunContext::default(), 1, Arc::new(Recorder::default()));
    let call = ToolCall::new("c", name, args);
    tokio::time::timeout(
        Duration::from_secs(60),
        engine.execute(&call, 1, &CancellationToken::new(), &sink),
    )
    .await
    .expect("the call hung")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_are_listed_filtered_prefixed_and_called() {
    let source = tokio::time::timeout(
        Duration::from_secs(60),
        McpSource::connect("py", &spec(), std::path::Path::new("."), &Egress::default()),
    )
    .await
    .expect("connect hung")
    .unwrap();
    let allow = vec!["add".to_string(), "echo".to_string(), "fail".to_string()];
    let engine = engine(&source, Some(&allow)).await;
    let names: Vec<&str> = engine.schemas().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["t_add", "t_echo", "t_fail"]);
    let add_schema = &engine.schemas()[0].parameters;
    assert_eq!(add_schema["properties"]["a"]["type"], "integer");

    let sum = call(&engine, "t_add", json!({"a": 3, "b": 4})).await;
    assert!(!sum.result.is_error, "{sum:?}");
    assert!(sum.result.output.contains('7'), "{}", sum.result.output);
    let echo = call(&engine, "t_echo", json!({"text": "hello mcp"})).await;
    assert!(
        echo.result.output.contains("hello mcp"),
        "{}",
        echo.result.output
    );
    let fail = call(&engine, "t_fail", json!({"reason": "no luck"})).await;
    assert_eq!(fail.error_code, Some("tool_error"));
    assert!(
        fail.result.output.contains("no luck"),
        "{}",
        fail.result.output
    );

    let missing = McpTool::from_source(&source, Some(&["nope".to_string()]), "", 1024)
        .await
        .err()
        .unwrap();
    assert!(
        missing.to_string().contains("has no tool \"nope\""),
        "{missing}"
    );
}

/// A result over the tool's `max_output_bytes` is a tool error naming the
/// tool and the cap; one under it passes, and the server stays usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_over_the_tools_byte_cap_is_a_tool_error() {
    let source = tokio::time::timeout(
        Duration::from_secs(60),
        McpSource::connect("py", &spec(), std::path::Path::new("."), &Egress::default()),
    )
    .await
    .expect("connect hung")
    .unwrap();
    let engine = capped_engine(&source, Some(&["echo".to_string()]), 1000).await;
    let big = call(&engine, "t_echo", json!({"text": "x".repeat(5000)})).await;
    assert_eq!(big.error_code, Some("tool_error"), "{big:?}");
    let message = &big.result.output;
    assert!(
        message.contains("mcp tool `echo`") && message.contains("max_output_bytes of 1000"),
        "{message}"
    );
    let small = call(&engine, "t_echo", json!({"text": "x".repeat(900)})).await;
    assert!(!small.result.is_error, "{small:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_fails_the_call_and_is_restarted() {
    let source = tokio::time::timeout(
        Duration::from_secs(60),
        McpSource::connect("py", &spec(), std::path::Path::new("."), &Egress::default()),
    )
    .await
    .expect("connect hung")
    .unwrap();
    let engine = Arc::new(engine(&source, None).await);
    let pid_out = call(&engine, "t_pid", json!({})).await;
    let pid_of = |out: &str| -> i32 {
        let v: serde_json::Value = serde_json::from_str(out).unwrap();
        v.get("result")
            .unwrap_or(&v)
            .as_i64()
            .unwrap_or_else(|| panic!("{out}")) as i32
    };
    let pid = pid_of(&pid_out.result.output);

    // Killed only once the slow call runs in the server (it creates
    // `started` first), so the kill provably comes mid-call.
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("slow-started");
    let slow = {
        let engine = engine.clone();
        let args = json!({"seconds": 30, "started": started});
        tokio::spawn(async move { call(&engine, "t_slow", args).await })
    };
    eventually(Duration::from_secs(60), "the slow call started", || async {
        started.exists().then_some(())
    })
    .await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let killed = tokio::time::timeout(Duration::from_secs(60), slow)
        .await
        .expect("the in-flight call hung after the server died")
        .unwrap();
    assert_eq!(killed.error_code, Some("tool_error"), "{killed:?}");
    assert!(
        killed.result.output.contains("restarted"),
        "{}",
        killed.result.output
    );

    // The next call restarts the server (after its backoff) and works.
    eventually(
        Duration::from_secs(60),
        "a call to the restarted server",
        || async {
            let again = call(&engine, "t_add", json!({"a": 1, "b": 1})).await;
            (!again.result.is_error).then_some(())
        },
    )
    .await;
    assert_eq!(source.restarts().await, 1);
    let new_pid = pid_of(&call(&engine, "t_pid", json!({})).await.result.output);
    assert_ne!(new_pid, pid);
}

/// A bundle exposes two tools of the MCP server and `run` uses both.
#[test]
fn a_bundle_uses_two_mcp_tools_end_to_end() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let script = "replies:\n  - tool_calls: [{name: py_add, arguments: {a: 2, b: 5}}, {name: py_echo, arguments: {text: from the model}}]\n  - content: done\n";
    let server = rt.block_on(common::mock_server(script));
    let dir = tempfile::tempdir().unwrap();
    let mcp_server = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/mcp/server.py");
    std::fs::write(
        dir.path().join("bundle.yaml"),
        format!(
            "name: mcp-user\nversion: \"1\"\nmodel: {{endpoint: \"http://127.0.0.1:9/v1\", name: m}}\nprompts: {{user: x}}\ntools:\n  - name: py\n    kind: mcp\n    server: {{command: [{:?}, {:?}], connect_timeout: 30s}}\n    allow: [add, echo]\n    prefix: py_\n",
            python().display().to_string(),
            mcp_server.display().to_string()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_structured-agents"))
        .args([
            "run",
            dir.path().to_str().unwrap(),
            "--input",
            "x",
            "--json",
            "--endpoint",
            &server.base_url(),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["type"] == "ToolResult")
        .collect();
    assert_eq!(results.len(), 2, "{stdout}");
    assert!(
        results.iter().all(|r| r["is_error"] == false),
        "{results:?}"
    );
    // Results arrive as each call ends, in either order.
    let preview = |tool: &str| {
        results
            .iter()
            .find(|r| r["tool_name"] == tool)
            .and_then(|r| r["output_preview"].as_str())
            .unwrap_or_default()
            .to_string()
    };
    assert!(preview("py_add").contains('7'));
    assert!(preview("py_echo").contains("from the model"));
    // The model was offered exactly the allowed, prefixed tools.
    let offered: Vec<String> = server.requests()[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(offered, ["py_add", "py_echo"]);
}

/// The same server over Streamable HTTP on 127.0.0.1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_http_servers_work_too() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/mcp/server.py");
    let mut child = std::process::Command::new(python())
        .arg(&script)
        .args(["--http", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _guard = Kill(std::mem::replace(
        &mut child,
        std::process::Command::new("true").spawn().unwrap(),
    ));
    common::daemon::eventually(
        Duration::from_secs(30),
        "the HTTP MCP server to listen",
        || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()
                .map(|_| ())
        },
    )
    .await;
    let spec: McpServerSpec = serde_json::from_value(
        json!({"url": format!("http://127.0.0.1:{port}/mcp"), "connect_timeout": "20s"}),
    )
    .unwrap();
    let source = tokio::time::timeout(
        Duration::from_secs(60),
        McpSource::connect(
            "http",
            &spec,
            std::path::Path::new("."),
            // The server listens on loopback: the operator allows it.
            &Egress::new(Some(&[format!("http://127.0.0.1:{port}/mcp")])).unwrap(),
        ),
    )
    .await
    .expect("connect hung")
    .unwrap();
    let engine = engine(&source, Some(&["add".to_string()])).await;
    let sum = call(&engine, "t_add", json!({"a": 20, "b": 22})).await;
    assert!(
        !sum.result.is_error && sum.result.output.contains("42"),
        "{sum:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_gets_a_cleared_environment_its_own_group_and_the_call_key() {
    let source = tokio::time::timeout(
        Duration::from_secs(60),
        McpSource::connect("py", &spec(), std::path::Path::new("."), &Egress::default()),
    )
    .await
    .expect("connect hung")
    .unwrap();
    let engine = engine(&source, None).await;
    // The daemon's environment (here cargo's variables) does not leak into
    // a bundle's server; the allowlist passes PATH.
    assert!(std::env::var("CARGO_MANIFEST_DIR").is_ok());
    // Structured results come back as {"result": …}.
    let result = |o: &structured_agents::tools::ToolOutcome| -> serde_json::Value {
        let v: serde_json::Value = serde_json::from_str(&o.result.output).unwrap();
        v.get("result").cloned().unwrap_or(v)
    };
    let leaked = call(&engine, "t_environ", json!({"name": "CARGO_MANIFEST_DIR"})).await;
    assert_eq!(result(&leaked), "", "{leaked:?}");
    let path = call(&engine, "t_environ", json!({"name": "PATH"})).await;
    assert!(!result(&path).as_str().unwrap().is_empty(), "{path:?}");
    // Its own process group, so a restart or a dropped bundle kills the
    // server and everything it started.
    let pid = call(&engine, "t_pid", json!({})).await;
    let pid = result(&pid).as_i64().unwrap() as i32;
    let pid = nix::unistd::Pid::from_raw(pid);
    assert_eq!(nix::unistd::getpgid(Some(pid)).unwrap(), pid);
    // The call's idempotency key travels in `_meta` (`{run}:{turn}:{position}`;
    // the run id is empty outside a job).
    let key = call(&engine, "t_idempotency_key", json!({})).await;
    assert_eq!(result(&key), ":1:0", "{key:?}");
    drop(engine);
    drop(source);
    // Dropping the source kills the group.
    let alive = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                stat.rsplit(')')
                    .next()
                    .map(|rest| rest.trim_start().to_string())
            })
            .is_some_and(|rest| !rest.starts_with('Z'))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while alive() {
        assert!(
            std::time::Instant::now() < deadline,
            "the server outlived its source"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A Qwen bundle whose only tools come from an MCP server, with a grammar:
/// the grammar offers the server's tools (bundles like this used to fail to
/// load: their grammar was built before the tools were known).
#[test]
fn mcp_tools_take_part_in_the_grammar() {
    let dir = tempfile::tempdir().unwrap();
    let mcp_server = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/mcp/server.py");
    std::fs::write(
        dir.path().join("bundle.yaml"),
        format!(
            "name: mcp-grammar\nversion: \"1\"\nmodel: {{endpoint: \"http://127.0.0.1:9/v1\", name: m, plugin: qwen, grammar: {{mode: structural_tag}}}}\nprompts: {{user: x}}\ntools:\n  - name: py\n    kind: mcp\n    server: {{command: [{:?}, {:?}], connect_timeout: 30s}}\n    allow: [add, echo]\n    prefix: py_\n",
            python().display().to_string(),
            mcp_server.display().to_string()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_structured-agents"))
        .args(["grammar", dir.path().to_str().unwrap(), "--family", "vllm"])
        .args([
            "--models-dir",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/models"),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fragment: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tag = fragment["structured_outputs"]["structural_tag"]
        .as_str()
        .unwrap_or_else(|| panic!("{fragment}"));
    assert!(
        tag.contains("\\\"py_add\\\"") && tag.contains("\\\"py_echo\\\""),
        "{tag}"
    );
}

/// An MCP server that announces `tools/list_changed` makes the daemon bind
/// the bundle again: the next job is offered the new tool, in its tool list
/// and in its grammar.
#[tokio::test(flavor = "multi_thread")]
async fn list_changed_rebinds_the_bundle_with_the_new_tools() {
    use common::daemon::{Site, client, get, submit_and_wait};
    let script = "replies:\n  - tool_calls: [{name: py_grow, arguments: {}}]\n  - content: grown\n  - content: done\n";
    let mock = common::mock_server(script).await;
    let site = Site::new(&mock.base_url(), "");
    let marker = site.path().join("marker");
    let mcp_server = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/mcp/server.py");
    site.put_bundle(
        "growing",
        &format!(
            "name: growing\nversion: \"1\"\nmodel: {{endpoint: mock, name: m, plugin: qwen, grammar: {{mode: ebnf}}}}\nprompts: {{user: x}}\ntools:\n  - name: py\n    kind: mcp\n    server: {{command: [{:?}, {:?}, --marker, {:?}], connect_timeout: 30s}}\n    prefix: py_\n    effect: idempotent\n",
            python().display().to_string(),
            mcp_server.display().to_string(),
            marker.display().to_string()
        ),
    );
    let daemon = site.start();
    let http = client();
    let before = get(&http, &daemon, "/v1/bundles/growing").await;
    let done = submit_and_wait(
        &http,
        &daemon,
        json!({"bundle": "growing", "input": "grow"}),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    common::daemon::eventually(
        Duration::from_secs(15),
        "the bundle to be bound again",
        || {
            let http = http.clone();
            let daemon = &daemon;
            let before = before["loaded_at"].clone();
            async move {
                let now = get(&http, daemon, "/v1/bundles/growing").await;
                (now["loaded_at"] != before).then_some(())
            }
        },
    )
    .await;
    submit_and_wait(
        &http,
        &daemon,
        json!({"bundle": "growing", "input": "again"}),
        Duration::from_secs(30),
    )
    .await;
    let requests = mock.requests();
    let offered = |request: &serde_json::Value| -> Vec<String> {
        request["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    let first = &requests[0];
    let last = requests.last().unwrap();
    assert!(
        offered(first).contains(&"py_grow".to_string())
            && !offered(first).contains(&"py_late".to_string()),
        "{:?}",
        offered(first)
    );
    assert!(
        offered(last).contains(&"py_late".to_string()),
        "{:?}",
        offered(last)
    );
    let grammar = last["structured_outputs"]["grammar"].as_str().unwrap();
    assert!(grammar.contains("call_py_late"), "{grammar}");
    assert!(marker.exists());
    drop(daemon);
}
