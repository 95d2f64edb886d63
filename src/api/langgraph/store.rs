//! LangGraph's store: `PUT`, `GET` and `DELETE /store/items`,
//! `POST /store/items/search` and `POST /store/namespaces` — a key's
//! long-term memory, JSON objects under a namespace and a key, kept in the
//! queue's database (`queue::items`) and shared by every thread of the
//! key. Each key has its own store: no request names another key's, and
//! an item of another key is as unknown as a missing one. What a search
//! keeps and how it ranks is `store_search`'s.

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::super::AppState;
use super::super::auth::Caller;
use super::super::body::{JsonBody, ListQuery, Texts};
use super::super::document::answers;
use super::super::error::{ApiError, ErrorCode};
use super::store_search::{Filter, NamespaceMatch, namespaces, score};
use crate::access::policy::{Action, Resource};
use crate::queue::{
    ITEMS_SCANNED, MAX_VALUE_BYTES, NAMESPACES_SCANNED, NewItem, SEPARATOR, StoredItem, rfc3339,
};

/// The most labels a namespace has.
const MAX_LABELS: usize = 32;
/// A namespace's label: 1 to 256 characters, no `.` (what joins labels)
/// and no NUL (which the database cannot hold).
const LABEL_PATTERN: &str = "^[^.\\u0000]{1,256}$";
/// An item's key: 1 to 1024 characters, no NUL.
const KEY_PATTERN: &str = "^[^\\u0000]{1,1024}$";
/// The longest time to live, in minutes (ten years).
const MAX_TTL_MINUTES: f64 = 5_256_000.0;

/// Whether `label` is a namespace's label by [`LABEL_PATTERN`].
fn is_label(label: &str) -> bool {
    (1..=256).contains(&label.chars().count()) && !label.contains([SEPARATOR, '\0'])
}

/// Whether `key` is an item's key by [`KEY_PATTERN`].
fn is_key(key: &str) -> bool {
    (1..=1024).contains(&key.chars().count()) && !key.contains('\0')
}

/// A namespace in the API document: a list of [`LABEL_PATTERN`] labels.
fn namespace_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "maxItems": MAX_LABELS,
        "items": {"type": "string", "pattern": LABEL_PATTERN}
    })
}

/// An item's namespace: 1 label or more.
fn item_namespace_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = namespace_schema(generator);
    schema.insert("minItems".into(), 1.into());
    schema
}

/// A search's `filter`: each field a value to equal (an object without
/// `$` keys, or any other value) or an object of operators.
fn filter_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": ["object", "null"],
        "additionalProperties": {
            "anyOf": [
                {"type": ["null", "boolean", "number", "string", "array"]},
                {"type": "object", "propertyNames": {"pattern": "^([^$]|$)"}},
                {
                    "type": "object",
                    "minProperties": 1,
                    "propertyNames": {"enum": ["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"]}
                }
            ]
        }
    })
}

fn optional_namespace_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let namespace = namespace_schema(generator);
    schemars::json_schema!({"anyOf": [namespace, {"type": "null"}]})
}

/// An item as LangGraph's clients see it (`score` only in a text search).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Item {
    pub namespace: Vec<String>,
    pub key: String,
    pub value: Map<String, Value>,
    /// RFC 3339 UTC.
    pub created_at: String,
    pub updated_at: String,
    /// How well it answers a search's `query` (0 to 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
}

impl Item {
    fn of(item: StoredItem, score: Option<f64>) -> Self {
        Self {
            namespace: labels(&item.namespace),
            key: item.key,
            value: item.value,
            created_at: rfc3339(item.created_at),
            updated_at: rfc3339(item.updated_at),
            score,
        }
    }
}

fn labels(namespace: &str) -> Vec<String> {
    namespace.split(SEPARATOR).map(str::to_string).collect()
}

/// The body of `PUT /store/items`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct PutRequest {
    /// 1 to 32 labels, each 1 to 256 characters without `.`.
    #[schemars(schema_with = "item_namespace_schema")]
    pub namespace: Vec<String>,
    /// 1 to 1024 characters.
    #[schemars(regex(pattern = KEY_PATTERN))]
    pub key: String,
    pub value: Map<String, Value>,
    /// Which fields a search's `query` reads: `null` (all), `false` (none:
    /// a text search never finds it), or a list of field paths (`title`,
    /// `author.name`, `tags[*]`).
    #[serde(default)]
    #[schemars(schema_with = "index_schema")]
    pub index: Option<Value>,
    /// Minutes it is kept unread (every read starts it again unless it
    /// says `refresh_ttl: false`); none: until deleted.
    #[serde(default)]
    #[schemars(extend("exclusiveMinimum" = 0, "maximum" = MAX_TTL_MINUTES))]
    pub ttl: Option<f64>,
}

