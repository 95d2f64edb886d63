//! [`ToolPolicy`]: a tool's handling as the engine applies it to every
//! call — timeout, retries, result cache, guardrails, effect and approval
//! rule — compiled from the bundle's settings (`policy.rs`) when it loads.

use std::time::Duration;

use super::Effect;
use super::cache::ResultCache;
use super::guardrails::{GuardrailError, Guardrails};
use super::policy::{CacheSpec, GuardrailSpec};

/// Per-tool handling, compiled from the bundle.
#[derive(Debug)]
pub struct ToolPolicy {
    pub timeout: Duration,
    /// Extra attempts for retryable backend errors.
    pub retries: u32,
    pub retry_backoff: Duration,
    pub cache: Option<ResultCache>,
    pub guardrails: Option<Guardrails>,
    /// What repeating a call does; decides resumption after a crash.
    pub effect: Effect,
    /// Which calls wait for a person's decision.
    pub approval: crate::approval::ApprovalPolicy,
}

impl Default for ToolPolicy {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30),
            retries: 0,
            retry_backoff: Duration::from_millis(100),
            cache: None,
            guardrails: None,
            effect: Effect::default(),
            approval: Default::default(),
        }
    }
}

impl ToolPolicy {
    /// Compiles the bundle's settings; a bad regex is an error naming it.
    pub fn compile(
        timeout: Duration,
        retries: u32,
        cache: Option<&CacheSpec>,
        guardrails: Option<&GuardrailSpec>,
    ) -> Result<Self, GuardrailError> {
        Ok(Self {
            timeout,
            retries,
            retry_backoff: Duration::from_millis(100),
            cache: cache
                .filter(|c| c.enabled)
                .map(|c| ResultCache::new(c.max_entries, c.ttl.map(Into::into))),
            guardrails: guardrails.map(Guardrails::compile).transpose()?,
            effect: Effect::default(),
            approval: Default::default(),
        })
    }
}
