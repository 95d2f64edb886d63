//! What a bundle's binding depends on outside its own files, declared once
//! ([`INPUTS`]). Three answers are derived from that one table, so they
//! cannot disagree:
//!
//! - the **reuse check**: a reload loads every bundle directory again when
//!   the fingerprint of any input changed (`reuse::Inputs`);
//! - a bundle's **identity**: its content digest and, for each input, the
//!   part of it the bundle reads ([`identity_of`]), so a resumed job never
//!   runs different content under the same pin;
//! - the **live settings**: which config keys a reload may change
//!   ([`live_keys`]; the config knows the others, which no binding reads).
//!
//! Before this table the three were hand-kept lists agreeing by comments: an
//! input missing from the reuse check kept an old binding after a reload, one
//! missing from the identity ran other content under the same pin. A new input
//! is one more row, and the registry's tests (`registry/tests.rs`) change
//! every row in turn and check that all three notice.
//!
//! It also owns [`own_urls`], the URLs a bundle names itself: the egress check
//! at binding and the identity both read them.

use std::path::Path;

use sha2::{Digest, Sha256};

use super::identity::BundleIdentity;
use crate::bundle::schema::ToolKind;
use crate::bundle::{Bundle, EndpointRef};
use crate::config::{Config, LIVE_BESIDE_BINDINGS};
use crate::model::ModelCatalog;
use crate::plugins::{PluginInfo, PluginRegistry};

/// Everything a binding reads besides the bundle's own files, as one reload
/// (or one revival of a pinned copy) sees it.
pub(super) struct Sources<'a> {
    pub config: &'a Config,
    /// The plugin libraries loaded: name, kind and SHA-256 are what counts.
    pub plugins: Vec<PluginInfo>,
    /// The digest of the model config files the catalog was read from.
    pub model_files: [u8; 32],
    /// Whether `agent` tools can run (the daemon's choice, not the config's).
    pub runs_agents: bool,
}

impl<'a> Sources<'a> {
    pub(super) fn new(
        config: &'a Config,
        plugins: &PluginRegistry,
        models: &ModelCatalog,
        runs_agents: bool,
    ) -> Sources<'a> {
        Sources {
            config,
            plugins: plugins.list(),
            model_files: *models.files_digest(),
            runs_agents,
        }
    }
}

/// One input of every binding: where it is set, how it is fingerprinted and
/// what of it enters the identity of a bundle that reads it.
pub(super) struct Input {
    /// Its name, for tests and messages.
    pub name: &'static str,
    /// The settings it is read from, and whether a reload may change them.
    pub set: Set,
    /// The whole input as it is now: when it differs from the last reload's,
    /// every bundle directory is loaded again.
    pub fingerprint: fn(&Sources) -> Vec<u8>,
    /// What of it enters a bundle's identity.
    pub identity: InIdentity,
}

/// Where an input is set.
pub(super) enum Set {
    /// These config keys (`section` or `section.leaf`); `live`: whether a
    /// reload applies a change of them (else it needs a restart).
    Config {
        keys: &'static [&'static str],
        live: bool,
    },
    /// Not in the config: the daemon decides it.
    ByDaemon,
}

/// Set by these config keys, which a reload may change.
const fn live(keys: &'static [&'static str]) -> Set {
    Set::Config { keys, live: true }
}

/// Set by these config keys, which only a restart changes.
const fn restart(keys: &'static [&'static str]) -> Set {
    Set::Config { keys, live: false }
}

/// What of an input enters the identity of a bundle that reads it.
pub(super) enum InIdentity {
    /// The part a bundle reads, as pieces of its identity.
    Pieces(fn(&Bundle, &Sources, &mut Vec<Piece>)),
    /// What a bundle reads of it is hashed into the bundle's content digest.
    Content,
    /// It decides whether or from where a bundle loads, not what it runs.
    Not,
}

