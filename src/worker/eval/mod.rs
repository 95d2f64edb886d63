//! An `eval` job: a run of its bundle's suite (`crate::evals`), from the
//! `evals/` directory of the content the job is pinned to. Each case runs
//! as a job of the eval job's owner — admitted through `admit::OnBehalf`
//! like any submit of that key — pinned to the version under test (and,
//! with `against`, to the version compared against), `concurrency` at a
//! time; each is graded when it ends, a judge grader by a job of its own
//! judge bundle, a process grader by its program. The report
//! (`evals::RunReport`) is the job's result.
//!
//! It survives a crash without paying twice: a case job's idempotency key
//! is derived from the eval job, the side and the case, so a resumed eval
//! finds the jobs its last attempt submitted — finished ones are graded
//! again from what they stored, running ones are waited for.
//! A cancel of the eval cancels the case jobs it is waiting on.
//!
//! - `case`: one case on one version — its job submitted, waited for and
//!   read as an `evals::Observed` (and submitting and waiting, which the
//!   judges' jobs use too);
//! - `grade`: the case's graders, the judges' jobs and process graders.

mod case;
mod grade;

use futures::stream::{self, StreamExt, TryStreamExt};

use crate::admit::OnBehalf;
use crate::evals::{CaseReport, CaseResult, CaseRun, EvalCase, PassRule, RunReport, Suite};
use crate::events::daemon::{DaemonBus, DaemonEvent, EvalRan};
use crate::queue::{EvalPin, EvalRun, JobQueue, LeasedJob, Outcome};
use crate::registry::LoadedBundle;
use crate::runner::RunScope;
use case::{Interrupted, Side};

/// What an eval job runs with.
pub(super) struct EvalJob<'a> {
    pub queue: &'a dyn JobQueue,
    pub admission: &'a dyn OnBehalf,
    pub loaded: &'a LoadedBundle,
    pub job: &'a LeasedJob,
    pub run: &'a EvalRun,
    pub scope: &'a RunScope,
    /// Where the run's report is told (metrics, the log).
    pub bus: &'a DaemonBus,
    /// The case and judge jobs submitted (or found) so far: what a cancel
    /// of the eval cancels.
    pub submitted: std::sync::Mutex<Vec<crate::queue::JobId>>,
}

/// Runs the eval `e.job` asks for; its report is the job's result.
pub(super) async fn run(e: EvalJob<'_>) -> Outcome {
    let cases = match suite_cases(e.loaded, &e.run.tags).await {
        Ok(cases) => cases,
        Err(error) => {
            return Outcome::Failed {
                error: format!("job {}: {error}", e.job.id),
                retryable: false,
            };
        }
    };
    let tested = EvalPin {
        version: e.loaded.version().to_string(),
        digest: e.loaded.identity.to_string(),
    };
    let ran = tokio::select! {
        ran = all_cases(&e, &cases, &tested) => ran,
        () = e.scope.cancel.cancelled() => Err(Interrupted::Cancelled),
    };
    let reports = match ran {
        Ok(reports) => reports,
        Err(Interrupted::Cancelled) => {
            // The run is also stopped when the daemon drains or the lease
            // is lost: then the case jobs go on, and the eval resumes to
            // find them. Only the eval's own cancel cancels them.
            if asked_to_cancel(&e).await {
                case::cancel_all(&e).await;
            }
            return Outcome::Failed {
                error: format!("job {}: the eval was stopped by its cancel", e.job.id),
                retryable: false,
            };
        }
        // The store or admission could not take a case now: the eval is
        // tried again, and finds the case jobs it submitted already.
        Err(Interrupted::Unavailable(why)) => {
            return Outcome::Failed {
                error: format!("job {}: {why}", e.job.id),
                retryable: true,
            };
        }
    };
    let rule = PassRule {
        min_score: e.run.min_score,
        no_regressions: e.run.no_regressions,
    };
    let against = e.run.against.as_ref().map(|pin| pin.version.clone());
    let mut report = RunReport::new(e.job.bundle.clone(), tested.version, against, reports, rule);
    report.real_tools = e.run.real_tools;
    if !e.run.real_tools {
        report.stand_ins = crate::tools::stand_in::stood_in(&e.loaded.tools);
    }
    e.bus.publish(DaemonEvent::EvalRan(Box::new(EvalRan {
        job: e.job.id.to_string(),
        report: report.clone(),
    })));
    match serde_json::to_value(&report) {
        Ok(report) => Outcome::Succeeded(report),
        Err(error) => Outcome::Failed {
            error: format!(
                "job {}: the eval's report cannot be stored: {error}",
                e.job.id
            ),
            retryable: false,
        },
    }
}

