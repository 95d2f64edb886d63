//! Logs go to stderr through `tracing`: readable text (no colours or
//! timestamps under journald, which adds its own) or JSON lines for log
//! shippers. `SA_LOG` overrides the filter; otherwise the daemon config's
//! `telemetry.log_filter` sets it, and a reload can change it live.

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry, reload};

use crate::config::LogFormat;

/// The OTLP exporter's own HTTP client must not log into the pipeline it
/// exports (a feedback loop), so those targets are always silenced.
const SILENCED: &str = "hyper=off,hyper_util=off,reqwest=off,h2=off,opentelemetry=off,opentelemetry_sdk=off,opentelemetry_otlp=off";

/// Changes the log filter of the running process.
#[derive(Clone)]
pub struct LogFilter {
    handle: reload::Handle<EnvFilter, Registry>,
}

impl LogFilter {
    /// Applies `filter` (the `telemetry.log_filter` syntax) unless `SA_LOG`
    /// pins it; a filter that does not parse leaves the current one.
    pub fn set(&self, filter: &str) -> Result<(), LogFilterError> {
        if std::env::var_os("SA_LOG").is_some() {
            return Err(LogFilterError::Pinned);
        }
        let parsed = EnvFilter::try_new(format!("{filter},{SILENCED}")).map_err(|source| {
            LogFilterError::Parse {
                filter: filter.to_string(),
                source,
            }
        })?;
        self.handle.reload(parsed).map_err(LogFilterError::Reload)
    }
}

/// Why the log filter was not changed.
#[derive(Debug, thiserror::Error)]
pub enum LogFilterError {
    #[error("SA_LOG is set and overrides telemetry.log_filter")]
    Pinned,
    #[error("telemetry.log_filter {filter:?} does not parse: {source}")]
    Parse {
        filter: String,
        source: tracing_subscriber::filter::ParseError,
    },
    #[error("cannot change the log filter: {0}")]
    Reload(tracing_subscriber::reload::Error),
}

/// Installs the process's logger; `None` when one was installed already
/// (tests), whose filter then cannot be changed.
pub fn init_logging(format: LogFormat, default_filter: &str) -> Option<LogFilter> {
    let filter = std::env::var("SA_LOG").unwrap_or_else(|_| default_filter.to_string());
    let filter = EnvFilter::try_new(format!("{filter},{SILENCED}"))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let (filter, handle) = reload::Layer::new(filter);
    let journald = std::env::var_os("JOURNAL_STREAM").is_some();
    let output = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let output = match (format, journald) {
        (LogFormat::Json, _) => output.json().flatten_event(true).boxed(),
        (LogFormat::Text, true) => output.with_ansi(false).without_time().boxed(),
        (LogFormat::Text, false) => output.boxed(),
    };
    tracing_subscriber::registry()
        .with(filter)
        .with(output)
        .try_init()
        .ok()
        .map(|()| LogFilter { handle })
}
