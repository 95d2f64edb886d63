//! The worker pool: leases jobs from the queue, runs each with the bundle
//! version it is pinned to, keeps its lease alive with heartbeats, writes its
//! events to the job's durable log, and records the outcome guarded by the
//! attempt number. On shutdown it stops leasing, lets running jobs finish up
//! to the drain timeout and releases the rest back to the queue.
//!
//! This module must not know about HTTP or telemetry exporters; it emits
//! events to the observers it is given.

mod attempt;
mod attempt_log;
mod ending;
mod eval;
mod group_chat;
mod tool_run;
mod verify;
mod workflow;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::admit::OnBehalf;
use crate::events::Observer;
use crate::events::daemon::{DaemonBus, DaemonEvent, QueueHealth};
use crate::queue::{Job, JobKind, JobQueue, Lease, LeasedJob, Outcome, Pin, Pinner, Shares};
use crate::registry::{BundleIdentity, LoadedBundle, Registry, Unresolved};
use crate::runner::{RunOptions, RunScope, Runner};
use crate::types::Message;
use attempt::{Attempt, Ran};

/// Jobs one lease write takes at most (when that many slots are free).
const MAX_LEASE_BATCH: usize = 16;

/// How the pool behaves.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    pub worker_id: String,
    pub concurrency: usize,
    pub lease: Duration,
    pub poll_interval: Duration,
    pub drain_timeout: Duration,
    /// Put prompts on ModelRequest events (the operator opted in to content capture).
    pub record_messages: bool,
}

/// Builds the observers of one job (metrics, spans, plugins); the durable
/// event log is always added by the pool.
pub trait JobObservers: Send + Sync {
    fn observers(&self, loaded: &LoadedBundle, job: &LeasedJob) -> Vec<Arc<dyn Observer>>;
}

pub struct WorkerPool {
    queue: Arc<dyn JobQueue>,
    registry: Arc<Registry>,
    runner: Runner,
    settings: WorkerSettings,
    observers: Arc<dyn JobObservers>,
    /// Woken by submissions so idle workers do not wait for the next poll.
    wake: Arc<Notify>,
    /// Told whether each lease reached the queue (metrics, outage logs).
    health: Arc<QueueHealth>,
    bus: DaemonBus,
    /// How an eval job submits its cases: as its owner, through the API's
    /// admission.
    admission: Arc<dyn OnBehalf>,
}

/// What the daemon plugs into the pool: who watches a job, and how an
/// eval job submits its cases.
pub struct PoolSeams {
    pub observers: Arc<dyn JobObservers>,
    pub admission: Arc<dyn OnBehalf>,
}

impl WorkerPool {
    pub fn new(
        queue: Arc<dyn JobQueue>,
        registry: Arc<Registry>,
        settings: WorkerSettings,
        seams: PoolSeams,
        wake: Arc<Notify>,
        health: Arc<QueueHealth>,
        bus: DaemonBus,
    ) -> Self {
        Self {
            runner: Runner::new(registry.clone(), Arc::new(QueueSpend(queue.clone()))),
            queue,
            registry,
            settings,
            observers: seams.observers,
            wake,
            health,
            bus,
            admission: seams.admission,
        }
    }

    /// How a lease pins a first attempt: to the bundle's current content.
    fn pinner(&self) -> Arc<Pinner> {
        let registry = self.registry.clone();
        Arc::new(move |bundle: &str| {
            registry.snapshot().bundle(bundle).map(|loaded| Pin {
                version: loaded.version().to_string(),
                digest: loaded.identity.to_string(),
            })
        })
    }

    /// Tells the queue the keys' weights as the keys file has them now (a
    /// reload may change them), before each lease.
    fn share_fairly(&self) {
        let keys = self.registry.snapshot().keys.clone();
        self.queue.share_by(Shares::new(keys.weights()));
    }

