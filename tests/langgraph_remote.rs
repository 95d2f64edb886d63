//! `RemoteGraph` from `langgraph` itself used as a node inside a local
//! graph against the real daemon (issue 53): the local graph's messages
//! become a run of the daemon's assistant (stateless, and on a thread the
//! run makes), and the run's answer comes back into the local state —
//! invoked, awaited and streamed by updates; and a run whose agent call
//! runs another bundle streamed with its subgraphs, whose namespaces
//! `RemoteGraph` reads as LangGraph's.

mod common;

use std::process::Command;

use common::daemon::Daemon;
use common::langgraph::{ADDER, BOSS, BOSS_SCRIPT, RUN_SCRIPT, keyed_site};
use common::{peer, python_langgraph, repo};
use serde_json::json;

/// What tests/data/langgraph/remote_graph.py printed, run with `args`
/// against `daemon` with `key`.
async fn remote_graph(daemon: &Daemon, key: &str, args: &[&str]) -> serde_json::Value {
    let mut command = Command::new(python_langgraph());
    command
        .arg(repo("tests/data/langgraph/remote_graph.py"))
        .arg(daemon.url(""))
        .arg(key)
        .args(args);
    peer::json(daemon, command).await
}

#[tokio::test(flavor = "multi_thread")]
async fn remote_graph_runs_an_assistant_as_a_node_of_a_local_graph() {
    let (_server, site, key) = keyed_site(RUN_SCRIPT, "submit,read").await;
    site.put_bundle("adder", ADDER);
    let daemon = site.start();

    let got = remote_graph(&daemon, &key, &["adder"]).await;

    // The daemon's run: the human message, the tool call, its result, the answer.
    let answered = json!([
        {"type": "human", "content": "2+3"},
        {"type": "ai", "content": ""},
        {"type": "tool", "content": "5"},
        {"type": "ai", "content": "2+3 is 5."},
    ]);
    let kinds = |messages: &serde_json::Value| -> Vec<String> {
        messages
            .as_array()
            .unwrap_or_else(|| panic!("{messages}"))
            .iter()
            .map(|m| format!("{}:{}", m["type"].as_str().unwrap(), m["content"]))
            .collect()
    };
    assert_eq!(kinds(&got["stateless"]), kinds(&answered), "{got}");
    assert_eq!(kinds(&got["on_thread"]), kinds(&answered), "{got}");
    assert_eq!(got["streamed"], json!([["note"], ["daemon"]]), "{got}");
    assert_eq!(got["direct"], "2+3 is 5.");

    // The thread the run made is the key's.
    let thread = common::daemon::get(
        &common::daemon::client_as(&key),
        &daemon,
        "/threads/remote-1",
    )
    .await;
    assert_eq!(thread["status"], "idle", "{thread}");
}

#[tokio::test(flavor = "multi_thread")]
async fn remote_graph_reads_an_agent_calls_run_as_a_subgraph() {
    let script = format!("{RUN_SCRIPT}{BOSS_SCRIPT}");
    let (_server, site, key) = keyed_site(&script, "submit,read").await;
    site.put_bundle("adder", ADDER);
    site.put_bundle("boss", BOSS);
    let daemon = site.start();

    let got = remote_graph(&daemon, &key, &["boss", "subgraphs"]).await;

    // Alone: the run's own updates at the root, its helper's in the
    // namespace of the agent call that ran it.
    let at = |updates: &serde_json::Value, depth: usize| -> Vec<(Vec<String>, String)> {
        updates
            .as_array()
            .unwrap_or_else(|| panic!("{got}"))
            .iter()
            .filter(|u| u[0].as_array().unwrap().len() == depth)
            .map(|u| {
                let ns = u[0].as_array().unwrap().iter();
                let ns = ns.map(|p| p.as_str().unwrap().to_string()).collect();
                (ns, u[1][0].as_str().unwrap().to_string())
            })
            .collect()
    };
    let nodes = |updates: Vec<(Vec<String>, String)>| -> Vec<String> {
        updates.into_iter().map(|(_, node)| node).collect()
    };
    assert_eq!(
        nodes(at(&got["direct"], 0)),
        ["model", "tools", "model"],
        "{got}"
    );
    let helper = at(&got["direct"], 1);
    assert_eq!(nodes(helper.clone()), ["model", "tools", "model"], "{got}");
    assert!(helper[0].0[0].starts_with("tools:"), "{got}");
    assert!(helper.iter().all(|(ns, _)| ns == &helper[0].0));
    // As a node: below the node's own namespace.
    let inside = at(&got["inside"], 2);
    assert_eq!(nodes(inside.clone()), ["model", "tools", "model"], "{got}");
    assert!(inside[0].0[0].starts_with("daemon:") && inside[0].0[1].starts_with("tools:"));
    assert_eq!(nodes(at(&got["inside"], 0)), ["note", "daemon"], "{got}");
}
