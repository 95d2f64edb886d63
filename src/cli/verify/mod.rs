//! `structured-agents verify BUNDLE_DIR`: the crash matrix of a bundle. It
//! runs the bundle once against a reply script (the mock server's format,
//! never a model server) and notes each journal write of that run; then,
//! for every write, it runs a fresh job that crashes just before and just
//! after that write (see [`crash`] for why that is what a SIGKILL leaves),
//! resumes it from what its journal kept, and counts how often each tool
//! call really ran. [`report`] judges the counts against each tool's
//! declared `effect` and prints them.
//!
//! Every job runs in its own copy of the bundle directory under a temporary
//! directory, so a process tool's relative paths write there; the bundle's
//! tools run for real (they are what is being verified), and nothing else
//! does: no model server, and `agent` tools fail as in `structured-agents
//! run` (nested bundles need the daemon).

mod crash;
mod report;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::approval::ParkedCall;
use crate::bundle::{EndpointRef, ToolEnv};
use crate::events::{EventSink, RunContext};
use crate::journal::{JournalEntry, RunJournal};
use crate::kernel::RunFailure;
use crate::registry::{BundleIdentity, LoadedBundle};
use crate::runner::{RunOptions, RunScope, Runner};
use crate::types::RunResult;
use crash::{CrashAt, CrashingStore, Execution, ExecutionCounter, Moment};

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
}

/// `verify`: exit 0 when every call keeps its declared effect at every
/// crash point, 1 when one does not, 2 when the bundle cannot be verified.
pub async fn verify(args: VerifyArgs) -> anyhow::Result<i32> {
    let subject = Subject::new(&args).await?;
    let work = WorkDir::new()?;
    let reference = subject
        .attempt(
            &work.world(&subject.dir, "reference")?,
            "verify",
            vec![],
            None,
            None,
        )
        .await?;
    if let End::Crashed = reference.end {
        anyhow::bail!(
            "the reference run of {} stopped without a crash point",
            subject.name
        );
    }
    let mut points = Vec::new();
    for write in 1..=reference.writes.len() {
        for moment in [Moment::Before, Moment::After] {
            let crash = CrashAt { write, moment };
            let world = work.world(&subject.dir, &format!("{}-{write}", moment.as_str()))?;
            points.push(subject.crash_point(&world, crash).await?);
        }
    }
    let report = report::Report::new(&subject.name, &subject.version, &reference, &points);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        report.print();
    }
    Ok(if report.violations == 0 { 0 } else { 1 })
}

/// The bundle under test and how each of its jobs is started.
struct Subject {
    dir: PathBuf,
    models_dir: PathBuf,
    /// The reply script every job's model calls are answered from.
    script: PathBuf,
    input: String,
    variables: Map<String, Value>,
    options: RunOptions,
    name: String,
    version: String,
}

/// How one attempt of a job ended.
enum End {
    /// Stopped at its crash point.
    Crashed,
    Finished(RunResult),
    Parked(Box<ParkedCall>),
    Failed(String),
}

/// One attempt of a job: what its journal kept, which calls ran, how it ended.
struct Attempt {
    writes: Vec<Vec<JournalEntry>>,
    executions: Vec<Execution>,
    end: End,
    /// The bundle as this attempt loaded it (its tools, its model server).
    loaded: LoadedBundle,
}

/// A job crashed at one point, then resumed (when the crash came).
struct CrashPoint {
    crash: CrashAt,
    first: Attempt,
    resumed: Option<Attempt>,
}

impl Subject {
    async fn new(args: &VerifyArgs) -> anyhow::Result<Self> {
        let bundle = super::run::load_bundle(&args.bundle_dir, &args.models_dir).await?;
        let script = match (&args.exchange, &bundle.endpoint) {
            (Some(file), _) => file.clone(),
            (None, EndpointRef::Scripted(file)) => file.clone(),
            (None, endpoint) => anyhow::bail!(
                "bundle {:?} ({}) sends its model requests to {endpoint:?}, and verify never calls a model server: give the replies with --exchange FILE (a reply script, docs/mock-server.md)",
                bundle.name(),
                args.bundle_dir.display()
            ),
        };
        let script = std::path::absolute(&script)
            .with_context(|| format!("the reply script {}", script.display()))?;
        crate::mock::Script::load(&script).map_err(|e| anyhow::anyhow!("{e}"))?;
        let variables = super::parse_vars(&args.vars)?;
        let options = RunOptions {
            tools: crate::bundle::requested_tools(&variables).map_err(anyhow::Error::msg)?,
            ..Default::default()
        };
        Ok(Self {
            dir: args.bundle_dir.clone(),
            models_dir: args.models_dir.clone(),
            script,
            input: args.input.clone(),
            variables,
            options,
            name: bundle.name().to_string(),
            version: bundle.version().to_string(),
        })
    }