    /// Runs until `shutdown` fires, then drains.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let slots = Arc::new(Semaphore::new(self.settings.concurrency.max(1)));
        let mut running: JoinSet<()> = JoinSet::new();
        // Cancelled when the drain timeout passes: running jobs stop and are released.
        let abandon = CancellationToken::new();
        loop {
            let permit = tokio::select! {
                p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
                _ = shutdown.cancelled() => break,
            };
            // Every free slot is filled by one lease write: a busy pool takes
            // several jobs per query, and each starts at once (a leased job
            // never waits in a buffer, so a dead daemon strands none).
            let mut permits = vec![permit];
            while permits.len() < MAX_LEASE_BATCH {
                match slots.clone().try_acquire_owned() {
                    Ok(p) => permits.push(p),
                    Err(_) => break,
                }
            }
            self.share_fairly();
            let leased = self
                .queue
                .lease_many(
                    &self.settings.worker_id,
                    self.settings.lease,
                    permits.len(),
                    Some(self.pinner()),
                )
                .await;
            self.health.report("lease", leased.is_ok());
            let leases = match leased {
                Ok(leases) if !leases.is_empty() => leases,
                Ok(_) => {
                    drop(permits);
                    tokio::select! {
                        _ = self.wake.notified() => {}
                        _ = tokio::time::sleep(self.settings.poll_interval) => {}
                        _ = shutdown.cancelled() => break,
                    }
                    continue;
                }
                Err(err) => {
                    drop(permits);
                    tracing::error!(error = %err, "cannot lease jobs; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(self.settings.poll_interval * 4) => {}
                        _ = shutdown.cancelled() => break,
                    }
                    continue;
                }
            };
            for (lease, permit) in leases.into_iter().zip(permits) {
                let (this, abandon, shutdown) = (self.clone(), abandon.clone(), shutdown.clone());
                running.spawn(async move {
                    // A job's end leases the slot's next job in the same write.
                    let mut next = Some(lease);
                    let mut slot = Some(permit);
                    while let Some(lease) = next {
                        // A job that waits on jobs of its own (an eval run)
                        // gives its slot back: held, enough of them would
                        // leave no slot for the jobs they wait on.
                        if lease.job.kind.waits_on_jobs() {
                            slot = None;
                        }
                        let chain = slot.is_some();
                        next = this.run_job(lease, &abandon, &shutdown, chain).await;
                        // The bundle version it ran may have been superseded.
                        this.registry.release_unused();
                    }
                    drop(slot);
                });
            }
            // Reap finished tasks so the set does not grow.
            while running.try_join_next().is_some() {}
        }
        self.drain(running, &abandon).await;
    }

    /// Waits for the `running` jobs up to the drain timeout, then cancels
    /// `abandon` so the rest stop and are released to the queue.
    async fn drain(&self, mut running: JoinSet<()>, abandon: &CancellationToken) {
        while running.try_join_next().is_some() {}
        tracing::info!(
            in_flight = running.len(),
            "draining: no new jobs are leased"
        );
        let drained = tokio::time::timeout(self.settings.drain_timeout, async {
            while running.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                remaining = running.len(),
                "drain timeout passed; releasing running jobs to the queue"
            );
            abandon.cancel();
            while running.join_next().await.is_some() {}
        }
    }

    /// Runs one attempt; answers the slot's next lease, taken with the
    /// attempt's outcome when the attempt holds a slot (`chain`) and the
    /// pool is not stopping.
    async fn run_job(
        &self,
        lease: Lease,
        abandon: &CancellationToken,
        shutdown: &CancellationToken,
        chain: bool,
    ) -> Option<Lease> {
        let job = &lease.job;
        let pinned = job.bundle_digest.as_deref().map(BundleIdentity::recorded);
        let resolved = self.registry.resolve(&job.bundle, pinned.as_ref()).await;
        let loaded = match resolved {
            Ok(loaded) => loaded,
            Err(why) => {
                let failed = unloaded(job, &why);
                let attempt = Attempt::without_run(self, lease);
                attempt.end(self, failed, None, None).await;
                return None;
            }
        };
        // The lease pinned the first attempt already, unless the bundle was
        // not loaded then (it appeared since): pin it now.
        if job.bundle_digest.is_none()
            && let Err(err) = self
                .queue
                .pin_version(
                    &job.id,
                    lease.attempt,
                    loaded.version(),
                    loaded.identity.as_str(),
                )
                .await
        {
            tracing::warn!(job_id = %job.id, error = %err, "cannot pin bundle version");
        }

        let mut attempt = Attempt::begin(self, lease, &loaded).await;
        if attempt.job().cancel_requested {
            // Its last worker died after a cancel was asked for: it ends
            // here, by the one rule (a cancel wins), with its final event.
            let cancelled = Outcome::Failed {
                error: "cancelled by request".into(),
                retryable: false,
            };
            return attempt
                .end(self, cancelled, None, self.chained(chain, shutdown))
                .await;
        }
        match attempt.run(self, &loaded, abandon).await {
            Ran::Ended { outcome, budget } => {
                let next = self.chained(chain, shutdown);
                attempt.end(self, outcome, budget.as_ref(), next).await
            }
            Ran::LeaseLost => {
                self.bus.publish(DaemonEvent::LeaseLost {
                    job: attempt.job().id.to_string(),
                    attempt: attempt.number(),
                });
                None
            }
            Ran::Abandoned => {
                attempt.release().await;
                None
            }
        }
    }

    /// Runs the job as what its kind says: its bundle (a workflow or an
    /// agent, as the pinned content is), one stage, a group chat, one call
    /// of a tool, or a verify of its bundle.
    async fn run_kind(&self, loaded: &LoadedBundle, job: &LeasedJob, scope: &RunScope) -> Outcome {
        // The endpoints' load gates order this job's calls by its priority,
        // take turns across API keys and bundles, and hold a job's first
        // call longest (a resumed job has made calls already).
        let fairness = format!("{}/{}", job.owner.as_deref().unwrap_or(""), job.bundle);
        let ticket = crate::load::ticket::JobTicket::new(job.priority, fairness, job.attempts > 1);
        let outcome = crate::load::ticket::JobTicket::scope(
            ticket,
            self.run_kind_unscoped(loaded, job, scope),
        )
        .await;
        ending::held_to_format(job, outcome)
    }

    async fn run_kind_unscoped(
        &self,
        loaded: &LoadedBundle,
        job: &LeasedJob,
        scope: &RunScope,
    ) -> Outcome {
        let workflow = |only| workflow::WorkflowJob {
            runner: &self.runner,
            loaded,
            job,
            scope,
            record_messages: self.settings.record_messages,
            only,
        };
        // Each kind's run is boxed: an async fn's state is as large as its
        // largest await, so unboxed every job in flight would carry the
        // state of the largest kind (a workflow's, a verify's) whatever it
        // runs. Boxed, a job holds only its own kind's state.
        match (&job.kind, &loaded.bundle.workflow) {
            (JobKind::ToolRun { tool, arguments }, _) => {
                Box::pin(tool_run::run(loaded, job, tool, arguments, scope)).await
            }
            (JobKind::Verify(run), _) => {
                let snapshot = self.registry.snapshot();
                Box::pin(verify::run(&snapshot, loaded, job, run, scope)).await
            }
            (JobKind::Eval(run), _) => {
                let eval = eval::EvalJob {
                    queue: self.queue.as_ref(),
                    admission: self.admission.as_ref(),
                    loaded,
                    job,
                    run,
                    scope,
                    bus: &self.bus,
                    submitted: std::sync::Mutex::default(),
                };
                Box::pin(eval::run(eval)).await
            }
            (JobKind::Bundle, Some(spec)) => Box::pin(workflow::run(workflow(None), spec)).await,
            (JobKind::Bundle, None) => Box::pin(self.run_agent(loaded, job, scope)).await,
            (JobKind::Stage { stage }, Some(spec)) => {
                Box::pin(workflow::run(workflow(Some(stage)), spec)).await
            }
            (JobKind::GroupChat { plan }, None) if loaded.bundle.raw.group_chat.is_some() => {
                Box::pin(self.run_group_chat(loaded, job, plan, scope)).await
            }
            (kind, _) => not_runnable(job, kind, loaded),
        }
    }

    /// Runs an agent bundle's job: its prompts rendered with the job's
    /// input, then the kernel, resuming from the journal.
    async fn run_agent(&self, loaded: &LoadedBundle, job: &LeasedJob, scope: &RunScope) -> Outcome {
        let messages = match self.agent_messages(loaded, job).await {
            Ok(messages) => messages,
            Err(outcome) => return outcome,
        };
        let options = RunOptions {
            record_messages: self.settings.record_messages,
            call_budget: agent_budget(&self.registry.snapshot(), loaded, job),
            tools: job.controls.tools.clone(),
            answer_format: job.controls.answer_format.clone(),
            caller_tools: job.controls.caller_tools.clone(),
            stand_ins: job.controls.stand_ins.clone(),
        };
        match self.runner.run(loaded, messages, &options, scope).await {
            Ok(run) => Outcome::Succeeded(json!({
                "output": run.final_output.clone().or_else(|| run.final_message.content.clone()),
                "termination_reason": run.termination_reason,
                "turn_count": run.turn_count,
                "usage": run.usage,
                "bundle_version": loaded.version(),
            })),
            Err(failure) => failure.into(),
        }
    }

    /// The messages an agent job starts from: its chat, or its input after
    /// its conversation's earlier turns, through the bundle's prompts.
    async fn agent_messages(
        &self,
        loaded: &LoadedBundle,
        job: &LeasedJob,
    ) -> Result<Vec<Message>, Outcome> {
        let rendered = match &job.messages {
            Some(chat) => match chat.iter().map(Message::from_wire).collect() {
                Ok(chat) => loaded
                    .bundle
                    .prompts
                    .render_over(&job.input, &job.variables, chat),
                Err(e) => {
                    return Err(Outcome::Failed {
                        error: format!("job {}: its messages are not chat messages: {e}", job.id),
                        retryable: false,
                    });
                }
            },
            None if job.conversation_id.is_some() => {
                // Each earlier turn is two messages; the history strategy
                // trims further per request.
                let turns = loaded.bundle.raw.limits.max_history_messages / 2;
                let earlier = self.earlier_turns(job, turns).await?;
                loaded.bundle.prompts.render_continuing(
                    &job.input,
                    &job.variables,
                    earlier.iter().flat_map(turn_messages).collect(),
                )
            }
            None => loaded.bundle.prompts.render(&job.input, &job.variables),
        };
        rendered.map_err(|e| Outcome::Failed {
            error: format!("job {}: bundle {:?}: {e}", job.id, job.bundle),
            retryable: false,
        })
    }

    /// Runs a group-chat job: its plan's rounds, after the conversation's
    /// earlier turns.
    async fn run_group_chat(
        &self,
        loaded: &LoadedBundle,
        job: &LeasedJob,
        plan: &crate::group_chat::Plan,
        scope: &RunScope,
    ) -> Outcome {
        let earlier = match self.earlier_turns(job, GROUP_CHAT_HISTORY_TURNS).await {
            Ok(earlier) => earlier,
            Err(outcome) => return outcome,
        };
        let run = group_chat::GroupChatJob {
            runner: &self.runner,
            loaded,
            job,
            plan,
            scope,
            earlier: earlier
                .iter()
                .map(|j| (j.input.clone(), j.answer().unwrap_or_default().to_string()))
                .collect(),
        };
        group_chat::run(run).await
    }

    /// The conversation's earlier finished turns (at most `turns`), or the
    /// outcome of a job that cannot read them.
    async fn earlier_turns(&self, job: &LeasedJob, turns: usize) -> Result<Vec<Job>, Outcome> {
        crate::queue::conversation_history(&*self.queue, job, turns)
            .await
            .map_err(|e| Outcome::Failed {
                error: format!("job {}: cannot read its conversation: {e}", job.id),
                retryable: true,
            })
    }
}

