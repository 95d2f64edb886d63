//! Verify: the crash matrix of a bundle, for `structured-agents verify`
//! and `POST /v1/bundles/{name}/verify`. It runs the bundle once against a
//! reply script (the mock server's format, never a model server) and notes
//! each journal write of that run; then, for every write, it runs a fresh
//! job that crashes just before and just after that write (see [`crash`]
//! for why that is what a SIGKILL leaves), resumes it from what its journal
//! kept, and counts how often each tool call really ran. [`report`] judges
//! the counts against each tool's declared `effect`.
//!
//! Every job runs in its own copy of the bundle directory under a work
//! directory (a temporary one for the CLI, one under the state directory
//! for the daemon), so a process tool's relative paths write there and never
//! into the bundle itself. By default only `read_only` tools really run:
//! every tool with a side effect is answered by a stand-in ([`stand_in`]),
//! since the matrix runs each call many times; the real tools run only when
//! asked ([`ToolMode::Real`]). Nothing else runs: no model server, and
//! `agent` tools fail as in `structured-agents run` (nested bundles need a
//! job).

mod crash;
pub mod refusal;
pub mod report;
pub mod stand_in;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::approval::ParkedCall;
use crate::bundle::{Bundle, EndpointRef, LoadContext, ToolEnv};
use crate::client::ScriptedBackend;
use crate::events::{EventSink, RunContext};
use crate::journal::{JournalEntry, RunJournal};
use crate::kernel::RunFailure;
use crate::mock::{Script, ScriptError};
use crate::model::ModelCatalog;
use crate::plugins::PluginRegistry;
use crate::registry::{BundleIdentity, LoadedBundle};
use crate::runner::{RunOptions, RunScope, Runner};
use crate::types::RunResult;
use crash::{CrashAt, CrashingStore, Execution, ExecutionCounter, Moment};
pub use refusal::Refusal;
pub use report::Report;
pub use stand_in::ToolMode;

/// How long a verify the daemon runs (a `verify` job) may take, all crash
/// points together: past it the worker stops it and the route answers 504.
pub const DAEMON_MAX_DURATION: std::time::Duration = std::time::Duration::from_secs(60);

/// A reply script, as verify takes it.
pub type Exchange = Script;

/// What to verify, and where.
pub struct Request {
    /// The bundle directory (holding bundle.yaml); copied, never run in place.
    pub dir: PathBuf,
    /// The model-plugin configs the bundle may name.
    pub models: Arc<ModelCatalog>,
    /// The reply script; `None` takes the bundle's own `scripted:` endpoint.
    pub exchange: Option<Script>,
    /// The job's input (`{{ input }}` in the prompts).
    pub input: String,
    pub variables: Map<String, Value>,
    /// Loaded plugins, for `plugin` tools (the daemon's; none for the CLI).
    pub plugins: Option<Arc<PluginRegistry>>,
    /// Where its MCP servers and remote agents may connect (the daemon's
    /// egress rule; the CLI's `--egress-allow`).
    pub egress: Arc<crate::egress::Egress>,
    /// Where the jobs' copies of the bundle go (a fresh directory in it,
    /// removed when verify ends).
    pub work_root: PathBuf,
    /// Whether tools with side effects really run (default: stand-ins).
    pub tools: ToolMode,
}

/// Why a bundle cannot be verified. Each says which bundle and what to do.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("the bundle in {dir} is not valid: {detail}")]
    Invalid { dir: PathBuf, detail: String },
    #[error(
        "bundle {bundle:?} ({dir}) sends its model requests to {endpoint}, and verify never calls a model server: give the replies as a reply script (docs/mock-server.md): --exchange FILE on the command line, `exchange` in the API's body"
    )]
    NeedsExchange {
        bundle: String,
        dir: PathBuf,
        endpoint: String,
    },
    #[error("the reply script: {0}")]
    Script(#[from] ScriptError),
    #[error("bundle {bundle:?}: {detail}")]
    Run { bundle: String, detail: String },
    #[error("the work directory {path}: {detail}")]
    Work { path: PathBuf, detail: String },
    #[error("verify stopped: {0}")]
    Task(String),
}

