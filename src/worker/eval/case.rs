//! One case on one version: its job submitted as the eval job's owner
//! (found again by its idempotency key when the eval resumes), waited for
//! and read as what a grader sees ([`Observed`]), then graded.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::EvalJob;
use crate::admit::NotAdmitted;
use crate::evals::{ANSWER_CHARS, CaseRun, EvalCase, Observed, ObservedCall};
use crate::events::{Event, EventEnvelope};
use crate::queue::{Controls, EvalPin, Job, JobId, JobState, NewJob};
use crate::types::StandIns;

/// How often a case's wait reads the store when no notification came.
const RECHECK: Duration = Duration::from_secs(2);
/// The most events of a case's job read for its tool calls.
const MAX_EVENTS: usize = 20_000;
/// Events read per page.
const EVENT_PAGE: usize = 500;
/// How long a case waits before it asks again when the key is at its
/// rate or in-flight cap.
const THROTTLED_WAIT: Duration = Duration::from_secs(1);
/// How long one case waits for room under its key's caps before it fails.
const MAX_THROTTLED: Duration = Duration::from_secs(600);

/// Which version a case job runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    /// The version under test (the eval job's own pin).
    Tested,
    /// The version it is compared against.
    Against,
}

impl Side {
    fn label(self) -> &'static str {
        match self {
            Side::Tested => "tested",
            Side::Against => "against",
        }
    }
}

/// Why an eval stopped before its report.
#[derive(Debug, Clone)]
pub(super) enum Interrupted {
    /// Its cancel was asked for.
    Cancelled,
    /// The store (or admission) cannot take or give a case's job now.
    Unavailable(String),
}

/// `case` run on `pin`: submitted, waited for and observed — what a grader
/// reads, with the run as the report shows it; a case that could not run
/// has no observation, and its run says why.
pub(super) async fn run_on(
    e: &EvalJob<'_>,
    case: &EvalCase,
    side: Side,
    pin: &EvalPin,
) -> Result<(CaseRun, Option<Observed>), Interrupted> {
    let new = NewJob {
        bundle: e.job.bundle.clone(),
        bundle_version: Some(pin.version.clone()),
        bundle_digest: Some(pin.digest.clone()),
        input: case.input.clone(),
        variables: case.variables.clone(),
        messages: case.messages.clone(),
        idempotency_key: Some(job_key(e, side, &case.id, None)),
        limits: e.run.limits.clone(),
        priority: e.job.priority,
        trace: e.job.trace.clone(),
        controls: controls(e, &case.tool_results),
        ..NewJob::default()
    };
    let id = match submit(e, new).await? {
        Ok(id) => id,
        Err(refused) => {
            let run = CaseRun::failed(None, format!("its job was not admitted: {refused}"));
            return Ok((run, None));
        }
    };
    let job = match ended(e, &id).await? {
        Ended::Done(job) => job,
        Ended::Parked(why) => return Ok((CaseRun::failed(Some(id.to_string()), why), None)),
    };
    let observed = observe(e, &job).await?;
    let run = CaseRun {
        job_id: Some(id.to_string()),
        answer: observed.answer.as_deref().map(cut),
        error: observed.error.clone(),
        tool_calls: observed.tool_calls.iter().map(|c| c.name.clone()).collect(),
        turns: observed.turns,
        tokens: observed.tokens,
        cost_usd: observed.cost_usd,
        duration_ms: u64::try_from(observed.duration.as_millis()).unwrap_or(u64::MAX),
        ..CaseRun::default()
    };
    Ok((run, Some(observed)))
}

/// The daemon's controls over a case's (or a judge's) job: stand-ins
/// answer its tools with side effects, with `results`, unless the eval
/// asked for the real tools.
pub(super) fn controls(e: &EvalJob<'_>, results: &BTreeMap<String, Value>) -> Controls {
    Controls {
        stand_ins: (!e.run.real_tools).then(|| StandIns {
            results: results.clone(),
        }),
        ..Controls::default()
    }
}

/// The idempotency key of a case's job (or of its `judge`-th judge's):
/// the eval job, the side and the case, so a resumed eval finds it. A long
/// case id is hashed (the key stays short).
pub(super) fn job_key(e: &EvalJob<'_>, side: Side, case: &str, judge: Option<usize>) -> String {
    let case = match case.len() > 64 {
        true => crate::hex::sha256_hex(case.as_bytes()),
        false => case.to_string(),
    };
    let judge = judge.map(|n| format!(":judge:{n}")).unwrap_or_default();
    format!("eval:{}:{}:{case}{judge}", e.job.id, side.label())
}

