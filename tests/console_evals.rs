//! The console's Evals panel and the release gate's buttons in a real
//! browser against the real daemon and its mock model (issue 52 item 5): a
//! gated bundle whose version 2 regresses on one case is held, rejected by
//! its eval; a read-only key sees the candidate and the runs it may see,
//! with no Run suite, Promote or Reject but the scope they need; an admin
//! runs the suite from the console on version 1 and on version 2 against
//! version 1, sees both runs in the list, the score over versions and the
//! case-by-case diff naming the regressed case with both answers, passes
//! axe-core with the panel open (desktop light, phone dark), and promotes
//! version 2 from the candidate banner.

#[allow(dead_code)] // this test drives a few of the browser's methods
#[path = "console/browser.rs"]
mod browser;
#[allow(dead_code)] // this test runs only the audit
#[path = "console/checks.rs"]
mod checks;
mod common;

use std::time::Duration;

use browser::Browser;
use checks::audit;
use common::daemon::{Daemon, Site, client_as, eventually, get, new_key};
use common::gated::drop_version;
use common::mock_server;
use serde_json::Value;
use structured_agents::mock::MockServer;

/// `right` answers every case; `wrong` regresses on `hello` alone.
const SCRIPT: &str = r#"
replies:
  - {match: "Qright: add 2 and 3", content: "5"}
  - {match: "Qright: say hello", content: "hello"}
  - {match: "Qright: capital of France", content: "Paris"}
  - {match: "Qwrong: add 2 and 3", content: "5"}
  - {match: "Qwrong: say hello", content: "bye for now"}
  - {match: "Qwrong: capital of France", content: "Paris"}
"#;

const CARD: &str = "section.bundle[data-bundle=calc]";
const PANEL: &str = "section.bundle[data-bundle=calc] .evals";

/// The daemon with version 1 serving and version 2 held, rejected by its
/// eval; the admin's and the read-only key's tokens.
async fn held_candidate() -> (MockServer, Site, Daemon, String, String) {
    let mock = mock_server(SCRIPT).await;
    let site = Site::new(&mock.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    let keys = site.path().join("keys.toml");
    let admin = new_key(&keys, "ops", &["--scopes", "admin"]);
    let viewer = new_key(&keys, "viewer", &["--scopes", "read"]);
    drop_version(&site, 1, "right");
    let daemon = site.start();
    drop_version(&site, 2, "wrong");
    held_rejected(&daemon, &admin, "2").await;
    (mock, site, daemon, admin, viewer)
}

/// Waits until `version` is the held candidate, rejected by its eval.
async fn held_rejected(daemon: &Daemon, token: &str, version: &str) {
    let http = client_as(token);
    eventually(
        Duration::from_secs(90),
        &format!("version {version} rejected by its eval"),
        || async {
            let b = get(&http, daemon, "/v1/bundles/calc").await;
            (b["candidate"]["version"] == version && b["candidate"]["state"] == "rejected")
                .then_some(())
        },
    )
    .await;
}

async fn sign_in(browser: &Browser, daemon: &Daemon, token: &str, name: &str) {
    browser.goto(&daemon.url("/ui/bundles?open=calc")).await;
    browser.type_into("#token", token).await;
    browser.click("form button[type=submit]").await;
    browser
        .wait_text("#signed-in", &format!("signed in as {name}"))
        .await;
}

/// Opens the Evals panel of calc's card.
async fn open_panel(browser: &Browser, daemon: &Daemon) {
    browser.goto(&daemon.url("/ui/bundles?open=calc")).await;
    browser.wait_text(PANEL, "Evals").await;
    browser
        .click(&format!("{PANEL} details.evals-fold > summary"))
        .await;
    browser
        .wait_for(&format!("{PANEL} .evals-cases tr[data-case=hello]"))
        .await;
}

/// Runs the suite from the form on `version` (against `against`, none
/// when empty) and waits for its report: the new run's id (`before` is
/// the run the panel said it queued last, if any).
async fn run_suite(browser: &Browser, version: &str, against: &str, before: &str) -> String {
    browser
        .wait_for(&format!("{PANEL} select.evals-version"))
        .await
        .select_by_value(version)
        .await
        .unwrap();
    browser
        .wait_for(&format!("{PANEL} select.evals-against"))
        .await
        .select_by_value(against)
        .await
        .unwrap();
    browser.click(&format!("{PANEL} button.evals-run")).await;
    browser
        .wait_text("dialog[open]", "No tool would really run.")
        .await;
    browser.confirm().await;
    let said = format!("document.querySelector('{PANEL} .evals-outcome').textContent");
    browser
        .wait_until(&format!(
            "{said}.includes('queued') && !{said}.includes('{before} ')"
        ))
        .await;
    let queued = browser.eval_text(&said).await;
    let id = queued
        .split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("{queued}"))
        .to_string();
    browser
        .wait_for(&format!(
            "{PANEL} .evals-report .evals-run[data-run='{id}'][data-state=succeeded]"
        ))
        .await;
    id
}

