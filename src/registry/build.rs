//! Builds the next snapshot from a daemon config and the files it points
//! at (blocking; the registry runs it off the runtime). What did not change
//! is carried over from the previous snapshot — endpoint clients, plugin
//! libraries, started observer plugins, bound bundles — so a reload costs
//! what changed, and in-flight state (concurrency limits, MCP servers) stays.
//! Loading and binding one bundle directory is `build/binder.rs`'s.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::diff::Inventory;
use super::model_plugin;
use super::reuse::{Inputs, Plan};
use super::watch::Changed;
use super::{
    Applied, BundleIdentity, Endpoints, LimitedBackend, LoadedBundle, NotRevived, RegistryError,
    Snapshot, trust,
};
use crate::bundle::HistoryPlugins;
use crate::client::{ChatBackend, EndpointSettings, HttpBackend, ScriptedBackend};
use crate::config::{Config, EndpointKind};
use crate::events::daemon::InputKind;
use crate::model::ModelCatalog;
use crate::plugins::{PluginObserver, PluginRegistry};

mod binder;

use binder::{Binder, bind_bundles};

/// `name` at `identity`, loaded again from its verified copy in the store
/// against what `snapshot` offers (blocking), or why it cannot be.
pub(super) fn revive(
    snapshot: &Snapshot,
    env: &BuildEnv,
    name: &str,
    identity: &BundleIdentity,
) -> Result<Arc<LoadedBundle>, NotRevived> {
    Binder::new(
        &snapshot.config,
        &snapshot.egress,
        &snapshot.endpoints,
        &snapshot.plugins,
        &snapshot.models,
        &snapshot.histories,
        env,
    )
    .revive(name, identity)
}

/// Everything `snapshot` needs that is not in the config.
pub(super) struct BuildEnv {
    pub runs_agents: bool,
    pub tools_changed: Option<crate::tools::mcp::OnToolsChanged>,
    pub bus: crate::events::daemon::DaemonBus,
}

/// The next snapshot: the config, keys, plugins and model configs read
/// again, the bundle directories that `changed` (or whose inputs changed)
/// loaded again, errors collected; only a problem that leaves nothing sound
/// to serve (an unreadable directory, a bad endpoint or token, broken model
/// configs) rejects it all.
pub(super) fn snapshot(
    previous: &Snapshot,
    config: Arc<Config>,
    changed: &Changed,
    env: &BuildEnv,
) -> Result<(Snapshot, Applied), RegistryError> {
    // The same checks as `serve` and `validate`: no reload can take the
    // last key off a daemon that listens on the network.
    let keys = crate::access::KeyRing::load(&config)
        .and_then(|ring| ring.check_exposure(config.server.listen).map(|()| ring))
        .map_err(|e| RegistryError::Access(e.to_string()))?;
    let keys = Arc::new(keys);
    let egress = Arc::new(config.egress.policy()?);
    let allow_insecure = config.paths.allow_insecure_dirs;
    for dir in [&config.paths.bundles_dir, &config.paths.models_dir] {
        if dir.exists() {
            trust::check_dir(dir, allow_insecure)
                .map_err(|why| RegistryError::Untrusted(format!("{}: {why}", dir.display())))?;
        }
    }
    let endpoints = Arc::new(build_endpoints(&config, previous, &env.bus)?);
    let mut applied = Applied {
        generation: previous.generation + 1,
        ..Default::default()
    };
    let plugins = load_plugins(&config, &previous.plugins, &mut applied.errors);
    let observers = start_observers(&config, &plugins, previous, &mut applied.errors);
    let libraries = model_plugin::libraries(&plugins, &previous.models, &mut applied.errors);
    let models = Arc::new(
        ModelCatalog::load_with(&config.paths.models_dir, &libraries)
            .map_err(|e| RegistryError::Models(e.to_string()))?,
    );
    let histories = Arc::new(HistoryPlugins::of(
        &plugins,
        &previous.histories,
        &mut applied.errors,
    ));
    let binder = Binder::new(
        &config, &egress, &endpoints, &plugins, &models, &histories, env,
    );
    let inputs = Inputs::of(&binder.sources);
    let plan = Plan::make(
        &config.paths.bundles_dir,
        changed,
        &previous.loads,
        previous.inputs,
        inputs,
    )?;
    let ((bundles, rejected), loads) = bind_bundles(previous, &binder, plan, &mut applied);
    let next = Snapshot {
        generation: applied.generation,
        loads: Arc::new(loads),
        inputs: Some(inputs),
        inventory: Inventory::default(),
        declared_tools: Arc::default(),
        agents: Arc::default(),
        config,
        keys,
        egress,
        endpoints,
        plugins,
        observers: Arc::new(observers),
        bundles,
        rejected,
        models,
        histories,
    };
    let agents = next.agent_catalog();
    let next = Snapshot {
        inventory: inventory_of(&next),
        declared_tools: Arc::new(super::directory::declared_tools(&agents)),
        agents: Arc::new(agents),
        ..next
    };
    Ok((next, applied))
}

