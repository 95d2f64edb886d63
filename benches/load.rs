//! Load-aware admission against a small model server (run with
//! `cargo bench --bench load`; docs/daemon.md has the table): the mock
//! server's queueing mode (4 slots, a request's service time growing with
//! the queue it finds, a vLLM-like `/metrics` page) and 500 jobs of 3
//! turns submitted faster than it can serve them, once with the fixed
//! permit alone and once with load-aware admission in front of it. For
//! each: job latency p50/p99, model calls per job (retries show as more
//! than 3), calls the client gave up on (timeouts), jobs/s and the jobs
//! that did not succeed. `SA_BENCH_LOAD_JOBS` changes the number of jobs.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use structured_agents::mock::MockServer;

#[path = "support/daemon.rs"]
mod daemon;
#[path = "support/site.rs"]
mod site;

use daemon::start;

const SCRIPT: &str = "queueing: {slots: 4, service_ms: 50, per_waiting_ms: 2}\n\
replies:\n  - {turn: 1, tool_calls: [{name: noop, arguments: {}}]}\n  \
- {turn: 2, tool_calls: [{name: noop, arguments: {}}]}\n  - {turn: 3, content: done}\n";

/// Three turns: a tool call, another, the answer.
const BUNDLE: &str = "name: b\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\n\
prompts: {user: \"{{ input }}\"}\ntools:\n  - {name: noop, kind: process, effect: read_only, command: [/bin/echo, \"{}\"]}\n";

/// The permit both runs have; the workers to fill it.
const MAX_CONCURRENT: usize = 64;
const SUBMITS_PER_SECOND: f64 = 50.0;

fn write_site(dir: &Path, server: &MockServer, load: bool) {
    let gate = if load {
        format!(
            "[endpoints.mock.load]\nkind = \"vllm\"\nmetrics_url = \"http://{}/metrics\"\npoll_interval = \"100ms\"\n\
             hold_above = {{waiting = 4.0}}\nfirst_call_hold_above = {{waiting = 1.0}}\n",
            server.addr
        )
    } else {
        String::new()
    };
    let endpoint = server.base_url();
    let config = site::Config {
        request_timeout: "2s",
        queue: "durability = \"fast\"\nmax_attempts = 3\nbackoff_base = \"200ms\"\n",
        mock: "max_retries = 2\n",
        sections: &gate,
        ..site::Config::new(&endpoint, MAX_CONCURRENT)
    };
    site::write_site(dir, &config);
    site::put_bundle(dir, "b", BUNDLE);
}

struct Outcome {
    p50: f64,
    p99: f64,
    calls_per_job: f64,
    abandoned: usize,
    jobs_per_second: f64,
    not_succeeded: usize,
}

fn at(job: &Value, field: &str) -> SystemTime {
    humantime::parse_rfc3339_weak(job[field].as_str().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{field} of {job}: {e}"))
}

async fn run(jobs: usize, load: bool) -> Outcome {
    let server = site::mock(SCRIPT).await;
    let dir = tempfile::tempdir().unwrap();
    write_site(dir.path(), &server, load);
    let daemon = start(dir.path());
    let http = reqwest::Client::new();
    let mut ids = Vec::new();
    let started = Instant::now();
    for i in 0..jobs {
        let due = started + Duration::from_secs_f64(i as f64 / SUBMITS_PER_SECOND);
        tokio::time::sleep_until(due.into()).await;
        let job: Value = http
            .post(format!("{}/v1/jobs", daemon.base))
            .json(&json!({"bundle": "b", "input": format!("job {i}")}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        ids.push(job["id"].as_str().unwrap().to_string());
    }
    let mut ended = Vec::new();
    for id in &ids {
        loop {
            let job: Value = http
                .get(format!("{}/v1/jobs/{id}", daemon.base))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if matches!(
                job["state"].as_str(),
                Some("succeeded" | "failed" | "dead" | "cancelled")
            ) {
                ended.push(job);
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let mut latencies: Vec<f64> = ended
        .iter()
        .map(|job| {
            at(job, "finished_at")
                .duration_since(at(job, "created_at"))
                .unwrap_or_default()
                .as_secs_f64()
        })
        .collect();
    latencies.sort_by(f64::total_cmp);
    let pick = |q: f64| latencies[((latencies.len() as f64 * q).ceil() as usize).saturating_sub(1)];
    let first = ended.iter().map(|j| at(j, "created_at")).min().unwrap();
    let last = ended.iter().map(|j| at(j, "finished_at")).max().unwrap();
    let span = last.duration_since(first).unwrap_or_default().as_secs_f64();
    let mock = server.load();
    Outcome {
        p50: pick(0.50),
        p99: pick(0.99),
        calls_per_job: mock.received as f64 / jobs as f64,
        abandoned: mock.abandoned,
        jobs_per_second: jobs as f64 / span,
        not_succeeded: ended.iter().filter(|j| j["state"] != "succeeded").count(),
    }
}

#[tokio::main]
async fn main() {
    let jobs: usize = std::env::var("SA_BENCH_LOAD_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    println!(
        "load-aware admission: {jobs} jobs of 3 turns at {SUBMITS_PER_SECOND} jobs/s; mock server: 4 slots, \
         50 ms + 2 ms per queued request; permit {MAX_CONCURRENT}, request_timeout 2s, max_retries 2"
    );
    println!(
        "| admission | job p50 (s) | job p99 (s) | model calls/job | timed-out calls | jobs/s | jobs not succeeded |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut outcomes = Vec::new();
    for (name, load) in [("fixed permit", false), ("load-aware", true)] {
        let o = run(jobs, load).await;
        println!(
            "| {name} | {:.2} | {:.2} | {:.2} | {} | {:.1} | {} |",
            o.p50, o.p99, o.calls_per_job, o.abandoned, o.jobs_per_second, o.not_succeeded
        );
        outcomes.push(o);
    }
    let (fixed, aware) = (&outcomes[0], &outcomes[1]);
    println!("{}", verdict(fixed, aware));
}

/// The aim issue 37 set, against what the two runs measured.
fn verdict(fixed: &Outcome, aware: &Outcome) -> String {
    let p99_lower = 1.0 - aware.p99 / fixed.p99;
    let checks = [
        (
            p99_lower >= 0.30,
            format!(
                "p99 job latency at least 30 % lower: {:.0} % lower",
                p99_lower * 100.0
            ),
        ),
        (
            aware.abandoned == 0 && aware.calls_per_job <= 3.0,
            format!(
                "no timeout-driven retries: {} timed-out calls, {:.2} model calls per 3-turn job",
                aware.abandoned, aware.calls_per_job
            ),
        ),
        (
            aware.jobs_per_second >= fixed.jobs_per_second,
            format!(
                "equal or higher throughput: {:.1} against {:.1} jobs/s",
                aware.jobs_per_second, fixed.jobs_per_second
            ),
        ),
    ];
    checks
        .iter()
        .map(|(met, what)| format!("aim {}: {what}", if *met { "met" } else { "NOT met" }))
        .collect::<Vec<_>>()
        .join("\n")
}
