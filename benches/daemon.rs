//! Daemon benchmarks (run with `cargo bench --bench daemon`), each reported
//! with the limit it is compared against, measured in the same run:
//!
//! 1. throughput: one-turn jobs submitted over HTTP and completed (event log
//!    on), against raw HTTP round trips/s to the same mock model server;
//! 2. reload latency: from a bundle's rename into the watched directory to
//!    its first job accepted and to that job completed (p50/p99);
//! 3. memory per in-flight job with 10,000 jobs waiting on a slow mock server.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use structured_agents::mock::{MockServer, Script};

struct Daemon {
    child: Child,
    base: String,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn write_site(dir: &Path, endpoint: &str, workers: usize) {
    write_site_with(dir, endpoint, workers, "");
}

fn write_site_with(dir: &Path, endpoint: &str, workers: usize, extra: &str) {
    for sub in ["bundles", "models", "state"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    std::fs::write(
        dir.join("config.toml"),
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[paths]\nbundles_dir = \"bundles\"\nmodels_dir = \"models\"\nplugins_dir = \"plugins\"\nstate_dir = \"state\"\n\
             [queue]\nworkers = {workers}\npoll_interval = \"100ms\"\nlease = \"120s\"\n\
             [endpoints.mock]\nbase_url = \"{endpoint}\"\nmax_concurrent = {workers}\nrequest_timeout = \"600s\"\n{extra}"
        ),
    )
    .unwrap();
}

fn bundle(name: &str) -> String {
    format!(
        "name: {name}\nversion: \"1\"\nmodel: {{endpoint: mock, name: m}}\nprompts: {{user: \"{{{{ input }}}}\"}}\n"
    )
}

fn start(dir: &Path) -> Daemon {
    let mut child = Command::new(env!("CARGO_BIN_EXE_structured-agents"))
        .args(["serve", "--config"])
        .arg(dir.join("config.toml"))
        .env("SA_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .expect("daemon did not start")
        .to_string();
    Daemon { child, base }
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

async fn count(http: &reqwest::Client, d: &Daemon, state: &str) -> usize {
    let metrics = http
        .get(format!("{}/metrics", d.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    metrics
        .lines()
        .find(|l| {
            l.starts_with(&format!(
                "structured_agents_queue_jobs{{state=\"{state}\"}}"
            ))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0) as usize
}

async fn throughput(jobs: usize, concurrency: usize) {
    let server = MockServer::start_on(
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        Script::parse("replies:\n  - content: ok\n", "bench").unwrap(),
        false,
    )
    .await
    .unwrap();
    let http = reqwest::Client::new();

    // The limit: raw chat-completions round trips against the same server.
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
    let raw_rate = (jobs / concurrency * concurrency) as f64 / started.elapsed().as_secs_f64();

    let job_rate = jobs_per_second(&server, "", jobs, concurrency).await;
    let total = jobs / concurrency * concurrency;
    println!("throughput: {total} one-turn jobs over HTTP, event log on, 16 workers");
    println!("  raw model round trips/s (limit)  {raw_rate:.0}");
    println!("  jobs submitted+completed/s       {job_rate:.0}");
    println!(
        "  ratio                            {:.3}",
        job_rate / raw_rate
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
        std::fs::write(staging.join("bundle.yaml"), bundle(&name)).unwrap();
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

async fn memory_per_job(in_flight: usize) {
    let server = MockServer::start_on(
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        Script::parse("replies:\n  - content: ok\n    delay_ms: 600000\n", "bench").unwrap(),
        false,
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_site(dir.path(), &server.base_url(), in_flight);
    std::fs::create_dir_all(dir.path().join("bundles/slow")).unwrap();
    std::fs::write(dir.path().join("bundles/slow/bundle.yaml"), bundle("slow")).unwrap();
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
    while count(&http, &daemon, "running").await < in_flight && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let running = count(&http, &daemon, "running").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let loaded = rss_kib(daemon.child.id());
    println!("memory with {running} jobs in flight on a slow model server (aim: < 64 KiB each)");
    println!(
        "  RSS idle {idle} KiB, loaded {loaded} KiB, per in-flight job {:.1} KiB",
        (loaded.saturating_sub(idle)) as f64 / running.max(1) as f64
    );
}

/// Jobs/s for `jobs` one-turn jobs with the given telemetry config.
async fn jobs_per_second(
    server: &MockServer,
    telemetry: &str,
    jobs: usize,
    concurrency: usize,
) -> f64 {
    let http = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    write_site_with(dir.path(), &server.base_url(), 16, telemetry);
    std::fs::create_dir_all(dir.path().join("bundles/b")).unwrap();
    std::fs::write(dir.path().join("bundles/b/bundle.yaml"), bundle("b")).unwrap();
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
    loop {
        let page: Value = http
            .get(format!(
                "{}/v1/jobs?state=succeeded&limit=1000",
                daemon.base
            ))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let done = page["jobs"].as_array().map_or(0, Vec::len);
        if done >= total.min(1000)
            && (total <= 1000 || page["next_cursor"].is_null() || done >= 1000)
        {
            // Count exactly with paging when more than one page.
            let mut count = 0;
            let mut cursor: Option<String> = None;
            loop {
                let url = match &cursor {
                    Some(c) => format!(
                        "{}/v1/jobs?state=succeeded&limit=1000&cursor={c}",
                        daemon.base
                    ),
                    None => format!("{}/v1/jobs?state=succeeded&limit=1000", daemon.base),
                };
                let page: Value = http.get(url).send().await.unwrap().json().await.unwrap();
                count += page["jobs"].as_array().map_or(0, Vec::len);
                match page["next_cursor"].as_str() {
                    Some(c) => cursor = Some(c.to_string()),
                    None => break,
                }
            }
            if count >= total {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    total as f64 / started.elapsed().as_secs_f64()
}

/// Throughput with OTLP export and metrics on vs all telemetry off, alternating.
async fn telemetry_overhead(rounds: usize) {
    let server = MockServer::start_on(
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        Script::parse("replies:\n  - content: ok\n", "bench").unwrap(),
        false,
    )
    .await
    .unwrap();
    // An OTLP/HTTP receiver that accepts and discards.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let otlp = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().route("/v1/traces", axum::routing::post(|| async { "" }));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let off = "[telemetry]\nmetrics = false\n".to_string();
    let on = format!("[telemetry]\nmetrics = true\notlp_endpoint = \"{otlp}\"\n");
    let (mut offs, mut ons) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        offs.push(jobs_per_second(&server, &off, 1000, 32).await);
        ons.push(jobs_per_second(&server, &on, 1000, 32).await);
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
            throughput(2000, 32).await;
        }
        if only("reload") {
            reload_latency(50).await;
        }
        if only("telemetry") {
            telemetry_overhead(3).await;
        }
        if only("memory") {
            memory_per_job(10_000).await;
        }
    });
}