fn index_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "Which fields a search's `query` reads: null (all), false (none) or a list of field paths",
        "anyOf": [
            {"type": "null"},
            {"const": false},
            {"type": "array", "items": {"type": "string"}}
        ]
    })
}

/// The query of `GET /store/items`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct GetQuery {
    #[schemars(regex(pattern = KEY_PATTERN))]
    pub key: String,
    /// The labels joined by `.` (the Python and JS clients'), or repeated.
    #[serde(default)]
    pub namespace: Option<Texts>,
    /// `false`: this read does not start the item's time to live again.
    #[serde(default)]
    #[schemars(extend("enum" = ["true", "false", "True", "False", "1", "0", ""]))]
    pub refresh_ttl: Option<String>,
}

/// The body of `DELETE /store/items`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct DeleteRequest {
    #[serde(default)]
    #[schemars(schema_with = "optional_namespace_schema")]
    pub namespace: Option<Vec<String>>,
    #[schemars(regex(pattern = KEY_PATTERN))]
    pub key: String,
}

/// The body of `POST /store/items/search`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct SearchRequest {
    /// Items in this namespace or under it (none: all the key's).
    #[serde(default)]
    #[schemars(schema_with = "optional_namespace_schema")]
    pub namespace_prefix: Option<Vec<String>>,
    /// Each field equal to a value, or compared: `{"year": {"$gte": 2020}}`
    /// (`$eq`, `$ne`, `$gt`, `$gte`, `$lt`, `$lte`).
    #[serde(default)]
    #[schemars(schema_with = "filter_schema")]
    pub filter: Option<Map<String, Value>>,
    /// At most this many (1 to 1000; default 10).
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<usize>,
    #[serde(default)]
    #[schemars(range(max = ITEMS_SCANNED))]
    pub offset: Option<usize>,
    /// Words to rank by: items whose indexed fields hold more of them
    /// first, each with its `score` (items put with `index: false` are
    /// left out).
    #[serde(default)]
    pub query: Option<String>,
    /// `false`: this search does not start its items' time to live again.
    #[serde(default)]
    pub refresh_ttl: Option<bool>,
}

/// The body of `POST /store/namespaces`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct NamespacesRequest {
    /// Only namespaces starting with these labels (`*`: any one label).
    #[serde(default)]
    #[schemars(schema_with = "optional_namespace_schema")]
    pub prefix: Option<Vec<String>>,
    /// Only namespaces ending with these labels (`*`: any one label).
    #[serde(default)]
    #[schemars(schema_with = "optional_namespace_schema")]
    pub suffix: Option<Vec<String>>,
    /// Each cut to this many labels (listed once).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_depth: Option<usize>,
    /// At most this many (1 to 1000; default 100).
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<usize>,
    #[serde(default)]
    #[schemars(range(max = NAMESPACES_SCANNED))]
    pub offset: Option<usize>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct SearchResponse {
    pub items: Vec<Item>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct NamespacesResponse {
    pub namespaces: Vec<Vec<String>>,
}

fn refused(field: &str, why: impl Into<String>) -> ApiError {
    ApiError::field(ErrorCode::InvalidRequest, field, why)
}

fn not_found(namespace: &str, key: &str) -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        format!(
            "no item {key:?} in namespace {namespace:?} of this key's store (PUT /store/items writes one, POST /store/items/search lists them)"
        ),
    )
}

/// `labels` checked as a namespace: its stored text.
fn namespace_of(field: &str, labels: &[String]) -> Result<String, ApiError> {
    if labels.len() > MAX_LABELS {
        return Err(refused(
            field,
            format!("a namespace has at most {MAX_LABELS} labels"),
        ));
    }
    if let Some(label) = labels.iter().find(|label| !is_label(label)) {
        return Err(refused(
            field,
            format!(
                "namespace label {label:?}: a label is 1 to 256 characters, without `{SEPARATOR}` or NUL"
            ),
        ));
    }
    Ok(labels.join(&SEPARATOR.to_string()))
}

fn key_of(key: &str) -> Result<&str, ApiError> {
    match is_key(key) {
        true => Ok(key),
        false => Err(refused("key", "a key is 1 to 1024 characters, without NUL")),
    }
}

/// The caller's store, once the policy lets it take `action` there.
fn own_store(caller: &Caller, action: Action) -> Result<&str, ApiError> {
    let owner = caller.name();
    let store = Resource::owned("store", Some(owner), None);
    caller.authorize(action, &store, || {
        ApiError::new(ErrorCode::NotFound, "no such store")
    })?;
    Ok(owner)
}

