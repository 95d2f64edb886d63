//! A job seen as an A2A task: the one mapping of job states to task states,
//! the status message (the parked call while the job awaits approval, the
//! answer, the error), the answer as the task's artifact, and the history
//! (the input, then the answer).

use std::collections::HashMap;

use a2a::{Artifact, Message, Part, Role, Task, TaskState, TaskStatus};
use serde_json::{Value, json};

use crate::approval::{ParkedCall, ParkedKind};
use crate::queue::{Job, JobState};

/// The id of the artifact that holds a job's answer (streamed in chunks,
/// whole on the finished task).
pub const ANSWER_ARTIFACT: &str = "answer";

/// How much of a task a request asked for.
#[derive(Debug, Clone, Copy, Default)]
pub struct View {
    /// The most recent messages of the history to include (`None`: all).
    pub history_length: Option<i32>,
    pub artifacts: bool,
}

/// The task state of a job state. A job parked for an operator
/// (`needs_attention`) is not finished and waits for no input the client
/// can give: it stays WORKING, its status message says why.
pub fn task_state(state: JobState) -> TaskState {
    match state {
        JobState::Queued => TaskState::Submitted,
        JobState::Running | JobState::NeedsAttention => TaskState::Working,
        JobState::Succeeded => TaskState::Completed,
        JobState::Failed | JobState::Dead => TaskState::Failed,
        JobState::Cancelled => TaskState::Canceled,
        JobState::AwaitingApproval => TaskState::InputRequired,
    }
}

/// The job state a task state filters on (`ListTasks`); `None` for the
/// states no job has.
pub fn job_state(state: &TaskState) -> Option<JobState> {
    match state {
        TaskState::Submitted => Some(JobState::Queued),
        TaskState::Working => Some(JobState::Running),
        TaskState::Completed => Some(JobState::Succeeded),
        TaskState::Failed => Some(JobState::Failed),
        TaskState::Canceled => Some(JobState::Cancelled),
        TaskState::InputRequired => Some(JobState::AwaitingApproval),
        TaskState::Rejected | TaskState::AuthRequired | TaskState::Unspecified => None,
    }
}

/// The task's context: the job's conversation. A job submitted another way
/// without one is a context of its own (its id).
pub fn context_of(job: &Job) -> String {
    job.conversation_id
        .clone()
        .unwrap_or_else(|| job.id.to_string())
}

/// Job `job` as a task.
pub fn task(job: &Job, view: View) -> Task {
    let mut history = vec![user_message(job)];
    if let Some(answer) = job.answer().filter(|_| job.state == JobState::Succeeded) {
        history.push(agent_message(job, "answer", vec![Part::text(answer)]));
    }
    if let Some(n) = view.history_length {
        let keep = usize::try_from(n.max(0)).unwrap_or(0);
        history.drain(..history.len().saturating_sub(keep));
    }
    Task {
        id: job.id.to_string(),
        context_id: context_of(job),
        status: status(job),
        artifacts: view.artifacts.then(|| answer_artifact(job)).flatten(),
        history: (!history.is_empty()).then_some(history),
        metadata: Some(HashMap::from([
            ("bundle".to_string(), json!(job.bundle)),
            ("job_state".to_string(), json!(job.state)),
        ])),
    }
}

/// The job's status now: its task state, why, and when it last changed.
pub fn status(job: &Job) -> TaskStatus {
    TaskStatus {
        state: task_state(job.state),
        message: status_message(job),
        timestamp: timestamp(&job.updated_at),
    }
}

fn answer_artifact(job: &Job) -> Option<Vec<Artifact>> {
    let answer = job.answer().filter(|_| job.state == JobState::Succeeded)?;
    Some(vec![answer_chunk(answer)])
}

/// An artifact holding (part of) the answer.
pub fn answer_chunk(text: &str) -> Artifact {
    Artifact {
        artifact_id: ANSWER_ARTIFACT.to_string(),
        name: Some(ANSWER_ARTIFACT.to_string()),
        description: None,
        parts: vec![Part::text(text)],
        metadata: None,
        extensions: None,
    }
}

/// What the client reads in the status: the call waiting for a decision,
/// the answer, or why the job ended or waits.
fn status_message(job: &Job) -> Option<Message> {
    let error = || {
        job.error
            .clone()
            .unwrap_or_else(|| "no reason recorded".into())
    };
    match job.state {
        JobState::AwaitingApproval => match &job.pending_call {
            Some(call) if call.kind == ParkedKind::Approval => {
                Some(approval_message(job, &parked_frame(job, call)))
            }
            _ => None,
        },
        JobState::NeedsAttention => Some(agent_text(
            job,
            format!(
                "job {} needs an operator (a call of unknown outcome): {}; an operator resolves it with `structured-agents resolve {}`",
                job.id,
                error(),
                job.id
            ),
        )),
        JobState::Succeeded => job
            .answer()
            .map(|answer| agent_message(job, "answer", vec![Part::text(answer)])),
        JobState::Failed | JobState::Dead => Some(agent_text(
            job,
            format!("job {} ended {}: {}", job.id, job.state, error()),
        )),
        JobState::Cancelled => Some(agent_text(job, format!("job {} was cancelled", job.id))),
        JobState::Queued | JobState::Running => None,
    }
}

