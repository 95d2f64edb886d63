//! The console is usable without a mouse and by a screen reader, in a real
//! browser: the views tests/console_views.rs does not reach — the token
//! prompt, the keys page, the schedules with their form and a confirmation
//! open, a verify's crash matrix, a running, a queued and a cancelled job, a
//! call a four-eyes rule keeps from its submitter, a dead letter, a URL
//! with no view — pass axe-core (no serious or critical finding), fit a
//! phone and have 44 px tap targets (tests/console/checks.rs) at 1440×900
//! and 390×844, light and dark; each view names the tab. The skip link is
//! the first Tab stop and moves the focus to the view; a job is cancelled
//! with the keyboard alone, Escape closing the first confirmation and
//! giving the focus back to the button that opened it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

#[allow(dead_code)] // this test drives a few of the browser's methods
#[path = "console/browser.rs"]
mod browser;
#[allow(dead_code)] // and runs only some of the checks
#[path = "console/checks.rs"]
mod checks;
mod common;
#[path = "console/fixtures.rs"]
mod fixtures;

use std::time::Duration;

use browser::Browser;
use checks::{audit, is_dark};
use common::daemon::{
    Daemon, Site, client, client_as, eventually, get, new_key, post_json, submit, submit_body,
    wait_settled, wait_terminal,
};
use common::mock_server;
use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use fantoccini::key::Key;
use fixtures::calc;
use serde_json::{Value, json};
use structured_agents::mock::MockServer;

/// The napping tool's call, then an addition.
fn script() -> String {
    format!(
        "replies:\n  - {{match: \"nap a while\", turn: 1, tool_calls: [{{id: nap_1, name: nap, arguments: {{}}}}]}}\n{}",
        fixtures::ADDING
    )
}

/// A bundle whose one tool runs for four minutes, or until its daemon is
/// gone (the test's end kills the daemon, not its tools): its job stays
/// running while the views are audited.
const NAPPER: &str = r#"name: napper
version: "1"
model: {endpoint: mock, name: m, plugin: openai}
prompts: {user: "{{ input }}"}
tools:
  - {name: nap, kind: process, effect: read_only, description: Naps., timeout: 10m, command: [python3, -c, "import os, time\nparent = os.getppid()\nfor _ in range(240):\n    if os.getppid() != parent: break\n    time.sleep(1)"]}
"#;

/// Four eyes: the key that submitted a job may not decide on its call.
const FOUR_EYES: &str = "    approval: {always: true, by: others}\n";

fn id_of(job: &Value) -> String {
    job["id"].as_str().unwrap().to_string()
}

/// Presses `key` on whatever has the focus, as a person would.
async fn press(browser: &Browser, key: Key) {
    let key: char = key.into();
    let actions = KeyActions::new("keyboard".into())
        .then(KeyAction::Down { value: key })
        .then(KeyAction::Up { value: key });
    browser.client.perform_actions(actions).await.unwrap();
}

/// What has the focus: its id, or its tag and class.
async fn focused(browser: &Browser) -> String {
    browser
        .eval_text(
            "(() => { const e = document.activeElement; return e.id || (e.tagName + '.' + e.className); })()",
        )
        .await
}

/// Waits until the tab is named `title` (the view draws after the daemon
/// answers).
async fn wait_title(browser: &Browser, title: &str) {
    browser
        .wait_until(&format!("document.title === {title:?}"))
        .await;
}

/// The jobs the audit shows, made through the API as `admin`.
struct Shown {
    /// Running: its tool call takes four minutes.
    running: String,
    queued: String,
    cancelled: String,
    four_eyes: String,
}

