//! The watched directories are a trust boundary: whoever can write a bundle
//! runs code as the daemon user (process tools, MCP servers). So the bundles
//! and models directories, and every file and directory inside a bundle
//! (symlinks judged by their target), must not be group- or world-writable
//! and must belong to the daemon's user or root, unless the operator opts
//! out with `paths.allow_insecure_dirs = true`.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why one directory or file is not trusted, as one line that says how to
/// fix it (callers name the path).
#[derive(Debug, thiserror::Error)]
pub enum Untrusted {
    /// Its metadata cannot be read.
    #[error("{0}")]
    Unreadable(#[from] std::io::Error),
    #[error(
        "is group- or world-writable (mode {mode:o}); anyone who can write here runs code as the daemon user. Fix: chmod go-w {} (or set paths.allow_insecure_dirs = true)",
        .path.display()
    )]
    Writable { path: PathBuf, mode: u32 },
    #[error(
        "is owned by uid {owner}, not by the daemon's user (uid {me}) or root; that user could run code as the daemon user. Fix: chown it to the daemon's user or root (or set paths.allow_insecure_dirs = true)"
    )]
    ForeignOwner { owner: u32, me: u32 },
}

/// Why a bundle's tree is not trusted: the first bad path and what is
/// wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum UntrustedTree {
    #[error("{}: {why}", .path.display())]
    Entry { path: PathBuf, why: Untrusted },
    #[error("{}: {error}", .path.display())]
    Unlisted {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{}: {error} (a dangling symlink?)", .path.display())]
    Dangling {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(
        "{}: nested deeper than {} directories (a symlink loop?)",
        .path.display(),
        MAX_DEPTH
    )]
    TooDeep { path: PathBuf },
    #[error(
        "{}: is not a regular file (a FIFO, socket or device); a bundle holds files and directories only",
        .path.display()
    )]
    NotAFile { path: PathBuf },
}

/// Whether a directory is trusted (see [`Untrusted`]).
pub fn check_dir(dir: &Path, allow_insecure: bool) -> Result<(), Untrusted> {
    if allow_insecure {
        return Ok(());
    }
    let meta = std::fs::metadata(dir)?;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(Untrusted::Writable {
            path: dir.to_path_buf(),
            mode,
        });
    }
    let owner = meta.uid();
    let me = nix::unistd::geteuid().as_raw();
    if owner != me && owner != 0 {
        return Err(Untrusted::ForeignOwner { owner, me });
    }
    Ok(())
}

/// How deep a bundle's tree (symlinked directories included) may go: a
/// symlink loop ends here instead of hanging the reload.
const MAX_DEPTH: usize = 16;

/// Checks `dir` and everything under it (hidden entries too: a writable
/// `.venv` runs code just as well). The error names the first bad path.
pub fn check_tree(dir: &Path, allow_insecure: bool) -> Result<(), UntrustedTree> {
    if allow_insecure {
        return Ok(());
    }
    let mut pending = vec![(dir.to_path_buf(), 0)];
    while let Some((path, depth)) = pending.pop() {
        // Follows symlinks: the target is what runs.
        check_dir(&path, false).map_err(|why| UntrustedTree::Entry {
            path: path.clone(),
            why,
        })?;
        let unlisted = |error| UntrustedTree::Unlisted {
            path: path.clone(),
            error,
        };
        for entry in std::fs::read_dir(&path).map_err(unlisted)? {
            let child = entry.map_err(unlisted)?.path();
            let meta = match std::fs::metadata(&child) {
                Ok(meta) => meta,
                Err(error) => return Err(UntrustedTree::Dangling { path: child, error }),
            };
            if meta.is_dir() {
                if depth + 1 >= MAX_DEPTH {
                    return Err(UntrustedTree::TooDeep { path: child });
                }
                pending.push((child, depth + 1));
            } else if !meta.is_file() {
                // Reading a FIFO or a device would hang or never end.
                return Err(UntrustedTree::NotAFile { path: child });
            } else if let Err(why) = check_dir(&child, false) {
                return Err(UntrustedTree::Entry { path: child, why });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writable_directories_are_refused_unless_allowed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(check_dir(dir.path(), false).is_ok());
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o775)).unwrap();
        let err = check_dir(dir.path(), false).unwrap_err().to_string();
        assert!(
            err.contains("mode 775") && err.contains("chmod go-w"),
            "{err}"
        );
        assert!(check_dir(dir.path(), true).is_ok());
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o757)).unwrap();
        assert!(check_dir(dir.path(), false).is_err());
    }

    #[test]
    fn a_writable_file_or_symlink_target_deep_in_a_bundle_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("b");
        let tools = bundle.join("tools");
        std::fs::create_dir_all(&tools).unwrap();
        for d in [dir.path(), bundle.as_path(), tools.as_path()] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let script = tools.join("run.py");
        std::fs::write(&script, "print(1)").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(check_tree(&bundle, false).is_ok());

        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o666)).unwrap();
        let err = check_tree(&bundle, false).unwrap_err().to_string();
        assert!(
            err.contains("run.py") && err.contains("chmod go-w"),
            "{err}"
        );
        assert!(check_tree(&bundle, true).is_ok());
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();

        // A symlink is judged by its target.
        let outside = dir.path().join("outside.py");
        std::fs::write(&outside, "print(2)").unwrap();
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o646)).unwrap();
        std::os::unix::fs::symlink(&outside, tools.join("link.py")).unwrap();
        let err = check_tree(&bundle, false).unwrap_err().to_string();
        assert!(err.contains("link.py"), "{err}");

        // A writable subdirectory is refused too.
        std::fs::remove_file(tools.join("link.py")).unwrap();
        std::fs::set_permissions(&tools, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = check_tree(&bundle, false).unwrap_err().to_string();
        assert!(err.contains("tools"), "{err}");
    }

    #[test]
    fn a_fifo_in_a_bundle_is_refused_not_read() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(dir.path().join("pipe"))
            .status()
            .unwrap();
        assert!(made.success());
        let err = check_tree(dir.path(), false).unwrap_err().to_string();
        assert!(
            err.contains("pipe") && err.contains("not a regular file"),
            "{err}"
        );
    }

    #[test]
    fn a_symlink_loop_is_refused_not_followed_forever() {
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("b");
        std::fs::create_dir_all(&bundle).unwrap();
        std::fs::set_permissions(&bundle, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink(&bundle, bundle.join("self")).unwrap();
        let err = check_tree(&bundle, false).unwrap_err().to_string();
        assert!(err.contains("symlink loop"), "{err}");
    }

    #[test]
    fn a_directory_of_another_user_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        if nix::unistd::geteuid().is_root() {
            // As root, hand the directory to another user to see the refusal.
            std::os::unix::fs::chown(dir.path(), Some(4242), None).unwrap();
            let err = check_dir(dir.path(), false).unwrap_err().to_string();
            assert!(err.contains("owned by uid 4242"), "{err}");
        } else {
            // As another user, the root-owned /usr is trusted and /tmp (sticky,
            // world-writable) is not.
            assert!(check_dir(Path::new("/usr"), false).is_ok());
            assert!(check_dir(Path::new("/tmp"), false).is_err());
        }
    }
}
