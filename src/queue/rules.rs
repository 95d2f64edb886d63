//! The lifecycle's rules, free of any database: the one outcome rule
//! ([`decide`]), how a final event is stamped, how a park is worded and
//! decided, and when an abandoned run is a poison pill (what a resolution
//! writes is `resolution`'s). `lifecycle` applies them inside a
//! transaction; the dialects never see them.

use super::*;
use crate::approval::{ParkedCall, RecordedDecision, Verdict};
use crate::events::{Event, EventEnvelope, JobStatus};
use crate::types::TerminationReason;

/// What the queue records for an attempt's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The job's state from now on (`Queued` means a retry after backoff).
    pub state: JobState,
    /// What the attempt's final event says.
    pub status: JobStatus,
    pub error: Option<String>,
    /// A retry waits for the backoff.
    pub retry: bool,
}

impl Decision {
    /// What the job row keeps of the outcome: the result of a success, the
    /// pending call of a parked job (as JSON text).
    pub fn stored(&self, outcome: &Outcome) -> (Option<String>, Option<String>) {
        match outcome {
            Outcome::Succeeded(value) if self.state == JobState::Succeeded => {
                (Some(value.to_string()), None)
            }
            Outcome::NeedsAttention { pending_call, .. }
                if self.state == JobState::NeedsAttention =>
            {
                (
                    None,
                    Some(serde_json::to_string(pending_call).unwrap_or_default()),
                )
            }
            Outcome::AwaitingApproval { request, .. }
                if self.state == JobState::AwaitingApproval =>
            {
                (
                    None,
                    Some(serde_json::to_string(request).unwrap_or_default()),
                )
            }
            _ => (None, None),
        }
    }

    /// When the job acts next on its own: a retry after its backoff; an
    /// approval request when its timeout denies it (never, without one).
    pub fn run_at(&self, outcome: &Outcome, now: i64, backoff: Duration) -> Option<i64> {
        match outcome {
            _ if self.retry => Some(now.saturating_add(backoff.as_millis() as i64)),
            Outcome::AwaitingApproval { request, .. }
                if self.state == JobState::AwaitingApproval =>
            {
                Some(approval_deadline(request, now))
            }
            _ => None,
        }
    }
}

/// `run_at` of a request that waits forever: the last millisecond of 9999.
const NO_DEADLINE: i64 = 253_402_300_799_999;

fn approval_deadline(request: &ParkedCall, now: i64) -> i64 {
    request
        .approval
        .as_ref()
        .and_then(|terms| terms.timeout_ms)
        .map_or(NO_DEADLINE, |ms| now.saturating_add(ms as i64))
}

/// The request a parking job keeps, stamped with when it was made and when
/// its timeout denies it.
pub(crate) fn stamp_request(request: &mut ParkedCall, now: i64) {
    let deadline = approval_deadline(request, now);
    if let Some(terms) = &mut request.approval {
        terms.requested_at = Some(rfc3339(now));
        terms.expires_at = terms.timeout_ms.map(|_| rfc3339(deadline));
    }
}

/// A parking outcome worded for its job: what it waits for and the
/// commands that answer it, naming the job (its run knew no job id).
pub(crate) fn parked_for(outcome: &Outcome, job: &JobId, now: i64) -> Option<Outcome> {
    match outcome {
        Outcome::AwaitingApproval { request, .. } => {
            let mut request = request.clone();
            stamp_request(&mut request, now);
            Some(Outcome::AwaitingApproval {
                error: request.describe(job.as_str()),
                request,
            })
        }
        Outcome::NeedsAttention { pending_call, .. } => Some(Outcome::NeedsAttention {
            error: pending_call.describe(job.as_str()),
            pending_call: pending_call.clone(),
        }),
        _ => None,
    }
}