impl WorkerPool {
    /// The job's budget: the bundle's limits lowered by the submitter's,
    /// priced by the daemon's table, its wall time counted from the job's
    /// first start. Every job has one, limits or not, prices or not: its
    /// spend is what the bundle's daily budget (`limits.per_day`) counts.
    fn budget(&self, loaded: &LoadedBundle, job: &LeasedJob) -> crate::budget::Budget {
        let bundle = loaded.bundle.raw.limits.budget();
        let limits = match &job.limits {
            Some(asked) => bundle.lowered_by(asked).unwrap_or_else(|e| {
                // Checked at submit; a bundle edit since then may have
                // lowered its own limits: the lower of the two applies.
                tracing::warn!(job_id = %job.id, error = %e, "the job's limits are above its bundle's; the bundle's apply");
                bundle.clone()
            }),
            None => bundle,
        };
        let prices = self.registry.snapshot().config.prices.clone();
        let started = job
            .started_at
            .as_deref()
            .and_then(|at| humantime::parse_rfc3339(at).ok())
            .unwrap_or_else(std::time::SystemTime::now);
        crate::budget::Budget::new(limits, Arc::new(prices), started)
    }
}

/// The queue as where a nested agent's bundle's daily spend is read.
struct QueueSpend(Arc<dyn JobQueue>);

