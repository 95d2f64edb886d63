//! The console knows its key, in a real browser against the real daemon
//! with keys made by `structured-agents keys new`: it says who is signed in
//! (`GET /v1/whoami`, the policy's own answers); a `read_all` key sees
//! another key's job parked for approval with no Approve, and Cancel, Run
//! again, Reload, Verify and Check disabled, each with the scopes it needs,
//! and the views it may not use say so; a `read` key reads every view it
//! may; neither ever meets a 403 (every answer the page got is recorded).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

#[allow(dead_code)] // this test drives a few of the browser's methods
#[path = "console/browser.rs"]
mod browser;
#[allow(dead_code)] // and runs only some of the checks
#[path = "console/checks.rs"]
mod checks;
mod common;

use browser::Browser;
use checks::audit;
use common::daemon::{Daemon, Site, client_as, get, new_key, submit, wait_settled};
use common::mock_server;
use serde_json::Value;
use structured_agents::mock::MockServer;

const SCRIPT: &str = r#"
replies:
  - turn: 1
    content: "Adding them."
    tool_calls:
      - {id: call_add, name: add, arguments: {a: 2, b: 3}}
  - {turn: 2, content: "2 + 3 = 5."}
"#;

/// A bundle whose one tool always asks a person first.
const GUARDED: &str = r#"name: guarded
version: "1"
model: {endpoint: mock, name: m, plugin: openai}
prompts: {user: "{{ input }}"}
tools:
  - name: add
    kind: process
    effect: read_only
    approval: {always: true}
    parameters:
      type: object
      properties: {a: {type: number}, b: {type: number}}
      required: [a, b]
    command: [python3, -c, "import json,sys; a=json.load(sys.stdin); print(json.dumps({'sum': a['a'] + a['b']}))"]
"#;

pub struct Keys {
    pub admin: String,
    pub auditor: String,
    pub viewer: String,
}

