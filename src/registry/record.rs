//! A small JSON record of the registry's under the state directory (the
//! bundles' last good versions, the release gate's decisions): read whole
//! — no file is an empty record, one that cannot be read or parsed is
//! logged and empty, never fatal — and written whole, through a temporary
//! file renamed over it. [`Record`] is such a record: its file's name and
//! what its log lines say, its reading and writing under the state
//! directory written once.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

/// A record kept under the state directory.
pub(super) trait Record: Default + Serialize + DeserializeOwned {
    /// Its file's name under the state directory.
    const FILE: &'static str;
    /// What it is, in the log line of a record that cannot be read.
    const WHAT: &'static str;
    /// What an empty record means, in that log line.
    const OTHERWISE: &'static str;

    /// Its file under `state_dir`.
    fn file(state_dir: &Path) -> PathBuf {
        state_dir.join(Self::FILE)
    }

    /// The record under `state_dir` (empty when there is none, or it
    /// cannot be read: logged). Blocking.
    fn read(state_dir: &Path) -> Self {
        read(&Self::file(state_dir), Self::WHAT, Self::OTHERWISE)
    }

    /// Writes the record under `state_dir` whole. Blocking.
    fn write_under(&self, state_dir: &Path) -> std::io::Result<()> {
        write(&Self::file(state_dir), self)
    }
}

/// The record in `file` (blocking); `what` names it and `otherwise` says
/// what an empty one means, in the log line of a record that cannot be read.
pub(super) fn read<T: Default + DeserializeOwned>(file: &Path, what: &str, otherwise: &str) -> T {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return T::default(),
        Err(e) => {
            tracing::warn!(file = %file.display(), error = %e, "cannot read {what}; {otherwise}");
            return T::default();
        }
    };
    serde_json::from_str(&text).unwrap_or_else(|e| {
        tracing::warn!(file = %file.display(), error = %e, "{what} cannot be parsed; {otherwise}");
        T::default()
    })
}

/// Writes `record` to `file` whole (blocking).
pub(super) fn write<T: Serialize>(file: &Path, record: &T) -> std::io::Result<()> {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let staged = file.with_file_name(format!(".{name}.new"));
    let bytes = serde_json::to_vec_pretty(record).map_err(std::io::Error::other)?;
    std::fs::write(&staged, bytes)?;
    std::fs::rename(&staged, file)
}
