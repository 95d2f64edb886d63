//! The release gate's decisions, kept across restarts in
//! `<state_dir>/releases.json`: for each content (by identity) of a bundle
//! whose `release:` gates it, whether it was promoted (it may serve),
//! rejected (it stays a candidate, and why) or is a canary (a share of new
//! jobs runs it while the gate watches). A content with no decision
//! yet is a candidate under evaluation. The gate's loop (`crate::release`)
//! and the operator's promote and reject write decisions; every build
//! reads them to settle who serves.
//!
//! Like the last good record, a `record.rs` file: one that cannot be read
//! is logged and treated as empty — at worst a candidate is evaluated again.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::BundleIdentity;
use super::record::Record;

/// The most decisions kept: the oldest go first (a content decided that
/// long ago is no longer dropped in again).
const MAX_DECISIONS: usize = 2000;

/// What was decided about one content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub bundle: String,
    pub version: String,
    pub verdict: ReleaseVerdict,
    /// Why, in one sentence (the eval's verdict, or the operator's reason).
    pub reason: String,
    /// Who decided: `gate` (its eval), or the operator's key.
    pub by: String,
    /// RFC 3339 UTC.
    pub at: String,
    /// The eval job that decided, when the gate did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_job: Option<String>,
}

/// A decision's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReleaseVerdict {
    /// It may serve.
    Promoted,
    /// It stays a candidate; the version before it serves.
    Rejected,
    /// Its evals passed and it takes `release.canary.share` of the new
    /// jobs beside the version serving, which the gate watches until it
    /// promotes it or rolls it back (then `Rejected`).
    Canary,
}

impl ReleaseVerdict {
    /// Its name in events, metrics and the API (`candidate.state`).
    pub fn as_str(self) -> &'static str {
        match self {
            ReleaseVerdict::Promoted => "promoted",
            ReleaseVerdict::Rejected => "rejected",
            ReleaseVerdict::Canary => "canary",
        }
    }
}

/// Every decision, by identity.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Releases {
    #[serde(default)]
    pub decisions: BTreeMap<String, Decision>,
}

impl Record for Releases {
    const FILE: &'static str = "releases.json";
    const WHAT: &'static str = "the release gate's decisions";
    const OTHERWISE: &'static str = "held candidates are evaluated again";
}

impl Releases {
    /// What was decided about `identity`.
    pub fn of(&self, identity: &BundleIdentity) -> Option<&Decision> {
        self.decisions.get(identity.as_str())
    }

    /// Records `decision` about `identity` (replacing an earlier one).
    pub fn decide(&mut self, identity: &BundleIdentity, decision: Decision) {
        self.decisions
            .insert(identity.as_str().to_string(), decision);
        while self.decisions.len() > MAX_DECISIONS {
            let oldest = self
                .decisions
                .iter()
                .min_by(|a, b| a.1.at.cmp(&b.1.at))
                .map(|(id, _)| id.clone());
            match oldest {
                Some(id) => self.decisions.remove(&id),
                None => break,
            };
        }
    }

    /// Writes the record under `state_dir`. Blocking.
    pub fn write(&self, state_dir: &Path) -> std::io::Result<()> {
        self.write_under(state_dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(version: &str, verdict: ReleaseVerdict, at: &str) -> Decision {
        Decision {
            bundle: "calc".into(),
            version: version.into(),
            verdict,
            reason: "r".into(),
            by: "gate".into(),
            at: at.into(),
            eval_job: None,
        }
    }

    #[test]
    fn decisions_survive_a_restart_and_an_unreadable_record_is_empty() {
        let state = tempfile::tempdir().unwrap();
        let mut releases = Releases::read(state.path());
        assert_eq!(releases, Releases::default());
        let (two, three) = (
            BundleIdentity::recorded("22"),
            BundleIdentity::recorded("33"),
        );
        releases.decide(
            &two,
            decision("2", ReleaseVerdict::Rejected, "2026-01-01T00:00:00Z"),
        );
        releases.decide(
            &three,
            decision("3", ReleaseVerdict::Promoted, "2026-01-02T00:00:00Z"),
        );
        releases.write(state.path()).unwrap();
        let read = Releases::read(state.path());
        assert_eq!(
            read.of(&two).map(|d| d.verdict),
            Some(ReleaseVerdict::Rejected)
        );
        assert_eq!(
            read.of(&three).map(|d| d.verdict),
            Some(ReleaseVerdict::Promoted)
        );
        std::fs::write(state.path().join("releases.json"), "{not json").unwrap();
        assert_eq!(Releases::read(state.path()), Releases::default());
    }
}
