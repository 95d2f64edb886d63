//! A bundle's content digest: what its files (and its model config) hash
//! to. It says nothing of what the bundle is bound to — the registry's
//! `BundleIdentity` covers the content digest, the endpoint, the plugins
//! and the agents — so the two have their own types and never compare.

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::BundleError;

/// The digest of a bundle's content (see [`content_digest`]): 8 bytes in hex.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ContentDigest(String);

impl ContentDigest {
    /// The digest of bundle text parsed without a directory (`load_str`).
    pub(super) fn of_text(text: &str) -> Self {
        use sha2::{Digest, Sha256};
        ContentDigest(crate::hex::short_hex(&Sha256::digest(text.as_bytes())))
    }

    /// A digest as it was recorded (a bundle copy's manifest).
    pub fn recorded(text: &str) -> Self {
        ContentDigest(text.trim().to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ContentDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The digest of everything in a bundle's directory that resolves into it —
/// every file's relative path and bytes (hidden entries and `__pycache__`
/// left out; a symlink counts by its target's content, as it runs) — and
/// the model-plugin config file it uses. Any change to any of them is
/// another bundle.
pub fn content_digest(
    dir: &Path,
    model_source: Option<&Path>,
) -> Result<ContentDigest, BundleError> {
    use sha2::{Digest, Sha256};
    /// A symlink loop ends here.
    const MAX_DEPTH: usize = 16;
    let unreadable = |path: &Path, e: std::io::Error| BundleError {
        file: path.to_path_buf(),
        line: None,
        path: String::new(),
        message: format!("cannot read for the bundle's digest: {e}"),
    };
    let mut hash = Sha256::new();
    let mut pending = vec![(dir.to_path_buf(), 0)];
    let mut files = Vec::new();
    while let Some((current, depth)) = pending.pop() {
        let entries = std::fs::read_dir(&current).map_err(|e| unreadable(&current, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| unreadable(&current, e))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') || name == "__pycache__" {
                continue;
            }
            let path = entry.path();
            let meta = std::fs::metadata(&path).map_err(|e| unreadable(&path, e))?;
            if meta.is_file() {
                files.push(path);
            } else if !meta.is_dir() {
                // Reading a FIFO or a device would hang or never end.
                return Err(BundleError {
                    file: path,
                    line: None,
                    path: String::new(),
                    message: "is not a regular file (a FIFO, socket or device); a bundle holds files and directories only".into(),
                });
            } else if depth + 1 < MAX_DEPTH {
                pending.push((path, depth + 1));
            } else {
                return Err(BundleError {
                    file: path,
                    line: None,
                    path: String::new(),
                    message: format!(
                        "nested deeper than {MAX_DEPTH} directories (a symlink loop?)"
                    ),
                });
            }
        }
    }
    files.sort();
    for path in files {
        let relative = path.strip_prefix(dir).unwrap_or(&path);
        hash.update(relative.to_string_lossy().as_bytes());
        hash.update([0]);
        let content = std::fs::read(&path).map_err(|e| unreadable(&path, e))?;
        hash.update((content.len() as u64).to_le_bytes());
        hash.update(&content);
    }
    if let Some(source) = model_source {
        hash.update(b"\0model\0");
        hash.update(std::fs::read(source).map_err(|e| unreadable(source, e))?);
    }
    Ok(ContentDigest(crate::hex::short_hex(&hash.finalize())))
}
