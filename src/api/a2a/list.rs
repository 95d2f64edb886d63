//! `ListTasks`: the caller's jobs as tasks, a page at a time. The request
//! is checked first — a page of 1 to 100 tasks, a state some task can be
//! in, a page token this agent gave, a history length that is not
//! negative — so that a request it cannot honour is `-32602`, never a
//! listing of something else.

use a2a::{A2AError, ListTasksRequest, TaskState};
use serde_json::{Value, json};

use super::task::{self, View};
use super::{Call, RpcError, params};

use crate::access::policy::Action;
use crate::queue::{Job, JobFilter, JobState};

/// The most tasks `ListTasks` gives in one page.
const MAX_PAGE: i32 = 100;

/// The page `ListTasks` gives when the request names no size.
const DEFAULT_PAGE: i32 = 50;

/// `ListTasks`: the key's jobs (all with `read_all`), of the interface's
/// bundle, newest first, filtered by context and state.
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
    };
    let page = call.state.queue.list(filter.clone()).await?;
    let view = View {
        history_length: request.history_length,
        artifacts: request.include_artifacts.unwrap_or(false),
    };
    let after = request.status_timestamp_after;
    let changed_after =
        |job: &Job| after.is_none_or(|t| task::timestamp(&job.updated_at) >= Some(t));
    let tasks: Vec<a2a::Task> = page
        .jobs
        .iter()
        .filter(|job| changed_after(job))
        .map(|job| task::task(job, view))
        .collect();
    let total_size = match (&filter.cursor, &page.next_cursor) {
        // The whole listing is this page.
        (None, None) => tasks.len(),
        _ => total(call, filter, changed_after).await?,
    };
    Ok(json!(a2a::ListTasksResponse {
        total_size: i32::try_from(total_size).unwrap_or(i32::MAX),
        tasks,
        next_page_token: page.next_cursor.unwrap_or_default(),
        page_size: asked.page_size,
    }))
}

/// What a `ListTasks` request asks for, once it is known to be honourable.
struct Asked {
    page_size: i32,
    state: Option<JobState>,
    /// Where the page starts: the id of the last task of the page before.
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
    // A page token is the id of a task (a UUID) that a page ended on: any
    // other text would list from nowhere in particular.
    if let Some(token) = &cursor
        && uuid::Uuid::parse_str(token).is_err()
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

/// Jobs read per query while `ListTasks` counts its `totalSize`.
const COUNT_PAGE: usize = 500;

/// How many tasks the listing holds in all, every page (`totalSize`): the
/// store keeps no count per filter (context, bundle, state, owner, time),
/// so the listing is read to its end, [`COUNT_PAGE`] jobs at a time.
async fn total(
    call: &Call,
    filter: JobFilter,
    counted: impl Fn(&Job) -> bool,
) -> Result<usize, RpcError> {
    let mut filter = JobFilter {
        limit: COUNT_PAGE,
        cursor: None,
        ..filter
    };
    let mut total = 0;
    loop {
        let page = call.state.queue.list(filter.clone()).await?;
        total += page.jobs.iter().filter(|job| counted(job)).count();
        match page.next_cursor {
            Some(cursor) => filter.cursor = Some(cursor),
            None => return Ok(total),
        }
    }
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
    fn a_page_token_is_a_task_id_and_a_history_length_is_not_negative() {
        let token = uuid::Uuid::now_v7().to_string();
        let asked = checked(&request(json!({"pageToken": token}))).unwrap();
        assert_eq!(asked.cursor, Some(token));
        assert_eq!(asked.page_size, DEFAULT_PAGE);
        let empty = checked(&request(json!({"pageToken": ""}))).unwrap();
        assert_eq!(empty.cursor, None, "an empty token is the first page");
        for refused in [
            json!({"pageToken": "invalid-token-xyz"}),
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
}
