//! `GET /v1/responses/{id}/input_items`: the input items the response was
//! made from, as OpenAI's list object. A response is a job, and the job
//! keeps what it was given: its chat (the request's messages, with its
//! `instructions` as the system message) or, for a plain text input and a
//! continued conversation, its one user text.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::super::AppState;
use super::super::auth::Caller;
use super::super::body::{Path, Query};
use super::super::openai::OpenAiError;
use crate::queue::Job;

/// The most items one page lists (OpenAI's bound).
const MAX_LIMIT: usize = 100;
/// Items a page lists when the request says nothing (OpenAI's default).
const DEFAULT_LIMIT: usize = 20;

/// The list's query. OpenAI's `include` (extra fields of tool items) is
/// taken and has nothing to add: the items are text messages.
#[derive(Debug, Deserialize)]
pub struct ListQuery {
    /// List the items after this item id (in the listing's order).
    #[serde(default)]
    after: Option<String>,
    /// List the items before this item id (in the listing's order).
    #[serde(default)]
    before: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
    /// `asc` (oldest first) or `desc` (newest first, the default).
    #[serde(default)]
    order: Option<String>,
}

// Its extractors are `retrieve`'s (mod.rs), as axum reads each part of a
// request by its type; what each answers is its own.
/// `GET /v1/responses/{id}/input_items`.
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(query): Query<ListQuery>,
) -> Response {
    match listed(&state, &caller, &id, query).await {
        Ok(list) => Json(list).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn listed(
    state: &AppState,
    caller: &Caller,
    id: &str,
    query: ListQuery,
) -> Result<Value, OpenAiError> {
    let limit = match query.limit {
        None => DEFAULT_LIMIT,
        Some(n @ 1..=MAX_LIMIT) => n,
        Some(n) => {
            return Err(OpenAiError::invalid(
                "limit",
                format!("limit {n} is out of range: send 1 to {MAX_LIMIT}"),
            ));
        }
    };
    let newest_first = match query.order.as_deref() {
        None | Some("desc") => true,
        Some("asc") => false,
        Some(other) => {
            return Err(OpenAiError::invalid(
                "order",
                format!("order {other:?} is not one of asc, desc"),
            ));
        }
    };
    let job = super::visible(state, caller, id).await?;
    let mut items = input_items(&job);
    if newest_first {
        items.reverse();
    }
    let at = |param: &str, item: &str| {
        items.iter().position(|it| it["id"] == item).ok_or_else(|| {
            OpenAiError::invalid(param, format!("no input item {item:?} in response {id:?}"))
        })
    };
    let start = match &query.after {
        None => 0,
        Some(after) => at("after", after)? + 1,
    };
    let end = match &query.before {
        None => items.len(),
        Some(before) => at("before", before)?,
    };
    let page: Vec<Value> = items.iter().take(end).skip(start).cloned().collect();
    let has_more = page.len() > limit;
    let page: Vec<Value> = page.into_iter().take(limit).collect();
    Ok(json!({
        "object": "list",
        "data": page,
        "first_id": page.first().map(|item| item["id"].clone()),
        "last_id": page.last().map(|item| item["id"].clone()),
        "has_more": has_more,
    }))
}

/// The job's input as Responses message items, oldest first.
fn input_items(job: &Job) -> Vec<Value> {
    let messages = match &job.messages {
        Some(chat) => chat.clone(),
        None => vec![json!({"role": "user", "content": job.input})],
    };
    messages
        .iter()
        .enumerate()
        .map(|(n, message)| {
            let role = message["role"].as_str().unwrap_or("user");
            let part = match role {
                "assistant" => "output_text",
                _ => "input_text",
            };
            let text = message["content"].as_str().unwrap_or_default();
            json!({
                "id": format!("msg_{}_in{n}", job.id),
                "type": "message",
                "role": role,
                "status": "completed",
                "content": [{"type": part, "text": text}],
            })
        })
        .collect()
}
