//! A bundle broken while its daemon was down serves its last good version
//! after the restart, degraded, instead of vanishing (issue 51 item 3): the
//! daemon records which version each directory last served well
//! (`<state_dir>/last-good-bundles.json`) and serves it again from its store
//! copy, as a broken edit does on a reload. Without a record (a bundle never
//! good here) it is invalid, as before. The console's bundles page says so.

#[allow(dead_code)] // this test drives a few of the browser's methods
#[path = "console/browser.rs"]
mod browser;
mod common;

use std::time::Duration;

use browser::Browser;
use common::daemon::{Site, client, get, submit, wait_terminal};
use common::mock_server;
use serde_json::Value;

fn bundle(version: &str) -> String {
    format!(
        "name: keeper\nversion: \"{version}\"\nmodel: {{endpoint: mock, name: m}}\nprompts: {{user: \"{{{{ input }}}}\"}}\n"
    )
}

/// A bundle file that does not parse: `model` is not a mapping.
const BROKEN: &str = "name: keeper\nversion: \"2\"\nmodel: [not, a, mapping]\nprompts: {user: x}\n";

/// The entry of bundle `keeper` in `GET /v1/bundles`, with the list.
fn keeper(list: &Value) -> Value {
    list["bundles"]
        .as_array()
        .and_then(|all| all.iter().find(|b| b["name"] == "keeper"))
        .cloned()
        .unwrap_or_else(|| panic!("no bundle keeper served: {list}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_broken_during_a_restart_serves_its_last_good_version_degraded() {
    let server = mock_server("replies:\n  - content: done\n").await;
    let site = Site::new(&server.base_url(), "");
    let http = client();

    // Never good here: invalid at start, nothing serves it.
    site.put_bundle("keeper", BROKEN);
    let daemon = site.start();
    let list = get(&http, &daemon, "/v1/bundles").await;
    assert!(
        list["bundles"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["name"] != "keeper" || b["status"] == "invalid"),
        "{list}"
    );
    assert_eq!(daemon.stop(), Some(0));

    // Good once, then broken while the daemon is down.
    site.put_bundle("keeper", &bundle("1"));
    let daemon = site.start();
    let good = keeper(&get(&http, &daemon, "/v1/bundles").await).clone();
    assert_eq!(good["status"], "ok");
    assert_eq!(daemon.stop(), Some(0));
    site.put_bundle("keeper", BROKEN);
    let daemon = site.start();
    let list = get(&http, &daemon, "/v1/bundles").await;
    let entry = keeper(&list);
    assert_eq!(entry["status"], "degraded", "{list}");
    assert_eq!(entry["version"], "1", "{list}");
    // The very content that served (pinned by its digest), not a reload of
    // whatever version 1 is now.
    assert_eq!(entry["digest"], good["digest"], "{list}");
    let said = entry.to_string();
    assert!(
        said.contains("model") && said.contains("serving its last good version 1"),
        "the entry names the error and what serves: {entry}"
    );
    // The console's bundles page: first among the bundles, saying so.
    let browser = Browser::start(1280, 900, false).await;
    browser.goto(&daemon.url("/ui/bundles")).await;
    let card = "section.bundle[data-bundle=keeper]";
    browser
        .wait_text(card, "Its last edit is broken: version 1 keeps serving.")
        .await;
    assert_eq!(
        browser
            .eval_text("document.querySelector('section.bundle')?.dataset.bundle ?? ''")
            .await,
        "keeper",
        "the degraded bundle is listed first"
    );
    browser.close().await;
    // It runs jobs, on version 1.
    let job = submit(&http, &daemon, "keeper", "hello").await;
    let done = wait_terminal(
        &http,
        &daemon,
        job["id"].as_str().unwrap(),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["bundle_version"], "1", "{done}");

    // Fixed: the new version serves, and is the last good one from now on.
    site.put_bundle("keeper", &bundle("3"));
    let (status, outcome) =
        common::daemon::post_json(&http, &daemon, "/v1/reload", serde_json::json!({})).await;
    assert_eq!(status, 200, "{outcome}");
    let entry = keeper(&get(&http, &daemon, "/v1/bundles").await);
    assert_eq!(entry["status"], "ok", "{entry}");
    assert_eq!(entry["version"], "3", "{entry}");
    assert_eq!(daemon.stop(), Some(0));
    site.put_bundle("keeper", BROKEN);
    let daemon = site.start();
    let entry = keeper(&get(&http, &daemon, "/v1/bundles").await);
    assert_eq!(entry["status"], "degraded", "{entry}");
    assert_eq!(entry["version"], "3", "{entry}");
    assert_eq!(daemon.stop(), Some(0));
}