#[async_trait::async_trait]
impl crate::budget::DailySpend for QueueSpend {
    async fn spent_since(
        &self,
        bundle: &str,
        since: std::time::SystemTime,
    ) -> Result<crate::budget::DaySpend, crate::budget::SpendUnreadable> {
        self.0
            .spend_since(bundle, since)
            .await
            .map_err(|e| crate::budget::SpendUnreadable {
                source: Box::new(e),
            })
    }
}

/// Earlier turns of its conversation a group chat's agents read.
const GROUP_CHAT_HISTORY_TURNS: usize = 10;

/// The cap on agent calls a job's `max_agents` control sets (the runtime
/// API's query option).
fn agent_budget(
    snapshot: &crate::registry::Snapshot,
    loaded: &LoadedBundle,
    job: &LeasedJob,
) -> Option<crate::kernel::CallBudget> {
    let max = job.controls.max_agents?;
    Some(crate::kernel::CallBudget {
        tools: snapshot.agent_tools(loaded).into_keys().collect(),
        max_calls: usize::try_from(max).unwrap_or(usize::MAX),
        refusal: format!("max_agents ({max}) reached: answer with what you have"),
    })
}

/// An earlier turn of a conversation as the messages a new turn starts from.
fn turn_messages(job: &Job) -> [Message; 2] {
    let answer = job.answer().unwrap_or_default();
    [
        Message::user(job.input.clone()),
        Message::assistant(Some(answer.to_string()), Vec::new()),
    ]
}

