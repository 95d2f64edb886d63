//! Interrupts are approvals: LangGraph's `Command(resume=…)` — a run with
//! `command: {"resume": …}` on a thread whose newest run is parked for a
//! person — decides the parked call through the one decision path
//! (`approvals::take`: the `approve` scope, the tool's `approval.by`, the
//! digest the interrupt showed) and continues the same job: the run that
//! answers is the parked one, going on. The answer is read as LangChain's
//! human-in-the-loop decisions (`approve`, `edit`, `reject`, `respond`),
//! keyed by the interrupt's id or not, or as a plain yes or no.

use serde_json::Value;

use super::super::AppState;
use super::super::approvals::{self, interrupt_parts};
use super::super::auth::Caller;
use super::super::conversations::jobs_of;
use super::super::error::{ApiError, ErrorCode};
use crate::approval::{Decision, Verdict};
use crate::queue::{Job, JobState};

/// A resume found: the parked job, the call it waits on and the decision
/// the client's answer makes, not taken yet (a stream listens first).
pub(super) struct Pending {
    pub job: Job,
    call: String,
    digest: String,
    verdict: Verdict,
}

/// A resume taken: the job going on, and its last stored event before the
/// decision (a stream of the resumed run starts after it).
pub(super) struct Resumed {
    pub job: Job,
    pub after_seq: u64,
}

fn invalid(field: &str, why: impl Into<String>) -> ApiError {
    ApiError::field(ErrorCode::InvalidRequest, field, why.into())
}

/// Reads `command` for the caller's thread `thread`: the parked call of its
/// newest run and the decision the answer makes.
pub(super) async fn find(
    state: &AppState,
    caller: &Caller,
    thread: &str,
    command: &Value,
) -> Result<Pending, ApiError> {
    let answer = resume_of(command)?;
    let jobs = jobs_of(state, caller.name(), thread).await?;
    let newest = jobs.last();
    let parked = newest
        .filter(|job| job.state == JobState::AwaitingApproval)
        .and_then(|job| {
            let call = job.pending_call.as_ref()?;
            Some((
                job,
                call.call_id.clone(),
                call.approval.as_ref()?.digest.clone(),
            ))
        });
    let Some((job, call, digest)) = parked else {
        let now = newest.map_or("none".to_string(), |job| job.state.as_str().to_string());
        return Err(ApiError::new(
            ErrorCode::InvalidState,
            format!(
                "thread {thread:?} has no interrupt to resume (its newest run is {now}): a resume answers a run parked for a person, the thread's status `interrupted`"
            ),
        ));
    };
    let id = format!("{}/{digest}/{call}", job.id);
    let verdict = verdict_of(answer_for(answer, &id)?)?;
    Ok(Pending {
        job: job.clone(),
        call,
        digest,
        verdict,
    })
}

/// Takes the decision `pending` holds: the job goes on.
pub(super) async fn take(
    state: &AppState,
    caller: &Caller,
    pending: Pending,
) -> Result<Resumed, ApiError> {
    let after_seq = state.queue.last_seq(&pending.job.id).await?;
    let decision = Decision {
        verdict: pending.verdict,
        digest: Some(pending.digest),
    };
    let job = approvals::take(state, caller, &pending.job.id, &pending.call, decision).await?;
    Ok(Resumed { job, after_seq })
}

/// `command.resume`, refusing what else a command may ask.
fn resume_of(command: &Value) -> Result<&Value, ApiError> {
    let Value::Object(command) = command else {
        return Err(invalid(
            "command",
            "a command is an object: `{\"resume\": …}` answers the thread's interrupt",
        ));
    };
    for key in ["goto", "update", "graph"] {
        if command.get(key).is_some_and(|value| !value.is_null()) {
            return Err(invalid(
                &format!("command.{key}"),
                format!(
                    "a command only resumes a parked call here: `{key}` is not served (a run's steps are its bundle's; fork a job at a step to change what came before)"
                ),
            ));
        }
    }
    command
        .get("resume")
        .filter(|value| !value.is_null())
        .ok_or_else(|| {
            invalid(
                "command.resume",
                "a command needs `resume`: the answer to the thread's interrupt",
            )
        })
}

/// The answer to interrupt `id`: the entry keyed by its id, the one
/// decision of `decisions`, or the whole value.
fn answer_for<'a>(resume: &'a Value, id: &str) -> Result<&'a Value, ApiError> {
    let Value::Object(map) = resume else {
        return Ok(resume);
    };
    if let Some(answer) = map.get(id) {
        return Ok(answer);
    }
    if let Some(stale) = map.keys().find(|key| interrupt_parts(key).is_some()) {
        return Err(invalid(
            "command.resume",
            format!(
                "{stale:?} is not the interrupt the thread waits on ({id:?}): read the thread's state again and answer its interrupt"
            ),
        ));
    }
    match map.get("decisions") {
        Some(Value::Array(decisions)) => match decisions.as_slice() {
            [one] => Ok(one),
            _ => Err(invalid(
                "command.resume.decisions",
                format!(
                    "{} decisions for one call: a run waits on one call at a time, so send one",
                    decisions.len()
                ),
            )),
        },
        _ => Ok(resume),
    }
}

/// What an answer decides.
fn verdict_of(answer: &Value) -> Result<Verdict, ApiError> {
    let refused = || {
        invalid(
            "command.resume",
            format!(
                "{answer} decides nothing: answer `{{\"type\": \"approve\"}}`, `{{\"type\": \"edit\", \"edited_action\": {{\"name\", \"args\"}}}}`, `{{\"type\": \"reject\", \"message\"?}}`, `true` or `false`"
            ),
        )
    };
    let message = |o: &serde_json::Map<String, Value>, key: &str| {
        o.get(key).and_then(Value::as_str).map(str::to_string)
    };
    match answer {
        Value::Bool(true) => Ok(Verdict::Approve),
        Value::Bool(false) => Ok(Verdict::Deny { reason: None }),
        Value::String(word) => match word.as_str() {
            "approve" | "accept" | "yes" => Ok(Verdict::Approve),
            "reject" | "deny" | "no" => Ok(Verdict::Deny { reason: None }),
            _ => Err(refused()),
        },
        Value::Object(o) => match o.get("type").and_then(Value::as_str) {
            Some("approve" | "accept") => Ok(Verdict::Approve),
            Some("edit") => {
                let arguments = o
                    .get("edited_action")
                    .and_then(|action| action.get("args"))
                    .or_else(|| o.get("args"))
                    .cloned()
                    .ok_or_else(refused)?;
                Ok(Verdict::Edit { arguments })
            }
            Some("reject") => Ok(Verdict::Deny {
                reason: message(o, "message"),
            }),
            // A reply to the model instead of the call: the call is denied
            // and the model reads the message as the reason.
            Some("respond") => Ok(Verdict::Deny {
                reason: message(o, "message"),
            }),
            Some(_) => Err(refused()),
            None => match o.get("approved").and_then(Value::as_bool) {
                Some(true) => Ok(match o.get("arguments") {
                    Some(arguments) => Verdict::Edit {
                        arguments: arguments.clone(),
                    },
                    None => Verdict::Approve,
                }),
                Some(false) => Ok(Verdict::Deny {
                    reason: message(o, "reason"),
                }),
                None => Err(refused()),
            },
        },
        _ => Err(refused()),
    }
}
