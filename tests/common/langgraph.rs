//! LangGraph's clients as the tests drive them (tests/langgraph*.rs): the
//! real `langgraph-sdk` runs a scenario of tests/data/langgraph/driver.py,
//! LangGraph's JS SDK one of client.cjs, each printing what the SDK
//! returned as one JSON document; the bundle and model script their runs
//! share, and the keyed site they run on.

use std::process::Command;

use serde_json::Value;
use structured_agents::mock::MockServer;

use super::daemon::{Daemon, Site, new_key};
use super::{mock_server, peer, python_langgraph, repo};

/// A bundle whose `add` tool adds `a` and `b`.
pub const ADDER: &str = r#"name: adder
version: "1"
model: {endpoint: mock, name: m}
prompts: {user: "{{ input }}"}
tools:
  - name: add
    kind: process
    effect: read_only
    parameters: {type: object, properties: {a: {type: number}, b: {type: number}}}
    command: [python3, -c, "import json,sys; a=json.load(sys.stdin); print(a['a']+a['b'])"]
"#;

/// What the mock model answers the runs: `2+3` calls `add`, then answers.
pub const RUN_SCRIPT: &str = r#"
replies:
  - match: "slowly"
    delay_ms: 30000
    content: "too late"
  - match: "hello"
    content: "Hello there."
  - match: "again"
    turn: 2
    content: "Again."
  - match: "slow"
    delay_ms: 30000
    content: "too late"
  - match: "2+3"
    turn: 1
    tool_calls: [{id: call-1, name: add, arguments: {a: 2, b: 3}}]
  - match: "2+3"
    turn: 2
    content: "2+3 is 5."
"#;

/// `boss`: its `helper` tool asks `adder` (an agent call: a nested run).
pub const BOSS: &str = r#"name: boss
version: "1"
model: {endpoint: mock, name: m}
prompts: {user: "{{ input }}"}
tools:
  - {name: helper, kind: agent, bundle: adder}
"#;

/// What the mock model answers `boss` (with [`RUN_SCRIPT`] for its
/// helper's run of `adder` on `2+3`).
pub const BOSS_SCRIPT: &str = r#"
  - match: "ask the helper"
    turn: 1
    tool_calls: [{id: h1, name: helper, arguments: {input: "2+3"}}]
  - match: "ask the helper"
    turn: 2
    content: "The helper says 5."
"#;

/// `payer`: its `pay` tool waits for a person's decision, and says what it paid.
pub const PAYER: &str = r#"name: payer
version: "1"
model: {endpoint: mock, name: m}
prompts: {user: "{{ input }}"}
tools:
  - name: pay
    kind: process
    effect: read_only
    approval: always
    parameters: {type: object, properties: {amount: {type: integer}}}
    command: [python3, -c, "import json,sys; print(json.dumps({'paid': json.load(sys.stdin)['amount']}))"]
"#;

pub const PAY_SCRIPT: &str = r#"
replies:
  - match: "pay 5"
    turn: 1
    tool_calls: [{id: p1, name: pay, arguments: {amount: 5}}]
  - match: "pay 5"
    turn: 2
    content: "Paid."
  - match: "pay 9"
    turn: 1
    tool_calls: [{id: p2, name: pay, arguments: {amount: 9}}]
  - match: "pay 9"
    turn: 2
    content: "Not paid."
"#;

/// The driver's `scenario` against `daemon` with `key`.
pub async fn driver(daemon: &Daemon, key: &str, scenario: &str, args: &[&str]) -> Value {
    python_peer("driver.py", daemon, key, scenario, args).await
}

/// tests/data/langgraph/thread_stream.py's `scenario` (the SDK's thread
/// streaming) against `daemon` with `key`.
pub async fn thread_driver(daemon: &Daemon, key: &str, scenario: &str) -> Value {
    python_peer("thread_stream.py", daemon, key, scenario, &[]).await
}

async fn python_peer(
    script: &str,
    daemon: &Daemon,
    key: &str,
    scenario: &str,
    args: &[&str],
) -> Value {
    let mut command = Command::new(python_langgraph());
    command
        .arg(repo(&format!("tests/data/langgraph/{script}")))
        .arg(daemon.url(""))
        .arg(key)
        .arg(scenario)
        .args(args);
    peer::json(daemon, command).await
}

/// The types of a thread's messages, in order.
pub fn message_types(thread: &Value) -> Vec<&str> {
    thread["values"]["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .map(|m| m["type"].as_str().unwrap_or("?"))
                .collect()
        })
        .unwrap_or_default()
}

/// tests/data/langgraph/client.cjs with LangGraph's JS SDK
/// (`SA_TEST_LANGGRAPH_JS` names its `node_modules`; `./scripts/test`
/// installs it) against `daemon` with `key`: its `scenario`.
pub async fn js_client(daemon: &Daemon, key: &str, scenario: &str) -> Value {
    let modules = std::env::var_os("SA_TEST_LANGGRAPH_JS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(std::env::var("HOME").unwrap_or_default())
                .join(".cache/structured-agents/langgraph-js/node_modules")
        });
    assert!(
        modules
            .join("@langchain/langgraph-sdk/package.json")
            .is_file(),
        "LangGraph's JS SDK is needed in {}; ./scripts/test installs it (npm install --prefix ~/.cache/structured-agents/langgraph-js @langchain/langgraph-sdk@1.15.0)",
        modules.display()
    );
    let mut command = Command::new("node");
    command
        .arg(repo("tests/data/langgraph/client.cjs"))
        .arg(&modules)
        .arg(daemon.url(""))
        .arg(key)
        .arg(scenario);
    peer::json(daemon, command).await
}

/// A site over the mock model server answering `script`, and the key
/// `team` with `scopes` in its keys file (the daemon not started yet).
pub async fn keyed_site(script: &str, scopes: &str) -> (MockServer, Site, String) {
    let server = mock_server(script).await;
    let site = Site::new(&server.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    let key = new_key(
        &site.path().join("keys.toml"),
        "team",
        &["--scopes", scopes],
    );
    (server, site, key)
}
