//! `structured-agents verify BUNDLE_DIR`: the crash matrix of a bundle
//! directory (the engine is `crate::verify`; this is its arguments and its
//! table). The jobs run in copies of the bundle under a temporary directory.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;

use crate::model::ModelCatalog;
use crate::types::StandIns;
use crate::verify::ToolMode;
use crate::verify::report::{Ran, Report};

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The bundle directory (holding bundle.yaml).
    pub bundle_dir: PathBuf,
    /// The reply script the model's side comes from (the mock server's
    /// format, docs/mock-server.md). Default: the bundle's own
    /// `scripted:` endpoint; a bundle pointing at a model server needs one.
    #[arg(long, value_name = "FILE")]
    pub exchange: Option<PathBuf>,
    /// The job's input (`{{ input }}` in the prompts).
    #[arg(long, short, default_value = "verify")]
    pub input: String,
    /// A template variable, NAME=VALUE (repeatable).
    #[arg(long = "var", value_name = "NAME=VALUE")]
    pub vars: Vec<String>,
    /// Print the matrix as one JSON document (for CI).
    #[arg(long)]
    pub json: bool,
    /// Model-plugin configs (`<name>.toml`) the bundle may name.
    #[arg(long, env = "SA_MODELS_DIR", default_value = "config/models")]
    pub models_dir: PathBuf,
    /// Really run the tools whose `effect` is not `read_only` (payments,
    /// mails: many times each, one run per crash point). Default: each is
    /// answered by a stand-in (`--tool-results`, or a placeholder).
    #[arg(long)]
    pub real_tools: bool,
    /// What the stand-ins answer: a JSON object of tool name → result.
    #[arg(long, value_name = "FILE", conflicts_with = "real_tools")]
    pub tool_results: Option<PathBuf>,
    #[command(flatten)]
    pub egress: super::run::EgressArgs,
}

/// `verify`: exit 0 when every call keeps its declared effect at every
/// crash point, 1 when one does not, 2 when the bundle cannot be verified.
pub async fn verify(args: VerifyArgs) -> anyhow::Result<i32> {
    let exchange = match &args.exchange {
        Some(file) => {
            let file = std::path::absolute(file)
                .with_context(|| format!("the reply script {}", file.display()))?;
            Some(crate::mock::Script::load(&file).map_err(|e| anyhow::anyhow!("{e}"))?)
        }
        None => None,
    };
    let models_dir = args.models_dir.clone();
    let models = tokio::task::spawn_blocking(move || ModelCatalog::load(&models_dir))
        .await?
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let request = crate::verify::Request {
        dir: args.bundle_dir.clone(),
        models: Arc::new(models),
        exchange,
        input: args.input.clone(),
        variables: super::parse_vars(&args.vars)?,
        plugins: None,
        egress: Arc::new(args.egress.egress()?),
        work_root: std::env::temp_dir(),
        tools: tool_mode(&args)?,
    };
    let report = crate::verify::verify(request)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print(&report);
    }
    Ok(if report.violations == 0 { 0 } else { 1 })
}

/// How the verify's tools are answered: `--real-tools`, or stand-ins with
/// `--tool-results`.
fn tool_mode(args: &VerifyArgs) -> anyhow::Result<ToolMode> {
    if args.real_tools {
        return Ok(ToolMode::Real);
    }
    let results = match &args.tool_results {
        None => Default::default(),
        Some(file) => {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("the tool results {}", file.display()))?;
            serde_json::from_str(&text).with_context(|| {
                format!(
                    "the tool results {}: expected a JSON object of tool name → result",
                    file.display()
                )
            })?
        }
    };
    Ok(ToolMode::StandIns(StandIns { results }))
}

/// The report as text: what ran, the crash matrix, each call's tally and
/// the verdict.
fn print(report: &Report) {
    print_header(report);
    print_crash_points(report);
    print_per_call(report);
    print_verdict(report);
}

/// What the reference run did and how the tools were answered.
fn print_header(report: &Report) {
    println!(
        "verify: bundle {:?} {} — the reference run made {} and {}, and ended {}",
        report.bundle,
        report.version,
        super::words::count(report.writes.len(), "journal write"),
        super::words::count(report.calls.len(), "tool call"),
        report.reference
    );
    if report.real_tools {
        println!("the bundle's tools really ran (--real-tools), side effects and all");
    } else if !report.stand_ins.is_empty() {
        println!(
            "stand-ins answered the tools with side effects ({}); nothing of theirs really ran (--real-tools runs them)",
            report.stand_ins.join(", ")
        );
    }
    println!(
        "each crash point is a new job, stopped there as a crash would stop it, then resumed from its journal\n"
    );
}

/// One line for each call at each crash point: how often it ran, and the
/// resumed job's outcome.
fn print_crash_points(report: &Report) {
    println!(
        "{:<48} {:<16} {:<12} {:<11} {:<13} resumed job",
        "crash point", "tool", "call", "effect", "ran"
    );
    for point in &report.crash_points {
        let at = format!(
            "{} write {} ({})",
            point.moment.as_str(),
            point.write,
            point.step
        );
        for call in &point.calls {
            let ran = match (call.ran, call.parked) {
                (Ran::Never, true) => "never, parks".to_string(),
                (Ran::Twice, _) => format!("twice ({}×)", call.runs),
                (ran, _) => ran.as_str().to_string(),
            };
            let flag = call
                .violation
                .as_deref()
                .map(|why| format!("  ✗ {why}"))
                .unwrap_or_default();
            println!(
                "{at:<48} {:<16} {:<12} {:<11} {ran:<13} {}{flag}",
                call.tool,
                format!("turn {} #{}", call.turn, call.position),
                call.effect,
                point.outcome
            );
        }
        if point.calls.is_empty() || point.failed {
            let flag = if point.failed {
                "  ✗ the resumed job failed"
            } else {
                ""
            };
            println!("{at:<48} {:<66}{}{flag}", "", point.outcome);
        }
    }
}

/// Each call's tally over all crash points.
fn print_per_call(report: &Report) {
    println!("\nper call:");
    for tool in &report.tools {
        println!(
            "  {} ({}, turn {} #{}): once at {}, twice at {}, never at {} ({} parked needs_attention), not reached at {} — {}",
            tool.tool,
            tool.effect,
            tool.turn,
            tool.position,
            tool.once,
            tool.twice,
            tool.never,
            tool.never_parked,
            tool.not_reached,
            if tool.violations == 0 {
                "as declared".to_string()
            } else {
                format!("{} broken", tool.violations)
            }
        );
    }
}

/// Whether every call kept its declared effect.
fn print_verdict(report: &Report) {
    if report.violations == 0 {
        println!(
            "\nverdict: every call keeps its declared effect at all {} crash points",
            report.crash_points.len()
        );
    } else {
        println!(
            "\nverdict: {} broken (✗ above): fix the tool's `effect` in bundle.yaml, or make the tool honour SA_IDEMPOTENCY_KEY",
            report.violations
        );
    }
}
