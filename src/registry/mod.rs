//! The registry: the live, hot-reloaded snapshot of bundles (each bound to its
//! tools and model backend) and model-plugin configs. A reload builds a whole
//! new snapshot off to the side and swaps it in atomically; a bundle that
//! fails keeps its last good version, marked degraded. Jobs hold an
//! `Arc<LoadedBundle>` and so keep the version they started with.
//!
//! This module must not know about the queue, workers or HTTP.

mod limited;
pub mod trust;
pub mod watch;

pub use limited::LimitedBackend;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use serde::Serialize;

use crate::bundle::{self, Bundle, BundleErrors, EndpointRef, LoadContext, ToolEnv};
use crate::client::{ChatBackend, EndpointSettings, HttpBackend, ScriptedBackend};
use crate::config::{Config, EndpointKind};
use crate::model::ModelCatalog;
use crate::tools::ToolEngine;

/// A bundle ready to run: validated, tools bound, backend chosen.
pub struct LoadedBundle {
    pub bundle: Bundle,
    pub tools: Arc<ToolEngine>,
    pub backend: Arc<dyn ChatBackend>,
    pub loaded_at: String,
}

impl LoadedBundle {
    pub fn name(&self) -> &str {
        self.bundle.name()
    }

    pub fn version(&self) -> &str {
        self.bundle.version()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BundleStatus {
    /// The directory's current content is loaded.
    Ok,
    /// The last edit is broken; the last good version keeps serving.
    Degraded,
    /// Never loaded successfully; jobs for it are refused.
    Invalid,
}

/// A bundle as the registry tracks it.
#[derive(Clone)]
pub struct BundleEntry {
    pub name: String,
    pub dir: PathBuf,
    pub current: Option<Arc<LoadedBundle>>,
    pub status: BundleStatus,
    /// The errors of the last failed load, located (file:line: key: message).
    pub errors: Vec<String>,
}

/// One consistent view of everything loaded.
pub struct Snapshot {
    pub generation: u64,
    pub bundles: BTreeMap<String, BundleEntry>,
    /// Directories that hold no usable bundle and whose name is taken by a
    /// healthy bundle (or by an earlier directory): shown with their errors,
    /// never in place of the bundle that owns the name.
    pub rejected: Vec<BundleEntry>,
    pub models: Arc<ModelCatalog>,
}

impl Snapshot {
    pub fn bundle(&self, name: &str) -> Option<&Arc<LoadedBundle>> {
        self.bundles.get(name).and_then(|e| e.current.as_ref())
    }

    /// Every bundle that can run now, in name order.
    pub fn loaded(&self) -> impl Iterator<Item = &Arc<LoadedBundle>> {
        self.bundles.values().filter_map(|e| e.current.as_ref())
    }
}

/// What a reload did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReloadReport {
    pub generation: u64,
    /// `applied`, `partial` (some bundles failed) or `rejected` (nothing changed).
    pub result: &'static str,
    pub added: Vec<String>,
    pub changed: Vec<String>,
    pub removed: Vec<String>,
    pub failed: Vec<String>,
    pub errors: Vec<String>,
}

impl ReloadReport {
    /// Whether the set of runnable bundles or their content changed.
    pub fn bundles_changed(&self) -> bool {
        !(self.added.is_empty() && self.changed.is_empty() && self.removed.is_empty())
    }
}

/// Problems that reject a whole reload.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("cannot read bundles directory {dir}: {source} (check paths.bundles_dir)")]
    BundlesDir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("model configs: {0}")]
    Models(String),
    #[error("refusing to load: {0}")]
    Untrusted(String),
    #[error("endpoint `{name}`: {detail}")]
    Endpoint { name: String, detail: String },
}