/// A read-only key: the held version and why, and no Run suite, Promote
/// or Reject but the scope each needs.
async fn sees_no_button_it_may_not_use(daemon: &Daemon, viewer: &str) {
    let browser = Browser::start(1280, 900, false).await;
    sign_in(&browser, daemon, viewer, "viewer").await;
    browser
        .wait_text(
            &format!("{CARD} .candidate[data-candidate='2']"),
            "rejected by its evals",
        )
        .await;
    browser
        .wait_text(&format!("{CARD} .candidate .why-not"), "operate")
        .await;
    open_panel(&browser, daemon).await;
    browser
        .wait_text(&format!("{PANEL} .evals-form .why-not"), "submit")
        .await;
    browser
        .wait_text(&format!("{PANEL} .evals-runs"), "No eval run")
        .await;
    for absent in [".release-promote", ".release-reject", ".evals-run"] {
        let found = browser
            .eval_text(&format!(
                "document.querySelectorAll('{CARD} {absent}').length"
            ))
            .await;
        assert_eq!(found, "0", "a read-only key is offered {absent}");
    }
    browser.close().await;
}

/// Promotes the held version from its banner, after a confirmation.
async fn promote_from_the_banner(browser: &Browser, daemon: &Daemon, admin: &str) {
    browser
        .click(&format!("{CARD} button.release-promote"))
        .await;
    browser
        .wait_text("dialog[open]", "whatever its eval says")
        .await;
    browser.confirm().await;
    browser
        .wait_text(
            "#reload-outcome",
            "calc version 2 promoted; serving version 2",
        )
        .await;
    let served = get(&client_as(admin), daemon, "/v1/bundles/calc").await;
    assert_eq!(
        (&served["version"], &served["candidate"]),
        (&Value::from("2"), &Value::Null),
        "{served}"
    );
}