/// The request a job awaits a decision on, if it is `call`; else why no
/// decision can be taken.
pub(crate) fn awaited_request(
    job: &Job,
    call: &str,
    store: &str,
) -> Result<ParkedCall, QueueError> {
    if job.state != JobState::AwaitingApproval {
        return Err(QueueError::NotAwaitingApproval {
            job: job.id.clone(),
            state: job.state,
        });
    }
    let request = job
        .pending_call
        .clone()
        .filter(|parked| parked.approval.is_some())
        .ok_or_else(|| QueueError::Store {
            path: store.to_string(),
            detail: format!("job {} awaits approval without a readable request", job.id),
        })?;
    if request.call_id != call {
        return Err(QueueError::NotTheAwaitedCall {
            job: job.id.clone(),
            call: call.to_string(),
            awaited: request.call_id,
            tool: request.tool,
        });
    }
    Ok(request)
}

/// The `ApprovalDecided` event a decision adds to the job's log (as its
/// next event).
pub(crate) fn decided_event(
    job: &Job,
    request: &ParkedCall,
    decision: &RecordedDecision,
    seq: u64,
) -> EventEnvelope {
    let event = Event::ApprovalDecided {
        turn: request.turn,
        tool_name: request.tool.clone(),
        call_id: request.call_id.clone(),
        decision: decision.verdict.kind().to_string(),
        by: decision.by.clone(),
        reason: match &decision.verdict {
            Verdict::Deny { reason } => reason.clone(),
            _ => None,
        },
        arguments: match &decision.verdict {
            Verdict::Edit { arguments } => Some(arguments.clone()),
            _ => None,
        },
    };
    job_event(job, seq, event)
}

/// The `ApprovalRequested` event of a park, written only in the commit
/// that parks the job (`lifecycle::finish`): so no one hears of a request
/// before it can be decided, and a run that crashed before its park asks
/// (and is heard) exactly once, at the park that does commit.
pub(crate) fn requested_event(request: &ParkedCall) -> Event {
    Event::ApprovalRequested {
        turn: request.turn,
        tool_name: request.tool.clone(),
        call_id: request.call_id.clone(),
        arguments: request.arguments.clone(),
        digest: request.digest().to_string(),
    }
}

/// An event the queue adds to a job's log itself, as event `seq` of the
/// job's own run.
pub(crate) fn job_event(job: &Job, seq: u64, event: Event) -> EventEnvelope {
    EventEnvelope {
        run_id: job.id.to_string(),
        bundle: job.bundle.clone(),
        bundle_version: job.bundle_version.clone().unwrap_or_default(),
        parent: None,
        seq,
        timestamp: crate::events::timestamp_now(),
        event,
    }
}

/// The rule for a released attempt (shutdown): a job someone asked to
/// cancel ends cancelled rather than run again; any other goes back to the
/// queue.
pub fn decide_release(cancel_requested: bool) -> Decision {
    let (state, status) = if cancel_requested {
        (JobState::Cancelled, JobStatus::Cancelled)
    } else {
        (JobState::Queued, JobStatus::Released)
    };
    Decision {
        state,
        status,
        error: None,
        retry: false,
    }
}

/// The one rule for a job's outcome: a cancel request wins over anything
/// but success; a retryable failure is retried while attempts remain, then
/// the job is dead.
pub fn decide(
    outcome: &Outcome,
    attempt: u32,
    max_attempts: u32,
    cancel_requested: bool,
) -> Decision {
    let settle = |state, status, error: Option<&String>| Decision {
        state,
        status,
        error: error.cloned(),
        retry: false,
    };
    match outcome {
        Outcome::Succeeded(_) => settle(JobState::Succeeded, JobStatus::Succeeded, None),
        Outcome::Failed { .. }
        | Outcome::NeedsAttention { .. }
        | Outcome::AwaitingApproval { .. }
            if cancel_requested =>
        {
            Decision {
                state: JobState::Cancelled,
                status: JobStatus::Cancelled,
                error: Some("cancelled by request".into()),
                retry: false,
            }
        }
        Outcome::AwaitingApproval { error, .. } => settle(
            JobState::AwaitingApproval,
            JobStatus::AwaitingApproval,
            Some(error),
        ),
        Outcome::NeedsAttention { error, .. } => settle(
            JobState::NeedsAttention,
            JobStatus::NeedsAttention,
            Some(error),
        ),
        Outcome::Failed {
            error,
            retryable: true,
        } if attempt < max_attempts => Decision {
            state: JobState::Queued,
            status: JobStatus::Retrying,
            error: Some(error.clone()),
            retry: true,
        },
        Outcome::Failed {
            error,
            retryable: true,
        } => settle(JobState::Dead, JobStatus::Dead, Some(error)),
        Outcome::Failed {
            error,
            retryable: false,
        } => settle(JobState::Failed, JobStatus::Failed, Some(error)),
    }
}

