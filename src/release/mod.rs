//! The release gate's loop, started by the daemon: a bundle whose
//! `release:` gates it on its evals has each new version held as a
//! candidate by the registry (`registry/build/binder.rs`), the version
//! before it serving; this loop runs the candidate's eval — an `eval` job
//! submitted as the daemon through `admit::OnBehalf`, against the serving
//! version — and records the decision (`Registry::record_release`):
//! promoted when the suite passes by the bundle's rule, else rejected with
//! the eval's verdict. Each move is a daemon event (a metric and a log
//! line; the console shows the candidate), and a decision asks for a
//! reload, which serves the promoted version.
//!
//! The eval job's idempotency key is the candidate's identity, so a
//! restarted daemon (or another sharing the store) finds the eval already
//! running rather than starting a second; a decided candidate is not
//! evaluated again. An operator's `promote` or `reject` (`api/release.rs`)
//! records a decision the same way ([`Recorder`]).
//!
//! A bundle whose `release.canary` asks for one has a candidate whose
//! evals passed made a canary instead: a share of new jobs runs it, and
//! the loop watches them until it promotes it or rolls it back.
//!
//! - `evaluate`: one candidate's eval, waited for and decided;
//! - `canary`: one canary's jobs, counted and judged.

mod canary;
mod evaluate;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::admit::OnBehalf;
use crate::events::daemon::{DaemonBus, DaemonEvent, ReloadTrigger};
use crate::queue::JobQueue;
use crate::registry::{
    BundleIdentity, Decision, LoadedBundle, Registry, ReleaseVerdict, ReloadHandle,
};

/// How often the loop looks for candidates no eval is running for.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// What the gate's loop works with.
#[derive(Clone)]
pub struct ReleaseGate {
    pub recorder: Recorder,
    pub queue: Arc<dyn JobQueue>,
    /// Submits a candidate's eval job as the daemon.
    pub admission: Arc<dyn OnBehalf>,
}

/// Runs until `shutdown`.
pub fn spawn(gate: ReleaseGate, shutdown: CancellationToken) -> JoinHandle<()> {
    tokio::spawn(async move {
        // One task a candidate: its eval, then (a canary) its watch.
        let mut evaluating: HashMap<(BundleIdentity, Stage), JoinHandle<()>> = HashMap::new();
        loop {
            evaluating.retain(|_, task| !task.is_finished());
            for (stage, live, candidate) in to_watch(&gate.recorder.registry) {
                let key = (candidate.identity.clone(), stage.clone());
                if evaluating.contains_key(&key) {
                    continue;
                }
                let task = match stage {
                    Stage::Eval => tokio::spawn(evaluate::run(gate.clone(), live, candidate)),
                    Stage::Canary(since) => {
                        tokio::spawn(canary::watch(gate.clone(), live, candidate, since))
                    }
                };
                evaluating.insert(key, task);
            }
            tokio::select! {
                () = tokio::time::sleep(LOOK_EVERY) => {}
                () = shutdown.cancelled() => break,
            }
        }
        // An eval waited on goes on in the queue; the next start finds it.
        for task in evaluating.into_values() {
            task.abort();
        }
    })
}

/// What the gate does for a held candidate.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Stage {
    /// No decision yet: its eval.
    Eval,
    /// A canary since this time: its jobs watched.
    Canary(SystemTime),
}

/// The candidates held without a decision, and the canaries, each with
/// the version serving.
fn to_watch(registry: &Registry) -> Vec<(Stage, Arc<LoadedBundle>, Arc<LoadedBundle>)> {
    let snapshot = registry.snapshot();
    snapshot
        .bundles
        .values()
        .filter_map(|entry| {
            let candidate = entry.candidate.as_ref()?;
            let live = entry.current.clone()?;
            let stage = match &candidate.decision {
                None => Stage::Eval,
                Some(d) if d.verdict == ReleaseVerdict::Canary => Stage::Canary(
                    humantime::parse_rfc3339_weak(&d.at).unwrap_or_else(|_| SystemTime::now()),
                ),
                Some(_) => return None,
            };
            Some((stage, live, candidate.loaded.clone()))
        })
        .collect()
}

/// Where a decision is recorded and told: the registry's record, the
/// daemon's bus, the reload that acts on it.
#[derive(Clone)]
pub struct Recorder {
    pub registry: Arc<Registry>,
    pub reloads: ReloadHandle,
    pub bus: DaemonBus,
}

/// A decision about a candidate, and who made it why.
pub struct Ruling {
    pub verdict: ReleaseVerdict,
    /// `gate`, or the operator's key.
    pub by: String,
    pub reason: String,
    /// The eval job that decided, when the gate did.
    pub eval_job: Option<String>,
    /// Replaces a decision already recorded (an operator's word does; the
    /// gate's eval does not override one).
    pub overrides: bool,
}

impl Recorder {
    /// Records `ruling` about `candidate` (`serving` is the version that
    /// serves meanwhile), tells the daemon, and waits for the reload that
    /// acts on it; nothing when the ruling does not override a decision
    /// already recorded.
    pub async fn record(
        &self,
        candidate: &LoadedBundle,
        serving: &str,
        ruling: Ruling,
    ) -> std::io::Result<()> {
        let decision = Decision {
            bundle: candidate.name().to_string(),
            version: candidate.version().to_string(),
            verdict: ruling.verdict,
            reason: ruling.reason.clone(),
            by: ruling.by.clone(),
            at: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
            eval_job: ruling.eval_job,
        };
        let recorded = self
            .registry
            .record_release(candidate.identity.clone(), decision, ruling.overrides)
            .await?;
        if !recorded {
            return Ok(());
        }
        self.bus.publish(DaemonEvent::Release {
            bundle: candidate.name().to_string(),
            version: candidate.version().to_string(),
            state: ruling.verdict.as_str(),
            serving: serving.to_string(),
            by: ruling.by,
            reason: ruling.reason,
        });
        self.reloads.reload(ReloadTrigger::Release).await;
        Ok(())
    }
}