/// Version 3 held, shown with its Promote button; an operator promotes it
/// elsewhere meanwhile: the page's Promote is refused, the daemon's reason
/// beside the button (enabled again), and nothing changes.
async fn refused_when_decided_meanwhile(
    browser: &Browser,
    site: &Site,
    daemon: &Daemon,
    admin: &str,
) {
    drop_version(site, 3, "wrong");
    held_rejected(daemon, admin, "3").await;
    let http = client_as(admin);
    browser.goto(&daemon.url("/ui/bundles?open=calc")).await;
    browser
        .wait_for(&format!(
            "{CARD} .candidate[data-candidate='3'] button.release-promote"
        ))
        .await;
    let elsewhere = http
        .post(daemon.url("/v1/bundles/calc/promote"))
        .json(&serde_json::json!({"version": "3"}))
        .send()
        .await
        .unwrap();
    assert_eq!(elsewhere.status(), 200);
    browser
        .click(&format!("{CARD} button.release-promote"))
        .await;
    browser
        .wait_text("dialog[open]", "whatever its eval says")
        .await;
    browser.confirm().await;
    let refused = browser
        .wait_text(
            &format!("{CARD} .release-outcome"),
            "The daemon refused to promote version 3",
        )
        .await;
    assert!(refused.contains("holds no version"), "{refused}");
    let enabled = browser
        .eval_text(&format!(
            "String(!document.querySelector('{CARD} button.release-promote').disabled)"
        ))
        .await;
    assert_eq!(enabled, "true");
    let served = get(&http, daemon, "/v1/bundles/calc").await;
    assert_eq!(served["version"], "3", "{served}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suite_is_run_compared_and_its_candidate_promoted_from_the_console() {
    let (_mock, site, daemon, admin, viewer) = held_candidate().await;

    sees_no_button_it_may_not_use(&daemon, &viewer).await;

    // An admin runs the suite on each version, then the comparison.
    let browser = Browser::start(1280, 900, false).await;
    sign_in(&browser, &daemon, &admin, "ops").await;
    open_panel(&browser, &daemon).await;
    // The cases shown are the held version's: what its decision rests on.
    browser
        .wait_text(
            &format!("{PANEL} .evals-cases caption.evals-suite-version"),
            "the version the release gate holds, 2",
        )
        .await;
    let first = run_suite(&browser, "1", "", "none").await;
    browser
        .wait_text(&format!("{PANEL} .evals-report"), "Pass:")
        .await;
    let compared = run_suite(&browser, "2", "1", &first).await;
    let report = format!("{PANEL} .evals-report");
    browser.wait_text(&report, "Regressed: hello").await;
    let hello = browser
        .wait_text(
            &format!(
                "{report} table.evals-diff tr.regressed[data-case=hello][data-change=regressed]"
            ),
            "bye for now",
        )
        .await;
    assert!(
        hello.contains("regressed") && hello.contains("hello"),
        "{hello}"
    );
    let same = browser
        .wait_text(
            &format!("{report} table.evals-diff tr[data-case=sum]"),
            "same",
        )
        .await;
    assert!(!same.contains("regressed"), "{same}");

    // The runs list: both of ours (and the gate's own), newest first.
    for id in [&first, &compared] {
        browser
            .wait_for(&format!(
                "{PANEL} .evals-run-list tr[data-run='{id}'][data-state=succeeded]"
            ))
            .await;
    }
    let rows = browser
        .eval_text(&format!("[...document.querySelectorAll('{PANEL} .evals-run-list tr[data-run]')].map((r) => r.dataset.run).join(' ')"))
        .await;
    assert!(rows.starts_with(&compared), "newest first: {rows}");
    // The score over versions: each version's latest finished run.
    browser
        .wait_text(
            &format!("{PANEL} .evals-score-list li[data-version='1']"),
            "1.00 · pass",
        )
        .await;
    browser
        .wait_text(
            &format!("{PANEL} .evals-score-list li[data-version='2']"),
            "0.67 · fail",
        )
        .await;
    audit(&browser, "bundles-evals-1280-light").await;

    promote_from_the_banner(&browser, &daemon, &admin).await;
    refused_when_decided_meanwhile(&browser, &site, &daemon, &admin).await;
    browser.close().await;

    // The open panel with a diff passes in the other sizes and themes too.
    for (width, height, dark, tag) in [
        (390, 844, true, "390-dark"),
        (1280, 900, true, "1280-dark"),
        (390, 844, false, "390-light"),
    ] {
        let browser = Browser::start(width, height, dark).await;
        sign_in(&browser, &daemon, &admin, "ops").await;
        open_panel(&browser, &daemon).await;
        browser
            .click(&format!(
                "{PANEL} .evals-run-list tr[data-run='{compared}'] button.evals-show"
            ))
            .await;
        browser.wait_text(&report, "Regressed: hello").await;
        audit(&browser, &format!("bundles-evals-{tag}")).await;
        browser.close().await;
    }
}