impl Decision {
    /// Why the job ended, the one rule for every way a job ends: `None`
    /// while it can still run (queued for a retry, parked); `cancelled` for
    /// a cancelled job; else the reason its own run `reported`, unless that
    /// contradicts the state (a failed job whose run claimed an answer, or
    /// reported nothing, failed with an `error`).
    pub fn termination_reason(
        &self,
        reported: Option<TerminationReason>,
    ) -> Option<TerminationReason> {
        match self.state {
            JobState::Cancelled => Some(TerminationReason::Cancelled),
            JobState::Succeeded => Some(reported.unwrap_or(TerminationReason::NoToolCalls)),
            JobState::Failed | JobState::Dead => Some(match reported {
                Some(reason)
                    if !reason.answered()
                        && !matches!(
                            reason,
                            TerminationReason::NeedsAttention | TerminationReason::AwaitingApproval
                        ) =>
                {
                    reason
                }
                _ => TerminationReason::Error,
            }),
            _ => None,
        }
    }
}

/// What the worker's final event says its run ended with.
pub(crate) fn reported_reason(event: Option<&EventEnvelope>) -> Option<TerminationReason> {
    match event.map(|e| &e.event) {
        Some(Event::JobState {
            termination_reason, ..
        }) => *termination_reason,
        _ => None,
    }
}

/// Stamps the decision into the attempt's final event (a `JobState` event
/// prepared by the worker with its sequence number, duration and the
/// reason its run reported).
pub fn stamp_final(mut event: EventEnvelope, decision: &Decision) -> EventEnvelope {
    let reason = decision.termination_reason(reported_reason(Some(&event)));
    if let Event::JobState {
        state,
        error,
        termination_reason,
        ..
    } = &mut event.event
    {
        *state = decision.status;
        *error = decision.error.clone();
        *termination_reason = reason;
    }
    event
}

/// How many of `events` are tool calls that ended in an error (any run of
/// the job): what the job's `tool_errors` counts.
pub(crate) fn tool_errors(events: &[&EventEnvelope]) -> i64 {
    events
        .iter()
        .filter(|e| match &e.event {
            Event::ToolResult {
                is_error: true,
                error_type,
                ..
            } => error_type.as_deref() != Some(crate::types::INTERRUPTED_CALL),
            _ => false,
        })
        .count() as i64
}

/// The answer of a committed write, or the error of one whose answer was
/// lost on the way (the `steps_reply_lost` failpoint: a connection that drops
/// right after COMMIT), which the writer retries.
pub(crate) fn lost_reply(store: &str) -> Result<(), QueueError> {
    if crate::failpoint::fails(crate::failpoint::Failpoint::StepsReplyLost) {
        return Err(QueueError::Store {
            path: store.to_string(),
            detail: "the write committed but its answer was lost (failpoint steps_reply_lost)"
                .into(),
        });
    }
    Ok(())
}

/// Whether the event stored at a sequence number (its attempt and JSON) is
/// the one an attempt writes again: a write whose commit happened but whose
/// reply was lost, retried. Anything else at that number is a duplicate.
pub(crate) fn same_event(stored: (u32, String), attempt: u32, json: &str) -> bool {
    stored.0 == attempt && stored.1 == json
}

