//! A flood of concurrent submits (issue 47's flood aim): 7,000 `POST
//! /v1/jobs` sent at once to one daemon, on SQLite and on PostgreSQL, and
//! what each answered: accepted (201), refused for load (503, "too many
//! writes waiting" or "too many connections"), anything else. Beside the
//! aims: PostgreSQL accepts >= 0.9 × what SQLite accepts, and no answer is
//! a 500.
//!
//! `cargo bench --bench flood` (`SA_BENCH_FLOOD=N` for another size).
//! PostgreSQL from `SA_BENCH_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::json;

#[path = "support/daemon.rs"]
mod daemon;
#[path = "support/site.rs"]
mod site;
#[path = "support/store.rs"]
mod store;

use daemon::start_env;
use store::{drop_schema, fresh_schema, postgres_env};

fn write_site(dir: &Path, endpoint: &str) {
    let config = site::Config {
        server: "max_connections = 16000\n",
        ..site::Config::new(endpoint, 8)
    };
    site::write_site(dir, &config);
    site::put_bundle(dir, "b", &site::one_turn("b"));
}

/// The answers to `n` submits sent at once: count by status (`0`: the
/// connection failed).
async fn flood(label: &str, env: &[(&str, &str)], n: usize) -> BTreeMap<u16, usize> {
    let server = site::mock("replies:\n  - content: ok\n").await;
    let dir = tempfile::tempdir().unwrap();
    write_site(dir.path(), &server.base_url());
    let d = start_env(dir.path(), env);
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(n));
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let (http, url, start) = (http.clone(), format!("{}/v1/jobs", d.base), start.clone());
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            match http
                .post(url)
                .json(&json!({"bundle": "b", "input": format!("{i}")}))
                .send()
                .await
            {
                Ok(response) => response.status().as_u16(),
                Err(_) => 0,
            }
        }));
    }
    let mut answers = BTreeMap::new();
    for task in tasks {
        *answers.entry(task.await.unwrap_or(0)).or_insert(0) += 1;
    }
    println!("  {label:<11} {answers:?}   (status: count; 0 = connection failed)");
    answers
}

fn main() {
    let n: usize = std::env::var("SA_BENCH_FLOOD")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        println!("flood: {n} POST /v1/jobs at once to one daemon, 8 workers (issue 47)");
        let sqlite = flood("SQLite", &[], n).await;
        let schema = fresh_schema();
        let env = postgres_env(&schema);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let postgres = flood("PostgreSQL", &env, n).await;
        let accepted = |a: &BTreeMap<u16, usize>| a.get(&201).copied().unwrap_or(0) as f64;
        println!(
            "  PostgreSQL ÷ SQLite accepted {:.2}   (aim >= 0.9); answers 500: SQLite {}, PostgreSQL {}   (aim 0)",
            accepted(&postgres) / accepted(&sqlite).max(1.0),
            sqlite.get(&500).copied().unwrap_or(0),
            postgres.get(&500).copied().unwrap_or(0),
        );
        drop_schema(&schema).await;
    });
}
