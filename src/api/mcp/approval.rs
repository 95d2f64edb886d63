//! A bundle called as an MCP tool whose job parks for a decision: a client
//! that declared elicitation is asked in the call (approve, or deny with a
//! reason) and the job goes on; any other client gets an error result
//! naming the job and how to decide (`structured-agents approve <job id>`).
//! A 2026-07-28 client that called as a task gets the same form as the
//! task's `input_required` request and answers it with `tasks/update`.

use std::time::Duration;

use rmcp::model::{
    ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema,
    InputRequest, InputResponses,
};
use rmcp::service::ElicitationError;
use rmcp::{Peer, RoleServer};
use serde::Deserialize;

use super::super::AppState;
use super::super::auth::Caller;
use super::super::error::ApiError;
use crate::access::policy::Action;
use crate::approval::{Decision, ParkedCall, ParkedKind, Verdict};
use crate::queue::{Job, JobId, JobState, NoAnswer};

/// Why a decision on a parked call was not taken here: the job stays
/// parked, and the message says how to decide.
#[derive(Debug, thiserror::Error)]
pub enum ApprovalError {
    /// The client's user gave no answer (or could not be asked).
    #[error(transparent)]
    Unanswered(#[from] NoAnswer),
    #[error("job {0} awaits approval")]
    NothingAsked(JobId),
    #[error("job {job} awaits no approval (it is {})", state.as_str())]
    NotAwaiting { job: JobId, state: JobState },
    #[error("job {job} waits for the answer to `{key}`; inputResponses has {given}")]
    MissingResponse {
        job: JobId,
        key: String,
        given: String,
    },
    #[error("inputResponses.{key} is not an elicitation result: {source}")]
    NotElicitation {
        key: String,
        source: serde_json::Error,
    },
    #[error("inputResponses.{key}.content must be {{approve: bool, reason?: string}}: {source}")]
    BadContent {
        key: String,
        source: serde_json::Error,
    },
    /// Taking the decision was refused (the caller's scope, a stale call).
    #[error("{}", .0.message)]
    Refused(ApiError),
}

/// What the client's user answers.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ApprovalAnswer {
    /// Run the call (true) or deny it (false).
    pub approve: bool,
    /// When denying: why (the model reads it).
    #[serde(default)]
    pub reason: String,
}

rmcp::elicit_safe!(ApprovalAnswer);

/// How long the client's user has to answer before the job is left parked
/// (where its approval timeout, or a person with the CLI, decides).
const ASK_FOR: Duration = Duration::from_secs(600);

/// Whether the client can be asked: it declared elicitation, and its key
/// may decide on the job (`approve`, and not its own job when the tool
/// wants `approval.by: others`).
pub fn can_ask(peer: &Peer<RoleServer>, caller: &Caller, job: &Job) -> bool {
    let barred = job
        .pending_call
        .as_ref()
        .and_then(|request| request.barred(job.owner.as_deref()));
    peer.supported_elicitation_modes()
        .contains(&rmcp::service::ElicitationMode::Form)
        && caller.allows_job(Action::DecideApproval, job)
        && barred != Some(caller.name())
}

/// Asks the client's user about the call `job` waits for and takes the
/// answer; `Err` (the call's error result) when there is no answer.
pub async fn ask(
    state: &AppState,
    peer: &Peer<RoleServer>,
    caller: &Caller,
    job: &Job,
) -> Result<(), ApprovalError> {
    let Some(request) = job.pending_call.as_ref() else {
        return Err(unanswered(job));
    };
    let call = request.call_id.clone();
    let verdict = match peer
        .elicit_with_timeout::<ApprovalAnswer>(question(job, request), Some(ASK_FOR))
        .await
    {
        Ok(Some(answer)) if answer.approve => Verdict::Approve,
        Ok(Some(answer)) => Verdict::Deny {
            reason: Some(answer.reason).filter(|r| !r.trim().is_empty()),
        },
        Err(ElicitationError::UserDeclined) => Verdict::Deny {
            reason: Some("declined by the MCP client's user".into()),
        },
        Ok(None) | Err(_) => return Err(unanswered(job)),
    };
    decide(state, caller, job, &call, request, verdict).await
}

