//! `structured-agents validate`: checks bundles and reports every problem
//! with file, line and key path.

use std::path::{Path, PathBuf};

use clap::Args;

use crate::bundle::{self, HistoryPlugins, LoadContext};
use crate::model::ModelCatalog;

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Bundle directories, or directories holding bundle directories.
    pub paths: Vec<PathBuf>,
    /// Check this daemon config and everything it points at: its bundles
    /// directory (with its endpoints), model configs and plugins.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
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
    if args.paths.is_empty() && args.config.is_none() {
        anyhow::bail!("give bundle directories to validate, or --config FILE");
    }
    tokio::task::spawn_blocking(move || {
        let mut failed = 0;
        let mut paths = args.paths.clone();
        let mut endpoints = None;
        let mut catalog = ModelCatalog::builtin();
        let mut histories = HistoryPlugins::default();
        if let Some(file) = &args.config {
            match crate::config::Config::load(Some(file)) {
                Ok(config) => {
                    println!("ok   config {}", file.display());
                    for problem in config.check_paths() {
                        eprintln!("{}: {problem}", file.display());
                        failed += 1;
                    }
                    // The same key checks as `serve` and every reload.
                    let keys = crate::access::KeyRing::load(&config)
                        .and_then(|ring| ring.check_exposure(config.server.listen));
                    if let Err(e) = keys {
                        eprintln!("{}: {e}", file.display());
                        failed += 1;
                    }
                    endpoints = Some(
                        config
                            .endpoints
                            .iter()
                            .map(|(name, ep)| (name.clone(), ep.server))
                            .collect::<std::collections::BTreeMap<_, _>>(),
                    );
                    let (plugins, errors) = load_plugins_transient(&config.paths.plugins_dir);
                    for e in &errors {
                        eprintln!("{e}");
                        failed += 1;
                    }
                    for p in plugins.list() {
                        println!(
                            "ok   plugin {} {} ({})",
                            p.name,
                            p.version,
                            p.file.display()
                        );
                    }
                    // Model plugin libraries are models a bundle may name.
                    let mut refused = Vec::new();
                    let libraries = crate::registry::model_plugin::libraries(
                        &plugins,
                        &ModelCatalog::builtin(),
                        &mut refused,
                    );
                    // History plugin libraries are strategies `limits.history` may name.
                    histories =
                        HistoryPlugins::of(&plugins, &HistoryPlugins::default(), &mut refused);
                    for e in &refused {
                        eprintln!("{e}");
                        failed += 1;
                    }
                    match ModelCatalog::load_with(&config.paths.models_dir, &libraries) {
                        Ok(c) => catalog = c,
                        Err(e) => {
                            eprintln!("{e}");
                            failed += 1;
                        }
                    }
                    paths.push(config.paths.bundles_dir.clone());
                }
                Err(e) => {
                    eprintln!("{e}");
                    return Ok(1);
                }
            }
        }
        let ctx = LoadContext {
            endpoints: endpoints.as_ref(),
            models: &catalog,
            histories: &histories,
        };
        for path in &paths {
            let dirs = match bundle_dirs(path) {
                Ok(d) if d.is_empty() => {
                    if args.config.is_none() {
                        eprintln!(
                            "{}: no bundle.yaml here or in its subdirectories",
                            path.display()
                        );
                        failed += 1;
                    }
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

/// Loads a plugins directory for a one-off command (validate, tools): the
/// content-addressed copies go to a temporary cache that is removed again
/// (the loaded libraries stay mapped). Blocking.
pub fn load_plugins_transient(
    dir: &Path,
) -> (
    std::sync::Arc<crate::plugins::PluginRegistry>,
    Vec<crate::plugins::PluginLoadError>,
) {
    let cache =
        std::env::temp_dir().join(format!("structured-agents-plugins-{}", std::process::id()));
    let (registry, errors) =
        crate::plugins::PluginRegistry::load_dir(dir, &cache, &Default::default());
    let _ = std::fs::remove_dir_all(&cache);
    (std::sync::Arc::new(registry), errors)
}
