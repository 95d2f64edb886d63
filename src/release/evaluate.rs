//! One candidate's eval: its `eval` job submitted as the daemon (found
//! again by its idempotency key after a restart), against the version
//! serving, with the bundle's `release:` rule; waited for; the decision
//! recorded from its report — promoted, or with `release.canary` a canary
//! (`canary.rs` watches it), or rejected.

use std::sync::Arc;
use std::time::Duration;

use super::{ReleaseGate, Ruling};
use crate::admit::NotAdmitted;
use crate::evals::RunReport;
use crate::events::daemon::DaemonEvent;
use crate::queue::{EvalPin, EvalRun, Job, JobId, JobKind, JobState, NewJob, Replaces};
use crate::registry::{LoadedBundle, ReleaseVerdict};

/// How long the gate waits before it asks again when the store cannot
/// take or give the eval job now.
const RETRY: Duration = Duration::from_secs(5);
/// How often the wait for the eval job reads the store unprompted.
const RECHECK: Duration = Duration::from_secs(2);
/// Case jobs in flight at once when `release.concurrency` is not set.
const DEFAULT_CONCURRENCY: u32 = 4;
/// Who the gate's decisions are by.
const BY: &str = "gate";

/// Evaluates `candidate` against `live` and records the decision.
pub(super) async fn run(gate: ReleaseGate, live: Arc<LoadedBundle>, candidate: Arc<LoadedBundle>) {
    let Some(release) = candidate.bundle.raw.release.clone() else {
        return;
    };
    gate.recorder.bus.publish(DaemonEvent::Release {
        bundle: candidate.name().to_string(),
        version: candidate.version().to_string(),
        state: "held",
        serving: live.version().to_string(),
        by: BY.into(),
        reason: "a new version is held until its evals pass".into(),
    });
    let eval = NewJob {
        bundle: candidate.name().to_string(),
        bundle_version: Some(candidate.version().to_string()),
        bundle_digest: Some(candidate.identity.to_string()),
        input: format!(
            "release gate: version {} against {}",
            candidate.version(),
            live.version()
        ),
        kind: JobKind::Eval(Box::new(EvalRun {
            tags: release.tags.clone(),
            concurrency: release.concurrency.unwrap_or(DEFAULT_CONCURRENCY),
            against: Some(EvalPin {
                version: live.version().to_string(),
                digest: live.identity.to_string(),
            }),
            limits: None,
            min_score: release.min_score,
            no_regressions: release.no_regressions,
            real_tools: release.real_tools,
        })),
        idempotency_key: Some(format!(
            "release:{}:{}",
            candidate.name(),
            candidate.identity
        )),
        ..NewJob::default()
    };
    let (verdict, reason, job) = match submitted(&gate, eval).await {
        Ok(id) => {
            let job = ended(&gate, &id).await;
            let (verdict, reason) = match (judged(&job), &release.canary) {
                ((ReleaseVerdict::Promoted, verdict), Some(canary)) => (
                    ReleaseVerdict::Canary,
                    format!(
                        "{verdict}; as a canary it takes {:.0} % of new jobs until {} of them ended",
                        canary.share * 100.0,
                        canary.min_jobs
                    ),
                ),
                (judged, _) => judged,
            };
            (verdict, reason, Some(id.to_string()))
        }
        Err(refused) => (
            ReleaseVerdict::Rejected,
            format!("its eval could not be queued: {refused}"),
            None,
        ),
    };
    let ruling = Ruling {
        verdict,
        by: BY.into(),
        reason,
        eval_job: job,
        replaces: Replaces::Nothing,
    };
    if let Err(e) = gate
        .recorder
        .record(&candidate, live.version(), ruling)
        .await
    {
        tracing::error!(bundle = %candidate.name(), version = %candidate.version(), error = %e, "release gate: the decision cannot be recorded; the candidate stays held and is evaluated again (the same eval job answers)");
    }
}

/// The eval job's id, once admission took it (or found it); a refusal
/// that would refuse it again is the error.
async fn submitted(gate: &ReleaseGate, eval: NewJob) -> Result<JobId, NotAdmitted> {
    loop {
        match gate.admission.submit(None, eval.clone()).await {
            Ok(id) => return Ok(id),
            Err(NotAdmitted::Unavailable(why) | NotAdmitted::Throttled(why)) => {
                tracing::warn!(bundle = %eval.bundle, error = %why, "release gate: the eval cannot be queued now; trying again");
                tokio::time::sleep(RETRY).await;
            }
            Err(refused) => return Err(refused),
        }
    }
}

/// The eval job once it has ended (read again while the store is down).
async fn ended(gate: &ReleaseGate, id: &JobId) -> Job {
    loop {
        match crate::follow::wait_finished(gate.queue.as_ref(), id, RECHECK).await {
            Ok(job) if job.state.is_terminal() => return job,
            // An eval job never parks; if it did, its cases will end it.
            Ok(_) => tokio::time::sleep(RECHECK).await,
            Err(why) => {
                tracing::warn!(job_id = %id, error = %why, "release gate: cannot read the eval job; trying again");
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

/// The decision an ended eval job gives, and why.
fn judged(job: &Job) -> (ReleaseVerdict, String) {
    if job.state != JobState::Succeeded {
        return (
            ReleaseVerdict::Rejected,
            format!(
                "its eval job {} ended {}: {}",
                job.id,
                job.state.as_str(),
                job.error.as_deref().unwrap_or("no error recorded")
            ),
        );
    }
    let report = job
        .result
        .clone()
        .and_then(|result| serde_json::from_value::<RunReport>(result).ok());
    match report {
        Some(report) if report.pass => (ReleaseVerdict::Promoted, report.verdict),
        Some(report) => (ReleaseVerdict::Rejected, report.verdict),
        None => (
            ReleaseVerdict::Rejected,
            format!("its eval job {} stored no eval report", job.id),
        ),
    }
}