async fn jobs_to_show(daemon: &Daemon, admin: &str) -> Shown {
    let ops = client_as(admin);
    let queued = id_of(
        &submit_body(
            &ops,
            daemon,
            json!({"bundle": "calc", "input": "add later", "run_at": "2099-01-01T00:00:00Z"}),
        )
        .await,
    );
    let running = id_of(&submit(&ops, daemon, "napper", "nap a while").await);
    eventually(Duration::from_secs(30), "the slow job to run", || async {
        let job = get(&ops, daemon, &format!("/v1/jobs/{running}")).await;
        (job["state"] == "running").then_some(())
    })
    .await;
    let cancelled = id_of(&submit(&ops, daemon, "guarded", "add 2 and 3").await);
    wait_settled(&ops, daemon, &cancelled).await;
    let (status, _) = post_json(
        &ops,
        daemon,
        &format!("/v1/jobs/{cancelled}/cancel"),
        json!({}),
    )
    .await;
    assert_eq!(status, 200);
    let four_eyes = id_of(&submit(&ops, daemon, "guarded", "add 2 and 3").await);
    let parked = wait_settled(&ops, daemon, &four_eyes).await;
    assert_eq!(parked["state"], "awaiting_approval", "{parked}");
    assert_eq!(parked["pending_call"]["not_by"], "ops", "{parked}");
    let (status, made) = post_json(
        &ops,
        daemon,
        "/v1/schedules",
        json!({"id": "nightly", "bundle": "calc", "cron": "0 2 * * *", "timezone": "Europe/Berlin", "input": "add 1 and 1"}),
    )
    .await;
    assert_eq!(status, 201, "{made}");
    Shown {
        running,
        queued,
        cancelled,
        four_eyes,
    }
}

/// A webhook nobody receives, so the deliveries page has a dead letter.
async fn dead_letter(daemon: &Daemon, admin: &str) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let ops = client_as(admin);
    let body = json!({"bundle": "calc", "input": "add 1 and 2", "webhook": format!("http://127.0.0.1:{port}/hook")});
    submit_body(&ops, daemon, body).await;
    eventually(Duration::from_secs(60), "a dead letter", || async {
        let page = get(&ops, daemon, "/v1/deliveries?state=dead").await;
        page["deliveries"][0]["id"].as_str().map(str::to_string)
    })
    .await;
}

async fn site() -> (MockServer, Site, Daemon, String) {
    let mock = mock_server(&script()).await;
    let site = Site::new(
        &mock.base_url(),
        "[auth]\nkeys_file = \"keys.toml\"\n\n[webhooks]\nmax_attempts = 1\ntimeout = \"2s\"\n\n[egress]\nallow = [\"http://127.0.0.1:*\"]\n",
    );
    let admin = new_key(
        &site.path().join("keys.toml"),
        "ops",
        &["--scopes", "admin"],
    );
    site.put_bundle("calc", &calc("calc", ""));
    site.put_bundle("guarded", &calc("guarded", FOUR_EYES));
    site.put_bundle("napper", NAPPER);
    let daemon = site.start();
    (mock, site, daemon, admin)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_other_view_passes_axe_in_both_sizes_and_themes_and_names_the_tab() {
    let (_mock, _site, daemon, admin) = site().await;
    let shown = jobs_to_show(&daemon, &admin).await;
    dead_letter(&daemon, &admin).await;

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
        browser.wait_for("#token").await;
        wait_title(&browser, "Sign in · structured-agents").await;
        audit(&browser, &format!("token-{tag}")).await;
        browser.type_into("#token", &admin).await;
        browser.click("form button[type=submit]").await;
        browser.wait_text("#signed-in", "signed in as ops").await;
        wait_title(&browser, "Jobs · structured-agents").await;

        views_of_an_admin(&browser, &daemon, &tag).await;
        jobs_in_other_states(&browser, &daemon, &shown, &tag).await;

        browser.goto(&daemon.url("/ui/no-such-view")).await;
        browser.wait_text("main h1", "Not found").await;
        wait_title(&browser, "Not found · structured-agents").await;
        audit(&browser, &format!("not-found-{tag}")).await;
        browser.close().await;
    }
}