/// The inputs of every binding. Read the module doc before adding a row.
// The rows are alike in shape, kept so: a table whose every row says in
// full what it reads and what of it enters the identity.
pub(super) const INPUTS: [Input; 9] = [
    Input {
        name: "endpoints",
        set: live(&["endpoints"]),
        fingerprint: |s| json(&s.config.endpoints),
        identity: InIdentity::Pieces(endpoint_piece),
    },
    Input {
        name: "egress",
        set: live(&["egress"]),
        fingerprint: |s| json(&s.config.egress),
        identity: InIdentity::Pieces(egress_piece),
    },
    Input {
        // `runtime.agents_file` is read into `agents` when the config loads.
        name: "remote agents",
        set: live(&["agents", "runtime.agents_file", "runtime.sender_id"]),
        fingerprint: |s| {
            let mut bytes = json(&s.config.agents);
            bytes.push(0);
            bytes.extend(s.config.runtime.sender_id.as_bytes());
            bytes
        },
        identity: InIdentity::Pieces(agent_pieces),
    },
    Input {
        name: "plugins",
        set: live(&["paths.plugins_dir"]),
        fingerprint: |s| {
            let mut bytes = Vec::new();
            for info in &s.plugins {
                for part in [&info.name, &info.kind, &info.sha256] {
                    bytes.extend(part.as_bytes());
                    bytes.push(0);
                }
            }
            bytes
        },
        identity: InIdentity::Pieces(plugin_pieces),
    },
    Input {
        // The model config a bundle names is read with its files.
        name: "model configs",
        set: live(&["paths.models_dir"]),
        fingerprint: |s| {
            let mut bytes = json(&s.config.paths.models_dir);
            bytes.extend(s.model_files);
            bytes
        },
        identity: InIdentity::Content,
    },
    Input {
        // A copy in the store has the identity of its source, wherever that lies.
        name: "bundles directory",
        set: live(&["paths.bundles_dir"]),
        fingerprint: |s| json(&s.config.paths.bundles_dir),
        identity: InIdentity::Not,
    },
    Input {
        // The trust opt-out: whether a bundle is refused, not what it runs.
        name: "trust opt-out",
        set: live(&["paths.allow_insecure_dirs"]),
        fingerprint: |s| json(&s.config.paths.allow_insecure_dirs),
        identity: InIdentity::Not,
    },
    Input {
        // Where the bundle store keeps the copies bundles run from.
        name: "state directory",
        set: restart(&["paths.state_dir"]),
        fingerprint: |s| json(&s.config.paths.state_dir),
        identity: InIdentity::Not,
    },
    Input {
        // Whether an `agent` tool binds. A registry always runs them, so the
        // identity a job is pinned to never depends on it.
        name: "runs agents",
        set: Set::ByDaemon,
        fingerprint: |s| json(&s.runs_agents),
        identity: InIdentity::Not,
    },
];

/// The config keys a reload may change: those the inputs of a binding
/// declare live, and those the config serves live beside them.
pub(super) fn live_keys() -> Vec<&'static str> {
    let mut keys: Vec<&'static str> = LIVE_BESIDE_BINDINGS.to_vec();
    for input in &INPUTS {
        if let Set::Config {
            keys: set,
            live: true,
        } = input.set
        {
            keys.extend(set);
        }
    }
    keys
}

/// Where in a bundle a piece of its identity comes from. Pieces are hashed
/// in this order — the bundle's own: its endpoint, its model and history
/// plugins, its own URLs, then tool by tool — which is the order identities
/// were hashed in before this table, so the copies jobs are pinned to keep
/// their identity across an upgrade.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Place {
    Endpoint,
    ModelPlugin,
    HistoryPlugin,
    Egress,
    Tool(usize),
}

/// One piece of a bundle's identity: a tag and the bytes of the input's part.
pub(super) struct Piece {
    place: Place,
    tag: &'static str,
    bytes: Vec<u8>,
}

impl Piece {
    fn new(place: Place, tag: &'static str, bytes: impl Into<Vec<u8>>) -> Piece {
        Piece {
            place,
            tag,
            bytes: bytes.into(),
        }
    }
}

/// The identity of `bundle` (loaded, its content digest set) bound against
/// `sources`: its content and the part of every input it reads. Nothing in
/// it depends on where the bundle lies: a copy in the store has the identity
/// of its source.
pub(super) fn identity_of(bundle: &Bundle, sources: &Sources) -> BundleIdentity {
    let mut pieces = Vec::new();
    for input in &INPUTS {
        if let InIdentity::Pieces(of) = input.identity {
            of(bundle, sources, &mut pieces);
        }
    }
    // Stable: pieces at one place keep the table's order.
    pieces.sort_by_key(|p| p.place);
    let mut hash = Sha256::new();
    hash.update(bundle.content_digest.as_str().as_bytes());
    for piece in pieces {
        hash.update([0]);
        hash.update(piece.tag.as_bytes());
        hash.update([0]);
        hash.update(&piece.bytes);
    }
    BundleIdentity::of_hash(&hash.finalize())
}

