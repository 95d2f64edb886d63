//! Logs go to stderr through `tracing`: readable text (no colours or
//! timestamps under journald, which adds its own) or JSON lines for log
//! shippers. `SA_LOG` overrides the filter.

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

pub fn init_logging(format: LogFormat, default_filter: &str) {
    // The OTLP exporter's own HTTP client must not log into the pipeline it
    // exports (a feedback loop), so those targets are silenced.
    let filter = std::env::var("SA_LOG").unwrap_or_else(|_| default_filter.to_string());
    let filter = format!(
        "{filter},hyper=off,hyper_util=off,reqwest=off,h2=off,opentelemetry=off,opentelemetry_sdk=off,opentelemetry_otlp=off"
    );
    let filter = EnvFilter::try_new(&filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let journald = std::env::var_os("JOURNAL_STREAM").is_some();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match (format, journald) {
        (LogFormat::Json, _) => builder.json().flatten_event(true).try_init(),
        (LogFormat::Text, true) => builder.with_ansi(false).without_time().try_init(),
        (LogFormat::Text, false) => builder.try_init(),
    };
    // Already initialised (tests): keep the first subscriber.
    let _ = result;
}