/// The daemon's live registry.
pub struct Registry {
    config: Arc<Config>,
    endpoints: BTreeMap<String, Arc<dyn ChatBackend>>,
    tool_env: ToolEnv,
    snapshot: RwLock<Arc<Snapshot>>,
    /// Every content loaded in this process, by (name, digest), so a retried
    /// or resumed job finds the exact content it was pinned to.
    versions: Mutex<HashMap<(String, String), Arc<LoadedBundle>>>,
    reload_lock: tokio::sync::Mutex<()>,
}

impl Registry {
    /// Builds the endpoint clients; no bundle is loaded until `reload`.
    pub fn new(config: Arc<Config>, tool_env: ToolEnv) -> Result<Arc<Self>, RegistryError> {
        let endpoints = build_endpoints(&config)?;
        Ok(Arc::new(Self {
            config,
            endpoints,
            tool_env,
            snapshot: RwLock::new(Arc::new(Snapshot {
                generation: 0,
                bundles: BTreeMap::new(),
                rejected: Vec::new(),
                models: Arc::new(ModelCatalog::builtin()),
            })),
            versions: Mutex::new(HashMap::new()),
            reload_lock: tokio::sync::Mutex::new(()),
        }))
    }

    pub fn snapshot(&self) -> Arc<Snapshot> {
        match self.snapshot.read() {
            Ok(s) => s.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The daemon config the registry was built with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn endpoints(&self) -> &BTreeMap<String, Arc<dyn ChatBackend>> {
        &self.endpoints
    }

    /// The bundle to run: exactly the pinned content (by digest) if given and
    /// still known, else the current one. `None` when the pinned content is
    /// gone: a job never runs different content than it started with.
    pub fn resolve(&self, name: &str, digest: Option<&str>) -> Option<Arc<LoadedBundle>> {
        if let Some(d) = digest {
            let key = (name.to_string(), d.to_string());
            if let Some(found) = self.versions.lock().ok().and_then(|m| m.get(&key).cloned()) {
                return Some(found);
            }
            return self
                .snapshot()
                .bundle(name)
                .filter(|b| b.bundle.digest == d)
                .cloned();
        }
        self.snapshot().bundle(name).cloned()
    }

    /// Reloads bundles and model configs. Concurrent calls run one at a time.
    pub async fn reload(self: &Arc<Self>) -> Result<ReloadReport, RegistryError> {
        let _guard = self.reload_lock.lock().await;
        let this = self.clone();
        let built = tokio::task::spawn_blocking(move || this.build_next())
            .await
            .map_err(|e| RegistryError::Models(format!("reload task failed: {e}")))??;
        let (next, report) = built;
        {
            let mut versions = self.versions.lock().unwrap_or_else(|p| p.into_inner());
            for entry in next.bundles.values() {
                if let Some(b) = &entry.current {
                    versions
                        .entry((b.name().to_string(), b.bundle.digest.clone()))
                        .or_insert_with(|| b.clone());
                }
            }
        }
        match self.snapshot.write() {
            Ok(mut s) => *s = Arc::new(next),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(next),
        }
        Ok(report)
    }

    /// Builds the next snapshot from disk (blocking).
    fn build_next(&self) -> Result<(Snapshot, ReloadReport), RegistryError> {
        let previous = self.snapshot();
        let allow_insecure = self.config.paths.allow_insecure_dirs;
        for dir in [
            &self.config.paths.bundles_dir,
            &self.config.paths.models_dir,
        ] {
            if dir.exists() {
                trust::check_dir(dir, allow_insecure)
                    .map_err(|why| RegistryError::Untrusted(format!("{}: {why}", dir.display())))?;
            }
        }
        let models = Arc::new(load_models(&self.config.paths.models_dir)?);
        let dirs = bundle_dirs(&self.config.paths.bundles_dir)?;
        let endpoint_servers = self
            .config
            .endpoints
            .iter()
            .map(|(name, ep)| (name.clone(), ep.server))
            .collect();
        let ctx = LoadContext {
            endpoints: Some(&endpoint_servers),
            models: &models,
        };

        let previous_by_dir: HashMap<&Path, &BundleEntry> = previous
            .bundles
            .values()
            .map(|e| (e.dir.as_path(), e))
            .collect();
        let mut report = ReloadReport {
            generation: previous.generation + 1,
            ..Default::default()
        };
        let mut bundles: BTreeMap<String, BundleEntry> = BTreeMap::new();
        let mut rejected: Vec<BundleEntry> = Vec::new();
        let mut broken: Vec<(PathBuf, Option<&BundleEntry>, Vec<String>)> = Vec::new();

        // Healthy directories take their names first, so a broken or
        // duplicate directory can never displace a healthy bundle.
        for dir in dirs {
            let before = previous_by_dir.get(dir.as_path()).copied();
            let trusted = trust::check_dir(&dir, allow_insecure).map_err(|message| {
                BundleErrors(vec![bundle::BundleError {
                    file: dir.clone(),
                    line: None,
                    path: String::new(),
                    message,
                }])
            });
            let loaded = trusted
                .and_then(|()| bundle::load_dir(&dir, &ctx))
                .and_then(|b| {
                    if let Some(prev) = before.and_then(|e| e.current.as_ref()).filter(|p| {
                        p.bundle.digest == b.digest
                                && p.name() == b.name()
                                // An MCP server announced new tools: bind again.
                                && !p.tools.stale()
                    }) {
                        return Ok(prev.clone());
                    }
                    self.bind(b)
                });
            match loaded {
                Ok(loaded) => {
                    let name = loaded.name().to_string();
                    if let Some(existing) = bundles.get(&name) {
                        let message = format!(
                            "{}: bundle name {name:?} is already used by {}; rename one of them",
                            dir.display(),
                            existing.dir.display()
                        );
                        tracing::warn!(bundle_dir = %dir.display(), error = %message, "bundle rejected");
                        report.failed.push(name.clone());
                        report.errors.push(message.clone());
                        rejected.push(BundleEntry {
                            name,
                            dir,
                            current: None,
                            status: BundleStatus::Invalid,
                            errors: vec![message],
                        });
                        continue;
                    }
                    match before.and_then(|e| e.current.as_ref()) {
                        None => report.added.push(name.clone()),
                        Some(prev) if !Arc::ptr_eq(prev, &loaded) => {
                            report.changed.push(name.clone())
                        }
                        Some(_) => {}
                    }
                    bundles.insert(
                        name.clone(),
                        BundleEntry {
                            name,
                            dir,
                            current: Some(loaded),
                            status: BundleStatus::Ok,
                            errors: vec![],
                        },
                    );
                }
                Err(errors) => {
                    let messages: Vec<String> = errors.0.iter().map(ToString::to_string).collect();
                    for m in &messages {
                        tracing::warn!(bundle_dir = %dir.display(), error = %m, "bundle rejected");
                    }
                    report.errors.extend(messages.iter().cloned());
                    broken.push((dir, before, messages));
                }
            }
        }
        // A broken directory keeps serving its last good version (degraded)
        // under its name if the name is still free; otherwise it is listed
        // as rejected.
        for (dir, before, messages) in broken {
            let (name, current, status) = match before {
                Some(prev) if prev.current.is_some() => (
                    prev.name.clone(),
                    prev.current.clone(),
                    BundleStatus::Degraded,
                ),
                _ => (dir_name(&dir), None, BundleStatus::Invalid),
            };
            report.failed.push(name.clone());
            let entry = BundleEntry {
                name: name.clone(),
                dir,
                current,
                status,
                errors: messages,
            };
            match bundles.entry(name) {
                std::collections::btree_map::Entry::Vacant(slot) => {
                    slot.insert(entry);
                }
                std::collections::btree_map::Entry::Occupied(_) => rejected.push(BundleEntry {
                    current: None,
                    status: BundleStatus::Invalid,
                    ..entry
                }),
            }
        }
        for name in previous.bundles.keys() {
            if !bundles.contains_key(name) {
                report.removed.push(name.clone());
            }
        }
        report.result = if report.failed.is_empty() {
            "applied"
        } else {
            "partial"
        };
        Ok((
            Snapshot {
                generation: report.generation,
                bundles,
                rejected,
                models,
            },
            report,
        ))
    }

    fn bind(&self, mut bundle: Bundle) -> Result<Arc<LoadedBundle>, BundleErrors> {
        let locate = |message: String| {
            BundleErrors(vec![bundle::BundleError {
                file: bundle.file.clone(),
                line: None,
                path: "model.endpoint".into(),
                message,
            }])
        };
        let backend = match &bundle.endpoint {
            EndpointRef::Named(_) => {
                crate::endpoints::backend_for(&bundle.endpoint, &self.endpoints)
            }
            other => crate::endpoints::backend_for(other, &BTreeMap::new())
                .map(|b| LimitedBackend::wrap(b, DEFAULT_URL_CONCURRENCY)),
        }
        .map_err(|e| locate(e.to_string()))?;
        let tools = bundle::build_tools(&mut bundle, &self.tool_env)?;
        Ok(Arc::new(LoadedBundle {
            bundle,
            tools: Arc::new(tools),
            backend,
            loaded_at: crate::events::timestamp_now(),
        }))
    }
}

/// In-flight requests to an endpoint given as a URL in a bundle.
const DEFAULT_URL_CONCURRENCY: usize = 16;

fn dir_name(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| dir.display().to_string())
}

fn bundle_dirs(root: &Path) -> Result<Vec<PathBuf>, RegistryError> {
    let entries = std::fs::read_dir(root).map_err(|source| RegistryError::BundlesDir {
        dir: root.to_path_buf(),
        source,
    })?;
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        // Hidden and editor-temporary directories are not bundles.
        .filter(|p| !dir_name(p).starts_with('.'))
        .filter(|p| p.is_dir() && bundle::bundle_file(p).is_some())
        .collect();
    dirs.sort();
    Ok(dirs)
}

fn load_models(dir: &Path) -> Result<ModelCatalog, RegistryError> {
    ModelCatalog::load(dir).map_err(|e| RegistryError::Models(e.to_string()))
}

fn build_endpoints(
    config: &Config,
) -> Result<BTreeMap<String, Arc<dyn ChatBackend>>, RegistryError> {
    let mut out = BTreeMap::new();
    for (name, ep) in &config.endpoints {
        let backend: Arc<dyn ChatBackend> = match ep.kind {
            EndpointKind::Http => {
                let base_url = ep.base_url.clone().unwrap_or_default();
                let mut settings = EndpointSettings::new(name.clone(), base_url);
                settings.connect_timeout = ep.connect_timeout.into();
                settings.request_timeout = ep.request_timeout.into();
                settings.max_retries = ep.max_retries;
                settings.backoff_max = ep.backoff_max.into();
                settings.max_response_bytes = ep.max_response_bytes;
                settings.provider = ep.provider.clone();
                if let Some(var) = &ep.api_key_env {
                    settings.api_key =
                        Some(std::env::var(var).map_err(|_| RegistryError::Endpoint {
                            name: name.clone(),
                            detail: format!(
                                "the API key variable `{var}` (api_key_env) is not set"
                            ),
                        })?);
                }
                Arc::new(
                    HttpBackend::new(settings).map_err(|e| RegistryError::Endpoint {
                        name: name.clone(),
                        detail: e.to_string(),
                    })?,
                )
            }
            EndpointKind::Scripted => {
                let path = ep.script.clone().unwrap_or_default();
                let script =
                    crate::mock::Script::load(&path).map_err(|e| RegistryError::Endpoint {
                        name: name.clone(),
                        detail: e.to_string(),
                    })?;
                Arc::new(ScriptedBackend::new(name.clone(), script))
            }
        };
        out.insert(
            name.clone(),
            LimitedBackend::wrap(backend, ep.max_concurrent),
        );
    }
    Ok(out)
}
