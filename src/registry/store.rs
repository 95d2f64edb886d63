//! Content-addressed copies of bundle directories, under
//! `<state_dir>/bundles/<identity>/`. A bundle always runs from its copy:
//! its scripts, MCP servers and prompt files are the ones its identity was
//! computed from, whatever happens to the operator's directory afterwards,
//! and a job pinned to an identity resumes on exactly that content after a
//! restart (the copy is loaded again, if its endpoint and plugins are
//! unchanged). Copies are written by the daemon only (mode 0700) and
//! pruned once no loaded version uses them, no job that has not ended is
//! pinned to them (the registry's `PinHolders`), and they are older than
//! the queue's retention.
//!
//! A copy survives a power cut: it is written into a staging directory,
//! every file and directory synced, then renamed into place and the store
//! synced (`durable`). It carries a manifest of its files' sizes and
//! hashes, and is verified against it before every use: a damaged copy is
//! never run — it is rebuilt from its source while the source still holds
//! the same content, else the error names the copy and what to do.

mod durable;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::BundleIdentity;
use crate::bundle::ContentDigest;

/// Why a copy cannot be had. Every message names the copy and what to do.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "cannot write the bundle store {path}: {detail} (check paths.state_dir: it must be writable by the daemon)"
    )]
    Write { path: PathBuf, detail: String },
    #[error("cannot copy the bundle from {from}: {detail}")]
    Source { from: PathBuf, detail: String },
    #[error(
        "the bundle copy {path} (identity {identity}, content {content}) is damaged ({why}) and its source no longer holds that content, so it cannot be rebuilt; jobs pinned to it cannot resume: resubmit them (delete the copy once they are resolved)"
    )]
    Damaged {
        path: PathBuf,
        identity: BundleIdentity,
        content: String,
        why: String,
    },
}

/// A verified copy: where it is and the content digest it was made from.
#[derive(Debug, Clone, PartialEq)]
pub struct Copy {
    pub path: PathBuf,
    pub content: ContentDigest,
    /// False for a copy made before manifests: its files are not verified
    /// yet, and the caller checks their content digest, then
    /// [`BundleStore::seal`]s it.
    pub sealed: bool,
}

/// A copy that [`BundleStore::keep`] made now (the caller checks it holds
/// what it parsed) or found intact.
#[derive(Debug)]
pub struct Kept {
    pub path: PathBuf,
    pub made: bool,
}

/// The largest bundle file [`BundleStore::copies_of`] reads.
const MAX_BUNDLE_FILE: u64 = 1 << 20;

#[derive(Debug, Clone)]
pub struct BundleStore {
    root: PathBuf,
}

impl BundleStore {
    pub fn new(state_dir: &Path) -> Self {
        Self {
            root: state_dir.join("bundles"),
        }
    }

    fn path(&self, identity: &BundleIdentity) -> PathBuf {
        self.root.join(identity.as_str())
    }

    /// The copy of `dir` for `identity`, whose content is `content`: the
    /// existing one when it verifies, else made now (rebuilt, when it was
    /// damaged). Blocking.
    pub fn keep(
        &self,
        dir: &Path,
        identity: &BundleIdentity,
        content: &ContentDigest,
    ) -> Result<Kept, StoreError> {
        let target = self.path(identity);
        if target.exists() {
            match durable::verify(&target) {
                Ok(manifest) if manifest.content == *content => {
                    touch(&target);
                    return Ok(Kept {
                        path: target,
                        made: false,
                    });
                }
                Ok(manifest) => {
                    tracing::warn!(copy = %target.display(), recorded = %manifest.content, expected = %content, "a bundle copy records other content than its identity names; rebuilding it from its source")
                }
                Err(why) => {
                    tracing::warn!(copy = %target.display(), %why, "a bundle copy is damaged; rebuilding it from its source")
                }
            }
            self.set_aside(&target)?;
        }
        durable::make(&self.root, dir, &target, content)?;
        Ok(Kept {
            path: target,
            made: true,
        })
    }

