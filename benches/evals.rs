//! Eval runs and the release gate, measured on the real daemon (issue 52's
//! aims), each beside the limit it is compared against in the same run:
//!
//! 1. an eval of 1,000 one-turn cases (`POST /v1/bundles/{name}/evals`,
//!    64 case jobs in flight) against the same 1,000 jobs as plain submits
//!    over HTTP (32 at a time), each until every job has succeeded, on
//!    the same mock model server and daemon settings (aim: eval < 2 ×
//!    plain);
//! 2. the gate's cost on a drop of a bundle without `release:`: from the
//!    rename into the watched directory to its first job accepted, p50 and
//!    p99 over 30 drops, with a release record of 2,000 decisions in the
//!    state directory against none (aim: adds < 50 ms).
//!
//! `cargo bench --bench evals` (`SA_BENCH_EVAL_CASES` sets the case count).

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use structured_agents::mock::MockServer;

#[path = "support/daemon.rs"]
mod daemon;
#[path = "support/site.rs"]
mod site;

use daemon::{Daemon, metric, start};

/// Workers of the daemon.
const WORKERS: usize = 8;

fn write_site(dir: &Path, endpoint: &str) {
    site::write_site(dir, &site::Config::new(endpoint, WORKERS));
}

/// Bundle `b` with a suite of `cases` one-turn cases, each graded by
/// `contains`.
fn put_suite(dir: &Path, cases: usize) {
    let evals = dir.join("bundles/b/evals");
    std::fs::create_dir_all(&evals).unwrap();
    let lines: String = (0..cases)
        .map(|i| format!("{{\"id\": \"c{i}\", \"input\": \"case {i}\", \"expected\": {{\"answer\": \"ok\"}}}}\n"))
        .collect();
    std::fs::write(evals.join("cases.jsonl"), lines).unwrap();
    std::fs::write(
        evals.join("suite.yaml"),
        "graders:\n  - type: contains\n    expected: answer\n",
    )
    .unwrap();
    site::put_bundle(dir, "b", &site::one_turn("b"));
}

async fn mock() -> MockServer {
    site::mock("replies:\n  - content: ok\n").await
}

async fn succeeded(http: &reqwest::Client, d: &Daemon) -> usize {
    metric(
        http,
        d,
        "structured_agents_jobs_finished_total{bundle=\"b\",state=\"succeeded\"}",
    )
    .await
}

/// `jobs` plain submits, 32 at a time, until all have succeeded: seconds.
async fn plain(server: &MockServer, jobs: usize) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    write_site(dir.path(), &server.base_url());
    put_suite(dir.path(), 1);
    let daemon = start(dir.path());
    let http = reqwest::Client::new();
    let started = Instant::now();
    let tasks: Vec<_> = (0..32)
        .map(|c| {
            let (http, base) = (http.clone(), daemon.base.clone());
            tokio::spawn(async move {
                for i in (c..jobs).step_by(32) {
                    http.post(format!("{base}/v1/jobs"))
                        .json(&json!({"bundle": "b", "input": format!("case {i}")}))
                        .send()
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    while succeeded(&http, &daemon).await < jobs {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    started.elapsed().as_secs_f64()
}

/// An eval of `cases` cases, 64 in flight, until its job has succeeded:
/// seconds, and whether every case passed.
async fn eval(server: &MockServer, cases: usize) -> (f64, bool) {
    let dir = tempfile::tempdir().unwrap();
    write_site(dir.path(), &server.base_url());
    put_suite(dir.path(), cases);
    let daemon = start(dir.path());
    let http = reqwest::Client::new();
    let started = Instant::now();
    let job: Value = http
        .post(format!("{}/v1/bundles/b/evals", daemon.base))
        .json(&json!({"concurrency": 64}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = job["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{job}"))
        .to_string();
    loop {
        let job: Value = http
            .get(format!("{}/v1/jobs/{id}", daemon.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        match job["state"].as_str() {
            Some("succeeded") => {
                let passed = job["result"]["passed"].as_u64() == Some(cases as u64);
                return (started.elapsed().as_secs_f64(), passed);
            }
            Some("failed" | "dead" | "cancelled") => panic!("the eval job ended: {job}"),
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Drops `rounds` new bundles into a daemon's directory, each timed from
/// its rename to its first job accepted; with `decisions` release
/// decisions recorded first. (p50, p99) in milliseconds.
async fn drops(server: &MockServer, rounds: usize, decisions: usize) -> (f64, f64) {
    let dir = tempfile::tempdir().unwrap();
    write_site(dir.path(), &server.base_url());
    if decisions > 0 {
        let record: serde_json::Map<String, Value> = (0..decisions)
            .map(|i| {
                (
                    format!("{i:064x}"),
                    json!({"bundle": "old", "version": i.to_string(), "verdict": "rejected", "reason": "bench", "by": "gate", "at": "2026-01-01T00:00:00.000Z"}),
                )
            })
            .collect();
        std::fs::write(
            dir.path().join("state/releases.json"),
            serde_json::to_vec(&json!({"decisions": record})).unwrap(),
        )
        .unwrap();
    }
    let daemon = start(dir.path());
    let http = reqwest::Client::new();
    let mut accepted = Vec::new();
    for i in 0..rounds {
        let name = format!("drop{i}");
        let staging = dir.path().join(format!("staging-{name}"));
        std::fs::create_dir_all(&staging).unwrap();
        std::fs::write(staging.join("bundle.yaml"), site::one_turn(&name)).unwrap();
        let renamed = Instant::now();
        std::fs::rename(&staging, dir.path().join("bundles").join(&name)).unwrap();
        loop {
            let r = http
                .post(format!("{}/v1/jobs", daemon.base))
                .json(&json!({"bundle": name, "input": "x"}))
                .send()
                .await
                .unwrap();
            if r.status().is_success() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        accepted.push(renamed.elapsed().as_secs_f64() * 1000.0);
    }
    accepted.sort_by(f64::total_cmp);
    let at = |p: f64| {
        accepted[((accepted.len() as f64 * p).ceil() as usize).clamp(1, accepted.len()) - 1]
    };
    (at(0.5), at(0.99))
}

fn main() {
    let cases = std::env::var("SA_BENCH_EVAL_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let server = mock().await;
        let plain_s = plain(&server, cases).await;
        let (eval_s, all_passed) = eval(&server, cases).await;
        println!("eval of {cases} one-turn cases against the same jobs as plain submits, {WORKERS} workers");
        println!("  plain submits, all succeeded      {plain_s:.2} s");
        println!("  eval, report stored               {eval_s:.2} s  (every case passed: {all_passed})");
        println!("  ratio eval / plain                {:.2}  (aim: < 2)", eval_s / plain_s);

        let (bare50, bare99) = drops(&server, 30, 0).await;
        let (held50, held99) = drops(&server, 30, 2000).await;
        println!("a drop of a bundle without `release:`, rename → first job accepted, 30 drops");
        println!("  no release record                 p50 {bare50:.1} ms  p99 {bare99:.1} ms");
        println!("  2,000 release decisions recorded  p50 {held50:.1} ms  p99 {held99:.1} ms");
        println!(
            "  the gate adds (p50)               {:.1} ms  (aim: < 50 ms)",
            held50 - bare50
        );
    });
}
