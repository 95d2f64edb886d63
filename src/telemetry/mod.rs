//! Telemetry consumers of the event bus: Prometheus metrics (and, through
//! `otel`, OpenTelemetry spans). Both are observers; the kernel never calls
//! them directly.

pub mod load_metrics;
pub mod logging;
pub mod metrics;
pub mod otel;
pub mod otel_metrics;
pub mod run_metrics;

pub use metrics::Metrics;
pub use run_metrics::MetricsObserver;
