//! The thread operations (their rule in `queue/threads.rs`): make one,
//! read one, merge its metadata, list a key's, copy one, delete one with
//! its jobs.

use serde_json::{Map, Value};

use super::*;
use crate::queue::threads::{self, Created, StoredThread, ThreadCopy, ThreadDeletion};

operation! {
    /// Makes a key's thread with its metadata, or finds the one it has.
    pub(crate) struct CreateThread {
        pub owner: String,
        pub id: String,
        pub metadata: Map<String, Value>,
    }
    write(REFUSED_WHEN_BUSY) "create_thread" -> Created = |op, tx| {
        let thread = Conversation::of(Some(&op.owner), &op.id);
        threads::create(tx, &thread, &op.metadata).await
    };
}

operation! {
    /// A key's thread as it stands.
    pub(crate) struct ThreadOf {
        pub owner: String,
        pub id: String,
    }
    read "thread" -> Option<StoredThread> = |op, tx| {
        tx.thread(&Conversation::of(Some(&op.owner), &op.id), false).await
    };
}

operation! {
    /// Merges metadata into a key's thread: the thread after, if it has it.
    pub(crate) struct PatchThread {
        pub owner: String,
        pub id: String,
        pub metadata: Map<String, Value>,
    }
    write "patch_thread" -> Option<StoredThread> = |op, tx| {
        let thread = Conversation::of(Some(&op.owner), &op.id);
        threads::patch(tx, &thread, &op.metadata).await
    };
}

operation! {
    /// A key's newest `limit` threads, newest first.
    pub(crate) struct ThreadsOf {
        pub owner: String,
        pub limit: usize,
    }
    read "threads" -> Vec<StoredThread> = |op, tx| tx.threads(&op.owner, op.limit).await;
}

operation! {
    /// Deletes a key's thread with its jobs unless one has not ended.
    pub(crate) struct DeleteThread {
        pub owner: String,
        pub id: String,
    }
    write "delete_thread" -> ThreadDeletion = |op, tx| {
        threads::delete(tx, &Conversation::of(Some(&op.owner), &op.id)).await
    };
}

operation! {
    /// Copies a key's thread as its thread `to` (see `threads::copy`).
    pub(crate) struct CopyThread {
        pub owner: String,
        pub from: String,
        pub to: String,
        pub max_runs: usize,
    }
    write "copy_thread" -> ThreadCopy = |op, tx| {
        let from = Conversation::of(Some(&op.owner), &op.from);
        let to = Conversation::of(Some(&op.owner), &op.to);
        threads::copy(tx, &from, &to, op.max_runs).await
    };
}