/// Submits `job` as the eval job's owner: its id, or why admission refused
/// it (the case fails; the eval goes on). A key at its rate or in-flight
/// cap is waited for; a store that cannot take the job now interrupts the
/// eval.
pub(super) async fn submit(
    e: &EvalJob<'_>,
    job: NewJob,
) -> Result<Result<JobId, NotAdmitted>, Interrupted> {
    let mut throttled = Duration::ZERO;
    loop {
        match e
            .admission
            .submit(e.job.owner.as_deref(), job.clone())
            .await
        {
            Ok(id) => {
                if let Ok(mut submitted) = e.submitted.lock() {
                    submitted.push(id.clone());
                }
                return Ok(Ok(id));
            }
            // A key whose cap leaves no room beside the eval job itself
            // would wait for ever: past a while the case fails, saying so.
            Err(NotAdmitted::Throttled(why)) if throttled >= MAX_THROTTLED => {
                return Ok(Err(NotAdmitted::Refused(format!(
                    "{why} (waited {}s for room under the key's caps; raise its max_in_flight or lower the eval's concurrency)",
                    throttled.as_secs()
                ))));
            }
            Err(NotAdmitted::Throttled(_)) => {
                tokio::time::sleep(THROTTLED_WAIT).await;
                throttled += THROTTLED_WAIT;
            }
            Err(NotAdmitted::Unavailable(why)) => {
                return Err(Interrupted::Unavailable(format!(
                    "a case's job could not be queued now ({why}); the eval resumes and finds the ones queued"
                )));
            }
            Err(refused) => return Ok(Err(refused)),
        }
    }
}

/// How a job an eval waited on ended.
pub(super) enum Ended {
    Done(Box<Job>),
    /// It parked for a person's decision, which an eval cannot give: it
    /// was cancelled, and this says why.
    Parked(String),
}

/// Waits for job `id` to end (cancelling it if it parks for a person).
pub(super) async fn ended(e: &EvalJob<'_>, id: &JobId) -> Result<Ended, Interrupted> {
    let job = crate::follow::wait_finished(e.queue, id, RECHECK)
        .await
        .map_err(|why| Interrupted::Unavailable(format!("job {id} cannot be read: {why}")))?;
    if job.state.is_terminal() {
        return Ok(Ended::Done(Box::new(job)));
    }
    if let Err(why) = e.queue.cancel(id).await {
        tracing::warn!(job_id = %id, error = %why, "eval: a parked case job could not be cancelled");
    }
    Ok(Ended::Parked(format!(
        "its job {id} parked ({}) waiting for a person's decision, which an eval cannot give; it was cancelled — evaluate with tools that need no approval",
        job.state.as_str()
    )))
}

/// Cancels the case jobs the eval submitted (its own cancel).
pub(super) async fn cancel_all(e: &EvalJob<'_>) {
    let submitted = match e.submitted.lock() {
        Ok(submitted) => submitted.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    };
    for id in submitted {
        if let Err(why) = e.queue.cancel(&id).await {
            tracing::warn!(job_id = %id, error = %why, "eval: a case job could not be cancelled");
        }
    }
}

/// What an ended job did, as graders read it.
pub(super) async fn observe(e: &EvalJob<'_>, job: &Job) -> Result<Observed, Interrupted> {
    let result = job.result.as_ref();
    let number = |key: &str| result.and_then(|r| r[key].as_u64()).unwrap_or(0);
    let answer = match job.state {
        JobState::Succeeded => Some(job.answer().unwrap_or_default().to_string()),
        _ => None,
    };
    let error = match job.state {
        JobState::Succeeded => None,
        state => Some(
            job.error
                .clone()
                .unwrap_or_else(|| format!("the job ended {}", state.as_str())),
        ),
    };
    Ok(Observed {
        answer,
        error,
        tool_calls: tool_calls(e, &job.id).await?,
        turns: u32::try_from(number("turn_count")).unwrap_or(u32::MAX),
        tokens: job.tokens_spent,
        cost_usd: job.cost_spent,
        duration: ran_for(job),
    })
}

/// The tool calls job `id` made, in order, from its stored events.
async fn tool_calls(e: &EvalJob<'_>, id: &JobId) -> Result<Vec<ObservedCall>, Interrupted> {
    let mut calls = Vec::new();
    let (mut after, mut read) = (0, 0);
    while read < MAX_EVENTS {
        let page = e
            .queue
            .events_after(id, after, EVENT_PAGE)
            .await
            .map_err(|why| Interrupted::Unavailable(format!("job {id}'s events: {why}")))?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        read += page.len();
        for stored in &page {
            let Ok(envelope) = serde_json::from_str::<EventEnvelope>(&stored.event_json) else {
                continue;
            };
            if let Event::ToolCall {
                tool_name,
                arguments,
                ..
            } = envelope.event
            {
                calls.push(ObservedCall {
                    name: tool_name,
                    arguments: as_json(arguments),
                });
            }
        }
    }
    Ok(calls)
}

/// Arguments as JSON: a model's arguments may be stored as their text.
fn as_json(arguments: serde_json::Value) -> serde_json::Value {
    match &arguments {
        serde_json::Value::String(text) => serde_json::from_str(text).unwrap_or(arguments),
        _ => arguments,
    }
}

/// How long the job ran, from its first start to its end.
fn ran_for(job: &Job) -> Duration {
    let at = |t: &Option<String>| {
        t.as_deref()
            .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
    };
    match (at(&job.started_at), at(&job.finished_at)) {
        (Some(start), Some(end)) => end.duration_since(start).unwrap_or_default(),
        _ => Duration::ZERO,
    }
}

/// An answer cut for the report.
fn cut(answer: &str) -> String {
    match answer.char_indices().nth(ANSWER_CHARS) {
        Some((at, _)) => format!("{}…", &answer[..at]),
        None => answer.to_string(),
    }
}
