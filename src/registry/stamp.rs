//! Cheap stamps of bundle directories: what `stat` says about every entry
//! (relative path, type, size, mtime and ctime in ns, inode, mode, owner),
//! without opening a file. A reload compares a directory's stamp with the
//! one recorded when it was last loaded and reuses the loaded bundle when
//! they match, so an unchanged directory is never read or parsed.
//!
//! The stamp covers mode and owner of every entry because the trust check
//! (`trust::check_tree`) judges exactly those: a `chmod g+w` changes the
//! stamp, so a reused verdict cannot go stale. Symlinks are followed, as
//! the trust check and the content digest follow them.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

/// How deep a stamp walks (as deep as the trust check goes).
const MAX_DEPTH: usize = 16;

/// File timestamps are taken from a coarse clock (one kernel tick, 1–10 ms):
/// an entry changed this recently could change again within the same tick
/// without its stamp changing, so such a stamp is never trusted ("racy", as
/// git calls it).
pub(super) const RACY: Duration = Duration::from_millis(20);

/// The stamp of one directory tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct DirStamp([u8; 32]);

/// A stamp as recorded for reuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Recorded {
    /// Nothing under the directory changed within [`RACY`] of the stamp.
    Settled(DirStamp),
    /// Taken too close to a change, or not taken (the directory could not
    /// be walked): the next reload loads the directory again.
    Unsettled,
}

impl Recorded {
    /// Whether `now` proves the directory unchanged since this record.
    pub(super) fn matches(&self, now: Option<DirStamp>) -> bool {
        matches!((self, now), (Recorded::Settled(a), Some(b)) if *a == b)
    }
}

/// The stamp of `dir` now; `None` when it cannot be walked (a dangling
/// symlink, a loop, an unreadable entry): the load that follows says why.
pub(super) fn stamp(dir: &Path) -> Option<DirStamp> {
    walk(dir).map(|(stamp, _)| stamp)
}

/// The stamp of `dir` now, as recorded for reuse.
pub(super) fn record(dir: &Path) -> Recorded {
    match walk(dir) {
        Some((stamp, newest)) if settled(newest) => Recorded::Settled(stamp),
        _ => Recorded::Unsettled,
    }
}

fn settled(newest: SystemTime) -> bool {
    SystemTime::now()
        .duration_since(newest)
        .is_ok_and(|age| age > RACY)
}

/// The stamp and the newest mtime or ctime under `dir`.
fn walk(dir: &Path) -> Option<(DirStamp, SystemTime)> {
    let mut hash = Sha256::new();
    let mut newest = SystemTime::UNIX_EPOCH;
    let mut pending = vec![(dir.to_path_buf(), 0)];
    while let Some((current, depth)) = pending.pop() {
        let meta = std::fs::metadata(&current).ok()?;
        newest = newest.max(entry(&mut hash, dir, &current, &meta));
        let mut children: Vec<_> = std::fs::read_dir(&current)
            .ok()?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()
            .ok()?;
        // Directory order is the file system's: sort for a stable stamp.
        children.sort();
        for child in children {
            let meta = std::fs::metadata(&child).ok()?;
            if meta.is_dir() {
                if depth + 1 >= MAX_DEPTH {
                    return None;
                }
                pending.push((child, depth + 1));
            } else {
                newest = newest.max(entry(&mut hash, dir, &child, &meta));
            }
        }
    }
    Some((DirStamp(hash.finalize().into()), newest))
}

/// Adds one entry to `hash`; its newest timestamp.
fn entry(hash: &mut Sha256, root: &Path, path: &Path, meta: &std::fs::Metadata) -> SystemTime {
    let relative = path.strip_prefix(root).unwrap_or(path);
    hash.update(relative.as_os_str().as_encoded_bytes());
    hash.update([0]);
    for field in [
        meta.mode() as i64,
        meta.uid() as i64,
        meta.ino() as i64,
        meta.dev() as i64,
        meta.size() as i64,
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ctime(),
        meta.ctime_nsec(),
    ] {
        hash.update(field.to_le_bytes());
    }
    let ctime = SystemTime::UNIX_EPOCH
        + Duration::new(
            u64::try_from(meta.ctime()).unwrap_or(0),
            u32::try_from(meta.ctime_nsec()).unwrap_or(0),
        );
    meta.modified().unwrap_or(ctime).max(ctime)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_stamp_changes_with_content_mode_and_entries_only() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("bundle.yaml"), "a").unwrap();
        let first = stamp(dir.path()).unwrap();
        assert_eq!(stamp(dir.path()), Some(first), "stat alone changes nothing");

        std::fs::write(dir.path().join("bundle.yaml"), "ab").unwrap();
        let edited = stamp(dir.path()).unwrap();
        assert_ne!(edited, first);

        let file = dir.path().join("bundle.yaml");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        let chmodded = stamp(dir.path()).unwrap();
        assert_ne!(chmodded, edited);

        std::fs::create_dir(dir.path().join("tools")).unwrap();
        assert_ne!(stamp(dir.path()).unwrap(), chmodded);
    }

    #[test]
    fn a_fresh_change_is_never_trusted_and_a_dangling_link_has_no_stamp() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("bundle.yaml"), "a").unwrap();
        let recorded = record(dir.path());
        assert_eq!(recorded, Recorded::Unsettled, "written just now");
        assert!(!recorded.matches(stamp(dir.path())));

        std::os::unix::fs::symlink(dir.path().join("gone"), dir.path().join("link")).unwrap();
        assert_eq!(stamp(dir.path()), None);
        assert_eq!(record(dir.path()), Recorded::Unsettled);
    }
}
