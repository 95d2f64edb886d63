//! Content-addressed copies of bundle directories, under
//! `<state_dir>/bundles/<identity>/`. A bundle always runs from its copy:
//! its scripts, MCP servers and prompt files are the ones its identity was
//! computed from, whatever happens to the operator's directory afterwards,
//! and a job pinned to an identity resumes on exactly that content after a
//! restart (the copy is loaded again, if its endpoint and plugins are
//! unchanged). Copies are written by the daemon only (mode 0700) and
//! pruned once no loaded version uses them and they are older than the
//! queue's retention.

use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The file in a copy that records the content digest it was made from
/// (tools may write into their working directory; the copy keeps its
/// identity regardless).
const CONTENT_DIGEST_FILE: &str = ".content-digest";

/// How deep a bundle's tree may go (symlinked directories included).
const MAX_DEPTH: usize = 16;

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

    fn path(&self, identity: &str) -> PathBuf {
        self.root.join(identity)
    }

    /// Whether the copy of `identity` exists (then [`Self::keep`] copies nothing).
    pub fn holds(&self, identity: &str) -> bool {
        self.path(identity).is_dir()
    }

    /// The copy of `dir` for `identity`, made now unless it exists.
    /// `content_digest` is recorded in it. Blocking.
    pub fn keep(
        &self,
        dir: &Path,
        identity: &str,
        content_digest: &str,
    ) -> Result<PathBuf, String> {
        let target = self.path(identity);
        if target.is_dir() {
            touch(&target);
            return Ok(target);
        }
        std::fs::create_dir_all(&self.root).map_err(|e| {
            format!(
                "cannot create the bundle store {}: {e}",
                self.root.display()
            )
        })?;
        let _ = std::fs::set_permissions(&self.root, std::fs::Permissions::from_mode(0o700));
        let staging = self
            .root
            .join(format!(".{identity}.{}.tmp", std::process::id()));
        let _ = std::fs::remove_dir_all(&staging);
        let copied = copy_tree(dir, &staging, 0)
            .and_then(|()| {
                std::fs::write(staging.join(CONTENT_DIGEST_FILE), content_digest)
                    .map_err(|e| format!("{}: {e}", staging.display()))
            })
            .and_then(|()| match std::fs::rename(&staging, &target) {
                Ok(()) => Ok(()),
                // Another reload made the same copy meanwhile.
                Err(_) if target.is_dir() => Ok(()),
                Err(e) => Err(format!("cannot move the copy to {}: {e}", target.display())),
            });
        let _ = std::fs::remove_dir_all(&staging);
        copied.map_err(|e| format!("cannot copy the bundle into the store: {e}"))?;
        Ok(target)
    }

    /// The copy of `identity` and the content digest it was made from.
    pub fn find(&self, identity: &str) -> Option<(PathBuf, String)> {
        // Identities are hex: anything else never names a path.
        if identity.is_empty() || !identity.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let path = self.path(identity);
        let digest = std::fs::read_to_string(path.join(CONTENT_DIGEST_FILE)).ok()?;
        touch(&path);
        Some((path, digest.trim().to_string()))
    }

    /// Drops a copy that turned out not to match its identity.
    pub fn discard(&self, identity: &str) {
        let _ = std::fs::remove_dir_all(self.path(identity));
    }

    /// Removes every copy that is not `in_use` and was not used within
    /// `keep_for`. Blocking; failures are logged and retried next time.
    pub fn prune(&self, in_use: &HashSet<String>, keep_for: Duration) {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return;
        };
        let now = SystemTime::now();
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            if in_use.contains(&name) || name.starts_with('.') {
                continue;
            }
            let recent = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|at| now.duration_since(at).ok())
                .is_none_or(|age| age < keep_for);
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

/// Copies `from` into the new directory `to`, following symlinks (what a
/// bundle runs is its targets' content), leaving out `__pycache__`.
fn copy_tree(from: &Path, to: &Path, depth: usize) -> Result<(), String> {
    if depth >= MAX_DEPTH {
        return Err(format!(
            "{}: nested deeper than {MAX_DEPTH} directories (a symlink loop?)",
            from.display()
        ));
    }
    std::fs::create_dir(to).map_err(|e| format!("{}: {e}", to.display()))?;
    let entries = std::fs::read_dir(from).map_err(|e| format!("{}: {e}", from.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", from.display()))?;
        if entry.file_name() == "__pycache__" {
            continue;
        }
        let source = entry.path();
        let target = to.join(entry.file_name());
        let meta = std::fs::metadata(&source).map_err(|e| format!("{}: {e}", source.display()))?;
        if meta.is_dir() {
            copy_tree(&source, &target, depth + 1)?;
        } else {
            std::fs::copy(&source, &target)
                .map_err(|e| format!("{} → {}: {e}", source.display(), target.display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_keeps_its_content_while_the_source_changes() {
        let state = tempfile::tempdir().unwrap();
        let source = tempfile::tempdir().unwrap();
        std::fs::create_dir(source.path().join("tools")).unwrap();
        std::fs::write(source.path().join("tools/x.py"), "print(1)").unwrap();
        std::fs::create_dir(source.path().join("__pycache__")).unwrap();
        let store = BundleStore::new(state.path());
        let copy = store.keep(source.path(), "abcd", "c1").unwrap();
        std::fs::write(source.path().join("tools/x.py"), "print(2)").unwrap();
        assert_eq!(
            std::fs::read_to_string(copy.join("tools/x.py")).unwrap(),
            "print(1)"
        );
        assert!(!copy.join("__pycache__").exists());
        // Kept again: the existing copy, untouched.
        assert_eq!(store.keep(source.path(), "abcd", "c1").unwrap(), copy);
        assert_eq!(
            std::fs::read_to_string(copy.join("tools/x.py")).unwrap(),
            "print(1)"
        );
        assert_eq!(store.find("abcd"), Some((copy, "c1".to_string())));
        assert_eq!(store.find("../etc"), None);
        assert_eq!(store.find("ffff"), None);
    }

    #[test]
    fn pruning_keeps_copies_in_use_or_recently_used() {
        let state = tempfile::tempdir().unwrap();
        let source = tempfile::tempdir().unwrap();
        let store = BundleStore::new(state.path());
        store.keep(source.path(), "aa", "c").unwrap();
        store.keep(source.path(), "bb", "c").unwrap();
        store.prune(&HashSet::new(), Duration::from_secs(3600));
        assert!(store.find("aa").is_some() && store.find("bb").is_some());
        store.prune(&HashSet::from(["aa".to_string()]), Duration::ZERO);
        assert!(store.find("aa").is_some());
        assert!(store.find("bb").is_none());
    }
}
