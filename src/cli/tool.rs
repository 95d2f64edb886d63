//! `structured-agents tool run BUNDLE TOOL --args JSON`: one tool call
//! outside any job, through the engine's pipeline
//! ([`crate::tools::direct`]). `BUNDLE` is a bundle directory, bound here
//! as `tools` binds it; with `--remote` it is the name of a bundle the
//! daemon has loaded (`POST /v1/bundles/{name}/tools/{tool}:run`).
//!
//! Exit codes: 0 the tool answered, 1 it answered with an error result
//! (`bad_args`, `tool_error`, …, printed), 2 the call was refused or could
//! not be made.

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Subcommand};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::client::{Client, ServerArgs};
use crate::events::{EventSink, RunContext};
use crate::tools::direct;

#[derive(Debug, Args)]
pub struct ToolArgs {
    #[command(subcommand)]
    pub command: ToolCommand,
}

#[derive(Debug, Subcommand)]
pub enum ToolCommand {
    /// Run one tool call of a bundle, outside any job, and print its result.
    Run(RunArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The bundle directory (with --remote: the name of a bundle the daemon has loaded).
    pub bundle: String,
    /// The tool's name.
    pub tool: String,
    /// The call's arguments, a JSON object as a model would write it.
    #[arg(long = "args", value_name = "JSON", default_value = "{}")]
    pub arguments: String,
    /// Run it in the daemon (--server, --token) on the bundle it has loaded.
    #[arg(long)]
    pub remote: bool,
    /// Model-plugin configs (`<name>.toml`) the bundle may name.
    #[arg(long, env = "SA_MODELS_DIR", default_value = "config/models")]
    pub models_dir: PathBuf,
    /// Plugin libraries for `plugin` tools.
    #[arg(long, env = "SA_PLUGINS_DIR")]
    pub plugins_dir: Option<PathBuf>,
}

pub async fn tool(server: &ServerArgs, args: ToolArgs) -> anyhow::Result<i32> {
    match args.command {
        ToolCommand::Run(args) if args.remote => remote(server, &args).await,
        ToolCommand::Run(args) => local(args).await,
    }
}

async fn local(args: RunArgs) -> anyhow::Result<i32> {
    let dir = PathBuf::from(&args.bundle);
    let (bundle, tools) =
        super::inspect::bind(&dir, &args.models_dir, args.plugins_dir.clone()).await?;
    let context = RunContext {
        run_id: format!("tool-run-{}", uuid::Uuid::now_v7()),
        bundle: bundle.name().to_string(),
        bundle_version: bundle.version().to_string(),
        parent: None,
    };
    let events = EventSink::new(context, 1, Arc::new(crate::events::NullObserver));
    let cancel = CancellationToken::new();
    let on_ctrl_c = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_ctrl_c.cancel();
        }
    });
    let answer = direct::run(
        bundle.name(),
        &tools,
        &args.tool,
        &args.arguments,
        None,
        &cancel,
        &events,
    )
    .await;
    match answer {
        Ok(answer) => print(&serde_json::to_value(&answer)?),
        Err(refused) => {
            eprintln!("error: {refused}");
            Ok(2)
        }
    }
}

async fn remote(server: &ServerArgs, args: &RunArgs) -> anyhow::Result<i32> {
    let arguments: Value = match serde_json::from_str(&args.arguments) {
        Ok(value) => value,
        // Sent as text: the daemon's engine answers `bad_args` as in a job.
        Err(_) => Value::String(args.arguments.clone()),
    };
    let client = Client::new(server)?;
    let path = format!(
        "/v1/bundles/{}/tools/{}:run",
        segment(&args.bundle),
        segment(&args.tool)
    );
    let answer = match client
        .post(&path, serde_json::json!({"arguments": arguments}))
        .await
    {
        Ok(answer) => answer,
        Err(e) => {
            eprintln!("error: {e:#}");
            return Ok(2);
        }
    };
    print(&answer)
}

/// A path segment, percent-encoded (every byte but RFC 3986's unreserved).
fn segment(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Prints the result (a [`direct::DirectRun`]) as JSON on stdout: 0 for
/// an answer, 1 for an error result.
fn print(answer: &Value) -> anyhow::Result<i32> {
    println!("{}", serde_json::to_string_pretty(answer)?);
    Ok(if answer["is_error"] == Value::Bool(false) {
        0
    } else {
        1
    })
}
