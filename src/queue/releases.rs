//! The release gate's decisions, kept in the queue's database so that
//! every daemon sharing it serves the same version of a gated bundle: an
//! operator's `promote` on one daemon, or the gate's verdict on another,
//! is seen by all. A decision is its verdict (a word the queue only
//! compares) and JSON the queue does not read (the registry's `Decision`),
//! keyed by the content's identity.
//!
//! Each write takes the next number of one counter row in its own
//! transaction, so decisions commit in the order of their numbers (a
//! second writer waits on the row until the first commits): a daemon that
//! read up to number `n` has seen every decision numbered `n` or less, and
//! reads on from there ([`ReleaseStatements::releases_after`]).

use super::statements::JobStatements;
use super::tx::{Columns, Res};

/// The most decisions kept: a write removes those this many numbers older
/// (a content decided that long ago is no longer dropped in again; the
/// registry keeps as many).
pub const RELEASES_KEPT: i64 = 2000;

/// One decision as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRelease {
    /// The content's identity (`BundleIdentity`).
    pub identity: String,
    /// Its verdict's word (`promoted`, `rejected`, `canary`).
    pub verdict: String,
    /// The decision as JSON text.
    pub decision: String,
    /// Its number: later decisions have higher ones.
    pub seq: u64,
}

/// Which decision already recorded about a content a new one replaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replaces {
    /// None: the first decision stands (the gate's eval).
    Nothing,
    /// Any (an operator's word).
    Any,
    /// Only one with this verdict (a canary's outcome replaces the
    /// `canary` decision, never an operator's word made meanwhile).
    Verdict(String),
}

/// The columns [`release_from_row`] reads.
pub(crate) const RELEASE_COLUMNS: &str = "identity, verdict, decision, seq";

pub(crate) fn release_from_row(row: &impl Columns) -> Res<StoredRelease> {
    Ok(StoredRelease {
        identity: row.req_text(0)?,
        verdict: row.req_text(1)?,
        decision: row.req_text(2)?,
        seq: row.req_int(3)?.max(0) as u64,
    })
}

/// The release statements of a dialect (one statement each, no rule).
pub(crate) trait ReleaseStatements {
    /// The next decision number, locking the counter until the
    /// transaction ends.
    fn next_release_seq(&mut self) -> impl Future<Output = Res<i64>> + Send;
    /// Inserts the decision about its content, or replaces the one there
    /// when `any` is true or its verdict is `verdict`; whether it was
    /// written.
    fn put_release(
        &mut self,
        release: &StoredRelease,
        any: bool,
        verdict: Option<&str>,
        now: i64,
    ) -> impl Future<Output = Res<bool>> + Send;
    /// Deletes the decisions numbered `seq` or less.
    fn forget_releases_through(&mut self, seq: i64) -> impl Future<Output = Res<()>> + Send;
    /// Up to `limit` decisions numbered above `seq`, in number order.
    fn releases_after(
        &mut self,
        seq: i64,
        limit: usize,
    ) -> impl Future<Output = Res<Vec<StoredRelease>>> + Send;
}

/// Records a decision (its `seq` is taken here) unless one is recorded
/// already that it does not replace: its number when it was written.
pub(crate) async fn record(
    tx: &mut (impl JobStatements + ReleaseStatements),
    mut release: StoredRelease,
    replaces: &Replaces,
) -> Res<Option<u64>> {
    let now = tx.now().await?;
    let seq = tx.next_release_seq().await?;
    release.seq = seq.max(0) as u64;
    let (any, verdict) = match replaces {
        Replaces::Nothing => (false, None),
        Replaces::Any => (true, None),
        Replaces::Verdict(verdict) => (false, Some(verdict.as_str())),
    };
    if !tx.put_release(&release, any, verdict, now).await? {
        return Ok(None);
    }
    tx.forget_releases_through(seq - RELEASES_KEPT).await?;
    Ok(Some(release.seq))
}
