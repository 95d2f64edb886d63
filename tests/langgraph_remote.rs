//! `RemoteGraph` from `langgraph` itself used as a node inside a local
//! graph against the real daemon (issue 53): the local graph's messages
//! become a run of the daemon's assistant (stateless, and on a thread the
//! run makes), and the run's answer comes back into the local state —
//! invoked, awaited and streamed by updates.

mod common;

use std::process::Command;

use common::langgraph::{ADDER, RUN_SCRIPT, keyed_site};
use common::{peer, python_langgraph, repo};
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn remote_graph_runs_an_assistant_as_a_node_of_a_local_graph() {
    let (_server, site, key) = keyed_site(RUN_SCRIPT, "submit,read").await;
    site.put_bundle("adder", ADDER);
    let daemon = site.start();

    let mut command = Command::new(python_langgraph());
    command
        .arg(repo("tests/data/langgraph/remote_graph.py"))
        .arg(daemon.url(""))
        .arg(&key)
        .arg("adder");
    let got = peer::json(&daemon, command).await;

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