/// The parked call as the approval frame of the job's other streams
/// (`follow::approval_required`), from the job rather than its event.
fn parked_frame(job: &Job, call: &ParkedCall) -> Value {
    json!({
        "job_id": job.id,
        "kind": "approval",
        "turn": call.turn,
        "call_id": call.call_id,
        "tool": call.tool,
        "arguments": call.arguments,
        "digest": call.digest(),
        "decide": format!("POST /v1/jobs/{}/approvals/{}", job.id, call.call_id),
    })
}

/// The INPUT_REQUIRED status message: what the call would do, in words and
/// as data (the approval frame), and how to answer.
pub fn approval_message(job: &Job, frame: &Value) -> Message {
    let text = format!(
        "Tool `{}` of bundle {} wants to run with {}. Answer in a message to task {}: `approve`, or `deny: <reason>` (or a data part {{\"decision\": \"approve\" | \"deny\" | \"edit\", …}}).",
        frame["tool"].as_str().unwrap_or_default(),
        job.bundle,
        frame["arguments"],
        job.id
    );
    let call = frame["call_id"].as_str().unwrap_or_default();
    agent_message(
        job,
        &format!("approval-{call}"),
        vec![Part::text(text), Part::data(frame.clone())],
    )
}

fn agent_text(job: &Job, text: String) -> Message {
    agent_message(job, job.state.as_str(), vec![Part::text(text)])
}

/// A message of the agent about job `job`; its id is stable per `what`, so
/// the same status read twice is the same message.
pub fn agent_message(job: &Job, what: &str, parts: Vec<Part>) -> Message {
    Message {
        message_id: format!("{}:{what}", job.id),
        context_id: Some(context_of(job)),
        task_id: Some(job.id.to_string()),
        role: Role::Agent,
        parts,
        metadata: None,
        extensions: None,
        reference_task_ids: None,
    }
}

/// The job's input as the user's message.
fn user_message(job: &Job) -> Message {
    Message {
        message_id: format!("{}:input", job.id),
        context_id: Some(context_of(job)),
        task_id: Some(job.id.to_string()),
        role: Role::User,
        parts: vec![Part::text(job.input.clone())],
        metadata: None,
        extensions: None,
        reference_task_ids: None,
    }
}

/// An RFC 3339 time of the store as a timestamp (`None` if unreadable).
pub fn timestamp(text: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.with_timezone(&chrono::Utc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_job_state_has_a_task_state_and_back() {
        for state in JobState::ALL {
            let mapped = task_state(state);
            let back = job_state(&mapped).expect("a task state of a job filters");
            // Parked for an operator and dead fold into WORKING and FAILED.
            match state {
                JobState::NeedsAttention => assert_eq!(back, JobState::Running),
                JobState::Dead => assert_eq!(back, JobState::Failed),
                _ => assert_eq!(back, state),
            }
        }
        assert_eq!(
            serde_json::to_value(task_state(JobState::AwaitingApproval)).unwrap(),
            json!("TASK_STATE_INPUT_REQUIRED")
        );
    }

    #[test]
    fn history_is_trimmed_to_the_most_recent() {
        let job: Job = serde_json::from_value(json!({
            "id": "j1", "bundle": "b", "bundle_version": null, "bundle_digest": null,
            "input": "hi", "variables": {}, "priority": 0, "state": "succeeded",
            "attempts": 1, "max_attempts": 3, "idempotency_key": null, "traceparent": null,
            "cancel_requested": false, "result": {"output": "hello"}, "error": null,
            "pending_call": null, "run_at": "2026-01-01T00:00:00Z",
            "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:01Z",
            "started_at": null, "finished_at": null, "lease_expires_at": null
        }))
        .unwrap();
        let full = task(
            &job,
            View {
                history_length: None,
                artifacts: true,
            },
        );
        assert_eq!(full.history.as_ref().unwrap().len(), 2);
        assert_eq!(full.context_id, "j1");
        assert_eq!(full.artifacts.unwrap()[0].parts[0].as_text(), Some("hello"));
        let last = task(
            &job,
            View {
                history_length: Some(1),
                artifacts: false,
            },
        );
        assert_eq!(last.history.unwrap()[0].role, Role::Agent);
        assert!(last.artifacts.is_none());
        assert!(
            task(
                &job,
                View {
                    history_length: Some(0),
                    artifacts: false
                }
            )
            .history
            .is_none()
        );
    }
}
