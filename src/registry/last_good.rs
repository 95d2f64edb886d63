//! Which version each bundle directory last served well, kept across
//! restarts in `<state_dir>/last-good-bundles.json`: a directory whose
//! bundle is broken when the daemon starts (or that no running snapshot
//! served yet) serves that version again from its store copy, degraded,
//! instead of vanishing — as a broken edit does on a reload.
//!
//! The record is a small JSON map, written whole (a temporary file renamed
//! over it) after each build in which what serves changed; a record that
//! cannot be read or written is logged and treated as empty, never fatal:
//! at worst a broken bundle is invalid at start, as it was before.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::BundleIdentity;
use super::record::Record;

/// A directory's last good version: the bundle name it served and the
/// identity of its store copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Served {
    pub name: String,
    pub identity: String,
}

/// The last good version of each bundle directory, by its path.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastGood {
    #[serde(default)]
    pub dirs: BTreeMap<PathBuf, Served>,
}

impl Record for LastGood {
    const FILE: &'static str = "last-good-bundles.json";
    const WHAT: &'static str = "the bundles' last good versions";
    const OTHERWISE: &'static str = "a bundle broken at start will be invalid until it is fixed";
}

impl LastGood {
    /// What `dir` last served well.
    pub fn of(&self, dir: &Path) -> Option<(&str, BundleIdentity)> {
        let served = self.dirs.get(dir)?;
        Some((&served.name, BundleIdentity::recorded(&served.identity)))
    }

    /// This record after a build: `serving` (each healthy directory, its
    /// name and identity) replaces what those directories served; the
    /// records of `present` directories that are broken now are kept (they
    /// serve, or may serve after the next restart, from them); the records
    /// of directories that are gone are dropped.
    pub fn after(
        &self,
        serving: &[(PathBuf, String, BundleIdentity)],
        present: &[PathBuf],
    ) -> Self {
        let mut dirs: BTreeMap<PathBuf, Served> = self
            .dirs
            .iter()
            .filter(|(dir, _)| present.contains(dir))
            .map(|(dir, served)| (dir.clone(), served.clone()))
            .collect();
        for (dir, name, identity) in serving {
            dirs.insert(
                dir.clone(),
                Served {
                    name: name.clone(),
                    identity: identity.as_str().to_string(),
                },
            );
        }
        Self { dirs }
    }

    /// Writes the record under `state_dir` (logged when it cannot be).
    /// Blocking.
    pub fn write(&self, state_dir: &Path) {
        if let Err(e) = self.write_under(state_dir) {
            let file = Self::file(state_dir);
            tracing::warn!(file = %file.display(), error = %e, "cannot record the bundles' last good versions; a bundle broken at the next start will be invalid until it is fixed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(text: &str) -> BundleIdentity {
        BundleIdentity::recorded(text)
    }

    #[test]
    fn a_record_keeps_broken_directories_and_forgets_gone_ones() {
        let state = tempfile::tempdir().unwrap();
        assert_eq!(LastGood::read(state.path()), LastGood::default());
        let (a, b) = (PathBuf::from("/b/a"), PathBuf::from("/b/b"));
        let first = LastGood::default().after(
            &[
                (a.clone(), "a".into(), identity("aa11")),
                (b.clone(), "b".into(), identity("bb22")),
            ],
            &[a.clone(), b.clone()],
        );
        first.write(state.path());
        let read = LastGood::read(state.path());
        assert_eq!(read, first);
        assert_eq!(read.of(&a), Some(("a", identity("aa11"))));
        // `a` is broken now (still there, not serving): its record stays;
        // `b` is gone.
        let second = read.after(&[], std::slice::from_ref(&a));
        assert_eq!(second.of(&a), Some(("a", identity("aa11"))));
        assert_eq!(second.of(&b), None);
    }

    #[test]
    fn an_unreadable_record_is_empty() {
        let state = tempfile::tempdir().unwrap();
        std::fs::write(state.path().join("last-good-bundles.json"), "{not json").unwrap();
        assert_eq!(LastGood::read(state.path()), LastGood::default());
    }
}
