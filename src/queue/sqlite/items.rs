//! The SQLite statements of items (see `queue::items`).

use rusqlite::params;

use super::dialect::SqliteTx;
use crate::queue::items::{
    ITEM_COLUMNS, ItemStatements, NewItem, StoredItem, item_from_row, under,
};
use crate::queue::tx::{Columns, Res};

/// An item is live while it has no expiry or its expiry is still after
/// the time in parameter `now`.
fn live(now: &str) -> String {
    format!("(expires_at IS NULL OR expires_at > {now})")
}

// Mirrors `postgres/items.rs` statement for statement, kept apart as every
// dialect pair is: the SQL and the client's calling convention differ.
impl ItemStatements for SqliteTx<'_> {
    async fn upsert_item(
        &mut self,
        owner: &str,
        item: &NewItem,
        value: &str,
        index: &str,
        now: i64,
    ) -> Res<()> {
        let expires_at = item.ttl_ms.map(|ttl| now.saturating_add(ttl));
        self.exec(
            "INSERT INTO store_items
                 (owner, namespace, key, value, index_fields, created_at, updated_at, ttl_ms, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7, ?8)
             ON CONFLICT (owner, namespace, key) DO UPDATE SET
                 value = excluded.value, index_fields = excluded.index_fields,
                 updated_at = excluded.updated_at, ttl_ms = excluded.ttl_ms,
                 expires_at = excluded.expires_at",
            params![owner, item.namespace, item.key, value, index, now, item.ttl_ms, expires_at],
        )?;
        Ok(())
    }

    async fn drop_expired_items(&mut self, owner: &str, now: i64) -> Res<u64> {
        let dropped = self.exec(
            "DELETE FROM store_items WHERE owner = ?1 AND expires_at <= ?2",
            params![owner, now],
        )?;
        Ok(u64::try_from(dropped).unwrap_or(u64::MAX))
    }

    async fn item(
        &mut self,
        owner: &str,
        namespace: &str,
        key: &str,
        now: i64,
    ) -> Res<Option<StoredItem>> {
        self.first(
            &format!(
                "SELECT {ITEM_COLUMNS} FROM store_items
                 WHERE owner = ?1 AND namespace = ?2 AND key = ?3 AND {}",
                live("?4")
            ),
            params![owner, namespace, key, now],
            |row| item_from_row(row),
        )
    }

    async fn delete_item(&mut self, owner: &str, namespace: &str, key: &str) -> Res<bool> {
        Ok(self.exec(
            "DELETE FROM store_items WHERE owner = ?1 AND namespace = ?2 AND key = ?3",
            params![owner, namespace, key],
        )? > 0)
    }

    async fn touch_item(&mut self, owner: &str, namespace: &str, key: &str, now: i64) -> Res<()> {
        self.exec(
            "UPDATE store_items SET expires_at = ?4 + ttl_ms
             WHERE owner = ?1 AND namespace = ?2 AND key = ?3 AND ttl_ms IS NOT NULL",
            params![owner, namespace, key, now],
        )?;
        Ok(())
    }

    async fn items_under(
        &mut self,
        owner: &str,
        namespace: &str,
        now: i64,
        limit: usize,
    ) -> Res<Vec<StoredItem>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let (prefix, chars) = under(namespace);
        self.rows(
            &format!(
                "SELECT {ITEM_COLUMNS} FROM store_items
                 WHERE owner = ?1 AND (?2 = '' OR namespace = ?2 OR substr(namespace, 1, ?5) = ?4)
                   AND {}
                 ORDER BY updated_at DESC, namespace, key LIMIT ?6",
                live("?3")
            ),
            params![owner, namespace, now, prefix, chars, limit],
            |row| item_from_row(row),
        )
    }

    async fn item_namespaces(&mut self, owner: &str, now: i64, limit: usize) -> Res<Vec<String>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.rows(
            &format!(
                "SELECT DISTINCT namespace FROM store_items WHERE owner = ?1 AND {}
                 ORDER BY namespace LIMIT ?3",
                live("?2")
            ),
            params![owner, now, limit],
            |row| row.req_text(0),
        )
    }
}
