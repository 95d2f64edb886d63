//! LangGraph's clients against the real daemon (issue 53): the real
//! `langgraph-sdk` (ci/requirements-langgraph.txt, `.venv-langgraph`) runs
//! each scenario of tests/data/langgraph/driver.py against the binary and
//! its answers are checked here, and LangGraph's JS SDK
//! (`@langchain/langgraph-sdk`, tests/data/langgraph/client.cjs) sees the
//! same. Assistants are bundles: found by name or
//! by LangGraph's UUID of it, searched, counted, paged, drawn as a graph,
//! described by schemas; a bundle outside the key's globs is not one.

mod common;

use std::process::Command;
use std::time::Duration;

use common::daemon::{Daemon, Site, client_as, eventually, get, new_key};
use common::{mock_server, peer, python_langgraph, repo};
use serde_json::{Value, json};

const SCRIPT: &str = "replies:\n  - content: done\n";

/// The driver's `scenario` against `daemon` with `key`.
async fn driver(daemon: &Daemon, key: &str, scenario: &str, args: &[&str]) -> Value {
    let mut command = Command::new(python_langgraph());
    command
        .arg(repo("tests/data/langgraph/driver.py"))
        .arg(daemon.url(""))
        .arg(key)
        .arg(scenario)
        .args(args);
    peer::json(daemon, command).await
}

fn bundle(name: &str, version: &str, extra: &str) -> String {
    format!(
        "name: {name}\nversion: \"{version}\"\ndescription: the {name} bundle\nmodel: {{endpoint: mock, name: m}}\nprompts: {{user: \"{{{{ input }}}} in {{{{ lang }}}}\"}}\n{extra}"
    )
}

const TOOLS: &str = "tools:\n  - name: add\n    kind: process\n    effect: read_only\n    parameters: {type: object, properties: {a: {type: number}}}\n    command: [python3, -c, \"print(1)\"]\n";

