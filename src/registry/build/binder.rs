//! A bundle directory loaded and bound against what one snapshot offers:
//! its stamp and trust check, the bundle parsed once, copied into the store
//! (or its copy verified) and bound from the copy to its tools and backend
//! under the egress rule; a pinned identity revived from its copy; and the
//! loads a reload plans, settled into who serves each name (a broken
//! directory nothing served yet serving its last good version).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::BuildEnv;
use crate::bundle::{
    self, Bundle, BundleErrors, EndpointRef, HistoryPlugins, LoadContext, ToolEnv,
};
use crate::config::Config;
use crate::model::ModelCatalog;
use crate::plugins::PluginRegistry;
use crate::registry::inputs::{self, Sources};
use crate::registry::last_good::LastGood;
use crate::registry::names::{self, Entries};
use crate::registry::record::Record;
use crate::registry::releases::{ReleaseVerdict, Releases};
use crate::registry::reuse::{DirLoad, DirLoads, Plan};
use crate::registry::stamp;
use crate::registry::store::BundleStore;
use crate::registry::{
    Applied, BundleEntry, BundleIdentity, BundleStatus, Candidate, DEFAULT_URL_CONCURRENCY,
    Endpoints, LimitedBackend, LoadedBundle, NotRevived, Snapshot, trust,
};

/// Loads and binds bundles against what one snapshot offers.
pub(super) struct Binder<'a> {
    config: &'a Config,
    egress: &'a Arc<crate::egress::Egress>,
    /// What every binding depends on besides the bundle (its identity reads it).
    pub(super) sources: Sources<'a>,
    endpoints: &'a Endpoints,
    models: &'a ModelCatalog,
    histories: &'a HistoryPlugins,
    /// The endpoints' server families, for validating bundles.
    servers: BTreeMap<String, crate::model::ServerKind>,
    store: BundleStore,
    tool_env: ToolEnv,
    /// Where a bundle's own endpoint tells of its failed requests.
    bus: crate::events::daemon::DaemonBus,
}

impl<'a> Binder<'a> {
    pub(super) fn new(
        config: &'a Config,
        egress: &'a Arc<crate::egress::Egress>,
        endpoints: &'a Endpoints,
        plugins: &'a Arc<PluginRegistry>,
        models: &'a ModelCatalog,
        histories: &'a HistoryPlugins,
        env: &BuildEnv,
    ) -> Self {
        Binder {
            config,
            egress,
            sources: Sources::new(config, plugins, models, env.runs_agents),
            endpoints,
            models,
            histories,
            servers: config
                .endpoints
                .iter()
                .map(|(name, ep)| (name.clone(), ep.server))
                .collect(),
            store: BundleStore::new(&config.paths.state_dir),
            bus: env.bus.clone(),
            tool_env: ToolEnv {
                runs_agents: env.runs_agents,
                remote_agents: config.agents.clone(),
                plugins: Some(plugins.clone()),
                tools_changed: env.tools_changed.clone(),
                sender_id: Some(config.runtime.sender_id.clone()),
                egress: egress.clone(),
            },
        }
    }

