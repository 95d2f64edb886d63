//! The metrics of load-aware admission (docs/models.md): per endpoint, the
//! calls held and released, the calls held now, the load signals last read,
//! the server's refusals and whether the endpoint fell back to its fixed
//! permit. Fed by `DaemonEvent::EndpointLoad`.

use prometheus::{GaugeVec, IntCounterVec, IntGaugeVec, Opts, Registry};

use crate::events::daemon::LoadChange;

pub struct LoadMetrics {
    held: IntCounterVec,
    released: IntCounterVec,
    holding: IntGaugeVec,
    signal: GaugeVec,
    refused: IntCounterVec,
    fallback: IntGaugeVec,
    fallbacks: IntCounterVec,
}

impl LoadMetrics {
    /// Registers them in `registry`: the Prometheus error is the caller's
    /// to wrap (`MetricsError`), so this file needs nothing of `metrics.rs`.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels)?;
            registry.register(Box::new(c.clone()))?;
            Ok::<_, prometheus::Error>(c)
        };
        let gauge = |name: &str, help: &str| {
            let g = IntGaugeVec::new(Opts::new(name, help), &["endpoint"])?;
            registry.register(Box::new(g.clone()))?;
            Ok::<_, prometheus::Error>(g)
        };
        let signal = GaugeVec::new(
            Opts::new(
                "structured_agents_endpoint_load_signal",
                "The model server's load as last read: `waiting` requests, `kv_cache` usage (0-1).",
            ),
            &["endpoint", "signal"],
        )?;
        registry.register(Box::new(signal.clone()))?;
        Ok(Self {
            held: counter(
                "structured_agents_endpoint_calls_held_total",
                "Model calls that waited for the server's load to drop, by whether a job's first call.",
                &["endpoint", "first_call"],
            )?,
            released: counter(
                "structured_agents_endpoint_calls_released_total",
                "Held model calls that went ahead.",
                &["endpoint", "first_call"],
            )?,
            holding: gauge(
                "structured_agents_endpoint_calls_holding",
                "Model calls waiting for the server's load to drop now.",
            )?,
            signal,
            refused: counter(
                "structured_agents_endpoint_load_refusals_total",
                "503 or 529 answers taken as a load signal.",
                &["endpoint", "status"],
            )?,
            fallback: gauge(
                "structured_agents_endpoint_load_fallback",
                "1 while the endpoint's load page cannot be read and only its fixed permit applies.",
            )?,
            fallbacks: counter(
                "structured_agents_endpoint_load_fallbacks_total",
                "Times the endpoint's load page stopped reading.",
                &["endpoint"],
            )?,
        })
    }

    pub fn observe(&self, endpoint: &str, change: &LoadChange) {
        let first = |first_call: bool| if first_call { "true" } else { "false" };
        match change {
            LoadChange::Signals { waiting, kv_cache } => {
                for (name, value) in [("waiting", waiting), ("kv_cache", kv_cache)] {
                    if let Some(value) = value {
                        self.signal.with_label_values(&[endpoint, name]).set(*value);
                    }
                }
            }
            LoadChange::Held { first_call } => {
                self.held
                    .with_label_values(&[endpoint, first(*first_call)])
                    .inc();
                self.holding.with_label_values(&[endpoint]).inc();
            }
            LoadChange::Released { first_call } => {
                self.released
                    .with_label_values(&[endpoint, first(*first_call)])
                    .inc();
                self.holding.with_label_values(&[endpoint]).dec();
            }
            LoadChange::Abandoned { .. } => self.holding.with_label_values(&[endpoint]).dec(),
            LoadChange::Refused { status } => {
                self.refused
                    .with_label_values(&[endpoint, &status.to_string()])
                    .inc();
            }
            LoadChange::Fallback { .. } => {
                self.fallback.with_label_values(&[endpoint]).set(1);
                self.fallbacks.with_label_values(&[endpoint]).inc();
            }
            LoadChange::Recovered => self.fallback.with_label_values(&[endpoint]).set(0),
        }
    }
}
