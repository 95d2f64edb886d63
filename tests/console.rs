//! The console (`/ui`) in a real browser against the real daemon and its
//! mock model: a job submitted from the form reaches `succeeded` in the
//! live list; its page shows the tool call with arguments and result; a job
//! whose `unsafe` call was cut short by a SIGKILL is found parked after the
//! restart and resolved with skip from its page; a broken bundle's error is
//! on the bundles page, and a reload shows its typed outcome; a call awaiting
//! approval is approved from its page and the job succeeds; a finished job is
//! forked from its second turn with "Fork from here" and the fork's page says
//! where it came from; a job parked on version 1 of a bundle edited
//! compatibly is checked and moved to version 2 from the bundles page; a
//! bundle's crash matrix is run from its "Verify" button. Each view is saved as a screenshot (the path is
//! printed) to look at.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

#[path = "console/browser.rs"]
mod browser;
#[allow(dead_code)] // this test runs only the audit
#[path = "console/checks.rs"]
mod checks;
mod common;

use browser::Browser;
use common::daemon::{
    SHORT_LEASE, Site, charge_tools, file_lines, kill_while_charging, parked_on_charge, submit,
};
use common::mock_server;
use structured_agents::mock::MockServer;

const TOKEN: &str = "console-test-token";

const CALC_SCRIPT: &str = r#"
replies:
  - turn: 1
    content: "Adding them."
    tool_calls:
      - {id: call_add, name: add, arguments: {a: 2, b: 3}}
  - turn: 2
    content: "2 + 3 = 5."
"#;

fn calc_bundle() -> String {
    r#"name: calc
version: "1"
description: Adds two numbers with a tool.
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
"#
    .to_string()
}

/// A bundle whose one tool has a timeout that is not a duration (line 7).
const BROKEN: &str = "name: broken\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\ntools:\n  - name: t\n    timeout: soon\n    kind: process\n    command: [\"true\"]\n";

