//! The decisions other daemons on the store recorded, mirrored into this
//! daemon's record: an operator's promote or reject, or the gate's verdict,
//! made on any daemon serves the same version on every one. The store
//! numbers decisions in commit order (`queue::releases`), so the mirror
//! reads on from the highest number it has seen, each look of the loop.

use super::Recorder;
use crate::events::daemon::ReloadTrigger;
use crate::queue::{Replaces, StoredRelease};
use crate::registry::{BundleIdentity, Decision};

/// Decisions read from the store in one go.
const PAGE: usize = 500;

/// How far this daemon has read the store's decisions.
#[derive(Debug, Default)]
pub(super) struct Mirror {
    seen: u64,
}

impl Mirror {
    /// Gives the store the decisions this daemon's record holds and the
    /// store lacks (recorded before the store kept them), without
    /// replacing any it has.
    pub(super) async fn seed(&self, recorder: &Recorder) {
        let recorded = recorder.registry.recorded_releases().await;
        for (identity, decision) in recorded.decisions {
            let Ok(json) = serde_json::to_string(&decision) else {
                continue;
            };
            let release = StoredRelease {
                identity,
                verdict: decision.verdict.as_str().to_string(),
                decision: json,
                seq: 0,
            };
            if let Err(e) = recorder
                .queue
                .record_release(release, Replaces::Nothing)
                .await
            {
                tracing::warn!(error = %e, bundle = %decision.bundle, version = %decision.version, "release gate: this daemon's decision cannot be shared through the store now; the next start tries again");
                return;
            }
        }
    }

    /// Mirrors the decisions recorded since the last look; each that
    /// changed this daemon's record is told and reloaded by.
    pub(super) async fn catch_up(&mut self, recorder: &Recorder) {
        loop {
            let page = match recorder.queue.releases_after(self.seen, PAGE).await {
                Ok(page) => page,
                Err(e) => {
                    tracing::warn!(error = %e, "release gate: the store's decisions cannot be read now; trying again at the next look");
                    return;
                }
            };
            let full = page.len() == PAGE;
            let Some(last) = page.last().map(|r| r.seq) else {
                return;
            };
            let decisions = page
                .into_iter()
                .filter_map(|stored| match serde_json::from_str::<Decision>(&stored.decision) {
                    Ok(decision) => Some((BundleIdentity::recorded(&stored.identity), decision)),
                    Err(e) => {
                        tracing::warn!(identity = %stored.identity, error = %e, "release gate: a decision in the store cannot be read (written by a newer daemon?); it is passed over");
                        None
                    }
                })
                .collect();
            match recorder.registry.mirror_releases(decisions).await {
                Ok(changed) => {
                    self.seen = last;
                    let snapshot = recorder.registry.snapshot();
                    for decision in &changed {
                        let serving = snapshot.bundle(&decision.bundle).map(|b| b.version());
                        recorder.tell(decision, serving.unwrap_or_default());
                    }
                    if !changed.is_empty() {
                        recorder.reloads.reload(ReloadTrigger::Release).await;
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "release gate: the store's decisions cannot be written to this daemon's record (check that paths.state_dir is writable); trying again at the next look");
                    return;
                }
            }
            if !full {
                return;
            }
        }
    }
}