/// What the client's user is asked about the call `request` of `job`.
fn question(job: &Job, request: &ParkedCall) -> String {
    format!(
        "Job {} of bundle {}: tool `{}` wants to run with {}. Approve it?",
        job.id, job.bundle, request.tool, request.arguments
    )
}

/// Takes `verdict` on the call the client's user saw (bound to its digest)
/// through the approvals every way of deciding goes through.
async fn decide(
    state: &AppState,
    caller: &Caller,
    job: &Job,
    call: &str,
    request: &ParkedCall,
    verdict: Verdict,
) -> Result<(), ApprovalError> {
    let decision = Decision {
        verdict,
        digest: Some(request.digest().to_string()),
    };
    super::super::approvals::take(state, caller, &job.id, call, decision)
        .await
        .map(|_| ())
        .map_err(ApprovalError::Refused)
}

/// The key of the task input request that asks about `call`.
fn input_key(call: &str) -> String {
    format!("approval-{call}")
}

/// The approval `job` waits for as a task's input request (an elicitation
/// form), keyed by the parked call; `None` when it waits for none.
pub fn input_request(job: &Job) -> Option<(String, InputRequest)> {
    let request = job
        .pending_call
        .as_ref()
        .filter(|r| r.kind == ParkedKind::Approval)?;
    let schema = ElicitationSchema::from_type::<ApprovalAnswer>().ok()?;
    let params = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: question(job, request),
        requested_schema: schema,
    };
    Some((
        input_key(&request.call_id),
        InputRequest::Elicitation(ElicitRequest::new(params)),
    ))
}

/// Decides the call `job` waits for from the answer to its input request
/// (`tasks/update`: an elicitation result under the request's key). A
/// cancelled form leaves the job parked.
pub async fn answer(
    state: &AppState,
    caller: &Caller,
    job: &Job,
    responses: &InputResponses,
) -> Result<(), ApprovalError> {
    let Some(request) = job
        .pending_call
        .as_ref()
        .filter(|r| r.kind == ParkedKind::Approval)
    else {
        return Err(ApprovalError::NotAwaiting {
            job: job.id.clone(),
            state: job.state,
        });
    };
    let key = input_key(&request.call_id);
    let Some(value) = responses.get(&key) else {
        let given: Vec<&str> = responses.keys().map(String::as_str).collect();
        return Err(ApprovalError::MissingResponse {
            job: job.id.clone(),
            key,
            given: if given.is_empty() {
                "nothing".to_string()
            } else {
                given.join(", ")
            },
        });
    };
    let result: ElicitResult =
        serde_json::from_value(value.clone()).map_err(|source| ApprovalError::NotElicitation {
            key: key.clone(),
            source,
        })?;
    let verdict = match result.action {
        ElicitationAction::Accept => {
            let content = result.content.unwrap_or_default();
            let answer: ApprovalAnswer = serde_json::from_value(content)
                .map_err(|source| ApprovalError::BadContent { key, source })?;
            if answer.approve {
                Verdict::Approve
            } else {
                Verdict::Deny {
                    reason: Some(answer.reason).filter(|r| !r.trim().is_empty()),
                }
            }
        }
        ElicitationAction::Decline => Verdict::Deny {
            reason: Some("declined by the MCP client's user".into()),
        },
        _ => return Ok(()),
    };
    decide(state, caller, job, &request.call_id, request, verdict).await
}

/// The error result of a call whose job waits for a decision nobody gave
/// here.
pub fn unanswered(job: &Job) -> ApprovalError {
    match job.answer_or_error() {
        Err(why) => ApprovalError::Unanswered(why),
        Ok(_) => ApprovalError::NothingAsked(job.id.clone()),
    }
}
