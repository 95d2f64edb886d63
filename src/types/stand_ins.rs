//! A run whose tools with side effects must not really run (a verify's
//! crash matrix, an eval's cases) says so with [`StandIns`]: pure data,
//! stored with a job's controls; `tools::stand_in` swaps the backends.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A run's tools whose effect is not `read_only` are answered by
/// stand-ins: `results` by tool name, a placeholder for the others.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StandIns {
    /// What a stand-in answers, by tool name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub results: BTreeMap<String, Value>,
}
