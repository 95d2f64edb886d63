//! The test `registry/inputs.rs` promises: every input a binding declares,
//! changed in turn, is noticed by all that is derived from the declaration —
//! the reuse check refuses the last load, the bundle's identity changes (or
//! stays, as declared) and a reload applies the change live or refuses it by
//! its key. A part of its own (nothing imports it), since it reads both the
//! declaration and the reuse check that stands on it.

use std::path::PathBuf;

use super::identity::BundleIdentity;
use super::inputs::{INPUTS, InIdentity, Set, Sources, identity_of, live_keys};
use super::reuse::{DirLoad, DirLoads, Inputs, Plan};
use super::stamp;
use super::watch::Changed;
use crate::bundle::{HistoryPlugins, LoadContext};
use crate::config::{Config, ConfigError, LIVE_BESIDE_BINDINGS};
use crate::model::ModelCatalog;
use crate::plugins::PluginInfo;

/// A bundle that reads every input that can enter an identity: a named
/// endpoint, a model config, a URL of its own, a plugin tool and remote
/// agents (twice, around the plugin tool, so the pieces' order counts).
const BUNDLE: &str = "name: b\nversion: \"1\"\nmodel: {endpoint: local, name: m, plugin: mine}\nprompts: {user: \"{{ input }}\"}\ntools:\n  - {name: far, kind: http_agent, url: \"http://127.0.0.1:9/x\"}\n  - {name: lib, kind: plugin, plugin: p}\n  - {name: peer, kind: http_agent, agent: peer}\n";

/// Everything a binding reads, as files and settings a test can change.
struct World {
    _dir: tempfile::TempDir,
    root: PathBuf,
    config: Config,
    plugins: Vec<PluginInfo>,
    runs_agents: bool,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        std::fs::create_dir_all(root.join("bundles/b")).unwrap();
        std::fs::create_dir_all(root.join("models")).unwrap();
        std::fs::write(root.join("bundles/b/bundle.yaml"), BUNDLE).unwrap();
        std::fs::write(root.join("models/mine.toml"), "plugin = \"qwen\"\n").unwrap();
        let mut config = Config::default();
        config.paths.bundles_dir = root.join("bundles");
        config.paths.models_dir = root.join("models");
        config.paths.plugins_dir = root.join("plugins");
        config.paths.state_dir = root.join("state");
        let endpoint = serde_json::json!({"base_url": "http://127.0.0.1:1/v1"});
        config
            .endpoints
            .insert("local".into(), serde_json::from_value(endpoint).unwrap());
        let agents =
            serde_json::json!([{"id": "peer", "name": "Peer", "endpoint": "http://127.0.0.1:2/m"}]);
        config.agents = serde_json::from_value(agents).unwrap();
        config.egress.allow = Some(vec!["http://127.0.0.1:9".into()]);
        config.runtime.sender_id = "me".into();
        let plugin = PluginInfo {
            name: "p".into(),
            version: "1".into(),
            kind: "tool".into(),
            abi: 1,
            file: root.join("plugins/libp.so"),
            sha256: "aa".repeat(32),
            tools: vec!["lib".into()],
        };
        World {
            _dir: dir,
            root,
            config,
            plugins: vec![plugin],
            runs_agents: true,
        }
    }

    /// The reuse fingerprint and the bundle's identity, the bundle
    /// loaded as a reload would.
    fn observe(&self) -> (Inputs, BundleIdentity) {
        let models = ModelCatalog::load(&self.config.paths.models_dir).unwrap();
        let sources = Sources {
            config: &self.config,
            plugins: self.plugins.clone(),
            model_files: *models.files_digest(),
            runs_agents: self.runs_agents,
        };
        let servers = self
            .config
            .endpoints
            .iter()
            .map(|(name, ep)| (name.clone(), ep.server))
            .collect();
        let histories = HistoryPlugins::default();
        let ctx = LoadContext {
            endpoints: Some(&servers),
            models: &models,
            histories: &histories,
        };
        let dir = self.config.paths.bundles_dir.join("b");
        let bundle = crate::bundle::load_dir(&dir, &ctx).unwrap();
        (Inputs::of(&sources), identity_of(&bundle, &sources))
    }

    /// Whether a reload with nothing changed on disk keeps the bundle
    /// directory's last load (loaded with `before`), its inputs now `now`.
    fn reuses(&self, before: Inputs, now: Inputs) -> bool {
        let root = &self.config.paths.bundles_dir;
        let dir = root.join("b");
        let last = DirLoad {
            stamp: stamp::record(&dir),
            result: Err(Vec::new()),
        };
        let loads: DirLoads = [(dir, last)].into();
        let plan = Plan::make(root, &Changed::nothing(), &loads, Some(before), now).unwrap();
        !plan.dirs.is_empty() && plan.dirs.iter().all(|(_, kept)| kept.is_some())
    }
}

