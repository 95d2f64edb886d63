//! How a bundle configures the engine's handling of one tool: timeout,
//! retries, result cache and guardrails. These are the raw, validated-by-serde
//! settings; the engine compiles them (regexes, ...) when the bundle loads.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration::HumanDuration;

/// Result caching for a tool. The key is the tool name plus the exact raw
/// argument text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CacheSpec {
    /// Turn caching on or off.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Entries kept before the oldest are evicted.
    #[serde(default = "default_cache_entries")]
    pub max_entries: usize,
    /// How long an entry stays valid; forever when absent.
    #[serde(default)]
    pub ttl: Option<HumanDuration>,
}

/// Checks on a tool's input and output. A blocked call returns
/// `guardrail:<reason>` to the model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GuardrailSpec {
    /// Largest raw argument text accepted, in bytes.
    #[serde(default)]
    pub max_argument_bytes: Option<usize>,
    /// Per argument field (`*` = the whole raw argument text): regexes that block the call.
    #[serde(default)]
    pub deny_patterns: BTreeMap<String, Vec<String>>,
    /// Per argument field: the value must match one of these regexes.
    #[serde(default)]
    pub allow_patterns: BTreeMap<String, Vec<String>>,
    /// Per argument field holding a path: the path must start with one of these prefixes.
    #[serde(default)]
    pub path_prefixes: BTreeMap<String, Vec<String>>,
    /// Largest output, in bytes; longer output is truncated with a notice.
    #[serde(default)]
    pub max_output_bytes: Option<usize>,
    /// Regexes whose matches in the output are replaced by `[REDACTED]`.
    #[serde(default)]
    pub redact_patterns: Vec<String>,
    /// Regexes that block an output containing a match (nothing is cached).
    #[serde(default)]
    pub deny_output_patterns: Vec<String>,
}

fn default_true() -> bool {
    true
}

fn default_cache_entries() -> usize {
    1024
}
