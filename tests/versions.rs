//! Versions in flight on the real daemon: `structured-agents migrate-jobs
//! BUNDLE --dry-run` lists which parked jobs would move to the bundle's
//! current version and why the others cannot (their journal calls a tool
//! the new version removed); the real move (`POST
//! /v1/bundles/{name}/migrate-jobs`) moves only those, and a moved job
//! resumes on the new version. A bundle declaring `on_new_version: move`
//! has its parked jobs moved by the reload itself.

mod common;

use std::path::Path;
use std::time::Duration;

use common::daemon::{
    Daemon, Site, client, file_lines, get, post_json, run_cli, wait_settled, wait_terminal,
};
use common::mock_server;
use serde_json::{Value, json};

/// `alpha` jobs call `note`, `beta` jobs `lookup`; then both ask to `pay`
/// (which needs approval: the job parks) and answer.
const SCRIPT: &str = r#"
replies:
  - {match: alpha, turn: 1, tool_calls: [{id: n1, name: note, arguments: {text: one}}]}
  - {match: beta, turn: 1, tool_calls: [{id: l1, name: lookup, arguments: {}}]}
  - {turn: 2, tool_calls: [{id: p1, name: pay, arguments: {amount: 5}}]}
  - {turn: 3, content: paid}
"#;

/// The bundle at `version`: `note`, `pay` (approval always; appends to
/// `effects`) and, when `with_lookup`, `lookup`.
fn bundle(version: &str, effects: &Path, with_lookup: bool, on_new_version: &str) -> String {
    let effects = effects.display();
    let lookup = if with_lookup {
        "  - name: lookup\n    kind: process\n    effect: read_only\n    command: [python3, -c, \"print('{}')\"]\n"
    } else {
        ""
    };
    format!(
        "name: bank\nversion: \"{version}\"\non_new_version: {on_new_version}\nmodel: {{endpoint: mock, name: m, plugin: openai}}\nprompts: {{system: \"Bank v{version}.\", user: \"{{{{ input }}}}\"}}\ntools:\n  - name: note\n    kind: process\n    effect: idempotent\n    parameters: {{type: object, properties: {{text: {{type: string}}}}, required: [text]}}\n    command: [python3, -c, \"print('{{}}')\"]\n  - name: pay\n    kind: process\n    effect: unsafe\n    approval: always\n    parameters: {{type: object, properties: {{amount: {{type: integer}}}}, required: [amount]}}\n    command: [python3, -c, \"import json,sys; a=json.load(sys.stdin); open('{effects}','a').write(str(a['amount']) + chr(10)); print('{{}}')\"]\n{lookup}"
    )
}

/// Submits a job with `input` and waits until it parks on its `pay` call.
async fn parked(http: &reqwest::Client, daemon: &Daemon, input: &str) -> String {
    let (status, job) = post_json(
        http,
        daemon,
        "/v1/jobs",
        json!({"bundle": "bank", "input": input}),
    )
    .await;
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_str().unwrap().to_string();
    let job = wait_settled(http, daemon, &id).await;
    assert_eq!(job["state"], "awaiting_approval", "{job}\n{}", daemon.log());
    assert_eq!(job["bundle_version"], "1", "{job}");
    id
}

async fn reload(http: &reqwest::Client, daemon: &Daemon, version: &str) {
    let (status, outcome) = post_json(http, daemon, "/v1/reload", json!({})).await;
    assert_eq!(status, 200, "{outcome}");
    let bundle = get(http, daemon, "/v1/bundles/bank").await;
    assert_eq!(bundle["version"], version, "{bundle}");
}

