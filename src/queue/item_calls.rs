//! [`ItemStore`] over any backend, as `driver.rs` is [`JobQueue`]: each
//! call builds its operation (`op/item.rs`) for the driver.

use async_trait::async_trait;

use super::backend::Driver;
use super::op;
use super::*;

#[async_trait]
impl<D: Driver> ItemStore for Queue<D> {
    async fn put_item(&self, owner: &str, item: NewItem) -> Result<(), QueueError> {
        let owner = owner.to_string();
        self.driver.write(op::PutItem { owner, item }).await
    }

    async fn item(
        &self,
        owner: &str,
        namespace: &str,
        key: &str,
        refresh: bool,
    ) -> Result<Option<StoredItem>, QueueError> {
        let (owner, namespace, key) = (owner.to_string(), namespace.to_string(), key.to_string());
        let read = op::ItemOf {
            owner: owner.clone(),
            namespace: namespace.clone(),
            key: key.clone(),
        };
        let item = self.driver.read(read).await?;
        // Only an item with a time to live is written to on a read.
        if !refresh || item.as_ref().is_none_or(|item| item.ttl_ms.is_none()) {
            return Ok(item);
        }
        let write = op::ReadItemRefreshed {
            owner,
            namespace,
            key,
        };
        self.driver.write(write).await
    }

    async fn delete_item(
        &self,
        owner: &str,
        namespace: &str,
        key: &str,
    ) -> Result<bool, QueueError> {
        let (owner, namespace, key) = (owner.to_string(), namespace.to_string(), key.to_string());
        self.driver
            .write(op::DeleteItem {
                owner,
                namespace,
                key,
            })
            .await
    }

    async fn items_under(
        &self,
        owner: &str,
        namespace: &str,
        limit: usize,
    ) -> Result<Vec<StoredItem>, QueueError> {
        let (owner, namespace) = (owner.to_string(), namespace.to_string());
        self.driver
            .read(op::ItemsUnder {
                owner,
                namespace,
                limit,
            })
            .await
    }

    async fn touch_items(
        &self,
        owner: &str,
        items: Vec<(String, String)>,
    ) -> Result<(), QueueError> {
        let owner = owner.to_string();
        self.driver.write(op::TouchItems { owner, items }).await
    }

    async fn item_namespaces(&self, owner: &str, limit: usize) -> Result<Vec<String>, QueueError> {
        let owner = owner.to_string();
        self.driver.read(op::ItemNamespaces { owner, limit }).await
    }
}
