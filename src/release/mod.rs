//! The release gate's loop, started by the daemon: a bundle whose
//! `release:` gates it on its evals has each new version held as a
//! candidate by the registry (`registry/build/binder.rs`), the version
//! before it serving; this loop runs the candidate's eval — an `eval` job
//! submitted as the daemon through `admit::OnBehalf`, against the serving
//! version — and records the decision ([`Recorder`]): promoted when the
//! suite passes by the bundle's rule, else rejected with the eval's
//! verdict. Each move is a daemon event (a metric and a log
//! line; the console shows the candidate), and a decision asks for a
//! reload, which serves the promoted version.
//!
//! The eval job's idempotency key is the candidate's identity, so a
//! restarted daemon (or another sharing the store) finds the eval already
//! running rather than starting a second; a decided candidate is not
//! evaluated again. An operator's `promote` or `reject` (`api/release.rs`)
//! records a decision the same way ([`Recorder`]).
//!
//! A decision is recorded in the queue's store first, for every daemon on
//! it, then in this daemon's state directory, which its builds read; the
//! loop mirrors the ones other daemons recorded (`shared`), so an
//! operator's promote on one daemon, or the gate's verdict on another,
//! serves the same version everywhere within a look.
//!
//! A bundle whose `release.canary` asks for one has a candidate whose
//! evals passed made a canary instead: a share of new jobs runs it, and
//! the loop watches them until it promotes it or rolls it back.
//!
//! - `evaluate`: one candidate's eval, waited for and decided;
//! - `canary`: one canary's jobs, counted and judged;
//! - `shared`: the decisions other daemons recorded, mirrored here.

mod canary;
mod evaluate;
mod shared;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::admit::OnBehalf;
use crate::events::daemon::{DaemonBus, DaemonEvent, ReloadTrigger};
use crate::queue::{JobQueue, QueueError, Replaces, StoredRelease};
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
        let mut mirror = shared::Mirror::default();
        mirror.seed(&gate.recorder).await;
        loop {
            mirror.catch_up(&gate.recorder).await;
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

/// Where a decision is recorded and told: the store every daemon shares,
/// the registry's record, the daemon's bus, the reload that acts on it.
#[derive(Clone)]
pub struct Recorder {
    pub queue: Arc<dyn JobQueue>,
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
    /// Which decision already recorded it replaces (an operator's word
    /// any; a canary's outcome the `canary` one; the gate's eval none).
    pub replaces: Replaces,
}

impl Recorder {
    /// Records `ruling` about `candidate` (`serving` is the version that
    /// serves meanwhile) for every daemon on the store and in this one's
    /// record, tells the daemon, and waits for the reload that acts on it;
    /// nothing when a decision is recorded already that the ruling does
    /// not replace (the loop mirrors that one).
    pub async fn record(
        &self,
        candidate: &LoadedBundle,
        serving: &str,
        ruling: Ruling,
    ) -> Result<(), RecordError> {
        let decision = Decision {
            bundle: candidate.name().to_string(),
            version: candidate.version().to_string(),
            verdict: ruling.verdict,
            reason: ruling.reason.clone(),
            by: ruling.by.clone(),
            at: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
            eval_job: ruling.eval_job,
        };
        let json = serde_json::to_string(&decision).map_err(RecordError::Encode)?;
        let release = StoredRelease {
            identity: candidate.identity.as_str().to_string(),
            verdict: ruling.verdict.as_str().to_string(),
            decision: json,
            seq: 0,
        };
        let shared = self.queue.record_release(release, ruling.replaces).await?;
        if shared.is_none() {
            return Ok(());
        }
        let changed = self
            .registry
            .mirror_releases(vec![(candidate.identity.clone(), decision)])
            .await?;
        for decision in &changed {
            self.tell(decision, serving);
        }
        if !changed.is_empty() {
            self.reloads.reload(ReloadTrigger::Release).await;
        }
        Ok(())
    }

    /// Tells the daemon of a decision that changed this daemon's record
    /// (`serving`: the version serving meanwhile): an event, which is a
    /// metric and a log line.
    fn tell(&self, decision: &Decision, serving: &str) {
        self.bus.publish(DaemonEvent::Release {
            bundle: decision.bundle.clone(),
            version: decision.version.clone(),
            state: decision.verdict.as_str(),
            serving: serving.to_string(),
            by: decision.by.clone(),
            reason: decision.reason.clone(),
        });
    }
}

/// Why a decision could not be recorded; the candidate stays as it was.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error(
        "the queue's store cannot record it ({0}); check the store (`queue` in the config) and try again"
    )]
    Store(#[from] QueueError),
    #[error(
        "the state directory's record cannot be written ({0}); check that paths.state_dir is writable"
    )]
    Record(#[from] std::io::Error),
    #[error("the decision cannot be written as JSON ({0})")]
    Encode(serde_json::Error),
}
