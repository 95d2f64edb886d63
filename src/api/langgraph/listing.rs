//! How LangGraph's searches read and answer, for every kind they list
//! (assistants, threads): a page's bounds, the sort order, the metadata
//! filter and the `select`ed fields.

use axum::Json;
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::super::error::{ApiError, ErrorCode};

/// The most objects one search answers.
pub(super) const MAX_LIMIT: usize = 1000;

/// Which way a search sorts (default `desc`: the newest first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SortOrder {
    Asc,
    #[default]
    Desc,
}

/// A page's bounds: `limit` 1 to 1000 (default 10), `offset` any.
pub(super) fn page(
    limit: Option<usize>,
    offset: Option<usize>,
) -> Result<(usize, usize), ApiError> {
    let limit = limit.unwrap_or(10);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "limit",
            format!("limit {limit} is out of range: send 1 to {MAX_LIMIT}"),
        ));
    }
    Ok((limit, offset.unwrap_or(0)))
}

/// Whether `metadata` has each of `wanted`'s keys at its value.
pub(super) fn has_metadata(metadata: &Value, wanted: Option<&Map<String, Value>>) -> bool {
    wanted.is_none_or(|wanted| {
        wanted
            .iter()
            .all(|(key, expected)| metadata.get(key) == Some(expected))
    })
}

/// The page of `found` (sorted) at `offset` of `limit`, and the offset of
/// the next page when more follow.
pub(super) fn paged<T>(found: Vec<T>, (limit, offset): (usize, usize)) -> (Vec<T>, Option<usize>) {
    let total = found.len();
    let next = (offset.saturating_add(limit) < total).then(|| offset + limit);
    (found.into_iter().skip(offset).take(limit).collect(), next)
}

/// A search's answer: the page's objects as JSON with only the `select`ed
/// keys (every key without one); when more follow the page, the header
/// `X-Pagination-Next` holds the next offset.
pub(super) fn answer<T: Serialize>(
    shown: Vec<T>,
    next: Option<usize>,
    select: &[&str],
) -> Response {
    let shown: Vec<Value> = shown
        .iter()
        .map(|object| selected(object, select))
        .collect();
    let mut response = Json(shown).into_response();
    if let Some(next) = next
        && let Ok(next) = next.to_string().parse()
    {
        response.headers_mut().insert("x-pagination-next", next);
    }
    response
}

/// `object` as JSON with only the `select`ed keys (every key when none).
fn selected(object: &impl Serialize, select: &[&str]) -> Value {
    let value = serde_json::to_value(object).unwrap_or(Value::Null);
    let Value::Object(all) = &value else {
        return value;
    };
    if select.is_empty() {
        return value;
    }
    Value::Object(
        select
            .iter()
            .filter_map(|key| Some((key.to_string(), all.get(*key)?.clone())))
            .collect(),
    )
}