/// With a token configured, the console asks for it and sends it; a job
/// submitted from the form appears in the live list and reaches
/// `succeeded` there; its page shows the tool call with its arguments,
/// result and effect class, and the answer; the bundles page shows the
/// broken bundle's error by file, line and key, and a reload's outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_watch_inspect_and_reload_from_the_console() {
    let mock = mock_server(CALC_SCRIPT).await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle("calc", &calc_bundle());
    site.put_bundle("broken", BROKEN);
    let daemon = site.start_with_env(&[
        ("STRUCTURED_AGENTS_SERVER__TOKEN_ENV", "CONSOLE_TEST_TOKEN"),
        ("CONSOLE_TEST_TOKEN", TOKEN),
    ]);
    check_headers(&daemon).await;
    let browser = Browser::start(1280, 900, false).await;

    // The token prompt, then the (empty) list.
    browser.goto(&daemon.url("/ui/submit")).await;
    browser.type_into("#token", TOKEN).await;
    browser.click("form button[type=submit]").await;

    // Submit from the form.
    browser.wait_for("#submit-bundle option[value=calc]").await;
    let select = browser.wait_for("#submit-bundle").await;
    select.select_by_value("calc").await.unwrap();
    browser.type_into("#submit-input", "What is 2+3?").await;
    browser
        .type_into("#submit-variables", r#"{"style": "short"}"#)
        .await;
    browser.click("#submit-job").await;
    browser
        .wait_text("dialog[open]", "\"style\": \"short\"")
        .await;
    browser.screenshot("submit-confirm").await;
    browser.confirm().await;
    let id = browser.wait_text("#submitted-id", "-").await;
    browser.screenshot("submit").await;

    // The live list: the job appears and reaches succeeded without a reload.
    browser.click("#submit-outcome a[href='/ui/jobs']").await;
    browser
        .wait_for(&format!("tr[data-job='{id}'][data-state='succeeded']"))
        .await;
    browser.wait_text(".chip[data-state=succeeded]", "1").await;
    browser.screenshot("jobs").await;

    // The job's page: the tool call with its arguments, result and effect.
    browser.click(&format!("tr[data-job='{id}'] a")).await;
    let call = browser.wait_text(".call[data-tool=add]", "sum").await;
    assert!(call.contains(r#"{"a":2,"b":3}"#), "arguments: {call}");
    assert!(
        call.contains("\"sum\"") && call.contains('5'),
        "result: {call}"
    );
    assert!(call.contains("read only"), "effect class: {call}");
    browser.wait_text("#answer", "2 + 3 = 5.").await;
    browser.wait_text(".timeline", "Adding them.").await;
    browser.wait_text(".waterfall", "ƒ add").await;
    browser.wait_text("#journal", "result@0").await;
    browser.screenshot("job").await;
    browser.close().await;

    // A phone: the same page, stacked.
    let phone = Browser::start(390, 844, false).await;
    phone.goto(&daemon.url("/ui/jobs")).await;
    phone.type_into("#token", TOKEN).await;
    phone.click("form button[type=submit]").await;
    phone.goto(&daemon.url(&format!("/ui/jobs/{id}"))).await;
    phone.wait_text(".call[data-tool=add]", "sum").await;
    phone.screenshot("job-phone").await;

    // Bundles: the broken one's error by file, line and key; a reload's outcome.
    // The bundle's details open from the URL (the overview folds them).
    phone.goto(&daemon.url("/ui/bundles?open=calc")).await;
    let error = phone
        .wait_text("[data-status=invalid] .error-row", "tools[0].timeout")
        .await;
    assert!(
        error.contains("bundle.yaml") && error.contains('7') && error.contains("soon"),
        "{error}"
    );
    phone
        .wait_text("[data-bundle=calc] table.tools", "read only")
        .await;
    phone.close().await;

    let browser = Browser::start(1280, 900, false).await;
    browser.goto(&daemon.url("/ui/bundles")).await;
    browser.type_into("#token", TOKEN).await;
    browser.click("form button[type=submit]").await;
    browser
        .wait_text("[data-status=invalid]", "tools[0].timeout")
        .await;
    browser.click("#reload").await;
    browser.confirm().await;
    let report = browser.wait_text(".reload-report", "Reload").await;
    assert!(
        report.contains("partial"),
        "a broken bundle makes the reload partial: {report}"
    );
    assert!(report.contains("tools[0].timeout"), "{report}");
    browser.screenshot("bundles").await;
    browser.close().await;
}

/// The page and its assets come with a CSP that allows only the daemon's
/// own files and forbids framing; they need no token (they hold no data);
/// an unknown asset is a 404 with the API's error shape.
async fn check_headers(daemon: &common::daemon::Daemon) {
    let http = common::daemon::client();
    for path in ["/ui", "/ui/jobs/some-id", "/ui/assets/app.js"] {
        let response = http.get(daemon.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let headers = response.headers();
        let csp = headers["content-security-policy"].to_str().unwrap();
        assert!(
            csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
            "{path}: {csp}"
        );
        assert_eq!(headers["x-frame-options"], "DENY", "{path}");
    }
    let missing = http
        .get(daemon.url("/ui/assets/nope.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    let body: serde_json::Value = missing.json().await.unwrap();
    assert_eq!(body["error"]["code"], "not_found", "{body}");
    // The API behind it still wants the token.
    let jobs = http
        .get(daemon.url("/v1/jobs/counts"))
        .send()
        .await
        .unwrap();
    assert_eq!(jobs.status(), 401);
}

const PAY_SCRIPT: &str = r#"
replies:
  - turn: 1
    tool_calls:
      - {id: call_pay, name: charge, arguments: {amount: 5}}
  - turn: 2
    content: "Paid."
"#;

/// A site with bundle `pay`, whose `unsafe` charge writes to the returned
/// effects file and then runs until its daemon is gone, on a mock that
/// asks for one charge.
async fn paying_site() -> (MockServer, Site, std::path::PathBuf) {
    let mock = mock_server(PAY_SCRIPT).await;
    let site = Site::new(&mock.base_url(), "");
    let effects = site.path().join("effects.txt");
    site.put_bundle(
        "pay",
        &format!(
            "name: pay\nversion: \"1\"\nmodel: {{endpoint: mock, name: m, plugin: openai}}\nprompts: {{user: \"{{{{ input }}}}\"}}\n{}",
            charge_tools(&effects, "unsafe")
        ),
    );
    (mock, site, effects)
}

/// The daemon is killed (SIGKILL) while an `unsafe` call runs; after the
/// restart the console lists the job first, parked; its page explains the
/// call of unknown outcome, and skip with a result, confirmed, resumes the
/// job to `succeeded` — the charge made once. In dark mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_job_is_resolved_from_the_console() {
    let (_mock, site, effects) = paying_site().await;
    let http = common::daemon::client();
    let daemon = site.start_with_env(&[SHORT_LEASE]);
    let job = submit(&http, &daemon, "pay", "pay the invoice").await;
    let id = job["id"].as_str().unwrap().to_string();
    kill_while_charging(daemon, &effects).await;

    let daemon = site.start();
    parked_on_charge(&http, &daemon, &id).await;
    let browser = Browser::start(1280, 900, true).await;
    browser.goto(&daemon.url("/ui/jobs")).await;
    // Parked on an unknown outcome, it reads as an approval park does.
    browser
        .wait_text(
            &format!("#parked tr[data-job='{id}'] .parked-call"),
            "ƒ charge (unsafe) · outcome unknown",
        )
        .await;
    browser
        .wait_text(".chip[data-state=needs_attention]", "1")
        .await;
    browser.screenshot("jobs-parked").await;

    browser
        .click(&format!("#parked tr[data-job='{id}'] a"))
        .await;
    let panel = browser.wait_text("#resolve", "charge").await;
    assert!(
        panel.contains("unsafe") && panel.contains("\"amount\": 5"),
        "{panel}"
    );
    browser
        .wait_text(".call[data-tool=charge]", "no result")
        .await;
    // The crashed attempt is its own section; the wait for its lease is labelled.
    browser
        .wait_text(".attempt[data-attempt='1']", "crash")
        .await;
    browser
        .wait_text(".waterfall", "lease wait after a crash")
        .await;
    browser
        .wait_until("!document.querySelector('#answer .card.failure')")
        .await;
    // A parked job's page, with its resolve panel open, passes axe.
    checks::audit(&browser, "job-parked").await;

    browser
        .type_into("#skip-output", r#"{"charged": true}"#)
        .await;
    browser.click("#resolve-skip").await;
    browser
        .wait_text("dialog[open]", r#"{"charged": true}"#)
        .await;
    browser.confirm().await;
    browser
        .wait_text("#outcome .banner.ok", "Resolved with skip")
        .await;
    browser.wait_for("#run-header[data-state=succeeded]").await;
    browser.wait_text("#answer", "Paid.").await;
    browser
        .wait_text(".call[data-tool=charge]", "charged")
        .await;
    browser.screenshot("job-resolved").await;
    browser.close().await;
    assert_eq!(file_lines(&effects).len(), 1, "the charge was made once");
}

/// The approvals panel against the real approvals API: a job whose `add`
/// call needs approval is listed among the parked ones; its page shows the
/// call with its arguments, and an approval, confirmed, is posted with the
/// digest the page read — the job then runs the call and succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_awaiting_approval_is_approved_from_the_console() {
    let mock = mock_server(CALC_SCRIPT).await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle(
        "calc",
        &calc_bundle().replace(
            "    effect: read_only\n",
            "    effect: read_only\n    approval: always\n",
        ),
    );
    let daemon = site.start();
    let http = common::daemon::client();
    let job = submit(&http, &daemon, "calc", "What is 2+3?").await;
    let id = job["id"].as_str().unwrap().to_string();
    let parked = common::daemon::wait_settled(&http, &daemon, &id).await;
    assert_eq!(parked["state"], "awaiting_approval", "{parked}");

    let browser = Browser::start(1280, 900, false).await;
    browser.goto(&daemon.url("/ui/jobs")).await;
    browser
        .wait_text(".chip[data-state=awaiting_approval]", "1")
        .await;
    browser.click(&format!("tr[data-job='{id}'] a")).await;
    let card = browser
        .wait_text("#approvals .approval[data-call=call_add]", "add")
        .await;
    assert!(card.contains("Approve") && card.contains("Deny"), "{card}");
    assert!(card.contains("\"a\": 2"), "the arguments: {card}");
    browser.screenshot("job-approval").await;
    browser.click("#approvals .approval button.primary").await;
    browser.confirm().await;
    browser
        .wait_text("#outcome .banner.ok", "Recorded: approve")
        .await;
    browser.wait_for("#run-header[data-state=succeeded]").await;
    browser.wait_text("#answer", "2 + 3 = 5.").await;
    browser.screenshot("job-approved").await;
    browser.close().await;
    let events = common::daemon::job_events(&http, &daemon, &id).await;
    let decided = events
        .iter()
        .find(|e| e["type"] == "ApprovalDecided")
        .expect("the decision is on the job's log");
    assert_eq!(decided["decision"], "approve");
    assert_eq!(decided["by"], "local");
}

/// "Fork from here" on a turn of a finished job's journal forks it there:
/// the console goes to the new job, whose header says "forked from" with a
/// link to the source, and the fork asks the model only for that turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_forked_from_a_turn_in_the_console() {
    let mock = mock_server(CALC_SCRIPT).await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle("calc", &calc_bundle());
    let daemon = site.start();
    let http = common::daemon::client();
    let job = submit(&http, &daemon, "calc", "What is 2+3?").await;
    let id = job["id"].as_str().unwrap().to_string();
    let done =
        common::daemon::wait_terminal(&http, &daemon, &id, std::time::Duration::from_secs(60))
            .await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(mock.requests().len(), 2);

    let browser = Browser::start(1280, 900, false).await;
    browser.goto(&daemon.url(&format!("/ui/jobs/{id}"))).await;
    browser
        .click("#journal button.fork-here[data-turn='2']")
        .await;
    browser.confirm().await;
    let origin = browser.wait_text("#forked-from", &id).await;
    assert!(origin.contains("at turn 2"), "{origin}");
    browser.wait_for("#run-header[data-state=succeeded]").await;
    browser.wait_text("#answer", "2 + 3 = 5.").await;
    browser.screenshot("job-forked").await;
    browser.close().await;
    let jobs = common::daemon::get(&http, &daemon, "/v1/jobs?bundle=calc").await;
    let forks: Vec<&serde_json::Value> = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["forked_from"]["job_id"] == id.as_str())
        .collect();
    assert_eq!(forks.len(), 1, "{jobs}");
    assert_eq!(forks[0]["forked_from"]["at_turn"], 2, "{jobs}");
    assert_eq!(
        mock.requests().len(),
        3,
        "the fork asked the model for turn 2 only"
    );
}

/// The bundles page's "Jobs on earlier versions" panel: a job parked on
/// version 1, then the bundle edited compatibly (version 2, same tools);
/// "Check" lists the job as one that would move, "Move 1 job", confirmed,
/// moves it — the API then says the job is on version 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_job_is_moved_to_the_new_version_from_the_console() {
    let mock = mock_server(CALC_SCRIPT).await;
    let site = Site::new(&mock.base_url(), "");
    let approval = |bundle: String| {
        bundle.replace(
            "    effect: read_only\n",
            "    effect: read_only\n    approval: always\n",
        )
    };
    site.put_bundle("calc", &approval(calc_bundle()));
    let daemon = site.start();
    let http = common::daemon::client();
    let job = submit(&http, &daemon, "calc", "What is 2+3?").await;
    let id = job["id"].as_str().unwrap().to_string();
    let parked = common::daemon::wait_settled(&http, &daemon, &id).await;
    assert_eq!(parked["state"], "awaiting_approval", "{parked}");
    assert_eq!(parked["bundle_version"], "1", "{parked}");

    site.put_bundle(
        "calc",
        &approval(calc_bundle()).replace("version: \"1\"", "version: \"2\""),
    );
    let (status, outcome) =
        common::daemon::post_json(&http, &daemon, "/v1/reload", serde_json::json!({})).await;
    assert_eq!(status, 200, "{outcome}");

    let browser = Browser::start(1280, 900, false).await;
    browser.goto(&daemon.url("/ui/bundles?open=calc")).await;
    let panel = "section.bundle[data-bundle=calc] .migrate";
    browser.wait_text(panel, "version 2").await;
    browser
        .click(&format!("{panel} button.migrate-check"))
        .await;
    let plan = browser
        .wait_text(&format!("{panel} .migrate-plan[data-dry-run=true]"), &id)
        .await;
    assert!(
        plan.contains("1 job would move to version 2, 0 cannot"),
        "{plan}"
    );
    assert!(plan.contains("from version 1"), "{plan}");
    let button = browser
        .wait_text(&format!("{panel} button.migrate-move"), "Move 1 job")
        .await;
    assert_eq!(button, "Move 1 job");
    assert_eq!(
        common::daemon::get(&http, &daemon, &format!("/v1/jobs/{id}")).await["bundle_version"],
        "1",
        "the check moved nothing"
    );
    browser.screenshot("bundle-migrate-check").await;
    browser.click(&format!("{panel} button.migrate-move")).await;
    browser.confirm().await;
    let moved = browser
        .wait_text(&format!("{panel} .migrate-plan[data-dry-run=false]"), &id)
        .await;
    assert!(moved.contains("1 job moved to version 2"), "{moved}");
    browser.screenshot("bundle-migrate-moved").await;
    browser.close().await;
    let job = common::daemon::get(&http, &daemon, &format!("/v1/jobs/{id}")).await;
    assert_eq!(job["bundle_version"], "2", "{job}");
    assert_eq!(job["state"], "awaiting_approval", "{job}");
}

/// The bundles page's "Crash matrix" panel: the calc bundle (on a model
/// server) is verified with the replies typed into its reply-script field;
/// the matrix shows every crash point with what the `add` call did, and
/// the verdict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_is_verified_from_the_console() {
    let mock = mock_server(CALC_SCRIPT).await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle("calc", &calc_bundle());
    let daemon = site.start();

    let browser = Browser::start(1280, 900, false).await;
    browser.goto(&daemon.url("/ui/bundles?open=calc")).await;
    let panel = "section.bundle[data-bundle=calc] .verify";
    browser.wait_text(panel, "Crash matrix").await;
    browser.click(&format!("{panel} summary")).await;
    browser
        .type_into(&format!("{panel} textarea.verify-exchange"), CALC_SCRIPT)
        .await;
    browser.click(&format!("{panel} button.verify-run")).await;
    // The confirmation lists the tools that really run: `add`, read only.
    browser
        .wait_text("dialog.confirm .verify-real-tools", "add (read only)")
        .await;
    browser.confirm().await;
    let report = browser
        .wait_text(
            &format!("{panel} .verify-report[data-violations=\"0\"]"),
            "Every call keeps its declared effect at all 6 crash points",
        )
        .await;
    assert!(
        report.contains("after write 1 (turn 1: the model's reply)"),
        "{report}"
    );
    assert!(report.contains("add"), "{report}");
    // The read-only call's result lost at a crash: it runs again, as its
    // effect allows.
    assert!(
        report.contains("twice (2×)") && report.contains("as declared"),
        "{report}"
    );
    browser.screenshot("bundle-verify").await;
    browser.close().await;
    assert_eq!(
        mock.requests().len(),
        0,
        "verify never calls the model server"
    );
}

/// Verify's real tools only after a confirmation that lists them: with "Run
/// the real tools" ticked, Verify first asks, naming the `unsafe` tool that
/// would really run; Cancel runs nothing; confirmed, the report says the real
/// tools ran. Unticked, the confirmation says no tool really runs and names
/// the stand-ins, and the report names them and nothing ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_asks_before_a_verify_runs_the_real_tools() {
    let mock = mock_server(CALC_SCRIPT).await;
    let site = Site::new(&mock.base_url(), "");
    let paid = site.path().join("paid.log");
    let bundle = calc_bundle()
        .replace("effect: read_only", "effect: unsafe")
        .replace(
            "print(json.dumps({'sum': a['a'] + a['b']}))",
            // Single quotes: the command is a double-quoted YAML scalar.
            &format!(
                "open('{}', 'a').write('paid'); print(json.dumps({{'sum': a['a'] + a['b']}}))",
                paid.display()
            ),
        );
    site.put_bundle("calc", &bundle);
    let daemon = site.start();

    let browser = Browser::start(1280, 900, false).await;
    browser.goto(&daemon.url("/ui/bundles?open=calc")).await;
    let panel = "section.bundle[data-bundle=calc] .verify";
    browser.wait_text(panel, "Run the real tools (add)").await;
    browser.click(&format!("{panel} summary")).await;
    browser
        .type_into(&format!("{panel} textarea.verify-exchange"), CALC_SCRIPT)
        .await;

    // Stand-ins by default: nothing of `add` runs, as the confirmation says.
    browser.click(&format!("{panel} button.verify-run")).await;
    browser
        .wait_text("dialog.confirm", "No tool would really run.")
        .await;
    browser
        .wait_text("dialog.confirm .verify-stand-ins", "add (unsafe)")
        .await;
    browser.confirm().await;
    browser
        .wait_text(
            &format!("{panel} .verify-report"),
            "Stand-ins answered add: nothing of theirs really ran.",
        )
        .await;
    assert!(!paid.exists(), "a default verify ran the unsafe tool");

    // Ticked: a confirmation names the tool; Cancel runs nothing.
    browser.click(&format!("{panel} input.verify-real")).await;
    browser.click(&format!("{panel} button.verify-run")).await;
    let asked = browser
        .wait_text("dialog.confirm", "would really run")
        .await;
    assert!(asked.contains("add") && asked.contains("unsafe"), "{asked}");
    browser.screenshot("bundle-verify-confirm").await;
    browser
        .click("dialog.confirm button[data-action=cancel]")
        .await;
    assert!(!paid.exists(), "cancelled, yet the tool ran");

    browser.click(&format!("{panel} button.verify-run")).await;
    browser
        .wait_text("dialog.confirm", "would really run")
        .await;
    browser
        .click("dialog.confirm button[data-action=confirm]")
        .await;
    browser
        .wait_text(
            &format!("{panel} .verify-report"),
            "The real tools ran, side effects and all.",
        )
        .await;
    assert!(paid.exists(), "confirmed, the real tool ran");
    browser.close().await;
}

