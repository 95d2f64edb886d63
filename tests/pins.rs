//! Pins at every depth: a job killed while an `unsafe` call runs inside a
//! nested run — an `agent` tool's, a workflow stage's, a group-chat
//! reply's — whose nested bundle is edited while the daemon is down,
//! resumes on the content that nested run started with (its copy in the
//! state directory), parks `needs_attention` on the cut call as the
//! contract says, and finishes once `resolve` skips it: the charge made
//! once and no model call paid twice (counted at the mock server for the
//! job's own bundle, and as `ModelRequest` events for the nested one, whose
//! endpoint is scripted). And the copies themselves: one damaged while the
//! daemon is down is found out at the start and rebuilt from its source.

mod common;

use std::path::Path;
use std::time::Duration;

use common::daemon::{
    Daemon, SHORT_LEASE, Site, charge_tools, client, file_lines, get, job_events,
    kill_while_charging, parked_on_charge, skip_charge, submit, submit_and_wait, wait_terminal,
};
use common::mock_server;
use serde_json::{Value, json};

/// The nested bundle's model: the charge, then its answer.
const CHILD_SCRIPT: &str = "replies:\n  - {turn: 1, tool_calls: [{id: c, name: charge, arguments: {}}]}\n  - {turn: 2, content: \"RESULT: done\"}\n";

/// Puts the nested bundle `name` — on a scripted endpoint (its
/// `script.yaml`), a `charge` tool of `effect` and a system prompt `system`.
fn put_child(site: &Site, name: &str, effects: &Path, effect: &str, system: &str) {
    let yaml = format!(
        "name: {name}\nversion: \"1\"\ndescription: Charges cards.\nmodel: {{endpoint: \"scripted:script.yaml\", name: m, plugin: openai}}\nprompts: {{system: \"{system}\", user: \"{{{{ input }}}}\"}}\n{}",
        charge_tools(effects, effect)
    );
    site.put_bundle(name, &yaml);
    std::fs::write(
        site.path().join("bundles").join(name).join("script.yaml"),
        CHILD_SCRIPT,
    )
    .unwrap();
}

/// Edits the nested bundle while the daemon is down: another prompt, and
/// its charge now claims to be `idempotent` (run on the edit, the cut call
/// would run again instead of parking).
fn edit_child(site: &Site, name: &str, effects: &Path) {
    put_child(
        site,
        name,
        effects,
        "idempotent",
        "You charge cards, edited.",
    );
}

/// How many model requests the job's nested runs sent (their endpoint is
/// scripted, so the mock server never sees them): one `ModelRequest` event
/// each, replayed turns sending none.
async fn nested_model_requests(http: &reqwest::Client, daemon: &Daemon, id: &str) -> usize {
    job_events(http, daemon, id)
        .await
        .iter()
        .filter(|e| e["type"] == "ModelRequest" && e["bundle"] == "payments")
        .count()
}

