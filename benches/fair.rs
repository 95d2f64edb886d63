//! Fair shares between API keys, measured on the real daemon (issue 47's
//! fairness aim): key `a` queues a backlog of jobs, then key `b` submits one
//! job a second while `a`'s backlog runs. Reported beside their aims, on
//! SQLite and on PostgreSQL:
//!
//! - `b`'s queue wait (its job's `started_at - created_at`), p50 and p99,
//!   against one job's run time measured in the same run (aim: p99 < 2 ×);
//! - `a`'s jobs/s while `b` trickles against `a`'s jobs/s alone just before
//!   (aim: down < 10 %).
//!
//! `cargo bench --bench fair` runs 60 s of trickle per store, after `a`
//! alone for half as long, at most 5 minutes (the aim is 10
//! minutes: `SA_BENCH_FAIR_SECONDS=600`, and its soak 3,600;
//! `SA_BENCH_FAIR_STORES=postgres` or `=sqlite` runs one store). Beside the
//! p99, the longest wait of all `b`'s jobs: a soak with no starvation
//! keeps it near the p99.
//! PostgreSQL from `SA_BENCH_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`).

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

#[path = "support/daemon.rs"]
mod daemon;
#[path = "support/site.rs"]
mod site;
#[path = "support/store.rs"]
mod store;

use daemon::{Daemon, metric, start_env};
use store::{drop_schema, fresh_schema, postgres_env};

/// Workers of the daemon.
const WORKERS: usize = 8;
/// How long a model call takes: one job's run time, give or take the
/// daemon's own work.
const MODEL_MS: u64 = 40;

fn write_site(dir: &Path, endpoint: &str) {
    let mut keys = String::new();
    for name in ["a", "b"] {
        let hash = structured_agents::hex::sha256_hex(token(name).as_bytes());
        keys.push_str(&format!(
            "[[keys]]\nname = \"{name}\"\ntoken_sha256 = \"{hash}\"\nscopes = [\"submit\", \"read\"]\n\n"
        ));
    }
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("keys.toml"), keys).unwrap();
    let config = site::Config {
        sections: "[auth]\nkeys_file = \"keys.toml\"\n",
        ..site::Config::new(endpoint, WORKERS)
    };
    site::write_site(dir, &config);
    for name in ["fa", "fb"] {
        site::put_bundle(dir, name, &site::one_turn(name));
    }
}

fn token(key: &str) -> String {
    format!("bench-token-{key}-0123456789")
}

/// Jobs of bundle `bundle` that succeeded, from the daemon's counters.
async fn succeeded(http: &reqwest::Client, d: &Daemon, bundle: &str) -> usize {
    let series =
        format!("structured_agents_jobs_finished_total{{bundle=\"{bundle}\",state=\"succeeded\"}}");
    metric(http, d, &series).await
}