/// `PUT /store/items` in the API document.
pub(super) fn put_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Put an item into this key's store (replacing the one of its namespace and key)")
        .response_with::<204, (), _>(|r| r.description("Stored"));
    answers(op, &[(422, "A field is invalid (it is named)")])
}

/// `PUT /store/items`.
pub async fn put(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(request): JsonBody<PutRequest>,
) -> Result<StatusCode, ApiError> {
    if request.namespace.is_empty() {
        return Err(refused(
            "namespace",
            "an item needs a namespace of 1 label or more",
        ));
    }
    let namespace = namespace_of("namespace", &request.namespace)?;
    key_of(&request.key)?;
    let index = match request.index.unwrap_or(Value::Null) {
        index @ (Value::Null | Value::Bool(false)) => index,
        Value::Array(paths) if paths.iter().all(Value::is_string) => Value::Array(paths),
        _ => {
            return Err(refused(
                "index",
                "index is null (every field), false (none) or a list of field paths",
            ));
        }
    };
    let ttl_ms = match request.ttl {
        None => None,
        Some(minutes) if minutes > 0.0 && minutes <= MAX_TTL_MINUTES => {
            Some((minutes * 60_000.0).round() as i64)
        }
        Some(minutes) => {
            return Err(refused(
                "ttl",
                format!(
                    "ttl {minutes} is out of range: more than 0 and at most {MAX_TTL_MINUTES} minutes"
                ),
            ));
        }
    };
    let size = Value::Object(request.value.clone()).to_string().len();
    if size > MAX_VALUE_BYTES {
        return Err(refused(
            "value",
            format!(
                "the value is {size} bytes as JSON; an item holds at most {MAX_VALUE_BYTES}: split it over several keys"
            ),
        ));
    }
    let owner = own_store(&caller, Action::WriteStore)?;
    let item = NewItem {
        namespace,
        key: request.key,
        value: request.value,
        index,
        ttl_ms,
    };
    state.queue.put_item(owner, item).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /store/items` in the API document.
pub(super) fn get_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("An item of this key's store")
        .response_with::<200, Json<Item>, _>(|r| r.description("The item"));
    answers(
        op,
        &[
            (404, "This key's store has no such item (or it expired)"),
            (422, "A parameter is invalid (it is named)"),
        ],
    )
}

/// `GET /store/items`.
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    ListQuery(query): ListQuery<GetQuery>,
) -> Result<Json<Item>, ApiError> {
    let labels: Vec<String> = match &query.namespace {
        Some(Texts::One(joined)) if joined.is_empty() => Vec::new(),
        Some(Texts::One(joined)) => labels(joined),
        Some(Texts::Many(labels)) => labels.clone(),
        None => Vec::new(),
    };
    let namespace = namespace_of("namespace", &labels)?;
    key_of(&query.key)?;
    let refresh = match query.refresh_ttl.as_deref() {
        None | Some("" | "true" | "True" | "1") => true,
        Some("false" | "False" | "0") => false,
        Some(other) => {
            return Err(refused(
                "refresh_ttl",
                format!("refresh_ttl {other:?} is neither true nor false"),
            ));
        }
    };
    let owner = own_store(&caller, Action::ReadStore)?;
    let item = state
        .queue
        .item(owner, &namespace, &query.key, refresh)
        .await?
        .ok_or_else(|| not_found(&namespace, &query.key))?;
    Ok(Json(Item::of(item, None)))
}

/// `DELETE /store/items` in the API document.
pub(super) fn delete_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Delete an item of this key's store (none there is no error)")
        .response_with::<204, (), _>(|r| r.description("Deleted, or there was none"));
    answers(op, &[(422, "A field is invalid (it is named)")])
}

/// `DELETE /store/items`: idempotent, as LangGraph's server is.
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(request): JsonBody<DeleteRequest>,
) -> Result<StatusCode, ApiError> {
    let namespace = namespace_of("namespace", &request.namespace.unwrap_or_default())?;
    key_of(&request.key)?;
    let owner = own_store(&caller, Action::WriteStore)?;
    state
        .queue
        .delete_item(owner, &namespace, &request.key)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /store/items/search` in the API document.
pub(super) fn search_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Search this key's store: items under a namespace, filtered, ranked by a text query")
        .description(
            "A `filter` or a `query` looks at the key's 2,000 most recently updated items under the namespace; \
             without a `query`, the most recently updated first",
        )
        .response_with::<200, Json<SearchResponse>, _>(|r| r.description("The items"));
    answers(op, &[(422, "A field is invalid (it is named)")])
}