/// Runs the crash matrix of `request`'s bundle.
pub async fn verify(request: Request) -> Result<Report, VerifyError> {
    let bundle = load_bundle(&request.dir, &request.models).await?;
    let script = match (request.exchange.clone(), &bundle.endpoint) {
        (Some(script), _) => script,
        (None, EndpointRef::Scripted(file)) => {
            let file = file.clone();
            tokio::task::spawn_blocking(move || Script::load(&file))
                .await
                .map_err(|e| VerifyError::Task(e.to_string()))??
        }
        (None, _) => return Err(needs_exchange(&bundle)),
    };
    let options = RunOptions {
        tools: crate::bundle::requested_tools(&request.variables).map_err(|e| {
            VerifyError::Run {
                bundle: bundle.name().to_string(),
                detail: e.to_string(),
            }
        })?,
        ..Default::default()
    };
    let subject = Subject {
        run: format!("verify-{}", uuid::Uuid::now_v7().simple()),
        name: bundle.name().to_string(),
        version: bundle.version().to_string(),
        script,
        options,
        request,
    };
    let work = WorkDir::new(&subject.request.work_root).await?;
    let result = subject.matrix(&work).await;
    work.remove().await;
    result
}

/// Refuses to verify `bundle` without a reply script (`has_exchange`) when
/// its endpoint is not a `scripted:` one of its own: verify never calls a
/// model server. The API asks it before it queues a verify job.
pub fn check_exchange(bundle: &Bundle, has_exchange: bool) -> Result<(), VerifyError> {
    match (&bundle.endpoint, has_exchange) {
        (_, true) | (EndpointRef::Scripted(_), false) => Ok(()),
        (_, false) => Err(needs_exchange(bundle)),
    }
}

fn needs_exchange(bundle: &Bundle) -> VerifyError {
    VerifyError::NeedsExchange {
        bundle: bundle.name().to_string(),
        dir: bundle.dir.clone(),
        endpoint: describe_endpoint(&bundle.endpoint),
    }
}

/// A reply script given inline (the API's `exchange`), read as the mock
/// server reads its file.
pub fn parse_exchange(text: &str) -> Result<Script, VerifyError> {
    Ok(Script::parse(text, "exchange")?)
}

fn describe_endpoint(endpoint: &EndpointRef) -> String {
    match endpoint {
        EndpointRef::Named(name) => format!("the endpoint `{name}`"),
        EndpointRef::Url(url) => url.clone(),
        EndpointRef::Scripted(file) => file.display().to_string(),
    }
}

/// Loads a bundle directory as a fresh process would (off the runtime).
async fn load_bundle(dir: &Path, models: &Arc<ModelCatalog>) -> Result<Bundle, VerifyError> {
    let (dir, models) = (dir.to_path_buf(), models.clone());
    let task_dir = dir.clone();
    tokio::task::spawn_blocking(move || {
        crate::bundle::load_dir(
            &task_dir,
            &LoadContext {
                endpoints: None,
                models: &models,
                histories: &crate::bundle::HistoryPlugins::default(),
            },
        )
    })
    .await
    .map_err(|e| VerifyError::Task(e.to_string()))?
    .map_err(|e| VerifyError::Invalid {
        dir,
        detail: e.to_string(),
    })
}

/// The bundle under test and how each of its jobs is started.
struct Subject {
    request: Request,
    /// The reply script every job's model calls are answered from.
    script: Script,
    options: RunOptions,
    name: String,
    version: String,
    /// This verify's own prefix of its jobs' ids, which the tools' idempotency
    /// keys derive from: two verifies never share a key with each other or
    /// with a real job.
    run: String,
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
    /// The tools a stand-in answered.
    stood_in: Vec<String>,
}

/// A job crashed at one point, then resumed (when the crash came).
struct CrashPoint {
    crash: CrashAt,
    first: Attempt,
    resumed: Option<Attempt>,
}

impl Subject {
    /// The reference run, then every crash point of its writes.
    async fn matrix(&self, work: &WorkDir) -> Result<Report, VerifyError> {
        let dir = &self.request.dir;
        let reference = self
            .attempt(
                &work.world(dir, "reference").await?,
                &self.run,
                vec![],
                None,
                None,
            )
            .await?;
        if let End::Crashed = reference.end {
            return Err(VerifyError::Run {
                bundle: self.name.clone(),
                detail: "the reference run stopped without a crash point".into(),
            });
        }
        let mut points = Vec::new();
        for write in 1..=reference.writes.len() {
            for moment in [Moment::Before, Moment::After] {
                let crash = CrashAt { write, moment };
                let world = work
                    .world(dir, &format!("{}-{write}", moment.as_str()))
                    .await?;
                points.push(self.crash_point(&world, crash).await?);
            }
        }
        let mut report = Report::new(&self.name, &self.version, &reference, &points);
        report.real_tools = matches!(self.request.tools, ToolMode::Real);
        report.stand_ins = reference.stood_in.clone();
        Ok(report)
    }