    /// The bundle as a fresh process would load it from `world`, its model
    /// answered from the script: by the model server of the attempt before
    /// (which a crash of the daemon leaves running), else a new one. Calls
    /// run one at a time, so each crash point is one moment (a turn's calls
    /// in parallel reach no journal state the sequential order does not).
    async fn load(&self, world: &Path, before: Option<&Attempt>) -> anyhow::Result<LoadedBundle> {
        let backend = match before {
            Some(attempt) => attempt.loaded.backend.clone(),
            None => {
                let endpoint = EndpointRef::Scripted(self.script.clone());
                crate::endpoints::backend_for(&endpoint, &BTreeMap::new())?
            }
        };
        let mut bundle = super::run::load_bundle(world, &self.models_dir).await?;
        bundle.raw.limits.max_concurrency = 1;
        let (bundle, tools) = tokio::task::spawn_blocking(move || {
            let tools = crate::bundle::build_tools(&mut bundle, &ToolEnv::default());
            (bundle, tools)
        })
        .await?;
        let tools = Arc::new(tools.map_err(|e| anyhow::anyhow!("{e}"))?);
        let identity = BundleIdentity::unbound(&bundle.content_digest);
        Ok(LoadedBundle::new(bundle, identity, tools, backend))
    }

    /// Job `job` crashed at `crash`, then resumed from its journal.
    async fn crash_point(&self, world: &Path, crash: CrashAt) -> anyhow::Result<CrashPoint> {
        let job = format!("verify-{}-{}", crash.moment.as_str(), crash.write);
        let first = self.attempt(world, &job, vec![], Some(crash), None).await?;
        let resumed = match first.end {
            End::Crashed => {
                let kept = first.writes.iter().flatten().cloned().collect();
                Some(self.attempt(world, &job, kept, None, Some(&first)).await?)
            }
            _ => None,
        };
        Ok(CrashPoint {
            crash,
            first,
            resumed,
        })
    }

    /// One attempt of `job`, as a fresh process: a new load of the bundle
    /// (no tool cache or plugin state survives), the journal it finds, the
    /// model server of the attempt `before` it.
    async fn attempt(
        &self,
        world: &Path,
        job: &str,
        journal: Vec<JournalEntry>,
        crash: Option<CrashAt>,
        before: Option<&Attempt>,
    ) -> anyhow::Result<Attempt> {
        let loaded = self.load(world, before).await?;
        let messages = loaded
            .bundle
            .prompts
            .render(&self.input, &self.variables)
            .map_err(|e| anyhow::anyhow!("bundle {:?}: {e}", self.name))?;
        let store = Arc::new(CrashingStore::new(crash));
        let counter = Arc::new(ExecutionCounter::default());
        let context = RunContext {
            run_id: job.to_string(),
            bundle: self.name.clone(),
            bundle_version: self.version.clone(),
            parent: None,
        };
        let scope = RunScope {
            sink: EventSink::new(context, 1, counter.clone()),
            journal: RunJournal::new(job, journal, store.clone()),
            cancel: CancellationToken::new(),
            budget: None,
        };
        let crashed = store.crashed();
        let runner = Runner::local();
        let end = tokio::select! {
            biased;
            () = crashed.cancelled() => End::Crashed,
            run = runner.run(&loaded, messages, &self.options, &scope) => End::of(run),
        };
        Ok(Attempt {
            writes: store.writes(),
            executions: counter.executions(),
            end,
            loaded,
        })
    }
}

impl End {
    fn of(run: Result<RunResult, RunFailure>) -> Self {
        match run {
            Ok(result) => End::Finished(result),
            Err(failure) => match failure.parked() {
                Some(parked) => End::Parked(Box::new(parked.clone())),
                None => End::Failed(failure.to_string()),
            },
        }
    }
}

/// The temporary directory the jobs' copies of the bundle live in, removed
/// when verify ends.
struct WorkDir(PathBuf);

impl WorkDir {
    fn new() -> anyhow::Result<Self> {
        let root = std::env::temp_dir().join(format!(
            "structured-agents-verify-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&root)
            .with_context(|| format!("cannot make the work directory {}", root.display()))?;
        Ok(Self(root))
    }

    /// A fresh copy of the bundle directory for one job.
    fn world(&self, bundle_dir: &Path, name: &str) -> anyhow::Result<PathBuf> {
        let world = self.0.join(name);
        copy_dir(bundle_dir, &world, 0).with_context(|| {
            format!(
                "cannot copy bundle {} into the work directory {}",
                bundle_dir.display(),
                world.display()
            )
        })?;
        Ok(world)
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Copies a bundle directory (following symlinks, leaving out `__pycache__`).
fn copy_dir(from: &Path, to: &Path, depth: usize) -> anyhow::Result<()> {
    anyhow::ensure!(
        depth < 32,
        "{}: nested deeper than 32 directories (a symlink loop?)",
        from.display()
    );
    std::fs::create_dir_all(to).with_context(|| to.display().to_string())?;
    for entry in std::fs::read_dir(from).with_context(|| from.display().to_string())? {
        let entry = entry.with_context(|| from.display().to_string())?;
        if entry.file_name() == "__pycache__" {
            continue;
        }
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        if std::fs::metadata(&source)
            .with_context(|| source.display().to_string())?
            .is_dir()
        {
            copy_dir(&source, &target, depth + 1)?;
        } else {
            std::fs::copy(&source, &target).with_context(|| source.display().to_string())?;
        }
    }
    Ok(())
}
