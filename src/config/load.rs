//! An endpoint's `load` section: where the daemon reads the model server's
//! load and past which values it holds new model calls (docs/models.md,
//! "Load-aware admission"). Raw settings; `crate::load` acts on them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration::HumanDuration;

/// The shortest and longest `poll_interval` accepted: a few times a
/// second at most, and never so rarely that the signal is meaningless.
pub const MIN_POLL: std::time::Duration = std::time::Duration::from_millis(50);
pub const MAX_POLL: std::time::Duration = std::time::Duration::from_secs(10);

/// How the server's load is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum LoadKind {
    /// No reading: the fixed `max_concurrent` permit only (as without `load`).
    #[default]
    Fixed,
    /// vLLM's Prometheus page: `vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc`.
    Vllm,
    /// llama.cpp's Prometheus page (`--metrics`): `llamacpp:requests_deferred`.
    Llamacpp,
}

/// Values past which calls are held. An unset value is not checked.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(deny_unknown_fields, default)]
pub struct LoadThresholds {
    /// Requests the server has queued but not started (vLLM waiting,
    /// llama.cpp deferred).
    pub waiting: Option<f64>,
    /// The server's KV-cache usage, 0 to 1 (vLLM only).
    pub kv_cache: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct LoadConfig {
    pub kind: LoadKind,
    /// The server's Prometheus page, e.g. `http://127.0.0.1:8000/metrics`.
    pub metrics_url: Option<String>,
    /// How often the page is read.
    pub poll_interval: HumanDuration,
    /// How long one read may take.
    pub poll_timeout: HumanDuration,
    /// The largest page read, in bytes.
    pub max_page_bytes: usize,
    /// Past these, every new model call waits.
    pub hold_above: LoadThresholds,
    /// Past these (lower), the first call of a job not yet started waits
    /// too, so jobs in flight finish before new ones add to the queue.
    pub first_call_hold_above: LoadThresholds,
}

impl Default for LoadConfig {
    fn default() -> Self {
        Self {
            kind: LoadKind::Fixed,
            metrics_url: None,
            poll_interval: HumanDuration(std::time::Duration::from_millis(250)),
            poll_timeout: HumanDuration(std::time::Duration::from_secs(1)),
            max_page_bytes: 1 << 20,
            hold_above: LoadThresholds {
                waiting: Some(4.0),
                kv_cache: Some(0.9),
            },
            first_call_hold_above: LoadThresholds {
                waiting: Some(1.0),
                kv_cache: Some(0.8),
            },
        }
    }
}

impl LoadConfig {
    /// What is wrong with it, as (key under the endpoint, message).
    pub fn problem(&self) -> Option<(&'static str, String)> {
        if self.kind != LoadKind::Fixed && self.metrics_url.is_none() {
            return Some((
                "metrics_url",
                "a vllm or llamacpp load needs metrics_url (the server's /metrics page)".into(),
            ));
        }
        let poll: std::time::Duration = self.poll_interval.into();
        if !(MIN_POLL..=MAX_POLL).contains(&poll) {
            return Some((
                "poll_interval",
                format!("must be between {MIN_POLL:?} and {MAX_POLL:?}, not {poll:?}"),
            ));
        }
        if std::time::Duration::from(self.poll_timeout).is_zero() || self.max_page_bytes == 0 {
            return Some((
                "poll_timeout",
                "poll_timeout and max_page_bytes must be above zero".into(),
            ));
        }
        let lower = |first: Option<f64>, all: Option<f64>| match (first, all) {
            (Some(first), Some(all)) => first <= all,
            _ => true,
        };
        let (first, all) = (self.first_call_hold_above, self.hold_above);
        if !lower(first.waiting, all.waiting) || !lower(first.kv_cache, all.kv_cache) {
            return Some((
                "first_call_hold_above",
                "must not be above hold_above (first calls are held first)".into(),
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_load_section_is_checked_where_it_can_go_wrong() {
        let vllm = LoadConfig {
            kind: LoadKind::Vllm,
            metrics_url: Some("http://127.0.0.1:8000/metrics".into()),
            ..LoadConfig::default()
        };
        assert_eq!(vllm.problem(), None);
        let key = |config: LoadConfig| config.problem().map(|(key, _)| key);
        let no_url = LoadConfig {
            metrics_url: None,
            ..vllm.clone()
        };
        assert_eq!(key(no_url), Some("metrics_url"));
        let too_often = LoadConfig {
            poll_interval: HumanDuration(std::time::Duration::from_millis(1)),
            ..vllm.clone()
        };
        assert_eq!(key(too_often), Some("poll_interval"));
        let first_above = LoadConfig {
            first_call_hold_above: LoadThresholds {
                waiting: Some(10.0),
                kv_cache: None,
            },
            ..vllm.clone()
        };
        assert_eq!(key(first_above), Some("first_call_hold_above"));
        // `fixed` reads nothing, so it needs no page.
        assert_eq!(key(LoadConfig::default()), None);
    }
}
