//! The item operations (their rule in `queue/items.rs`): write one, read
//! one, delete one, read those under a namespace, start their time to live
//! again, list a key's namespaces.

use super::*;
use crate::queue::items::{self, NewItem, StoredItem};

operation! {
    /// Writes a key's item (new work: refused by a full backlog).
    pub(crate) struct PutItem {
        pub owner: String,
        pub item: NewItem,
    }
    write(REFUSED_WHEN_BUSY) "put_item" -> () = |op, tx| items::put(tx, &op.owner, &op.item).await;
}

operation! {
    /// A key's item, unless missing or expired.
    pub(crate) struct ItemOf {
        pub owner: String,
        pub namespace: String,
        pub key: String,
    }
    read "item" -> Option<StoredItem> = |op, tx| {
        items::get(tx, &op.owner, &op.namespace, &op.key, false).await
    };
}

operation! {
    /// A key's item, its time to live started again.
    pub(crate) struct ReadItemRefreshed {
        pub owner: String,
        pub namespace: String,
        pub key: String,
    }
    write "read_item_refreshed" -> Option<StoredItem> = |op, tx| {
        items::get(tx, &op.owner, &op.namespace, &op.key, true).await
    };
}

operation! {
    /// Deletes a key's item: whether there was one.
    pub(crate) struct DeleteItem {
        pub owner: String,
        pub namespace: String,
        pub key: String,
    }
    write "delete_item" -> bool = |op, tx| {
        tx.delete_item(&op.owner, &op.namespace, &op.key).await
    };
}

operation! {
    /// A key's live items in a namespace or under it, most recently
    /// updated first.
    pub(crate) struct ItemsUnder {
        pub owner: String,
        pub namespace: String,
        pub limit: usize,
    }
    read "items_under" -> Vec<StoredItem> = |op, tx| {
        let now = tx.now().await?;
        tx.items_under(&op.owner, &op.namespace, now, op.limit).await
    };
}

operation! {
    /// Starts again the time to live of a key's items (namespace, key).
    pub(crate) struct TouchItems {
        pub owner: String,
        pub items: Vec<(String, String)>,
    }
    write "touch_items" -> () = |op, tx| items::touch(tx, &op.owner, &op.items).await;
}

operation! {
    /// A key's namespaces holding a live item, in order.
    pub(crate) struct ItemNamespaces {
        pub owner: String,
        pub limit: usize,
    }
    read "item_namespaces" -> Vec<String> = |op, tx| {
        let now = tx.now().await?;
        tx.item_namespaces(&op.owner, now, op.limit).await
    };
}
