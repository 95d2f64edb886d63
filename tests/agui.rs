//! `POST /v1/agui/{bundle}` through the AG-UI protocol's own client,
//! `@ag-ui/client` 1.x from npm (`./scripts/test` installs it outside the
//! clone; `SA_TEST_AGUI` names its `node_modules`; a missing one is a
//! failure that says so): a run of a bundle whose tool call needs approval
//! ends with the `interrupt` outcome, the next run's `resume[]` approves
//! it, and the same job runs the call and finishes.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::daemon::{Site, client, get};
use common::{mock_server, peer, repo};
use serde_json::Value;

const SCRIPT: &str = r#"
replies:
  - tool_calls: [{id: p1, name: pay, arguments: {amount: 250, to: Bob}}]
  - content: "Paid Bob 250."
"#;

fn bundle(effects: &std::path::Path) -> String {
    let effects = effects.display();
    format!(
        r#"
name: bank
version: "1"
model: {{endpoint: mock, name: m, plugin: openai}}
prompts: {{user: "{{{{ input }}}}"}}
tools:
  - name: pay
    kind: process
    effect: unsafe
    description: pay someone
    parameters: {{type: object, properties: {{amount: {{type: integer}}, to: {{type: string}}}}, required: [amount, to]}}
    approval: always
    command: [python3, -c, "import json,sys; a=json.load(sys.stdin); open('{effects}','a').write(json.dumps(a, sort_keys=True) + chr(10)); print(json.dumps({{'paid': a['amount']}}))"]
"#
    )
}

fn agui_modules() -> PathBuf {
    let dir = std::env::var_os("SA_TEST_AGUI")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default())
                .join(".cache/structured-agents/agui/node_modules")
        });
    assert!(
        dir.join("@ag-ui/client/package.json").is_file(),
        "@ag-ui/client is needed in {}; ./scripts/test installs it (npm install --prefix ~/.cache/structured-agents/agui @ag-ui/client@1)",
        dir.display()
    );
    dir
}

fn types(events: &Value) -> Vec<String> {
    events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agui_client_runs_a_bundle_through_an_approval_interrupt() {
    let modules = agui_modules();
    let mock = mock_server(SCRIPT).await;
    let site = Site::new(&mock.base_url(), "");
    let effects = site.path().join("effects.txt");
    site.put_bundle("bank", &bundle(&effects));
    let daemon = site.start();
    let url = daemon.url("/v1/agui/bank");
    let mut agui_client = Command::new("node");
    agui_client
        .arg(repo("tests/data/agui/client.cjs"))
        .arg(&modules)
        .arg(&url);
    let seen = peer::json(&daemon, agui_client).await;

    // Run 1: the call, then the interrupt naming it; nothing was paid.
    let first = types(&seen["first"]["events"]);
    assert_eq!(
        first,
        [
            "RUN_STARTED",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "RUN_FINISHED"
        ],
        "{seen}"
    );
    let finished = &seen["first"]["events"][4];
    assert_eq!(finished["outcome"]["type"], "interrupt");
    let interrupt = &finished["outcome"]["interrupts"][0];
    assert_eq!(interrupt["reason"], "tool_approval");
    assert_eq!(interrupt["toolCallId"], "p1");
    assert_eq!(seen["first"]["pending"][0]["id"], interrupt["id"]);
    let job_id = interrupt["metadata"]["job_id"].as_str().unwrap();

    // Run 2: approved through resume[], the same job pays once and answers.
    let second = types(&seen["second"]["events"]);
    assert_eq!(second.first().unwrap(), "RUN_STARTED");
    assert!(
        second.contains(&"TOOL_CALL_RESULT".to_string()),
        "{second:?}"
    );
    let tail = &second[second.len() - 4..];
    assert_eq!(
        tail,
        [
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED"
        ]
    );
    let last = seen["second"]["events"].as_array().unwrap().last().unwrap();
    assert_eq!(last["outcome"]["type"], "success");
    assert_eq!(seen["second"]["result"], "Paid Bob 250.");
    assert_eq!(seen["second"]["pending"], serde_json::json!([]));
    assert_eq!(
        std::fs::read_to_string(&effects).unwrap(),
        "{\"amount\": 250, \"to\": \"Bob\"}\n"
    );
    let http = client();
    let job = get(&http, &daemon, &format!("/v1/jobs/{job_id}")).await;
    assert_eq!(job["state"], "succeeded");
    assert_eq!(job["input"], "Pay Bob 250.");
    let approvals = get(&http, &daemon, &format!("/v1/jobs/{job_id}/journal")).await;
    assert!(approvals.to_string().contains("approve"), "{approvals}");
    // The client kept the conversation: user, the call, its result, answer.
    let roles: Vec<&str> = seen["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"], "{seen}");
    assert_eq!(daemon.stop(), Some(0));
}
