//! The release gate's decision operations (their rule in
//! `queue/releases.rs`): record one, read those after a number.

use super::*;

operation! {
    /// Records a decision about a content unless one is there that it does
    /// not replace: its number when written.
    pub(crate) struct RecordRelease {
        /// Its `seq` is the store's to take.
        pub release: StoredRelease,
        pub replaces: Replaces,
    }
    write "record_release" -> Option<u64> = |op, tx|
        releases::record(tx, op.release.clone(), &op.replaces).await;
}

operation! {
    /// Up to `limit` decisions numbered above `seq`, oldest first.
    pub(crate) struct ReleasesAfter {
        pub seq: u64,
        pub limit: usize,
    }
    read "releases_after" -> Vec<StoredRelease> = |op, tx| {
        let seq = i64::try_from(op.seq).unwrap_or(i64::MAX);
        tx.releases_after(seq, op.limit).await
    };
}
