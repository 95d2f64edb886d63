//! `GET /v1/responses/{id}/input_items`: the input items the response was
//! made from, as OpenAI's list object. A response is a job, and the job
//! keeps what it was given: its chat (the request's messages, with its
//! `instructions` as the system message) or, for a plain text input and a
//! continued conversation, its one user text.

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::Deserialize;

use super::super::AppState;
use super::super::auth::Caller;
use super::super::body::{Path, Query};
use super::super::document::answers_in;
use super::super::openai::{ListObject, OpenAiError, OpenAiErrorBody};
use super::request::ResponsePath;
use super::shape::{InputItem, InputItemList, InputText, MessageKind, TextKind};
use crate::queue::Job;

/// The most items one page lists (OpenAI's bound).
const MAX_LIMIT: usize = 100;
/// Items a page lists when the request says nothing (OpenAI's default).
const DEFAULT_LIMIT: usize = 20;

/// The list's query. OpenAI's `include` (extra fields of tool items) is
/// taken and has nothing to add: the items are text messages.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListQuery {
    /// List the items after this item id (in the listing's order).
    #[serde(default)]
    after: Option<String>,
    /// List the items before this item id (in the listing's order).
    #[serde(default)]
    before: Option<String>,
    /// Items in a page (20 when left out); another number is a 400
    /// naming `limit`.
    #[serde(default)]
    #[schemars(range(min = 1, max = MAX_LIMIT))]
    limit: Option<usize>,
    /// `asc` (oldest first) or `desc` (newest first, the default); another
    /// is a 400 naming `order`.
    #[serde(default)]
    #[schemars(extend("enum" = ["asc", "desc"]))]
    order: Option<String>,
}

/// `GET /v1/responses/{id}/input_items` in the API document.
pub(in crate::api) fn list_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary(
            "The input items a response was made from (its messages, `instructions` as the \
             system message), as OpenAI's list object",
        )
        .response_with::<200, Json<InputItemList>, _>(|r| r.description("A page of the items"));
    answers_in::<OpenAiErrorBody>(
        op,
        &[
            (
                400,
                "`limit` or `order` out of range, or `after`/`before` naming no item of the \
                 response (`param` names which)",
            ),
            (
                403,
                "The key may not read the response's job (`permission_error`)",
            ),
            (
                404,
                "No response by that id that the key may see (ids are `resp_<job id>`)",
            ),
            (
                503,
                "The queue cannot answer now; Retry-After says when to try again",
            ),
        ],
    )
}

// Its extractors are `retrieve`'s (mod.rs), as axum reads each part of a
// request by its type; what each answers is its own.
/// `GET /v1/responses/{id}/input_items`.
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path(ResponsePath { id }): Path<ResponsePath>,
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
) -> Result<InputItemList, OpenAiError> {
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
        items.iter().position(|it| it.id == item).ok_or_else(|| {
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
    let page: Vec<InputItem> = items.into_iter().take(end).skip(start).collect();
    let has_more = page.len() > limit;
    let page: Vec<InputItem> = page.into_iter().take(limit).collect();
    Ok(InputItemList {
        object: ListObject::List,
        first_id: page.first().map(|item| item.id.clone()),
        last_id: page.last().map(|item| item.id.clone()),
        data: page,
        has_more,
    })
}

/// The job's input as Responses message items, oldest first.
fn input_items(job: &Job) -> Vec<InputItem> {
    let messages = match &job.messages {
        Some(chat) => chat.clone(),
        None => vec![serde_json::json!({"role": "user", "content": job.input})],
    };
    messages
        .iter()
        .enumerate()
        .map(|(n, message)| {
            let role = message["role"].as_str().unwrap_or("user");
            let kind = match role {
                "assistant" => TextKind::OutputText,
                _ => TextKind::InputText,
            };
            let text = message["content"].as_str().unwrap_or_default();
            InputItem {
                id: format!("msg_{}_in{n}", job.id),
                kind: MessageKind::Message,
                role: role.to_string(),
                status: "completed".into(),
                content: vec![InputText {
                    kind,
                    text: text.to_string(),
                }],
            }
        })
        .collect()
}
