//! Which bundle contents the jobs that have not ended are pinned to: each
//! job's own pin and its nested runs' (journaled as
//! [`NESTED_PIN_STEP`]), forks and moved jobs included. The bundle store
//! keeps their copies ([`crate::registry::PinHolders`]), so a parked job
//! pinned to a version nobody has loaded since still resumes on it.

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;

use crate::journal::JournalEntry;
use crate::queue::{JobFilter, JobQueue};
use crate::registry::{BundleIdentity, NESTED_PIN_STEP, NestedPin, PinHolders, PinsUnknown};

/// Jobs whose journals are read to tell their nested pins, at most: past
/// it nothing is pruned (keeping a copy too long costs disk; pruning one a
/// job needs strands the job).
pub const MAX_JOBS: usize = 10_000;

/// The pins of the jobs in a queue.
pub struct QueuePins(pub Arc<dyn JobQueue>);

#[async_trait]
impl PinHolders for QueuePins {
    async fn pinned(&self) -> Result<HashSet<BundleIdentity>, PinsUnknown> {
        held(self.0.as_ref()).await
    }
}

/// Every identity a job that has not ended is pinned to. One listing of
/// the unfinished jobs (not one per state): a parked job approved while the
/// pages are read moves to `queued`, and a listing per state that had read
/// `queued` already and `parked` not yet would miss it, and prune the copy
/// it resumes on.
pub async fn held(queue: &dyn JobQueue) -> Result<HashSet<BundleIdentity>, PinsUnknown> {
    let mut pinned = HashSet::new();
    let mut jobs = 0;
    let mut cursor = None;
    loop {
        let page = queue
            .list(JobFilter {
                unfinished: true,
                limit: 500,
                cursor,
                ..Default::default()
            })
            .await
            .map_err(|e| PinsUnknown::List(e.to_string()))?;
        for job in page.jobs {
            jobs += 1;
            if jobs > MAX_JOBS {
                return Err(PinsUnknown::TooMany { max: MAX_JOBS });
            }
            pinned.extend(job.bundle_digest.as_deref().map(BundleIdentity::recorded));
            let journal = queue
                .journal(&job.id)
                .await
                .map_err(|e| PinsUnknown::Journal {
                    job: job.id.to_string(),
                    detail: e.to_string(),
                })?;
            pinned.extend(nested(&journal));
        }
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    Ok(pinned)
}

/// The identities a journal's nested runs are pinned to.
fn nested(journal: &[JournalEntry]) -> impl Iterator<Item = BundleIdentity> + '_ {
    journal
        .iter()
        .filter(|e| e.step == NESTED_PIN_STEP)
        .filter_map(|e| serde_json::from_str::<NestedPin>(&e.body).ok())
        .map(|pin| pin.identity)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_journal_names_its_nested_runs_pins_in_either_spelling() {
        let journal = vec![
            JournalEntry::new("", 1, "reply", "{}".into()),
            JournalEntry::new(
                "1/0/",
                0,
                NESTED_PIN_STEP,
                r#"{"bundle":"pay","version":"1","identity":"aa11"}"#.into(),
            ),
            // Written before identities had their own name.
            JournalEntry::new(
                "2/0/",
                0,
                NESTED_PIN_STEP,
                r#"{"bundle":"pay","version":"0","digest":"bb22"}"#.into(),
            ),
        ];
        let pins: HashSet<_> = nested(&journal).collect();
        assert_eq!(
            pins,
            HashSet::from([
                BundleIdentity::recorded("aa11"),
                BundleIdentity::recorded("bb22")
            ])
        );
    }
}
