//! The console tells the story of a job truthfully, in a real browser, at
//! 1440×900 and 390×844, light and dark: every view passes axe-core (no
//! serious or critical violation), fits a phone without sideways scrolling
//! and has tap targets of at least 44 px (tests/console/checks.rs); a
//! finished job's header says why it ended; a dead job's attempts are their
//! own sections with the backoff between them and its error said once, and
//! no "waiting for the model" badge; an approval park is no red error and
//! has no `JOB` placeholder, waits in the waterfall as an approval wait
//! (not as the tool running), and is listed in the inbox with the rule that
//! asked and a form from the tool's schema. Then: search, sort, focus kept
//! across refreshes, run again, approve with edits from the inbox, and a
//! slow model's call shown in progress before it ends. Each view's
//! screenshot is saved under the test's target dir (console-screenshots).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

#[path = "console/browser.rs"]
mod browser;
#[path = "console/checks.rs"]
mod checks;
mod common;
#[path = "console/fixtures.rs"]
mod fixtures;

use browser::Browser;
use checks::{audit, is_dark, occurrences};
use common::daemon::{
    Daemon, Site, client, job_events, submit, submit_body, wait_settled, wait_terminal,
};
use common::mock_server;
use fixtures::calc;
use serde_json::json;
use std::time::Duration;

/// How long a job may take to settle.
const PATIENCE: Duration = Duration::from_secs(120);
use structured_agents::mock::MockServer;

/// `add …` jobs add with a tool; `break …` jobs meet a failing model;
/// `slow …` jobs call `add`, then wait 8 s for a slow model (under the
/// mock endpoint's 10 s request timeout).
const SCRIPT: &str = r#"
replies:
  - {match: "break", status: 500, error: "the upstream model broke"}
  - match: "slow"
    turn: 1
    tool_calls:
      - {id: call_add, name: add, arguments: {a: 2, b: 3}}
  - {match: "slow", turn: 2, delay_ms: 8000, content: "Slowly done."}
  - match: "add"
    turn: 1
    content: "Adding them."
    tool_calls:
      - {id: call_add, name: add, arguments: {a: 2, b: 3}}
  - {match: "add", turn: 2, content: "2 + 3 = 5."}
"#;

const ASKS: &str = "    approval: {when: \"args.a > 1\", timeout: 1h}\n";

async fn site_and_daemon() -> (MockServer, Site, Daemon) {
    let mock = mock_server(SCRIPT).await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle("calc", &calc("calc", ""));
    site.put_bundle("guarded", &calc("guarded", ASKS));
    let daemon = site.start();
    (mock, site, daemon)
}

