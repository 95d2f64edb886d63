//! The runner: the one place a loaded bundle runs as an agent. It builds the
//! bundle's kernel and runs it under a [`RunScope`] (the run's event sink,
//! journal scope and cancellation). Runs nested in a job — `agent` tools,
//! workflow agent and score stages, group-chat local agents — go through the
//! same door, each with its own scope under the step that started it, and
//! each pinned to the bundle content it started with: its identity is
//! journaled with the nested run's first step, and a resumed run gets that
//! content (from its copy in the store, when the bundle was edited since)
//! or fails saying why it is gone.
//!
//! Every nested run, and the router's reach of the agent directory, is
//! authorized here as the key that owns the job ([`RunScope::reach`], the
//! policy's `reach_bundle` rule): a bundle the key may not use is not in the
//! router's directory, and reaching it any other way is a tool error that
//! names the rule.
//!
//! How a run ends is a [`RunFailure`] or a [`RunResult`]; the failure turns
//! into the tool error of the call that started a nested run (beside its
//! type) and the worker turns a run into a job outcome (one place each).
//!
//! This module must not know about the queue, workers or HTTP.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Map;
use tokio_util::sync::CancellationToken;

use crate::access::policy::Reach;
use crate::budget::{Budget, DailySpend};
use crate::bundle::{RequestShapes, ToolEnv};
use crate::events::{EventSink, RunContext};
use crate::journal::RunJournal;
use crate::kernel::{CallBudget, Kernel, OnMaxTurns, RunFailure};
use crate::registry::{
    BundleIdentity, LoadedBundle, NESTED_PIN_STEP, NestedPin as Pin, Registry, Unresolved,
};
use crate::tools::agent::{AgentHost, Inherited};
use crate::tools::{ToolEngine, ToolError};
use crate::types::{Message, RunResult, TerminationReason};

/// Where a run happens: its events, its journal scope and what stops it.
pub struct RunScope {
    pub sink: EventSink,
    pub journal: RunJournal,
    pub cancel: CancellationToken,
    /// What the job may spend, shared by all its runs.
    pub budget: Option<Budget>,
    /// The bundles the job may reach from its runs: those of the key that
    /// owns it.
    pub reach: Reach,
}

impl RunScope {
    /// The scope of a run outside the daemon (`verify`'s world of its own,
    /// a local runner): no budget, and no key, since nothing nested can
    /// run without the daemon's registry.
    pub fn local(sink: EventSink, journal: RunJournal, cancel: CancellationToken) -> RunScope {
        RunScope {
            sink,
            journal,
            cancel,
            budget: None,
            reach: Reach::Everything,
        }
    }

    /// The scope of the run nested in this one under `key` (a workflow
    /// stage's or a group-chat reply's key) in `turn`: its events continue
    /// this run's log as run `{run}/{key}`, its steps are journaled under
    /// the key, and it stops with this run.
    pub fn nested(&self, turn: u32, key: &str, bundle: &str) -> RunScope {
        RunScope {
            sink: self
                .sink
                .child(self.sink.context().nested(key, key, bundle)),
            journal: self.journal.child(turn, key),
            cancel: self.cancel.clone(),
            budget: self.budget.clone(),
            reach: self.reach.clone(),
        }
    }

    /// This scope with the version of the bundle it runs on its events.
    pub fn running(self, loaded: &LoadedBundle) -> RunScope {
        let mut context = self.sink.context().clone();
        context.bundle = loaded.name().to_string();
        context.bundle_version = loaded.version().to_string();
        RunScope {
            sink: self.sink.child(context),
            ..self
        }
    }
}

/// What a job asks of its run beyond the bundle's own settings.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Put prompts on ModelRequest events (the operator opted in to content capture).
    pub record_messages: bool,
    /// A cap on agent calls (the runtime API's `max_agents`).
    pub call_budget: Option<CallBudget>,
    /// Offer the model only these of the bundle's tools (the job's `tools`
    /// variable); `None` offers all.
    pub tools: Option<Vec<String>>,
    /// The shape the final answer must have (the job's `answer_format`),
    /// asked of the model; the caller checks the answer.
    pub answer_format: Option<crate::types::AnswerFormat>,
    /// The caller's own tools (the job's `caller_tools`), offered beside
    /// the bundle's; the client runs them.
    pub caller_tools: Vec<crate::types::ToolSchema>,
    /// Answer the tools with a side effect by stand-ins (the job's
    /// `stand_ins`), here and in every bundle the run nests.
    pub stand_ins: Option<crate::types::StandIns>,
}