/// After the restart: the job parks on the charge in `scope_suffix`, is
/// skipped, and succeeds → the finished job.
async fn parks_then_finishes(
    http: &reqwest::Client,
    daemon: &Daemon,
    id: &str,
    scope: impl Fn(&str) -> bool,
) -> Value {
    let pending = parked_on_charge(http, daemon, id).await;
    assert!(
        scope(pending["scope"].as_str().unwrap()),
        "the cut call, inside the nested run: {pending}"
    );
    skip_charge(http, daemon, id).await;
    let done = wait_terminal(http, daemon, id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    done
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_agent_resumes_on_its_pinned_copy_after_an_edit() {
    let mock = mock_server(
        "replies:\n  - {turn: 1, tool_calls: [{id: p, name: helper, arguments: {input: charge it}}]}\n  - {turn: 2, content: parent done}\n",
    )
    .await;
    let site = Site::new(&mock.base_url(), "");
    let effects = site.path().join("effects.txt");
    put_child(&site, "payments", &effects, "unsafe", "You charge cards.");
    site.put_bundle(
        "parent",
        "name: parent\nversion: \"1\"\nmodel: {endpoint: mock, name: m, plugin: openai}\nprompts: {user: \"{{ input }}\"}\ntools:\n  - {name: helper, kind: agent, bundle: payments}\n",
    );
    let http = client();
    let daemon = site.start_with_env(&[SHORT_LEASE]);
    let id = submit(&http, &daemon, "parent", "parent task").await["id"]
        .as_str()
        .unwrap()
        .to_string();
    kill_while_charging(daemon, &effects).await;
    edit_child(&site, "payments", &effects);

    let daemon = site.start();
    let done = parks_then_finishes(&http, &daemon, &id, |s| s == "1:0/").await;
    assert_eq!(done["result"]["output"], "parent done");
    assert_eq!(file_lines(&effects).len(), 1, "charged once");
    assert_eq!(
        mock.requests().len(),
        2,
        "the parent's two turns, once each"
    );
    assert_eq!(
        nested_model_requests(&http, &daemon, &id).await,
        2,
        "the nested run's two turns, once each"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_stage_resumes_on_its_pinned_copy_after_an_edit() {
    let mock = mock_server("replies:\n  - content: unused\n").await;
    let site = Site::new(&mock.base_url(), "");
    let effects = site.path().join("effects.txt");
    put_child(&site, "payments", &effects, "unsafe", "You charge cards.");
    let place = site.path().join("place");
    site.put_bundle(
        "wf",
        &format!(
            r#"name: wf
version: "1"
model: {{endpoint: mock, name: m, plugin: openai}}
prompts: {{user: "{{{{ input }}}}"}}
workflow:
  start: work
  working_dir: "{place}"
  artifacts_dir: "{place}/artifacts"
  stages:
    work:
      kind: agent
      bundle: payments
      prompt: charge it
      result: {{regex: '(?m)^RESULT: (?P<event>\w+)$', events: [done], otherwise: done}}
  transitions:
    work: {{done: finish}}
"#,
            place = place.display()
        ),
    );
    let http = client();
    let daemon = site.start_with_env(&[SHORT_LEASE]);
    let id = submit(&http, &daemon, "wf", "go").await["id"]
        .as_str()
        .unwrap()
        .to_string();
    kill_while_charging(daemon, &effects).await;
    edit_child(&site, "payments", &effects);

    let daemon = site.start();
    parks_then_finishes(&http, &daemon, &id, |s| s.ends_with("-work/")).await;
    assert_eq!(file_lines(&effects).len(), 1, "charged once");
    assert_eq!(
        mock.requests().len(),
        0,
        "the workflow's own model is not asked"
    );
    assert_eq!(
        nested_model_requests(&http, &daemon, &id).await,
        2,
        "the stage's two turns, once each"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_chat_reply_resumes_on_its_pinned_copy_after_an_edit() {
    let mock = mock_server("replies:\n  - content: CONTINUE\n").await;
    let site = Site::new(
        &mock.base_url(),
        "[runtime]\nrouter = \"router\"\ngroup_chat = \"group-chat\"\n",
    );
    let effects = site.path().join("effects.txt");
    put_child(&site, "payments", &effects, "unsafe", "You charge cards.");
    site.put_bundle(
        "group-chat",
        "name: group-chat\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {system: \"You moderate a group chat.\", user: \"{{ input }}\"}\ngroup_chat: {max_rounds: 5, stop_word: DONE}\n",
    );
    let http = client();
    let daemon = site.start_with_env(&[SHORT_LEASE]);
    let body = json!({"query": "Charge my card", "agent_ids": ["payments"], "max_iterations": 1});
    // The answer dies with the daemon; the job is found in the queue.
    let request = tokio::spawn({
        let (http, url) = (http.clone(), daemon.url("/api/group-chat"));
        async move { http.post(url).json(&body).send().await }
    });
    kill_while_charging(daemon, &effects).await;
    let _ = request.await;
    edit_child(&site, "payments", &effects);

    let daemon = site.start();
    let jobs = get(&http, &daemon, "/v1/jobs?bundle=group-chat").await;
    let id = jobs["jobs"][0]["id"].as_str().unwrap().to_string();
    let done = parks_then_finishes(&http, &daemon, &id, |s| s == "1:reply-0/").await;
    assert_eq!(
        done["result"]["agent_responses"][0]["response"], "RESULT: done",
        "{done}"
    );
    assert_eq!(file_lines(&effects).len(), 1, "charged once");
    assert_eq!(mock.requests().len(), 0, "no selector is asked");
    assert_eq!(
        nested_model_requests(&http, &daemon, &id).await,
        2,
        "the reply's two turns, once each"
    );
}

/// A copy damaged while the daemon is down — a file emptied, as a power
/// cut leaves one whose data never reached the disk — is found out at the
/// start and rebuilt from the unchanged source: the bundle loads, and a job
/// pinned to it before resumes on it and succeeds, as do new jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_copy_is_rebuilt_from_its_source_at_the_start() {
    let mock = mock_server(
        "replies:\n  - {match: again, turn: 1, content: fresh}\n  - {match: charge it, turn: 1, tool_calls: [{id: c, name: charge, arguments: {}}]}\n  - {match: charge it, turn: 2, content: charged}\n",
    )
    .await;
    let site = Site::new(&mock.base_url(), "");
    let effects = site.path().join("effects.txt");
    site.put_bundle(
        "pay",
        &format!(
            "name: pay\nversion: \"1\"\nmodel: {{endpoint: mock, name: m, plugin: openai}}\nprompts: {{user: \"{{{{ input }}}}\"}}\n{}",
            charge_tools(&effects, "idempotent")
        ),
    );
    let http = client();
    let daemon = site.start_with_env(&[SHORT_LEASE]);
    let id = submit(&http, &daemon, "pay", "charge it").await["id"]
        .as_str()
        .unwrap()
        .to_string();
    kill_while_charging(daemon, &effects).await;
    let copies: Vec<_> = std::fs::read_dir(site.path().join("state/bundles"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(copies.len(), 1, "{copies:?}");
    let copy = &copies[0];
    std::fs::File::create(copy.join("bundle.yaml")).unwrap();

    let daemon = site.start();
    let bundle = get(&http, &daemon, "/v1/bundles/pay").await;
    assert_eq!(bundle["status"], "ok", "{bundle}");
    assert!(
        daemon
            .log()
            .contains("a bundle copy is damaged; rebuilding it from its source")
            && daemon.log().contains("bundle.yaml: 0 bytes"),
        "{}",
        daemon.log()
    );
    assert_ne!(
        std::fs::metadata(copy.join("bundle.yaml")).unwrap().len(),
        0
    );
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(done["result"]["output"], "charged");
    assert_eq!(file_lines(&effects).len(), 1, "charged once");
    assert_eq!(mock.requests().len(), 2, "no model call paid twice");
    let fresh = submit_and_wait(
        &http,
        &daemon,
        json!({"bundle": "pay", "input": "again"}),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(fresh["result"]["output"], "fresh", "{fresh}");
}