/// LangGraph's default assistant id of graph `name`.
fn assistant_id(name: &str) -> String {
    let namespace = uuid::Uuid::parse_str("6ba7b821-9dad-11d1-80b4-00c04fd430c8").unwrap();
    uuid::Uuid::new_v5(&namespace, name.as_bytes()).to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn assistants_are_the_bundles_a_key_may_read() {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    let key = new_key(
        &site.path().join("keys.toml"),
        "team",
        &["--scopes", "submit,read", "--bundles", "calc,plain,other"],
    );
    site.put_bundle("calc", &bundle("calc", "1", TOOLS));
    site.put_bundle("plain", &bundle("plain", "1", ""));
    site.put_bundle("other", &bundle("other", "1", ""));
    site.put_bundle("secret", &bundle("secret", "1", ""));
    let daemon = site.start();
    // A second version of calc: its first is one the daemon served.
    site.put_bundle("calc", &bundle("calc", "2", TOOLS));
    let http = client_as(&key);
    eventually(Duration::from_secs(30), "calc version 2 loaded", || async {
        let b = get(&http, &daemon, "/v1/bundles/calc").await;
        (b["version"] == "2").then_some(())
    })
    .await;

    let got = driver(&daemon, &key, "assistants", &["secret"]).await;
    let names = |list: &Value| -> Vec<String> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|a| a["graph_id"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let mut all = names(&got["search"]);
    all.sort();
    assert_eq!(all, ["calc", "other", "plain"], "{}", got["search"]);
    let calc = got["search"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["graph_id"] == "calc")
        .unwrap();
    assert_eq!(calc["assistant_id"], assistant_id("calc"));
    assert_eq!(calc["name"], "calc");
    assert_eq!(calc["description"], "the calc bundle");
    assert_eq!(calc["config"], json!({}));
    assert_eq!(calc["metadata"]["created_by"], "system");
    assert_eq!(calc["metadata"]["bundle_version"], "2");
    assert_eq!(calc["metadata"]["status"], "ok");
    assert_eq!(calc["version"], 2, "the second version calc served");
    assert_eq!(names(&got["search_graph_id"]), ["calc"]);
    assert_eq!(names(&got["search_name"]), ["calc"]);
    assert_eq!(names(&got["search_metadata"]), ["calc"]);
    assert_eq!(names(&got["search_sorted"]), ["calc", "other", "plain"]);
    for selected in got["search_select"].as_array().unwrap() {
        let mut keys: Vec<&String> = selected.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, ["assistant_id", "name"], "{selected}");
    }
    // Paged one at a time: the SDK reads the next offset from the header.
    assert_eq!(got["page"]["assistants"].as_array().unwrap().len(), 1);
    assert_eq!(got["page"]["next"], "1");
    assert_eq!(got["page_two"].as_array().unwrap().len(), 1);
    assert_ne!(
        got["page_two"][0]["graph_id"],
        got["page"]["assistants"][0]["graph_id"]
    );
    assert_eq!(
        (&got["count"], &got["count_graph_id"]),
        (&json!(3), &json!(1))
    );
    // By name and by LangGraph's id: the same assistant.
    assert_eq!(got["get_by_name"], got["get_by_id"]);

    // Its schemas: messages in and out; the prompts' variable as context.
    let schemas = &got["schemas"];
    assert_eq!(schemas["graph_id"], "calc");
    assert_eq!(
        schemas["input_schema"]["properties"]["messages"]["type"],
        "array"
    );
    assert_eq!(
        schemas["context_schema"]["properties"],
        json!({"lang": {"type": "string"}})
    );
    assert_eq!(
        schemas["config_schema"]["properties"],
        json!({"lang": {"type": "string"}})
    );
    // Its graph: the agent loop, the tools named; without tools, one node.
    let graph = &got["graph"];
    let ids: Vec<&str> = graph["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["__start__", "model", "tools", "__end__"]);
    assert_eq!(graph["nodes"][2]["data"]["tools"], json!(["add"]));
    assert!(
        graph["edges"]
            .as_array()
            .unwrap()
            .contains(&json!({"source": "model", "target": "tools", "conditional": true}))
    );
    assert_eq!(got["graph_xray"], got["graph"]);
    assert_eq!(got["graph_plain"]["nodes"].as_array().unwrap().len(), 3);
    assert_eq!(got["subgraphs"], json!({}));
    // Its versions, the newest first: 2 serving, 1 served before.
    let versions: Vec<(Value, Value, Value)> = got["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["version"].clone(),
                v["metadata"]["bundle_version"].clone(),
                v["metadata"]["status"].clone(),
            )
        })
        .collect();
    assert_eq!(
        versions,
        [
            (json!(2), json!("2"), json!("serving")),
            (json!(1), json!("1"), json!("served"))
        ]
    );
    // A bundle outside the key's globs is no assistant, as an unknown one.
    assert_eq!(got["hidden_get"], 404);
    assert_eq!(got["hidden_search"], json!([]));
    assert_eq!(got["unknown_get"], 404);

    // LangGraph's JS SDK sees the same.
    let js = js_client(&daemon, &key).await;
    assert_eq!(js["names"], json!(["calc", "other", "plain"]), "{js}");
    assert_eq!(js["paged"], json!({"length": 1, "next": "1"}));
    assert_eq!(js["calc"], got["get_by_name"]);
    assert_eq!(
        js["nodes"],
        json!(["__start__", "model", "tools", "__end__"])
    );
    assert_eq!(
        js["context"]["properties"],
        json!({"lang": {"type": "string"}})
    );
    assert_eq!(
        (&js["count"], &js["versions"]),
        (&json!(1), &json!(["2", "1"]))
    );
    assert_eq!(js["hidden"], 404);
}

/// tests/data/langgraph/client.cjs with LangGraph's JS SDK
/// (`SA_TEST_LANGGRAPH_JS` names its `node_modules`; `./scripts/test`
/// installs it) against `daemon` with `key`.
async fn js_client(daemon: &Daemon, key: &str) -> Value {
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
        .arg(key);
    peer::json(daemon, command).await
}