/// Runs loaded bundles as agents; runs the bundles nested in them from the
/// registry (none in `structured-agents run` and `chat`).
#[derive(Clone)]
pub struct Runner {
    registry: Option<Arc<Registry>>,
    /// Where a nested agent's bundle's daily spend is read (the queue).
    daily: Option<Arc<dyn DailySpend>>,
    /// The router's tools with its reach of the agent directory, bound once
    /// per snapshot, bundle content and owning key rather than for every
    /// job.
    reach: Arc<std::sync::Mutex<Vec<BoundReach>>>,
}

/// The router's tools with its reach bound, and the request shapes they
/// need, for one snapshot generation, one bundle content and one key.
#[derive(Clone)]
struct BoundReach {
    generation: u64,
    identity: BundleIdentity,
    /// The key whose view of the directory this is (`None`: all of it).
    key: Option<String>,
    tools: Arc<ToolEngine>,
    shapes: RequestShapes,
}

/// Keys whose router bindings are kept at once; past it the oldest goes.
const BOUND_REACH_KEYS: usize = 32;

impl Runner {
    pub fn new(registry: Arc<Registry>, daily: Arc<dyn DailySpend>) -> Self {
        Self {
            registry: Some(registry),
            daily: Some(daily),
            reach: Arc::default(),
        }
    }

    /// A runner for one bundle in this process (`run`, `chat`, benches).
    pub fn local() -> Self {
        Self {
            registry: None,
            daily: None,
            reach: Arc::default(),
        }
    }

    /// The bundle's kernel: the one place a kernel is assembled. Fails only
    /// when `options.tools` names tools the bundle cannot offer alone.
    pub fn kernel(
        &self,
        loaded: &LoadedBundle,
        options: &RunOptions,
    ) -> Result<Kernel, RunFailure> {
        self.kernel_with_budget(loaded, options, None, &Reach::Everything)
    }

    fn kernel_with_budget(
        &self,
        loaded: &LoadedBundle,
        options: &RunOptions,
        budget: Option<&Budget>,
        reach: &Reach,
    ) -> Result<Kernel, RunFailure> {
        let mut config = loaded.bundle.kernel_config();
        config.record_messages = options.record_messages;
        config.call_budget = options.call_budget.clone();
        config.budget = budget.cloned();
        config.answer = options
            .answer_format
            .as_ref()
            .map(|format| loaded.bundle.answer_shape(format));
        let (tools, shapes) = self.offered_tools(loaded, options, reach)?;
        // Swapped after narrowing and binding: a stand-in keeps its tool's
        // schema and policy, so the shapes and the pipeline stay.
        let tools = match &options.stand_ins {
            Some(stand_ins) => {
                Arc::new(crate::tools::stand_in::swap(&tools, stand_ins, "this run"))
            }
            None => tools,
        };
        // Admission refused clashes with the bundle's declared tools; the
        // bound ones (an MCP server's) are known only here.
        if let Some(clash) = options
            .caller_tools
            .iter()
            .find(|t| tools.tool(&t.name).is_some())
        {
            return Err(RunFailure::Bundle(format!(
                "the caller's tool `{}` has the name of a tool of bundle {}: rename the caller's tool",
                clash.name,
                loaded.name()
            )));
        }
        config.caller_tools = options.caller_tools.clone();
        if let Some(shapes) = shapes {
            config.shape = shapes.default;
            config.turn_shapes = shapes.turns;
        }
        let agents = self.registry.is_some().then(|| {
            Arc::new(NestedHost {
                runner: self.clone(),
                reach: reach.clone(),
                stand_ins: options.stand_ins.clone(),
            }) as Arc<dyn AgentHost>
        });
        Ok(Kernel::new(
            config,
            loaded.bundle.model.plugin.clone(),
            loaded.backend.clone(),
            tools,
            agents,
        ))
    }

    /// The tools a run offers, with the request shapes they need when they
    /// are not the bind's own: the router's reach of the agent directory
    /// (in the daemon), narrowed to `options.tools`.
    fn offered_tools(
        &self,
        loaded: &LoadedBundle,
        options: &RunOptions,
        reach: &Reach,
    ) -> Result<(Arc<ToolEngine>, Option<RequestShapes>), RunFailure> {
        let reached = self.reached_tools(loaded, reach)?;
        let Some(names) = &options.tools else {
            return Ok(match reached {
                Some(bound) => (bound.tools, Some(bound.shapes)),
                None => (loaded.tools.clone(), None),
            });
        };
        let tools = reached.map_or_else(|| loaded.tools.clone(), |bound| bound.tools);
        let subset = tools.subset(names).map_err(|e| {
            RunFailure::Bundle(format!(
                "control `tools`: bundle {:?} has {e}",
                loaded.name()
            ))
        })?;
        let shapes = loaded
            .shapes_for(&subset)
            .map_err(|e| RunFailure::Bundle(e.to_string()))?;
        Ok((Arc::new(subset), Some(shapes)))
    }

