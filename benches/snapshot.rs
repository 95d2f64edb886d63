//! The queue on PostgreSQL while another client holds a snapshot (issue
//! 47's held-snapshot aim): one daemon runs one-turn jobs from a backlog;
//! after a baseline, another connection opens a REPEATABLE READ transaction
//! and holds it (so vacuum can remove no row version the queue leaves
//! behind), then ends it. Printed every 10 s: jobs/s and the dead row
//! versions of `jobs` (`pg_stat_user_tables`); then beside the aims: the
//! throughput while held against the baseline (aim: down < 35 %), and how
//! long after the end it took to come back to 90 % of the baseline (aim:
//! within a minute).
//!
//! `cargo bench --bench snapshot` holds for 120 s (the aim holds
//! for 10 minutes: `SA_BENCH_HOLD_SECONDS=600`). PostgreSQL from
//! `SA_BENCH_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`).

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

#[path = "support/daemon.rs"]
mod daemon;
#[path = "support/site.rs"]
mod site;
#[path = "support/store.rs"]
mod store;

use daemon::{Daemon, metric, start_env};
use store::{connect, drop_schema, fresh_schema, postgres_env};

const WORKERS: usize = 8;
const WINDOW: Duration = Duration::from_secs(10);

fn write_site(dir: &Path, endpoint: &str) {
    site::write_site(dir, &site::Config::new(endpoint, WORKERS));
    site::put_bundle(dir, "b", &site::one_turn("b"));
}

async fn succeeded(http: &reqwest::Client, d: &Daemon) -> usize {
    let series = "structured_agents_jobs_finished_total{bundle=\"b\",state=\"succeeded\"}";
    metric(http, d, series).await
}

async fn dead_rows(db: &tokio_postgres::Client, schema: &str) -> i64 {
    db.query_one(
        "SELECT COALESCE(n_dead_tup, 0) FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'jobs'",
        &[&schema],
    )
    .await
    .map(|r| r.get(0))
    .unwrap_or(-1)
}

/// One window's jobs/s, printed with the dead row versions at its end.
async fn window(
    http: &reqwest::Client,
    d: &Daemon,
    db: &tokio_postgres::Client,
    schema: &str,
    phase: &str,
) -> f64 {
    let (before, started) = (succeeded(http, d).await, Instant::now());
    tokio::time::sleep(WINDOW).await;
    let rate = (succeeded(http, d).await - before) as f64 / started.elapsed().as_secs_f64();
    println!(
        "    {phase:<9} {rate:>7.0} jobs/s   dead rows of jobs {}",
        dead_rows(db, schema).await
    );
    rate
}

fn main() {
    let hold: u64 = std::env::var("SA_BENCH_HOLD_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let server = site::mock("replies:\n  - content: ok\n").await;
        let dir = tempfile::tempdir().unwrap();
        write_site(dir.path(), &server.base_url());
        let schema = fresh_schema();
        let env = postgres_env(&schema);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let d = start_env(dir.path(), &env);
        let http = reqwest::Client::new();
        let db = connect().await;

        // A backlog for the whole run at up to 1,500 jobs/s, queued first.
        let seconds = 40 + hold + 70;
        let jobs = (seconds as usize * 1500).div_ceil(1000) * 1000;
        for chunk in 0..jobs / 1000 {
            let batch: Vec<Value> = (0..1000)
                .map(|i| json!({"bundle": "b", "input": format!("{chunk}-{i}")}))
                .collect();
            let response = http
                .post(format!("{}/v1/jobs/batch", d.base))
                .json(&json!({"jobs": batch}))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status().as_u16(), 201);
        }
        println!("snapshot: one daemon on PostgreSQL, {WORKERS} workers, a backlog of {jobs} one-turn jobs; another client holds a REPEATABLE READ snapshot for {hold} s (issue 47)");
        tokio::time::sleep(Duration::from_secs(10)).await;
        let mut baseline = Vec::new();
        for _ in 0..3 {
            baseline.push(window(&http, &d, &db, &schema, "before").await);
        }
        let baseline = baseline.iter().sum::<f64>() / baseline.len() as f64;

        let holder = connect().await;
        holder
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            .await
            .unwrap();
        holder
            .query_one(&format!("SELECT COUNT(*) FROM {schema}.jobs"), &[])
            .await
            .unwrap();
        let mut held = Vec::new();
        for _ in 0..(hold / WINDOW.as_secs()).max(1) {
            held.push(window(&http, &d, &db, &schema, "held").await);
        }
        holder.batch_execute("COMMIT").await.unwrap();
        let ended = Instant::now();
        let mut recovered = None;
        for _ in 0..6 {
            let rate = window(&http, &d, &db, &schema, "after").await;
            if recovered.is_none() && rate >= 0.9 * baseline {
                recovered = Some(ended.elapsed());
            }
        }
        let held_mean = held.iter().sum::<f64>() / held.len() as f64;
        let worst = held.iter().copied().fold(f64::INFINITY, f64::min);
        println!(
            "  baseline {baseline:.0} jobs/s; held: mean {held_mean:.0} (down {:.1} %), worst window {worst:.0} (down {:.1} %)   (aim: down < 35 %)",
            (1.0 - held_mean / baseline) * 100.0,
            (1.0 - worst / baseline) * 100.0,
        );
        match recovered {
            Some(after) => println!(
                "  back to 90 % of the baseline within {:.0} s of the snapshot's end   (aim: within 60 s)",
                after.as_secs_f64()
            ),
            None => println!("  not back to 90 % of the baseline within 60 s of the snapshot's end   (aim: within 60 s)"),
        }
        drop(d);
        drop_schema(&schema).await;
    });
}
