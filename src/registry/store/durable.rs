//! Writing a bundle copy so that it survives a power cut, and verifying one
//! before it is used. A copy is made in a staging directory beside its
//! place; every file is synced once written, every directory once filled,
//! then the staging directory is renamed into place and the store synced,
//! so after a crash a copy is either whole or absent (staging is pruned).
//! Its manifest (`.manifest.json`, written and synced last) records the
//! content digest it was made from and each file's size and SHA-256;
//! verifying a copy reads every file it lists. Files a tool adds to its
//! working directory (the copy) are not in the manifest and do not count.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::StoreError;
use crate::bundle::ContentDigest;

/// The manifest's file in a copy.
const MANIFEST: &str = ".manifest.json";

/// What a copy made before manifests existed recorded instead: its
/// content digest alone.
const LEGACY_DIGEST: &str = ".content-digest";

/// How deep a bundle's tree may go (symlinked directories included).
const MAX_DEPTH: usize = 16;

/// What a copy holds.
#[derive(Debug, Serialize, Deserialize)]
pub(in crate::registry) struct Manifest {
    /// The content digest of the directory it was copied from.
    pub content: ContentDigest,
    /// Each file by its path relative to the copy.
    files: BTreeMap<String, FileSum>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct FileSum {
    len: u64,
    sha256: String,
}

/// A file or directory could not be copied, written or synced: which path,
/// and the system's reason. [`StoreError`] says which copy and what to check.
#[derive(Debug, thiserror::Error)]
pub(super) enum DiskError {
    #[error("{}: nested deeper than {} directories (a symlink loop?)", .path.display(), MAX_DEPTH)]
    TooDeep { path: PathBuf },
    #[error("{}: {error}", .path.display())]
    At {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{} → {}: {error}", .from.display(), .to.display())]
    Copy {
        from: PathBuf,
        to: PathBuf,
        error: std::io::Error,
    },
    /// Writing a file (the caller names it).
    #[error("{0}")]
    Write(#[from] std::io::Error),
    #[error("cannot sync {}: {error}", .dir.display())]
    Sync { dir: PathBuf, error: std::io::Error },
}

impl DiskError {
    fn at(path: &Path) -> impl Fn(std::io::Error) -> Self + '_ {
        move |error| Self::At {
            path: path.to_path_buf(),
            error,
        }
    }
}

/// What is wrong with a copy: a file missing, of another size or other
/// bytes, or its manifest. The caller names the copy.
#[derive(Debug, thiserror::Error)]
pub(super) enum Damage {
    #[error(
        "its manifest {manifest} cannot be read ({0}); copies made before manifests existed are made again",
        manifest = MANIFEST
    )]
    NoManifest(std::io::Error),
    #[error("its manifest {manifest} is not valid ({0})", manifest = MANIFEST)]
    BadManifest(serde_json::Error),
    #[error("{file}: {error}")]
    Unreadable { file: String, error: std::io::Error },
    #[error("{file}: {found} bytes, {copied} when copied")]
    Resized {
        file: String,
        found: u64,
        copied: u64,
    },
    #[error("{file}: its bytes changed since it was copied")]
    Changed { file: String },
}

/// Makes `target` a durable copy of `from`, recording `content`.
pub(super) fn make(
    root: &Path,
    from: &Path,
    target: &Path,
    content: &ContentDigest,
) -> Result<(), StoreError> {
    let write_error = |path: &Path, detail: String| StoreError::Write {
        path: path.to_path_buf(),
        detail,
    };
    if !root.is_dir() {
        std::fs::create_dir_all(root).map_err(|e| write_error(root, e.to_string()))?;
        let _ = std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700));
        if let Some(parent) = root.parent() {
            sync_dir(parent).map_err(|e| write_error(parent, e.to_string()))?;
        }
    }
    let staging = staging_path(root, target, "tmp");
    let made = fill(from, &staging, content).and_then(|()| {
        match std::fs::rename(&staging, target) {
            Ok(()) => sync_dir(root).map_err(|e| write_error(root, e.to_string())),
            // Another reload made the same copy meanwhile.
            Err(_) if target.is_dir() => Ok(()),
            Err(e) => Err(write_error(
                target,
                format!("cannot move the copy into place: {e}"),
            )),
        }
    });
    let _ = std::fs::remove_dir_all(&staging);
    made
}