    /// The copy of `identity`, verified; `None` when there is none.
    /// Blocking.
    pub fn find(&self, identity: &BundleIdentity) -> Result<Option<Copy>, StoreError> {
        // Identities are hex: anything else never names a path.
        if !identity.is_hex() {
            return Ok(None);
        }
        let path = self.path(identity);
        if !path.exists() {
            return Ok(None);
        }
        let why = match durable::verify(&path) {
            Ok(manifest) => {
                touch(&path);
                return Ok(Some(Copy {
                    path,
                    content: manifest.content,
                    sealed: true,
                }));
            }
            Err(why) => why,
        };
        if let Some(content) = durable::legacy_content(&path) {
            return Ok(Some(Copy {
                path,
                content,
                sealed: false,
            }));
        }
        Err(StoreError::Damaged {
            content: durable::recorded_content(&path).unwrap_or_else(|| "unknown".into()),
            path,
            identity: identity.clone(),
            why: why.to_string(),
        })
    }

    /// Gives a copy made before manifests, whose files were found to hold
    /// `content`, its manifest. Blocking.
    pub fn seal(&self, copy: &Copy) -> Result<(), StoreError> {
        durable::seal(&copy.path, &copy.content)
    }

    /// The copies of bundle `name` at `version`, most recently used
    /// first: what an eval may compare against once the registry no longer
    /// remembers serving it (a restart since). Only each copy's bundle
    /// file's `name` and `version` are read, and a file over 1 MiB is
    /// passed over; which copy still loads is `resolve`'s to say. Blocking.
    pub fn copies_of(&self, name: &str, version: &str) -> Vec<BundleIdentity> {
        #[derive(serde::Deserialize)]
        struct Named {
            name: String,
            version: String,
        }
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return Vec::new();
        };
        let mut found: Vec<(SystemTime, BundleIdentity)> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let identity = BundleIdentity::recorded(&entry.file_name().to_string_lossy());
                // Staging and damaged copies set aside are not identities.
                if !identity.is_hex() {
                    return None;
                }
                let file = crate::bundle::bundle_file(&entry.path())?;
                if std::fs::metadata(&file).ok()?.len() > MAX_BUNDLE_FILE {
                    return None;
                }
                let named: Named =
                    serde_saphyr::from_str(&std::fs::read_to_string(&file).ok()?).ok()?;
                let used = entry.metadata().and_then(|m| m.modified()).ok()?;
                (named.name == name && named.version == version).then_some((used, identity))
            })
            .collect();
        found.sort_by_key(|(used, _)| std::cmp::Reverse(*used));
        found.into_iter().map(|(_, identity)| identity).collect()
    }

    /// Drops a copy that turned out not to match its identity.
    pub fn discard(&self, identity: &BundleIdentity) {
        let _ = std::fs::remove_dir_all(self.path(identity));
    }

    /// Moves a damaged copy out of the way (jobs running from it keep
    /// their open files) and removes it.
    fn set_aside(&self, target: &Path) -> Result<(), StoreError> {
        let aside = durable::staging_path(&self.root, target, "damaged");
        std::fs::rename(target, &aside).map_err(|e| StoreError::Write {
            path: target.to_path_buf(),
            detail: format!("cannot move the damaged copy aside: {e}"),
        })?;
        if let Err(e) = std::fs::remove_dir_all(&aside) {
            tracing::warn!(copy = %aside.display(), error = %e, "cannot remove a damaged bundle copy");
        }
        Ok(())
    }

    /// Removes every copy that is not `in_use` and was not used within
    /// `keep_for`, and staging left by a crash. Blocking; failures are
    /// logged and retried next time.
    pub fn prune(&self, in_use: &HashSet<BundleIdentity>, keep_for: Duration) {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return;
        };
        let now = SystemTime::now();
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            if in_use.contains(&BundleIdentity::recorded(&name)) {
                continue;
            }
            let recent = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|at| now.duration_since(at).ok())
                .is_none_or(|age| age < keep_for);
            // Staging under way is recent too; an old one is a crash's.
            if recent {
                continue;
            }
            if let Err(e) = std::fs::remove_dir_all(entry.path()) {
                tracing::warn!(copy = %entry.path().display(), error = %e, "cannot prune a bundle copy");
            }
        }
    }
}

/// Marks a copy as used now (its mtime), so pruning keeps it.
fn touch(path: &Path) {
    if let Ok(dir) = std::fs::File::open(path) {
        let _ = dir.set_modified(SystemTime::now());
    }
}

#[cfg(test)]
mod tests;
