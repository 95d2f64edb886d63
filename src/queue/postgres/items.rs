//! The PostgreSQL statements of items (see `queue::items`).

use deadpool_postgres::GenericClient;

use super::transaction::PgTx;
use crate::queue::items::{
    ITEM_COLUMNS, ItemStatements, NewItem, StoredItem, item_from_row, under,
};
use crate::queue::tx::{Columns, Res};

/// An item is live while it has no expiry or its expiry is still after
/// the time in parameter `now`.
fn live(now: &str) -> String {
    format!("(expires_at IS NULL OR expires_at > {now})")
}

impl<C: GenericClient> ItemStatements for PgTx<'_, C> {
    async fn upsert_item(
        &mut self,
        owner: &str,
        item: &NewItem,
        value: &str,
        index: &str,
        now: i64,
    ) -> Res<()> {
        let expires_at = item.ttl_ms.map(|ttl| now.saturating_add(ttl));
        let sql = "INSERT INTO store_items
                       (owner, namespace, key, value, index_fields, created_at, updated_at, ttl_ms, expires_at)
                   VALUES ($1, $2, $3, $4, $5, $6, $6, $7, $8)
                   ON CONFLICT (owner, namespace, key) DO UPDATE SET
                       value = excluded.value, index_fields = excluded.index_fields,
                       updated_at = excluded.updated_at, ttl_ms = excluded.ttl_ms,
                       expires_at = excluded.expires_at";
        let p: [&(dyn tokio_postgres::types::ToSql + Sync); 8] = [
            &owner,
            &item.namespace,
            &item.key,
            &value,
            &index,
            &now,
            &item.ttl_ms,
            &expires_at,
        ];
        self.exec(sql, &p).await?;
        Ok(())
    }

    async fn drop_expired_items(&mut self, owner: &str, now: i64) -> Res<u64> {
        let sql = "DELETE FROM store_items WHERE owner = $1 AND expires_at <= $2";
        self.exec(sql, &[&owner, &now]).await
    }

    async fn item(
        &mut self,
        owner: &str,
        namespace: &str,
        key: &str,
        now: i64,
    ) -> Res<Option<StoredItem>> {
        let sql = format!(
            "SELECT {ITEM_COLUMNS} FROM store_items
             WHERE owner = $1 AND namespace = $2 AND key = $3 AND {}",
            live("$4")
        );
        self.first(&sql, &[&owner, &namespace, &key, &now])
            .await?
            .as_ref()
            .map(item_from_row)
            .transpose()
    }

    async fn delete_item(&mut self, owner: &str, namespace: &str, key: &str) -> Res<bool> {
        let sql = "DELETE FROM store_items WHERE owner = $1 AND namespace = $2 AND key = $3";
        Ok(self.exec(sql, &[&owner, &namespace, &key]).await? > 0)
    }

    async fn touch_item(&mut self, owner: &str, namespace: &str, key: &str, now: i64) -> Res<()> {
        let sql = "UPDATE store_items SET expires_at = $4 + ttl_ms
                   WHERE owner = $1 AND namespace = $2 AND key = $3 AND ttl_ms IS NOT NULL";
        self.exec(sql, &[&owner, &namespace, &key, &now]).await?;
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
        let (prefix, _) = under(namespace);
        let sql = format!(
            "SELECT {ITEM_COLUMNS} FROM store_items
             WHERE owner = $1 AND ($2 = '' OR namespace = $2 OR starts_with(namespace, $4))
               AND {}
             ORDER BY updated_at DESC, namespace COLLATE \"C\", key COLLATE \"C\" LIMIT $5",
            live("$3")
        );
        self.rows(&sql, &[&owner, &namespace, &now, &prefix, &limit])
            .await?
            .iter()
            .map(item_from_row)
            .collect()
    }

    async fn item_namespaces(&mut self, owner: &str, now: i64, limit: usize) -> Res<Vec<String>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let sql = format!(
            "SELECT DISTINCT namespace COLLATE \"C\" FROM store_items WHERE owner = $1 AND {}
             ORDER BY 1 LIMIT $3",
            live("$2")
        );
        self.rows(&sql, &[&owner, &now, &limit])
            .await?
            .iter()
            .map(|row| row.req_text(0))
            .collect()
    }
}