/// Keys, schedules (with the form and a confirmation open), the crash
/// matrix of a verify, and a dead letter.
async fn views_of_an_admin(browser: &Browser, daemon: &Daemon, tag: &str) {
    browser.goto(&daemon.url("/ui/keys")).await;
    browser.wait_for("#keys tr[data-key=ops]").await;
    wait_title(browser, "API keys · structured-agents").await;
    audit(browser, &format!("keys-{tag}")).await;

    browser.goto(&daemon.url("/ui/schedules")).await;
    let row = "#schedules tr[data-schedule=nightly]";
    browser.wait_text(row, "Europe/Berlin (in ").await;
    wait_title(browser, "Schedules · structured-agents").await;
    audit(browser, &format!("schedules-{tag}")).await;
    browser.click("#new-schedule").await;
    browser
        .wait_for("#schedule-bundle option[value=calc]")
        .await;
    audit(browser, &format!("schedule-form-{tag}")).await;
    browser.click("#schedule-cancel").await;
    browser.click(&format!("{row} button.pause")).await;
    browser
        .wait_text("dialog[open]", "No fire is submitted")
        .await;
    audit(browser, &format!("confirmation-{tag}")).await;
    browser.click("dialog[open] [data-action=cancel]").await;

    browser.goto(&daemon.url("/ui/bundles?open=calc")).await;
    let panel = "section.bundle[data-bundle=calc] .verify";
    browser.wait_text(panel, "Crash matrix").await;
    wait_title(browser, "Bundles · structured-agents").await;
    browser.click(&format!("{panel} summary")).await;
    browser
        .type_into(&format!("{panel} textarea.verify-exchange"), &script())
        .await;
    browser.click(&format!("{panel} button.verify-run")).await;
    browser.confirm().await;
    browser
        .wait_for(&format!("{panel} .verify-report[data-violations=\"0\"]"))
        .await;
    audit(browser, &format!("bundles-verified-{tag}")).await;

    browser.goto(&daemon.url("/ui/deliveries")).await;
    browser.wait_for("#deliveries tr[data-state=dead]").await;
    wait_title(browser, "Deliveries · structured-agents").await;
    audit(browser, &format!("deliveries-dead-{tag}")).await;
}

/// A job running (its live view: a tool call under way), one waiting
/// for its `run_at`, a cancelled one, and a call the signed-in key may not
/// decide on (it submitted the job): its decisions drawn disabled, with why.
async fn jobs_in_other_states(browser: &Browser, daemon: &Daemon, shown: &Shown, tag: &str) {
    browser
        .goto(&daemon.url(&format!("/ui/jobs/{}", shown.running)))
        .await;
    browser.wait_for("#run-header[data-state=running]").await;
    audit(browser, &format!("job-running-{tag}")).await;

    browser
        .goto(&daemon.url(&format!("/ui/jobs/{}", shown.queued)))
        .await;
    browser.wait_for("#run-header[data-state=queued]").await;
    let short = &shown.queued[shown.queued.len() - 8..];
    wait_title(browser, &format!("Job …{short} · structured-agents")).await;
    audit(browser, &format!("job-queued-{tag}")).await;

    browser
        .goto(&daemon.url(&format!("/ui/jobs/{}", shown.cancelled)))
        .await;
    browser.wait_for("#run-header[data-state=cancelled]").await;
    audit(browser, &format!("job-cancelled-{tag}")).await;

    browser
        .goto(&daemon.url(&format!("/ui/jobs/{}", shown.four_eyes)))
        .await;
    browser
        .wait_text("#approvals .why-not", "key ops submitted this job")
        .await;
    let approve = browser.wait_for("#approvals button.approve").await;
    assert!(
        !approve.is_enabled().await.unwrap(),
        "{tag}: the submitter is offered Approve on a four-eyes call"
    );
    audit(browser, &format!("job-four-eyes-{tag}")).await;
}

