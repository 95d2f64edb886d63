//! A key's crons searched and counted: `POST /runs/crons/search` and
//! `POST /runs/crons/count` over the crons `crons` reads, filtered by
//! assistant, thread, whether enabled and metadata, sorted, paged and
//! selected as every LangGraph search is (`listing`).

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use axum::response::Response;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::super::AppState;
use super::super::auth::Caller;
use super::super::body::JsonBody;
use super::super::document::answers;
use super::super::error::ApiError;
use super::crons::{Cron, own_crons};
use super::ids;
use super::listing::{self, SortOrder, has_metadata, page};
use crate::access::policy::Action;

/// What a cron search keeps (the body of `POST /runs/crons/count`).
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(rename = "CronFilters")]
pub struct Filters {
    #[serde(default)]
    pub assistant_id: Option<String>,
    #[serde(default)]
    pub thread_id: Option<String>,
    #[serde(default)]
    pub enabled: Option<bool>,
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
}

/// The body of `POST /runs/crons/search`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(rename = "CronSearch")]
pub struct SearchRequest {
    #[serde(flatten)]
    pub filters: Filters,
    /// At most this many (1 to 1000; default 10).
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<usize>,
    #[serde(default)]
    pub offset: Option<usize>,
    #[serde(default)]
    pub sort_by: Option<SortBy>,
    #[serde(default)]
    pub sort_order: Option<SortOrder>,
    /// Only these fields of each cron.
    #[serde(default)]
    pub select: Option<Vec<Field>>,
}

/// What a cron search sorts by (default `created_at`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SortBy {
    CronId,
    AssistantId,
    ThreadId,
    NextRunDate,
    EndTime,
    CreatedAt,
    UpdatedAt,
}

/// A field of a cron a search may select.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Field {
    CronId,
    AssistantId,
    ThreadId,
    OnRunCompleted,
    EndTime,
    Schedule,
    Timezone,
    CreatedAt,
    UpdatedAt,
    Payload,
    UserId,
    NextRunDate,
    Metadata,
    Enabled,
}

impl Field {
    fn key(self) -> &'static str {
        match self {
            Field::CronId => "cron_id",
            Field::AssistantId => "assistant_id",
            Field::ThreadId => "thread_id",
            Field::OnRunCompleted => "on_run_completed",
            Field::EndTime => "end_time",
            Field::Schedule => "schedule",
            Field::Timezone => "timezone",
            Field::CreatedAt => "created_at",
            Field::UpdatedAt => "updated_at",
            Field::Payload => "payload",
            Field::UserId => "user_id",
            Field::NextRunDate => "next_run_date",
            Field::Metadata => "metadata",
            Field::Enabled => "enabled",
        }
    }
}

/// The caller's crons `filters` keeps.
async fn matching(
    state: &AppState,
    caller: &Caller,
    filters: &Filters,
) -> Result<Vec<Cron>, ApiError> {
    let crons = own_crons(state, caller, Action::ReadSchedule).await?;
    Ok(crons
        .into_iter()
        .filter(|found| {
            filters
                .assistant_id
                .as_deref()
                .is_none_or(|id| ids::names(id, &found.stored.bundle))
        })
        .filter(|found| {
            filters
                .thread_id
                .as_deref()
                .is_none_or(|id| found.view.thread_id.as_deref() == Some(id))
        })
        .filter(|found| filters.enabled.is_none_or(|e| e == found.view.enabled))
        .filter(|found| {
            has_metadata(
                &Value::Object(found.view.metadata.clone()),
                filters.metadata.as_ref(),
            )
        })
        .map(|found| found.view)
        .collect())
}

/// `POST /runs/crons/search` in the API document.
pub(super) fn search_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Search this key's crons")
        .response_with::<200, Json<Vec<Cron>>, _>(|r| r.description("The crons"));
    answers(op, &[(422, "A field is invalid (it is named)")])
}

/// `POST /runs/crons/search`.
pub async fn search(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(request): JsonBody<SearchRequest>,
) -> Result<Response, ApiError> {
    let bounds = page(request.limit, request.offset)?;
    let mut found = matching(&state, &caller, &request.filters).await?;
    let by = request.sort_by.unwrap_or(SortBy::CreatedAt);
    found.sort_by(|a, b| {
        let order = match by {
            SortBy::CronId => a.cron_id.cmp(&b.cron_id),
            SortBy::AssistantId => a.assistant_id.cmp(&b.assistant_id),
            SortBy::ThreadId => a.thread_id.cmp(&b.thread_id),
            SortBy::NextRunDate => a.next_run_date.cmp(&b.next_run_date),
            SortBy::EndTime => a.end_time.cmp(&b.end_time),
            SortBy::CreatedAt => a.created_at.cmp(&b.created_at),
            SortBy::UpdatedAt => a.updated_at.cmp(&b.updated_at),
        };
        order.then_with(|| a.cron_id.cmp(&b.cron_id))
    });
    if request.sort_order.unwrap_or_default() == SortOrder::Desc {
        found.reverse();
    }
    let (shown, next) = listing::paged(found, bounds);
    let select: Vec<&str> = request.select.iter().flatten().map(|f| f.key()).collect();
    Ok(listing::answer(shown, next, &select))
}

/// `POST /runs/crons/count` in the API document.
pub(super) fn count_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Count this key's crons a search with these filters finds")
        .response_with::<200, Json<usize>, _>(|r| r.description("How many"));
    answers(op, &[(422, "A field is invalid (it is named)")])
}

/// `POST /runs/crons/count`.
pub async fn count(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(filters): JsonBody<Filters>,
) -> Result<Json<usize>, ApiError> {
    Ok(Json(matching(&state, &caller, &filters).await?.len()))
}
