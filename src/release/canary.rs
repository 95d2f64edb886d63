//! A canary: a candidate whose evals passed takes `release.canary.share`
//! of the new jobs beside the version serving (admission pins them to it:
//! `admit::canary`). This watches how the jobs of both that were submitted
//! since the canary began and have ended did — the share that failed, the
//! cost per job — and once `min_jobs` of the candidate's ended, promotes
//! it, or rolls it back (rejected, which sends every new job to the
//! serving version again) when its failure rate exceeds the serving
//! version's by more than `failure_margin`, or its cost per job by more
//! than `cost_margin`. An operator's promote or reject ends the watch; a
//! restart picks it up from the decision's time, which the record keeps.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{ReleaseGate, Ruling};
use crate::bundle::CanarySection;
use crate::queue::{JobFilter, JobKind, JobOrder, JobState, QueueError, Replaces};
use crate::registry::{LoadedBundle, Registry, ReleaseVerdict};

/// How often the jobs are counted again.
const LOOK_EVERY: Duration = Duration::from_secs(2);
/// Jobs read a page.
const PAGE: usize = 500;
/// The most jobs one count reads (both versions): past it the count is
/// judged on what it read.
const MAX_READ: usize = 20_000;
/// Who the gate's decisions are by.
const BY: &str = "gate";

/// How one version's jobs did since the canary began.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Tally {
    /// Ended jobs (a cancelled one says nothing of the version: left out).
    ended: u64,
    failed: u64,
    cost_usd: f64,
}

impl Tally {
    fn add(&mut self, state: JobState, cost_usd: f64) {
        self.ended += 1;
        if JobState::ERRORED.contains(&state) {
            self.failed += 1;
        }
        self.cost_usd += cost_usd;
    }

    fn failure_rate(&self) -> f64 {
        match self.ended {
            0 => 0.0,
            n => self.failed as f64 / n as f64,
        }
    }

    fn cost_per_job(&self) -> f64 {
        match self.ended {
            0 => 0.0,
            n => self.cost_usd / n as f64,
        }
    }
}