/// What a snapshot was built from, with a fingerprint per input.
fn inventory_of(s: &Snapshot) -> Inventory {
    let mut inventory = Inventory::default();
    for (name, entry) in &s.bundles {
        if let Some(b) = &entry.current {
            inventory.insert(
                InputKind::Bundle,
                name,
                format!("{}#{}", b.identity, b.bind),
            );
        }
    }
    for name in s.models.names() {
        if let Ok(model) = s.models.resolve(name) {
            inventory.insert(InputKind::ModelConfig, name, format!("{model:?}"));
        }
    }
    for info in s.plugins.list() {
        let kind = match info.kind.as_str() {
            "observer" => InputKind::ObserverPlugin,
            "model" => InputKind::ModelPlugin,
            _ => InputKind::ToolPlugin,
        };
        inventory.insert(kind, info.name, info.sha256);
    }
    let config = &s.config;
    for (name, endpoint) in &config.endpoints {
        inventory.insert(InputKind::Endpoint, name, json(endpoint));
    }
    for agent in &config.agents {
        inventory.insert(InputKind::Agent, agent.id.clone(), json(agent));
    }
    for name in &config.observers.enabled {
        let settings = config.observers.config.get(name);
        inventory.insert(InputKind::Observer, name, json(&settings));
    }
    inventory.insert(InputKind::Runtime, "router", config.runtime.router.clone());
    inventory.insert(
        InputKind::Runtime,
        "group_chat",
        config.runtime.group_chat.clone(),
    );
    // Never a token itself: the inventory may be logged.
    for (name, fingerprint) in s.keys.fingerprints() {
        inventory.insert(InputKind::Auth, name, fingerprint.clone());
    }
    inventory.insert(
        InputKind::LogFilter,
        "telemetry.log_filter",
        config.telemetry.log_filter.clone(),
    );
    inventory
}

/// Canonical JSON of a config value, for fingerprints.
fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// The plugins directory, reusing every library whose content is unchanged.
fn load_plugins(
    config: &Config,
    previous: &Arc<PluginRegistry>,
    errors: &mut Vec<String>,
) -> Arc<PluginRegistry> {
    let cache = config.paths.state_dir.join("plugin-cache");
    let (registry, failures) =
        PluginRegistry::load_dir(&config.paths.plugins_dir, &cache, previous);
    errors.extend(failures.iter().map(|e| format!("plugin not loaded: {e}")));
    Arc::new(registry)
}

/// Starts every observer plugin with its `[observers.config.<name>]`; one
/// whose library and settings are unchanged keeps running as it was.
fn start_observers(
    config: &Config,
    plugins: &PluginRegistry,
    previous: &Snapshot,
    errors: &mut Vec<String>,
) -> BTreeMap<String, Arc<PluginObserver>> {
    let settings = &config.observers;
    let capacity = settings.queue_capacity.unwrap_or(1024);
    let unchanged = |name: &str, sha: &str| {
        previous.plugins.get(name).map(|p| p.info.sha256.as_str()) == Some(sha)
            && previous.config.observers.config.get(name) == settings.config.get(name)
            && previous.config.observers.queue_capacity == settings.queue_capacity
    };
    let mut observers = BTreeMap::new();
    for info in plugins.list().into_iter().filter(|p| p.kind == "observer") {
        if unchanged(&info.name, &info.sha256)
            && let Some(running) = previous.observers.get(&info.name)
        {
            observers.insert(info.name.clone(), running.clone());
            continue;
        }
        let Some(plugin) = plugins.get(&info.name) else {
            continue;
        };
        let plugin_config = settings
            .config
            .get(&info.name)
            .cloned()
            .unwrap_or(serde_json::Value::Null);
        match PluginObserver::start(plugin.clone(), &plugin_config, capacity, 5) {
            Ok(observer) => {
                observers.insert(info.name.clone(), observer);
            }
            Err(e) => errors.push(format!("observer plugin {} not started: {e}", info.name)),
        }
    }
    for name in &settings.enabled {
        if !observers.contains_key(name) {
            errors.push(format!(
                "observers.enabled names {name:?}, which is not a loaded observer plugin (loaded: {})",
                observers.keys().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    observers
}

/// The endpoint clients; one whose definition is unchanged is the same
/// client as before (its concurrency limit and connections carry over).
fn build_endpoints(
    config: &Config,
    previous: &Snapshot,
    bus: &crate::events::daemon::DaemonBus,
) -> Result<Endpoints, RegistryError> {
    let mut out = BTreeMap::new();
    for (name, ep) in &config.endpoints {
        let same = previous
            .config
            .endpoints
            .get(name)
            .is_some_and(|old| serde_json::to_value(old).ok() == serde_json::to_value(ep).ok());
        if same && let Some(client) = previous.endpoints.get(name) {
            out.insert(name.clone(), client.clone());
            continue;
        }
        let failed = |detail: String| RegistryError::Endpoint {
            name: name.clone(),
            detail,
        };
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
                    settings.api_key = Some(std::env::var(var).map_err(|_| {
                        failed(format!(
                            "the API key variable `{var}` (api_key_env) is not set"
                        ))
                    })?);
                }
                Arc::new(HttpBackend::new(settings).map_err(|e| failed(e.to_string()))?)
            }
            EndpointKind::Scripted => {
                let path = ep.script.clone().unwrap_or_default();
                let script = crate::mock::Script::load(&path).map_err(|e| failed(e.to_string()))?;
                Arc::new(ScriptedBackend::new(name.clone(), script))
            }
        };
        // A changed load section builds a new gate; the old one's poller
        // stops once no running call holds it.
        let gate = ep
            .load
            .as_ref()
            .filter(|load| load.kind != crate::config::LoadKind::Fixed)
            .map(|load| crate::load::LoadGate::start(name.clone(), load.clone(), bus.clone()));
        out.insert(
            name.clone(),
            LimitedBackend::wrap_gated(backend, ep.max_concurrent, gate, bus.clone()),
        );
    }
    Ok(out)
}
