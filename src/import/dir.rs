//! A bundle directory converted: in place (the original file kept beside
//! it) or into a copy of the directory, never into itself.

use std::path::{Path, PathBuf};

use super::{Conversion, ImportError, ImportOptions, convert};

/// What [`import_dir`] did: the conversion of `source` and where it went.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The original bundle file, where it is now.
    pub source: PathBuf,
    pub conversion: Conversion,
    pub written: Written,
}

/// Where [`import_dir`] put the converted bundle.
#[derive(Debug, Clone)]
pub enum Written {
    /// Nothing written (a dry run).
    Nothing,
    /// Converted in place; the original file is kept at `original`.
    InPlace { file: PathBuf, original: PathBuf },
    /// A copy of the bundle directory with the converted file.
    Copy { dir: PathBuf },
}

/// The name an in-place conversion keeps the original file under (not a
/// bundle file, so loads ignore it).
pub const ORIGINAL_BACKUP: &str = "bundle.original.yaml";

/// Converts the original bundle in `dir`: in place (keeping the original
/// file as [`ORIGINAL_BACKUP`]), into a copy of the directory at `out`, or
/// (`dry_run`) nowhere. Blocking.
pub fn import_dir(
    dir: &Path,
    out: Option<&Path>,
    dry_run: bool,
    options: &ImportOptions,
) -> Result<Imported, ImportError> {
    let file = crate::bundle::bundle_file(dir)
        .ok_or_else(|| ImportError::NoBundleFile(dir.to_path_buf()))?;
    let text = std::fs::read_to_string(&file).map_err(|e| ImportError::Read {
        file: file.clone(),
        source: e,
    })?;
    let conversion = convert(&text, dir, &file, options)?;
    if dry_run {
        return Ok(Imported {
            source: file,
            conversion,
            written: Written::Nothing,
        });
    }
    let write = |path: &Path, content: &str| {
        std::fs::write(path, content).map_err(|e| ImportError::Write {
            path: path.to_path_buf(),
            source: e,
        })
    };
    let written = match out {
        Some(target) => {
            // Copying a directory into itself would never end.
            let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
            if absolute(target).starts_with(absolute(dir)) {
                return Err(ImportError::OutInside {
                    out: target.to_path_buf(),
                    dir: dir.to_path_buf(),
                });
            }
            let occupied =
                std::fs::read_dir(target).is_ok_and(|mut entries| entries.next().is_some());
            if occupied {
                return Err(ImportError::OutNotEmpty(target.to_path_buf()));
            }
            copy_dir(dir, target, &file)?;
            write(&target.join("bundle.yaml"), &conversion.yaml)?;
            Written::Copy {
                dir: target.to_path_buf(),
            }
        }
        None => {
            let backup = dir.join(ORIGINAL_BACKUP);
            if backup.exists() {
                return Err(ImportError::BackupExists(backup));
            }
            std::fs::rename(&file, &backup).map_err(|e| ImportError::Write {
                path: backup.clone(),
                source: e,
            })?;
            let target = dir.join("bundle.yaml");
            write(&target, &conversion.yaml)?;
            Written::InPlace {
                file: target,
                original: backup,
            }
        }
    };
    let source = match &written {
        Written::InPlace { original, .. } => original.clone(),
        _ => file,
    };
    Ok(Imported {
        source,
        conversion,
        written,
    })
}

/// Copies `from` into `to` (created), every file but `skip` (the original
/// bundle file, replaced by the converted one).
fn copy_dir(from: &Path, to: &Path, skip: &Path) -> Result<(), ImportError> {
    let write_err = |path: &Path, e| ImportError::Write {
        path: path.to_path_buf(),
        source: e,
    };
    let read_err = |path: &Path, e| ImportError::Read {
        file: path.to_path_buf(),
        source: e,
    };
    std::fs::create_dir_all(to).map_err(|e| write_err(to, e))?;
    for entry in std::fs::read_dir(from).map_err(|e| read_err(from, e))? {
        let entry = entry.map_err(|e| read_err(from, e))?;
        let path = entry.path();
        if path == skip {
            continue;
        }
        let target = to.join(entry.file_name());
        if path.is_dir() {
            copy_dir(&path, &target, skip)?;
        } else {
            std::fs::copy(&path, &target).map_err(|e| write_err(&target, e))?;
        }
    }
    Ok(())
}
