//! The console at scale, in a real browser against the real daemon (issue
//! 51 item 6): the jobs list refreshes by asking only for the jobs changed
//! since (500 unchanged jobs cost a small answer per refresh, a bound
//! stated below, and a changed job's row follows); the daemon sorts and
//! filters (oldest first across more jobs than a page, by the key that
//! submitted them, by creation time, "ended in an error"); the list is one
//! aligned table a phone reads without scrolling sideways; rows are selected
//! for a bulk cancel with a count and a confirmation, which a key without
//! the scope sees disabled with the reason; and the bundles page is an
//! overview — problems first, a bounded height per bundle, details on
//! demand.

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
use common::daemon::{Daemon, Site, client, client_as, get, new_key, post_json, wait_terminal};
use common::mock_server;
use serde_json::{Value, json};
use std::time::Duration;
use structured_agents::mock::MockServer;

/// Every job that runs fails at once (`dead` after its one attempt).
const SCRIPT: &str = r#"
replies:
  - {match: "break", status: 500, error: "the upstream model broke"}
  - {content: "done"}
"#;

fn bundle(name: &str) -> String {
    format!(
        r#"name: {name}
version: "1"
description: Answers once, for the console's scale tests.
model: {{endpoint: mock, name: m, plugin: openai}}
prompts: {{user: "{{{{ input }}}}"}}
"#
    )
}

/// A start far ahead: a job submitted with it waits, unchanged.
const LATER: &str = "2099-01-01T00:00:00Z";

/// The most a refresh of an unchanged jobs list may move, every `/v1/jobs…`
/// answer of it with its headers (counts, parked jobs, the changes): the
/// list the page held before moved every shown row again, about 400 KB
/// for these 500 rows.
const REFRESH_BOUND: u64 = 8 * 1024;

/// At most this many CSS pixels of the bundles page per bundle.
const PX_PER_BUNDLE: u64 = 100;

/// Queues `n` jobs of `bundle` that wait (start [`LATER`]) in one batch;
/// the jobs, oldest first.
async fn waiting_jobs(http: &reqwest::Client, daemon: &Daemon, n: usize) -> Vec<Value> {
    let jobs: Vec<Value> = (0..n)
        .map(|i| json!({"bundle": "calc", "input": format!("job {i}"), "run_at": LATER}))
        .collect();
    let (status, answer) = post_json(http, daemon, "/v1/jobs/batch", json!({ "jobs": jobs })).await;
    assert_eq!(status, 201, "{answer}");
    answer["jobs"].as_array().unwrap().clone()
}

fn id_of(job: &Value) -> String {
    job["id"].as_str().unwrap().to_string()
}

/// A job's last update, in ms since the epoch.
fn updated_ms(job: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(job["updated_at"].as_str().unwrap())
        .unwrap()
        .timestamp_millis()
}

async fn rows(browser: &Browser, css: &str) -> usize {
    browser
        .client
        .find_all(fantoccini::Locator::Css(css))
        .await
        .unwrap()
        .len()
}

async fn wait_rows(browser: &Browser, css: &str, n: usize) {
    browser
        .wait_until(&format!(
            "document.querySelectorAll({css:?}).length === {n}"
        ))
        .await;
}

/// Clicks `css` once it is scrolled to the middle of the window, clear of
/// the sticky header and the action bar at the window's foot.
async fn click_centred(browser: &Browser, css: &str) {
    browser.wait_for(css).await;
    browser
        .client
        .execute(
            "document.querySelector(arguments[0]).scrollIntoView({block: 'center'})",
            vec![Value::String(css.into())],
        )
        .await
        .unwrap();
    browser.click(css).await;
}

/// Clicks "Show more" until the list shows `n` jobs (50 a click).
async fn show_all(browser: &Browser, n: usize) {
    for shown in (50..=n).step_by(50) {
        wait_rows(browser, "#jobs tr[data-job]", shown).await;
        if shown < n {
            browser.click("#show-more").await;
        }
    }
}

/// The `/v1/jobs` requests of the jobs feed the page made since its
/// resource timings were last cleared, as `[updated_since, bytes]`, and the
/// bytes of every `/v1/jobs…` answer.
async fn feed_traffic(browser: &Browser) -> (Vec<(i64, u64)>, u64) {
    let answer = browser
        .client
        .execute(
            "const all = performance.getEntriesByType('resource')
               .map((e) => [new URL(e.name), e.transferSize])
               .filter(([u]) => u.pathname.startsWith('/v1/jobs'));
             return [
               all.filter(([u]) => u.searchParams.has('updated_since'))
                  .map(([u, bytes]) => [Number(u.searchParams.get('updated_since')), bytes]),
               all.reduce((sum, [, bytes]) => sum + bytes, 0),
             ];",
            vec![],
        )
        .await
        .unwrap();
    serde_json::from_value(answer).unwrap()
}

