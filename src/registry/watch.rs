//! Watches the bundles, models and plugins directories and hands over what
//! changed (debounced: an editor's save or a `mv` of a whole bundle is one
//! burst). Watching the directories recursively (not the files) keeps
//! working after editors replace files by renaming. The changed paths decide
//! what the reload looks at; when the watcher cannot say (its queue
//! overflowed, it failed) it says [`Changed::Everything`], never nothing.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::RecursiveMode;
use notify_debouncer_full::{DebounceEventResult, Debouncer, RecommendedCache, new_debouncer};

/// Keeps the watch alive; dropping it stops watching.
pub struct DirWatcher {
    _debouncer: Debouncer<notify::RecommendedWatcher, RecommendedCache>,
}

#[derive(Debug, thiserror::Error)]
#[error(
    "cannot watch {dir}: {source} (does the directory exist? is inotify exhausted? see fs.inotify.max_user_watches)"
)]
pub struct WatchError {
    pub dir: PathBuf,
    pub source: notify::Error,
}

/// What changed on disk since the last reload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Changed {
    /// Unknown: every input is checked (SIGHUP, the API, the first load, a
    /// watcher that lost events).
    Everything,
    /// Only these paths (an empty set: nothing on disk).
    Paths(BTreeSet<PathBuf>),
}

impl Changed {
    /// Nothing on disk changed (an MCP server's new tools).
    pub fn nothing() -> Self {
        Changed::Paths(BTreeSet::new())
    }

    /// Both changes: their paths together, or everything.
    pub fn merge(&mut self, other: Changed) {
        match (self, other) {
            (Changed::Paths(mine), Changed::Paths(theirs)) => mine.extend(theirs),
            (me, _) => *me = Changed::Everything,
        }
    }

    /// The entries directly under `root` that changed (a bundle directory
    /// each), or `None` when it cannot be said which: everything changed, or
    /// `root` itself or a directory above it did.
    pub fn under(&self, root: &Path) -> Option<BTreeSet<PathBuf>> {
        let Changed::Paths(paths) = self else {
            return None;
        };
        let mut dirs = BTreeSet::new();
        for path in paths {
            if root.starts_with(path) {
                return None;
            }
            if let Ok(relative) = path.strip_prefix(root)
                && let Some(first) = relative.components().next()
            {
                dirs.insert(root.join(first));
            }
        }
        Some(dirs)
    }
}

/// Calls `changed` after each debounced burst of changes under `dirs`.
pub fn watch(
    dirs: &[PathBuf],
    debounce: Duration,
    changed: impl Fn(Changed) + Send + 'static,
) -> Result<DirWatcher, WatchError> {
    let watched = dirs.to_vec();
    let mut debouncer = new_debouncer(
        debounce,
        Some(debounce / 4),
        move |result: DebounceEventResult| match result {
            Ok(events) => {
                let mut paths = BTreeSet::new();
                for event in &events {
                    if event.need_rescan() {
                        // The kernel's queue overflowed: events were lost.
                        return changed(Changed::Everything);
                    }
                    if !event.kind.is_access() {
                        paths.extend(event.paths.iter().cloned());
                    }
                }
                // A path outside what was asked for (another spelling of
                // it) cannot be placed: check everything.
                if paths
                    .iter()
                    .any(|p| !watched.iter().any(|d| p.starts_with(d)))
                {
                    return changed(Changed::Everything);
                }
                if !paths.is_empty() {
                    changed(Changed::Paths(paths));
                }
            }
            Err(errors) => {
                for e in errors {
                    tracing::warn!(error = %e, "file watcher error; checking every input");
                }
                changed(Changed::Everything);
            }
        },
    )
    .map_err(|source| WatchError {
        dir: dirs.first().cloned().unwrap_or_default(),
        source,
    })?;
    for dir in dirs {
        if dir.is_dir() {
            debouncer
                .watch(dir, RecursiveMode::Recursive)
                .map_err(|source| WatchError {
                    dir: dir.clone(),
                    source,
                })?;
        } else {
            tracing::warn!(dir = %dir.display(), "not watching a directory that does not exist");
        }
    }
    Ok(DirWatcher {
        _debouncer: debouncer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(list: &[&str]) -> Changed {
        Changed::Paths(list.iter().map(PathBuf::from).collect())
    }

    #[test]
    fn changed_paths_name_the_bundle_directories_under_a_root() {
        let root = Path::new("/site/bundles");
        let changed = paths(&[
            "/site/bundles/a/bundle.yaml",
            "/site/bundles/a/tools/x.py",
            "/site/bundles/b",
            "/site/models/m.toml",
        ]);
        let dirs: Vec<PathBuf> = changed.under(root).unwrap().into_iter().collect();
        assert_eq!(dirs, [root.join("a"), root.join("b")]);
        assert_eq!(paths(&["/site/bundles"]).under(root), None);
        assert_eq!(paths(&["/site"]).under(root), None);
        assert_eq!(Changed::Everything.under(root), None);
        assert_eq!(Changed::nothing().under(root), Some(BTreeSet::new()));
    }

    #[test]
    fn merged_changes_union_their_paths_and_everything_absorbs() {
        let mut changed = paths(&["/a"]);
        changed.merge(paths(&["/b"]));
        assert_eq!(changed, paths(&["/a", "/b"]));
        changed.merge(Changed::Everything);
        assert_eq!(changed, Changed::Everything);
        changed.merge(paths(&["/c"]));
        assert_eq!(changed, Changed::Everything);
    }
}
