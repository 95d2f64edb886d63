//! A bound bundle's identity: its content digest and the part of every
//! input of its binding it reads (the endpoint it names, the plugin
//! libraries it runs, the egress rules and remote agents it depends on),
//! hashed by `inputs::identity_of` from the one declaration of those inputs.
//! A change to any of them is another bundle. Jobs and nested runs pin an
//! identity; the bundle store keeps a copy per identity.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::bundle::ContentDigest;

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

    /// The identity a binding's hash makes.
    pub(super) fn of_hash(hash: &[u8]) -> Self {
        BundleIdentity(crate::hex::short_hex(hash))
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
