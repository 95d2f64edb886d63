//! A load of the real daemon under every fault at once: a few hundred jobs,
//! a share of them meeting a model server that answers 503 with
//! `Retry-After: nan`, a reply over the endpoint's body cap, a tool that
//! writes 300 KB before reading its input, a cancellation mid-run, or a
//! client that hangs up mid-submit. Every job must end in a terminal state,
//! the daemon must stay up, and its counters must agree with the job table.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use common::daemon::{Daemon, Site, client, eventually, get, metric_samples};
use serde_json::{Value, json};

const JOBS: usize = 240;
const HANG_UPS: usize = 20;

fn script() -> String {
    format!(
        r#"
replies:
  - {{match: fault-nan, turn: 1, status: 503, error: overloaded, retry_after: "nan"}}
  - {{match: fault-huge, turn: 1, content: "{huge}"}}
  - {{match: fault-pipe, turn: 1, tool_calls: [{{name: bigout, arguments: {{}}}}]}}
  - {{match: fault-slow, turn: 1, content: slow, delay_ms: 600000}}
  - {{turn: 1, tool_calls: [{{name: echo, arguments: {{x: 1}}}}]}}
  - {{turn: 2, content: done}}
"#,
        huge = "x".repeat(6000)
    )
}

const BUNDLE: &str = r#"
name: load
version: "1"
model: {endpoint: mock, name: m, plugin: openai}
prompts: {user: "{{ input }}"}
tools:
  - name: echo
    kind: process
    effect: read_only
    command: [python3, -c, "import json,sys; print(json.dumps(json.load(sys.stdin)))"]
  - name: bigout
    kind: process
    effect: read_only
    timeout: 20s
    command: [python3, -c, "import sys; sys.stdout.write('y' * 300000); sys.stdout.flush(); sys.stdin.read()"]
"#;

fn kind(i: usize) -> &'static str {
    [
        "fault-nan",
        "fault-huge",
        "fault-pipe",
        "fault-slow",
        "ok",
        "ok",
    ][i % 6]
}

/// Sends a submit over a raw socket and hangs up without reading the answer.
fn hang_up_submit(daemon: &Daemon, input: &str) {
    let addr = daemon.base.trim_start_matches("http://");
    let body = json!({"bundle": "load", "input": input}).to_string();
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "POST /v1/jobs HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    stream.flush().unwrap();
    drop(stream);
}

