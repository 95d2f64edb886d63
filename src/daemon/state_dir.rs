//! The state directory before anything else touches it: private to the
//! daemon's user whatever the umask (the directory 0700; the SQLite queue
//! file and its `-wal`/`-shm` companions 0600, which SQLite copies from the
//! database file when it creates them), and a refusal to start over an
//! empty queue in a directory that held one before.
//!
//! A daemon started outside its systemd unit (no `UMask=`/`StateDirectory=`)
//! used to leave `state/` 0755 and `queue.db` 0644, so any local user could
//! read every job. And a queue file deleted between two runs used to be
//! recreated empty without a word, losing every job silently.

use std::fs::{DirBuilder, OpenOptions, Permissions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::config::{Config, QueueBackend};

/// What the state directory's owner only may do with it.
const DIR_MODE: u32 = 0o700;
/// What the owner only may do with the queue's files.
const FILE_MODE: u32 = 0o600;

/// Entries only a running daemon leaves in its state directory (its bundle
/// copies and its control file): their presence without a queue file means
/// the queue was lost, not never made. (Not `plugin-cache`: the `plugins`
/// command writes it without a daemon.)
const TRACES_OF_USE: &[&str] = &["bundles", "control.json"];

#[derive(Debug, thiserror::Error)]
pub enum StateDirError {
    #[error(
        "cannot prepare the state directory {path} (paths.state_dir): {source}; check that the daemon's user owns it or can create it"
    )]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the queue file {queue} is missing, but {trace} shows that {state_dir} was used before: the queue (and every job in it) may have been deleted or moved. Restore the file, point queue.path at it, or start once with `serve --new-queue` (STRUCTURED_AGENTS_NEW_QUEUE=true) to begin an empty queue"
    )]
    QueueMissing {
        queue: PathBuf,
        trace: PathBuf,
        state_dir: PathBuf,
    },
}

/// Makes the state directory private (creating it if needed) and, for the
/// SQLite queue, makes sure its file exists with mode 0600 before SQLite
/// opens it. Refuses when the queue file is missing from a directory that
/// was used before, unless `new_queue`.
pub fn prepare(config: &Config, new_queue: bool) -> Result<(), StateDirError> {
    let state_dir = &config.paths.state_dir;
    private_dir(state_dir)?;
    if config.queue.backend != QueueBackend::Sqlite {
        return Ok(());
    }
    let queue = config.queue_path();
    if !queue.exists() {
        let trace = TRACES_OF_USE
            .iter()
            .map(|name| state_dir.join(name))
            .find(|path| path.exists());
        match trace {
            Some(trace) if !new_queue => {
                return Err(StateDirError::QueueMissing {
                    queue,
                    trace,
                    state_dir: state_dir.clone(),
                });
            }
            Some(_) => tracing::warn!(
                queue = %queue.display(),
                "starting a new, empty queue in a state directory used before (--new-queue)"
            ),
            None => {}
        }
        if let Some(parent) = queue.parent().filter(|p| !p.as_os_str().is_empty())
            && !parent.exists()
        {
            private_dir(parent)?;
        }
        // Created here, not by SQLite, so it is 0600 whatever the umask;
        // SQLite gives its -wal and -shm the database file's mode.
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .open(&queue)
            .map_err(io(&queue))?;
    }
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut name = queue.clone().into_os_string();
        name.push(suffix);
        tighten(Path::new(&name), FILE_MODE)?;
    }
    Ok(())
}

/// Creates `dir` 0700, or tightens an existing one to 0700 (saying so).
fn private_dir(dir: &Path) -> Result<(), StateDirError> {
    if !dir.exists() {
        DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(dir)
            .map_err(io(dir))?;
    }
    // The mode above is masked by the umask: set it outright.
    tighten(dir, DIR_MODE)
}

/// Sets `path`'s mode to `mode` when it grants more (group or others), with
/// a log line naming what it was; a missing path is left alone.
fn tighten(path: &Path, mode: u32) -> Result<(), StateDirError> {
    let found = match std::fs::metadata(path) {
        Ok(meta) => meta.permissions().mode() & 0o777,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(path)(e)),
    };
    if found == mode {
        return Ok(());
    }
    std::fs::set_permissions(path, Permissions::from_mode(mode)).map_err(io(path))?;
    if found & 0o077 != 0 {
        tracing::warn!(
            path = %path.display(),
            was = format!("{found:04o}"),
            now = format!("{mode:04o}"),
            "tightened permissions: the state directory holds every job's input and output and must be readable by the daemon's user only"
        );
    }
    Ok(())
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StateDirError + '_ {
    move |source| StateDirError::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(state_dir: &Path) -> Config {
        let mut config = Config::default();
        config.paths.state_dir = state_dir.to_path_buf();
        config
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_new_state_directory_and_queue_file_are_private_whatever_the_umask() {
        let root = tempfile::tempdir().unwrap();
        let state = root.path().join("state");
        // The loosest umask: without explicit modes, everything is 0777/0666.
        let old = nix::sys::stat::umask(nix::sys::stat::Mode::empty());
        let prepared = prepare(&config(&state), false);
        nix::sys::stat::umask(old);
        prepared.unwrap();
        assert_eq!(mode(&state), 0o700);
        assert_eq!(mode(&state.join("queue.db")), 0o600);
    }

    #[test]
    fn an_existing_loose_directory_and_queue_files_are_tightened() {
        let root = tempfile::tempdir().unwrap();
        let state = root.path().join("state");
        std::fs::create_dir(&state).unwrap();
        std::fs::set_permissions(&state, Permissions::from_mode(0o755)).unwrap();
        for name in ["queue.db", "queue.db-wal", "queue.db-shm"] {
            std::fs::write(state.join(name), b"").unwrap();
            std::fs::set_permissions(state.join(name), Permissions::from_mode(0o644)).unwrap();
        }
        prepare(&config(&state), false).unwrap();
        assert_eq!(mode(&state), 0o700);
        for name in ["queue.db", "queue.db-wal", "queue.db-shm"] {
            assert_eq!(mode(&state.join(name)), 0o600, "{name}");
        }
    }

    #[test]
    fn a_missing_queue_in_a_used_directory_is_refused_unless_asked_for() {
        let root = tempfile::tempdir().unwrap();
        let state = root.path().join("state");
        std::fs::create_dir_all(state.join("bundles")).unwrap();
        let err = prepare(&config(&state), false).unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, StateDirError::QueueMissing { .. }));
        assert!(message.contains("queue.db"), "{message}");
        assert!(message.contains("--new-queue"), "{message}");
        assert!(!state.join("queue.db").exists());
        prepare(&config(&state), true).unwrap();
        assert_eq!(mode(&state.join("queue.db")), 0o600);
        // Once it exists, starts need no flag.
        prepare(&config(&state), false).unwrap();
    }
}
