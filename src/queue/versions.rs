//! Moving a job that is not running to another content of its bundle (an
//! operator's `migrate-jobs`, a bundle's `on_new_version: move`): one
//! guarded write, so a job that started, ended or was moved by someone else
//! meanwhile is left alone. Whether the move is sound (its journal replays
//! on the new content) is decided before, by whoever asks; the queue only
//! records it, at a turn boundary — the job holds no worker.

use super::transaction::Tx;
use super::tx::{Change, Pin, Res};
use super::{Job, JobId};

/// Re-pins job `id` from content `from` to `to` when it is queued or
/// parked and still pinned to `from`: the job as it is now, or `None` when
/// it was not moved.
pub(crate) async fn move_version(
    tx: &mut impl Tx,
    id: &JobId,
    from: &str,
    to: &Pin,
) -> Res<Option<Job>> {
    let now = tx.now().await?;
    if !tx.repin(id.as_str(), from, to, now).await? {
        return Ok(None);
    }
    tx.changed(Change::Updated, id);
    tx.job(id.as_str(), false).await
}
