//! `structured-agents validate`: checks bundles and reports every problem
//! with file, line and key path.

use std::path::{Path, PathBuf};

use clap::Args;

use crate::bundle::{self, LoadContext};
use crate::model::ModelCatalog;

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Bundle directories, or directories holding bundle directories.
    pub paths: Vec<PathBuf>,
}

/// The bundle directories under `path`: itself if it holds a bundle file,
/// else its subdirectories that do.
pub fn bundle_dirs(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    if bundle::bundle_file(path).is_some() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(path)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir() && bundle::bundle_file(p).is_some())
        .collect();
    dirs.sort();
    Ok(dirs)
}

pub async fn validate(args: ValidateArgs) -> anyhow::Result<i32> {
    if args.paths.is_empty() {
        anyhow::bail!("give at least one bundle directory to validate");
    }
    tokio::task::spawn_blocking(move || {
        let catalog = ModelCatalog::builtin();
        let ctx = LoadContext {
            endpoints: None,
            models: &catalog,
        };
        let mut failed = 0;
        for path in &args.paths {
            let dirs = match bundle_dirs(path) {
                Ok(d) if d.is_empty() => {
                    eprintln!(
                        "{}: no bundle.yaml here or in its subdirectories",
                        path.display()
                    );
                    failed += 1;
                    continue;
                }
                Ok(d) => d,
                Err(e) => {
                    eprintln!("{}: {e}", path.display());
                    failed += 1;
                    continue;
                }
            };
            for dir in dirs {
                match bundle::load_dir(&dir, &ctx) {
                    Ok(b) => println!("ok   {} {} ({})", b.name(), b.version(), dir.display()),
                    Err(errors) => {
                        failed += 1;
                        for e in &errors.0 {
                            eprintln!("{e}");
                        }
                    }
                }
            }
        }
        Ok(if failed == 0 { 0 } else { 1 })
    })
    .await?
}
