//! The release gate's decision operations (their rule in
//! `queue/releases.rs`): record one, read those after a number.

use super::*;

/// Records a decision about a content unless one is there that it does
/// not replace: its number when written.
pub(crate) struct RecordRelease {
    /// Its `seq` is the store's to take.
    pub release: StoredRelease,
    pub replaces: Replaces,
}

impl Operation for RecordRelease {
    type Output = Option<u64>;
    const NAME: &'static str = "record_release";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<Option<u64>> {
        releases::record(tx, self.release.clone(), &self.replaces).await
    }
}

impl Write for RecordRelease {}

/// Up to `limit` decisions numbered above `seq`, oldest first.
pub(crate) struct ReleasesAfter {
    pub seq: u64,
    pub limit: usize,
}

impl Operation for ReleasesAfter {
    type Output = Vec<StoredRelease>;
    const NAME: &'static str = "releases_after";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<Vec<StoredRelease>> {
        let seq = i64::try_from(self.seq).unwrap_or(i64::MAX);
        tx.releases_after(seq, self.limit).await
    }
}

impl Read for ReleasesAfter {}