/// A change of one input, described.
type Change = (&'static str, fn(&mut World));

/// Every way the test changes the input named `input`, each touching
/// nothing else. A new row of `INPUTS` needs its changes here.
fn changes(input: &str) -> Vec<Change> {
    match input {
        "endpoints" => vec![("the named endpoint's URL", |w| {
            let endpoint = w.config.endpoints.get_mut("local").unwrap();
            endpoint.base_url = Some("http://127.0.0.1:3/v1".into());
        })],
        "egress" => vec![("the egress allowlist", |w| {
            w.config.egress.allow = Some(vec!["http://127.0.0.1:8".into()]);
        })],
        "remote agents" => vec![
            ("a remote agent's endpoint", |w| {
                w.config.agents[0].endpoint = "http://127.0.0.1:4/m".into();
            }),
            ("the sender id", |w| {
                w.config.runtime.sender_id = "you".into()
            }),
        ],
        "plugins" => vec![
            ("the tool plugin rebuilt", |w| {
                w.plugins[0].sha256 = "bb".repeat(32)
            }),
            ("the plugins directory, with another build", |w| {
                w.config.paths.plugins_dir = w.root.join("plugins2");
                w.plugins[0].sha256 = "cc".repeat(32);
            }),
        ],
        "model configs" => vec![
            ("the bundle's model config edited", |w| {
                let file = w.config.paths.models_dir.join("mine.toml");
                std::fs::write(file, "plugin = \"qwen\"\nstop = [\"END\"]\n").unwrap();
            }),
            ("the models directory, with another config", |w| {
                let dir = w.root.join("models2");
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(dir.join("mine.toml"), "plugin = \"openai\"\n").unwrap();
                w.config.paths.models_dir = dir;
            }),
        ],
        "bundles directory" => vec![("the bundles directory, with a copy", |w| {
            let dir = w.root.join("bundles2");
            std::fs::create_dir_all(dir.join("b")).unwrap();
            std::fs::write(dir.join("b/bundle.yaml"), BUNDLE).unwrap();
            w.config.paths.bundles_dir = dir;
        })],
        "trust opt-out" => vec![("insecure directories allowed", |w| {
            w.config.paths.allow_insecure_dirs = true;
        })],
        "state directory" => vec![("the state directory", |w| {
            w.config.paths.state_dir = w.root.join("state2");
        })],
        "runs agents" => vec![("agent tools not run", |w| w.runs_agents = false)],
        other => panic!("no change written for the input {other:?}: add its changes here"),
    }
}

/// The config keys whose values differ between `a` and `b`.
fn touched(a: &Config, b: &Config) -> Vec<String> {
    a.restart_only_changes(b, &[], None)
        .into_iter()
        .map(|e| match e {
            ConfigError::Invalid { key, .. } => key,
            other => other.to_string(),
        })
        .collect()
}

/// The test the module doc promises: each input changed in turn, the
/// reuse check refuses the last load, the identity changes (or, for an
/// input that decides only whether or from where a bundle loads, stays),
/// and a reload applies the change live or refuses it by its key, as
/// declared.
#[test]
fn every_input_changed_in_turn_is_noticed_by_reuse_identity_and_reload() {
    let live = live_keys();
    for input in &INPUTS {
        for (what, change) in changes(input.name) {
            let mut world = World::new();
            let (inputs, identity) = world.observe();
            assert!(world.reuses(inputs, inputs), "{}: unchanged", input.name);
            let running = world.config.clone();
            change(&mut world);
            let at = format!("input {:?}, changed: {what}", input.name);
            let (inputs_now, identity_now) = world.observe();

            assert!(
                !world.reuses(inputs, inputs_now),
                "{at}: the last load was kept"
            );

            match input.identity {
                InIdentity::Pieces(_) | InIdentity::Content => {
                    assert_ne!(identity, identity_now, "{at}: the identity did not change");
                }
                InIdentity::Not => {
                    assert_eq!(identity, identity_now, "{at}: the identity changed");
                }
            }

            let touched = touched(&running, &world.config);
            let refused = running.restart_only_changes(&world.config, &live, None);
            let declared: &[&str] = match input.set {
                Set::Config { keys, live: true } => {
                    assert!(refused.is_empty(), "{at}: a reload refused {refused:?}");
                    keys
                }
                Set::Config { keys, live: false } => {
                    assert!(!refused.is_empty(), "{at}: a reload applied it live");
                    keys
                }
                Set::ByDaemon => &[],
            };
            for key in &touched {
                assert!(
                    declared
                        .iter()
                        .any(|d| key == d || key.starts_with(&format!("{d}."))),
                    "{at}: it changed the setting {key}, which the input does not declare"
                );
            }
        }
    }
}

/// Every key the inputs and the config's own live list name is a setting
/// of the config, so a misspelt key cannot make a setting restart-only.
#[test]
fn every_declared_key_is_a_setting() {
    let config = serde_json::to_value(Config::default()).unwrap();
    let declared = INPUTS.iter().flat_map(|input| match input.set {
        Set::Config { keys, .. } => keys,
        Set::ByDaemon => &[],
    });
    for key in declared.chain(LIVE_BESIDE_BINDINGS) {
        let found = key
            .split('.')
            .try_fold(&config, |value, part| value.get(part));
        assert!(found.is_some(), "{key} is not a config setting");
    }
}

/// The runtime section was live as a whole before its keys were split
/// between the bindings' inputs and the config's list: it still is.
#[test]
fn the_runtime_section_stays_live() {
    let config = serde_json::to_value(Config::default()).unwrap();
    let live = live_keys();
    let runtime = config["runtime"].as_object().unwrap();
    for key in runtime.keys() {
        let key = format!("runtime.{key}");
        assert!(live.contains(&key.as_str()), "{key} is not live");
    }
}

/// Identities are hashed as they were before the inputs had one table:
/// a job pinned before an upgrade resumes on its copy after it.
#[test]
fn identities_are_hashed_as_before_the_table() {
    let mut world = World::new();
    // The identity the code before this table gave this bundle, with no
    // plugin library loaded.
    world.plugins.clear();
    let (_, identity) = world.observe();
    assert_eq!(identity.as_str(), "a7a0d1a818eb4635");
}
