//! The control file: where a running daemon can be reached from this host,
//! and a key that lets a local operator (systemd's `ExecReload`,
//! `structured-agents reload --config`) ask it to reload even when the edit
//! being applied changed the API token or the listen address. The daemon
//! writes it under its state directory (mode 0600, readable only by its
//! user) once it listens, with a fresh key each start, and removes it when
//! it stops. The key authorizes `POST /v1/reload` and nothing else.

use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The header that carries the reload key.
pub const RELOAD_KEY_HEADER: &str = "x-structured-agents-reload-key";

const FILE_NAME: &str = "control.json";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Control {
    /// Where the API listens (a wildcard address as loopback).
    pub address: SocketAddr,
    pub pid: u32,
    pub reload_key: String,
}

impl Control {
    /// A control record for this process with a fresh random key.
    pub fn new(address: SocketAddr) -> Self {
        let key: [u8; 32] = rand::random();
        Self {
            address: reachable(address),
            pid: std::process::id(),
            reload_key: crate::hex::hex(&key),
        }
    }

    /// Writes it under `state_dir` (atomically, mode 0600); removed when
    /// the returned guard drops.
    pub fn publish(&self, state_dir: &Path) -> std::io::Result<ControlFile> {
        let path = state_dir.join(FILE_NAME);
        let staging = state_dir.join(format!(".{FILE_NAME}.{}", self.pid));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&staging)?;
        file.write_all(serde_json::to_string(self).unwrap_or_default().as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&staging, &path)?;
        Ok(ControlFile { path })
    }

    /// The control record of the daemon using `state_dir`, if one runs.
    pub fn read(state_dir: &Path) -> Option<Control> {
        let text = std::fs::read_to_string(state_dir.join(FILE_NAME)).ok()?;
        serde_json::from_str(&text).ok()
    }
}

/// Removes the control file when dropped (the daemon stopped).
pub struct ControlFile {
    path: PathBuf,
}

impl Drop for ControlFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Where a daemon listening on `listen` is reached from this host (a
/// wildcard address is reached over loopback).
pub fn reachable(listen: SocketAddr) -> SocketAddr {
    let ip = match listen {
        SocketAddr::V4(a) if a.ip().is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        SocketAddr::V6(a) if a.ip().is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        other => other.ip(),
    };
    SocketAddr::new(ip, listen.port())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_file_is_private_readable_back_and_gone_with_its_guard() {
        let dir = tempfile::tempdir().unwrap();
        let control = Control::new("0.0.0.0:7860".parse().unwrap());
        assert_eq!(control.address, "127.0.0.1:7860".parse().unwrap());
        let guard = control.publish(dir.path()).unwrap();
        let mode = std::fs::metadata(dir.path().join(FILE_NAME))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let read = Control::read(dir.path()).unwrap();
        assert_eq!(read.reload_key, control.reload_key);
        assert_eq!(read.reload_key.len(), 64);
        drop(guard);
        assert!(Control::read(dir.path()).is_none());
    }
}
