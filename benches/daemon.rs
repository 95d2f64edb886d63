//! Daemon benchmarks (run with `cargo bench --bench daemon`), each reported
//! with the limit it is compared against, measured in the same run:
//!
//! 1. throughput: one-turn jobs submitted over HTTP and completed (event log
//!    on), against raw HTTP round trips/s to the same mock model server
//!    (`SA_BENCH_THROUGHPUT_JOBS`, default 2,000: more, to profile a run);
//! 2. reload latency: from a bundle's rename into the watched directory to
//!    its first job accepted and to that job completed (p50/p99); and a
//!    reload of a directory of 100 and of 1,000 bundles with one changed,
//!    and unchanged;
//! 3. memory per in-flight job with 10,000 jobs waiting on a slow mock server;
//! 4. durable: the per-turn cost of the step journal (daemon, synchronous=FULL)
//!    against the same turn in-process without persistence, and durable
//!    jobs/s at 8 workers with `full` and `fast` durability;
//! 5. scale: durable one-turn jobs/s on SQLite with one daemon and on
//!    PostgreSQL with one, two and three daemons (submissions spread over
//!    them), each beside raw HTTP round trips/s to the same mock server, with
//!    the CPU the PostgreSQL server and the daemons used, the WAL flushes and
//!    records per job (`pg_stat_wal`) and what the database's backends were
//!    doing (wait events sampled from `pg_stat_activity`). PostgreSQL from
//!    `SA_BENCH_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use structured_agents::mock::{MockServer, Script};

#[path = "support/daemon.rs"]
mod daemon;
#[path = "support/pg_probe.rs"]
mod pg_probe;
#[path = "support/site.rs"]
mod site;
#[path = "support/store.rs"]
mod store;

use daemon::{Daemon, metric, start, start_env};
use store::{drop_schema, postgres_url};

/// Workers of the daemon in the throughput benchmarks.
const WORKERS: usize = 8;

fn write_site(dir: &Path, endpoint: &str, workers: usize) {
    write_site_with(dir, endpoint, workers, "full", "");
}