    /// The router's tools with its reach of the agent directory bound, once
    /// per snapshot, bundle content and owning key; `None` for any other
    /// bundle (or outside the daemon). The directory holds only the bundles
    /// the job's key may reach.
    fn reached_tools(
        &self,
        loaded: &LoadedBundle,
        reach: &Reach,
    ) -> Result<Option<BoundReach>, RunFailure> {
        let Some(registry) = &self.registry else {
            return Ok(None);
        };
        let snapshot = registry.snapshot();
        let key = reach.key_name();
        let mut cached = self.reach.lock().unwrap_or_else(|p| p.into_inner());
        cached.retain(|bound| bound.generation == snapshot.generation);
        if let Some(bound) = cached
            .iter()
            .find(|bound| bound.identity == loaded.identity && bound.key.as_deref() == key)
        {
            return Ok(Some(bound.clone()));
        }
        let specs: Vec<_> = snapshot
            .router_reach(loaded)
            .into_iter()
            .filter(|spec| spec.bundle.as_deref().is_none_or(|b| reach.reaches(b)))
            .collect();
        if specs.is_empty() {
            return Ok(None);
        }
        let env = ToolEnv {
            runs_agents: true,
            remote_agents: snapshot.config.agents.clone(),
            plugins: None,
            tools_changed: None,
            sender_id: Some(snapshot.config.runtime.sender_id.clone()),
            egress: snapshot.egress.clone(),
        };
        let bound = crate::bundle::bind::bind_specs(
            &specs,
            &loaded.bundle.dir,
            loaded.bundle.raw.approval.as_ref(),
            &env,
        )
        .map_err(|e| {
            RunFailure::Bundle(format!("the router's reach of the agent directory: {e}"))
        })?;
        let tools = Arc::new(loaded.tools.with(bound));
        let shapes = loaded
            .shapes_for(&tools)
            .map_err(|e| RunFailure::Bundle(e.to_string()))?;
        let bound = BoundReach {
            generation: snapshot.generation,
            identity: loaded.identity.clone(),
            key: key.map(str::to_string),
            tools,
            shapes,
        };
        if cached.len() >= BOUND_REACH_KEYS {
            cached.remove(0);
        }
        cached.push(bound.clone());
        Ok(Some(bound))
    }

    /// Runs (or resumes, from `scope`'s journal) the bundle on `messages`.
    pub async fn run(
        &self,
        loaded: &LoadedBundle,
        messages: Vec<Message>,
        options: &RunOptions,
        scope: &RunScope,
    ) -> Result<RunResult, RunFailure> {
        let kernel =
            self.kernel_with_budget(loaded, options, scope.budget.as_ref(), &scope.reach)?;
        let run = kernel
            .run_journaled(messages, &scope.sink, scope.cancel.clone(), &scope.journal)
            .await?;
        match run.termination_reason {
            TerminationReason::Cancelled => Err(RunFailure::Cancelled),
            TerminationReason::Timeout => Err(RunFailure::TimedOut(
                kernel.config().timeout.unwrap_or_default(),
            )),
            TerminationReason::MaxTurns if kernel.config().on_max_turns == OnMaxTurns::Fail => {
                Err(RunFailure::MaxTurns(run.turn_count))
            }
            _ => Ok(run),
        }
    }

    /// Runs the bundle `name` nested in a job (an agent call, a workflow
    /// stage, a group-chat agent) on `input` rendered through its prompts
    /// with `variables`: the content its first attempt ran when resuming,
    /// else the current one (then pinned).
    pub async fn run_nested_bundle(
        &self,
        name: &str,
        input: &str,
        variables: &Map<String, serde_json::Value>,
        options: &RunOptions,
        scope: RunScope,
    ) -> Result<RunResult, RunFailure> {
        scope
            .reach
            .check(name)
            .map_err(|refused| RunFailure::Refused(refused.to_string()))?;
        let loaded = self.pinned(name, &scope.journal).await?;
        self.run_pinned(&loaded, input, variables, options, scope)
            .await
    }

    /// Runs `loaded` (the content a nested run is pinned to) on `input`
    /// rendered through its prompts with `variables`.
    async fn run_pinned(
        &self,
        loaded: &LoadedBundle,
        input: &str,
        variables: &Map<String, serde_json::Value>,
        options: &RunOptions,
        scope: RunScope,
    ) -> Result<RunResult, RunFailure> {
        let messages = loaded
            .bundle
            .prompts
            .render(input, variables)
            .map_err(|e| RunFailure::Bundle(format!("bundle {:?}: {e}", loaded.name())))?;
        self.run(loaded, messages, options, &scope.running(loaded))
            .await
    }

