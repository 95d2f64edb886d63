//! MCP tasks (`io.modelcontextprotocol/tasks`, protocol 2026-07-28) bound
//! to jobs: a task's id is its job's id, so a task lives exactly as long as
//! its job and survives the daemon's restarts. `tasks/get` reads the job,
//! `tasks/update` answers the approval it waits for, `tasks/cancel`
//! cancels it. The job's state alone decides the task's status.

use axum::extract::State;
use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolResult, ContentBlock, DetailedTask, InputRequests, InputResponses, JsonObject, Task,
    TaskPayload, TaskStatus,
};

use super::super::AppState;
use super::super::auth::Caller;
use super::approval;
use crate::access::policy::Action;
use crate::queue::{Job, JobId, JobState};

/// How often a client should poll `tasks/get`.
const POLL_INTERVAL_MS: u64 = 1000;

/// The job `task_id` names, if the caller may see it.
pub async fn job_of(state: &AppState, caller: &Caller, task_id: &str) -> Result<Job, McpError> {
    let id = JobId::from(task_id.to_string());
    let found = state
        .queue
        .get(&id)
        .await
        .map_err(|e| McpError::internal_error(format!("cannot read job {id}: {e}"), None))?;
    caller.job(Action::FollowJob, &id, found).map_err(|_| {
        McpError::invalid_params(
            format!("no task {id} (tasks are jobs; see GET /v1/jobs)"),
            None,
        )
    })
}

/// The task's base fields for `job`, with its status.
fn task_of(job: &Job, status: TaskStatus) -> Task {
    let mut task = Task::new(job.id.to_string(), status, &job.created_at, &job.updated_at)
        .with_poll_interval_ms(POLL_INTERVAL_MS);
    task.status_message = Some(format!("job {} is {}", job.id, job.state.as_str()));
    task
}

/// The task `job` is now: working while it is queued or running (or
/// parked for an operator), `input_required` with an approval form while
/// it waits for a decision, `completed` with the call's result once it
/// ended (a failed job is an error result, as a plain call answers), and
/// `cancelled`.
pub fn detailed(job: &Job) -> DetailedTask {
    let payload = match job.state {
        JobState::Queued | JobState::Running | JobState::NeedsAttention => TaskPayload::Working,
        JobState::AwaitingApproval => match approval::input_request(job) {
            Some((key, request)) => TaskPayload::InputRequired {
                input_requests: InputRequests::from([(key, request)]),
            },
            None => TaskPayload::Working,
        },
        JobState::Cancelled => TaskPayload::Cancelled,
        JobState::Succeeded | JobState::Failed | JobState::Dead => TaskPayload::Completed {
            result: call_result(job),
        },
    };
    let mut task = task_of(job, payload.status());
    if job.state == JobState::NeedsAttention
        && let Err(why) = job.answer_or_error()
    {
        task.status_message = Some(why.to_string());
    }
    DetailedTask::new(task, payload)
}

/// The `tools/call` result an ended job answers with.
pub fn call_result(job: &Job) -> JsonObject {
    let result = match job.answer_or_error() {
        Ok(answer) => CallToolResult::success(vec![ContentBlock::text(answer)]),
        Err(why) => CallToolResult::error(vec![ContentBlock::text(why.to_string())]),
    };
    match serde_json::to_value(result) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => JsonObject::new(),
    }
}

/// `tasks/update`: the answer to the approval the task's job waits for.
pub async fn update(
    state: &AppState,
    caller: &Caller,
    task_id: &str,
    responses: &InputResponses,
) -> Result<(), McpError> {
    let job = job_of(state, caller, task_id).await?;
    if job.state != JobState::AwaitingApproval {
        return Err(McpError::invalid_params(
            format!(
                "task {task_id} asks for no input: its job is {}",
                job.state.as_str()
            ),
            None,
        ));
    }
    approval::answer(state, caller, &job, responses)
        .await
        .map_err(|e| McpError::invalid_params(e.to_string(), None))
}

/// `tasks/cancel`: cancels the task's job, as `POST /v1/jobs/{id}/cancel`
/// does (with its `operate` scope).
pub async fn cancel(state: &AppState, caller: &Caller, task_id: &str) -> Result<(), McpError> {
    caller.require(Action::CancelJob).map_err(|e| {
        McpError::invalid_request(format!("cannot cancel task {task_id}: {}", e.message), None)
    })?;
    super::super::job_actions::cancel(
        State(state.clone()),
        caller.clone(),
        super::super::body::Path(task_id.to_string()),
    )
    .await
    .map(|_| ())
    .map_err(|e| {
        McpError::invalid_params(format!("cannot cancel task {task_id}: {}", e.message), None)
    })
}
