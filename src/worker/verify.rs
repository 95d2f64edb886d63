//! A `verify` job: the crash matrix of its bundle (`crate::verify`), run
//! on a worker because the API never runs a job (`POST
//! /v1/bundles/{name}/verify` makes one and waits for it). It verifies the
//! content the job is pinned to, in a work directory of the job's own
//! under the state directory (`verify/{job id}`, emptied first: an attempt
//! the daemon did not finish may have left copies there, and removed at
//! the end), stops at [`DAEMON_MAX_DURATION`] or the job's cancel, and
//! ends with the report as the job's result.
//!
//! A verify that gives no report records why ([`Refusal`], typed) in the
//! job's journal before the job fails, so that the route answers the
//! status the refusal names rather than reading one out of a message.

use std::path::PathBuf;

use crate::queue::{LeasedJob, Outcome, VerifyRun};
use crate::registry::{LoadedBundle, Snapshot};
use crate::runner::RunScope;
use crate::types::StandIns;
use crate::verify::refusal::{REFUSED_STEP, REFUSED_TURN};
use crate::verify::{self, DAEMON_MAX_DURATION, Refusal, ToolMode};

/// Runs `run`, the verify `job` asked for, on `loaded`.
pub(super) async fn run(
    snapshot: &Snapshot,
    loaded: &LoadedBundle,
    job: &LeasedJob,
    run: &VerifyRun,
    scope: &RunScope,
) -> Outcome {
    let work_root = snapshot
        .config
        .paths
        .state_dir
        .join("verify")
        .join(job.id.to_string());
    remove(&work_root).await;
    let request = match request(snapshot, loaded, run, work_root.clone()) {
        Ok(request) => request,
        Err(refusal) => return refused(job, scope, refusal).await,
    };
    let verified = tokio::select! {
        verified = tokio::time::timeout(DAEMON_MAX_DURATION, verify::verify(request)) => verified,
        () = scope.cancel.cancelled() => {
            remove(&work_root).await;
            return Outcome::Failed {
                error: format!("job {}: the verify was stopped by its cancel", job.id),
                retryable: false,
            };
        }
    };
    remove(&work_root).await;
    let refusal = match verified {
        Ok(Ok(report)) => {
            tracing::info!(
                job_id = %job.id,
                bundle = %job.bundle,
                version = %report.version,
                crash_points = report.crash_points.len(),
                violations = report.violations,
                "verify: the bundle's crash matrix was run"
            );
            return match serde_json::to_value(&report) {
                Ok(report) => Outcome::Succeeded(report),
                Err(e) => Outcome::Failed {
                    error: format!("job {}: the verify's report cannot be stored: {e}", job.id),
                    retryable: false,
                },
            };
        }
        Ok(Err(e)) => Refusal::from(&e),
        Err(_) => Refusal::timed_out(format!(
            "verifying bundle {:?} took longer than {}s and was stopped: its tools or its reply script are too slow for a verify in the daemon; run `structured-agents verify` on its directory instead",
            job.bundle,
            DAEMON_MAX_DURATION.as_secs()
        )),
    };
    refused(job, scope, refusal).await
}

/// The verify's request: the job's pinned bundle copy, the daemon's models,
/// plugins and egress rule, what the job asked for.
fn request(
    snapshot: &Snapshot,
    loaded: &LoadedBundle,
    run: &VerifyRun,
    work_root: PathBuf,
) -> Result<verify::Request, Refusal> {
    let exchange = run
        .exchange
        .as_deref()
        .map(verify::parse_exchange)
        .transpose()
        .map_err(|e| Refusal::from(&e))?;
    let tools = match run.real_tools {
        true => ToolMode::Real,
        false => ToolMode::StandIns(StandIns {
            results: run.tool_results.clone(),
        }),
    };
    Ok(verify::Request {
        dir: loaded.bundle.dir.clone(),
        models: snapshot.models.clone(),
        exchange,
        input: run.input.clone(),
        variables: run.variables.clone(),
        plugins: Some(snapshot.plugins.clone()),
        egress: snapshot.egress.clone(),
        work_root,
        tools,
    })
}

/// Records `refusal` in the job's journal, then fails the job with its
/// message (never retried: the same verify would be refused again).
async fn refused(job: &LeasedJob, scope: &RunScope, refusal: Refusal) -> Outcome {
    if let Err(e) = scope
        .journal
        .record_value(REFUSED_TURN, REFUSED_STEP, &refusal)
        .await
    {
        tracing::warn!(job_id = %job.id, error = %e, "verify: why it gave no report could not be journaled");
    }
    Outcome::Failed {
        error: format!("job {}: {}", job.id, refusal.message),
        retryable: false,
    }
}

/// Removes a verify's work directory, if there is one.
async fn remove(dir: &std::path::Path) {
    if let Err(e) = tokio::fs::remove_dir_all(dir).await
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(dir = %dir.display(), error = %e, "verify: cannot remove its work directory");
    }
}