async fn submit_backlog(http: &reqwest::Client, d: &Daemon, jobs: usize) {
    for chunk in 0..jobs / 1000 {
        let batch: Vec<Value> = (0..1000)
            .map(|i| json!({"bundle": "fa", "input": format!("{chunk}-{i}")}))
            .collect();
        let response = http
            .post(format!("{}/v1/jobs/batch", d.base))
            .bearer_auth(token("a"))
            .json(&json!({"jobs": batch}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 201, "the backlog is accepted");
    }
}

fn time(job: &Value, field: &str) -> SystemTime {
    let stamp = job[field]
        .as_str()
        .unwrap_or_else(|| panic!("{field} in {job}"));
    humantime::parse_rfc3339(stamp).unwrap()
}

fn millis(from: SystemTime, to: SystemTime) -> f64 {
    to.duration_since(from).unwrap_or_default().as_secs_f64() * 1000.0
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// `b`'s jobs once all finished: (queue waits, run times) in ms.
async fn b_times(http: &reqwest::Client, d: &Daemon, ids: &[String]) -> (Vec<f64>, Vec<f64>) {
    let (mut waits, mut runs) = (Vec::new(), Vec::new());
    for id in ids {
        let deadline = Instant::now() + Duration::from_secs(120);
        let job = loop {
            let job: Value = http
                .get(format!("{}/v1/jobs/{id}", d.base))
                .bearer_auth(token("b"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if job["state"] == "succeeded" || Instant::now() > deadline {
                break job;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(job["state"], "succeeded", "b's job {id} ran: {job}");
        let (created, started, finished) = (
            time(&job, "created_at"),
            time(&job, "started_at"),
            time(&job, "finished_at"),
        );
        waits.push(millis(created, started));
        runs.push(millis(started, finished));
    }
    waits.sort_by(f64::total_cmp);
    runs.sort_by(f64::total_cmp);
    (waits, runs)
}

async fn fair_run(label: &str, env: &[(&str, &str)], seconds: u64) {
    let server = site::mock(&format!(
        "replies:\n  - content: ok\n    delay_ms: {MODEL_MS}\n"
    ))
    .await;
    let dir = tempfile::tempdir().unwrap();
    write_site(dir.path(), &server.base_url());
    let d = start_env(dir.path(), env);
    let http = reqwest::Client::new();
    // `a` alone for half the trickle's time, at most five minutes: enough
    // for a steady rate, and a soak's hour goes to the trickle.
    let alone_for = Duration::from_secs((seconds / 2).clamp(10, 300));
    // Enough backlog that `a` never runs dry: its rate alone, times the
    // whole run, twice over.
    let per_second = WORKERS as f64 * 1000.0 / MODEL_MS as f64;
    let whole_run = (alone_for.as_secs() + seconds + 20) as f64;
    let backlog = ((per_second * whole_run * 2.0) as usize).div_ceil(1000) * 1000;
    submit_backlog(&http, &d, backlog).await;
    tokio::time::sleep(Duration::from_secs(5)).await;

    // `a` alone.
    let (start, started) = (succeeded(&http, &d, "fa").await, Instant::now());
    tokio::time::sleep(alone_for).await;
    let alone = (succeeded(&http, &d, "fa").await - start) as f64 / started.elapsed().as_secs_f64();

    // `b` trickles one job a second.
    let (start, started) = (succeeded(&http, &d, "fa").await, Instant::now());
    let mut ids = Vec::new();
    for i in 0..seconds {
        let tick = started + Duration::from_secs(i);
        tokio::time::sleep_until(tick.into()).await;
        let job: Value = http
            .post(format!("{}/v1/jobs", d.base))
            .bearer_auth(token("b"))
            .json(&json!({"bundle": "fb", "input": format!("b{i}")}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        ids.push(job["id"].as_str().unwrap().to_string());
    }
    let beside =
        (succeeded(&http, &d, "fa").await - start) as f64 / started.elapsed().as_secs_f64();
    let (waits, runs) = b_times(&http, &d, &ids).await;
    let run = percentile(&runs, 0.5);
    let p99 = percentile(&waits, 0.99);
    let drop = 1.0 - beside / alone;
    println!(
        "  {label}: a's backlog {backlog} jobs, b one job a second for {seconds} s, {WORKERS} workers"
    );
    println!(
        "    b's queue wait p50 {:.0} ms, p99 {p99:.0} ms, longest {:.0} ms; one job's run time (p50) {run:.0} ms; p99 ÷ run {:.2}   (aim < 2)",
        percentile(&waits, 0.5),
        percentile(&waits, 1.0),
        p99 / run
    );
    println!(
        "    a's jobs/s alone {alone:.0}, beside b {beside:.0}: down {:.1} %   (aim < 10 %)",
        drop * 100.0
    );
}

fn main() {
    let seconds: u64 = std::env::var("SA_BENCH_FAIR_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        println!("fair: key a's backlog against key b's one job a second (issue 47, fairness)");
        let stores = std::env::var("SA_BENCH_FAIR_STORES").unwrap_or_default();
        let runs = |store: &str| stores.is_empty() || stores.split(',').any(|s| s == store);
        if runs("sqlite") {
            fair_run("SQLite", &[], seconds).await;
        }
        if runs("postgres") {
            let schema = fresh_schema();
            let env = postgres_env(&schema);
            let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            fair_run("PostgreSQL", &env, seconds).await;
            drop_schema(&schema).await;
        }
    });
}