/// `POST /store/items/search`.
pub async fn search(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(request): JsonBody<SearchRequest>,
) -> Result<Json<SearchResponse>, ApiError> {
    let prefix = request.namespace_prefix.unwrap_or_default();
    let namespace = namespace_of("namespace_prefix", &prefix)?;
    let filter = Filter::parse(&request.filter.unwrap_or_default())
        .map_err(|e| refused("filter", e.to_string()))?;
    let limit = request.limit.unwrap_or(10);
    if !(1..=1000).contains(&limit) {
        return Err(refused("limit", "limit is 1 to 1000"));
    }
    let offset = request.offset.unwrap_or(0);
    if offset > ITEMS_SCANNED {
        return Err(refused(
            "offset",
            format!("offset is at most {ITEMS_SCANNED}: a search looks at that many items"),
        ));
    }
    let owner = own_store(&caller, Action::ReadStore)?;
    // Unfiltered and unranked, the page is the newest items: read only it.
    let scanned = match filter.is_empty() && request.query.is_none() {
        true => offset + limit,
        false => ITEMS_SCANNED,
    };
    let stored = state.queue.items_under(owner, &namespace, scanned).await?;
    let mut found: Vec<(StoredItem, Option<f64>)> = stored
        .into_iter()
        .filter(|item| filter.matches(&item.value))
        .filter_map(|item| match &request.query {
            Some(query) => score(query, &item).map(|score| (item, Some(score))),
            None => Some((item, None)),
        })
        .collect();
    // Stable: equal scores keep the most recently updated first.
    found.sort_by(|a, b| b.1.unwrap_or(0.0).total_cmp(&a.1.unwrap_or(0.0)));
    let page: Vec<(StoredItem, Option<f64>)> = found.into_iter().skip(offset).take(limit).collect();
    if request.refresh_ttl != Some(false) {
        let with_ttl: Vec<(String, String)> = page
            .iter()
            .filter(|(item, _)| item.ttl_ms.is_some())
            .map(|(item, _)| (item.namespace.clone(), item.key.clone()))
            .collect();
        if !with_ttl.is_empty() {
            state.queue.touch_items(owner, with_ttl).await?;
        }
    }
    let items = page
        .into_iter()
        .map(|(item, score)| Item::of(item, score))
        .collect();
    Ok(Json(SearchResponse { items }))
}

/// `POST /store/namespaces` in the API document.
pub(super) fn namespaces_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("The namespaces of this key's store, by prefix and suffix, cut to a depth")
        .response_with::<200, Json<NamespacesResponse>, _>(|r| {
            r.description("The namespaces, in order")
        });
    answers(op, &[(422, "A field is invalid (it is named)")])
}

/// `POST /store/namespaces`.
pub async fn list_namespaces(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(request): JsonBody<NamespacesRequest>,
) -> Result<Json<NamespacesResponse>, ApiError> {
    let prefix = request.prefix.unwrap_or_default();
    let suffix = request.suffix.unwrap_or_default();
    namespace_of("prefix", &prefix)?;
    namespace_of("suffix", &suffix)?;
    if request.max_depth == Some(0) {
        return Err(refused("max_depth", "max_depth is 1 or more"));
    }
    let limit = request.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(refused("limit", "limit is 1 to 1000"));
    }
    let offset = request.offset.unwrap_or(0);
    if offset > NAMESPACES_SCANNED {
        return Err(refused(
            "offset",
            format!(
                "offset is at most {NAMESPACES_SCANNED}: a listing looks at that many namespaces"
            ),
        ));
    }
    let owner = own_store(&caller, Action::ReadStore)?;
    let stored = state
        .queue
        .item_namespaces(owner, NAMESPACES_SCANNED)
        .await?;
    let conditions = NamespaceMatch {
        prefix: &prefix,
        suffix: &suffix,
        max_depth: request.max_depth,
    };
    let namespaces = namespaces(&stored, SEPARATOR, &conditions)
        .into_iter()
        .skip(offset)
        .take(limit)
        .collect();
    Ok(Json(NamespacesResponse { namespaces }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::text::pattern_matches as matches;

    #[test]
    fn each_pattern_says_what_its_rule_refuses() {
        let long = "é".repeat(256);
        let longer = "é".repeat(257);
        for text in ["", "a", "a.b", "a\0", "*", "naïve", &long, &longer] {
            assert_eq!(matches(LABEL_PATTERN, text), is_label(text), "{text:?}");
            assert_eq!(matches(KEY_PATTERN, text), is_key(text), "{text:?}");
        }
        let key = "k".repeat(1025);
        assert_eq!(matches(KEY_PATTERN, &key), is_key(&key));
    }
}
