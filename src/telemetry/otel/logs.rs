//! The OTLP logs pipeline the GenAI conventions' log-based events leave
//! through: opted-in message content (`content`) and eval results
//! (`evaluation`). Over the spans' protocol — http/protobuf to
//! `{base}/v1/logs` (or the OTEL_* logs endpoint), or gRPC — exported by
//! the SDK's batch processor from its own thread; a record is only built
//! when an event happens, so a daemon with neither sends nothing.

use std::time::Duration;

use opentelemetry::logs::Severity;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::logs::{
    BatchConfigBuilder, BatchLogProcessor, LogBatch, LogExporter, SdkLoggerProvider,
};

use super::{OtelError, ReportingExporter};

/// The logs pipeline over `protocol`, to `base` (else the OTEL_* logs
/// endpoint variables).
pub(super) fn provider(
    protocol: &str,
    base: Option<&str>,
    resource: Resource,
    max_queue_size: usize,
) -> Result<SdkLoggerProvider, OtelError> {
    let exporter = match protocol {
        "http/protobuf" => {
            let mut builder = opentelemetry_otlp::LogExporter::builder()
                .with_http()
                .with_http_client(super::blocking_client()?);
            if let Some(base) = base {
                builder = builder.with_endpoint(format!("{}/v1/logs", base.trim_end_matches('/')));
            }
            builder.build()
        }
        #[cfg(feature = "otlp-grpc")]
        "grpc" => {
            use opentelemetry_otlp::WithTonicConfig as _;
            let mut builder = opentelemetry_otlp::LogExporter::builder().with_tonic();
            if let Some(base) = base {
                builder = builder.with_endpoint(base.to_string());
            }
            builder.build()
        }
        other => return Err(OtelError::Protocol(other.to_string())),
    }
    .map_err(|e| OtelError::Exporter(e.to_string()))?;
    let processor = BatchLogProcessor::builder(ReportingExporter::new(exporter))
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_max_queue_size(max_queue_size.max(64) * 4)
                .with_scheduled_delay(Duration::from_millis(500))
                .build(),
        )
        .build();
    Ok(SdkLoggerProvider::builder()
        .with_log_processor(processor)
        .with_resource(resource)
        .build())
}

impl<E: LogExporter> LogExporter for ReportingExporter<E> {
    fn export(
        &self,
        batch: LogBatch<'_>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        let events = batch.iter().count();
        let export = self.inner.export(batch);
        async move {
            let result = export.await;
            self.report(&result, "log event", events);
            result
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn event_enabled(&self, level: Severity, target: &str, name: Option<&str>) -> bool {
        self.inner.event_enabled(level, target, name)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
