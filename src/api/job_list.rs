//! `GET /v1/jobs`: a page of jobs across conversations, filtered (state,
//! errors, bundle, conversation, owner, creation time, text) and ordered
//! by the store (newest first, or last updated first), and the feed of
//! the jobs changed since an earlier page (`updated_since`). Which jobs a
//! key may list is the authorization policy's, asked through [`Caller`].

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::AppState;
use super::auth::Caller;
use super::body::Query;
use super::document::answers;
use super::error::{ApiError, ErrorCode};
use super::jobs::time_field;
use crate::access::policy::{Action, Resource};
use crate::queue::{Job, JobFilter, JobOrder, JobState, QueueError};

/// The query of `GET /v1/jobs`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "JobListQuery")]
pub struct ListQuery {
    /// Only jobs in this state.
    pub state: Option<JobState>,
    /// `true`: only jobs that ended in an error — `failed`, or `dead` (its
    /// attempts used up). A cancelled job did not err; a job whose attempt
    /// failed and that will be retried is still `queued`.
    pub error: Option<bool>,
    pub bundle: Option<String>,
    pub conversation_id: Option<String>,
    /// Only the jobs this API key (by name) submitted. A key that may read
    /// only its own jobs gets an empty page for another key's.
    pub owner: Option<String>,
    /// Only jobs created at or after this time (RFC 3339).
    #[schemars(extend("format" = "date-time"))]
    pub created_from: Option<String>,
    /// Only jobs created before this time (RFC 3339).
    #[schemars(extend("format" = "date-time"))]
    pub created_to: Option<String>,
    /// Only jobs updated at or after this time, in ms since the epoch: the
    /// `changes_since` of an earlier page, to fetch only what changed.
    #[schemars(range(min = 0, max = LATEST_MS))]
    pub updated_since: Option<i64>,
    /// Which way the pages run: `created` (newest first, the default),
    /// `created_asc` (oldest first) or `updated` (last updated first; with
    /// `updated_since`, as no index holds the update time).
    pub order: Option<ListOrder>,
    /// Jobs per page, 1 to 1000 (default 50).
    #[schemars(range(min = 1, max = MAX_PAGE))]
    pub limit: Option<usize>,
    /// The `next_cursor` of the page before (of the same `order`).
    pub cursor: Option<String>,
    /// Text the job's id, bundle or input contains (any case).
    pub q: Option<String>,
}

/// The last millisecond of the year 9999: the latest `updated_since`.
const LATEST_MS: i64 = 253_402_300_799_999;

/// The orders of a listing: by creation (the id, a UUIDv7: the primary
/// key), either way, and by last update (`updated_at`, id: not indexed,
/// every heartbeat writes it; meant with `updated_since`).
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ListOrder {
    /// Newest first.
    #[default]
    Created,
    /// Oldest first.
    CreatedAsc,
    /// Last updated first; jobs updated in one millisecond newest first.
    Updated,
}

impl From<ListOrder> for JobOrder {
    fn from(order: ListOrder) -> Self {
        match order {
            ListOrder::Created => JobOrder::Created,
            ListOrder::CreatedAsc => JobOrder::CreatedAsc,
            ListOrder::Updated => JobOrder::Updated,
        }
    }
}

/// A page of jobs.
#[derive(Debug, Serialize, JsonSchema)]
pub struct JobList {
    pub jobs: Vec<Job>,
    /// Ask again with `cursor` set to it for the next page; `null` on the
    /// last.
    pub next_cursor: Option<String>,
    /// Ask again with `updated_since` set to it (and `order=updated`) for
    /// only the jobs changed after this page was read, and merge them by
    /// id. It lies 2 s before the read, so a change stored while the page
    /// was read is not missed (it may come twice).
    pub changes_since: i64,
}

/// How far before a read its `changes_since` lies: a job's update time is
/// taken as its write begins, so a write that began before the read may
/// be stored after it, and a next read from the read's own time would
/// miss it.
pub const CHANGE_MARGIN_MS: i64 = 2_000;

/// `GET /v1/jobs` in the API document.
pub(super) fn list_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("List jobs, newest first, oldest first or last updated first")
        .description(
            "Filters combine. For a live list, read a page, then ask with `order=updated` and \
             `updated_since` set to the page's `changes_since` for only the jobs that changed, \
             and merge them by id.",
        )
        .response_with::<200, Json<JobList>, _>(|r| r.description("A page of jobs"));
    answers(
        op,
        &[(
            422,
            "A parameter is not valid, or the cursor is not one of this order",
        )],
    )
}

pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<ListQuery>,
) -> Result<Json<JobList>, ApiError> {
    let read_at = chrono::Utc::now().timestamp_millis();
    let changes_since = read_at.saturating_sub(CHANGE_MARGIN_MS);
    let limit = page_limit(query.limit)?;
    let ms = |field: &str, text: Option<&String>| {
        text.map(|t| time_field(field, t).map(|t| t.timestamp_millis()))
            .transpose()
    };
    if let Some(since) = query.updated_since
        && !(0..=LATEST_MS).contains(&since)
    {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "updated_since",
            format!(
                "{since} is no time to list changes from: send ms since the epoch (0 to {LATEST_MS}), as a page's `changes_since` gives it"
            ),
        ));
    }
    let created_from = ms("created_from", query.created_from.as_ref())?;
    let created_to = ms("created_to", query.created_to.as_ref())?;
    // A key sees its own jobs unless it may read all; another key's, asked
    // by name, it may not list is an empty page, as if it had none.
    if let Some(owner) = &query.owner
        && !caller.allows(
            Action::ListJobs,
            &Resource::owned("job", Some(owner.as_str()), None),
        )
    {
        return Ok(Json(JobList {
            jobs: Vec::new(),
            next_cursor: None,
            changes_since,
        }));
    }
    let mut page = state
        .queue
        .list(JobFilter {
            state: query.state,
            bundle: query.bundle,
            conversation_id: query.conversation_id,
            conversation_owner: None,
            owner: query.owner.or(caller.listing_owner(Action::ListJobs)),
            limit,
            cursor: query.cursor,
            search: query.q,
            unfinished: false,
            updated_since: query.updated_since,
            created_from,
            created_to,
            errored: query.error.unwrap_or(false),
            order: query.order.unwrap_or_default().into(),
            kind: None,
        })
        .await
        .map_err(|e| match e {
            QueueError::Cursor(text) => ApiError::field(
                ErrorCode::InvalidRequest,
                "cursor",
                format!(
                    "invalid cursor {text}: send the `next_cursor` of a page of the same `order`, or leave it out"
                ),
            ),
            other => other.into(),
        })?;
    // Jobs of bundles outside the key's globs do not exist for it.
    page.jobs
        .retain(|job| caller.allows_job(Action::ListJobs, job));
    Ok(Json(JobList {
        jobs: page.jobs,
        next_cursor: page.next_cursor,
        changes_since,
    }))
}

/// The most rows one page of a listing gives.
pub(crate) const MAX_PAGE: usize = 1000;

/// A listing's `limit`: 50 unless asked, 1 to [`MAX_PAGE`] (jobs and
/// deliveries).
pub(crate) fn page_limit(asked: Option<usize>) -> Result<usize, ApiError> {
    let limit = asked.unwrap_or(50);
    if limit == 0 || limit > MAX_PAGE {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "limit",
            "must be between 1 and 1000",
        ));
    }
    Ok(limit)
}
