//! A bound bundle's identity: its content digest, the definition of the
//! endpoint it names, the hashes of the plugin libraries its tools, its
//! model plugin and its history plugin use and, when it calls remote agents, their definitions. A change to any of
//! them is another bundle. Jobs and nested runs pin an identity; the
//! bundle store keeps a copy per identity.

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::bundle::{Bundle, ContentDigest, EndpointRef};
use crate::config::Config;
use crate::plugins::PluginRegistry;

/// What a job is pinned to: one content bound one way (8 bytes in hex, as
/// long as a content digest but never compared with one).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct BundleIdentity(String);

impl BundleIdentity {
    /// An identity as a job or a journal recorded it.
    pub fn recorded(text: &str) -> Self {
        BundleIdentity(text.to_string())
    }

    /// The identity of a bundle bound outside the daemon (`run`, `chat`,
    /// benches): its content alone, marked so that no daemon identity
    /// equals it.
    pub fn unbound(content: &ContentDigest) -> Self {
        let mut hash = Sha256::new();
        hash.update(b"unbound\0");
        hash.update(content.as_str().as_bytes());
        BundleIdentity(crate::hex::short_hex(&hash.finalize()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first 12 hex digits, as people are shown it.
    pub fn short(&self) -> &str {
        self.0.get(..12).unwrap_or(&self.0)
    }

    /// Whether it can name a directory of the bundle store: hex only, so
    /// a recorded identity never names a path outside it.
    pub fn is_hex(&self) -> bool {
        !self.0.is_empty() && self.0.bytes().all(|b| b.is_ascii_hexdigit())
    }
}

/// The bundle content a nested run started with, journaled (as step
/// [`NESTED_PIN_STEP`]) with its first step so a resumed run gets exactly
/// that content, and the bundle store keeps its copy while the job lives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NestedPin {
    pub bundle: String,
    pub version: String,
    /// Journals written before identities had their own name call it `digest`.
    #[serde(alias = "digest")]
    pub identity: BundleIdentity,
}

/// The journal step a nested run's [`NestedPin`] is recorded as.
pub const NESTED_PIN_STEP: &str = "bundle";

impl fmt::Display for BundleIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The identity of `bundle` (loaded from `dir`, its content digest set)
/// bound against `config` and `plugins`. Nothing in it depends on where
/// the bundle lies: a copy in the store has the identity of its source.
pub(super) fn identity_of(
    bundle: &Bundle,
    config: &Config,
    plugins: &PluginRegistry,
) -> BundleIdentity {
    let mut hash = Sha256::new();
    hash.update(bundle.content_digest.as_str().as_bytes());
    let endpoint = match &bundle.endpoint {
        EndpointRef::Named(name) => {
            serde_json::to_string(&config.endpoints.get(name)).unwrap_or_default()
        }
        // The script is a file of the bundle (its content digest covers
        // it): named relative to the bundle, as the operator's directory
        // and its copy name it alike.
        EndpointRef::Scripted(script) => {
            format!("Scripted({:?})", relative(script, &bundle.dir))
        }
        other => format!("{other:?}"),
    };
    hash.update(b"\0endpoint\0");
    hash.update(endpoint.as_bytes());
    // A model plugin library parses every reply: another library is
    // another bundle, so a job replays with the parser it started with.
    if let Some(digest) = bundle.model.plugin.library_digest() {
        hash.update(b"\0model-plugin\0");
        hash.update(digest.as_bytes());
    }
    // Likewise the history plugin library chooses what every request
    // sends: a job resumes with the strategy it started with.
    if let Some(digest) = bundle.history.library_digest() {
        hash.update(b"\0history-plugin\0");
        hash.update(digest.as_bytes());
    }
    if !super::build::own_urls(bundle).is_empty() {
        hash.update(b"\0egress\0");
        hash.update(serde_json::to_string(&config.egress).unwrap_or_default());
    }
    for spec in &bundle.raw.tools {
        if let Some(plugin) = &spec.plugin {
            hash.update(b"\0plugin\0");
            hash.update(plugin.as_bytes());
            if let Some(p) = plugins.get(plugin) {
                hash.update(p.info.sha256.as_bytes());
            }
        }
        if spec.kind == crate::bundle::schema::ToolKind::HttpAgent {
            hash.update(b"\0agents\0");
            hash.update(serde_json::to_string(&config.agents).unwrap_or_default());
            hash.update(config.runtime.sender_id.as_bytes());
        }
    }
    BundleIdentity(crate::hex::short_hex(&hash.finalize()))
}

/// `path` relative to `dir` when inside it, else as it is.
fn relative<'a>(path: &'a Path, dir: &Path) -> &'a Path {
    path.strip_prefix(dir).unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_identity_never_names_a_path_outside_the_store() {
        assert!(BundleIdentity::recorded("00ff").is_hex());
        for bad in ["", "../etc", "ab/cd", "a b"] {
            assert!(!BundleIdentity::recorded(bad).is_hex(), "{bad:?}");
        }
        let content = ContentDigest::recorded("00ff");
        assert_ne!(BundleIdentity::unbound(&content).as_str(), "00ff");
    }
}
