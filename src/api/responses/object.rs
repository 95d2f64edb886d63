//! A job as a Responses API `response` object: its id (`resp_<job id>`),
//! status from the job's state, output items and usage. Both the stream's
//! snapshots and `GET /v1/responses/{id}` build it here.

use std::time::UNIX_EPOCH;

use serde_json::{Value, json};

use super::stream::response_id;
use crate::queue::{Job, JobId, JobState};

/// The prefix of a response id.
pub const RESPONSE_PREFIX: &str = "resp_";

/// The job variable that keeps the `previous_response_id` a response was
/// created with (a variable: the job's own record, shown with the job).
pub const PREVIOUS_RESPONSE: &str = "previous_response_id";

/// The job id a response id names, if it names one.
pub fn job_of(response: &str) -> Option<JobId> {
    view_of(response).map(|(job, _)| job)
}

/// The job a response id names and the stored event its view starts
/// after: `resp_<job>` shows the whole job (0), `resp_<job>.<after>` what
/// followed event `after` (a response that resumed the job).
pub fn view_of(response: &str) -> Option<(JobId, u64)> {
    let rest = response
        .strip_prefix(RESPONSE_PREFIX)
        .filter(|id| !id.is_empty())?;
    match rest.rsplit_once('.') {
        Some((job, after)) if !job.is_empty() => {
            after.parse().ok().map(|after| (JobId::from(job), after))
        }
        _ => Some((JobId::from(rest), 0)),
    }
}

/// The response's `status` for a job's state: a parked job is still in
/// progress (it waits for a person, see `GET /v1/jobs/{id}/approvals`) —
/// but one that waits for the client's outputs of its calls is
/// `completed` (the caller sets that, see `snapshot`).
pub fn status(state: JobState) -> &'static str {
    match state {
        JobState::Queued => "queued",
        JobState::Running | JobState::AwaitingApproval | JobState::NeedsAttention => "in_progress",
        JobState::Succeeded => "completed",
        JobState::Cancelled => "cancelled",
        JobState::Failed | JobState::Dead => "failed",
    }
}

/// The `response` object of `job` with output `items`.
pub fn response(job: &Job, items: &[Value]) -> Value {
    let created_at = humantime::parse_rfc3339_weak(&job.created_at)
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    let status = status(job.state);
    let error = match job.state {
        JobState::Failed | JobState::Dead => json!({
            "code": "server_error",
            "message": job.answer_or_error().err().map(|why| why.to_string()).unwrap_or_default(),
        }),
        _ => Value::Null,
    };
    let usage = job.result.as_ref().map(|r| &r["usage"]);
    let count = |field: &str| usage.and_then(|u| u[field].as_u64()).unwrap_or(0);
    let output_text: String = items
        .iter()
        .filter(|item| item["type"] == "message")
        .flat_map(|item| item["content"].as_array().into_iter().flatten())
        .filter_map(|part| part["text"].as_str())
        .collect();
    json!({
        "id": response_id(job.id.as_str()),
        "object": "response",
        "created_at": created_at,
        "status": status,
        "model": format!("bundle/{}", job.bundle),
        "previous_response_id": job.variables.get(PREVIOUS_RESPONSE).cloned().unwrap_or(Value::Null),
        "output": items,
        "output_text": output_text,
        "error": error,
        "incomplete_details": null,
        "instructions": null,
        "metadata": metadata(job),
        "parallel_tool_calls": true,
        "temperature": null,
        "top_p": null,
        "tool_choice": "auto",
        "tools": [],
        "text": {"format": text_format(job)},
        "background": null,
        "usage": {
            "input_tokens": count("prompt_tokens"),
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": count("completion_tokens"),
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": count("total_tokens"),
        },
    })
}

/// The response's `text.format`: the answer format the job holds to, in
/// the Responses API's own (flat) shape, or `text`.
fn text_format(job: &Job) -> Value {
    job.controls
        .answer_format
        .as_ref()
        .and_then(|format| serde_json::to_value(format).ok())
        .unwrap_or_else(|| json!({"type": "text"}))
}

/// The response's `metadata` (string values only, as the API has them):
/// its job and conversation.
fn metadata(job: &Job) -> Value {
    let mut metadata = json!({"job_id": job.id});
    if let Some(conversation) = &job.conversation_id {
        metadata["conversation_id"] = json!(conversation);
    }
    metadata
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_ids_name_their_job() {
        assert_eq!(job_of("resp_abc"), Some(JobId::from("abc")));
        assert_eq!(job_of("resp_"), None);
        assert_eq!(job_of("abc"), None);
        assert_eq!(job_of(&response_id("x-1")), Some(JobId::from("x-1")));
        assert_eq!(view_of("resp_abc.42"), Some((JobId::from("abc"), 42)));
        assert_eq!(view_of("resp_abc"), Some((JobId::from("abc"), 0)));
    }

    #[test]
    fn parked_jobs_are_in_progress() {
        assert_eq!(status(JobState::AwaitingApproval), "in_progress");
        assert_eq!(status(JobState::Dead), "failed");
    }
}
