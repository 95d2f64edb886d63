//! `[webhooks]`: how the daemon signs and retries completion webhooks (the
//! sender is `crate::webhook`; the config only describes it).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration::HumanDuration;

/// `[webhooks]` of the daemon config (a change needs a restart).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct WebhookConfig {
    /// The environment variable holding the signing secret (`whsec_` and
    /// base64, as Standard Webhooks writes it, or any other text, used as
    /// is). Unset or empty: deliveries go unsigned, with a warning.
    pub secret_env: String,
    /// Attempts before a delivery is dead-lettered.
    pub max_attempts: u32,
    /// Each attempt's time limit (connect, send and answer).
    pub timeout: HumanDuration,
    /// The first retry's delay; each next one doubles, up to `backoff_max`,
    /// each with up to half of it taken off at random.
    pub backoff_base: HumanDuration,
    pub backoff_max: HumanDuration,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self {
            secret_env: "STRUCTURED_AGENTS_WEBHOOK_SECRET".into(),
            max_attempts: 8,
            timeout: HumanDuration::from_secs(10),
            backoff_base: HumanDuration::from_secs(1),
            backoff_max: HumanDuration::from_secs(300),
        }
    }
}