/// A webhook whose receiver was down (answering 503) is a dead letter on the
/// deliveries page; "Redrive" sends it again, the receiver (up now) gets it
/// once and the row says delivered.
#[tokio::test(flavor = "multi_thread")]
async fn a_dead_letter_is_redriven_from_the_console() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    // The receiver holds its port from the start (a port given back and
    // bound again later can be taken meanwhile by another test): down, it
    // answers 503 and counts nothing; up, it counts each delivery.
    let up = Arc::new(AtomicBool::new(false));
    let received = Arc::new(AtomicUsize::new(0));
    let (is_up, counter) = (up.clone(), received.clone());
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move || {
            let (is_up, counter) = (is_up.clone(), counter.clone());
            async move {
                if !is_up.load(Ordering::SeqCst) {
                    return axum::http::StatusCode::SERVICE_UNAVAILABLE;
                }
                counter.fetch_add(1, Ordering::SeqCst);
                axum::http::StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let mock = mock_server("replies:\n  - content: done\n").await;
    let site = Site::new(
        &mock.base_url(),
        "[webhooks]\nmax_attempts = 1\ntimeout = \"2s\"\n\n[egress]\nallow = [\"http://127.0.0.1:*\"]\n",
    );
    site.put_bundle(
        "plain",
        "name: plain\nversion: \"1\"\nmodel: {endpoint: mock, name: m, plugin: openai}\nprompts: {user: \"{{ input }}\"}\n",
    );
    let daemon = site.start();
    let http = common::daemon::client();
    let job = common::daemon::submit_body(
        &http,
        &daemon,
        serde_json::json!({"bundle": "plain", "input": "x", "webhook": hook}),
    )
    .await;
    let id = job["id"].as_str().unwrap().to_string();
    let listing = format!("/v1/deliveries?state=dead&job_id={id}");
    let delivery = common::daemon::eventually(
        std::time::Duration::from_secs(30),
        "the dead letter",
        || async {
            let page = common::daemon::get(&http, &daemon, &listing).await;
            page["deliveries"][0]["id"].as_str().map(str::to_string)
        },
    )
    .await;

    // The receiver comes up.
    up.store(true, Ordering::SeqCst);

    let browser = Browser::start(1280, 900, false).await;
    browser.goto(&daemon.url("/ui/deliveries")).await;
    let row = format!("tr[data-delivery='{delivery}']");
    browser.wait_text(&row, "dead").await;
    browser.screenshot("deliveries-dead").await;
    browser.click(&format!("{row} button.redrive")).await;
    browser.confirm().await;
    // The dead-letter list no longer holds it; all deliveries show it delivered.
    common::daemon::eventually(
        std::time::Duration::from_secs(30),
        "the redriven delivery",
        || async { (received.load(Ordering::SeqCst) == 1).then_some(()) },
    )
    .await;
    browser.goto(&daemon.url("/ui/deliveries?state=")).await;
    browser
        .wait_until(&format!(
            "document.querySelector(\"{row}\")?.dataset.state === 'delivered'"
        ))
        .await;
    browser.close().await;
    assert_eq!(received.load(Ordering::SeqCst), 1, "delivered once");
}

/// Two jobs parked on calls of unknown outcome (their daemon was killed
/// while both charged) are resolved together from the jobs list: both
/// selected, "Resolve: fail" counts them and asks first, and both end
/// failed with the operator's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_jobs_are_resolved_in_bulk() {
    let (_mock, site, effects) = paying_site().await;
    let http = common::daemon::client();
    let daemon = site.start_with_env(&[SHORT_LEASE]);
    let ids: Vec<String> = [
        submit(&http, &daemon, "pay", "pay one").await,
        submit(&http, &daemon, "pay", "pay two").await,
    ]
    .iter()
    .map(|job| job["id"].as_str().unwrap().to_string())
    .collect();
    common::daemon::eventually(
        std::time::Duration::from_secs(60),
        "both charges are written",
        || async { (file_lines(&effects).len() == 2).then_some(()) },
    )
    .await;
    daemon.kill9();

    let daemon = site.start();
    for id in &ids {
        parked_on_charge(&http, &daemon, id).await;
    }
    let browser = Browser::start(1280, 900, false).await;
    browser.goto(&daemon.url("/ui/jobs")).await;
    for id in &ids {
        browser
            .click(&format!("#parked tr[data-job='{id}'] input.pick"))
            .await;
    }
    browser.wait_text("#bulk-count", "2 jobs selected").await;
    browser.wait_text("#bulk-fail", "Resolve: fail (2)").await;
    browser.click("#bulk-fail").await;
    browser
        .wait_text("dialog[open] h2", "Resolve: fail 2 jobs?")
        .await;
    browser.confirm().await;
    browser
        .wait_text("#bulk-outcome", "2 jobs resolved: failed")
        .await;
    for id in &ids {
        let job = common::daemon::get(&http, &daemon, &format!("/v1/jobs/{id}")).await;
        assert_eq!(job["state"], "failed", "{job}");
        assert_eq!(job["error"], "failed from the console's jobs list", "{job}");
    }
    browser.close().await;
}