/// The final event of a job the queue ends or parks itself (a cancelled
/// queued or parked job, a failed resolve, a poison pill): the next event of
/// its log, in the transaction that ends it.
pub(crate) fn ended_by_request(job: &Job, seq: u64) -> Option<EventEnvelope> {
    let status = match job.state {
        JobState::Cancelled => JobStatus::Cancelled,
        JobState::Failed => JobStatus::Failed,
        JobState::NeedsAttention => JobStatus::NeedsAttention,
        _ => return None,
    };
    let event = Event::JobState {
        state: status,
        attempt: job.attempts,
        error: job.error.clone(),
        duration_ms: None,
        spent: None,
        spent_by_bundle: Default::default(),
        termination_reason: job.termination_reason,
    };
    Some(job_event(job, seq, event))
}

/// A runnable job as a backend's lease queries see it: the best due queued
/// job, or the best expired lease.
pub(crate) struct Candidate {
    pub id: String,
    pub running: bool,
    pub crash_resumes: u32,
    /// Its bundle, which a first attempt is pinned to at its lease.
    pub bundle: String,
    /// Its key's pass once it is leased (`queue::fair`); `None` for an
    /// abandoned run, which keeps the pass of its first lease.
    pub fair_pass: Option<i64>,
}

impl Candidate {
    /// Whether an abandoned run (its worker's lease expired: the daemon
    /// died or stalled) is a poison pill, to park for an operator instead of
    /// resuming: it has resumed `max_crash_resumes` times. Otherwise it is
    /// leased (a resume, which uses no attempt of `max_attempts`); one asked
    /// to stop ends `cancelled` at once in its worker, through the one rule
    /// of [`decide`], with its final event.
    pub(crate) fn is_poison_pill(&self, max_crash_resumes: u32) -> bool {
        self.running && self.crash_resumes >= max_crash_resumes
    }

    /// Why a poison pill parked: how often its worker died, where it was
    /// (`last`: "in <step>" or "after <event>", see `poison::where_it_died`), and
    /// what to do.
    pub(crate) fn poison_reason(&self, max_crash_resumes: u32, last: &str) -> String {
        format!(
            "job {}: its worker died (or stalled past its lease) {} times running it, last {last}; it may be what kills the daemon, so it is not resumed again on its own (queue.max_crash_resumes = {max_crash_resumes}): read its journal and events, then `structured-agents resolve {} --retry` to resume it or `--fail` to end it",
            self.id,
            self.crash_resumes + 1,
            self.id,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(retryable: bool) -> Outcome {
        Outcome::Failed {
            error: "e".into(),
            retryable,
        }
    }

    #[test]
    fn one_rule_decides_every_outcome() {
        let parked = Outcome::NeedsAttention {
            error: "e".into(),
            pending_call: Box::new(
                serde_json::from_value(serde_json::json!({
                    "turn": 1, "call_id": "c", "tool": "t", "effect": "unsafe"
                }))
                .unwrap(),
            ),
        };
        let cases = [
            (
                Outcome::Succeeded(Value::Null),
                1,
                false,
                JobState::Succeeded,
                JobStatus::Succeeded,
            ),
            (
                Outcome::Succeeded(Value::Null),
                1,
                true,
                JobState::Succeeded,
                JobStatus::Succeeded,
            ),
            (
                failed(true),
                1,
                false,
                JobState::Queued,
                JobStatus::Retrying,
            ),
            (failed(true), 3, false, JobState::Dead, JobStatus::Dead),
            (failed(false), 1, false, JobState::Failed, JobStatus::Failed),
            (
                failed(true),
                1,
                true,
                JobState::Cancelled,
                JobStatus::Cancelled,
            ),
            (
                parked.clone(),
                1,
                false,
                JobState::NeedsAttention,
                JobStatus::NeedsAttention,
            ),
            (parked, 1, true, JobState::Cancelled, JobStatus::Cancelled),
        ];
        for (outcome, attempt, cancel, state, status) in cases {
            let d = decide(&outcome, attempt, 3, cancel);
            assert_eq!(
                (d.state, d.status),
                (state, status),
                "{outcome:?} attempt {attempt} cancel {cancel}"
            );
            assert_eq!(d.retry, state == JobState::Queued);
        }
    }
}
