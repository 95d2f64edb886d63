//! The command line: one `structured-agents` binary with subcommands. Each
//! subcommand lives in its own file; this one only declares the flags.

mod bench;
pub mod printer;
mod run;
mod validate;

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Runs LLM tool-calling agents as durable jobs.
#[derive(Debug, Parser)]
#[command(name = "structured-agents", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one job of a bundle in-process and print its events as they happen.
    Run(run::RunArgs),
    /// Check bundles (directories with bundle.yaml, or directories of them); exit non-zero on errors.
    Validate(validate::ValidateArgs),
    /// Print a JSON Schema, for editors.
    Schema {
        /// What to describe.
        #[arg(value_enum)]
        what: SchemaKind,
    },
    /// Serve the mock OpenAI-compatible model server from a script (tests and benchmarks).
    MockServer {
        /// The reply script (YAML).
        #[arg(long, env = "SA_MOCK_SCRIPT")]
        script: PathBuf,
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:8089", env = "SA_MOCK_LISTEN")]
        listen: SocketAddr,
        /// Keep every request for GET /_mock/requests.
        #[arg(long)]
        record: bool,
    },
    /// Measure overheads against limits measured in the same run.
    Bench(bench::BenchArgs),
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum SchemaKind {
    /// bundle.yaml
    Bundle,
}

/// Runs the parsed command; returns the process exit code.
pub async fn dispatch(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Run(args) => run::run(args).await,
        Command::Validate(args) => validate::validate(args).await,
        Command::Schema {
            what: SchemaKind::Bundle,
        } => {
            let schema = schemars::schema_for!(crate::bundle::RawBundle);
            println!("{}", serde_json::to_string_pretty(&schema)?);
            Ok(0)
        }
        Command::MockServer {
            script,
            listen,
            record,
        } => {
            let script = crate::mock::Script::load(&script)?;
            crate::mock::serve_mock(listen, script, record).await?;
            Ok(0)
        }
        Command::Bench(args) => bench::bench(args).await,
    }
}

/// Parses `--var k=v` flags.
pub fn parse_vars(vars: &[String]) -> anyhow::Result<serde_json::Map<String, serde_json::Value>> {
    let mut out = serde_json::Map::new();
    for var in vars {
        let Some((key, value)) = var.split_once('=') else {
            anyhow::bail!("--var {var:?}: expected NAME=VALUE");
        };
        out.insert(
            key.trim().to_string(),
            serde_json::Value::String(value.to_string()),
        );
    }
    Ok(out)
}
