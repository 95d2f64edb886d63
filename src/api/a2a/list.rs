//! `ListTasks`: the caller's jobs as tasks, a page at a time, the most
//! recently updated first (A2A 1.0 §3.1.4: "Tasks MUST be sorted by last
//! update time in descending order"). The request is checked first — a
//! page of 1 to 100 tasks, a state some task can be in, a page token this
//! agent gave, a history length that is not negative — so that a request
//! it cannot honour is `-32602`, never a listing of something else.
//!
//! A page token is the place of the page's last task in that order (its
//! update time and id, `JobOrder::Updated`): a task updated after the walk
//! of the pages began moves to the front, ahead of every token given, so a
//! walk shows each task at most once and a task updated during it at most
//! once, perhaps not at all (docs/api.md, A2A).

use a2a::{A2AError, ListTasksRequest, TaskState};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::task::{self, View};
use super::{Call, RpcError, params};

use crate::access::policy::Action;
use crate::queue::{JobFilter, JobOrder, JobState, UpdateCursor};

/// The most tasks `ListTasks` gives in one page.
const MAX_PAGE: i32 = 100;

/// The page `ListTasks` gives when the request names no size.
const DEFAULT_PAGE: i32 = 50;

/// `ListTasks`: the key's jobs (all with `read_all`), of the interface's
/// bundle, the last updated first, filtered by context, state and update
/// time.
pub async fn list_tasks(call: &Call, raw: Value) -> Result<Value, RpcError> {
    call.caller.require(Action::ListJobs)?;
    let request: ListTasksRequest = params("ListTasks", lenient_list(raw))?;
    let asked = checked(&request)?;
    let context = request.context_id.clone().filter(|c| !c.is_empty());
    let filter = JobFilter {
        state: asked.state,
        bundle: call.bundle.clone(),
        conversation_id: context.clone(),
        // A context is a conversation, and conversations are per key:
        // the caller's own.
        conversation_owner: context.is_some().then(|| call.caller.name().to_string()),
        owner: call.caller.listing_owner(Action::ListJobs),
        limit: asked.page_size as usize,
        cursor: asked.cursor,
        search: None,
        unfinished: false,
        updated_since: request.status_timestamp_after.map(first_ms_at_or_after),
        order: JobOrder::Updated,
        ..Default::default()
    };
    let page = call.state.queue.list(filter.clone()).await?;
    let view = View {
        history_length: request.history_length,
        artifacts: request.include_artifacts.unwrap_or(false),
    };
    let tasks: Vec<a2a::Task> = page.jobs.iter().map(|job| task::task(job, view)).collect();
    let total_size = match (&filter.cursor, &page.next_cursor) {
        // The whole listing is this page.
        (None, None) => tasks.len() as u64,
        // Every page, counted in the store as it is now.
        _ => call.state.queue.count(filter).await?,
    };
    Ok(json!(a2a::ListTasksResponse {
        total_size: i32::try_from(total_size).unwrap_or(i32::MAX),
        tasks,
        next_page_token: page.next_cursor.unwrap_or_default(),
        page_size: asked.page_size,
    }))
}

/// The first millisecond the store can hold at or after `t` (update times
/// are whole milliseconds): `statusTimestampAfter` keeps a task whose
/// status timestamp is not before `t`.
fn first_ms_at_or_after(t: DateTime<Utc>) -> i64 {
    let ms = t.timestamp_millis();
    if t.timestamp_subsec_nanos().is_multiple_of(1_000_000) {
        ms
    } else {
        ms.saturating_add(1)
    }
}

/// What a `ListTasks` request asks for, once it is known to be honourable.
struct Asked {
    page_size: i32,
    state: Option<JobState>,
    /// Where the page starts: after the last task of the page before.
    cursor: Option<String>,
}

/// The request's page, state filter and page token, each checked.
fn checked(request: &ListTasksRequest) -> Result<Asked, A2AError> {
    let page_size = request.page_size.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&page_size) {
        return Err(A2AError::invalid_params(format!(
            "pageSize {page_size} is out of range: a page holds 1 to {MAX_PAGE} tasks"
        )));
    }
    task::history_length(request.history_length)?;
    let status = request
        .status
        .as_ref()
        .filter(|s| **s != TaskState::Unspecified);
    let state = match status {
        Some(status) => Some(task::job_state(status).ok_or_else(|| {
            A2AError::invalid_params(format!(
                "no task of this agent is ever in state {}; filter on SUBMITTED, WORKING, INPUT_REQUIRED, COMPLETED, FAILED or CANCELED",
                json!(status)
            ))
        })?),
        None => None,
    };
    let cursor = request.page_token.clone().filter(|t| !t.is_empty());
    // A page token is where a page ended: a task's update time and its id
    // (a UUID). Any other text would list from nowhere in particular.
    if let Some(token) = &cursor
        && UpdateCursor::parse(token).is_none_or(|c| uuid::Uuid::parse_str(&c.id).is_err())
    {
        return Err(A2AError::invalid_params(format!(
            "pageToken {token:?} is not one this agent gave: send a previous page's nextPageToken, or none for the first page"
        )));
    }
    Ok(Asked {
        page_size,
        state,
        cursor,
    })
}

/// `ListTasks`' parameters as proto3 JSON clients send them: a status
/// left unset may come as `UNRECOGNIZED` (the JavaScript SDK), which
/// filters on nothing.
fn lenient_list(mut raw: Value) -> Value {
    if let Some(fields) = raw.as_object_mut()
        && fields.get("status").and_then(Value::as_str) == Some("UNRECOGNIZED")
    {
        fields.remove("status");
    }
    raw
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(raw: Value) -> ListTasksRequest {
        params("ListTasks", lenient_list(raw)).unwrap()
    }

    #[test]
    fn an_unrecognized_status_filters_on_nothing() {
        let request = request(json!({"status": "UNRECOGNIZED", "pageSize": 5}));
        assert!(request.status.is_none());
        assert_eq!(request.page_size, Some(5));
    }

    #[test]
    fn a_page_token_is_an_update_time_and_a_task_id_and_a_history_length_is_not_negative() {
        let id = uuid::Uuid::now_v7().to_string();
        let token = format!("1767225600123.{id}");
        let asked = checked(&request(json!({"pageToken": token}))).unwrap();
        assert_eq!(asked.cursor, Some(token));
        assert_eq!(asked.page_size, DEFAULT_PAGE);
        let empty = checked(&request(json!({"pageToken": ""}))).unwrap();
        assert_eq!(empty.cursor, None, "an empty token is the first page");
        for refused in [
            json!({"pageToken": "invalid-token-xyz"}),
            json!({"pageToken": id}),
            json!({"pageToken": "1767225600123.not-a-task"}),
            json!({"historyLength": -1}),
            json!({"pageSize": 0}),
            json!({"pageSize": 101}),
        ] {
            let Err(e) = checked(&request(refused.clone())) else {
                panic!("{refused} was taken");
            };
            assert_eq!(e.code, a2a::error_code::INVALID_PARAMS, "{refused}");
        }
    }

    #[test]
    fn a_status_timestamp_after_keeps_the_millisecond_it_falls_in_only_when_exact() {
        let at = |text: &str| {
            DateTime::parse_from_rfc3339(text)
                .unwrap()
                .with_timezone(&Utc)
        };
        assert_eq!(first_ms_at_or_after(at("1970-01-01T00:00:01.250Z")), 1250);
        assert_eq!(
            first_ms_at_or_after(at("1970-01-01T00:00:01.250001Z")),
            1251
        );
        assert_eq!(first_ms_at_or_after(at("1969-12-31T23:59:59.999Z")), -1);
    }
}