/// 500 waiting jobs shown: once the page's feed asks for the changes since
/// after the jobs' last update, each refresh moves at most
/// [`REFRESH_BOUND`]; a job cancelled meanwhile shows cancelled in its
/// row, and a new job comes in at the top, with nothing read twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_list_costs_a_small_answer_per_refresh_and_a_change_shows() {
    let mock = mock_server(SCRIPT).await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle("calc", &bundle("calc"));
    let daemon = site.start();
    let http = client();
    let jobs = waiting_jobs(&http, &daemon, 500).await;
    let newest = jobs.iter().map(updated_ms).max().unwrap();

    let browser = Browser::start(1440, 900, false).await;
    browser.goto(&daemon.url("/ui/jobs")).await;
    browser
        .client
        .execute("performance.setResourceTimingBufferSize(100000)", vec![])
        .await
        .unwrap();
    show_all(&browser, 500).await;
    let full = browser
        .eval_text("performance.getEntriesByType('resource').filter((e) => e.name.includes('limit=500')).map((e) => e.transferSize).pop()")
        .await;
    let full: u64 = full.parse().unwrap();
    assert!(full > 100_000, "the whole list is {full} bytes");

    // Once the feed asks from after the jobs' last update, a refresh
    // moves only a small answer.
    browser
        .wait_until(&format!(
            "performance.getEntriesByType('resource').some((e) => Number(new URL(e.name).searchParams.get('updated_since')) > {newest})"
        ))
        .await;
    browser
        .client
        .execute("performance.clearResourceTimings()", vec![])
        .await
        .unwrap();
    browser
        .wait_until("performance.getEntriesByType('resource').filter((e) => e.name.includes('updated_since')).length >= 3")
        .await;
    // The requests of the refresh still under way are counted in bytes but
    // not as a refresh: the bound holds for fewer refreshes than counted.
    let (feed, bytes) = feed_traffic(&browser).await;
    let refreshes = feed.len() as u64;
    assert!(
        feed.iter().all(|&(_, b)| b > 0),
        "every answer has its size: {feed:?}"
    );
    assert!(
        bytes <= REFRESH_BOUND * refreshes,
        "{refreshes} refreshes of 500 unchanged jobs moved {bytes} bytes (at most {REFRESH_BOUND} each; the whole list is {full})"
    );
    assert_eq!(rows(&browser, "#jobs tr[data-job]").await, 500);

    // A change: its row follows; a new job comes first; none twice.
    let cancelled = id_of(&jobs[250]);
    let (status, answer) = post_json(
        &http,
        &daemon,
        &format!("/v1/jobs/{cancelled}/cancel"),
        json!({}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    browser
        .wait_for(&format!(
            "#jobs tr[data-job='{cancelled}'][data-state='cancelled']"
        ))
        .await;
    let fresh = id_of(&waiting_jobs(&http, &daemon, 1).await[0]);
    browser
        .wait_until(&format!(
            "document.querySelector('#jobs tr[data-job]').dataset.job === {fresh:?}"
        ))
        .await;
    assert_eq!(rows(&browser, "#jobs tr[data-job]").await, 501);
    browser.close().await;
}

/// A daemon with `ops` (admin), `auditor` (read_all) and `bo` (submit,
/// read: its own jobs only), and the bundle `calc`.
async fn site_with_keys() -> (MockServer, Site, Daemon, [String; 3]) {
    let mock = mock_server(SCRIPT).await;
    let site = Site::new(&mock.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    let file = site.path().join("keys.toml");
    let tokens = [
        new_key(&file, "ops", &["--scopes", "admin"]),
        new_key(&file, "auditor", &["--scopes", "read_all"]),
        new_key(&file, "bo", &["--scopes", "submit,read"]),
    ];
    site.put_bundle("calc", &bundle("calc"));
    let daemon = site.start();
    (mock, site, daemon, tokens)
}

fn first_id(jobs: &[Value]) -> String {
    id_of(&jobs[0])
}

fn ids(page: &Value) -> Vec<String> {
    page["jobs"].as_array().unwrap().iter().map(id_of).collect()
}

/// `GET /v1/jobs`'s filters as `ops` (admin) and `bo` (its own jobs) see
/// them: `theirs` are ops' waiting jobs, `own` bo's (each oldest first),
/// `broken` ops' job that ended in an error.
async fn the_api_filters(
    daemon: &Daemon,
    [as_ops, as_bo]: [&reqwest::Client; 2],
    theirs: &[Value],
    own: &[Value],
    broken: &str,
) {
    let list = |http: &reqwest::Client, query: &str| {
        let http = http.clone();
        let path = format!("/v1/jobs?{query}");
        async move { get(&http, daemon, &path).await }
    };
    let own_ids: Vec<String> = own.iter().rev().map(id_of).collect();
    assert_eq!(ids(&list(as_ops, "owner=bo").await), own_ids);
    assert_eq!(ids(&list(as_bo, "owner=bo").await), own_ids);
    assert_eq!(ids(&list(as_bo, "owner=ops").await), Vec::<String>::new());
    assert_eq!(ids(&list(as_bo, "").await), own_ids);
    assert_eq!(ids(&list(as_ops, "error=true").await), [broken.to_string()]);
    let from = own[0]["created_at"].as_str().unwrap();
    let page = list(as_ops, &format!("created_from={from}&order=created_asc")).await;
    let since: Vec<String> = ids(&page);
    assert!(
        since.contains(&id_of(&own[0]))
            && since.contains(&broken.to_string())
            && !since.contains(&first_id(theirs)),
        "{page}"
    );
    for job in page["jobs"].as_array().unwrap() {
        assert!(job["created_at"].as_str().unwrap() >= from, "{job}");
    }
    let before = list(
        as_ops,
        &format!("created_to={from}&order=created_asc&limit=2"),
    )
    .await;
    assert_eq!(ids(&before), [id_of(&theirs[0]), id_of(&theirs[1])]);
}

/// The daemon filters and sorts: by owner (a key that reads only its own
/// jobs gets none of another key's), by creation time, "ended in an
/// error", oldest first across more jobs than a page; and the page shows
/// it so, as one table that fits a phone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_filters_and_sorts_the_jobs_list() {
    let (_mock, _site, daemon, [ops, _auditor, bo]) = site_with_keys().await;
    let as_ops = client_as(&ops);
    let as_bo = client_as(&bo);
    let theirs = waiting_jobs(&as_ops, &daemon, 60).await;
    let own = waiting_jobs(&as_bo, &daemon, 2).await;
    let (status, broken) = post_json(
        &as_ops,
        &daemon,
        "/v1/jobs",
        json!({"bundle": "calc", "input": "break it", "max_attempts": 1}),
    )
    .await;
    assert_eq!(status, 201, "{broken}");
    let broken = id_of(&broken);
    let ended = wait_terminal(&as_ops, &daemon, &broken, Duration::from_secs(60)).await;
    assert!(
        ["failed", "dead"].contains(&ended["state"].as_str().unwrap()),
        "{ended}"
    );

    let own_ids: Vec<String> = own.iter().rev().map(id_of).collect();
    the_api_filters(&daemon, [&as_ops, &as_bo], &theirs, &own, &broken).await;

    let browser = Browser::start(390, 844, false).await;
    browser.goto(&daemon.url("/ui/jobs")).await;
    browser.type_into("#token", &ops).await;
    browser.click("form button[type=submit]").await;
    browser.wait_text("#signed-in", "ops").await;
    wait_rows(&browser, "#jobs tr[data-job]", 50).await;
    // Oldest first is the daemon's: the first of 63 jobs, not of the 50 shown.
    browser
        .wait_for("#sort-jobs")
        .await
        .select_by_value("created_asc")
        .await
        .unwrap();
    let first = id_of(&theirs[0]);
    browser
        .wait_until(&format!(
            "document.querySelector('#jobs tr[data-job]').dataset.job === {first:?}"
        ))
        .await;
    assert!(
        browser
            .eval_text("location.search")
            .await
            .contains("order=created_asc")
    );
    audit(&browser, "jobs-table-phone").await;
    let aligned = browser
        .eval_text("[...document.querySelectorAll('table.jobs tr')].map((r) => r.cells[1] && Math.round(r.cells[1].getBoundingClientRect().left)).filter((x) => x).every((x, _, all) => x === all[0])")
        .await;
    assert_eq!(aligned, "true", "the state column lines up on a phone");

    // Errors only; then by owner.
    browser.goto(&daemon.url("/ui/jobs?error=true")).await;
    wait_rows(&browser, "#jobs tr[data-job]", 1).await;
    browser
        .wait_for(&format!("#jobs tr[data-job='{broken}']"))
        .await;
    browser.goto(&daemon.url("/ui/jobs")).await;
    browser.type_into("#filter-owner", "bo\n").await;
    wait_rows(&browser, "#jobs tr[data-job]", 2).await;
    for id in &own_ids {
        browser
            .wait_for(&format!("#jobs tr[data-job='{id}']"))
            .await;
    }
    // A time range: created before 2000, none; created since, all again.
    browser
        .goto(&daemon.url("/ui/jobs?to=2000-01-01T00:00:00Z"))
        .await;
    browser
        .wait_text("#jobs", "No job matches these filters.")
        .await;
    // The field shows the range applied, in the browser's own zone.
    assert_eq!(
        browser
            .eval_text("new Date(document.getElementById('filter-to').value).toISOString()")
            .await,
        "2000-01-01T00:00:00.000Z"
    );
    browser
        .goto(&daemon.url("/ui/jobs?from=2000-01-01T00:00:00Z&owner=bo"))
        .await;
    wait_rows(&browser, "#jobs tr[data-job]", 2).await;
    browser.close().await;
}

/// Select 12 jobs, cancel them in bulk: the count, the confirmation, 12
/// rows cancelled, the others untouched. A `read_all` key sees the bulk
/// cancel disabled with the scope it needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selected_jobs_are_cancelled_in_bulk() {
    let (_mock, _site, daemon, [ops, auditor, _bo]) = site_with_keys().await;
    let as_ops = client_as(&ops);
    let jobs = waiting_jobs(&as_ops, &daemon, 20).await;

    let browser = Browser::start(1440, 900, false).await;
    browser.goto(&daemon.url("/ui/jobs")).await;
    browser.type_into("#token", &ops).await;
    browser.click("form button[type=submit]").await;
    browser.wait_text("#signed-in", "ops").await;
    wait_rows(&browser, "#jobs tr[data-job]", 20).await;
    let picked: Vec<String> = jobs[..12].iter().map(id_of).collect();
    for id in &picked {
        click_centred(&browser, &format!("#jobs tr[data-job='{id}'] input.pick")).await;
    }
    browser.wait_text("#bulk-count", "12 jobs selected").await;
    browser.wait_text("#bulk-cancel", "Cancel (12)").await;
    audit(&browser, "jobs-bulk-bar-1440-light").await;
    browser.click("#bulk-cancel").await;
    browser
        .wait_text("dialog[open] h2", "Cancel 12 jobs?")
        .await;
    audit(&browser, "jobs-bulk-dialog-1440-light").await;
    browser.confirm().await;
    browser
        .wait_text("#bulk-outcome", "12 jobs cancelled")
        .await;
    for id in &picked {
        browser
            .wait_for(&format!(
                "#jobs tr[data-job='{id}'][data-state='cancelled']"
            ))
            .await;
    }
    let listed = get(&as_ops, &daemon, "/v1/jobs?state=queued&limit=100").await;
    assert_eq!(ids(&listed).len(), 8, "{listed}");
    // Select all shown: 20 boxes, and "Run again" counts every one.
    click_centred(&browser, "#pick-all").await;
    browser.wait_text("#bulk-count", "20 jobs selected").await;
    browser.wait_text("#bulk-cancel", "Cancel (8)").await;
    browser.wait_text("#bulk-rerun", "Run again (20)").await;
    // Run again: one new job per selected job, after a confirmation.
    browser.click("#bulk-rerun").await;
    browser
        .wait_text("dialog[open] h2", "Run again 20 jobs?")
        .await;
    browser.confirm().await;
    browser
        .wait_text("#bulk-outcome", "20 jobs queued again as new jobs")
        .await;
    let listed = get(&as_ops, &daemon, "/v1/jobs?limit=100").await;
    assert_eq!(
        ids(&listed).len(),
        40,
        "20 jobs and their 20 reruns: {listed}"
    );
    browser.close().await;

    let browser = Browser::start(1440, 900, false).await;
    browser.goto(&daemon.url("/ui/jobs")).await;
    browser.type_into("#token", &auditor).await;
    browser.click("form button[type=submit]").await;
    browser.wait_text("#signed-in", "auditor").await;
    wait_rows(&browser, "#jobs tr[data-job]", 40).await;
    click_centred(&browser, "#pick-all").await;
    let cancel = browser.wait_for("#bulk-cancel").await;
    assert!(!cancel.is_enabled().await.unwrap());
    assert_eq!(
        cancel.attr("data-needs").await.unwrap().as_deref(),
        Some("operate")
    );
    browser.wait_text("#bulk .why-not", "needs the").await;
    browser.close().await;

    // The bar and its confirmation pass axe on a phone in the dark too.
    let browser = Browser::start(390, 844, true).await;
    browser.goto(&daemon.url("/ui/jobs")).await;
    browser.type_into("#token", &ops).await;
    browser.click("form button[type=submit]").await;
    browser.wait_text("#signed-in", "ops").await;
    wait_rows(&browser, "#jobs tr[data-job]", 40).await;
    click_centred(&browser, "#pick-all").await;
    browser.wait_text("#bulk-rerun", "Run again (40)").await;
    audit(&browser, "jobs-bulk-bar-390-dark").await;
    browser.click("#bulk-rerun").await;
    browser
        .wait_text("dialog[open] h2", "Run again 40 jobs?")
        .await;
    audit(&browser, "jobs-bulk-dialog-390-dark").await;
    browser.close().await;
}

