//! The registry: the live snapshot of everything the daemon loaded from its
//! inputs — the daemon config's live sections (endpoints, agents, observers,
//! runtime, token), the plugins directory, the model-plugin configs and the
//! bundles, each bound to its tools and model backend. A reload builds a
//! whole new snapshot off to the side and swaps it in atomically; a bundle
//! that fails keeps its last good version, marked degraded. Jobs hold an
//! `Arc<LoadedBundle>` and so keep the version they started with.
//!
//! `reload` owns the pipeline every trigger goes through; `inputs` declares,
//! once, what a binding depends on outside its bundle (from which the reuse
//! check, the identity and the live settings are derived); `reuse` decides,
//! before anything is read, which bundle directories to load again (their
//! `stamp`, the watcher's changed paths, the inputs every binding shares);
//! `build` loads those and carries the rest over into a snapshot; `diff`
//! says what changed. This module must not know about the queue, workers or
//! HTTP.

mod build;
pub mod diff;
mod directory;
mod identity;
mod inputs;
mod last_good;
mod limited;
pub mod model_plugin;
mod names;
mod record;
mod releases;
pub mod reload;
mod reuse;
mod served;
mod stamp;
mod store;
pub mod tool_run;
pub mod trust;
pub mod watch;

#[cfg(test)]
mod tests;

pub use directory::{DirectoryAgent, agent_query};
pub use identity::{BundleIdentity, NESTED_PIN_STEP, NestedPin};
pub use limited::LimitedBackend;
pub use releases::{Decision, ReleaseVerdict, Releases};
pub use reload::{ReloadHandle, Reloader};

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use serde::Serialize;

use crate::bundle::Bundle;
use crate::client::ChatBackend;
use crate::config::Config;
use crate::events::daemon::{BundleCounts, KindChanges};
use crate::model::ModelCatalog;
use crate::plugins::{PluginObserver, PluginRegistry};
use crate::tools::ToolEngine;
use crate::types::DeclaredTools;

/// A bundle ready to run: validated, tools bound, backend chosen.
pub struct LoadedBundle {
    pub bundle: Bundle,
    /// What jobs running it are pinned to (its content as bound).
    pub identity: BundleIdentity,
    pub tools: Arc<ToolEngine>,
    pub backend: Arc<dyn ChatBackend>,
    pub loaded_at: String,
    /// Which bind this is (process-wide): a rebind of the same content is
    /// another one (an MCP server's tools changed).
    pub bind: u64,
}

impl LoadedBundle {
    /// A bind of `bundle`, as `identity`, to its tools and backend, stamped now.
    pub fn new(
        bundle: Bundle,
        identity: BundleIdentity,
        tools: Arc<ToolEngine>,
        backend: Arc<dyn ChatBackend>,
    ) -> Self {
        Self {
            bundle,
            identity,
            tools,
            backend,
            loaded_at: crate::events::timestamp_now(),
            bind: BINDS.fetch_add(1, Ordering::Relaxed),
        }
    }

    pub fn name(&self) -> &str {
        self.bundle.name()
    }

    pub fn version(&self) -> &str {
        self.bundle.version()
    }

    /// The request shapes of a run offered `tools` instead of this bind's
    /// own (a job's `tools` subset, the router's reach of the directory), or
    /// why its `tool_choice` or grammar cannot take them.
    pub fn shapes_for(
        &self,
        tools: &ToolEngine,
    ) -> Result<crate::bundle::RequestShapes, UnofferableTools> {
        self.bundle
            .request_shapes(self.bundle.target, tools.schemas())
            .map_err(UnofferableTools)
    }
}

