//! A bundle called as an MCP tool whose job parks for a decision: a client
//! that declared elicitation is asked in the call (approve, or deny with a
//! reason) and the job goes on; any other client gets an error result
//! naming the job and how to decide (`structured-agents approve <job id>`).

use std::time::Duration;

use rmcp::service::ElicitationError;
use rmcp::{Peer, RoleServer};
use serde::Deserialize;

use super::super::AppState;
use super::super::auth::Caller;
use crate::approval::{Approver, Decision, Verdict};
use crate::queue::Job;

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
    let others_only = job
        .pending_call
        .as_ref()
        .and_then(|request| request.approval.as_ref())
        .is_some_and(|terms| terms.approver == Approver::Others);
    peer.supported_elicitation_modes()
        .contains(&rmcp::service::ElicitationMode::Form)
        && caller.0.can(crate::access::Scope::Approve)
        && caller.operates_on(job)
        && !(others_only && job.owner.as_deref() == Some(caller.name()))
}

/// Asks the client's user about the call `job` waits for and takes the
/// answer; `Err` (the call's error result) when there is no answer.
pub async fn ask(
    state: &AppState,
    peer: &Peer<RoleServer>,
    caller: &Caller,
    job: &Job,
) -> Result<(), String> {
    let Some(request) = job.pending_call.as_ref() else {
        return Err(unanswered(job));
    };
    let call = request.call_id.clone();
    let message = format!(
        "Job {} of bundle {}: tool `{}` wants to run with {}. Approve it?",
        job.id, job.bundle, request.tool, request.arguments
    );
    let verdict = match peer
        .elicit_with_timeout::<ApprovalAnswer>(message, Some(ASK_FOR))
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
    let decision = Decision {
        verdict,
        digest: Some(request.digest().to_string()),
    };
    super::super::approvals::take(state, caller, &job.id, &call, decision)
        .await
        .map(|_| ())
        .map_err(|e| e.message)
}

/// The error result of a call whose job waits for a decision nobody gave
/// here.
pub fn unanswered(job: &Job) -> String {
    job.answer_or_error()
        .err()
        .unwrap_or_else(|| format!("job {} awaits approval", job.id))
}
