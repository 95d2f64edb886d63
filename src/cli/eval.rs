//! `structured-agents eval BUNDLE`: runs a bundle's eval suite on the
//! daemon (`POST /v1/bundles/{name}/evals`), waits for the eval job and
//! prints each case and the verdict. Exit 0 when the suite passes, 1 when
//! it fails, 2 when it cannot run (a refused request, an eval job that
//! failed or was cancelled) — for CI. With `--dir PATH` the suite is a
//! bundle directory's, run in a daemon of the command's own (`eval_dir`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::{Map, Value, json};

use super::client::{Client, ServerArgs};
use crate::evals::{CaseReport, CaseRun, Change, RunReport};

/// The characters of a failed case's answer printed.
const ANSWER_SHOWN: usize = 200;
/// How often the eval job is read while it runs.
const POLL: Duration = Duration::from_millis(500);

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// The bundle's name.
    pub bundle: String,
    /// The version under test (default: the loaded one).
    #[arg(long = "version", id = "bundle_version", value_name = "VERSION")]
    pub version: Option<String>,
    /// Run every case on this version too and report regressions and
    /// improvements case by case.
    #[arg(long, conflicts_with = "dir")]
    pub against: Option<String>,
    /// Evaluate this bundle directory instead of a loaded version: in a
    /// daemon of the command's own (temporary, loopback, its own queue),
    /// not the one --server names.
    #[arg(long, value_name = "PATH", conflicts_with = "bundle_version")]
    pub dir: Option<PathBuf>,
    /// With --dir: another bundle directory its daemon loads (a judge
    /// bundle, a bundle it runs nested), under its directory's name
    /// (repeatable).
    #[arg(long = "with", value_name = "PATH", requires = "dir")]
    pub with: Vec<PathBuf>,
    /// With --dir: the daemon config whose endpoints, model configs and
    /// prices its daemon uses (its paths, queue, keys and telemetry are
    /// the command's own).
    #[arg(long, value_name = "FILE", requires = "dir")]
    pub config: Option<PathBuf>,
    /// Only the cases with this tag (repeatable).
    #[arg(long = "cases", value_name = "TAG")]
    pub cases: Vec<String>,
    /// Case jobs in flight at once (1 to 64).
    #[arg(long, default_value_t = 4)]
    pub concurrency: u32,
    /// A budget limit of each case job, LIMIT=VALUE (repeatable): tokens,
    /// prompt_tokens, completion_tokens, cost, wall_time, tool_calls,
    /// model_calls.
    #[arg(long = "budget", value_name = "LIMIT=VALUE")]
    pub budget: Vec<String>,
    /// The suite passes at this mean score (0 to 1); without it, when every
    /// case passes.
    #[arg(long)]
    pub min_score: Option<f64>,
    /// Fail when a case that passed on --against fails.
    #[arg(long, requires = "against")]
    pub no_regressions: bool,
    /// Really run the tools with side effects (effect not `read_only`);
    /// by default stand-ins answer them with the cases' `tool_results`.
    #[arg(long)]
    pub real_tools: bool,
    /// Give up waiting after this long (the eval goes on in the daemon).
    #[arg(long, default_value = "1h")]
    pub wait: humantime::Duration,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn eval(server: &ServerArgs, args: EvalArgs) -> anyhow::Result<i32> {
    let Some(dir) = args.dir.clone() else {
        return eval_on(server, args).await;
    };
    let (bundle, with, config) = (args.bundle.clone(), args.with.clone(), args.config.clone());
    let own = super::eval_dir::OwnBundles {
        bundle: &bundle,
        dir: &dir,
        with: &with,
        config: config.as_deref(),
    };
    super::eval_dir::with_own_daemon(own, |server| async move { eval_on(&server, args).await })
        .await
}