/// The first Tab stop is the skip link, shown; Enter on it moves the focus
/// to the view, the URL unchanged.
async fn skip_to_the_view(browser: &Browser) {
    press(browser, Key::Tab).await;
    assert_eq!(focused(browser).await, "A.skip-link");
    let top = browser
        .eval_text("document.activeElement.getBoundingClientRect().top")
        .await;
    assert!(
        top.parse::<f64>().unwrap() >= 0.0,
        "the focused skip link is off screen (top {top})"
    );
    press(browser, Key::Enter).await;
    assert_eq!(
        focused(browser).await,
        "view",
        "the skip link moves the focus to the view"
    );
    assert!(
        browser.eval_text("location.hash").await.is_empty(),
        "the skip link changes the URL"
    );
}

/// The skip link is the first Tab stop and moves the focus to the view;
/// from there the keyboard alone reaches Cancel, Escape closes its
/// confirmation and gives the focus back, and Tab and Enter confirm it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_cancelled_with_the_keyboard_alone() {
    let (_mock, _site, daemon, id) = parked_for_approval().await;
    let http = client();

    let browser = Browser::start(1440, 900, false).await;
    browser.goto(&daemon.url(&format!("/ui/jobs/{id}"))).await;
    browser.wait_for("#cancel-job").await;
    let short = &id[id.len() - 8..];
    wait_title(&browser, &format!("Job …{short} · structured-agents")).await;

    skip_to_the_view(&browser).await;

    // From the view, Tab reaches Cancel before any link of the header.
    let mut tabs = 0;
    while focused(&browser).await != "cancel-job" {
        press(&browser, Key::Tab).await;
        tabs += 1;
        let now = focused(&browser).await;
        assert!(
            tabs < 20 && !now.starts_with("A.brand") && !now.contains("skip-link"),
            "Tab {tabs} reached {now}, not Cancel"
        );
    }

    // Enter opens the confirmation on its safe answer; Escape closes it
    // and the focus is back on Cancel.
    press(&browser, Key::Enter).await;
    browser.wait_for("dialog[open]").await;
    browser
        .wait_until("document.activeElement.dataset.action === 'cancel'")
        .await;
    press(&browser, Key::Escape).await;
    browser
        .wait_until("document.querySelector('dialog') === null")
        .await;
    assert_eq!(focused(&browser).await, "cancel-job");
    assert_eq!(
        get(&http, &daemon, &format!("/v1/jobs/{id}")).await["state"],
        "awaiting_approval"
    );

    // Space opens it again; Tab goes to Confirm, Enter confirms.
    press(&browser, Key::Space).await;
    browser.wait_for("dialog[open]").await;
    press(&browser, Key::Tab).await;
    browser
        .wait_until("document.activeElement.dataset.action === 'confirm'")
        .await;
    press(&browser, Key::Enter).await;
    browser.wait_for("#run-header[data-state=cancelled]").await;
    // The Cancel button is drawn away: the focus is on the answer.
    browser
        .wait_until("document.activeElement.id === 'outcome'")
        .await;
    browser.wait_text("#outcome", "Cancel requested").await;
    assert_eq!(
        get(&http, &daemon, &format!("/v1/jobs/{id}")).await["state"],
        "cancelled"
    );
    a_link_gives_the_focus_to_the_view_it_draws(&browser, &daemon, &id).await;
    browser.close().await;
}

/// The keyboard alone approves a parked call: from the view, Tab reaches
/// Approve, Enter asks first, Tab and Enter confirm, and the job runs on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_is_approved_with_the_keyboard_alone() {
    let (_mock, _site, daemon, id) = parked_for_approval().await;
    let http = client();
    let browser = Browser::start(1440, 900, false).await;
    browser.goto(&daemon.url(&format!("/ui/jobs/{id}"))).await;
    browser.wait_for("#approvals button.approve").await;
    skip_to_the_view(&browser).await;
    let mut tabs = 0;
    while !focused(&browser).await.contains("approve") {
        press(&browser, Key::Tab).await;
        tabs += 1;
        let now = focused(&browser).await;
        assert!(
            tabs < 40 && !now.starts_with("A.brand") && !now.contains("skip-link"),
            "Tab {tabs} reached {now}, not Approve"
        );
    }
    assert!(
        !focused(&browser).await.contains("approve-edited"),
        "the first approve button reached is Approve"
    );
    confirm_with_the_keyboard(&browser).await;
    let done = wait_terminal(&http, &daemon, &id, std::time::Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    browser.close().await;
}