/// Whether someone asked for the eval job's cancel (rather than the
/// daemon stopping its run); a job that cannot be read counts as not.
async fn asked_to_cancel(e: &EvalJob<'_>) -> bool {
    match e.queue.get(&e.job.id).await {
        Ok(job) => job.is_some_and(|job| job.cancel_requested),
        Err(why) => {
            tracing::warn!(job_id = %e.job.id, error = %why, "eval: cannot tell whether it was cancelled; its case jobs go on");
            false
        }
    }
}

/// Why an eval has no cases to run.
#[derive(Debug, thiserror::Error)]
enum NoCases {
    #[error("reading the suite failed: {0}")]
    Task(String),
    #[error("bundle {name:?} version {version}: {source}")]
    Suite {
        name: String,
        version: String,
        source: crate::evals::EvalError,
    },
}

/// The suite's cases the run asks for, read off the runtime thread.
async fn suite_cases(loaded: &LoadedBundle, tags: &[String]) -> Result<Vec<EvalCase>, NoCases> {
    let dir = loaded.bundle.dir.join("evals");
    let wanted = tags.to_vec();
    tokio::task::spawn_blocking(move || Suite::cases_to_run(&dir, &wanted))
        .await
        .map_err(|e| NoCases::Task(e.to_string()))?
        .map_err(|source| NoCases::Suite {
            name: loaded.name().to_string(),
            version: loaded.version().to_string(),
            source,
        })
}

/// Every case on the version under test (and the compared one),
/// `concurrency` case jobs at a time; the reports in the suite's order.
async fn all_cases(
    e: &EvalJob<'_>,
    cases: &[EvalCase],
    tested: &EvalPin,
) -> Result<Vec<CaseReport>, Interrupted> {
    let concurrency = usize::try_from(e.run.concurrency.max(1)).unwrap_or(1);
    // An async fn per case rather than a closure's async block: the
    // compiler proves such a future `Send` (the worker spawns it).
    let each: Vec<_> = cases
        .iter()
        .enumerate()
        .map(|(index, eval_case)| one_case(e, index, eval_case, tested))
        .collect();
    let mut reports: Vec<(usize, CaseReport)> = stream::iter(each)
        .buffer_unordered(concurrency)
        .try_collect()
        .await?;
    reports.sort_by_key(|(index, _)| *index);
    Ok(reports.into_iter().map(|(_, report)| report).collect())
}

/// One case on the version under test and, with `against`, on that one
/// too (both at once): its report, with its place in the suite.
async fn one_case(
    e: &EvalJob<'_>,
    index: usize,
    eval_case: &EvalCase,
    tested: &EvalPin,
) -> Result<(usize, CaseReport), Interrupted> {
    let against = async {
        match &e.run.against {
            Some(pin) => graded(e, eval_case, Side::Against, pin).await.map(Some),
            None => Ok(None),
        }
    };
    let (here, there) = tokio::try_join!(graded(e, eval_case, Side::Tested, tested), against)?;
    Ok((index, CaseReport::new(eval_case.id.clone(), here, there)))
}

/// `eval_case` run on `pin` and graded.
async fn graded(
    e: &EvalJob<'_>,
    eval_case: &EvalCase,
    side: Side,
    pin: &EvalPin,
) -> Result<CaseRun, Interrupted> {
    let (mut run, observed) = case::run_on(e, eval_case, side, pin).await?;
    let Some(observed) = observed else {
        return Ok(run);
    };
    let grades = grade::grades(e, eval_case, side, &observed, &mut run).await?;
    let result = CaseResult::new(eval_case.id.clone(), grades, eval_case.threshold);
    Ok(run.scored(result))
}
