//! Watches the bundles and models directories and asks for a reload when
//! something changes (debounced: an editor's save or a `mv` of a whole bundle
//! is one reload). Watching the directories recursively (not the files)
//! keeps working after editors replace files by renaming.

use std::path::PathBuf;
use std::time::Duration;

use notify::RecursiveMode;
use notify_debouncer_full::{DebounceEventResult, Debouncer, RecommendedCache, new_debouncer};
use tokio::sync::mpsc;

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

/// Sends `()` on `changed` after each debounced burst of changes under `dirs`.
pub fn watch(
    dirs: &[PathBuf],
    debounce: Duration,
    changed: mpsc::Sender<()>,
) -> Result<DirWatcher, WatchError> {
    let mut debouncer = new_debouncer(
        debounce,
        Some(debounce / 4),
        move |result: DebounceEventResult| match result {
            Ok(events) if events.iter().any(|e| !e.kind.is_access()) => {
                // A full channel already holds a pending reload request.
                let _ = changed.try_send(());
            }
            Ok(_) => {}
            Err(errors) => {
                for e in errors {
                    tracing::warn!(error = %e, "file watcher error");
                }
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