/// The keyboard alone cancels jobs in bulk: Tab to each job's box and
/// Space to pick it, Tab to the bar's Cancel, Enter, then Tab and Enter to
/// confirm; both jobs end cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_cancelled_in_bulk_with_the_keyboard_alone() {
    let mock = mock_server(&script()).await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle("calc", &calc("calc", ""));
    let daemon = site.start();
    let http = client();
    let mut ids = Vec::new();
    for input in ["one later", "two later"] {
        let job = submit_body(
            &http,
            &daemon,
            json!({"bundle": "calc", "input": input, "run_at": "2099-01-01T00:00:00Z"}),
        )
        .await;
        ids.push(id_of(&job));
    }
    let browser = Browser::start(1440, 900, false).await;
    browser.goto(&daemon.url("/ui/jobs")).await;
    for id in &ids {
        browser
            .wait_for(&format!("#jobs tr[data-job='{id}'] input.pick"))
            .await;
    }
    skip_to_the_view(&browser).await;
    for id in &ids {
        let here = format!(
            "document.activeElement.classList.contains('pick') && document.activeElement.dataset.job === {id:?}"
        );
        tab_until(&browser, &here, &format!("the box of job {id}")).await;
        press(&browser, Key::Space).await;
    }
    browser.wait_text("#bulk-count", "2 jobs selected").await;
    tab_until(
        &browser,
        "document.activeElement.id === 'bulk-cancel'",
        "the bar's Cancel",
    )
    .await;
    confirm_with_the_keyboard(&browser).await;
    browser.wait_text("#bulk-outcome", "2 jobs cancelled").await;
    for id in &ids {
        let job = get(&http, &daemon, &format!("/v1/jobs/{id}")).await;
        assert_eq!(job["state"], "cancelled", "{job}");
    }
    browser.close().await;
}

/// The keyboard alone pauses a schedule: Tab to its Pause, Enter, then
/// Tab and Enter to confirm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_is_paused_with_the_keyboard_alone() {
    let mock = mock_server(&script()).await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle("calc", &calc("calc", ""));
    let daemon = site.start();
    let http = client();
    let (status, made) = post_json(
        &http,
        &daemon,
        "/v1/schedules",
        json!({"id": "nightly", "bundle": "calc", "cron": "0 2 * * *", "input": "add 1 and 1"}),
    )
    .await;
    assert_eq!(status, 201, "{made}");
    let browser = Browser::start(1440, 900, false).await;
    browser.goto(&daemon.url("/ui/schedules")).await;
    browser
        .wait_for("tr[data-schedule=nightly] button.pause")
        .await;
    skip_to_the_view(&browser).await;
    tab_until(
        &browser,
        "document.activeElement.classList.contains('pause') && document.activeElement.closest('tr')?.dataset.schedule === 'nightly'",
        "the schedule's Pause",
    )
    .await;
    confirm_with_the_keyboard(&browser).await;
    browser
        .wait_for("tr[data-schedule=nightly][data-paused=true]")
        .await;
    let nightly = get(&http, &daemon, "/v1/schedules/nightly").await;
    assert_eq!(nightly["paused"], true, "{nightly}");
    browser.close().await;
}