/// The eval on the daemon `server` names.
async fn eval_on(server: &ServerArgs, args: EvalArgs) -> anyhow::Result<i32> {
    let client = Client::new(server)?;
    let mut body = json!({
        "tags": args.cases,
        "concurrency": args.concurrency,
        "no_regressions": args.no_regressions,
        "real_tools": args.real_tools,
    });
    for (key, value) in [("version", &args.version), ("against", &args.against)] {
        if let Some(value) = value {
            body[key] = json!(value);
        }
    }
    if let Some(min) = args.min_score {
        body["min_score"] = json!(min);
    }
    if !args.budget.is_empty() {
        body["limits"] = Value::Object(limits(&args.budget)?);
    }
    let job = client
        .post(&format!("/v1/bundles/{}/evals", args.bundle), body)
        .await?;
    let id = job["id"]
        .as_str()
        .context("the daemon's answer names no eval job")?
        .to_string();
    if !args.json {
        eprintln!("eval job {id}: running the suite of {}", args.bundle);
    }
    let job = ended(&client, &id, args.wait.into()).await?;
    if job["state"] != "succeeded" {
        bail!(
            "eval job {id} ended {}: {}",
            job["state"].as_str().unwrap_or("?"),
            job["error"].as_str().unwrap_or("no error recorded")
        );
    }
    let report: RunReport = serde_json::from_value(job["result"].clone())
        .with_context(|| format!("eval job {id}'s result is not an eval report"))?;
    match args.json {
        true => println!("{}", serde_json::to_string_pretty(&job["result"])?),
        false => print_report(&report),
    }
    Ok(if report.pass { 0 } else { 1 })
}

/// `--budget LIMIT=VALUE`s as a `limits` object: numbers as numbers,
/// durations (`wall_time=5m`) as text.
fn limits(budget: &[String]) -> anyhow::Result<Map<String, Value>> {
    let mut limits = Map::new();
    for limit in budget {
        let Some((key, value)) = limit.split_once('=') else {
            bail!("--budget {limit:?}: expected LIMIT=VALUE, such as cost=0.50 or tokens=2000");
        };
        let value = match value.parse::<f64>() {
            Ok(number) => json!(number),
            Err(_) => json!(value),
        };
        limits.insert(key.trim().to_string(), value);
    }
    Ok(limits)
}

/// Reads job `id` until it ends (or `wait` passes).
async fn ended(client: &Client, id: &str, wait: Duration) -> anyhow::Result<Value> {
    let started = Instant::now();
    loop {
        let job = client.get(&format!("/v1/jobs/{id}")).await?;
        let state = job["state"].as_str().unwrap_or_default();
        if matches!(state, "succeeded" | "failed" | "cancelled" | "dead") {
            return Ok(job);
        }
        if started.elapsed() > wait {
            bail!(
                "eval job {id} did not end within {}; it goes on: see `structured-agents job {id}`",
                humantime::format_duration(wait)
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

fn print_report(report: &RunReport) {
    for case in &report.cases {
        println!("{}", case_line(case));
        for reason in failed_reasons(&case.run) {
            println!("      {reason}");
        }
    }
    let against = match (&report.against, report.against_score) {
        (Some(version), Some(score)) => format!(" (version {version}: {score:.3})"),
        _ => String::new(),
    };
    println!(
        "\n{} {} version {}: {} passed, {} failed, score {:.3}{against}, cost ${:.4}",
        if report.pass { "PASS" } else { "FAIL" },
        report.bundle,
        report.version,
        report.passed,
        report.failed,
        report.score,
        report.cost_usd
    );
    for (what, cases) in [
        ("regressions", &report.regressions),
        ("improvements", &report.improvements),
    ] {
        if !cases.is_empty() {
            println!("{what}: {}", cases.join(", "));
        }
    }
    if report.real_tools {
        println!("The real tools ran, side effects and all.");
    } else if !report.stand_ins.is_empty() {
        println!(
            "Stand-ins answered {}: nothing of theirs really ran.",
            report.stand_ins.join(", ")
        );
    }
    println!("{}", report.verdict);
}

fn case_line(case: &CaseReport) -> String {
    let mark = if case.run.pass { "pass" } else { "FAIL" };
    let change = match case.change {
        Some(Change::Regressed) => "  regressed",
        Some(Change::Improved) => "  improved",
        _ => "",
    };
    let job = case.run.job_id.as_deref().unwrap_or("-");
    format!(
        "{mark}  {:<32} score {:.2}  job {job}{change}",
        case.case, case.run.score
    )
}

/// Why a case failed: what it answered (its start) or its error, and each
/// grader that did not pass.
fn failed_reasons(run: &CaseRun) -> Vec<String> {
    if run.pass {
        return Vec::new();
    }
    let answer = run.answer.iter().map(|a| {
        let start: String = a.chars().take(ANSWER_SHOWN).collect();
        let more = if start.len() < a.len() { "…" } else { "" };
        format!("answer: {start:?}{more}")
    });
    let error = answer.chain(run.error.iter().map(|e| format!("error: {e}")));
    let grades = run
        .grades
        .iter()
        .filter(|g| !g.pass)
        .map(|g| format!("{}: {}", g.grader, g.reason));
    error.chain(grades).collect()
}
