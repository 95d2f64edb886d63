//! Load-aware admission against the mock model server's queueing mode
//! (docs/models.md, "Load-aware admission"), driving the real daemon: held
//! calls are released as the server's queue drains, and a broken load page
//! falls back to the endpoint's fixed permit with a warning — never to
//! unlimited.

mod common;

use std::time::Duration;

use common::daemon::{
    Daemon, Site, client, eventually, metric, metric_samples, submit, wait_terminal,
};
use common::mock_server;

const BUNDLE: &str = r#"name: loaded
version: "1"
model: {endpoint: mock, name: m}
prompts: {user: "{{ input }}"}
"#;

const JOBS: usize = 8;

fn script(slots: usize) -> String {
    format!("queueing: {{slots: {slots}, service_ms: 150}}\nreplies:\n  - content: done\n")
}

fn load_section(metrics_url: &str) -> String {
    format!(
        r#"[endpoints.mock.load]
kind = "vllm"
metrics_url = "{metrics_url}"
poll_interval = "50ms"
hold_above = {{waiting = 0.0, kv_cache = 1.0}}
first_call_hold_above = {{waiting = 0.0, kv_cache = 1.0}}
"#
    )
}

/// Submits `JOBS` jobs at once and waits until every one succeeded.
async fn run_all(http: &reqwest::Client, daemon: &Daemon) {
    let mut ids = Vec::new();
    for i in 0..JOBS {
        let job = submit(http, daemon, "loaded", &format!("job {i}")).await;
        ids.push(job["id"].as_str().unwrap().to_string());
    }
    for id in ids {
        let job = wait_terminal(http, daemon, &id, Duration::from_secs(120)).await;
        assert_eq!(job["state"], "succeeded", "{job}\n{}", daemon.log());
    }
}

fn total(samples: &std::collections::BTreeMap<String, u64>) -> u64 {
    samples.values().sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_calls_are_released_as_the_servers_queue_drains() {
    let server = mock_server(&script(1)).await;
    let metrics_url = format!("http://{}/metrics", server.addr);
    let site = Site::new(&server.base_url(), &load_section(&metrics_url));
    site.put_bundle("loaded", BUNDLE);
    let daemon = site.start();
    let http = client();
    run_all(&http, &daemon).await;

    // Without the gate, all eight calls reach the one-slot server at once
    // (the fixed permit is 64): seven wait in its queue. With it, a call
    // goes only when a reading shows the queue at the threshold of 0.
    let load = server.load();
    assert!(
        load.peak_waiting < JOBS - 1,
        "the server's queue was not kept short: {load:?}"
    );
    assert_eq!(server.requests().len(), JOBS);
    let held = metric_samples(
        &http,
        &daemon,
        "structured_agents_endpoint_calls_held_total",
    )
    .await;
    assert!(total(&held) >= 1, "no call was held: {held:?}");
    assert!(
        held.keys()
            .all(|series| series.contains("endpoint=\"mock\"")),
        "{held:?}"
    );
    // Every held call went ahead as the queue drained: released = held,
    // nothing is holding now.
    let released = metric_samples(
        &http,
        &daemon,
        "structured_agents_endpoint_calls_released_total",
    )
    .await;
    assert_eq!(total(&released), total(&held), "{released:?} vs {held:?}");
    let holding = metric_samples(&http, &daemon, "structured_agents_endpoint_calls_holding").await;
    assert_eq!(total(&holding), 0, "{holding:?}");
    let signal = metric_samples(&http, &daemon, "structured_agents_endpoint_load_signal").await;
    assert!(
        signal.contains_key(
            r#"structured_agents_endpoint_load_signal{endpoint="mock",signal="waiting"}"#
        ),
        "{signal:?}"
    );
    let falling_back = r#"structured_agents_endpoint_load_fallback{endpoint="mock"}"#;
    assert_eq!(
        metric(&http, &daemon, falling_back).await,
        0,
        "the page read fine"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_load_page_falls_back_to_the_fixed_permit_with_a_warning() {
    // Eight slots: the server itself never queues, so what reaches it at
    // once is what the daemon lets through.
    let server = mock_server(&script(JOBS)).await;
    let broken = format!("http://{}/no-such-page", server.addr);
    let site = Site::new(&server.base_url(), &load_section(&broken));
    site.put_bundle("loaded", BUNDLE);
    let daemon = site.start_with_env(&[("STRUCTURED_AGENTS_ENDPOINTS__MOCK__MAX_CONCURRENT", "2")]);
    let http = client();
    // The first reading fails at start: the gate opens (a gauge of 1).
    let falling_back = r#"structured_agents_endpoint_load_fallback{endpoint="mock"}"#;
    eventually(Duration::from_secs(30), "the fallback gauge", || async {
        (metric(&http, &daemon, falling_back).await == 1).then_some(())
    })
    .await;
    run_all(&http, &daemon).await;

    let load = server.load();
    assert!(
        load.peak_in_flight <= 2,
        "more calls than the fixed permit of 2 reached the server: {load:?}"
    );
    assert!(load.peak_in_flight >= 1, "{load:?}");
    let log = daemon.log();
    assert!(
        log.contains("cannot read the endpoint's load page") && log.contains("HTTP 404"),
        "no warning in the log:\n{log}"
    );
    let fallbacks = metric_samples(
        &http,
        &daemon,
        "structured_agents_endpoint_load_fallbacks_total",
    )
    .await;
    assert!(total(&fallbacks) >= 1, "{fallbacks:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_section_added_by_a_reload_applies_live() {
    let server = mock_server(&script(JOBS)).await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("loaded", BUNDLE);
    let daemon = site.start();
    let http = client();
    let falling_back = r#"structured_agents_endpoint_load_fallback{endpoint="mock"}"#;
    assert_eq!(metric(&http, &daemon, falling_back).await, 0);

    // The endpoint gains a load section whose page is broken: after the
    // reload its new gate reads it, falls back and says so.
    let config = site.path().join("config.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&load_section(&format!(
        "http://{}/no-such-page",
        server.addr
    )));
    std::fs::write(&config, text).unwrap();
    let (status, outcome) =
        common::daemon::post_json(&http, &daemon, "/v1/reload", serde_json::json!({})).await;
    assert_eq!(status, 200, "{outcome}\n{}", daemon.log());
    assert_eq!(outcome["result"], "applied", "{outcome}");
    eventually(
        Duration::from_secs(30),
        "the reloaded endpoint's fallback",
        || async { (metric(&http, &daemon, falling_back).await == 1).then_some(()) },
    )
    .await;
    run_all(&http, &daemon).await;
}