/// A staging (or set-aside) directory for `target`, unique in this process.
pub(super) fn staging_path(root: &Path, target: &Path, what: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = target.file_name().unwrap_or_default().to_string_lossy();
    root.join(format!(
        ".{name}.{}.{}.{what}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Copies `from` into the new directory `staging`, synced, with its manifest.
fn fill(from: &Path, staging: &Path, content: &ContentDigest) -> Result<(), StoreError> {
    let _ = std::fs::remove_dir_all(staging);
    let mut files = BTreeMap::new();
    copy_tree(from, staging, staging, 0, &mut files).map_err(|e| StoreError::Source {
        from: from.to_path_buf(),
        detail: e.to_string(),
    })?;
    let manifest = Manifest {
        content: content.clone(),
        files,
    };
    let text = serde_json::to_vec_pretty(&manifest).unwrap_or_default();
    let path = staging.join(MANIFEST);
    write_synced(&path, &text)
        .and_then(|()| sync_dir(staging))
        .map_err(|e| StoreError::Write {
            path,
            detail: e.to_string(),
        })
}

/// Copies `from` into the new directory `to` (under `top`), following
/// symlinks (what a bundle runs is its targets' content), leaving out
/// `__pycache__`; every file and directory synced, each file's sum added
/// to `files`.
fn copy_tree(
    from: &Path,
    to: &Path,
    top: &Path,
    depth: usize,
    files: &mut BTreeMap<String, FileSum>,
) -> Result<(), DiskError> {
    if depth >= MAX_DEPTH {
        return Err(DiskError::TooDeep {
            path: from.to_path_buf(),
        });
    }
    std::fs::create_dir(to).map_err(DiskError::at(to))?;
    let entries = std::fs::read_dir(from).map_err(DiskError::at(from))?;
    for entry in entries {
        let entry = entry.map_err(DiskError::at(from))?;
        if entry.file_name() == "__pycache__" {
            continue;
        }
        let source = entry.path();
        let target = to.join(entry.file_name());
        let meta = std::fs::metadata(&source).map_err(DiskError::at(&source))?;
        if meta.is_dir() {
            copy_tree(&source, &target, top, depth + 1, files)?;
            continue;
        }
        if let Err(error) = std::fs::copy(&source, &target) {
            return Err(DiskError::Copy {
                from: source,
                to: target,
                error,
            });
        }
        // The sum is of the copy as written, read back after its sync.
        let sum = File::open(&target)
            .and_then(|f| f.sync_all().map(|()| f))
            .and_then(|_| sum_of(&target))
            .map_err(DiskError::at(&target))?;
        let relative = target.strip_prefix(top).unwrap_or(&target);
        files.insert(relative.to_string_lossy().into_owned(), sum);
    }
    sync_dir(to)
}

/// Checks the copy at `path` against its manifest → the manifest, or what
/// is wrong (a file missing, of another size or other bytes).
pub(super) fn verify(path: &Path) -> Result<Manifest, Damage> {
    let text = std::fs::read(path.join(MANIFEST)).map_err(Damage::NoManifest)?;
    let manifest: Manifest = serde_json::from_slice(&text).map_err(Damage::BadManifest)?;
    for (relative, expected) in &manifest.files {
        let file = path.join(relative);
        let found = sum_of(&file).map_err(|error| Damage::Unreadable {
            file: relative.clone(),
            error,
        })?;
        if found.len != expected.len {
            return Err(Damage::Resized {
                file: relative.clone(),
                found: found.len,
                copied: expected.len,
            });
        }
        if found.sha256 != expected.sha256 {
            return Err(Damage::Changed {
                file: relative.clone(),
            });
        }
    }
    Ok(manifest)
}

/// The content digest a copy made before manifests recorded, when it has
/// no manifest: the caller checks the copy against it, then seals it.
pub(super) fn legacy_content(path: &Path) -> Option<ContentDigest> {
    if path.join(MANIFEST).exists() {
        return None;
    }
    let text = std::fs::read_to_string(path.join(LEGACY_DIGEST)).ok()?;
    Some(ContentDigest::recorded(&text))
}

/// Writes the manifest of the copy at `path` (made before manifests,
/// checked against `content`): its files as they are now, hidden ones and
/// `__pycache__` left out as the content digest leaves them out.
pub(super) fn seal(path: &Path, content: &ContentDigest) -> Result<(), StoreError> {
    let write_error = |detail: String| StoreError::Write {
        path: path.to_path_buf(),
        detail,
    };
    let mut files = BTreeMap::new();
    let mut pending = vec![(path.to_path_buf(), 0)];
    while let Some((dir, depth)) = pending.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|e| write_error(e.to_string()))?;
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || name == "__pycache__" {
                continue;
            }
            let file = entry.path();
            if file.is_dir() && depth + 1 < MAX_DEPTH {
                pending.push((file, depth + 1));
            } else if file.is_file() {
                let sum =
                    sum_of(&file).map_err(|e| write_error(format!("{}: {e}", file.display())))?;
                let relative = file.strip_prefix(path).unwrap_or(&file);
                files.insert(relative.to_string_lossy().into_owned(), sum);
            }
        }
    }
    let manifest = Manifest {
        content: content.clone(),
        files,
    };
    let text = serde_json::to_vec_pretty(&manifest).unwrap_or_default();
    write_synced(&path.join(MANIFEST), &text)
        .and_then(|()| sync_dir(path))
        .map_err(|e| write_error(e.to_string()))
}

/// The content digest a copy's manifest records, if it can be read at all.
pub(super) fn recorded_content(path: &Path) -> Option<String> {
    let text = std::fs::read(path.join(MANIFEST)).ok()?;
    let manifest: Manifest = serde_json::from_slice(&text).ok()?;
    Some(manifest.content.to_string())
}

fn sum_of(path: &Path) -> std::io::Result<FileSum> {
    let mut file = File::open(path)?;
    let mut hash = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut len = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hash.update(&buf[..n]);
        len += n as u64;
    }
    Ok(FileSum {
        len,
        sha256: crate::hex::hex(&hash.finalize()),
    })
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), DiskError> {
    use std::io::Write;
    let mut file = File::create(path)?;
    file.write_all(bytes).and_then(|()| file.sync_all())?;
    Ok(())
}

/// Syncs a directory, so the entries made in it survive a power cut.
fn sync_dir(dir: &Path) -> Result<(), DiskError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|error| DiskError::Sync {
            dir: dir.to_path_buf(),
            error,
        })
}
