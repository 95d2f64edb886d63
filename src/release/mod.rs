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
//! - `evaluate`: one candidate's eval, waited for and decided.

mod evaluate;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

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
        let mut evaluating: HashMap<BundleIdentity, JoinHandle<()>> = HashMap::new();
        loop {
            evaluating.retain(|_, task| !task.is_finished());
            for (live, candidate) in undecided(&gate.recorder.registry) {
                if evaluating.contains_key(&candidate.identity) {
                    continue;
                }
                let identity = candidate.identity.clone();
                let task = tokio::spawn(evaluate::run(gate.clone(), live, candidate));
                evaluating.insert(identity, task);
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

/// The candidates held without a decision, each with the version serving.
fn undecided(registry: &Registry) -> Vec<(Arc<LoadedBundle>, Arc<LoadedBundle>)> {
    let snapshot = registry.snapshot();
    snapshot
        .bundles
        .values()
        .filter_map(|entry| {
            let candidate = entry.candidate.as_ref()?;
            let live = entry.current.clone()?;
            candidate
                .decision
                .is_none()
                .then(|| (live, candidate.loaded.clone()))
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
            state: match ruling.verdict {
                ReleaseVerdict::Promoted => "promoted",
                ReleaseVerdict::Rejected => "rejected",
            },
            serving: serving.to_string(),
            by: ruling.by,
            reason: ruling.reason,
        });
        self.reloads.reload(ReloadTrigger::Release).await;
        Ok(())
    }
}