    fn context(&self) -> LoadContext<'_> {
        LoadContext {
            endpoints: Some(&self.servers),
            models: self.models,
            histories: self.histories,
        }
    }

    /// The bundle in the operator's directory `dir`, validated — parsed
    /// once, from the directory itself; unless `before` already serves the
    /// same identity, copied into the store (or its copy there verified),
    /// a new copy's bytes checked against what was parsed, and bound from
    /// the copy (what runs is what the identity was computed from).
    fn load(
        &self,
        dir: &Path,
        before: Option<&Arc<LoadedBundle>>,
    ) -> Result<Arc<LoadedBundle>, BundleErrors> {
        let mut bundle = bundle::load_dir(dir, &self.context())?;
        let identity = self.identity(&bundle);
        let unchanged = before.filter(|p| {
            p.identity == identity
                && p.name() == bundle.name()
                // An MCP server announced new tools: bind again.
                && !p.tools.stale()
        });
        if let Some(unchanged) = unchanged {
            return Ok(unchanged.clone());
        }
        // An existing copy verified against its manifest holds this
        // content; a new (or rebuilt) one is checked against the parse.
        let kept = self
            .store
            .keep(dir, &identity, &bundle.content_digest)
            .map_err(|e| located(dir, e.to_string()))?;
        if kept.made {
            let copied = bundle::content_digest(&kept.path, bundle.model.source.as_deref())
                .map_err(|e| BundleErrors(vec![e]))?;
            if copied != bundle.content_digest {
                self.store.discard(&identity);
                return Err(located(
                    dir,
                    "changed while it was being loaded; the next reload loads it".into(),
                ));
            }
        }
        let copy = kept.path;
        bundle.relocate(&copy);
        // Binding errors name the operator's files, not the copy's.
        self.bind(bundle, identity).map_err(|BundleErrors(errors)| {
            BundleErrors(
                errors
                    .into_iter()
                    .map(|mut e| {
                        if let Ok(relative) = e.file.strip_prefix(&copy) {
                            e.file = dir.join(relative);
                        }
                        e
                    })
                    .collect(),
            )
        })
    }

    /// The bundle `name` of identity `identity` loaded again from its
    /// verified copy (a job pinned to it resumes after a restart), if its
    /// endpoint and plugins are still what the identity names; else why
    /// not. A damaged copy is not rebuilt here: its source no longer holds
    /// its content (else the current version would be this identity, and
    /// its load would have rebuilt the copy).
    pub(super) fn revive(
        &self,
        name: &str,
        identity: &BundleIdentity,
    ) -> Result<Arc<LoadedBundle>, NotRevived> {
        let copy = self.store.find(identity)?.ok_or(NotRevived::CopyGone)?;
        let mut bundle = bundle::load_dir(&copy.path, &self.context()).map_err(|errors| {
            NotRevived::CopyInvalid {
                path: copy.path.clone(),
                errors,
            }
        })?;
        if !copy.sealed {
            // Made before manifests: its files must still hash to the
            // content it records; then it gets its manifest.
            if bundle.content_digest != copy.content {
                return Err(NotRevived::LegacyCopyChanged {
                    path: copy.path.clone(),
                    content: copy.content.to_string(),
                });
            }
            self.store.seal(&copy)?;
        }
        // The copy's own digest counts files tools wrote into it: the
        // manifest's (verified) is the content it was made from.
        bundle.content_digest = copy.content;
        if bundle.name() != name {
            return Err(NotRevived::OtherBundle {
                path: copy.path.clone(),
                found: bundle.name().to_string(),
            });
        }
        let now = self.identity(&bundle);
        if now != *identity {
            return Err(NotRevived::InputsChanged {
                now: now.short().to_string(),
            });
        }
        self.bind(bundle, now).map_err(NotRevived::Bind)
    }

    /// A bundle's identity against this snapshot's inputs.
    fn identity(&self, bundle: &Bundle) -> BundleIdentity {
        inputs::identity_of(bundle, &self.sources)
    }

    fn bind(
        &self,
        mut bundle: Bundle,
        identity: BundleIdentity,
    ) -> Result<Arc<LoadedBundle>, BundleErrors> {
        let locate = |message: String| {
            BundleErrors(vec![bundle::BundleError {
                file: bundle.file.clone(),
                line: None,
                path: "model.endpoint".into(),
                message,
            }])
        };
        // A bundle's own URLs are where it makes the daemon connect: its
        // model endpoint within `egress.allow`, its MCP servers and remote
        // agents under the whole egress rule.
        let refused: Vec<bundle::BundleError> = inputs::own_urls(&bundle)
            .into_iter()
            .filter_map(|(path, url)| {
                let checked = if path == inputs::MODEL_ENDPOINT {
                    self.egress.listed(&url)
                } else {
                    self.egress.check(&url)
                };
                let message = checked.err()?.to_string();
                Some(bundle::BundleError {
                    file: bundle.file.clone(),
                    line: None,
                    path,
                    message,
                })
            })
            .collect();
        if !refused.is_empty() {
            return Err(BundleErrors(refused));
        }
        let backend = match &bundle.endpoint {
            EndpointRef::Named(_) => {
                crate::endpoints::backend_for(&bundle.endpoint, self.endpoints)
            }
            other => crate::endpoints::backend_for(other, &BTreeMap::new())
                .map(|b| LimitedBackend::wrap(b, DEFAULT_URL_CONCURRENCY, self.bus.clone())),
        }
        .map_err(|e| locate(e.to_string()))?;
        let tools = bundle::build_tools(&mut bundle, &self.tool_env)?;
        Ok(Arc::new(LoadedBundle::new(
            bundle,
            identity,
            Arc::new(tools),
            backend,
        )))
    }
}

/// Loads the bundle directories `plan` says to load, keeps the last load
/// of the others, and settles who serves each name. A broken directory no
/// running snapshot served (the daemon just started) serves its last good
/// version from the store, degraded ([`LastGood`]).
pub(super) fn bind_bundles(
    previous: &Snapshot,
    binder: &Binder<'_>,
    plan: Plan<'_>,
    applied: &mut Applied,
) -> (Entries, DirLoads) {
    let before_by_dir: HashMap<&Path, &BundleEntry> = previous
        .bundles
        .values()
        .map(|e| (e.dir.as_path(), e))
        .collect();
    let state_dir = &binder.config.paths.state_dir;
    let last_good = LastGood::read(state_dir);
    let mut loads = DirLoads::new();
    let mut healthy: Vec<(PathBuf, Arc<LoadedBundle>)> = Vec::new();
    let mut broken: Vec<names::Broken> = Vec::new();
    for (dir, kept) in plan.dirs {
        let load = match kept {
            Some(kept) => kept.clone(),
            None => {
                applied.read.push(dir.clone());
                let before = before_by_dir
                    .get(dir.as_path())
                    .and_then(|e| e.current.as_ref());
                load_dir(binder, &dir, before)
            }
        };
        match &load.result {
            Ok(loaded) => healthy.push((dir.clone(), loaded.clone())),
            Err(messages) => {
                applied.errors.extend(messages.iter().cloned());
                let served = before_by_dir
                    .get(dir.as_path())
                    .is_some_and(|e| e.current.is_some());
                let mut messages = messages.clone();
                let last_good = match served {
                    true => None,
                    false => revive_last_good(binder, &last_good, &dir, &mut messages),
                };
                broken.push(names::Broken {
                    dir: dir.clone(),
                    messages,
                    last_good,
                });
            }
        }
        loads.insert(dir, load);
    }
    let releases = Releases::read(state_dir);
    let held = hold_candidates(binder, &releases, &last_good, &before_by_dir, &mut healthy);
    let mut entries = names::settle(previous, healthy, broken, applied);
    for entry in entries.0.values_mut() {
        entry.candidate = held.get(&entry.dir).cloned();
    }
    let serving: Vec<(PathBuf, String, BundleIdentity)> = entries
        .0
        .values()
        .filter(|e| e.status == BundleStatus::Ok)
        .filter_map(|e| {
            let loaded = e.current.as_ref()?;
            Some((e.dir.clone(), e.name.clone(), loaded.identity.clone()))
        })
        .collect();
    let present: Vec<PathBuf> = loads.keys().cloned().collect();
    let next = last_good.after(&serving, &present);
    if next != last_good {
        next.write(state_dir);
    }
    (entries, loads)
}