/// The endpoint a bundle names: a configured one's definition, or its own
/// URL or script.
fn endpoint_piece(bundle: &Bundle, s: &Sources, out: &mut Vec<Piece>) {
    let endpoint = match &bundle.endpoint {
        EndpointRef::Named(name) => json(&s.config.endpoints.get(name)),
        // The script is a file of the bundle (its content digest covers
        // it): named relative to the bundle, as the operator's directory
        // and its copy name it alike.
        EndpointRef::Scripted(script) => {
            format!("Scripted({:?})", relative(script, &bundle.dir)).into_bytes()
        }
        other => format!("{other:?}").into_bytes(),
    };
    out.push(Piece::new(Place::Endpoint, "endpoint", endpoint));
}

/// The egress rules, for a bundle that names URLs of its own: they decide
/// whether it binds at all.
fn egress_piece(bundle: &Bundle, s: &Sources, out: &mut Vec<Piece>) {
    if !own_urls(bundle).is_empty() {
        out.push(Piece::new(Place::Egress, "egress", json(&s.config.egress)));
    }
}

/// The remote agents and the sender id, once per `http_agent` tool.
fn agent_pieces(bundle: &Bundle, s: &Sources, out: &mut Vec<Piece>) {
    for (i, spec) in bundle.raw.tools.iter().enumerate() {
        if spec.kind == ToolKind::HttpAgent {
            let mut bytes = json(&s.config.agents);
            bytes.extend(s.config.runtime.sender_id.as_bytes());
            out.push(Piece::new(Place::Tool(i), "agents", bytes));
        }
    }
}

/// The libraries a bundle runs: its model plugin parses every reply and its
/// history plugin chooses what every request sends (a job resumes with the
/// ones it started with), its plugin tools run its calls.
fn plugin_pieces(bundle: &Bundle, s: &Sources, out: &mut Vec<Piece>) {
    if let Some(digest) = bundle.model.plugin.library_digest() {
        out.push(Piece::new(Place::ModelPlugin, "model-plugin", digest));
    }
    if let Some(digest) = bundle.history.library_digest() {
        out.push(Piece::new(Place::HistoryPlugin, "history-plugin", digest));
    }
    for (i, spec) in bundle.raw.tools.iter().enumerate() {
        if let Some(plugin) = &spec.plugin {
            let mut bytes = plugin.as_bytes().to_vec();
            if let Some(info) = s.plugins.iter().find(|p| p.name == *plugin) {
                bytes.extend(info.sha256.as_bytes());
            }
            out.push(Piece::new(Place::Tool(i), "plugin", bytes));
        }
    }
}

/// The key path of a bundle's model endpoint among its own URLs (held to
/// `egress.allow` only, not to the address rule).
pub(super) const MODEL_ENDPOINT: &str = "model.endpoint";

/// The URLs a bundle names itself (not through the daemon config), with
/// their key paths: its model endpoint, its `http_agent` tools' `url` and
/// its MCP servers' `server.url`.
pub(super) fn own_urls(bundle: &Bundle) -> Vec<(String, String)> {
    let mut urls = Vec::new();
    if let EndpointRef::Url(url) = &bundle.endpoint {
        urls.push((MODEL_ENDPOINT.to_string(), url.clone()));
    }
    for (i, spec) in bundle.raw.tools.iter().enumerate() {
        if spec.agent.is_none()
            && let Some(url) = &spec.url
        {
            urls.push((format!("tools[{i}].url"), url.clone()));
        }
        // An MCP server reached over HTTP: checked at binding, before it
        // is sent `initialize`.
        if let Some(url) = spec
            .server
            .as_ref()
            .and_then(|server| server.get("url"))
            .and_then(serde_json::Value::as_str)
        {
            urls.push((format!("tools[{i}].server.url"), url.to_string()));
        }
    }
    urls
}

/// Canonical JSON of a config value.
fn json<T: serde::Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

/// `path` relative to `dir` when inside it, else as it is.
fn relative<'a>(path: &'a Path, dir: &Path) -> &'a Path {
    path.strip_prefix(dir).unwrap_or(path)
}
