//! A call parked for a person as LangGraph's interrupt, one shape for the
//! stream, the thread's state and the thread: LangChain's
//! human-in-the-loop request (`action_requests`, `review_configs`: what the
//! chat front ends draw) with the daemon's own address for the decision,
//! and an id naming the job, the digest a decision is bound to and the call
//! (`<job>/<digest>/<call>`, AG-UI's id of the same interrupt), which a
//! resume (`command.resume`) may answer by.

use serde_json::{Value, json};

use crate::approval::ParkedKind;
use crate::queue::{Job, JobState};

/// The interrupt of the call `call_id` of job `job` (of its own run or a
/// nested one) waiting for a decision on `tool` with `arguments`.
pub(super) fn interrupt(
    job: &str,
    call_id: &str,
    tool: &str,
    arguments: &Value,
    digest: &str,
) -> Value {
    json!({
        "value": {
            "action_requests": [{
                "name": tool, "args": arguments,
                "description": format!("{tool} waits for a person's decision"),
            }],
            "review_configs": [{
                "action_name": tool,
                "allowed_decisions": ["approve", "edit", "reject"],
            }],
            "job_id": job, "call_id": call_id, "digest": digest,
            "decide": format!("POST /v1/jobs/{job}/approvals/{call_id}"),
        },
        "id": format!("{job}/{digest}/{call_id}"),
    })
}

/// The interrupts of `job` as it stands: its parked approval's, or none.
pub(super) fn of_job(job: &Job) -> Vec<Value> {
    let Some(call) = job.pending_call.as_ref() else {
        return Vec::new();
    };
    match (&call.approval, job.state, call.kind) {
        (Some(terms), JobState::AwaitingApproval, ParkedKind::Approval) => vec![interrupt(
            job.id.as_str(),
            &call.call_id,
            &call.tool,
            &call.arguments,
            &terms.digest,
        )],
        _ => Vec::new(),
    }
}

/// The task that waits on `interrupts` (LangGraph's node `tools`), as a
/// state lists it.
pub(super) fn waiting_task(job: &Job, interrupts: &[Value]) -> Value {
    json!({
        "id": format!("{}:tools", job.id), "name": "tools",
        "path": ["__pregel_pull", "tools"], "error": null,
        "interrupts": interrupts, "checkpoint": null, "state": null, "result": null,
    })
}
