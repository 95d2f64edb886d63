//! The daemon's measurements over OTLP metrics (when an OTLP endpoint is
//! configured): the same quantities as the Prometheus registry, named by the
//! OpenTelemetry conventions (`gen_ai.client.operation.duration`, ...). A
//! periodic reader exports them from its own thread; nothing blocks a job.

use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, MeterProvider};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};

use super::otel::OtelError;

// The GenAI buckets come from the OpenTelemetry GenAI conventions; the job
// and tool buckets are the daemon's own. The Prometheus registry uses the
// same ones, so both exports agree.
/// GenAI semantic conventions: operation duration bucket boundaries (seconds).
pub const DURATION_BUCKETS: &[f64] = &[
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
/// Job attempt durations (seconds): an agent job takes from a tenth of a
/// second (one short model call) to many minutes (long tool chains, nested
/// agents), so the buckets span 50 ms to 30 min, closer together below a
/// minute where most answers fall. Prometheus and OTLP use the same ones.
pub const JOB_BUCKETS: &[f64] = &[
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
];
/// Tool call durations (seconds): from a cached or in-process call (1 ms)
/// to an `agent` tool running a whole nested job (up to 10 min).
pub const TOOL_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    600.0,
];
/// GenAI semantic conventions: token usage bucket boundaries.
pub const TOKEN_BUCKETS: &[f64] = &[
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];

pub struct OtelMeters {
    provider: SdkMeterProvider,
    pub operation_duration: Histogram<f64>,
    pub token_usage: Histogram<u64>,
    pub jobs_submitted: Counter<u64>,
    pub jobs_finished: Counter<u64>,
    pub job_duration: Histogram<f64>,
    pub turns: Counter<u64>,
    pub tool_calls: Counter<u64>,
    pub tool_duration: Histogram<f64>,
    pub model_errors: Counter<u64>,
    pub reloads: Counter<u64>,
}

impl OtelMeters {
    /// Builds the exporter (blocking: call off the runtime threads). `None`
    /// without an endpoint in config or the OTEL_* environment.
    pub fn init(endpoint: Option<&str>, interval: Duration) -> Result<Option<Self>, OtelError> {
        Ok(meter_provider(endpoint, interval)?.map(Self::declared))
    }

    /// Every instrument, each declared once, here, on `provider`'s meter:
    /// one declaration list (a family split from the others would be a
    /// second place to look for one).
    fn declared(provider: SdkMeterProvider) -> Self {
        let meter = provider.meter("structured-agents");
        Self {
            operation_duration: meter
                .f64_histogram("gen_ai.client.operation.duration")
                .with_unit("s")
                .with_description("GenAI operation duration")
                .with_boundaries(DURATION_BUCKETS.to_vec())
                .build(),
            token_usage: meter
                .u64_histogram("gen_ai.client.token.usage")
                .with_unit("{token}")
                .with_description("Tokens used per model call")
                .with_boundaries(TOKEN_BUCKETS.to_vec())
                .build(),
            jobs_submitted: meter
                .u64_counter("structured_agents.jobs.submitted")
                .with_unit("{job}")
                .build(),
            jobs_finished: meter
                .u64_counter("structured_agents.jobs.finished")
                .with_unit("{job}")
                .build(),
            job_duration: meter
                .f64_histogram("structured_agents.job.duration")
                .with_unit("s")
                .with_boundaries(JOB_BUCKETS.to_vec())
                .build(),
            turns: meter
                .u64_counter("structured_agents.turns")
                .with_unit("{turn}")
                .build(),
            tool_calls: meter
                .u64_counter("structured_agents.tool.calls")
                .with_unit("{call}")
                .build(),
            tool_duration: meter
                .f64_histogram("structured_agents.tool.duration")
                .with_unit("s")
                .with_boundaries(TOOL_BUCKETS.to_vec())
                .build(),
            model_errors: meter
                .u64_counter("structured_agents.model.request.errors")
                .with_unit("{error}")
                .build(),
            reloads: meter
                .u64_counter("structured_agents.reloads")
                .with_unit("{reload}")
                .build(),
            provider,
        }
    }

    /// Exports what is pending and stops (blocking).
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "OTLP metrics shutdown");
        }
    }
}

/// The meter provider exporting over OTLP/HTTP every `interval`, to
/// `endpoint` or where the OTEL_* environment says; `None` when neither
/// names one.
fn meter_provider(
    endpoint: Option<&str>,
    interval: Duration,
) -> Result<Option<SdkMeterProvider>, OtelError> {
    let env = |n: &str| std::env::var(n).ok().filter(|v| !v.trim().is_empty());
    if endpoint.is_none()
        && env("OTEL_EXPORTER_OTLP_ENDPOINT").is_none()
        && env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT").is_none()
    {
        return Ok(None);
    }
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| OtelError::Exporter(e.to_string()))?;
    let mut builder = opentelemetry_otlp::MetricExporter::builder()
        .with_http()
        .with_http_client(client);
    if let Some(base) = endpoint {
        builder = builder.with_endpoint(format!("{}/v1/metrics", base.trim_end_matches('/')));
    }
    let exporter = builder
        .build()
        .map_err(|e| OtelError::Exporter(e.to_string()))?;
    let reader = PeriodicReader::builder(exporter)
        .with_interval(interval)
        .build();
    let mut resource = Resource::builder();
    if env("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("structured-agents");
    }
    Ok(Some(
        SdkMeterProvider::builder()
            .with_reader(reader)
            .with_resource(resource.build())
            .build(),
    ))
}

pub fn kv(key: &'static str, value: &str) -> KeyValue {
    KeyValue::new(key, value.to_string())
}
