//! The command line: one `structured-agents` binary with subcommands. Each
//! subcommand lives in its own file; this one only declares the flags.

mod answers;
mod approvals;
mod bench;
mod chat;
mod client;
mod deliveries;
mod describe;
mod eval;
mod eval_dir;
mod fork;
mod import;
mod init;
mod inspect;
mod keys;
mod migrate;
pub mod printer;
mod release;
mod remote;
mod run;
mod runtime;
mod schedules;
mod simplify;
mod tool;
mod validate;
mod verify;
mod words;

pub use crate::telemetry::logging::init_logging;

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Runs LLM tool-calling agents as durable jobs.
#[derive(Debug, Parser)]
#[command(name = "structured-agents", version, about, propagate_version = true)]
pub struct Cli {
    /// Log format on stderr: `text` or `json` (for log shippers).
    #[arg(long, global = true, env = "STRUCTURED_AGENTS_LOG_FORMAT", value_enum)]
    pub log_format: Option<crate::config::LogFormat>,
    #[command(flatten)]
    pub server: client::ServerArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start the daemon: watch bundles, serve the API, run jobs from the queue.
    Serve {
        /// The config file (default: /etc/structured-agents/config.toml if present, else built-in defaults).
        #[arg(long, short, env = "STRUCTURED_AGENTS_CONFIG")]
        config: Option<PathBuf>,
        /// Start an empty SQLite queue even though the state directory was used before.
        ///
        /// Without it, a start that finds the queue file missing from a state directory
        /// that held one (its bundle copies or control file are there) refuses, naming
        /// the file: the queue, and every job in it, may have been deleted or moved.
        #[arg(long, env = "STRUCTURED_AGENTS_NEW_QUEUE")]
        new_queue: bool,
    },
    /// Apply the queue's schema migrations (SQLite file or PostgreSQL schema) and exit.
    Migrate {
        /// The config file whose [queue] is migrated.
        #[arg(long, short, env = "STRUCTURED_AGENTS_CONFIG")]
        config: Option<PathBuf>,
        /// Only report pending migrations; exit 1 when there are any.
        #[arg(long)]
        check: bool,
    },
    /// Run one job of a bundle in-process and print its events as they happen.
    Run(run::RunArgs),
    /// Run a bundle's eval suite on the daemon, each case as a job, and
    /// print each case and the verdict: exit 0 when the suite passes, 1
    /// when it fails, 2 when it cannot run.
    #[command(disable_version_flag = true)]
    Eval(eval::EvalArgs),
    /// Serve a version of a bundle the release gate holds (its eval is
    /// running, or rejected it): the operator's override.
    #[command(disable_version_flag = true)]
    Promote(release::ReleaseArgs),
    /// Keep a version the release gate holds from serving; its eval is not
    /// run again.
    #[command(disable_version_flag = true)]
    Reject(release::ReleaseArgs),
    /// Talk with a bundle of the daemon in the terminal (`--local`: a bundle directory in-process).
    Chat(chat::ChatArgs),
    /// Submit a job to the daemon.
    Submit(remote::SubmitArgs),
    /// The runtime's agents (local bundles and remote agents).
    Agents,
    /// Ask the runtime: its router bundle answers, calling agents (streamed).
    Query(runtime::QueryArgs),
    /// A group chat: agents answer in turn until the termination strategy stops them.
    Group(runtime::GroupArgs),
    /// Send a message envelope straight to one agent's endpoint.
    Direct {
        /// The agent's id (`structured-agents agents` lists them).
        agent: String,
        /// The message.
        #[arg(default_value = "Hello")]
        content: String,
    },
    /// Talk with the runtime: `agents`, `group TEXT`, `direct AGENT [TEXT]`, `exit`; anything else is a query.
    Interactive,
    /// List the daemon's jobs.
    Jobs {
        #[arg(long)]
        state: Option<String>,
        #[arg(long)]
        bundle: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: usize,
        #[arg(long)]
        json: bool,
    },
    /// Show one job.
    Job { id: String },
    /// A workflow job's artifacts (all of them, or one by name).
    Artifacts { id: String, name: Option<String> },
    /// Follow a job's events until it ends (resumes after dropped connections).
    Watch {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Run a job again: a new job with its bundle (at its current version),
    /// input, variables, messages, priority and limits.
    Rerun {
        id: String,
        /// Follow the new job's events until it ends.
        #[arg(long, short)]
        follow: bool,
        #[arg(long)]
        json: bool,
    },
    /// Fork a job: a new job that replays its turns before TURN from its
    /// journal (no model call, no tool call) and runs live from TURN on.
    Fork(fork::ForkArgs),
    /// Move a bundle's waiting and parked jobs to its current version, each
    /// only when its journal replays there.
    MigrateJobs(fork::MigrateJobsArgs),
    /// Cancel a queued or running job.
    Cancel { id: String },
    /// Resolve a job in needs_attention: its `unsafe` tool call was cut short
    /// by a crash and may or may not have had its effect.
    Resolve {
        id: String,
        /// Run the pending call again (you know a repetition is harmless).
        #[arg(long, conflicts_with_all = ["skip", "fail"])]
        retry: bool,
        /// Do not run it; the model sees this text as the call's result.
        #[arg(long, value_name = "RESULT", conflicts_with = "fail")]
        skip: Option<String>,
        /// With --skip: the supplied result is an error.
        #[arg(long, requires = "skip")]
        is_error: bool,
        /// End the job as failed, optionally with a reason.
        #[arg(long, value_name = "REASON", num_args = 0..=1, default_missing_value = "")]
        fail: Option<String>,
    },
    /// Show the call a job awaits approval for (tool, arguments, digest).
    Approvals {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Approve the call a job awaits approval for (or, with --edit, run it
    /// with other arguments).
    Approve {
        id: String,
        /// The call id (default: the one the job awaits).
        call: Option<String>,
        /// Run the call with these arguments instead (a JSON object,
        /// checked against the tool's parameters).
        #[arg(long, value_name = "JSON")]
        edit: Option<String>,
    },
    /// Deny the call a job awaits approval for: the model gets a tool error
    /// with the reason.
    Deny {
        id: String,
        call: Option<String>,
        #[arg(long)]
        reason: Option<String>,
    },
    /// List the daemon's bundles and their status.
    Bundles {
        #[arg(long)]
        json: bool,
    },
    /// Ask the daemon to reload every input (its config file, bundles, model
    /// configs, plugins) and wait for the outcome: exits 0 when applied, 1
    /// when some bundles failed (the rest applied), 2 when the reload was
    /// rejected (nothing changed). systemd's ExecReload runs this.
    Reload {
        /// Reach the daemon this config file describes (its server.listen
        /// address and token) instead of --server / --token.
        #[arg(long, env = "STRUCTURED_AGENTS_CONFIG")]
        config: Option<std::path::PathBuf>,
    },
    /// Check bundles (directories with bundle.yaml, or directories of them); exit non-zero on errors.
    Validate(validate::ValidateArgs),
    /// Manage API keys (`[auth] keys_file`): new, list, revoke.
    Keys(keys::KeysArgs),
    /// List, make, pause, resume, delete or run now the daemon's schedules
    /// (cron fires that submit a bundle's job).
    #[command(subcommand)]
    Schedules(schedules::SchedulesCommand),
    /// List the webhook deliveries of your jobs (the dead letters with
    /// `--state dead`) and redrive a dead one once its receiver is fixed.
    #[command(subcommand)]
    Deliveries(deliveries::DeliveriesCommand),
    /// Convert a bundle written for the Python agent kernel (`initial_context`,
    /// `max_turns`, `termination_tool`, `tools[].registry`, `registries`) into
    /// this format, and report what changed and what could not be converted.
    ///
    /// Each report line names the original key and its line. The result is
    /// checked with the loader `validate` uses. Exit 0 when everything was
    /// converted and the result loads, 1 when something was left out or it
    /// does not load yet, 2 when nothing could be converted.
    Import(import::ImportArgs),
    /// Create a new bundle to start from: bundle.yaml with every key, a tool, a scripted endpoint.
    Init(init::InitArgs),
    /// Print the keys a bundle's requests carry (tool_choice, grammar on each
    /// server family's wire, stop sequences), or why a server cannot take them.
    Grammar {
        /// The bundle directory.
        bundle_dir: PathBuf,
        /// Model-plugin configs (`<name>.toml`).
        #[arg(long, env = "SA_MODELS_DIR", default_value = "config/models")]
        models_dir: PathBuf,
        /// Plugin libraries for `plugin` tools.
        #[arg(long, env = "SA_PLUGINS_DIR")]
        plugins_dir: Option<PathBuf>,
        /// Print only what this server family gets (exit 1 when it cannot).
        #[arg(long = "family", value_enum, value_name = "SERVER")]
        family: Option<crate::model::ServerKind>,
    },
    /// List a bundle's resolved tools with their schemas and backends.
    Tools {
        /// The bundle directory.
        bundle_dir: PathBuf,
        #[arg(long, env = "SA_MODELS_DIR", default_value = "config/models")]
        models_dir: PathBuf,
        /// Plugin libraries for `plugin` tools.
        #[arg(long, env = "SA_PLUGINS_DIR")]
        plugins_dir: Option<PathBuf>,
    },
    /// Run one stage of a workflow bundle as a job of the daemon (default:
    /// the `simplify` stage of `implement-review`): it starts at that stage
    /// and ends after it, finished when the stage's event passes, else fatal.
    Simplify(simplify::SimplifyArgs),
    /// Run one tool call of a bundle outside any job: `tool run BUNDLE TOOL --args JSON`.
    Tool(tool::ToolArgs),
    /// List the plugins of the plugins directory with version, ABI and file hash.
    Plugins {
        /// Read `paths.plugins_dir` from this config.
        #[arg(long, short, env = "STRUCTURED_AGENTS_CONFIG")]
        config: Option<PathBuf>,
        /// Or list this directory.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
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
    /// The crash matrix of a bundle: run it against a reply script, crash
    /// it at every journal write, resume it, and show per tool call whether
    /// it ran once, twice or never.
    ///
    /// Each crash point is a new job in its own copy of the bundle directory
    /// (under the system's temporary directory): the bundle's tools run for
    /// real, no model server is called. Exit 0 when every call keeps its
    /// declared `effect`, 1 when one does not (an `unsafe` call ran twice, a
    /// call was lost, a resumed job failed), 2 when it cannot verify.
    Verify(verify::VerifyArgs),
    /// Print shell completions for this command to stdout.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) to stdout (the Debian package ships it).
    #[command(hide = true)]
    Manpage,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum SchemaKind {
    /// bundle.yaml
    Bundle,
}

/// Runs the parsed command; returns the process exit code.
pub async fn dispatch(cli: Cli) -> anyhow::Result<i32> {
    let server = cli.server;
    match cli.command {
        Command::Serve { config, new_queue } => {
            let loaded = crate::config::Config::load(config.as_deref())?;
            let log_filter = init_logging(
                cli.log_format.unwrap_or(loaded.telemetry.log_format),
                &loaded.telemetry.log_filter,
            );
            crate::daemon::serve(loaded, config, log_filter, new_queue).await?;
            Ok(0)
        }
        command => {
            let _ = init_logging(cli.log_format.unwrap_or_default(), "warn");
            dispatch_client(command, &server).await
        }
    }
}

/// Every command but `serve`, each handed to its file: one match, an arm a
/// command, so a new command is one line here; it stays one function.
async fn dispatch_client(command: Command, server: &client::ServerArgs) -> anyhow::Result<i32> {
    match command {
        Command::Serve { .. } => unreachable!("handled by dispatch"),
        Command::Run(args) => run::run(args).await,
        Command::Eval(args) => eval::eval(server, args).await,
        Command::Promote(args) => release::decide(server, args, "promote").await,
        Command::Reject(args) => release::decide(server, args, "reject").await,
        Command::Migrate { config, check } => migrate::migrate(config.as_deref(), check).await,
        Command::Plugins { config, dir } => plugins(config.as_deref(), dir).await,
        Command::Grammar {
            bundle_dir,
            models_dir,
            plugins_dir,
            family,
        } => inspect::grammar(&bundle_dir, &models_dir, plugins_dir, family).await,
        Command::Tools {
            bundle_dir,
            models_dir,
            plugins_dir,
        } => inspect::tools(&bundle_dir, &models_dir, plugins_dir).await,
        Command::Tool(args) => tool::tool(server, args).await,
        Command::Simplify(args) => simplify::simplify(server, args).await,
        Command::Chat(args) => chat::chat(server, args).await,
        Command::Submit(args) => remote::submit(server, args).await,
        Command::Agents => runtime::agents(server).await,
        Command::Query(args) => runtime::query(server, args).await,
        Command::Group(args) => runtime::group(server, args).await,
        Command::Direct { agent, content } => runtime::direct(server, &agent, &content).await,
        Command::Interactive => runtime::interactive(server).await,
        Command::Jobs {
            state,
            bundle,
            limit,
            json,
        } => remote::jobs(server, state, bundle, limit, json).await,
        Command::Job { id } => remote::job(server, id).await,
        Command::Artifacts { id, name } => remote::artifacts(server, id, name).await,
        Command::Watch { id, json } => remote::watch(server, id, json).await,
        Command::Rerun { id, follow, json } => remote::rerun(server, id, follow, json).await,
        Command::Fork(args) => fork::fork(server, args).await,
        Command::MigrateJobs(args) => fork::migrate_jobs(server, args).await,
        Command::Cancel { id } => remote::cancel(server, id).await,
        Command::Resolve {
            id,
            retry,
            skip,
            is_error,
            fail,
        } => resolve(server, id, retry, skip, is_error, fail).await,
        Command::Approvals { id, json } => approvals::list(server, id, json).await,
        Command::Approve { id, call, edit } => {
            let decision = approvals::decision(true, edit.as_deref(), None)?;
            approvals::decide(server, id, call, decision).await
        }
        Command::Deny { id, call, reason } => {
            let decision = approvals::decision(false, None, reason)?;
            approvals::decide(server, id, call, decision).await
        }
        Command::Bundles { json } => remote::bundles(server, json).await,
        Command::Reload { config } => remote::reload(server, config.as_deref()).await,
        Command::Validate(args) => validate::validate(args).await,
        Command::Keys(args) => keys::keys(args),
        Command::Schedules(command) => schedules::run(server, command).await,
        Command::Deliveries(command) => deliveries::run(server, command).await,
        Command::Init(args) => init::init(args),
        Command::Import(args) => import::import(args).await,
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
        Command::Verify(args) => verify::verify(args).await,
        Command::Completions { shell } => describe::completions(shell),
        Command::Manpage => describe::manpage(),
    }
}

/// `structured-agents plugins`: the plugin libraries of a directory, as the
/// daemon would load them.
async fn plugins(
    config: Option<&std::path::Path>,
    dir: Option<std::path::PathBuf>,
) -> anyhow::Result<i32> {
    let config = crate::config::Config::load(config)?;
    let dir = dir.unwrap_or(config.paths.plugins_dir.clone());
    let cache = config.paths.state_dir.join("plugin-cache");
    let (registry, errors) = tokio::task::spawn_blocking(move || {
        crate::plugins::PluginRegistry::load_dir(&dir, &cache, &Default::default())
    })
    .await?;
    for p in registry.list() {
        println!(
            "{:<20} {:<8} {:<9} abi {}  sha256 {}  {}",
            p.name,
            p.version,
            p.kind,
            p.abi,
            &p.sha256[..16],
            p.file.display()
        );
        if !p.tools.is_empty() {
            println!("{:<20} tools: {}", "", p.tools.join(", "));
        }
    }
    for e in &errors {
        eprintln!("error: {e}");
    }
    Ok(if errors.is_empty() { 0 } else { 1 })
}

/// `structured-agents resolve`: one of retry, skip with a result, or fail.
async fn resolve(
    server: &client::ServerArgs,
    id: String,
    retry: bool,
    skip: Option<String>,
    is_error: bool,
    fail: Option<String>,
) -> anyhow::Result<i32> {
    let body = match (retry, skip, fail) {
        (true, None, None) => serde_json::json!({"action": "retry"}),
        (false, Some(output), None) => {
            serde_json::json!({"action": "skip", "output": output, "is_error": is_error})
        }
        (false, None, Some(reason)) => serde_json::json!({
            "action": "fail",
            "reason": (!reason.is_empty()).then_some(reason),
        }),
        _ => {
            eprintln!(
                "error: say how to resolve job {id}: --retry, --skip RESULT or --fail [REASON]"
            );
            return Ok(2);
        }
    };
    remote::resolve(server, id, body).await
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
