//! The watched directories are a trust boundary: whoever can write a bundle
//! runs code as the daemon user (process tools, MCP servers). So the bundles
//! and models directories, and each bundle directory, must not be group- or
//! world-writable and must belong to the daemon's user or root, unless the
//! operator opts out with `paths.allow_insecure_dirs = true`.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// Why a directory is not trusted, as one line that says how to fix it
/// (callers name the directory).
pub fn check_dir(dir: &Path, allow_insecure: bool) -> Result<(), String> {
    if allow_insecure {
        return Ok(());
    }
    let meta = std::fs::metadata(dir).map_err(|e| e.to_string())?;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(format!(
            "is group- or world-writable (mode {mode:o}); anyone who can write here runs code as the daemon user. Fix: chmod go-w {} (or set paths.allow_insecure_dirs = true)",
            dir.display()
        ));
    }
    let owner = meta.uid();
    let me = nix::unistd::geteuid().as_raw();
    if owner != me && owner != 0 {
        return Err(format!(
            "is owned by uid {owner}, not by the daemon's user (uid {me}) or root; that user could run code as the daemon user. Fix: chown it to the daemon's user or root (or set paths.allow_insecure_dirs = true)"
        ));
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
        let err = check_dir(dir.path(), false).unwrap_err();
        assert!(
            err.contains("mode 775") && err.contains("chmod go-w"),
            "{err}"
        );
        assert!(check_dir(dir.path(), true).is_ok());
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o757)).unwrap();
        assert!(check_dir(dir.path(), false).is_err());
    }

    #[test]
    fn a_directory_of_another_user_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        if nix::unistd::geteuid().is_root() {
            // As root, hand the directory to another user to see the refusal.
            std::os::unix::fs::chown(dir.path(), Some(4242), None).unwrap();
            let err = check_dir(dir.path(), false).unwrap_err();
            assert!(err.contains("owned by uid 4242"), "{err}");
        } else {
            // As another user, the root-owned /usr is trusted and /tmp (sticky,
            // world-writable) is not.
            assert!(check_dir(Path::new("/usr"), false).is_ok());
            assert!(check_dir(Path::new("/tmp"), false).is_err());
        }
    }
}