/// 23 bundles, one degraded by a broken edit: the degraded one is listed
/// first though its name sorts last, the page is at most
/// [`PX_PER_BUNDLE`] tall per bundle with every panel folded, and a
/// bundle's details (its migrate and verify panels) open on demand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bundles_page_is_an_overview_with_problems_first() {
    let mock = mock_server(SCRIPT).await;
    let site = Site::new(&mock.base_url(), "");
    let names: Vec<String> = (0..22)
        .map(|i| format!("b{i:02}"))
        .chain(["zz-broken".to_string()])
        .collect();
    for name in &names {
        site.put_bundle(name, &bundle(name));
    }
    let daemon = site.start();
    let http = client();
    site.put_bundle("zz-broken", "name: zz-broken\nversion: [\n");
    let (status, report) = post_json(&http, &daemon, "/v1/reload", json!({})).await;
    assert!(status == 200 || status == 422, "{status}: {report}");
    let listed = get(&http, &daemon, "/v1/bundles").await;
    assert!(listed.to_string().contains("degraded"), "{listed}");

    let browser = Browser::start(1440, 900, false).await;
    browser.goto(&daemon.url("/ui/bundles")).await;
    wait_rows(&browser, "#bundles section.bundle", 23).await;
    let first = browser
        .eval_text("document.querySelector('#bundles section.bundle').dataset.bundle")
        .await;
    assert_eq!(first, "zz-broken");
    browser
        .wait_text("[data-bundle=zz-broken]", "keeps serving")
        .await;
    let height: u64 = browser
        .eval_text("Math.ceil(document.getElementById('bundles').getBoundingClientRect().height)")
        .await
        .parse()
        .unwrap();
    assert!(
        height <= PX_PER_BUNDLE * 23,
        "23 bundles take {height} px (at most {PX_PER_BUNDLE} each)"
    );
    let check = browser
        .wait_for("[data-bundle=b05] button.migrate-check")
        .await;
    assert!(!check.is_displayed().await.unwrap(), "details are folded");
    browser
        .click("[data-bundle=b05] details.bundle-more > summary")
        .await;
    browser
        .wait_until("document.querySelector('[data-bundle=b05] button.migrate-check').offsetParent !== null")
        .await;
    // The page writes the open bundle into its URL as the fold opens,
    // which may come a frame after the details show.
    browser
        .wait_until("location.search.includes('open=b05')")
        .await;
    audit(&browser, "bundles-overview").await;
    browser.close().await;

    let phone = Browser::start(390, 844, false).await;
    phone.goto(&daemon.url("/ui/bundles?open=b05")).await;
    phone
        .wait_until("document.querySelector('[data-bundle=b05] button.migrate-check').offsetParent !== null")
        .await;
    audit(&phone, "bundles-overview-phone").await;
    phone.close().await;
    // In the dark too, wide and narrow.
    for (width, height, tag) in [(1440, 900, "1440-dark"), (390, 844, "390-dark")] {
        let browser = Browser::start(width, height, true).await;
        browser.goto(&daemon.url("/ui/bundles?open=b05")).await;
        browser
            .wait_until("document.querySelector('[data-bundle=b05] button.migrate-check').offsetParent !== null")
            .await;
        audit(&browser, &format!("bundles-overview-{tag}")).await;
        browser.close().await;
    }
}