    /// The content of `name` a nested run with this journal is pinned to,
    /// or the current content, pinned now (written with the run's first
    /// durable step).
    async fn pinned(
        &self,
        name: &str,
        journal: &RunJournal,
    ) -> Result<Arc<LoadedBundle>, RunFailure> {
        let registry = self.registry.as_ref().ok_or_else(|| {
            RunFailure::Bundle(format!(
                "bundle {name:?} runs nested, which needs the daemon (`structured-agents serve`)"
            ))
        })?;
        if let Some(pin) = journal.latest_value::<Pin>(NESTED_PIN_STEP)? {
            return registry
                .resolve(name, Some(&pin.identity))
                .await
                .map_err(|why| {
                    RunFailure::PinnedContentGone(format!(
                        "bundle {name:?} identity {} (version {}) that this nested run started with can no longer be loaded: {why}; it is never resumed against different content: resubmit the job",
                        pin.identity.short(),
                        pin.version
                    ))
                });
        }
        let loaded = registry
            .resolve(name, None)
            .await
            .map_err(|why| match why {
                Unresolved::NotLoaded => RunFailure::Bundle(format!(
                    "bundle {name:?} is not loaded; check `structured-agents bundles`"
                )),
                Unresolved::PinnedGone(why) => {
                    RunFailure::Bundle(format!("bundle {name:?}: {why}"))
                }
            })?;
        journal.defer_value(
            0,
            NESTED_PIN_STEP,
            &Pin {
                bundle: name.to_string(),
                version: loaded.version().to_string(),
                identity: loaded.identity.clone(),
            },
        )?;
        Ok(loaded)
    }

    /// Refuses a nested run of `bundle` when its jobs and nested runs of
    /// the last day used up its `limits.per_day`: a tool error naming the
    /// budget, so the model can answer without it.
    async fn admit_nested(&self, bundle: &str) -> Result<(), ToolError> {
        let (Some(registry), Some(daily)) = (&self.registry, &self.daily) else {
            return Ok(());
        };
        let Some(per_day) = registry
            .snapshot()
            .bundle(bundle)
            .and_then(|loaded| loaded.bundle.raw.limits.per_day.clone())
        else {
            return Ok(());
        };
        let since = std::time::SystemTime::now() - crate::budget::DAY;
        let spend = daily.spent_since(bundle, since).await.map_err(|e| {
            ToolError::Retryable(format!(
                "agent bundle {bundle:?}: its daily spend cannot be read ({e}); try again"
            ))
        })?;
        per_day.admit(bundle, &spend).map_err(|stop| {
            ToolError::Failed(format!("agent bundle {bundle:?} did not run: {stop}"))
        })
    }
}

/// The runner as the `agent` tools of one job's run see it: nested runs
/// reach only what the job's key may.
struct NestedHost {
    runner: Runner,
    reach: Reach,
    /// The job's stand-ins, which hold in its nested runs too.
    stand_ins: Option<crate::types::StandIns>,
}

// `run_nested` repeats the signature of `AgentHost`'s (tools/agent.rs), as
// an impl must.
impl AgentHost for NestedHost {
    fn run_nested<'a>(
        &'a self,
        bundle: &'a str,
        input: String,
        parent: &'a EventSink,
        context: RunContext,
        inherits: Inherited,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            // Checked on a resumed run too: a key's bundles can shrink
            // between attempts, and its job must not keep what it lost.
            self.reach
                .check(bundle)
                .map_err(|refused| ToolError::Failed(refused.to_string()))?;
            let runner = &self.runner;
            // A nested run that already started (it is resumed) was
            // admitted then; a new one is admitted by its bundle's day.
            let started = inherits
                .journal
                .latest_value::<Pin>(NESTED_PIN_STEP)
                .map_err(RunFailure::from)?
                .is_some();
            if !started {
                runner.admit_nested(bundle).await?;
            }
            let loaded = runner.pinned(bundle, &inherits.journal).await?;
            // Held to the lower of the job's remaining budget and the
            // bundle's own limits; its spend counts for its bundle's day.
            let depth = context.parent.as_ref().map_or(0, |p| p.depth);
            let own = loaded.bundle.raw.limits.budget();
            let scope = RunScope {
                sink: parent.child(context),
                journal: inherits.journal,
                cancel: inherits.cancel,
                budget: inherits.budget.map(|job| job.nested(bundle, own, depth)),
                reach: self.reach.clone(),
            };
            let options = RunOptions {
                stand_ins: self.stand_ins.clone(),
                ..RunOptions::default()
            };
            let run = runner
                .run_pinned(&loaded, &input, &Map::new(), &options, scope)
                .await?;
            Ok(run
                .final_output
                .or(run.final_message.content)
                .unwrap_or_default())
        })
    }
}