/// Every action of the console is a native control the keyboard reaches
/// and works (a button, a form, a field, a fold): no handler sits on an
/// element Tab passes over, so the keyboard paths tested above stand for
/// every action. Read from the console's sources: each handler belongs to
/// the element the nearest `h("tag"` before it makes.
#[test]
fn every_action_is_a_native_control_the_keyboard_reaches() {
    const NATIVE: [&str; 8] = [
        "button", "a", "input", "select", "textarea", "form", "details", "summary",
    ];
    let mut handlers = 0;
    let mut found = Vec::new();
    for dir in ["src/api/console", "src/api/console/views"] {
        for entry in std::fs::read_dir(common::repo(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "js") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let tags: Vec<(usize, &str)> = text
                .match_indices("h(")
                // `h(` itself, not the end of `fetch(` or `each(`.
                .filter(|(at, _)| {
                    text[..*at]
                        .chars()
                        .next_back()
                        .is_none_or(|c| !c.is_alphanumeric() && c != '_' && c != '.')
                })
                .filter_map(|(at, _)| {
                    let rest = text[at + 2..].trim_start();
                    let tag = rest.strip_prefix('"')?.split('"').next()?;
                    Some((at, tag))
                })
                .collect();
            for handler in [
                "onclick:",
                "onchange:",
                "oninput:",
                "onkeydown:",
                "onsubmit:",
                "ontoggle:",
            ] {
                for (at, _) in text.match_indices(handler) {
                    handlers += 1;
                    let tag = tags.iter().rev().find(|(p, _)| *p < at).map(|(_, t)| *t);
                    if !tag.is_some_and(|t| NATIVE.contains(&t)) {
                        let line = text[..at].lines().count();
                        found.push(format!("{}:{line}: {handler} on {tag:?}", path.display()));
                    }
                }
            }
        }
    }
    assert!(
        handlers > 20,
        "only {handlers} handlers found: the scan is broken"
    );
    assert!(
        found.is_empty(),
        "actions on elements the keyboard skips:\n{}",
        found.join("\n")
    );
}

/// A daemon with the guarded calculator, and a job of it parked for the
/// approval of its call (the mock, the site and the daemon are kept alive
/// by the caller).
async fn parked_for_approval() -> (MockServer, Site, Daemon, String) {
    let mock = mock_server(&script()).await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle(
        "guarded",
        &calc("guarded", "    approval: {always: true}\n"),
    );
    let daemon = site.start();
    let http = client();
    let id = id_of(&submit(&http, &daemon, "guarded", "add 2 and 3").await);
    assert_eq!(
        wait_settled(&http, &daemon, &id).await["state"],
        "awaiting_approval"
    );
    (mock, site, daemon, id)
}

/// Enter on the focused action, whose confirmation opens on its safe
/// answer; Tab to Confirm, and Enter.
async fn confirm_with_the_keyboard(browser: &Browser) {
    press(browser, Key::Enter).await;
    browser.wait_for("dialog[open]").await;
    press(browser, Key::Tab).await;
    browser
        .wait_until("document.activeElement.dataset.action === 'confirm'")
        .await;
    press(browser, Key::Enter).await;
}

/// Presses Tab until `here` (a script's condition) holds, naming `what`
/// when 60 Tabs do not reach it.
async fn tab_until(browser: &Browser, here: &str, what: &str) {
    for _ in 0..60 {
        if browser.eval_text(&format!("String({here})")).await == "true" {
            return;
        }
        press(browser, Key::Tab).await;
    }
    panic!(
        "60 Tabs did not reach {what}; the focus is on {}",
        focused(browser).await
    );
}

/// A link that changes the view (no page load) gives the focus to the new
/// view, as a page load would put a reader at its start; so does Back.
/// (A filter that redraws the list in place keeps its field's focus:
/// `console_views`.)
async fn a_link_gives_the_focus_to_the_view_it_draws(browser: &Browser, daemon: &Daemon, id: &str) {
    browser.goto(&daemon.url("/ui/jobs")).await;
    wait_title(browser, "Jobs · structured-agents").await;
    let link = format!("#jobs tr[data-job='{id}'] td a");
    browser.wait_for(&link).await;
    browser
        .eval_text(&format!("(document.querySelector(\"{link}\").focus(), '')"))
        .await;
    press(browser, Key::Enter).await;
    let short = &id[id.len() - 8..];
    wait_title(browser, &format!("Job …{short} · structured-agents")).await;
    assert_eq!(focused(browser).await, "view", "after the link to the job");
    browser.eval_text("(history.back(), '')").await;
    wait_title(browser, "Jobs · structured-agents").await;
    assert_eq!(focused(browser).await, "view", "after Back");
}