/// Why a run cannot be offered a set of tools: the bundle's `tool_choice`
/// or grammar cannot take them (each problem located in the bundle).
#[derive(Debug, thiserror::Error)]
#[error("the bundle's requests cannot offer these tools: {0}")]
pub struct UnofferableTools(#[source] pub crate::bundle::BundleErrors);

/// Numbers binds, so a diff sees a rebind of unchanged content.
static BINDS: AtomicU64 = AtomicU64::new(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
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
    /// A new version of the directory the release gate holds: loaded, not
    /// serving (`current` serves meanwhile).
    pub candidate: Option<Candidate>,
}

/// A version the release gate holds (the bundle's `release:`).
#[derive(Clone)]
pub struct Candidate {
    pub loaded: Arc<LoadedBundle>,
    /// What was decided about it: `None` while its eval is due or running;
    /// rejected, it stays held until the operator promotes it or the
    /// directory holds another version.
    pub decision: Option<Decision>,
}

/// The model servers by endpoint name.
pub type Endpoints = BTreeMap<String, Arc<dyn ChatBackend>>;

/// One consistent view of everything loaded.
pub struct Snapshot {
    pub generation: u64,
    /// The daemon config this snapshot was built from.
    pub config: Arc<Config>,
    /// The API keys (`[auth] keys_file` and the single token).
    pub keys: Arc<crate::access::KeyRing>,
    /// Where the daemon may connect on a tenant's or a bundle's word
    /// (`egress.allow` parsed).
    pub egress: Arc<crate::egress::Egress>,
    pub endpoints: Arc<Endpoints>,
    pub plugins: Arc<PluginRegistry>,
    /// Started observer plugins by name.
    pub observers: Arc<BTreeMap<String, Arc<PluginObserver>>>,
    pub bundles: BTreeMap<String, BundleEntry>,
    /// Directories that hold no usable bundle, or whose bundle's name is
    /// taken: shown with their errors, never in place of the bundle that
    /// owns the name.
    pub rejected: Vec<BundleEntry>,
    pub models: Arc<ModelCatalog>,
    /// The history plugin libraries bundles may name in `limits.history`.
    pub histories: Arc<crate::bundle::HistoryPlugins>,
    /// What it was built from, for the next reload's diff.
    pub inventory: diff::Inventory,
    /// The tools each loaded bundle declares (the only tool names metrics
    /// may use as labels).
    pub declared_tools: Arc<DeclaredTools>,
    /// Each loaded bundle's description and its tools' (for spans).
    pub agents: Arc<crate::types::AgentCatalog>,
    /// The last load of every bundle directory, for the next reload to
    /// reuse what did not change.
    loads: Arc<reuse::DirLoads>,
    /// What every bundle's binding depended on (`None` before the first load).
    inputs: Option<reuse::Inputs>,
}

impl Snapshot {
    /// The snapshot before the first load: nothing but `config`.
    fn empty(config: Arc<Config>) -> Snapshot {
        Snapshot {
            generation: 0,
            // The config was validated when loaded, so its rule parses; if
            // it somehow did not, nothing is reachable until a reload.
            egress: Arc::new(
                config
                    .egress
                    .policy()
                    .unwrap_or_else(|_| crate::egress::Egress::deny_all()),
            ),
            config,
            keys: Arc::default(),
            endpoints: Arc::default(),
            plugins: Arc::default(),
            observers: Arc::default(),
            bundles: BTreeMap::new(),
            rejected: Vec::new(),
            models: Arc::new(ModelCatalog::builtin()),
            histories: Arc::default(),
            inventory: diff::Inventory::default(),
            declared_tools: Arc::default(),
            agents: Arc::default(),
            loads: Arc::default(),
            inputs: None,
        }
    }

    /// The candidate the release gate holds for bundle `name`, if any.
    pub fn candidate(&self, name: &str) -> Option<&Arc<LoadedBundle>> {
        self.bundles
            .get(name)
            .and_then(|e| e.candidate.as_ref())
            .map(|c| &c.loaded)
    }

    pub fn bundle(&self, name: &str) -> Option<&Arc<LoadedBundle>> {
        self.bundles.get(name).and_then(|e| e.current.as_ref())
    }

    /// Every bundle that can run now, in name order.
    pub fn loaded(&self) -> impl Iterator<Item = &Arc<LoadedBundle>> {
        self.bundles.values().filter_map(|e| e.current.as_ref())
    }

    /// Bundle directories by status.
    pub fn bundle_counts(&self) -> BundleCounts {
        let mut counts = BundleCounts::default();
        for entry in self.bundles.values().chain(&self.rejected) {
            match entry.status {
                BundleStatus::Ok => counts.ok += 1,
                BundleStatus::Degraded => counts.degraded += 1,
                BundleStatus::Invalid => counts.invalid += 1,
            }
        }
        counts
    }

    /// The observer plugins that receive `bundle`'s events: the config's
    /// `observers.enabled`, then the bundle's own.
    pub fn observers_of(&self, bundle: &Bundle) -> Vec<Arc<PluginObserver>> {
        self.config
            .observers
            .enabled
            .iter()
            .chain(bundle.raw.observers.iter())
            .filter_map(|name| self.observers.get(name).cloned())
            .collect()
    }
}

/// What applying new inputs did (the reloader makes the outcome of it).
#[derive(Debug, Default)]
pub struct Applied {
    pub generation: u64,
    pub changes: Vec<KindChanges>,
    /// Bundles whose directory failed to load (degraded or invalid).
    pub failed: Vec<String>,
    /// The degraded ones (still serving their last good version), with errors.
    pub degraded: Vec<(String, Vec<String>)>,
    /// Every error, located: bundles, plugins, observers.
    pub errors: Vec<String>,
    /// The bundle directories this reload read again (trust-checked, then
    /// parsed unless refused); every other one kept its last load unread.
    pub read: Vec<PathBuf>,
}

/// Problems that reject a whole reload (the last good snapshot stays).
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
    #[error("API keys: {0}")]
    Access(String),
    #[error("{0}")]
    Egress(#[from] crate::egress::EgressError),
    #[error("the reload task failed: {0}")]
    Task(String),
}

/// Why [`Registry::resolve`] has no bundle to run.
#[derive(Debug, thiserror::Error)]
pub enum Unresolved {
    #[error("it is not loaded; check `structured-agents bundles`")]
    NotLoaded,
    /// The pinned content cannot be had, and why.
    #[error("{0}")]
    PinnedGone(NotRevived),
}

/// Why a pinned version cannot be loaded again from its copy in the store:
/// what is gone or changed, naming the copy. The caller names the job and
/// says what to do (resubmit it).
#[derive(Debug, thiserror::Error)]
pub enum NotRevived {
    #[error("loading its copy failed: {0}")]
    Task(String),
    #[error("{0}")]
    Store(#[from] store::StoreError),
    #[error(
        "its copy in the state directory is gone (pruned after the queue's retention, or deleted)"
    )]
    CopyGone,
    #[error("its copy {} does not load: {errors}", .path.display())]
    CopyInvalid {
        path: PathBuf,
        errors: crate::bundle::BundleErrors,
    },
    #[error(
        "its copy {} (made before copies had manifests) no longer holds content {content}: it is damaged, and its source was edited since",
        .path.display()
    )]
    LegacyCopyChanged { path: PathBuf, content: String },
    #[error("its copy {} holds bundle {found:?}", .path.display())]
    OtherBundle { path: PathBuf, found: String },
    #[error(
        "the endpoint, plugins or agents it was bound to changed since (bound now it would be {now})"
    )]
    InputsChanged { now: String },
    #[error("binding its copy failed: {0}")]
    Bind(crate::bundle::BundleErrors),
}

