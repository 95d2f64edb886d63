//! Who serves each bundle name when several directories claim it. The
//! directory already serving a name keeps it (even while its last edit is
//! broken: then degraded); otherwise a directory named like its bundle wins,
//! then the first in name order. Every other claimant is rejected with the
//! conflict named — so `cp -r foo backup-foo` never takes `foo` away.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Applied, BundleEntry, BundleStatus, LoadedBundle, Snapshot};

/// A bundle directory's own name, the name it claims when its bundle is
/// broken.
pub(super) fn dir_name(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| dir.display().to_string())
}

/// The bundles served by name, and the rejected directories.
pub(super) type Entries = (BTreeMap<String, BundleEntry>, Vec<BundleEntry>);

/// A directory that failed to load, its errors, and the last good version
/// it may serve from the store when nothing serves it now (at start).
pub(super) struct Broken {
    pub dir: PathBuf,
    pub messages: Vec<String>,
    pub last_good: Option<Arc<LoadedBundle>>,
}

/// Settles the names of this reload's `healthy` and `broken` directories.
pub(super) fn settle(
    previous: &Snapshot,
    healthy: Vec<(PathBuf, Arc<LoadedBundle>)>,
    broken: Vec<Broken>,
    applied: &mut Applied,
) -> Entries {
    let mut names = Names {
        serving: previous
            .bundles
            .values()
            .filter(|e| e.current.is_some())
            .map(|e| (e.name.clone(), e.clone()))
            .collect(),
        broken_dirs: broken.iter().map(|b| b.dir.clone()).collect(),
        bundles: BTreeMap::new(),
        rejected: Vec::new(),
    };
    let mut claims: BTreeMap<String, Vec<(PathBuf, Arc<LoadedBundle>)>> = BTreeMap::new();
    for (dir, loaded) in healthy {
        claims
            .entry(loaded.name().to_string())
            .or_default()
            .push((dir, loaded));
    }
    for (name, claimants) in claims {
        names.claim(name, claimants, applied);
    }
    for broken in broken {
        names.broken(broken, applied);
    }
    (names.bundles, names.rejected)
}

struct Names {
    /// What served each name before this reload.
    serving: HashMap<String, BundleEntry>,
    broken_dirs: HashSet<PathBuf>,
    bundles: BTreeMap<String, BundleEntry>,
    rejected: Vec<BundleEntry>,
}

impl Names {
    /// Healthy directories claiming `name`: one serves it, the rest are rejected.
    fn claim(
        &mut self,
        name: String,
        mut claimants: Vec<(PathBuf, Arc<LoadedBundle>)>,
        applied: &mut Applied,
    ) {
        let holder = self.serving.get(&name).map(|h| h.dir.clone());
        if let Some(held) = holder
            .as_ref()
            .filter(|dir| self.broken_dirs.contains(*dir))
        {
            // The serving directory's edit is broken: it keeps the name,
            // degraded (settled with the broken directories).
            for (dir, _) in claimants {
                self.reject(&name, dir, held, applied);
            }
            return;
        }
        let position = holder
            .and_then(|held| claimants.iter().position(|(d, _)| *d == held))
            .or_else(|| claimants.iter().position(|(d, _)| dir_name(d) == name))
            .unwrap_or(0);
        let (dir, loaded) = claimants.remove(position);
        for (other, _) in claimants {
            self.reject(&name, other, &dir, applied);
        }
        self.bundles.insert(
            name.clone(),
            BundleEntry {
                name,
                dir,
                current: Some(loaded),
                status: BundleStatus::Ok,
                errors: vec![],
                candidate: None,
            },
        );
    }

    /// A directory that failed to load: a serving one keeps its last good
    /// version under its name (degraded) if the name is still free, and so
    /// does one that serves its last good version from the store; any
    /// other is invalid, listed under its directory's name.
    fn broken(&mut self, broken: Broken, applied: &mut Applied) {
        let Broken {
            dir,
            messages,
            last_good,
        } = broken;
        let held = self.serving.values().find(|e| e.dir == dir).cloned();
        let (name, current, status) = match (held, last_good) {
            (Some(e), _) => (e.name, e.current, BundleStatus::Degraded),
            (None, Some(loaded)) => (
                loaded.name().to_string(),
                Some(loaded),
                BundleStatus::Degraded,
            ),
            (None, None) => (dir_name(&dir), None, BundleStatus::Invalid),
        };
        applied.failed.push(name.clone());
        let entry = BundleEntry {
            name: name.clone(),
            dir,
            current,
            status,
            errors: messages,
            candidate: None,
        };
        if self.bundles.contains_key(&name) {
            self.rejected.push(BundleEntry {
                current: None,
                status: BundleStatus::Invalid,
                ..entry
            });
            return;
        }
        if status == BundleStatus::Degraded {
            applied.degraded.push((name.clone(), entry.errors.clone()));
        }
        self.bundles.insert(name, entry);
    }

    fn reject(&mut self, name: &str, dir: PathBuf, owner: &Path, applied: &mut Applied) {
        let message = format!(
            "{}: bundle name {name:?} is already served by {}; rename one of them (the directory serving a name keeps it)",
            dir.display(),
            owner.display()
        );
        tracing::warn!(bundle_dir = %dir.display(), error = %message, "bundle rejected");
        applied.failed.push(name.to_string());
        applied.errors.push(message.clone());
        self.rejected.push(BundleEntry {
            name: name.to_string(),
            dir,
            current: None,
            status: BundleStatus::Invalid,
            errors: vec![message],
            candidate: None,
        });
    }
}