/// A daemon with three keys: `ops` (admin), `auditor` (read_all) and
/// `viewer` (read).
pub async fn site_with_keys() -> (MockServer, Site, Daemon, Keys) {
    let mock = mock_server(SCRIPT).await;
    let site = Site::new(&mock.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    let file = site.path().join("keys.toml");
    let keys = Keys {
        admin: new_key(&file, "ops", &["--scopes", "admin"]),
        auditor: new_key(&file, "auditor", &["--scopes", "read_all"]),
        viewer: new_key(&file, "viewer", &["--scopes", "read"]),
    };
    site.put_bundle("guarded", GUARDED);
    let daemon = site.start();
    (mock, site, daemon, keys)
}

/// Gives the console `token` at its prompt, and waits for who it is.
async fn sign_in(browser: &Browser, token: &str, who: &str) {
    browser.type_into("#token", token).await;
    browser.click("form button[type=submit]").await;
    browser.wait_text("#signed-in", who).await;
}

/// Records the status of every request the page makes from now on (the
/// views change without a reload, so the record stays).
async fn record_answers(browser: &Browser) {
    browser
        .client
        .execute(
            "window.answers = [];
             const fetched = window.fetch;
             window.fetch = async (...args) => {
               const response = await fetched(...args);
               window.answers.push(response.status + ' ' + String(args[0]));
               return response;
             };",
            vec![],
        )
        .await
        .unwrap();
}

/// Every answer recorded that was a refusal (4xx).
async fn refusals(browser: &Browser) -> Vec<String> {
    let answers = browser
        .client
        .execute("return window.answers || []", vec![])
        .await
        .unwrap();
    let all: Vec<String> = serde_json::from_value(answers).unwrap();
    assert!(!all.is_empty(), "no answer was recorded");
    all.into_iter().filter(|a| a.starts_with('4')).collect()
}

/// Goes to a console view as its links do (no reload: the record stays).
async fn open(browser: &Browser, path: &str) {
    browser
        .client
        .execute(
            "history.pushState(null, '', arguments[0]); window.dispatchEvent(new PopStateEvent('popstate'));",
            vec![Value::String(path.into())],
        )
        .await
        .unwrap();
}

async fn is_hidden(browser: &Browser, css: &str) -> bool {
    let element = browser.wait_for(css).await;
    !element.is_displayed().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whoami_answers_the_key_and_the_policys_grants() {
    let (_mock, _site, daemon, keys) = site_with_keys().await;
    let me = get(&client_as(&keys.auditor), &daemon, "/v1/whoami").await;
    assert_eq!(me["name"], "auditor", "{me:#}");
    assert_eq!(me["scopes"], serde_json::json!(["read_all"]));
    assert_eq!(me["open"], false);
    let cancel = &me["actions"]["cancel_job"];
    assert_eq!(cancel["own"], false, "{cancel}");
    assert_eq!(cancel["own_needs"], serde_json::json!(["operate"]));
    assert_eq!(cancel["others_needs"], serde_json::json!(["operate_all"]));
    assert_eq!(me["actions"]["read_job"]["others"], true);
    let admin = get(&client_as(&keys.admin), &daemon, "/v1/whoami").await;
    let every = admin["actions"].as_object().unwrap();
    assert!(
        every
            .values()
            .all(|g| g["own"] == true && g["others"] == true)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reading_key_is_offered_only_what_it_may_do_and_meets_no_403() {
    let (_mock, _site, daemon, keys) = site_with_keys().await;
    let ops = client_as(&keys.admin);
    let parked = submit(&ops, &daemon, "guarded", "add 2 and 3").await;
    let id = parked["id"].as_str().unwrap().to_string();
    let job = wait_settled(&ops, &daemon, &id).await;
    assert_eq!(job["state"], "awaiting_approval", "{job}");

    let browser = Browser::start(1280, 900, false).await;
    browser.goto(&daemon.url("/ui/jobs")).await;
    sign_in(&browser, &keys.auditor, "signed in as auditor (read_all)").await;
    record_answers(&browser).await;
    assert!(is_hidden(&browser, "a[data-nav=submit]").await);
    assert!(is_hidden(&browser, "a[data-nav=deliveries]").await);
    assert!(
        is_hidden(&browser, "a[data-nav=keys]").await,
        "only an admin is offered the keys"
    );

    // Another key's job parked for approval: the call, and why no decision.
    browser.click(&format!("tr[data-job='{id}'] a")).await;
    browser
        .wait_text(
            "#approvals .why-not",
            "it is key ops's job: needs the operate_all and approve scopes",
        )
        .await;
    assert_no(&browser, "#approvals button.approve").await;
    browser
        .wait_text(
            "#actions .gated",
            "it is key ops's job: needs the operate_all scope",
        )
        .await;
    let cancel = browser.wait_for("#cancel-job").await;
    assert!(!cancel.is_enabled().await.unwrap(), "Cancel is offered");
    browser
        .wait_text("#actions .gated", "needs the submit scope")
        .await;
    audit(&browser, "keys-read-all-job").await;

    open(&browser, "/ui/bundles?open=guarded").await;
    let reload = browser.wait_for("#reload").await;
    browser
        .wait_text(".title-row .gated", "needs the operate scope")
        .await;
    assert!(!reload.is_enabled().await.unwrap(), "Reload is offered");
    for button in ["button.verify-run", "button.migrate-check"] {
        let found = browser
            .wait_for(&format!("[data-bundle=guarded] {button}"))
            .await;
        assert!(!found.is_enabled().await.unwrap(), "{button} is offered");
    }
    audit(&browser, "keys-read-all-bundles").await;

    open(&browser, "/ui/approvals").await;
    browser
        .wait_text(&format!(".inbox-item[data-job='{id}'] .why-not"), "needs")
        .await;
    assert_no(&browser, ".inbox-item button.approve").await;
    open(&browser, "/ui/deliveries").await;
    browser
        .wait_text("main .why-not", "needs the operate scope")
        .await;
    open(&browser, "/ui/submit").await;
    browser
        .wait_text("main .why-not", "needs the submit scope")
        .await;
    assert_eq!(refusals(&browser).await, Vec::<String>::new());

    // A key that reads only its own: every view it may read, no refusal.
    browser.click("#auth button").await;
    sign_in(&browser, &keys.viewer, "signed in as viewer (read)").await;
    record_answers(&browser).await;
    for (path, shown) in [
        ("/ui/jobs", "main"),
        ("/ui/approvals", "#inbox-status"),
        ("/ui/bundles", "[data-bundle=guarded]"),
        ("/ui/schedules", "#schedules-status"),
    ] {
        open(&browser, path).await;
        browser.wait_for(shown).await;
    }
    browser.wait_text("#schedules-status", "No schedules").await;
    assert_eq!(refusals(&browser).await, Vec::<String>::new());
    browser.close().await;
}

/// No element matches `css` (after the page drew what waits were for).
async fn assert_no(browser: &Browser, css: &str) {
    let found = browser
        .client
        .find_all(fantoccini::Locator::Css(css))
        .await
        .unwrap();
    assert!(found.is_empty(), "{css} is on the page");
}

/// An admin makes a key on the keys page, with every limit `keys new`
/// takes (priority, share, daily spend, webhook): its token is shown once (never
/// stored, gone when the page is drawn again) and works at once; revoked
/// from the page, it is refused at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_makes_a_key_sees_its_token_once_and_revokes_it() {
    let (_mock, site, daemon, keys) = site_with_keys().await;
    let browser = Browser::start(1280, 900, false).await;
    browser.goto(&daemon.url("/ui/jobs")).await;
    sign_in(&browser, &keys.admin, "signed in as ops (admin)").await;
    browser.click("a[data-nav=keys]").await;
    browser.wait_for("#keys tr[data-key=auditor]").await;
    audit(&browser, "keys-page").await;

    browser.type_into("#key-name", "robot").await;
    browser.click("#key-scope-read").await;
    browser.type_into("#key-bundles", "guard*").await;
    browser.type_into("#key-max-priority", "5").await;
    browser.type_into("#key-weight", "3").await;
    browser.type_into("#key-day-tokens", "1000").await;
    browser.type_into("#key-day-cost", "2.5").await;
    browser
        .type_into("#key-webhook", "https://ops.example/hooks/robot")
        .await;
    browser.click("#make-key").await;
    let asked = browser
        .wait_text("dialog[open]", "A key named robot with read")
        .await;
    assert!(
        asked.contains("priority ≤ 5") && asked.contains("weight 3") && asked.contains("$2.5/day"),
        "{asked}"
    );
    browser.confirm().await;
    let token = browser
        .wait_text("#new-token", "sa_")
        .await
        .trim()
        .to_string();
    browser.wait_for("#keys tr[data-key=robot]").await;
    audit(&browser, "keys-token-shown").await;
    let file = std::fs::read_to_string(site.path().join("keys.toml")).unwrap();
    assert!(file.contains("name = \"robot\"") && !file.contains(&token));
    let robot = get(&client_as(&token), &daemon, "/v1/whoami").await;
    assert_eq!(robot["name"], "robot", "the new key works at once: {robot}");
    assert_eq!(robot["bundles"], serde_json::json!(["guard*"]));
    let listed = get(&client_as(&keys.admin), &daemon, "/v1/keys").await;
    let made = listed["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "robot")
        .unwrap();
    assert_eq!(made["max_priority"], 5, "{made}");
    assert_eq!(made["weight"], 3, "{made}");
    assert_eq!(
        made["per_day"],
        serde_json::json!({"tokens": 1000, "cost": 2.5}),
        "{made}"
    );
    assert_eq!(made["webhook"], "https://ops.example/hooks/robot", "{made}");

    // Drawn again, the page has no token to show.
    open(&browser, "/ui/jobs").await;
    open(&browser, "/ui/keys").await;
    browser.wait_for("#keys tr[data-key=robot]").await;
    assert_no(&browser, "#new-token").await;

    browser
        .click("#keys tr[data-key=robot] button.revoke")
        .await;
    browser
        .wait_text("dialog[open]", "are refused from now on")
        .await;
    browser.confirm().await;
    browser.wait_text("#keys-outcome", "Revoked robot").await;
    assert_no(&browser, "#keys tr[data-key=robot]").await;
    let refused = client_as(&token)
        .get(daemon.url("/v1/whoami"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        refused.status().as_u16(),
        401,
        "the revoked key is refused at once"
    );
    browser.close().await;
}

/// From the schedules page: a schedule is made with a priority and a
/// catch-up (its next fires shown in
/// its time zone and how far off they are), paused, resumed, edited and
/// run now, each as the API then has it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_is_made_paused_resumed_edited_and_run_from_the_page() {
    let (_mock, _site, daemon, keys) = site_with_keys().await;
    let ops = client_as(&keys.admin);
    let browser = Browser::start(1280, 900, false).await;
    browser.goto(&daemon.url("/ui/schedules")).await;
    sign_in(&browser, &keys.admin, "signed in as ops (admin)").await;
    browser.click("#new-schedule").await;
    browser
        .wait_for("#schedule-bundle option[value=guarded]")
        .await;
    browser.type_into("#schedule-id", "yearly").await;
    browser.type_into("#schedule-cron", "0 0 1 1 *").await;
    browser.type_into("#schedule-timezone", "Asia/Tokyo").await;
    browser.type_into("#schedule-input", "add 2 and 3").await;
    browser.type_into("#schedule-priority", "7").await;
    browser.type_into("#schedule-catch-up", "3").await;
    browser.click("#schedule-save").await;
    browser.confirm().await;
    let row = "#schedules tr[data-schedule=yearly]";
    let fires = browser
        .wait_text(&format!("{row} .next-fires"), "Asia/Tokyo (in ")
        .await;
    assert_eq!(fires.matches("Asia/Tokyo").count(), 3, "{fires}");
    let made = get(&ops, &daemon, "/v1/schedules/yearly").await;
    assert_eq!(made["spec"]["timezone"], "Asia/Tokyo", "{made}");
    assert_eq!(made["spec"]["priority"], 7, "{made}");
    assert_eq!(made["spec"]["max_catch_up"], 3, "{made}");
    assert_eq!(made["owner"], "ops");
    audit(&browser, "schedules").await;

    browser.click(&format!("{row} button.pause")).await;
    browser.confirm().await;
    browser
        .wait_for("#schedules tr[data-schedule=yearly][data-paused=true]")
        .await;
    assert_eq!(
        get(&ops, &daemon, "/v1/schedules/yearly").await["paused"],
        true
    );
    browser.click(&format!("{row} button.resume")).await;
    browser.confirm().await;
    browser
        .wait_for("#schedules tr[data-schedule=yearly][data-paused=false]")
        .await;
    assert_eq!(
        get(&ops, &daemon, "/v1/schedules/yearly").await["paused"],
        false
    );

    browser.click(&format!("{row} button.edit")).await;
    browser.type_into("#schedule-cron", "30 6 * * 1").await;
    browser.click("#schedule-save").await;
    browser.confirm().await;
    browser.wait_text(row, "30 6 * * 1").await;
    let edited = get(&ops, &daemon, "/v1/schedules/yearly").await;
    assert_eq!(edited["spec"]["cron"], "30 6 * * 1", "{edited}");
    assert_eq!(
        edited["spec"]["input"], "add 2 and 3",
        "the edit keeps the input"
    );
    assert_eq!(
        (&edited["spec"]["priority"], &edited["spec"]["max_catch_up"]),
        (&serde_json::json!(7), &serde_json::json!(3)),
        "the edit keeps the priority and the catch-up"
    );

    browser.click(&format!("{row} button.run-now")).await;
    browser.confirm().await;
    let job = browser.wait_text("#schedules-outcome .run-job", "-").await;
    let job = get(&ops, &daemon, &format!("/v1/jobs/{}", job.trim())).await;
    assert_eq!(job["input"], "add 2 and 3", "{job}");
    assert_eq!(job["owner"], "ops", "{job}");
    browser.close().await;
}