/// The release gate: each healthy directory whose bundle has a `release:`
/// section and a new version no decision promoted keeps serving the
/// version it served (before this reload, or at the last start its last
/// good version) — the new one is held as a candidate, returned by
/// directory. A bundle's first version serves at once: there is nothing
/// else to serve or to compare it with.
fn hold_candidates(
    binder: &Binder<'_>,
    releases: &Releases,
    last_good: &LastGood,
    before_by_dir: &HashMap<&Path, &BundleEntry>,
    healthy: &mut [(PathBuf, Arc<LoadedBundle>)],
) -> HashMap<PathBuf, Candidate> {
    let mut held = HashMap::new();
    for (dir, loaded) in healthy.iter_mut() {
        if loaded.bundle.raw.release.is_none() {
            continue;
        }
        let decision = releases.of(&loaded.identity).cloned();
        if decision
            .as_ref()
            .is_some_and(|d| d.verdict == ReleaseVerdict::Promoted)
        {
            continue;
        }
        let serving = before_by_dir
            .get(dir.as_path())
            .and_then(|e| e.current.clone())
            .filter(|s| s.name() == loaded.name())
            .or_else(|| {
                let (name, identity) = last_good.of(dir)?;
                (name == loaded.name() && identity != loaded.identity)
                    .then(|| binder.revive(name, &identity).ok())
                    .flatten()
            });
        let Some(serving) = serving.filter(|s| s.identity != loaded.identity) else {
            continue;
        };
        tracing::info!(
            bundle = %loaded.name(),
            candidate = %loaded.version(),
            serving = %serving.version(),
            "release gate: the new version is held as a candidate until its evals pass"
        );
        let candidate = std::mem::replace(loaded, serving);
        held.insert(
            dir.clone(),
            Candidate {
                loaded: candidate,
                decision,
            },
        );
    }
    held
}

/// The last good version of the broken directory `dir` from its store
/// copy, if it has one that still binds; why not is added to `messages`.
fn revive_last_good(
    binder: &Binder<'_>,
    last_good: &LastGood,
    dir: &Path,
    messages: &mut Vec<String>,
) -> Option<Arc<LoadedBundle>> {
    let (name, identity) = last_good.of(dir)?;
    match binder.revive(name, &identity) {
        Ok(loaded) => {
            messages.push(format!(
                "{}: serving its last good version {} (identity {}) from the daemon's copy until the directory is fixed",
                dir.display(),
                loaded.version(),
                identity.short()
            ));
            Some(loaded)
        }
        Err(why) => {
            let message = format!(
                "{}: its last good version (identity {}) cannot serve either: {why}",
                dir.display(),
                identity.short()
            );
            tracing::warn!(bundle_dir = %dir.display(), error = %message, "bundle rejected");
            messages.push(message);
            None
        }
    }
}

/// Loads one bundle directory: its stamp first (so an edit from now on
/// shows), then the trust check, then the bundle.
fn load_dir(binder: &Binder<'_>, dir: &Path, before: Option<&Arc<LoadedBundle>>) -> DirLoad {
    let stamp = stamp::record(dir);
    let allow_insecure = binder.config.paths.allow_insecure_dirs;
    let result = trust::check_tree(dir, allow_insecure)
        .map_err(|e| located(dir, e.to_string()))
        .and_then(|()| binder.load(dir, before))
        .map_err(|errors| {
            let messages: Vec<String> = errors.0.iter().map(ToString::to_string).collect();
            for m in &messages {
                tracing::warn!(bundle_dir = %dir.display(), error = %m, "bundle rejected");
            }
            messages
        });
    DirLoad { stamp, result }
}

fn located(dir: &Path, message: String) -> BundleErrors {
    BundleErrors(vec![bundle::BundleError {
        file: dir.to_path_buf(),
        line: None,
        path: String::new(),
        message,
    }])
}
