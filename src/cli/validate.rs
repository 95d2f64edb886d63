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
        let mut site = Site::default();
        if let Some(file) = &args.config {
            match crate::config::Config::load(Some(file)) {
                Ok(config) => {
                    println!("ok   config {}", file.display());
                    failed += site.check_config(&config, file);
                    paths.push(config.paths.bundles_dir.clone());
                }
                Err(e) => {
                    eprintln!("{e}");
                    return Ok(1);
                }
            }
        }
        let ctx = LoadContext {
            endpoints: site.endpoints.as_ref(),
            models: &site.catalog,
            histories: &site.histories,
        };
        for path in &paths {
            failed += validate_path(path, &ctx, args.config.is_none());
        }
        Ok(if failed == 0 { 0 } else { 1 })
    })
    .await?
}

/// What a config gives its bundles to be checked against: its endpoints,
/// its model configs (with the model plugin libraries) and its history
/// plugins; without a config, the built-in ones.
struct Site {
    endpoints: Option<std::collections::BTreeMap<String, crate::model::ServerKind>>,
    catalog: ModelCatalog,
    histories: HistoryPlugins,
}

impl Default for Site {
    fn default() -> Self {
        Self {
            endpoints: None,
            catalog: ModelCatalog::builtin(),
            histories: HistoryPlugins::default(),
        }
    }
}

impl Site {
    /// Checks what `config` (from `file`) points at — its directories, its
    /// keys (as `serve` and every reload do), its plugins and model
    /// configs — printing each problem; keeps what the bundles need. The
    /// number of problems.
    fn check_config(&mut self, config: &crate::config::Config, file: &Path) -> usize {
        let mut failed = 0;
        for problem in config.check_paths() {
            eprintln!("{}: {problem}", file.display());
            failed += 1;
        }
        let keys = crate::access::KeyRing::load(config)
            .and_then(|ring| ring.check_exposure(config.server.listen));
        if let Err(e) = keys {
            eprintln!("{}: {e}", file.display());
            failed += 1;
        }
        self.endpoints = Some(
            config
                .endpoints
                .iter()
                .map(|(name, ep)| (name.clone(), ep.server))
                .collect(),
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
        self.histories = HistoryPlugins::of(&plugins, &HistoryPlugins::default(), &mut refused);
        for e in &refused {
            eprintln!("{e}");
            failed += 1;
        }
        match ModelCatalog::load_with(&config.paths.models_dir, &libraries) {
            Ok(c) => self.catalog = c,
            Err(e) => {
                eprintln!("{e}");
                failed += 1;
            }
        }
        failed
    }
}

/// Checks the bundles at `path` (a bundle directory or one holding them),
/// printing each; the number that failed. A path with no bundle fails
/// when `must_hold_bundles` (it was named on the command line).
fn validate_path(path: &Path, ctx: &LoadContext<'_>, must_hold_bundles: bool) -> usize {
    let dirs = match bundle_dirs(path) {
        Ok(d) if d.is_empty() => {
            if must_hold_bundles {
                eprintln!(
                    "{}: no bundle.yaml here or in its subdirectories",
                    path.display()
                );
                return 1;
            }
            return 0;
        }
        Ok(d) => d,
        Err(e) => {
            eprintln!("{}: {e}", path.display());
            return 1;
        }
    };
    let mut failed = 0;
    for dir in dirs {
        match bundle::load_dir(&dir, ctx) {
            Ok(b) => println!("ok   {} {} ({})", b.name(), b.version(), dir.display()),
            Err(errors) => {
                failed += 1;
                for e in &errors.0 {
                    eprintln!("{e}");
                }
            }
        }
    }
    failed
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
