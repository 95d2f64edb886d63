//! A job as a Responses API `response` object: its id (`resp_<job id>`),
//! status from the job's state, output items and usage. Both the stream's
//! snapshots and `GET /v1/responses/{id}` build it here.

use std::time::UNIX_EPOCH;

use serde_json::Value;

use super::super::caller_tools::awaited;
use super::super::openai::ToolChoice;
pub use super::shape::{
    CachedTokens, PlainText, ReasoningTokens, ResponseError, ResponseErrorCode, ResponseKind,
    ResponseMetadata, ResponseObject, ResponseStatus, ResponseUsage, TextConfig, TextFormat,
};
use crate::queue::{Job, JobId, JobState};

/// The prefix of a response id.
pub const RESPONSE_PREFIX: &str = "resp_";

/// The response's id for a job ([`job_of`] reads it back).
pub fn response_id(job_id: &str) -> String {
    format!("resp_{job_id}")
}

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
/// `completed` (see [`response`]).
pub fn status(state: JobState) -> ResponseStatus {
    match state {
        JobState::Queued => ResponseStatus::Queued,
        JobState::Running | JobState::AwaitingApproval | JobState::NeedsAttention => {
            ResponseStatus::InProgress
        }
        JobState::Succeeded => ResponseStatus::Completed,
        JobState::Cancelled => ResponseStatus::Cancelled,
        JobState::Failed | JobState::Dead => ResponseStatus::Failed,
    }
}

/// The `response` object of `job` with output `items`. A job parked on
/// calls of the caller's tools is `completed`: the response ends with
/// those calls (`function_call` items) for the client to run.
pub fn response(job: &Job, items: &[Value]) -> ResponseObject {
    let created_at = humantime::parse_rfc3339_weak(&job.created_at)
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    let error = match job.state {
        JobState::Failed | JobState::Dead => Some(ResponseError {
            code: ResponseErrorCode::ServerError,
            message: job
                .answer_or_error()
                .err()
                .map(|why| why.to_string())
                .unwrap_or_default(),
        }),
        _ => None,
    };
    let usage = job.result.as_ref().map(|r| &r["usage"]);
    let count = |field: &str| usage.and_then(|u| u[field].as_u64()).unwrap_or(0);
    let output_text: String = items
        .iter()
        .filter(|item| item["type"] == "message")
        .flat_map(|item| item["content"].as_array().into_iter().flatten())
        .filter_map(|part| part["text"].as_str())
        .collect();
    ResponseObject {
        id: response_id(job.id.as_str()),
        object: ResponseKind::Response,
        created_at,
        status: match awaited(job) {
            Some(_) => ResponseStatus::Completed,
            None => status(job.state),
        },
        model: format!("bundle/{}", job.bundle),
        previous_response_id: job
            .variables
            .get(PREVIOUS_RESPONSE)
            .and_then(Value::as_str)
            .map(str::to_string),
        output: items.to_vec(),
        output_text,
        error,
        incomplete_details: (),
        instructions: (),
        metadata: ResponseMetadata {
            job_id: job.id.to_string(),
            conversation_id: job.conversation_id.clone(),
        },
        parallel_tool_calls: true,
        temperature: (),
        top_p: (),
        tool_choice: ToolChoice::Auto,
        tools: [],
        text: TextConfig {
            format: text_format(job),
        },
        background: (),
        usage: ResponseUsage {
            input_tokens: count("prompt_tokens"),
            input_tokens_details: CachedTokens { cached_tokens: 0 },
            output_tokens: count("completion_tokens"),
            output_tokens_details: ReasoningTokens {
                reasoning_tokens: 0,
            },
            total_tokens: count("total_tokens"),
        },
    }
}

/// The response's `text.format`: the answer format the job holds to, in
/// the Responses API's own (flat) shape, or `text`.
fn text_format(job: &Job) -> TextFormat {
    match &job.controls.answer_format {
        Some(format) => TextFormat::Held(format.clone()),
        None => TextFormat::Plain(PlainText::Text),
    }
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
        assert_eq!(
            status(JobState::AwaitingApproval),
            ResponseStatus::InProgress
        );
        assert_eq!(status(JobState::Dead), ResponseStatus::Failed);
    }
}
