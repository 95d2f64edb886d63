//! `structured-agents bench`: overheads reported as ratios against a limit
//! measured in the same run, on the same machine, against the same server.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::bundle::LoadContext;
use crate::events::{EventSink, NullObserver, RunContext};
use crate::mock::{MockServer, Script, ScriptedReply};
use crate::model::ModelCatalog;
use crate::registry::LoadedBundle;
use crate::runner::{RunOptions, Runner};
use crate::tools::ToolEngine;
use crate::types::Message;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// What to measure.
    #[arg(value_enum, default_value = "kernel")]
    pub what: BenchKind,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Concurrent runs (and concurrent raw requests for the limit).
    #[arg(long, default_value_t = 1)]
    pub concurrency: usize,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum BenchKind {
    /// Kernel turns/s against the mock server ÷ raw HTTP round trips/s against it.
    Kernel,
}

pub async fn bench(args: BenchArgs) -> anyhow::Result<i32> {
    match args.what {
        BenchKind::Kernel => kernel(args).await,
    }
}

/// Runs `work` from `concurrency` tasks for `seconds`; returns completions/s.
async fn rate<F, Fut>(seconds: f64, concurrency: usize, work: F) -> anyhow::Result<f64>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let work = Arc::new(work);
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency.max(1) {
        let work = work.clone();
        tasks.push(tokio::spawn(async move {
            let mut done = 0u64;
            while Instant::now() < until {
                work().await?;
                done += 1;
            }
            anyhow::Ok(done)
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

/// Kernel turns/s against the mock server ÷ raw HTTP round trips/s
/// against it, each the median of alternating short rounds.
async fn kernel(args: BenchArgs) -> anyhow::Result<i32> {
    let script = Script {
        queueing: None,
        mode: Default::default(),
        replies: vec![ScriptedReply {
            content: Some("ok".into()),
            ..Default::default()
        }],
    };
    let server = MockServer::start_on(
        tokio::net::TcpListener::bind("127.0.0.1:0").await?,
        script,
        false,
    )
    .await?;
    let url = format!("{}/chat/completions", server.base_url());
    let body = json!({"model": "bench", "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hi"}]});

    let http = reqwest::Client::builder().tcp_nodelay(true).build()?;
    let raw = {
        let (http, url, body) = (http.clone(), url.clone(), body.clone());
        move || {
            let (http, url, body) = (http.clone(), url.clone(), body.clone());
            async move {
                let response = http
                    .post(&url)
                    .json(&body)
                    .send()
                    .await?
                    .error_for_status()?;
                let value: serde_json::Value = response.json().await?;
                anyhow::ensure!(value.get("choices").is_some(), "no choices");
                Ok(())
            }
        }
    };

    let kernel = bench_kernel(&server.base_url())?;
    let turns = move || {
        let kernel = kernel.clone();
        async move {
            let sink = EventSink::new(RunContext::default(), 1, Arc::new(NullObserver));
            let result = kernel
                .run(
                    vec![Message::system("You are terse."), Message::user("hi")],
                    &sink,
                    CancellationToken::new(),
                )
                .await?;
            anyhow::ensure!(result.turn_count == 1, "expected one turn");
            Ok(())
        }
    };
    compare(&args, raw, turns).await?;
    Ok(0)
}

/// The kernel as a daemon builds it: a bundle bound to its backend, the
/// mock server at `base_url`.
fn bench_kernel(base_url: &str) -> anyhow::Result<Arc<crate::kernel::Kernel>> {
    let text = format!(
        "name: bench\nversion: \"1\"\nmodel: {{endpoint: \"{base_url}\", name: bench}}\nprompts: {{user: \"{{{{ input }}}}\"}}\n",
    );
    let context = LoadContext {
        endpoints: None,
        models: &ModelCatalog::builtin(),
        histories: &crate::bundle::HistoryPlugins::default(),
    };
    let here = std::path::Path::new(".");
    let bundle = crate::bundle::load_str(&text, here, &here.join("bench.yaml"), &context)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let backend = crate::endpoints::backend_for(&bundle.endpoint, &Default::default())?;
    let identity = crate::registry::BundleIdentity::unbound(&bundle.content_digest);
    let loaded = LoadedBundle::new(bundle, identity, Arc::new(ToolEngine::new()), backend);
    Ok(Arc::new(
        Runner::local().kernel(&loaded, &RunOptions::default())?,
    ))
}

/// Measures `raw` and `turns` in alternating rounds and prints their
/// medians and the median ratio.
async fn compare<R, RF, T, TF>(args: &BenchArgs, raw: R, turns: T) -> anyhow::Result<()>
where
    R: Fn() -> RF + Clone + Send + Sync + 'static,
    RF: std::future::Future<Output = anyhow::Result<()>> + Send,
    T: Fn() -> TF + Clone + Send + Sync + 'static,
    TF: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    // Warm up both paths (connection pools, allocator), then alternate short
    // rounds and report medians, so drift on a shared machine hits both alike.
    rate(0.5, args.concurrency, raw.clone()).await?;
    rate(0.5, args.concurrency, turns.clone()).await?;
    let rounds = ((args.seconds / 0.5).round() as usize).max(2);
    let (mut raw_rates, mut kernel_rates, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let r = rate(0.25, args.concurrency, raw.clone()).await?;
        let k = rate(0.25, args.concurrency, turns.clone()).await?;
        raw_rates.push(r);
        kernel_rates.push(k);
        ratios.push(k / r);
    }
    println!("concurrency            {}", args.concurrency);
    println!("rounds                 {rounds} × (0.25 s raw + 0.25 s kernel), medians:");
    println!("raw HTTP round trips/s {:.0}", median(&mut raw_rates));
    println!("kernel turns/s         {:.0}", median(&mut kernel_rates));
    println!(
        "ratio                  {:.3} (aim, issue 47: >= 0.95 at 1 and 8 in flight)",
        median(&mut ratios)
    );
    Ok(())
}