/// Who holds pins besides the registry: the jobs that have not ended
/// (their own pin and their nested runs'). The daemon implements it over
/// the queue, which the registry does not know; pruning keeps every copy
/// it names.
#[async_trait::async_trait]
pub trait PinHolders: Send + Sync {
    /// Every identity a job that has not ended is pinned to, or why they
    /// cannot be told (then nothing is pruned).
    async fn pinned(&self) -> Result<HashSet<BundleIdentity>, PinsUnknown>;
}

/// Why the pins of the jobs that have not ended cannot be told: which read
/// failed (naming the job). Nothing is pruned then; the next reload tries
/// again.
#[derive(Debug, thiserror::Error)]
pub enum PinsUnknown {
    #[error("listing the jobs that have not ended: {0}")]
    List(String),
    #[error("more than {max} jobs have not ended; their nested pins are not all read")]
    TooMany { max: usize },
    #[error("reading the journal of job {job}: {detail}")]
    Journal { job: String, detail: String },
}

/// The daemon's live registry.
pub struct Registry {
    /// Whether `agent` tools can run (the daemon's runner runs them).
    runs_agents: bool,
    /// Told when an MCP server announces new tools (a reload rebinds).
    tools_changed: Option<crate::tools::mcp::OnToolsChanged>,
    /// Where endpoints' load gates publish what they see and do.
    bus: crate::events::daemon::DaemonBus,
    snapshot: RwLock<Arc<Snapshot>>,
    /// Superseded content still running or pinned, by (name, identity), so
    /// a retried or resumed job finds the exact content it was pinned to.
    versions: Mutex<HashMap<(String, BundleIdentity), Arc<LoadedBundle>>>,
    /// The versions each bundle served since the daemon started, newest
    /// last (at most [`SERVED_KEPT`] a bundle): what an eval compares
    /// against by version, its content revived from the store.
    served: Mutex<HashMap<String, Vec<(String, BundleIdentity)>>>,
    /// One writer of the release decisions at a time (the gate's loop, the
    /// operator's promote and reject).
    releases_lock: Arc<Mutex<()>>,
    reload_lock: tokio::sync::Mutex<()>,
    /// The jobs' pins, which pruning keeps (set by the daemon).
    holders: std::sync::OnceLock<Arc<dyn PinHolders>>,
}