    /// The bundle as a fresh process would load it from `world`, its model
    /// answered from the script: by the model server of the attempt before
    /// (which a crash of the daemon leaves running), else a new one. Calls
    /// run one at a time, so each crash point is one moment (a turn's calls
    /// in parallel reach no journal state the sequential order does not).
    async fn load(
        &self,
        world: &Path,
        before: Option<&Attempt>,
    ) -> Result<(LoadedBundle, Vec<String>), VerifyError> {
        let backend = match before {
            Some(attempt) => attempt.loaded.backend.clone(),
            None => Arc::new(ScriptedBackend::new("verify", self.script.clone())),
        };
        let mut bundle = load_bundle(world, &self.request.models).await?;
        bundle.raw.limits.max_concurrency = 1;
        let env = ToolEnv {
            plugins: self.request.plugins.clone(),
            egress: self.request.egress.clone(),
            ..ToolEnv::default()
        };
        let (bundle, tools) = tokio::task::spawn_blocking(move || {
            let tools = crate::bundle::build_tools(&mut bundle, &env);
            (bundle, tools)
        })
        .await
        .map_err(|e| VerifyError::Task(e.to_string()))?;
        let bound = tools.map_err(|e| VerifyError::Run {
            bundle: self.name.clone(),
            detail: format!("its tools cannot be bound: {e}"),
        })?;
        let (tools, stood_in) = self.request.tools.apply(&bound);
        let identity = BundleIdentity::unbound(&bundle.content_digest);
        Ok((
            LoadedBundle::new(bundle, identity, Arc::new(tools), backend),
            stood_in,
        ))
    }

    /// Job `job` crashed at `crash`, then resumed from its journal.
    async fn crash_point(&self, world: &Path, crash: CrashAt) -> Result<CrashPoint, VerifyError> {
        let job = format!("{}-{}-{}", self.run, crash.moment.as_str(), crash.write);
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
    ) -> Result<Attempt, VerifyError> {
        let (loaded, stood_in) = self.load(world, before).await?;
        let messages = loaded
            .bundle
            .prompts
            .render(&self.request.input, &self.request.variables)
            .map_err(|e| VerifyError::Run {
                bundle: self.name.clone(),
                detail: e.to_string(),
            })?;
        let store = Arc::new(CrashingStore::new(crash));
        let counter = Arc::new(ExecutionCounter::default());
        let context = RunContext {
            run_id: job.to_string(),
            bundle: self.name.clone(),
            bundle_version: self.version.clone(),
            parent: None,
        };
        let scope = RunScope::local(
            EventSink::new(context, 1, counter.clone()),
            RunJournal::new(job, journal, store.clone()),
            CancellationToken::new(),
        );
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
            stood_in,
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

/// The directory the jobs' copies of the bundle live in, removed when
/// verify ends (or, when its future is dropped, by [`Drop`]).
struct WorkDir(PathBuf);

impl WorkDir {
    async fn new(root: &Path) -> Result<Self, VerifyError> {
        let dir = root.join(format!("verify-{}", uuid::Uuid::new_v4().simple()));
        let made = dir.clone();
        blocking(move || {
            std::fs::create_dir_all(&made).map_err(|e| VerifyError::Work {
                path: made.clone(),
                detail: format!("cannot make it: {e}"),
            })
        })
        .await?;
        Ok(Self(dir))
    }

    /// A fresh copy of the bundle directory for one job.
    async fn world(&self, bundle_dir: &Path, name: &str) -> Result<PathBuf, VerifyError> {
        let (from, world) = (bundle_dir.to_path_buf(), self.0.join(name));
        let to = world.clone();
        blocking(move || {
            crate::bundle::copy_dir(&from, &to).map_err(|detail| VerifyError::Work {
                path: to.clone(),
                detail: format!("cannot copy bundle {} into it: {detail}", from.display()),
            })
        })
        .await?;
        Ok(world)
    }

    /// Removes the directory, off the runtime.
    async fn remove(mut self) {
        let dir = std::mem::take(&mut self.0);
        let _ = tokio::task::spawn_blocking(move || remove(&dir)).await;
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.0.as_os_str().is_empty() {
            return;
        }
        let dir = std::mem::take(&mut self.0);
        // Dropped with a cancelled verify: remove it off the runtime when
        // there is one.
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(move || remove(&dir))),
            Err(_) => remove(&dir),
        }
    }
}

fn remove(dir: &Path) {
    if let Err(e) = std::fs::remove_dir_all(dir)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot remove verify's work directory");
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, VerifyError> + Send + 'static,
) -> Result<T, VerifyError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| VerifyError::Task(e.to_string()))?
}
