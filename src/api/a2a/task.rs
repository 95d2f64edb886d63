//! A job seen as an A2A task: the one mapping of job states to task states,
//! the status message (the parked call while the job awaits approval, why
//! it waits for an operator, why it ended), the answer as the task's
//! artifact, and the history (the input).
//!
//! The answer has one place: the `answer` artifact, where A2A 1.0 puts a
//! task's result ("Messages SHOULD NOT be used to deliver task outputs",
//! §3.7). It is neither the status message nor a message of the history:
//! clients that show both (Google ADK's `RemoteA2aAgent` turns a final
//! status message into an event of its own) showed it twice. A stream ends
//! the same way ([`end_updates`]); a push notification, which is a status
//! update with nothing beside it, is the one exception ([`push_status`]).

use std::collections::HashMap;

use a2a::{
    A2AError, Artifact, Message, Part, Role, StreamResponse, Task, TaskArtifactUpdateEvent,
    TaskState, TaskStatus, TaskStatusUpdateEvent,
};
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

/// A request's `historyLength`, which may not be negative (`None`: the
/// whole history).
pub fn history_length(asked: Option<i32>) -> Result<Option<i32>, A2AError> {
    match asked {
        Some(n) if n < 0 => Err(A2AError::invalid_params(format!(
            "historyLength {n} is negative: ask for 0 or more of the most recent messages, or leave it out for all"
        ))),
        _ => Ok(asked),
    }
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

/// Job `job` as a task: its answer only as the artifact (see the module's
/// documentation).
pub fn task(job: &Job, view: View) -> Task {
    let mut history = vec![user_message(job)];
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

/// The status a push notification carries: [`status`], with the answer as
/// the message once the job succeeded. A push is a `statusUpdate` alone —
/// no artifact rides beside it — so there the message is the answer's one
/// place, and a receiver has it without a `GetTask`.
pub fn push_status(job: &Job) -> TaskStatus {
    let mut status = status(job);
    if let Some(answer) = answer_of(job) {
        status.message = Some(agent_message(job, "answer", vec![Part::text(answer)]));
    }
    status
}

/// The answer of a job that succeeded.
fn answer_of(job: &Job) -> Option<&str> {
    job.answer().filter(|_| job.state == JobState::Succeeded)
}

fn answer_artifact(job: &Job) -> Option<Vec<Artifact>> {
    Some(vec![answer_chunk(answer_of(job)?)])
}

/// A streamed chunk of the answer, appended to the ones before it (`append`:
/// one was sent). Never the last: that is the whole answer ([`end_updates`]).
pub fn chunk_update(job: &Job, text: &str, append: bool) -> TaskArtifactUpdateEvent {
    TaskArtifactUpdateEvent {
        task_id: job.id.to_string(),
        context_id: context_of(job),
        artifact: answer_chunk(text),
        append: Some(append),
        last_chunk: Some(false),
        metadata: None,
    }
}

/// What ends the stream of a job that has ended: once it succeeded, the
/// whole answer as the `answer` artifact's last chunk, replacing the chunks
/// streamed before it (`append: false`), then the final status, which
/// carries no answer. A client that honours `append` (the Python SDK's task
/// manager) holds the answer once. ADK shows the chunks as partial events
/// and keeps only this last one, under the same event id, in its session:
/// a last chunk holding only the tail would leave it the tail. ADK's own
/// A2A server ends an artifact this way.
pub fn end_updates(job: &Job) -> Vec<StreamResponse> {
    let context = context_of(job);
    let mut updates = Vec::new();
    if let Some(answer) = answer_of(job) {
        updates.push(StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
            task_id: job.id.to_string(),
            context_id: context.clone(),
            artifact: answer_chunk(answer),
            append: Some(false),
            last_chunk: Some(true),
            metadata: None,
        }));
    }
    updates.push(StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
        task_id: job.id.to_string(),
        context_id: context,
        status: status(job),
        metadata: None,
    }));
    updates
}