/// The outcome of a job whose kind its bundle's content cannot run (a stage
/// of a bundle that has no workflow, a group chat of one that hosts none):
/// admission checked the bundle as it was then, so the content the job is
/// pinned to must have changed shape since.
fn not_runnable(job: &LeasedJob, kind: &JobKind, loaded: &LoadedBundle) -> Outcome {
    let has = match (&loaded.bundle.workflow, &loaded.bundle.raw.group_chat) {
        (Some(_), _) => "a workflow",
        (None, Some(_)) => "a group-chat host without a workflow",
        (None, None) => "an agent",
    };
    let wants = match kind {
        JobKind::Stage { stage } => format!("runs stage {stage:?} of a workflow"),
        JobKind::GroupChat { .. } => {
            "is a group chat, which needs a bundle with a `group_chat:` section and no workflow"
                .to_string()
        }
        JobKind::Bundle => "runs its bundle".to_string(),
        JobKind::ToolRun { tool, .. } => format!("runs tool {tool:?}"),
        JobKind::Verify(_) => "verifies its bundle".to_string(),
        JobKind::Eval(_) => "runs its bundle's evals".to_string(),
    };
    Outcome::Failed {
        error: format!(
            "job {}: it {wants}, and bundle {:?} (version {}) is {has}; submit the job again for the bundle as it is now",
            job.id,
            job.bundle,
            loaded.version()
        ),
        retryable: false,
    }
}

/// The outcome of a job whose bundle is not loaded (or whose pinned content
/// is gone): it fails, saying which, why and what to do.
fn unloaded(job: &LeasedJob, why: &Unresolved) -> Outcome {
    let error = match (&job.bundle_digest, why) {
        (Some(identity), Unresolved::PinnedGone(why)) => format!(
            "job {}: bundle {:?} identity {} (version {}) that its first attempt ran can no longer be loaded: {why}; the job is never replayed against different content: resubmit it",
            job.id,
            job.bundle,
            BundleIdentity::recorded(identity).short(),
            job.bundle_version.as_deref().unwrap_or("?"),
        ),
        _ => format!(
            "job {}: bundle {:?} is not loaded; check `structured-agents bundles`",
            job.id, job.bundle
        ),
    };
    Outcome::Failed {
        error,
        retryable: false,
    }
}
