//! Items: a key's long-term memory as LangGraph's store keeps it — JSON
//! objects under a namespace (a path of labels) and a key, shared by every
//! thread and run of the key, kept until deleted or, with a time to live,
//! until unread that long. Each key's items are its own: every statement
//! names the owner. What a search or a listing keeps of them (filters,
//! ranking, wildcards) is the API's (`api/langgraph/store_search.rs`); the
//! queue stores, expires and reads them.

use serde_json::{Map, Value};

use super::tx::{Columns, Res};

/// The most items a filtered or ranked search looks at: the key's most
/// recently updated this many under the namespace asked (the search
/// filters and ranks those; the API document says so). With
/// [`MAX_VALUE_BYTES`], what one search may hold in memory is bounded
/// (2,000 × 64 KiB).
pub const ITEMS_SCANNED: usize = 2_000;

/// The largest value an item holds, as JSON text.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;

/// The most namespaces a listing looks at: the key's first this many, in
/// order (the listing filters them).
pub const NAMESPACES_SCANNED: usize = 10_000;

/// What separates a namespace's labels where it is stored (labels never
/// hold one: the API refuses them, as LangGraph's clients do).
pub const SEPARATOR: char = '.';

/// One item as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredItem {
    /// Its labels joined by [`SEPARATOR`].
    pub namespace: String,
    pub key: String,
    /// A JSON object.
    pub value: Map<String, Value>,
    /// Which of its fields a text query reads: `null` (all), `false`
    /// (none), or a list of field paths.
    pub index: Value,
    /// Milliseconds since the epoch.
    pub created_at: i64,
    pub updated_at: i64,
    /// How long it is kept unread (ms), none for ever.
    pub ttl_ms: Option<i64>,
}

/// An item to write.
#[derive(Debug, Clone, PartialEq)]
pub struct NewItem {
    pub namespace: String,
    pub key: String,
    pub value: Map<String, Value>,
    pub index: Value,
    pub ttl_ms: Option<i64>,
}

/// The columns [`item_from_row`] reads, over `store_items`.
pub(crate) const ITEM_COLUMNS: &str =
    "namespace, key, value, index_fields, created_at, updated_at, ttl_ms";

pub(crate) fn item_from_row(row: &impl Columns) -> Res<StoredItem> {
    // Written only by `put`: anything else there reads as empty rather
    // than failing every search of the key.
    let json = |i| -> Res<Option<Value>> {
        Ok(row
            .text(i)?
            .and_then(|text| serde_json::from_str::<Value>(&text).ok()))
    };
    let value = match json(2)? {
        Some(Value::Object(value)) => value,
        _ => Map::new(),
    };
    Ok(StoredItem {
        namespace: row.req_text(0)?,
        key: row.req_text(1)?,
        value,
        index: json(3)?.unwrap_or(Value::Null),
        created_at: row.req_int(4)?,
        updated_at: row.req_int(5)?,
        ttl_ms: row.int(6)?,
    })
}

/// The item statements of a dialect (one statement each, no rule). An
/// item whose `expires_at` has passed is gone to every read.
pub(crate) trait ItemStatements {
    /// Writes `item` as `owner`'s (its `created_at` kept when it exists).
    fn upsert_item(
        &mut self,
        owner: &str,
        item: &NewItem,
        value: &str,
        index: &str,
        now: i64,
    ) -> impl Future<Output = Res<()>> + Send;
    /// Deletes `owner`'s items that expired by `now`.
    fn drop_expired_items(
        &mut self,
        owner: &str,
        now: i64,
    ) -> impl Future<Output = Res<u64>> + Send;
    /// `owner`'s item, unless missing or expired.
    fn item(
        &mut self,
        owner: &str,
        namespace: &str,
        key: &str,
        now: i64,
    ) -> impl Future<Output = Res<Option<StoredItem>>> + Send;
    /// Deletes `owner`'s item: whether there was one.
    fn delete_item(
        &mut self,
        owner: &str,
        namespace: &str,
        key: &str,
    ) -> impl Future<Output = Res<bool>> + Send;
    /// Moves the expiry of `owner`'s item with a time to live to `now`
    /// plus it.
    fn touch_item(
        &mut self,
        owner: &str,
        namespace: &str,
        key: &str,
        now: i64,
    ) -> impl Future<Output = Res<()>> + Send;
    /// `owner`'s live items in `namespace` or under it (`""`: all), the
    /// most recently updated first, `limit` at most.
    fn items_under(
        &mut self,
        owner: &str,
        namespace: &str,
        now: i64,
        limit: usize,
    ) -> impl Future<Output = Res<Vec<StoredItem>>> + Send;
    /// `owner`'s namespaces holding a live item, in order, `limit` at most.
    fn item_namespaces(
        &mut self,
        owner: &str,
        now: i64,
        limit: usize,
    ) -> impl Future<Output = Res<Vec<String>>> + Send;
}

/// The text [`ItemStatements::items_under`] compares a namespace's start
/// with, and its length in characters (as both dialects' `substr` counts):
/// `a.b` holds `a.b` itself and `a.b.…`, never `a.bc`.
pub(crate) fn under(namespace: &str) -> (String, i64) {
    let prefix = format!("{namespace}{SEPARATOR}");
    let chars = i64::try_from(prefix.chars().count()).unwrap_or(i64::MAX);
    (prefix, chars)
}

/// Writes `item` as `owner`'s, first dropping the key's expired items (so
/// they never pile up unread).
pub(crate) async fn put(
    tx: &mut (impl super::statements::JobStatements + ItemStatements),
    owner: &str,
    item: &NewItem,
) -> Res<()> {
    let now = tx.now().await?;
    tx.drop_expired_items(owner, now).await?;
    let value = Value::Object(item.value.clone()).to_string();
    let index = item.index.to_string();
    tx.upsert_item(owner, item, &value, &index, now).await
}

/// `owner`'s item, its time to live started again when `refresh`.
pub(crate) async fn get(
    tx: &mut (impl super::statements::JobStatements + ItemStatements),
    owner: &str,
    namespace: &str,
    key: &str,
    refresh: bool,
) -> Res<Option<StoredItem>> {
    let now = tx.now().await?;
    let item = tx.item(owner, namespace, key, now).await?;
    if refresh && item.as_ref().is_some_and(|item| item.ttl_ms.is_some()) {
        tx.touch_item(owner, namespace, key, now).await?;
    }
    Ok(item)
}

/// Starts again the time to live of `owner`'s `items` that have one (those
/// a search answered).
pub(crate) async fn touch(
    tx: &mut (impl super::statements::JobStatements + ItemStatements),
    owner: &str,
    items: &[(String, String)],
) -> Res<()> {
    let now = tx.now().await?;
    for (namespace, key) in items {
        tx.touch_item(owner, namespace, key, now).await?;
    }
    Ok(())
}