async fn all_jobs(http: &reqwest::Client, daemon: &Daemon) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor = String::new();
    loop {
        let page = get(http, daemon, &format!("/v1/jobs?limit=1000{cursor}")).await;
        out.extend(page["jobs"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => return out,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_ends_under_all_faults_at_once_and_counters_agree() {
    let server = common::mock_server(&script()).await;
    let site = Site::new(&server.base_url(), "");
    let config = site.path().join("config.toml");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "max_concurrent = 64",
        "max_concurrent = 64\nmax_response_bytes = 4096",
    );
    std::fs::write(&config, text).unwrap();
    site.put_bundle("load", BUNDLE);
    // A slow job's model call answers only after ten minutes, within a longer
    // request timeout: however late its cancel comes, only the cancel ends
    // it.
    let daemon =
        site.start_with_env(&[("STRUCTURED_AGENTS_ENDPOINTS__MOCK__REQUEST_TIMEOUT", "900s")]);
    let http = client();

    let mut submits = Vec::new();
    for i in 0..JOBS {
        let (http, url) = (http.clone(), daemon.url("/v1/jobs"));
        submits.push(tokio::spawn(async move {
            let job: Value = http
                .post(url)
                .json(&json!({"bundle": "load", "input": format!("{} job {i}", kind(i))}))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            (i, job["id"].as_str().unwrap().to_string())
        }));
    }
    for i in 0..HANG_UPS {
        hang_up_submit(&daemon, &format!("ok hung-up {i}"));
    }
    for submit in submits {
        let (i, id) = submit.await.unwrap();
        if kind(i) == "fault-slow" {
            let cancelled = http
                .post(daemon.url(&format!("/v1/jobs/{id}/cancel")))
                .json(&serde_json::json!({}))
                .send()
                .await
                .unwrap();
            assert!(cancelled.status().is_success());
        }
    }

    // A hung-up submit may be dropped before its job exists (then nothing
    // counts it either); the table settles at JOBS plus those that made it.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let mut previous = 0;
    let jobs = loop {
        let jobs = all_jobs(&http, &daemon).await;
        let unfinished: Vec<&Value> = jobs
            .iter()
            .filter(|j| {
                !matches!(
                    j["state"].as_str(),
                    Some("succeeded" | "failed" | "dead" | "cancelled")
                )
            })
            .collect();
        if jobs.len() >= JOBS && jobs.len() == previous && unfinished.is_empty() {
            break jobs;
        }
        previous = jobs.len();
        assert!(
            std::time::Instant::now() < deadline,
            "{} jobs of {} stored; not terminal: {:?}\nlog:\n{}",
            jobs.len(),
            JOBS + HANG_UPS,
            unfinished
                .iter()
                .take(5)
                .map(|j| format!("{} {} {}", j["input"], j["state"], j["error"]))
                .collect::<Vec<_>>(),
            daemon
                .log()
                .lines()
                .rev()
                .take(40)
                .collect::<Vec<_>>()
                .join("\n")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };

    let state_of = |needle: &str| -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for j in jobs
            .iter()
            .filter(|j| j["input"].as_str().unwrap().starts_with(needle))
        {
            *counts
                .entry(j["state"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
        counts
    };
    assert_eq!(
        state_of("fault-nan").keys().collect::<Vec<_>>(),
        ["dead"],
        "503 + nan: retried, then dead"
    );
    assert_eq!(
        state_of("fault-huge").keys().collect::<Vec<_>>(),
        ["failed"],
        "over the body cap"
    );
    assert_eq!(
        state_of("fault-pipe").keys().collect::<Vec<_>>(),
        ["succeeded"],
        "300 KB before stdin"
    );
    assert_eq!(
        state_of("fault-slow").keys().collect::<Vec<_>>(),
        ["cancelled"]
    );
    assert_eq!(state_of("ok").keys().collect::<Vec<_>>(), ["succeeded"]);
    let huge = jobs
        .iter()
        .find(|j| j["input"].as_str().unwrap().starts_with("fault-huge"))
        .unwrap();
    assert!(huge["error"].as_str().unwrap().contains("4096"), "{huge}");

    // The daemon is up and its counters agree with the job table.
    let health = http.get(daemon.url("/healthz")).send().await.unwrap();
    assert!(health.status().is_success());
    // Each attempt's final JobState reaches the metrics observer after its
    // commit, so the counters can trail the table that shows every job
    // terminal. The in-flight gauge goes up with an attempt's first event
    // and down with its final one: once it is back at 0, every attempt's
    // end has been counted.
    eventually(
        Duration::from_secs(60),
        "every attempt's end counted (jobs in flight back at 0)",
        || async {
            let in_flight =
                metric_samples(&http, &daemon, "structured_agents_jobs_in_flight").await;
            (in_flight.values().sum::<u64>() == 0).then_some(())
        },
    )
    .await;
    let submitted = metric_samples(&http, &daemon, "structured_agents_jobs_submitted_total").await;
    assert_eq!(
        submitted.get("structured_agents_jobs_submitted_total{bundle=\"load\"}"),
        Some(&(jobs.len() as u64)),
        "every stored job is counted once: {submitted:?}"
    );
    let finished = metric_samples(&http, &daemon, "structured_agents_jobs_finished_total").await;
    let mut table: BTreeMap<String, u64> = BTreeMap::new();
    for j in &jobs {
        *table
            .entry(j["state"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    for (state, n) in &table {
        // A job cancelled while queued never ran: no attempt reports it.
        let counted = finished
            .get(&format!(
                "structured_agents_jobs_finished_total{{bundle=\"load\",state=\"{state}\"}}"
            ))
            .copied()
            .unwrap_or(0);
        if state == "cancelled" {
            assert!(counted <= *n, "cancelled: counted {counted}, table {n}");
        } else {
            assert_eq!(
                counted, *n,
                "{state}: counters {finished:?}, table {table:?}"
            );
        }
    }
    let live = metric_samples(&http, &daemon, "structured_agents_queue_jobs").await;
    for state in ["queued", "running", "needs_attention"] {
        assert_eq!(
            live.get(&format!(
                "structured_agents_queue_jobs{{state=\"{state}\"}}"
            )),
            Some(&0),
            "{live:?}"
        );
    }
    assert_eq!(
        metric_samples(&http, &daemon, "structured_agents_jobs_in_flight")
            .await
            .values()
            .sum::<u64>(),
        0
    );
}