/// Watches the canary `candidate` beside `live` from `since` until it is
/// decided.
pub(super) async fn watch(
    gate: ReleaseGate,
    live: Arc<LoadedBundle>,
    candidate: Arc<LoadedBundle>,
    since: SystemTime,
) {
    let Some(canary) = candidate
        .bundle
        .raw
        .release
        .as_ref()
        .and_then(|release| release.canary.clone())
    else {
        return;
    };
    let mut counted = Counted::default();
    while still_canary(&gate.recorder.registry, &candidate) {
        match tally(&gate, &live, &candidate, since, &mut counted).await {
            Ok((tried, serving)) if tried.ended >= u64::from(canary.min_jobs) => {
                let (verdict, reason) = judge(&canary, tried, serving, live.version());
                let ruling = Ruling {
                    verdict,
                    by: BY.into(),
                    reason,
                    eval_job: None,
                    replaces: Replaces::Verdict(ReleaseVerdict::Canary.as_str().into()),
                };
                if let Err(e) = gate
                    .recorder
                    .record(&candidate, live.version(), ruling)
                    .await
                {
                    tracing::error!(bundle = %candidate.name(), version = %candidate.version(), error = %e, "release gate: the canary's decision cannot be recorded; it is counted again");
                } else {
                    return;
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(bundle = %candidate.name(), error = %e, "release gate: the canary's jobs cannot be counted now; trying again")
            }
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

/// Whether `candidate` is still held as a canary (an operator's word, or
/// a newer version, ends it).
fn still_canary(registry: &Registry, candidate: &LoadedBundle) -> bool {
    let snapshot = registry.snapshot();
    snapshot
        .bundles
        .get(candidate.name())
        .and_then(|entry| entry.candidate.as_ref())
        .is_some_and(|held| {
            held.loaded.identity == candidate.identity
                && held
                    .decision
                    .as_ref()
                    .is_some_and(|d| d.verdict == ReleaseVerdict::Canary)
        })
}

/// What earlier counts settled: the tallies of every job up to `cursor`
/// (in creation order), none of which can change any more — each that
/// counts had ended — so the next count reads on from there rather than
/// every job since the canary began, every time.
#[derive(Debug, Default)]
struct Counted {
    tried: Tally,
    serving: Tally,
    cursor: Option<String>,
}

/// The candidate's and the serving version's jobs submitted since
/// `since` that have ended: the bundle's own runs only (not evals, tool
/// runs or verifies, which say nothing of how it serves). Reads on from
/// what `counted` settled, and settles what it can.
async fn tally(
    gate: &ReleaseGate,
    live: &LoadedBundle,
    candidate: &LoadedBundle,
    since: SystemTime,
    counted: &mut Counted,
) -> Result<(Tally, Tally), QueueError> {
    let from = since
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    let (mut tried, mut serving) = (counted.tried, counted.serving);
    let (mut cursor, mut read) = (counted.cursor.clone(), 0);
    // Every job that counts read so far had ended: what is read is settled.
    let mut settled = true;
    while read < MAX_READ {
        let page = gate
            .queue
            .list(JobFilter {
                bundle: Some(candidate.name().to_string()),
                created_from: Some(from),
                order: JobOrder::CreatedAsc,
                limit: PAGE,
                cursor,
                ..JobFilter::default()
            })
            .await?;
        read += page.jobs.len();
        for job in &page.jobs {
            let tally = match job.bundle_digest.as_deref() {
                _ if !matches!(job.kind, JobKind::Bundle | JobKind::Stage { .. }) => None,
                Some(digest) if digest == candidate.identity.as_str() => Some(&mut tried),
                Some(digest) if digest == live.identity.as_str() => Some(&mut serving),
                _ => None,
            };
            if let Some(tally) = tally {
                match job.state {
                    JobState::Cancelled => {}
                    state if state.is_terminal() => tally.add(state, job.cost_spent),
                    _ => settled = false,
                }
            }
            if settled {
                *counted = Counted {
                    tried,
                    serving,
                    cursor: Some(job.id.to_string()),
                };
            }
        }
        match page.next_cursor {
            Some(next) if !page.jobs.is_empty() => cursor = Some(next),
            _ => break,
        }
    }
    Ok((tried, serving))
}

/// The canary's decision from how its jobs (`tried`) and the serving
/// version's (`serving`) did, and why.
fn judge(
    canary: &CanarySection,
    tried: Tally,
    serving: Tally,
    serving_version: &str,
) -> (ReleaseVerdict, String) {
    let figures = format!(
        "its {} job(s) failed {:.0} % at ${:.4} a job; version {serving_version}'s {} failed {:.0} % at ${:.4}",
        tried.ended,
        tried.failure_rate() * 100.0,
        tried.cost_per_job(),
        serving.ended,
        serving.failure_rate() * 100.0,
        serving.cost_per_job(),
    );
    if tried.failure_rate() > serving.failure_rate() + canary.failure_margin {
        return (
            ReleaseVerdict::Rejected,
            format!(
                "rolled back: as a canary it failed more than the version serving by over {:.0} points ({figures})",
                canary.failure_margin * 100.0
            ),
        );
    }
    // With no cost on the serving side (a free model, or no job of it yet)
    // there is nothing to compare the canary's cost with.
    let costlier = serving.cost_per_job() > 0.0
        && tried.cost_per_job() > serving.cost_per_job() * (1.0 + canary.cost_margin);
    if costlier {
        return (
            ReleaseVerdict::Rejected,
            format!(
                "rolled back: as a canary it cost more a job than the version serving by over {:.0} % ({figures})",
                canary.cost_margin * 100.0
            ),
        );
    }
    (
        ReleaseVerdict::Promoted,
        format!("promoted: as a canary it did as well as the version serving ({figures})"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canary() -> CanarySection {
        CanarySection {
            share: 0.1,
            min_jobs: 10,
            failure_margin: 0.05,
            cost_margin: 0.25,
        }
    }

    fn tally(ended: u64, failed: u64, cost_usd: f64) -> Tally {
        Tally {
            ended,
            failed,
            cost_usd,
        }
    }

    #[test]
    fn a_canary_is_judged_against_the_version_serving_with_its_margins() {
        use ReleaseVerdict::{Promoted, Rejected};
        // (canary, serving, verdict), each tally (ended, failed, cost).
        let cases = [
            // Within the failure margin: 10 % against 6 %.
            ((10, 1, 0.0), (50, 3, 0.0), Promoted),
            // Over it: 20 % against 6 %.
            ((10, 2, 0.0), (50, 3, 0.0), Rejected),
            // No serving job yet: judged against 0 %.
            ((10, 0, 0.0), (0, 0, 0.0), Promoted),
            // Cost: 0.12 a job against 0.10 is within 25 %, 0.13 is not.
            ((10, 0, 1.2), (10, 0, 1.0), Promoted),
            ((10, 0, 1.3), (10, 0, 1.0), Rejected),
            // Nothing to compare a cost with when the serving version's is 0.
            ((10, 0, 5.0), (10, 0, 0.0), Promoted),
        ];
        for ((e, f, c), (se, sf, sc), expected) in cases {
            let (verdict, reason) = judge(&canary(), tally(e, f, c), tally(se, sf, sc), "1");
            assert_eq!(verdict, expected, "{reason}");
        }
        let (_, reason) = judge(&canary(), tally(10, 2, 0.0), tally(50, 3, 0.0), "1");
        assert!(
            reason.contains("rolled back")
                && reason.contains("20 %")
                && reason.contains("version 1"),
            "{reason}"
        );
    }
}