/// Approves the parked `pay` call; the job's end.
async fn approve(http: &reqwest::Client, daemon: &Daemon, id: &str) -> Value {
    let approvals = get(http, daemon, &format!("/v1/jobs/{id}/approvals")).await;
    let request = approvals["approvals"][0].clone();
    let (status, answer) = post_json(
        http,
        daemon,
        &format!("/v1/jobs/{id}/approvals/p1"),
        json!({"decision": "approve", "digest": request["digest"]}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    wait_terminal(http, daemon, id, Duration::from_secs(60)).await
}

async fn version_of(http: &reqwest::Client, daemon: &Daemon, id: &str) -> Value {
    get(http, daemon, &format!("/v1/jobs/{id}")).await["bundle_version"].clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn migrate_jobs_moves_the_parked_jobs_whose_journal_replays_on_the_new_version() {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    let effects = site.path().join("paid.txt");
    site.put_bundle("bank", &bundle("1", &effects, true, "pin"));
    let daemon = site.start();
    let http = client();
    let alpha = parked(&http, &daemon, "alpha").await;
    let beta = parked(&http, &daemon, "beta").await;

    // Version 2 drops `lookup`, which beta's first turn called.
    site.put_bundle("bank", &bundle("2", &effects, false, "pin"));
    reload(&http, &daemon, "2").await;
    assert_eq!(
        version_of(&http, &daemon, &alpha).await,
        "1",
        "pinned: the reload moved nothing"
    );

    let out = run_cli(&daemon.url(""), &["migrate-jobs", "bank", "--dry-run"], "");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!(
            "would move {alpha} (awaiting_approval) from version 1 to 2"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("cannot move {beta}"))
            && stdout.contains(
                "turn 1 calls tool `lookup`, which version 2 of bundle \"bank\" does not have"
            ),
        "{stdout}"
    );
    assert_eq!(
        version_of(&http, &daemon, &alpha).await,
        "1",
        "a dry run moves nothing"
    );

    let (status, plan) =
        post_json(&http, &daemon, "/v1/bundles/bank/migrate-jobs", json!({})).await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(plan["moves"].as_array().unwrap().len(), 1, "{plan}");
    assert_eq!(plan["moves"][0]["job_id"], alpha.as_str(), "{plan}");
    assert_eq!(plan["refused"][0]["job_id"], beta.as_str(), "{plan}");
    assert_eq!(version_of(&http, &daemon, &alpha).await, "2");
    assert_eq!(version_of(&http, &daemon, &beta).await, "1");

    // The moved job resumes on version 2, the other on its version 1.
    let requests = server.requests().len();
    let done = approve(&http, &daemon, &alpha).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(done["result"]["bundle_version"], "2", "{done}");
    let done = approve(&http, &daemon, &beta).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(done["result"]["bundle_version"], "1", "{done}");
    assert_eq!(
        server.requests().len() - requests,
        2,
        "one live turn each, nothing asked again"
    );
    assert_eq!(file_lines(&effects), ["5", "5"]);

    // Only waiting or parked states can be asked for.
    let (status, refused) = post_json(
        &http,
        &daemon,
        "/v1/bundles/bank/migrate-jobs",
        json!({"states": ["running"]}),
    )
    .await;
    assert_eq!(status, 422, "{refused}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bundle_that_declares_move_has_its_parked_jobs_moved_by_the_reload() {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    let effects = site.path().join("paid.txt");
    site.put_bundle("bank", &bundle("1", &effects, true, "move"));
    let daemon = site.start();
    let http = client();
    let alpha = parked(&http, &daemon, "alpha").await;
    let beta = parked(&http, &daemon, "beta").await;

    site.put_bundle("bank", &bundle("2", &effects, false, "move"));
    reload(&http, &daemon, "2").await;
    assert_eq!(
        version_of(&http, &daemon, &alpha).await,
        "2",
        "moved by the reload"
    );
    assert_eq!(
        version_of(&http, &daemon, &beta).await,
        "1",
        "its journal does not replay on 2"
    );
    let log = daemon.log();
    assert!(
        log.contains("on_new_version: move moved") && log.contains(&beta),
        "the move is said, with the job that stays: {log}"
    );

    let done = approve(&http, &daemon, &alpha).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(done["result"]["bundle_version"], "2", "{done}");
}

/// A bundle that declares `move`, edited while the daemon was down: the
/// start loads the new version (no reload changes it) and moves the parked
/// job to it before any worker could lease it; the job resumes there.
#[tokio::test(flavor = "multi_thread")]
async fn a_bundle_edited_while_the_daemon_was_down_has_its_parked_jobs_moved_at_start() {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    let effects = site.path().join("paid.txt");
    site.put_bundle("bank", &bundle("1", &effects, true, "move"));
    let daemon = site.start();
    let http = client();
    let alpha = parked(&http, &daemon, "alpha").await;
    assert_eq!(daemon.stop(), Some(0));

    site.put_bundle("bank", &bundle("2", &effects, true, "move"));
    let daemon = site.start();
    assert_eq!(
        version_of(&http, &daemon, &alpha).await,
        "2",
        "moved by the start\n{}",
        daemon.log()
    );
    assert!(
        daemon.log().contains("on_new_version: move moved"),
        "the move is said: {}",
        daemon.log()
    );
    let done = approve(&http, &daemon, &alpha).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(done["result"]["bundle_version"], "2", "{done}");
    assert_eq!(file_lines(&effects), ["5"]);
}

/// Pruning the bundle store keeps every copy a job that has not ended is
/// pinned to: a job parked on version 1, the bundle edited to version 2
/// and reloaded with every copy looking older than the queue's retention —
/// version 1's copy stays (the job is pinned to it) and the job resumes on
/// it.
#[tokio::test(flavor = "multi_thread")]
async fn pruning_keeps_the_copy_a_parked_job_is_pinned_to() {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    let effects = site.path().join("paid.txt");
    site.put_bundle("bank", &bundle("1", &effects, true, "pin"));
    let daemon = site.start();
    let http = client();
    let alpha = parked(&http, &daemon, "alpha").await;

    let store = site.path().join("state/bundles");
    let long_ago = std::time::SystemTime::now() - Duration::from_secs(30 * 24 * 3600);
    let age = || {
        for copy in std::fs::read_dir(&store).unwrap() {
            let copy = copy.unwrap().path();
            std::fs::File::open(&copy)
                .unwrap()
                .set_modified(long_ago)
                .unwrap();
        }
    };
    age();
    let copies = std::fs::read_dir(&store).unwrap().count();
    site.put_bundle("bank", &bundle("2", &effects, true, "pin"));
    reload(&http, &daemon, "2").await;
    // A second reload (nothing changed) prunes again, after the first's
    // pruning had its turn.
    age();
    reload(&http, &daemon, "2").await;
    assert_eq!(version_of(&http, &daemon, &alpha).await, "1");
    let done = approve(&http, &daemon, &alpha).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(done["result"]["bundle_version"], "1", "{done}");
    assert!(
        std::fs::read_dir(&store).unwrap().count() > copies,
        "version 1's copy stays beside version 2's"
    );
}