fn id_of(job: &serde_json::Value) -> String {
    job["id"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_view_tells_the_truth_in_both_sizes_and_themes() {
    let (_mock, _site, daemon) = site_and_daemon().await;
    let http = client();
    let ok = id_of(&submit(&http, &daemon, "calc", "add 2 and 3").await);
    let asks = id_of(&submit(&http, &daemon, "guarded", "add 2 and 3").await);
    let dead = id_of(
        &submit_body(
            &http,
            &daemon,
            json!({"bundle": "calc", "input": "break it", "max_attempts": 2}),
        )
        .await,
    );
    assert_eq!(
        wait_terminal(&http, &daemon, &ok, PATIENCE).await["state"],
        "succeeded"
    );
    assert_eq!(
        wait_settled(&http, &daemon, &asks).await["state"],
        "awaiting_approval"
    );
    let dead_job = wait_terminal(&http, &daemon, &dead, PATIENCE).await;
    assert_eq!(dead_job["state"], "dead", "{dead_job}");
    let error: String = dead_job["error"]
        .as_str()
        .unwrap()
        .chars()
        .take(40)
        .collect();

    for (width, height, dark) in [
        (1440, 900, false),
        (1440, 900, true),
        (390, 844, false),
        (390, 844, true),
    ] {
        let browser = Browser::start(width, height, dark).await;
        let tag = format!("{width}-{}", if dark { "dark" } else { "light" });
        browser.goto(&daemon.url("/ui/jobs")).await;
        assert_eq!(is_dark(&browser).await, dark, "the colour scheme of {tag}");

        // The list: both kinds of parked call read the same way.
        browser
            .wait_text(
                &format!("#parked tr[data-job='{asks}'] .parked-call"),
                "ƒ add (read only) · awaits approval",
            )
            .await;
        browser
            .wait_for(&format!("tr[data-job='{ok}'][data-state=succeeded]"))
            .await;
        audit(&browser, &format!("jobs-{tag}")).await;

        // A finished job: why it ended, its answer.
        browser.goto(&daemon.url(&format!("/ui/jobs/{ok}"))).await;
        browser.wait_text("#why-ended", "final answer").await;
        browser.wait_text("#answer", "2 + 3 = 5.").await;
        browser.wait_text("#run-header #cost", "of $1.5000").await;
        browser.wait_text(".waterfall", "queue wait").await;
        audit(&browser, &format!("job-succeeded-{tag}")).await;

        // An approval park: no red error, no placeholder, a wait (not the tool running).
        browser.goto(&daemon.url(&format!("/ui/jobs/{asks}"))).await;
        browser.wait_for("#approvals .approval input[name=a]").await;
        browser
            .wait_text("#approvals .approval-rule", "args.a > 1")
            .await;
        browser.wait_text("#approvals .auto-deny", "in ").await;
        browser
            .wait_text(".waterfall", "ƒ add · approval wait")
            .await;
        browser
            .wait_text(".call[data-tool=add]", "awaiting approval")
            .await;
        assert!(
            browser
                .client
                .find_all(fantoccini::Locator::Css(".card.failure"))
                .await
                .unwrap()
                .is_empty(),
            "{tag}: an approval park is not an error"
        );
        let main = browser.text_of("main").await;
        assert!(
            !main.contains("JOB"),
            "{tag}: a placeholder on the page:\n{main}"
        );
        let tool_rows = browser
            .client
            .find_all(fantoccini::Locator::Css(".wf-row[data-kind=tool]"))
            .await
            .unwrap();
        assert!(
            tool_rows.is_empty(),
            "{tag}: the call that waits is drawn as running"
        );
        audit(&browser, &format!("job-approval-{tag}")).await;

        // A dead job: its attempts apart, the backoff between, the error once.
        browser.goto(&daemon.url(&format!("/ui/jobs/{dead}"))).await;
        browser
            .wait_text(".attempt[data-attempt='2']", "no attempts left")
            .await;
        browser
            .wait_text(".attempt[data-attempt='2']", "same error as attempt 1")
            .await;
        browser.wait_text("#why-ended", "dead").await;
        browser
            .wait_text(".waterfall", "backoff before the retry")
            .await;
        let main = browser.text_of("main").await;
        assert!(
            !main.contains("waiting for the model"),
            "{tag}: a dead job waits for the model:\n{main}"
        );
        let said = occurrences(&browser, "main", &error).await;
        assert!(
            (1..=2).contains(&said),
            "{tag}: the error {error:?} is said {said} times:\n{main}"
        );
        audit(&browser, &format!("job-dead-{tag}")).await;

        browser.goto(&daemon.url("/ui/approvals")).await;
        browser
            .wait_for(&format!(".inbox-item[data-job='{asks}'] .approval"))
            .await;
        audit(&browser, &format!("approvals-{tag}")).await;

        browser.goto(&daemon.url("/ui/submit")).await;
        browser.wait_for("#submit-bundle option[value=calc]").await;
        audit(&browser, &format!("submit-{tag}")).await;

        browser.goto(&daemon.url("/ui/bundles?open=calc")).await;
        browser.wait_for("[data-bundle=calc]").await;
        // With the "Jobs on earlier versions" check's answer shown.
        browser
            .click("section[data-bundle=calc] button.migrate-check")
            .await;
        browser
            .wait_for("section[data-bundle=calc] .migrate-plan")
            .await;
        audit(&browser, &format!("bundles-{tag}")).await;

        browser.goto(&daemon.url("/ui/deliveries")).await;
        browser.wait_text("#deliveries-status", "deliveries").await;
        audit(&browser, &format!("deliveries-{tag}")).await;
        browser.close().await;
    }
}

/// Search and sort the list, keep the focus across its refreshes, run a
/// job again, and approve a call with edited arguments from the inbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_sort_focus_rerun_and_the_inbox() {
    let (_mock, _site, daemon) = site_and_daemon().await;
    let http = client();
    let first = id_of(&submit(&http, &daemon, "calc", "add alpha").await);
    wait_terminal(&http, &daemon, &first, PATIENCE).await;
    let second = id_of(&submit(&http, &daemon, "calc", "add beta").await);
    wait_terminal(&http, &daemon, &second, PATIENCE).await;

    let browser = Browser::start(1440, 900, false).await;
    browser.goto(&daemon.url("/ui/jobs")).await;
    browser.wait_for(&format!("tr[data-job='{second}']")).await;
    browser.type_into("#filter-search", "ALPH").await;
    browser
        .wait_for(&format!("#jobs tr[data-job='{first}']"))
        .await;
    wait_gone(&browser, &format!("#jobs tr[data-job='{second}']")).await;
    // Two refreshes later the field still has the focus and the caret.
    for _ in 0..2 {
        let before = browser.text_of(".list-status").await;
        browser
            .wait_until(&format!(
                "document.querySelector('.list-status').textContent !== {before:?}"
            ))
            .await;
    }
    let focus = browser
        .client
        .execute(
            "const e = document.activeElement; return [e.id, e.selectionStart, e.value];",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(focus, json!(["filter-search", 4, "ALPH"]));
    browser.type_into("#filter-search", "").await;
    browser
        .wait_for(&format!("#jobs tr[data-job='{second}']"))
        .await;

    // A row's link keeps the focus though the rows are drawn again.
    browser
        .client
        .execute(
            &format!("document.querySelector(\"tr[data-job='{first}'] a\").focus()"),
            vec![],
        )
        .await
        .unwrap();
    let before = browser.text_of(".list-status").await;
    browser
        .wait_until(&format!(
            "document.querySelector('.list-status').textContent !== {before:?}"
        ))
        .await;
    browser
        .wait_until(&format!(
            "document.activeElement.closest(\"tr[data-job='{first}']\") !== null"
        ))
        .await;

    // Oldest first (the daemon's order) puts the first job on top.
    let select = browser.wait_for("#sort-jobs").await;
    select.select_by_value("created_asc").await.unwrap();
    browser
        .wait_until(&format!(
            "document.querySelector('#jobs tr[data-job]').dataset.job === {first:?}"
        ))
        .await;

    // Run again: the same input as a new job, shown.
    browser
        .goto(&daemon.url(&format!("/ui/jobs/{first}")))
        .await;
    browser.click("#rerun-job").await;
    browser.wait_text("dialog[open]", "add alpha").await;
    browser.confirm().await;
    browser
        .wait_until(&format!(
            "location.pathname.startsWith('/ui/jobs/') && !location.pathname.endsWith({first:?})"
        ))
        .await;
    browser.wait_for("#run-header[data-state=succeeded]").await;
    assert!(browser.text_of("#facts").await.contains("add alpha"));
    browser.screenshot("job-rerun").await;

    // The inbox: change the arguments in the schema's form and approve.
    let submitted = submit(&http, &daemon, "guarded", "add 2 and 3").await;
    let asks = id_of(&submitted);
    wait_settled(&http, &daemon, &asks).await;
    browser.goto(&daemon.url("/ui/approvals")).await;
    let item = format!(".inbox-item[data-job='{asks}']");
    browser.click(&format!("{item} .edit-args summary")).await;
    browser
        .type_into(&format!("{item} input[name=a]"), "4")
        .await;
    browser
        .click(&format!("{item} button.approve-edited"))
        .await;
    browser.wait_text("dialog[open]", "\"a\": 4").await;
    browser.confirm().await;
    browser
        .wait_text("#outcome .banner.ok", "Recorded: edit")
        .await;
    wait_gone(&browser, &item).await;
    let done = wait_terminal(&http, &daemon, &asks, PATIENCE).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    let events = job_events(&http, &daemon, &asks).await;
    assert!(
        events.iter().any(|e| e["type"] == "ToolResult"
            && e["output_preview"].as_str().unwrap_or("").contains('7')),
        "the edited call ran: {events:?}"
    );
    // The job's page shows what the tool ran with (it once showed the
    // model's arguments beside the edited call's result), the edit against
    // the model's arguments, and who decided.
    browser.goto(&daemon.url(&format!("/ui/jobs/{asks}"))).await;
    let call = "#timeline .call[data-tool=add]";
    browser
        .wait_text(&format!("{call} .run-args"), "{\"a\":4,\"b\":3}")
        .await;
    browser
        .wait_text(&format!("{call} .args-diff"), "a: 2 → 4")
        .await;
    browser
        .wait_text(
            &format!("{call} .decided-by"),
            "approved with this edit by local at",
        )
        .await;
    // The park and its decision were no attempt, and raised no limit.
    assert_eq!(done["max_attempts"], submitted["max_attempts"], "{done}");
    let attempts = format!("1 of {}", submitted["max_attempts"]);
    assert_eq!(browser.text_of("#attempts").await.trim(), attempts);
    browser.close().await;
}

/// A slow model: the job's page shows the model call in progress (from the
/// stream's progress frames, which only a page already watching gets)
/// before it ends, with the run time counting. The page watches first: the
/// job parks for an approval, which the page gives; the slow call follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_model_call_is_shown_in_progress() {
    let (_mock, _site, daemon) = site_and_daemon().await;
    let http = client();
    let id = id_of(&submit(&http, &daemon, "guarded", "slow sum").await);
    assert_eq!(
        wait_settled(&http, &daemon, &id).await["state"],
        "awaiting_approval"
    );
    let browser = Browser::start(390, 844, false).await;
    browser.goto(&daemon.url(&format!("/ui/jobs/{id}"))).await;
    browser.wait_text("#stream-status", "live").await;
    browser.click("#approvals .approval button.approve").await;
    browser.confirm().await;
    // Shown only between the call's start and its end (its reply removes it).
    browser
        .wait_text("#in-progress [data-kind=model]", "Model call")
        .await;
    browser.wait_text("#run-time", "so far").await;
    browser.screenshot("job-in-progress").await;
    browser.wait_for("#run-header[data-state=succeeded]").await;
    browser.wait_text("#answer", "Slowly done.").await;
    browser
        .wait_until("document.querySelector('#in-progress').children.length === 0")
        .await;
    browser.close().await;
}

/// A group chat's answer is a transcript with its speakers, its internal
/// variables folded away; the page passes the same checks as every view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_chat_reads_as_a_transcript() {
    let alice = mock_server("replies:\n  - content: \"Alice here.\"\n").await;
    let bob = mock_server("replies:\n  - content: \"Bob agrees.\"\n").await;
    let host = mock_server("replies:\n  - content: \"Moderating.\"\n").await;
    let site = Site::new(
        &host.base_url(),
        "[runtime]\nrouter = \"group-chat\"\ngroup_chat = \"group-chat\"\n",
    );
    site.put_bundle(
        "group-chat",
        "name: group-chat\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {system: \"You moderate.\", user: \"{{ input }}\"}\ngroup_chat: {max_rounds: 1, stop_word: DONE}\n",
    );
    for (id, name, mock) in [("alice", "Alice", &alice), ("bob", "Bob", &bob)] {
        site.put_bundle(
            id,
            &format!(
                "name: {id}\nversion: \"1\"\nmodel: {{endpoint: \"{}\", name: m}}\nprompts: {{user: \"{{{{ input }}}}\"}}\nagent: {{name: {name}}}\n",
                mock.base_url()
            ),
        );
    }
    let daemon = site.start();
    let http = client();
    let (status, chat) = common::daemon::post_json(
        &http,
        &daemon,
        "/api/group-chat",
        json!({"query": "Plan the trip.", "agent_ids": ["alice", "bob"], "max_iterations": 1}),
    )
    .await;
    assert_eq!(status, 200, "{chat}");
    let id = chat["job_id"].as_str().unwrap().to_string();

    let browser = Browser::start(390, 844, true).await;
    browser.goto(&daemon.url(&format!("/ui/jobs/{id}"))).await;
    let said = browser.wait_text("#transcript", "Bob agrees.").await;
    assert!(
        said.find("Alice").unwrap() < said.find("Alice here.").unwrap()
            && said.find("Alice here.").unwrap() < said.find("Bob").unwrap(),
        "speakers before their lines, in order: {said}"
    );
    let speakers = browser
        .client
        .execute(
            "return [...document.querySelectorAll('#transcript .speaker')].map((e) => e.textContent)",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(speakers, json!(["Alice", "Bob"]));
    browser
        .wait_until("!document.querySelector('#facts details[open]')")
        .await;
    audit(&browser, "job-group-chat-390-dark").await;

    // A chat its stop phrase ended says so (it read "a termination tool
    // ended it", and no tool did).
    let (status, chat) = common::daemon::post_json(
        &http,
        &daemon,
        "/api/group-chat",
        json!({"query": "Plan again.", "agent_ids": ["alice", "bob"], "max_iterations": 1,
               "termination": {"type": "stop_phrase", "phrase": "agrees"}}),
    )
    .await;
    assert_eq!(status, 200, "{chat}");
    let stopped = chat["job_id"].as_str().unwrap();
    browser
        .goto(&daemon.url(&format!("/ui/jobs/{stopped}")))
        .await;
    let why = browser
        .wait_text(
            "#why-ended",
            "an agent's reply said the stop phrase \"agrees\"",
        )
        .await;
    assert!(!why.contains("termination tool"), "{why}");
    browser.close().await;
    // The transcript passes axe in the other sizes and themes too.
    for (width, height, dark, tag) in [
        (1440, 900, false, "1440-light"),
        (1440, 900, true, "1440-dark"),
        (390, 844, false, "390-light"),
    ] {
        let browser = Browser::start(width, height, dark).await;
        browser.goto(&daemon.url(&format!("/ui/jobs/{id}"))).await;
        browser.wait_text("#transcript", "Bob agrees.").await;
        audit(&browser, &format!("job-group-chat-{tag}")).await;
        browser.close().await;
    }
}

/// A workflow's stages as a graph: each stage, the transitions taken with
/// their events, and where it ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_reads_as_a_graph_of_its_stages() {
    let mock = mock_server("replies:\n  - content: \"RESULT: done\"\n").await;
    let site = Site::new(&mock.base_url(), "");
    let place = site.path().join("place");
    std::fs::create_dir_all(&place).unwrap();
    site.put_bundle(
        "wf",
        &format!(
            r#"name: wf
version: "1"
model: {{endpoint: mock, name: m, plugin: openai}}
prompts: {{user: "{{{{ input }}}}"}}
workflow:
  start: draft
  working_dir: "{place}"
  stages:
    draft:
      kind: agent
      prompt: draft it
      result: {{regex: '(?m)^RESULT: (?P<event>\w+)$', events: [done], otherwise: done}}
    polish:
      kind: agent
      prompt: polish it
      result: {{regex: '(?m)^RESULT: (?P<event>\w+)$', events: [done], otherwise: done}}
  transitions:
    draft: {{done: polish}}
    polish: {{done: finish}}
"#,
            place = place.display()
        ),
    );
    let daemon = site.start();
    let http = client();
    let id = id_of(&submit(&http, &daemon, "wf", "go").await);
    let done = wait_terminal(&http, &daemon, &id, PATIENCE).await;
    assert_eq!(done["state"], "succeeded", "{done}");

    let browser = Browser::start(1440, 900, false).await;
    browser.goto(&daemon.url(&format!("/ui/jobs/{id}"))).await;
    let draft = browser
        .wait_text(".workflow-graph [data-stage=draft]", "polish")
        .await;
    assert!(
        draft.contains("on done") && draft.contains("ran 1"),
        "{draft}"
    );
    browser
        .wait_text(".workflow-graph .stage-node.final", "ended: finish")
        .await;
    // The timeline shows each stage's event with its original name (`lol
    // impl`'s `<stage>_<event>`) beside it.
    let head = browser.wait_text(".turn-head", "Stage polish").await;
    assert!(head.contains("(polish_done)"), "{head}");
    audit(&browser, "job-workflow-1440-light").await;
    browser.close().await;
    // The graph passes axe in the other sizes and themes too.
    for (width, height, dark, tag) in [
        (1440, 900, true, "1440-dark"),
        (390, 844, false, "390-light"),
        (390, 844, true, "390-dark"),
    ] {
        let browser = Browser::start(width, height, dark).await;
        browser.goto(&daemon.url(&format!("/ui/jobs/{id}"))).await;
        browser
            .wait_text(".workflow-graph .stage-node.final", "ended: finish")
            .await;
        audit(&browser, &format!("job-workflow-{tag}")).await;
        browser.close().await;
    }
}

/// Waits until nothing matches `css`.
async fn wait_gone(browser: &Browser, css: &str) {
    browser
        .wait_until(&format!("document.querySelector({css:?}) === null"))
        .await;
}