/// `durability` is `full` or `fast` (`queue.durability`).
fn write_site_with(dir: &Path, endpoint: &str, workers: usize, durability: &str, extra: &str) {
    let queue = format!("durability = \"{durability}\"\n");
    let config = site::Config {
        queue: &queue,
        sections: extra,
        ..site::Config::new(endpoint, workers)
    };
    site::write_site(dir, &config);
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Jobs of bundle `b` that ended in `state`, from the daemon's counters.
async fn count(http: &reqwest::Client, d: &Daemon, state: &str) -> usize {
    let line = format!("structured_agents_jobs_finished_total{{bundle=\"b\",state=\"{state}\"}}");
    metric(http, d, &line).await
}

/// The limit: raw chat-completions round trips/s against the mock server.
async fn raw_round_trips(server: &MockServer, jobs: usize, concurrency: usize) -> f64 {
    let http = reqwest::Client::new();
    let url = format!("{}/chat/completions", server.base_url());
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "x"}]});
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (http, url, body) = (http.clone(), url.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..jobs / concurrency {
                http.post(&url)
                    .json(&body)
                    .send()
                    .await
                    .unwrap()
                    .bytes()
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (jobs / concurrency * concurrency) as f64 / started.elapsed().as_secs_f64()
}

async fn throughput(jobs: usize, concurrency: usize) {
    let server = site::mock("replies:\n  - content: ok\n").await;
    let raw_rate = raw_round_trips(&server, jobs, concurrency).await;

    let full = jobs_per_second(&server, "full", "", jobs, concurrency).await;
    let fast = jobs_per_second(&server, "fast", "", jobs, concurrency).await;
    let total = jobs / concurrency * concurrency;
    println!(
        "throughput: {total} one-turn jobs over HTTP, event log and journal on, {WORKERS} workers"
    );
    println!("  raw model round trips/s (limit)        {raw_rate:.0}");
    println!("  jobs/s, durability full (fsync'd)      {full:.0}  (aim: >= 3000)");
    println!("  jobs/s, durability fast                {fast:.0}");
    println!(
        "  ratio full / raw                       {:.3}",
        full / raw_rate
    );
}

async fn reload_latency(rounds: usize) {
    let server = MockServer::start(Script::parse("replies:\n  - content: ok\n", "bench").unwrap())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_site(dir.path(), &server.base_url(), 4);
    let daemon = start(dir.path());
    let http = reqwest::Client::new();
    let (mut accepted, mut completed) = (Vec::new(), Vec::new());
    for i in 0..rounds {
        let name = format!("drop{i}");
        let staging = dir.path().join(format!("staging-{name}"));
        std::fs::create_dir_all(&staging).unwrap();
        std::fs::write(staging.join("bundle.yaml"), site::one_turn(&name)).unwrap();
        let renamed = Instant::now();
        std::fs::rename(&staging, dir.path().join("bundles").join(&name)).unwrap();
        let id = loop {
            let r = http
                .post(format!("{}/v1/jobs", daemon.base))
                .json(&json!({"bundle": name, "input": "x"}))
                .send()
                .await
                .unwrap();
            if r.status().is_success() {
                break r.json::<Value>().await.unwrap()["id"]
                    .as_str()
                    .unwrap()
                    .to_string();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        accepted.push(renamed.elapsed());
        loop {
            let job: Value = http
                .get(format!("{}/v1/jobs/{id}", daemon.base))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if job["state"] == "succeeded" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        completed.push(renamed.elapsed());
    }
    let pct = |v: &mut Vec<Duration>, p: f64| {
        v.sort();
        v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1]
    };
    println!("reload latency over {rounds} bundle drops (limit: 1 s)");
    println!(
        "  rename → first job accepted   p50 {:?}  p99 {:?}",
        pct(&mut accepted, 0.5),
        pct(&mut accepted, 0.99)
    );
    println!(
        "  rename → first job completed  p50 {:?}  p99 {:?}",
        pct(&mut completed, 0.5),
        pct(&mut completed, 0.99)
    );
}

/// A directory of `bundles` bundles: `POST /v1/reload` after one of them
/// changed (it is rebound; the others are kept), and after nothing changed,
/// median and max over `rounds` reloads each.
async fn reload_directory(bundles: usize, rounds: usize) {
    let server = site::mock("replies:\n  - content: ok\n").await;
    let dir = tempfile::tempdir().unwrap();
    write_site(dir.path(), &server.base_url(), 4);
    for i in 0..bundles {
        site::put_bundle(
            dir.path(),
            &format!("b{i}"),
            &site::one_turn(&format!("b{i}")),
        );
    }
    let daemon = start(dir.path());
    let http = reqwest::Client::new();
    let reload = || async {
        let started = Instant::now();
        let outcome: Value = http
            .post(format!("{}/v1/reload", daemon.base))
            .json(&json!({}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        (started.elapsed(), outcome)
    };
    let (mut one_changed, mut unchanged) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let edited = format!("{}description: round {round}\n", site::one_turn("b0"));
        site::put_bundle(dir.path(), "b0", &edited);
        let (took, outcome) = reload().await;
        // The watcher may have reloaded first: then this reload found nothing.
        if outcome["changed"] == json!(["b0"]) {
            one_changed.push(took);
        }
        let (took, outcome) = reload().await;
        assert_eq!(outcome["changed"], json!([]), "{outcome}");
        unchanged.push(took);
    }
    let stats = |v: &mut Vec<Duration>| {
        v.sort();
        (
            v.get(v.len() / 2).copied().unwrap_or_default(),
            v.last().copied().unwrap_or_default(),
        )
    };
    let (changed_p50, changed_max) = stats(&mut one_changed);
    let (same_p50, same_max) = stats(&mut unchanged);
    println!(
        "reload of a directory of {bundles} bundles (POST /v1/reload round trip; aim, issue 33: < 10 ms, whatever the number of unchanged bundles)"
    );
    println!(
        "  one bundle changed ({} of {rounds} reloads)  p50 {changed_p50:?}  max {changed_max:?}",
        one_changed.len()
    );
    println!("  nothing changed                  p50 {same_p50:?}  max {same_max:?}");
}

async fn memory_per_job(in_flight: usize) {
    let server = site::mock("replies:\n  - content: ok\n    delay_ms: 600000\n").await;
    let dir = tempfile::tempdir().unwrap();
    write_site(dir.path(), &server.base_url(), in_flight);
    site::put_bundle(dir.path(), "slow", &site::one_turn("slow"));
    let daemon = start(dir.path());
    let http = reqwest::Client::new();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = rss_kib(daemon.child.id());
    let mut tasks = Vec::new();
    for c in 0..50 {
        let (http, base) = (http.clone(), daemon.base.clone());
        let per = in_flight / 50;
        tasks.push(tokio::spawn(async move {
            for i in 0..per {
                http.post(format!("{base}/v1/jobs"))
                    .json(&json!({"bundle": "slow", "input": format!("{c}-{i}")}))
                    .send()
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    // Jobs its workers are running now (a finished-jobs counter never sees them).
    let running = || metric(&http, &daemon, "structured_agents_jobs_in_flight");
    while running().await < in_flight && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let running = running().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let loaded = rss_kib(daemon.child.id());
    println!(
        "memory with {running} jobs in flight on a slow model server (aim: <= 24 KiB each, issue 34)"
    );
    println!(
        "  RSS idle {idle} KiB, loaded {loaded} KiB, per in-flight job {:.1} KiB",
        (loaded.saturating_sub(idle)) as f64 / running.max(1) as f64
    );
}

/// Jobs/s for `jobs` one-turn jobs with the given telemetry config.
async fn jobs_per_second(
    server: &MockServer,
    durability: &str,
    telemetry: &str,
    jobs: usize,
    concurrency: usize,
) -> f64 {
    let http = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    write_site_with(
        dir.path(),
        &server.base_url(),
        WORKERS,
        durability,
        telemetry,
    );
    site::put_bundle(dir.path(), "b", &site::one_turn("b"));
    let daemon = start(dir.path());
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..concurrency {
        let (http, base) = (http.clone(), daemon.base.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..jobs / concurrency {
                http.post(format!("{base}/v1/jobs"))
                    .json(&json!({"bundle": "b", "input": format!("{c}-{i}")}))
                    .send()
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let total = jobs / concurrency * concurrency;
    while count(&http, &daemon, "succeeded").await < total {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    total as f64 / started.elapsed().as_secs_f64()
}

/// Throughput with OTLP export and metrics on vs all telemetry off, alternating.
async fn telemetry_overhead(rounds: usize) {
    let server = site::mock("replies:\n  - content: ok\n").await;
    // An OTLP/HTTP receiver that accepts and discards.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let otlp = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().route("/v1/traces", axum::routing::post(|| async { "" }));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let off = "[telemetry]\nmetrics = false\n".to_string();
    let on = format!("[telemetry]\nmetrics = true\notlp_endpoint = \"{otlp}\"\n");
    let (mut offs, mut ons) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        offs.push(jobs_per_second(&server, "full", &off, 1000, 32).await);
        ons.push(jobs_per_second(&server, "full", &on, 1000, 32).await);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let (off_rate, on_rate) = (median(&mut offs), median(&mut ons));
    println!("telemetry overhead: {rounds} alternating rounds of 1000 one-turn jobs (medians)");
    println!("  all telemetry off (limit)     {off_rate:.0} jobs/s");
    println!("  OTLP spans + metrics on       {on_rate:.0} jobs/s");
    println!(
        "  difference                    {:.1} % (aim: < 5 %)",
        (off_rate - on_rate) / off_rate * 100.0
    );
}

/// Per-turn time of the step journal. A turn's time is taken as
/// (run of 21 turns − run of 1 turn) / 20, which cancels the fixed costs of a
/// job (submit, lease, prompt rendering, completion); each turn is a model
/// call answered with a call of an undeclared tool (no process, so tools add
/// nothing), recorded in the journal as a reply and a result.
async fn durable_turn_overhead(samples: usize) {
    use std::sync::Arc;
    use structured_agents::client::{EndpointSettings, HttpBackend};
    use structured_agents::events::{EventSink, NullObserver, RunContext};
    use structured_agents::kernel::{Kernel, KernelConfig};
    use structured_agents::model::OpenAiPlugin;
    use structured_agents::tools::ToolEngine;
    use structured_agents::types::Message;
    use tokio_util::sync::CancellationToken;

    const LONG: u32 = 21;
    let server =
        site::mock("replies:\n  - tool_calls: [{name: nope, arguments: {}, id: c}]\n").await;

    // In-process, no persistence.
    let backend =
        Arc::new(HttpBackend::new(EndpointSettings::new("bench", server.base_url())).unwrap());
    let kernel = |max_turns| {
        Kernel::new(
            KernelConfig {
                model: "m".into(),
                max_turns,
                ..KernelConfig::default()
            },
            Arc::new(OpenAiPlugin),
            backend.clone(),
            Arc::new(ToolEngine::new()),
            None,
        )
    };
    let (short, long) = (kernel(1), kernel(LONG));
    async fn run(k: &Kernel) -> f64 {
        let sink = EventSink::new(RunContext::default(), 1, Arc::new(NullObserver));
        let started = Instant::now();
        k.run(vec![Message::user("x")], &sink, CancellationToken::new())
            .await
            .unwrap();
        started.elapsed().as_secs_f64() * 1000.0
    }

    // Two daemons, journal on: durability full and fast.
    let http = reqwest::Client::new();
    let site = |durability: &str| {
        let dir = tempfile::tempdir().unwrap();
        write_site_with(dir.path(), &server.base_url(), 1, durability, "");
        for (name, turns) in [("short", 1), ("long", LONG)] {
            site::put_bundle(
                dir.path(),
                name,
                &format!("{}limits: {{max_turns: {turns}}}\n", site::one_turn(name)),
            );
        }
        let daemon = start(dir.path());
        (dir, daemon)
    };
    let (_full_dir, full) = site("full");
    let (_fast_dir, fast) = site("fast");
    let job_ms = |base: String, name: &'static str| {
        let http = http.clone();
        async move {
            let job: Value = http
                .post(format!("{base}/v1/jobs"))
                .json(&json!({"bundle": name, "input": "x"}))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let id = job["id"].as_str().unwrap().to_string();
            loop {
                let job: Value = http
                    .get(format!("{base}/v1/jobs/{id}"))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                // A run that ends at `max_turns` fails (the job says how
                // to raise it); waiting for `succeeded` hung here.
                let state = job["state"].as_str().unwrap_or_default();
                if ["succeeded", "failed", "dead", "cancelled"].contains(&state) {
                    assert_eq!(
                        job["termination_reason"], "max_turns",
                        "the bench's runs end at their turn limit: {job}"
                    );
                    let at = |k: &str| humantime::parse_rfc3339(job[k].as_str().unwrap()).unwrap();
                    return at("finished_at")
                        .duration_since(at("started_at"))
                        .unwrap()
                        .as_secs_f64()
                        * 1000.0;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    let per_turn = |daemon: &Daemon| {
        let (job_ms, base) = (&job_ms, daemon.base.clone());
        async move {
            (job_ms(base.clone(), "long").await - job_ms(base, "short").await) / f64::from(LONG - 1)
        }
    };

    let (mut plain, mut durable, mut quick) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..samples + 3 {
        let p = (run(&long).await - run(&short).await) / f64::from(LONG - 1);
        let d = per_turn(&full).await;
        let q = per_turn(&fast).await;
        // The first rounds warm connection pools and the store.
        if i >= 3 {
            plain.push(p);
            durable.push(d);
            quick.push(q);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let (plain, durable, quick) = (median(&mut plain), median(&mut durable), median(&mut quick));
    println!("durable turn overhead: medians of {samples} pairs of 1- and {LONG}-turn runs");
    println!("  turn in-process, no persistence (limit)  {plain:.3} ms");
    println!("  turn in the daemon, journal, FULL        {durable:.3} ms");
    println!("  turn in the daemon, journal, fast        {quick:.3} ms");
    println!(
        "  overhead per turn                        {:.3} ms  (aim, issue 47: <= 0.5 ms)",
        durable - plain
    );
}

/// CPU time (user + system, seconds) of the processes whose command name
/// starts with `postgres` (the server and its backends), from /proc.
fn postgres_cpu_seconds() -> f64 {
    let mut ticks = 0u64;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if !entry
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if stat[open + 1..close].starts_with("postgres") {
            ticks += stat_ticks(&stat);
        }
    }
    ticks as f64 / clock_ticks()
}

/// CPU time (seconds) of one process.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat_ticks(&stat) as f64 / clock_ticks()
}

/// utime + stime of a /proc/PID/stat line (fields 14 and 15).
fn stat_ticks(stat: &str) -> u64 {
    let Some(close) = stat.rfind(')') else {
        return 0;
    };
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    // After the command: state is field 3, so utime (14) is index 11.
    let at = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    at(11) + at(12)
}

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// One scale measurement: jobs/s, wall time, CPU seconds of PostgreSQL and
/// of the daemons.
struct ScaleRun {
    rate: f64,
    wall: f64,
    postgres_cpu: f64,
    daemons_cpu: f64,
}

/// Submits `jobs` one-turn jobs spread over `daemons` and waits until all
/// succeeded (summed over the daemons' counters).
async fn scale_run(daemons: &[Daemon], jobs: usize, concurrency: usize) -> ScaleRun {
    let http = reqwest::Client::new();
    let pg_before = postgres_cpu_seconds();
    let daemons_before: f64 = daemons.iter().map(|d| cpu_seconds(d.child.id())).sum();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..concurrency {
        let (http, base) = (http.clone(), daemons[c % daemons.len()].base.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..jobs / concurrency {
                let r = http
                    .post(format!("{base}/v1/jobs"))
                    .json(&json!({"bundle": "b", "input": format!("{c}-{i}")}))
                    .send()
                    .await
                    .unwrap();
                assert!(r.status().is_success(), "{}", r.status());
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let total = jobs / concurrency * concurrency;
    loop {
        let mut done = 0;
        for d in daemons {
            done += count(&http, d, "succeeded").await;
        }
        if done >= total {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let wall = started.elapsed().as_secs_f64();
    ScaleRun {
        rate: total as f64 / wall,
        wall,
        postgres_cpu: postgres_cpu_seconds() - pg_before,
        daemons_cpu: daemons
            .iter()
            .map(|d| cpu_seconds(d.child.id()))
            .sum::<f64>()
            - daemons_before,
    }
}

/// Durable one-turn jobs/s: SQLite with one daemon, PostgreSQL with one, two
/// and three daemons, each beside raw round trips/s to the same mock server.
async fn scale(jobs: usize, concurrency: usize) {
    let server = site::mock("replies:\n  - content: ok\n").await;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    println!(
        "scale: {jobs} durable one-turn jobs over HTTP, {WORKERS} workers per daemon, {cores} cores"
    );
    println!(
        "  {:<24} {:>8} {:>8} {:>7} {:>16} {:>14}",
        "set-up", "raw/s", "jobs/s", "×first", "PostgreSQL CPU", "daemons' CPU"
    );
    let mut first: Option<f64> = None;
    for (label, daemons) in [
        ("SQLite, 1 daemon", 0),
        ("PostgreSQL, 1 daemon", 1),
        ("PostgreSQL, 2 daemons", 2),
        ("PostgreSQL, 3 daemons", 3),
    ] {
        let raw = raw_round_trips(&server, jobs, concurrency).await;
        let dirs: Vec<tempfile::TempDir> = (0..daemons.max(1))
            .map(|_| tempfile::tempdir().unwrap())
            .collect();
        let schema = format!("sa_bench_{}", uuid::Uuid::new_v4().simple());
        let env = [
            ("STRUCTURED_AGENTS_QUEUE__BACKEND", "postgres".to_string()),
            ("STRUCTURED_AGENTS_QUEUE__URL", postgres_url()),
            ("STRUCTURED_AGENTS_QUEUE__SCHEMA", schema.clone()),
            (
                "STRUCTURED_AGENTS_QUEUE__POOL_SIZE",
                (WORKERS + 2).to_string(),
            ),
        ];
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let started: Vec<Daemon> = dirs
            .iter()
            .map(|dir| {
                write_site(dir.path(), &server.base_url(), WORKERS);
                site::put_bundle(dir.path(), "b", &site::one_turn("b"));
                start_env(dir.path(), if daemons == 0 { &[] } else { &env })
            })
            .collect();
        let probe = match daemons {
            0 => None,
            _ => Some(pg_probe::PgProbe::start(&postgres_url()).await),
        };
        let run = scale_run(&started, jobs, concurrency).await;
        let seen = match probe {
            Some(probe) => Some(probe.finish().await),
            None => None,
        };
        drop(started);
        if daemons > 0 {
            drop_schema(&schema).await;
        }
        let base = *first.get_or_insert(run.rate);
        println!(
            "  {label:<24} {raw:>8.0} {:>8.0} {:>7.2} {:>7.2} cores ({:>3.0} %) {:>7.2} cores",
            run.rate,
            run.rate / base,
            run.postgres_cpu / run.wall,
            run.postgres_cpu / run.wall / cores * 100.0,
            run.daemons_cpu / run.wall,
        );
        if let Some(seen) = seen {
            seen.print(jobs / concurrency * concurrency, run.wall);
        }
    }
    println!(
        "  (×first: jobs/s relative to SQLite with one daemon; aims, issue 47: PostgreSQL with one daemon >= 0.8 × SQLite, two daemons >= 1.8 × one, three >= two)"
    );
    println!(
        "  (WAL from pg_stat_wal, cluster-wide; backends: the states of this database's client backends, sampled every 10 ms)"
    );
}

/// `/v1/chat/completions` and `/api/query` overhead: requests/s and latency
/// through the daemon (each request a durable job) to a bundle with no
/// tools, against the same requests sent to the mock server directly, in
/// one run.
async fn chat_overhead(requests: usize, concurrency: usize) {
    let server = site::mock("replies:\n  - content: ok\n").await;
    let dir = tempfile::tempdir().unwrap();
    write_site_with(
        dir.path(),
        &server.base_url(),
        WORKERS,
        "full",
        "[runtime]\nrouter = \"b\"\n",
    );
    site::put_bundle(dir.path(), "b", &site::one_turn("b"));
    let daemon = start(dir.path());
    // Requests/s, p50 and p99 of `body` POSTed to `url`, each answer's
    // text at `answer` checked.
    let run = |url: String, body: Value, answer: &'static str| async move {
        let http = reqwest::Client::new();
        let started = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..concurrency {
            let (http, url, body) = (http.clone(), url.clone(), body.clone());
            tasks.push(tokio::spawn(async move {
                let mut latencies = Vec::new();
                for _ in 0..requests / concurrency {
                    let sent = Instant::now();
                    let reply: Value = http
                        .post(&url)
                        .json(&body)
                        .send()
                        .await
                        .unwrap()
                        .json()
                        .await
                        .unwrap();
                    assert_eq!(reply.pointer(answer).unwrap(), "ok", "{reply}");
                    latencies.push(sent.elapsed());
                }
                latencies
            }));
        }
        let mut latencies = Vec::new();
        for t in tasks {
            latencies.extend(t.await.unwrap());
        }
        latencies.sort();
        let rate = latencies.len() as f64 / started.elapsed().as_secs_f64();
        let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
        (rate, at(0.5), at(0.99))
    };
    let chat =
        |model: &str| json!({"model": model, "messages": [{"role": "user", "content": "x"}]});
    let answer = "/choices/0/message/content";
    let (raw, raw_p50, raw_p99) = run(
        format!("{}/chat/completions", server.base_url()),
        chat("m"),
        answer,
    )
    .await;
    let (daemon_rate, p50, p99) = run(
        format!("{}/v1/chat/completions", daemon.base),
        chat("bundle/b"),
        answer,
    )
    .await;
    let (query_rate, q50, q99) = run(
        format!("{}/api/query", daemon.base),
        json!({"query": "x"}),
        "/content",
    )
    .await;
    println!(
        "chat completions ({requests} requests, {concurrency} clients, {WORKERS} workers, durability full):"
    );
    println!("  direct to the mock:    {raw:.0} req/s, p50 {raw_p50:.2?}, p99 {raw_p99:.2?}");
    println!("  through the daemon:    {daemon_rate:.0} req/s, p50 {p50:.2?}, p99 {p99:.2?}");
    println!("  runtime /api/query:    {query_rate:.0} req/s, p50 {q50:.2?}, p99 {q99:.2?}");
    println!(
        "  ratio: {:.3} (chat completions), {:.3} (/api/query) of direct (each request a durable job)",
        daemon_rate / raw,
        query_rate / raw
    );
}

/// Accepted jobs/s of a bulk submit: `jobs` jobs through
/// `POST /v1/jobs/batch` in batches of 1,000, on SQLite (FULL) and on
/// PostgreSQL, with no worker taking them (`run_at` in an hour).
async fn bulk_submit(jobs: usize) {
    let server = site::mock("replies:\n  - content: ok\n").await;
    let http = reqwest::Client::new();
    let run_at =
        humantime::format_rfc3339(std::time::SystemTime::now() + Duration::from_secs(3600))
            .to_string();
    println!("bulk: {jobs} jobs through POST /v1/jobs/batch, 1,000 a request");
    for postgres in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        write_site(dir.path(), &server.base_url(), WORKERS);
        site::put_bundle(dir.path(), "b", &site::one_turn("b"));
        let schema = format!("sa_bench_{}", uuid::Uuid::new_v4().simple());
        let env = [
            ("STRUCTURED_AGENTS_QUEUE__BACKEND", "postgres".to_string()),
            ("STRUCTURED_AGENTS_QUEUE__URL", postgres_url()),
            ("STRUCTURED_AGENTS_QUEUE__SCHEMA", schema.clone()),
        ];
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let daemon = start_env(dir.path(), if postgres { &env } else { &[] });
        let started = Instant::now();
        for chunk in 0..jobs / 1000 {
            let batch: Vec<Value> = (0..1000)
                .map(|i| json!({"bundle": "b", "input": format!("{chunk}-{i}"), "run_at": run_at}))
                .collect();
            let response = http
                .post(format!("{}/v1/jobs/batch", daemon.base))
                .json(&json!({"jobs": batch}))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status().as_u16(), 201);
        }
        let rate = (jobs / 1000 * 1000) as f64 / started.elapsed().as_secs_f64();
        drop(daemon);
        if postgres {
            drop_schema(&schema).await;
        }
        let label = if postgres {
            "PostgreSQL"
        } else {
            "SQLite FULL"
        };
        println!("  {label:<12} {rate:>10.0} accepted jobs/s   (aim >= 20,000)");
    }
}

/// Writes and commits per one-turn job, counted by the queue itself
/// (`JobQueue::write_stats`), in process: 32 submitters and 8 workers doing
/// what the worker does for a one-turn job (the reply journaled with its
/// held events, the finish carrying the slot's next lease with the pin in
/// it; a lease of its own only when the slot found nothing), with no model
/// call between: the queue's own ceiling.
async fn commits_per_job(jobs: usize) {
    use std::sync::Arc;
    use structured_agents::queue::{JobQueue, NewJob, NextLease, Outcome, Pin, RetryPolicy};
    println!("commits: {jobs} one-turn jobs through the queue alone, 32 submitters, 8 workers");
    let dir = tempfile::tempdir().unwrap();
    let schema = format!("sa_bench_{}", uuid::Uuid::new_v4().simple());
    let sqlite: Arc<dyn JobQueue> = Arc::new(
        structured_agents::queue::sqlite::SqliteQueue::open(
            &dir.path().join("q.db"),
            RetryPolicy::default(),
        )
        .await
        .unwrap(),
    );
    let mut options = structured_agents::queue::postgres::PostgresOptions::new(postgres_url());
    options.schema = schema.clone();
    options.pool_size = WORKERS + 4;
    let postgres: Arc<dyn JobQueue> = Arc::new(
        structured_agents::queue::postgres::PostgresQueue::open(options, RetryPolicy::default())
            .await
            .unwrap(),
    );
    let mut rates = Vec::new();
    for (label, q) in [("SQLite FULL", sqlite), ("PostgreSQL", postgres)] {
        let before = q.write_stats();
        let started = Instant::now();
        let mut tasks = Vec::new();
        for c in 0..32 {
            let q = q.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..jobs / 32 {
                    let job = NewJob {
                        bundle: "b".into(),
                        input: format!("{c}-{i}"),
                        ..Default::default()
                    };
                    q.submit(job).await.unwrap();
                }
            }));
        }
        let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let total = jobs / 32 * 32;
        for w in 0..WORKERS {
            let (q, done) = (q.clone(), done.clone());
            tasks.push(tokio::spawn(async move {
                let pin: Arc<structured_agents::queue::Pinner> = Arc::new(|_: &str| {
                    Some(Pin {
                        version: "1".into(),
                        digest: "d".into(),
                    })
                });
                let worker = format!("w{w}");
                let ask = || NextLease {
                    worker: worker.clone(),
                    lease_for: Duration::from_secs(60),
                    n: 1,
                    pin: Some(pin.clone()),
                };
                let mut next = Vec::new();
                while done.load(std::sync::atomic::Ordering::Relaxed) < total {
                    if next.is_empty() {
                        let ask = ask();
                        next = q
                            .lease_many(&ask.worker, ask.lease_for, ask.n, ask.pin)
                            .await
                            .unwrap();
                    }
                    let Some(lease) = next.pop() else {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        continue;
                    };
                    let step = structured_agents::journal::JournalEntry {
                        scope: String::new(),
                        turn: 1,
                        step: "reply".into(),
                        body: "{}".into(),
                    };
                    q.record_steps(&lease.job.id, lease.attempt, &[step], &[])
                        .await
                        .unwrap();
                    // As the worker does: the finish carries the slot's next lease.
                    let ok = Outcome::Succeeded(json!("ok"));
                    let (_, leased) = q
                        .finish_and_lease(&lease.job.id, lease.attempt, ok, &[], None, ask())
                        .await
                        .unwrap();
                    next = leased;
                    done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let rate = total as f64 / started.elapsed().as_secs_f64();
        rates.push(rate);
        let after = q.write_stats();
        let (writes, commits) = (after.writes - before.writes, after.commits - before.commits);
        let statements = after.statements - before.statements;
        println!(
            "  {label:<12} {rate:>8.0} jobs/s   {:.2} writes/job   {:.2} commits/job   {:.2} statements/job (round trips; PostgreSQL)",
            writes as f64 / total as f64,
            commits as f64 / total as f64,
            statements as f64 / total as f64
        );
    }
    if let [sqlite, postgres] = rates[..] {
        println!(
            "  PostgreSQL ÷ SQLite {:.2}   (aims, issue 47: PostgreSQL >= 5,000 jobs/s and >= 1.0 × SQLite)",
            postgres / sqlite
        );
    }
    drop_schema(&schema).await;
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let only = |name: &str| {
        !args.iter().skip(1).any(|a| !a.starts_with('-')) || args.iter().any(|a| a == name)
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        if only("throughput") {
            let jobs = std::env::var("SA_BENCH_THROUGHPUT_JOBS")
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or(2000);
            throughput(jobs, 32).await;
        }
        if only("durable") {
            durable_turn_overhead(15).await;
        }
        if only("reload") {
            reload_latency(50).await;
            reload_directory(100, 10).await;
            reload_directory(1000, 10).await;
        }
        if only("telemetry") {
            telemetry_overhead(3).await;
        }
        if only("scale") {
            scale(2000, 32).await;
        }
        if only("chat") {
            chat_overhead(2000, 32).await;
        }
        if only("bulk") {
            bulk_submit(10_000).await;
        }
        if only("commits") {
            commits_per_job(4000).await;
        }
        if only("memory") {
            memory_per_job(10_000).await;
        }
    });
}
