//! A canary's share of the new jobs: a bundle whose release gate made its
//! candidate a canary (`release.canary`, see `crate::release`) has each new
//! job not pinned to a version pinned to the candidate with the canary's
//! `share` as its chance; the rest run on the version serving, as usual.
//! A job the submitter pinned (an eval's case, a rerun, a move) keeps its
//! pin, and only the bundle's own runs are shared, not a tool run, a verify
//! or an eval.

use crate::queue::{JobKind, NewJob};
use crate::registry::{ReleaseVerdict, Snapshot};

/// Pins `job` to its bundle's canary, by the canary's share (the chance
/// is drawn only when there is one).
pub fn route_canary(snapshot: &Snapshot, job: &mut NewJob) {
    let shared = matches!(job.kind, JobKind::Bundle | JobKind::Stage { .. });
    if !shared || job.bundle_digest.is_some() || job.bundle_version.is_some() {
        return;
    }
    let Some(held) = snapshot
        .bundles
        .get(&job.bundle)
        .and_then(|entry| entry.candidate.as_ref())
    else {
        return;
    };
    let canary = held
        .decision
        .as_ref()
        .filter(|d| d.verdict == ReleaseVerdict::Canary)
        .and_then(|_| held.loaded.bundle.raw.release.as_ref()?.canary.as_ref());
    if canary.is_some_and(|canary| rand::random::<f64>() < canary.share) {
        job.bundle_version = Some(held.loaded.version().to_string());
        job.bundle_digest = Some(held.loaded.identity.to_string());
    }
}
