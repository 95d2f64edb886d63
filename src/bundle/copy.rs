//! A bundle directory copied whole to a work directory of the daemon's or
//! a command's own (a verify's runs, `eval --dir`'s daemon): symlinks
//! followed, `__pycache__` left out, depth bounded against a link loop.

use std::path::{Path, PathBuf};

/// How deep a bundle directory may nest.
const MAX_DEPTH: usize = 32;

/// Why a bundle directory could not be copied, naming the path at fault.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("{}: nested deeper than 32 directories (a symlink loop?)", .0.display())]
    TooDeep(PathBuf),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Copies the bundle directory `from` to `to` (created). Blocking.
pub fn copy_dir(from: &Path, to: &Path) -> Result<(), CopyError> {
    copy_at(from, to, 0)
}

fn copy_at(from: &Path, to: &Path, depth: usize) -> Result<(), CopyError> {
    if depth >= MAX_DEPTH {
        return Err(CopyError::TooDeep(from.to_path_buf()));
    }
    std::fs::create_dir_all(to).map_err(at(to))?;
    for entry in std::fs::read_dir(from).map_err(at(from))? {
        let entry = entry.map_err(at(from))?;
        if entry.file_name() == "__pycache__" {
            continue;
        }
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        if std::fs::metadata(&source).map_err(at(&source))?.is_dir() {
            copy_at(&source, &target, depth + 1)?;
        } else {
            std::fs::copy(&source, &target).map_err(at(&source))?;
        }
    }
    Ok(())
}

/// An IO error at `path`.
fn at(path: &Path) -> impl Fn(std::io::Error) -> CopyError + '_ {
    move |source| CopyError::Io {
        path: path.to_path_buf(),
        source,
    }
}