impl crate::egress::Current for Registry {
    fn egress(&self) -> Arc<crate::egress::Egress> {
        self.snapshot().egress.clone()
    }
}

impl Registry {
    /// An empty registry holding `config`; nothing is loaded until `apply`.
    pub fn new(
        config: Arc<Config>,
        tools_changed: Option<crate::tools::mcp::OnToolsChanged>,
        bus: crate::events::daemon::DaemonBus,
    ) -> Arc<Self> {
        Arc::new(Self {
            runs_agents: true,
            tools_changed,
            bus,
            snapshot: RwLock::new(Arc::new(Snapshot::empty(config))),
            versions: Mutex::new(HashMap::new()),
            served: Mutex::new(HashMap::new()),
            releases_lock: Arc::default(),
            reload_lock: tokio::sync::Mutex::new(()),
            holders: std::sync::OnceLock::new(),
        })
    }

    /// Tells pruning whose pins to keep besides the loaded versions: set
    /// once, before the first load.
    pub fn keep_pins_of(&self, holders: Arc<dyn PinHolders>) {
        if self.holders.set(holders).is_err() {
            tracing::warn!("the registry's pin holders were set twice; the first stay");
        }
    }

    pub fn snapshot(&self) -> Arc<Snapshot> {
        match self.snapshot.read() {
            Ok(s) => s.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The bundle to run: exactly the pinned content (by identity) if given
    /// — the current version, one still in memory, or its copy in the store
    /// (verified) loaded again — else the current one. A job never runs
    /// different content than it started with: when the pinned content
    /// cannot be had, the error says why.
    pub async fn resolve(
        self: &Arc<Self>,
        name: &str,
        pinned: Option<&BundleIdentity>,
    ) -> Result<Arc<LoadedBundle>, Unresolved> {
        let snapshot = self.snapshot();
        let current = snapshot.bundle(name).cloned();
        let Some(pinned) = pinned else {
            return current.ok_or(Unresolved::NotLoaded);
        };
        if let Some(current) = current.filter(|b| b.identity == *pinned) {
            return Ok(current);
        }
        // A candidate the release gate holds: its eval's jobs run it.
        if let Some(held) = snapshot.candidate(name).filter(|c| c.identity == *pinned) {
            return Ok(held.clone());
        }
        let key = (name.to_string(), pinned.clone());
        if let Some(kept) = self.versions.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(kept);
        }
        let env = self.build_env();
        let (key, loaded) = tokio::task::spawn_blocking(move || {
            build::revive(&snapshot, &env, &key.0, &key.1).map(|b| (key, b))
        })
        .await
        .map_err(|e| Unresolved::PinnedGone(NotRevived::Task(e.to_string())))?
        .map_err(Unresolved::PinnedGone)?;
        let mut versions = self.versions.lock().unwrap_or_else(|p| p.into_inner());
        Ok(versions.entry(key).or_insert(loaded).clone())
    }

    fn build_env(&self) -> build::BuildEnv {
        build::BuildEnv {
            runs_agents: self.runs_agents,
            tools_changed: self.tools_changed.clone(),
            bus: self.bus.clone(),
        }
    }

    /// Builds a snapshot from `config` and the files it points at — of the
    /// bundle directories, those `changed` names or whose inputs changed —
    /// and swaps it in. Concurrent calls run one at a time.
    pub async fn apply(
        self: &Arc<Self>,
        config: Arc<Config>,
        changed: watch::Changed,
    ) -> Result<Applied, RegistryError> {
        let _guard = self.reload_lock.lock().await;
        let previous = self.snapshot();
        let prev = previous.clone();
        let env = self.build_env();
        let (next, mut applied) =
            tokio::task::spawn_blocking(move || build::snapshot(&prev, config, &changed, &env))
                .await
                .map_err(|e| RegistryError::Task(e.to_string()))??;
        applied.changes = diff::diff(&previous.inventory, &next.inventory);
        let next = Arc::new(next);
        match self.snapshot.write() {
            Ok(mut s) => *s = next.clone(),
            Err(poisoned) => *poisoned.into_inner() = next.clone(),
        }
        self.retire(previous, &next);
        Ok(applied)
    }

    /// Drops the superseded versions no job runs any more (a job calls it
    /// when it ends), stopping their MCP servers and releasing their plugin
    /// instances; a retry or a resume loads them again from the store.
    pub fn release_unused(&self) {
        let mut versions = self.versions.lock().unwrap_or_else(|p| p.into_inner());
        Self::drop_unheld(&mut versions);
    }

    /// Held only by the map: no job runs it.
    fn drop_unheld(versions: &mut HashMap<(String, BundleIdentity), Arc<LoadedBundle>>) {
        versions.retain(|_, b| Arc::strong_count(b) > 1);
    }

    /// Keeps superseded bundle versions that a running job still holds, so
    /// its retry finds them; drops the rest (stopping their MCP servers and
    /// releasing their plugin instances).
    fn retire(&self, previous: Arc<Snapshot>, next: &Snapshot) {
        let mut versions = self.versions.lock().unwrap_or_else(|p| p.into_inner());
        for loaded in previous.loaded() {
            let still_current = next
                .bundle(loaded.name())
                .is_some_and(|b| Arc::ptr_eq(b, loaded));
            if !still_current {
                self.remember_served(loaded);
                versions
                    .entry((loaded.name().to_string(), loaded.identity.clone()))
                    .or_insert_with(|| loaded.clone());
            }
        }
        drop(previous);
        Self::drop_unheld(&mut versions);
        let mut in_use: HashSet<BundleIdentity> =
            versions.keys().map(|(_, id)| id.clone()).collect();
        in_use.extend(next.loaded().map(|b| b.identity.clone()));
        in_use.extend(
            next.bundles
                .values()
                .filter_map(|e| e.candidate.as_ref())
                .map(|c| c.loaded.identity.clone()),
        );
        let store = store::BundleStore::new(&next.config.paths.state_dir);
        let keep_for = next.config.queue.retention.into();
        let holders = self.holders.get().cloned();
        tokio::spawn(async move {
            if let Some(holders) = holders {
                match holders.pinned().await {
                    Ok(pinned) => in_use.extend(pinned),
                    Err(why) => {
                        tracing::warn!(%why, "not pruning the bundle store: which copies jobs are pinned to cannot be told; the next reload tries again");
                        return;
                    }
                }
            }
            // Pruning reads the disk: off the runtime.
            let _ = tokio::task::spawn_blocking(move || store.prune(&in_use, keep_for)).await;
        });
    }
}

/// In-flight requests to an endpoint given as a URL in a bundle.
const DEFAULT_URL_CONCURRENCY: usize = 16;
