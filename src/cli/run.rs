//! `structured-agents run`: one job, in-process, events printed as they happen.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use tokio_util::sync::CancellationToken;

use super::printer::{Format, Printer};
use crate::bundle::{self, EndpointRef, LoadContext, ToolEnv};
use crate::events::{EventSink, RunContext};
use crate::kernel::{OnMaxTurns, RunFailure};
use crate::model::ModelCatalog;
use crate::registry::{BundleIdentity, LoadedBundle};
use crate::runner::{RunOptions, Runner};
use crate::types::{RunResult, TerminationReason};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The bundle directory (holding bundle.yaml).
    pub bundle_dir: PathBuf,
    /// The job's input (`{{ input }}` in the prompts).
    #[arg(long, short)]
    pub input: String,
    /// A template variable, NAME=VALUE (repeatable).
    #[arg(long = "var", value_name = "NAME=VALUE")]
    pub vars: Vec<String>,
    /// Send model requests to this OpenAI-compatible base URL (…/v1) instead of the bundle's endpoint.
    #[arg(long, env = "SA_ENDPOINT")]
    pub endpoint: Option<String>,
    /// Print events as JSON lines.
    #[arg(long)]
    pub json: bool,
    /// Model-plugin configs (`<name>.toml`) the bundle may name.
    #[arg(long, env = "SA_MODELS_DIR", default_value = "config/models")]
    pub models_dir: PathBuf,
    #[command(flatten)]
    pub egress: EgressArgs,
}

/// The `egress.allow` of the commands that run a bundle in this process.
#[derive(Debug, Clone, Default, Args)]
pub struct EgressArgs {
    /// Let the bundle's own MCP servers and remote agents reach this URL (repeatable).
    ///
    /// As `egress.allow` in the daemon config (docs/security.md): scheme, host,
    /// port (`:*` for any) and path prefix, such as `http://127.0.0.1:9000`.
    /// Without it they may reach any host but this machine and private
    /// networks; with it, only the URLs listed.
    #[arg(
        long = "egress-allow",
        value_name = "URL",
        env = "SA_EGRESS_ALLOW",
        value_delimiter = ','
    )]
    pub allow: Vec<String>,
}

impl EgressArgs {
    /// The rule these flags make.
    pub fn egress(&self) -> anyhow::Result<crate::egress::Egress> {
        if self.allow.is_empty() {
            return Ok(crate::egress::Egress::default());
        }
        crate::egress::Egress::new(Some(&self.allow)).context("--egress-allow")
    }
}

/// Loads a bundle directory with the model configs of `models_dir`.
pub async fn load_bundle(
    dir: &std::path::Path,
    models_dir: &std::path::Path,
) -> anyhow::Result<crate::bundle::Bundle> {
    let (dir, models_dir) = (dir.to_path_buf(), models_dir.to_path_buf());
    tokio::task::spawn_blocking(move || {
        let catalog = ModelCatalog::load(&models_dir).map_err(|e| anyhow::anyhow!("{e}"))?;
        bundle::load_dir(
            &dir,
            &LoadContext {
                endpoints: None,
                models: &catalog,
                histories: &bundle::HistoryPlugins::default(),
            },
        )
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("the bundle is not valid")
    })
    .await?
}

/// Loads and binds a bundle directory; `endpoint` overrides its endpoint.
pub async fn load_for_run(
    dir: &std::path::Path,
    models_dir: &std::path::Path,
    endpoint: Option<&str>,
    egress: &EgressArgs,
) -> anyhow::Result<LoadedBundle> {
    let env = ToolEnv {
        egress: Arc::new(egress.egress()?),
        ..ToolEnv::default()
    };
    let bundle = load_bundle(dir, models_dir).await?;
    let endpoint = match endpoint {
        Some(url) => EndpointRef::Url(url.to_string()),
        None => bundle.endpoint.clone(),
    };
    let backend = crate::endpoints::backend_for(&endpoint, &BTreeMap::new())?;
    // Binding may start MCP servers, which blocks: keep it off the runtime threads.
    let (bundle, tools) = tokio::task::spawn_blocking(move || {
        let mut bundle = bundle;
        let tools = bundle::build_tools(&mut bundle, &env);
        (bundle, tools)
    })
    .await?;
    let tools = Arc::new(tools.map_err(|e| anyhow::anyhow!("{e}"))?);
    let identity = BundleIdentity::unbound(&bundle.content_digest);
    Ok(LoadedBundle::new(bundle, identity, tools, backend))
}

pub async fn run(args: RunArgs) -> anyhow::Result<i32> {
    let loaded = load_for_run(
        &args.bundle_dir,
        &args.models_dir,
        args.endpoint.as_deref(),
        &args.egress,
    )
    .await?;
    let bundle = &loaded.bundle;
    let variables = super::parse_vars(&args.vars)?;
    let messages = bundle.prompts.render(&args.input, &variables)?;
    let options = RunOptions {
        tools: crate::bundle::requested_tools(&variables)?,
        ..Default::default()
    };
    let kernel = Runner::local().kernel(&loaded, &options)?;

    let format = if args.json {
        Format::Json
    } else {
        Format::Human
    };
    let context = RunContext {
        run_id: uuid::Uuid::now_v7().to_string(),
        bundle: bundle.name().to_string(),
        bundle_version: bundle.version().to_string(),
        parent: None,
    };
    let sink = EventSink::new(context, 1, Arc::new(Printer::new(format)));
    let succeed_at_max_turns = kernel.config().on_max_turns == OnMaxTurns::Succeed;
    Ok(
        match kernel.run(messages, &sink, cancel_on_ctrl_c()).await {
            Ok(result) => finished(&result, format, succeed_at_max_turns),
            Err(err) => failed(err),
        },
    )
}

/// A token Ctrl-C cancels.
fn cancel_on_ctrl_c() -> CancellationToken {
    let cancel = CancellationToken::new();
    let on_ctrl_c = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_ctrl_c.cancel();
        }
    });
    cancel
}

/// A run that ended: its answer printed (for people), and the exit code
/// its termination reason gives.
fn finished(result: &RunResult, format: Format, succeed_at_max_turns: bool) -> i32 {
    let answer = result
        .final_output
        .clone()
        .or_else(|| result.final_message.content.clone())
        .unwrap_or_default();
    if format == Format::Human {
        println!("\n{answer}");
    }
    match result.termination_reason {
        TerminationReason::NoToolCalls
        | TerminationReason::TerminationTool
        | TerminationReason::WorkflowFinished => 0,
        TerminationReason::MaxTurns if succeed_at_max_turns => 0,
        TerminationReason::MaxTurns => {
            eprintln!("error: {}", RunFailure::MaxTurns(result.turn_count));
            3
        }
        TerminationReason::Cancelled | TerminationReason::Timeout => 4,
        TerminationReason::Error
        | TerminationReason::NeedsAttention
        | TerminationReason::AwaitingApproval
        | TerminationReason::BudgetExceeded => 1,
    }
}

/// A run that failed, said on stderr (an approval park says the daemon is
/// needed); exit code 1.
fn failed(err: crate::kernel::RunError) -> i32 {
    match err {
        crate::kernel::RunError::Parked(parked) => {
            if parked.kind == crate::approval::ParkedKind::Approval {
                eprintln!(
                    "error: tool `{}` (call {} of turn {}) needs a person's approval by the bundle's policy; approvals need the daemon, which keeps the job parked until someone decides: submit it with `structured-agents submit`",
                    parked.tool, parked.call_id, parked.turn
                );
            } else {
                eprintln!("error: {parked}");
            }
        }
        err => eprintln!("error: {err}"),
    }
    1
}