/// An artifact holding (part of) the answer.
fn answer_chunk(text: &str) -> Artifact {
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
/// or why the job ended or waits — not the answer, which is the artifact.
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
        JobState::Failed | JobState::Dead => Some(agent_text(
            job,
            format!("job {} ended {}: {}", job.id, job.state, error()),
        )),
        JobState::Cancelled => Some(agent_text(job, format!("job {} was cancelled", job.id))),
        JobState::Queued | JobState::Running | JobState::Succeeded => None,
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

    /// A job in `state`, whose input is `hi` and whose answer is `hello`.
    fn job(state: &str, error: Option<&str>) -> Job {
        serde_json::from_value(json!({
            "id": "j1", "bundle": "b", "bundle_version": null, "bundle_digest": null,
            "input": "hi", "variables": {}, "priority": 0, "state": state,
            "attempts": 1, "max_attempts": 3, "idempotency_key": null, "traceparent": null,
            "cancel_requested": false, "result": {"output": "hello"}, "error": error,
            "pending_call": null, "run_at": "2026-01-01T00:00:00Z",
            "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:01Z",
            "started_at": null, "finished_at": null, "lease_expires_at": null
        }))
        .unwrap()
    }

    const ALL: View = View {
        history_length: None,
        artifacts: true,
    };

    /// How often `text` occurs in `value` as JSON.
    fn occurrences(value: &impl serde::Serialize, text: &str) -> usize {
        serde_json::to_string(value).unwrap().matches(text).count()
    }

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
    fn a_completed_task_holds_the_answer_in_its_artifact_alone() {
        let done = task(&job("succeeded", None), ALL);
        let artifacts = done.artifacts.as_ref().unwrap();
        assert_eq!(artifacts.len(), 1);
        assert_eq!(artifacts[0].artifact_id, ANSWER_ARTIFACT);
        assert_eq!(artifacts[0].parts[0].as_text(), Some("hello"));
        assert!(done.status.message.is_none(), "{:?}", done.status);
        let history = done.history.as_ref().unwrap();
        assert!(history.iter().all(|m| m.role == Role::User), "{history:?}");
        assert_eq!(occurrences(&done, "hello"), 1, "{done:?}");
        // Without artifacts (`ListTasks`' default) the answer is nowhere.
        let listed = task(
            &job("succeeded", None),
            View {
                history_length: None,
                artifacts: false,
            },
        );
        assert_eq!(occurrences(&listed, "hello"), 0, "{listed:?}");
    }

    #[test]
    fn the_status_message_says_why_a_task_waits_or_ended() {
        let failed = task(&job("failed", Some("the model refused")), ALL);
        let why = failed.status.message.unwrap();
        assert!(
            why.parts[0]
                .as_text()
                .unwrap()
                .contains("the model refused"),
            "{why:?}"
        );
        assert!(failed.artifacts.is_none());
        let stuck = status(&job("needs_attention", Some("lost the call")));
        let why = stuck.message.unwrap();
        assert!(
            why.parts[0].as_text().unwrap().contains("resolve"),
            "{why:?}"
        );
        assert!(status(&job("running", None)).message.is_none());
    }

    /// The answer a client that honours `append` holds after `updates`.
    fn held(updates: &[StreamResponse]) -> String {
        let mut text = String::new();
        for update in updates {
            if let StreamResponse::ArtifactUpdate(chunk) = update {
                if chunk.append != Some(true) {
                    text.clear();
                }
                text.extend(chunk.artifact.parts.iter().filter_map(|p| p.as_text()));
            }
        }
        text
    }

    #[test]
    fn a_stream_ends_with_the_whole_answer_as_the_last_chunk_and_a_bare_status() {
        let done = job("succeeded", None);
        let mut updates = vec![
            StreamResponse::ArtifactUpdate(chunk_update(&done, "hel", false)),
            StreamResponse::ArtifactUpdate(chunk_update(&done, "l", true)),
        ];
        let end = end_updates(&done);
        assert_eq!(occurrences(&end, "hello"), 1, "{end:?}");
        let [
            StreamResponse::ArtifactUpdate(last),
            StreamResponse::StatusUpdate(status),
        ] = end.as_slice()
        else {
            panic!("the answer, then the status: {end:?}")
        };
        assert_eq!(
            (last.append, last.last_chunk),
            (Some(false), Some(true)),
            "{last:?}"
        );
        assert_eq!(last.artifact.parts[0].as_text(), Some("hello"));
        assert_eq!(status.status.state, TaskState::Completed);
        assert!(status.status.message.is_none(), "{status:?}");
        updates.extend(end);
        assert_eq!(held(&updates), "hello");

        // A job that failed ends on its status alone, which says why.
        let failed = end_updates(&job("failed", Some("boom")));
        let [StreamResponse::StatusUpdate(status)] = failed.as_slice() else {
            panic!("the status alone: {failed:?}")
        };
        assert_eq!(status.status.state, TaskState::Failed);
        assert_eq!(occurrences(&failed, "hello"), 0);
        assert_eq!(occurrences(&failed, "boom"), 1);
    }

    #[test]
    fn a_push_is_the_status_with_the_answer_once_the_job_succeeded() {
        let pushed = push_status(&job("succeeded", None));
        assert_eq!(pushed.message.unwrap().parts[0].as_text(), Some("hello"));
        let failed = push_status(&job("failed", Some("boom")));
        assert_eq!(occurrences(&failed, "hello"), 0);
    }

    #[test]
    fn history_is_trimmed_to_the_most_recent() {
        let job = job("succeeded", None);
        let full = task(&job, ALL);
        assert_eq!(full.history.as_ref().unwrap().len(), 1, "the input");
        assert_eq!(full.context_id, "j1");
        let last = task(
            &job,
            View {
                history_length: Some(1),
                artifacts: false,
            },
        );
        assert_eq!(last.history.unwrap()[0].role, Role::User);
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
