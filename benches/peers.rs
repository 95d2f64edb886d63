//! Durable agent runs beside a peer (issue 47: on PostgreSQL ≥ 20 × DBOS on
//! the same database and mock). Run with `cargo bench --bench peers`.
//!
//! The agent is the same on both sides: a model call that answers with a
//! tool call, the tool (the calculator plugin's `add` here, a Python
//! function there: both in process), and a model call that answers — two
//! model calls and one tool, each recorded durably before the next. The
//! mock model server is one, in this process; PostgreSQL is one server
//! (`SA_BENCH_POSTGRES_URL`), the daemon in a schema of its own, DBOS in a
//! database of its own. Both run 8 at a time. The daemon's figure is its
//! jobs/s from the first submit to the last finish; DBOS's the same for
//! its workflows, measured by `benches/peers/dbos_agents.py`, which runs in
//! a virtualenv this bench makes once under `~/.cache/structured-agents`
//! (`benches/peers/requirements.txt` pins DBOS). `SA_BENCH_PEER_RUNS`
//! changes the number of runs (default 2,000).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

#[path = "support/daemon.rs"]
mod daemon;
#[path = "support/plugin.rs"]
mod plugin;
#[path = "support/site.rs"]
mod site;
#[path = "support/store.rs"]
mod store;

use daemon::{Daemon, metric, start_env};
use store::{connect, drop_schema, fresh_schema, postgres_env, postgres_url};

/// Runs at once on both sides: the daemon's workers, DBOS's concurrency.
const AT_ONCE: usize = 8;

const SCRIPT: &str = "replies:\n  - turn: 1\n    tool_calls: [{name: add, arguments: {a: 2, b: 3}}]\n  - turn: 2\n    content: \"5\"\n";

const BUNDLE: &str = "name: agent\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\ntools:\n  - {name: add, kind: plugin, plugin: calculator, effect: idempotent}\n";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The Python that runs DBOS: a virtualenv made once with the pinned
/// requirements.
fn dbos_python() -> PathBuf {
    let requirements = root().join("benches/peers/requirements.txt");
    let text = std::fs::read_to_string(&requirements).expect("benches/peers/requirements.txt");
    let home = std::env::var("HOME").expect("HOME is set");
    let venv = Path::new(&home).join(".cache/structured-agents/bench-peers");
    let stamp = venv.join(format!(
        ".complete-{}",
        structured_agents::hex::sha256_hex(text.as_bytes())
    ));
    if !stamp.exists() {
        let made = Command::new("python3")
            .arg("-m")
            .arg("venv")
            .arg(&venv)
            .status();
        assert!(
            made.is_ok_and(|s| s.success()),
            "python3 -m venv {}",
            venv.display()
        );
        let installed = Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
            .arg(&requirements)
            .status();
        assert!(
            installed.is_ok_and(|s| s.success()),
            "pip install -r {}",
            requirements.display()
        );
        std::fs::write(&stamp, "").unwrap();
    }
    venv.join("bin/python")
}

fn write_site(dir: &Path, endpoint: &str, plugin: &Path) {
    let config = site::Config {
        request_timeout: "60s",
        ..site::Config::new(endpoint, AT_ONCE)
    };
    site::write_site(dir, &config);
    std::fs::copy(plugin, dir.join("plugins/libsa_plugin_calculator.so")).unwrap();
    site::put_bundle(dir, "agent", BUNDLE);
}

/// Submits `runs` jobs of the agent in batches and waits for all to
/// succeed: jobs/s from the first submit to the last finish.
async fn daemon_rate(http: &reqwest::Client, d: &Daemon, runs: usize, label: &str) -> f64 {
    let succeeded = || {
        metric(
            http,
            d,
            "structured_agents_jobs_finished_total{bundle=\"agent\",state=\"succeeded\"}",
        )
    };
    let before = succeeded().await;
    let started = Instant::now();
    for chunk in (0..runs).collect::<Vec<_>>().chunks(1000) {
        let jobs: Vec<Value> = chunk
            .iter()
            .map(|i| json!({"bundle": "agent", "input": format!("{label} {i}")}))
            .collect();
        let response = http
            .post(format!("{}/v1/jobs/batch", d.base))
            .json(&json!({"jobs": jobs}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 201, "the runs are accepted");
    }
    let deadline = Instant::now() + Duration::from_secs(1800);
    while succeeded().await < before + runs {
        assert!(
            Instant::now() < deadline,
            "the daemon's runs did not all succeed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    runs as f64 / started.elapsed().as_secs_f64()
}

/// DBOS's workflows/s over the same mock, in a database of its own.
async fn dbos_rate(python: &Path, model_url: &str, runs: usize) -> f64 {
    let database = format!("sa_bench_dbos_{}", uuid::Uuid::new_v4().simple());
    connect()
        .await
        .batch_execute(&format!("CREATE DATABASE {database}"))
        .await
        .unwrap();
    let url = postgres_url();
    let (server, _) = url
        .rsplit_once('/')
        .expect("a database in SA_BENCH_POSTGRES_URL");
    // SQLAlchemy, under DBOS, takes only the `postgresql` scheme.
    let server = server.replacen("postgres://", "postgresql://", 1);
    let output = tokio::process::Command::new(python)
        .arg(root().join("benches/peers/dbos_agents.py"))
        .args(["--model-url", model_url, "--database-url"])
        .arg(format!("{server}/{database}"))
        .args([
            "--runs",
            &runs.to_string(),
            "--concurrency",
            &AT_ONCE.to_string(),
        ])
        .output()
        .await
        .unwrap();
    connect()
        .await
        .batch_execute(&format!("DROP DATABASE {database} WITH (FORCE)"))
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "dbos_agents.py failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    let answer: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    answer["runs_per_second"].as_f64().unwrap()
}

fn main() {
    let runs: usize = std::env::var("SA_BENCH_PEER_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    // Made before anything is measured: a build and an install are not
    // what the figures are about.
    let plugin = plugin::calculator();
    let python = dbos_python();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let server = site::mock(SCRIPT).await;
        let schema = fresh_schema();
        let env = postgres_env(&schema);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let dir = tempfile::tempdir().unwrap();
        write_site(dir.path(), &server.base_url(), &plugin);
        let d = start_env(dir.path(), &env);
        let http = reqwest::Client::new();
        daemon_rate(&http, &d, runs.min(200), "warm").await;
        let ours = daemon_rate(&http, &d, runs, "run").await;
        drop(d);
        drop_schema(&schema).await;
        let model_url = format!("{}/chat/completions", server.base_url());
        let theirs = dbos_rate(&python, &model_url, runs).await;
        println!(
            "durable agent runs (2 model calls + 1 tool), {runs} runs, {AT_ONCE} at a time, PostgreSQL (synchronous_commit on)"
        );
        println!("  structured-agents  {ours:.0} runs/s");
        println!("  DBOS 3.4           {theirs:.0} runs/s");
        println!("  ratio              {:.1}   (aim, issue 47: >= 20)", ours / theirs);
    });
}
