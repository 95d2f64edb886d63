//! A turn's prompt, rebuilt from what is stored: `GET
//! /v1/jobs/{id}/turns/{turn}/prompt` answers turn 2's messages — the
//! rendered input, turn 1's reply with its call, and that call's result —
//! and the tools of the version the job ran; a turn the run never asked is
//! a 404. On the job's page, "Prompt of turn 2" shows the same, turn 1's
//! tool result among the messages and the tool list, and passes the checks
//! of every view (tests/console/checks.rs) in both sizes and themes.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

#[allow(dead_code)] // this test drives a few of the browser's methods
#[path = "console/browser.rs"]
mod browser;
#[allow(dead_code)] // and runs only some of the checks
#[path = "console/checks.rs"]
mod checks;
mod common;

use std::time::Duration;

use browser::Browser;
use checks::audit;
use common::daemon::{Site, client, get, submit, wait_terminal};
use common::mock_server;
use serde_json::{Value, json};

const SCRIPT: &str = r#"
replies:
  - turn: 1
    content: "Adding them."
    tool_calls:
      - {id: call_add, name: add, arguments: {a: 2, b: 3}}
  - {turn: 2, content: "2 + 3 = 5."}
"#;

const CALC: &str = r#"name: calc
version: "1"
model: {endpoint: mock, name: m, plugin: openai}
prompts: {system: "You add.", user: "{{ input }}"}
tools:
  - name: add
    kind: process
    effect: read_only
    description: Add two numbers.
    parameters:
      type: object
      properties: {a: {type: number}, b: {type: number}}
      required: [a, b]
    command: [python3, -c, "import json,sys; a=json.load(sys.stdin); print(json.dumps({'sum': a['a'] + a['b']}))"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turn_twos_prompt_holds_turn_ones_tool_result_and_the_tools() {
    let mock = mock_server(SCRIPT).await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle("calc", CALC);
    let daemon = site.start();
    let http = client();
    let id = submit(&http, &daemon, "calc", "add 2 and 3").await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(120)).await;
    assert_eq!(done["state"], "succeeded", "{done}");

    let prompt = get(&http, &daemon, &format!("/v1/jobs/{id}/turns/2/prompt")).await;
    let roles: Vec<&str> = prompt["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool"], "{prompt:#}");
    let result = &prompt["messages"][3];
    assert_eq!(result["tool_call_id"], "call_add", "{prompt:#}");
    let output: Value = serde_json::from_str(result["content"].as_str().unwrap()).unwrap();
    assert_eq!(output, json!({"sum": 5}));
    assert_eq!(prompt["messages"][2]["tool_calls"][0]["name"], "add");
    assert_eq!(prompt["tools"][0]["name"], "add", "{prompt:#}");
    assert_eq!(prompt["pinned"], true);
    assert_eq!(prompt["bundle_digest"], done["bundle_digest"]);
    let first = get(&http, &daemon, &format!("/v1/jobs/{id}/turns/1/prompt")).await;
    assert_eq!(first["messages"].as_array().unwrap().len(), 2, "{first:#}");
    for turn in ["3", "0", "two"] {
        let answer = http
            .get(daemon.url(&format!("/v1/jobs/{id}/turns/{turn}/prompt")))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status().as_u16(), 404, "turn {turn}");
    }

    for (width, height, dark) in [
        (1440, 900, false),
        (1440, 900, true),
        (390, 844, false),
        (390, 844, true),
    ] {
        let browser = Browser::start(width, height, dark).await;
        let tag = format!("{width}-{}", if dark { "dark" } else { "light" });
        browser.goto(&daemon.url(&format!("/ui/jobs/{id}"))).await;
        browser.click("button.prompt-view[data-turn='2']").await;
        let place = ".prompt[data-turn='2']";
        browser
            .wait_text(&format!("{place} .prompt-message[data-role=tool]"), "sum")
            .await;
        browser
            .wait_text(
                &format!("{place} .prompt-message[data-role=assistant]"),
                "add",
            )
            .await;
        browser
            .wait_text(
                &format!("{place} .prompt-tools [data-tool=add]"),
                "Add two numbers.",
            )
            .await;
        browser
            .wait_until("document.activeElement.closest('.prompt') !== null")
            .await;
        audit(&browser, &format!("job-prompt-{tag}")).await;
        browser.close().await;
    }
}

/// A turn's prompt is what the turn sent: with a sliding history window
/// the first message and the newest (not the whole conversation), and the
/// tools the job's controls narrowed the bundle's to; the page says how
/// many the window left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turns_prompt_is_windowed_and_narrowed_as_it_was_sent() {
    let mock = mock_server(
        r#"
replies:
  - {turn: 1, tool_calls: [{id: call_1, name: add, arguments: {a: 1, b: 1}}]}
  - {turn: 2, tool_calls: [{id: call_2, name: add, arguments: {a: 2, b: 2}}]}
  - {turn: 3, content: "2 and 4."}
"#,
    )
    .await;
    let site = Site::new(&mock.base_url(), "");
    let windowed = CALC.replace(
        "tools:\n",
        "limits: {max_history_messages: 5}\ntools:\n  - {name: sub, kind: process, effect: read_only, description: Subtract., command: [python3, -c, \"print(0)\"]}\n",
    );
    site.put_bundle("calc", &windowed);
    let daemon = site.start();
    let http = client();
    let job = common::daemon::submit_body(
        &http,
        &daemon,
        json!({"bundle": "calc", "input": "add twice", "variables": {"tools": ["add"]}}),
    )
    .await;
    let id = job["id"].as_str().unwrap().to_string();
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(120)).await;
    assert_eq!(done["state"], "succeeded", "{done}");

    let prompt = get(&http, &daemon, &format!("/v1/jobs/{id}/turns/3/prompt")).await;
    let roles: Vec<&str> = prompt["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    // The window keeps the first message and the newest four: the task
    // (the user's message) fell out. (The mock tells turns apart by the
    // replies it is sent, so the window must keep both.)
    assert_eq!(
        roles,
        ["system", "assistant", "tool", "assistant", "tool"],
        "{prompt:#}"
    );
    assert_eq!(
        prompt["messages"][4]["tool_call_id"], "call_2",
        "the newest"
    );
    assert_eq!(
        (&prompt["conversation_messages"], &prompt["history"]),
        (&json!(6), &json!("sliding_window")),
        "{prompt:#}"
    );
    let tools: Vec<&str> = prompt["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        ["add"],
        "the job's controls narrowed them: {prompt:#}"
    );

    let browser = Browser::start(1440, 900, false).await;
    browser.goto(&daemon.url(&format!("/ui/jobs/{id}"))).await;
    browser.click("button.prompt-view[data-turn='3']").await;
    browser
        .wait_text(
            ".prompt[data-turn='3'] .prompt-summary",
            "left out 1 older message of 6",
        )
        .await;
    browser.close().await;
}
