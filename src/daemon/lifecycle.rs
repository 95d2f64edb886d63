//! The daemon's life as the operating system sees it: signals (SIGTERM and
//! SIGINT stop, SIGHUP reloads), systemd's readiness protocol (as a
//! subscriber of the daemon bus), telemetry exporters started at the
//! beginning and flushed at the end.

use std::sync::Arc;
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::Notify;

use super::{ServeError, notify};
use crate::config::Config;
use crate::events::daemon::{DaemonEvent, DaemonObserver, ReloadResult, ReloadTrigger};
use crate::queue::JobQueue;
use crate::registry::ReloadHandle;
use crate::telemetry::Metrics;
use crate::telemetry::otel::{OtelSettings, OtelTelemetry};
use crate::telemetry::otel_metrics::OtelMeters;

/// Installs the SIGTERM/SIGINT handlers now (so a signal arriving during
/// start-up is not fatal) and resolves when one arrives.
pub fn termination_signal() -> Result<impl std::future::Future<Output = ()>, ServeError> {
    let mut term = signal(SignalKind::terminate())
        .map_err(|e| ServeError::Other(format!("cannot handle SIGTERM: {e}")))?;
    let mut int = signal(SignalKind::interrupt())
        .map_err(|e| ServeError::Other(format!("cannot handle SIGINT: {e}")))?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM"),
            _ = int.recv() => tracing::info!("SIGINT"),
        }
    })
}

/// SIGHUP asks the reloader for a reload (its outcome is published like
/// any other). The task ends with the returned guard.
pub fn reload_on_hangup(reloads: ReloadHandle) -> Result<AbortOnDrop, ServeError> {
    let mut hangup = signal(SignalKind::hangup())
        .map_err(|e| ServeError::Other(format!("cannot handle SIGHUP: {e}")))?;
    Ok(AbortOnDrop(tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            reloads.request(ReloadTrigger::Signal);
        }
    })))
}

/// Aborts its task when dropped.
pub struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Jobs submitted, released or resolved by another daemon sharing the queue
/// wake this one's idle workers at once, not at the next poll.
pub fn forward_wakeups(queue: &Arc<dyn JobQueue>, wake: &Arc<Notify>) {
    let Some(mut runnable) = queue.runnable() else {
        return;
    };
    let wake = wake.clone();
    tokio::spawn(async move {
        use tokio::sync::broadcast::error::RecvError;
        loop {
            match runnable.recv().await {
                Ok(_) | Err(RecvError::Lagged(_)) => wake.notify_one(),
                Err(RecvError::Closed) => return,
            }
        }
    });
}

/// Tells systemd about reloads and the drain (RELOADING=1 … READY=1 with a
/// STATUS line; STOPPING=1). The first load is announced by `run` once the
/// API listens, not here.
pub struct SystemdStatus;

impl DaemonObserver for SystemdStatus {
    fn on_daemon_event(&self, event: &DaemonEvent) {
        match event {
            DaemonEvent::ReloadStarted { trigger } if *trigger != ReloadTrigger::Start => {
                notify::reloading()
            }
            DaemonEvent::Reload(outcome) if outcome.trigger != ReloadTrigger::Start => {
                let status = match outcome.result {
                    ReloadResult::Applied => format!("reload {} applied", outcome.generation),
                    ReloadResult::Partial => format!(
                        "reload {}: {} bundle(s) failed: {}",
                        outcome.generation,
                        outcome.failed.len(),
                        outcome.errors.first().cloned().unwrap_or_default()
                    ),
                    ReloadResult::Rejected => format!(
                        "reload rejected, generation {} keeps serving: {}",
                        outcome.generation,
                        outcome.errors.first().cloned().unwrap_or_default()
                    ),
                };
                notify::ready(&status);
            }
            DaemonEvent::DrainStarted => notify::stopping(),
            // systemd hears only of reloads and the drain; the start's own
            // reload is announced as READY=1 by the daemon's start. Every
            // variant is named so a new one is a decision, not an accident
            // (the list is `telemetry/otel.rs`'s again, kept so: each
            // observer decides for itself, and the sets differ).
            DaemonEvent::ReloadStarted { .. }
            | DaemonEvent::Reload(_)
            | DaemonEvent::JobSubmitted { .. }
            | DaemonEvent::JobEndedByRequest { .. }
            | DaemonEvent::PluginLoaded { .. }
            | DaemonEvent::PluginUnloaded { .. }
            | DaemonEvent::BundleDegraded(_)
            | DaemonEvent::QueueOperation { .. }
            | DaemonEvent::QueueUp { .. }
            | DaemonEvent::QueueDown { .. }
            | DaemonEvent::ApprovalDecided { .. }
            | DaemonEvent::JobsPurged { .. }
            | DaemonEvent::LeaseLost { .. }
            | DaemonEvent::RequestRefused { .. }
            | DaemonEvent::SubmissionRefused { .. }
            | DaemonEvent::Release { .. }
            | DaemonEvent::EvalRan(_)
            | DaemonEvent::JobsMoved { .. }
            | DaemonEvent::ScheduleFired { .. }
            | DaemonEvent::ScheduleRemoved { .. }
            | DaemonEvent::WebhookDelivery { .. }
            | DaemonEvent::StaleSettle { .. }
            | DaemonEvent::DrainDone
            | DaemonEvent::EndpointLoad { .. }
            | DaemonEvent::ModelAttemptFailed { .. } => {}
        }
    }
}

/// Starts OTLP span and metric export when an endpoint is configured
/// (config or OTEL_* environment).
pub async fn start_otel(
    config: &Config,
    metrics: &Metrics,
) -> Result<Option<Arc<OtelTelemetry>>, ServeError> {
    let t = &config.telemetry;
    let settings = OtelSettings {
        endpoint: t.otlp_endpoint.clone(),
        protocol: t.otlp_protocol.clone(),
        capture_message_content: t.capture_message_content,
        max_queue_size: t.max_queue_size,
        shutdown_timeout: t.shutdown_timeout.into(),
    };
    // The exporters' blocking HTTP clients must be built off the runtime.
    let otel = tokio::task::spawn_blocking(move || OtelTelemetry::init(settings))
        .await
        .map_err(|e| ServeError::Other(format!("starting OTLP export: {e}")))?
        .map_err(|e| ServeError::Other(e.to_string()))?;
    if otel.is_some() {
        tracing::info!("exporting spans over OTLP");
    }
    let endpoint = t.otlp_endpoint.clone();
    let meters = tokio::task::spawn_blocking(move || {
        OtelMeters::init(endpoint.as_deref(), Duration::from_secs(10))
    })
    .await
    .map_err(|e| ServeError::Other(format!("starting OTLP metrics: {e}")))?
    .map_err(|e| ServeError::Other(e.to_string()))?;
    if let Some(meters) = meters {
        tracing::info!("exporting metrics over OTLP");
        let _ = metrics.otlp.set(meters);
    }
    Ok(otel)
}

/// Flushes spans and OTLP metrics within the shutdown deadline.
pub async fn flush_telemetry(
    config: &Config,
    otel: Option<Arc<OtelTelemetry>>,
    metrics: &Arc<Metrics>,
) {
    if let Some(otel) = otel {
        otel.shutdown().await;
    }
    if metrics.otlp.get().is_none() {
        return;
    }
    let metrics = metrics.clone();
    let flushed = tokio::task::spawn_blocking(move || {
        if let Some(meters) = metrics.otlp.get() {
            meters.shutdown();
        }
    });
    if tokio::time::timeout(config.telemetry.shutdown_timeout.into(), flushed)
        .await
        .is_err()
    {
        tracing::warn!("OTLP metrics flush did not finish before the shutdown deadline");
    }
}

/// Whether prompts go on events (the operator opted in to content capture).
pub fn capture_content(config: &Config) -> bool {
    config.telemetry.capture_message_content
        || std::env::var("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
            .is_ok_and(|v| v.eq_ignore_ascii_case("true"))
}

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "worker".into())
}

/// File descriptors the daemon keeps besides its connections: the queue,
/// plugins, MCP servers' pipes, tool processes, the log, watchers.
pub const SPARE_FILES: u64 = 1024;

/// Raises the soft limit of open files towards the hard limit, enough for
/// `max_connections` plus [`SPARE_FILES`] (a shell's soft limit is often
/// 1024, which a few hundred idle sockets used to exhaust, stopping
/// `accept` for everyone). Says so when the hard limit is too low.
pub fn raise_open_files(max_connections: usize) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let wanted = max_connections as u64 + SPARE_FILES;
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    if soft < wanted {
        let raised = wanted.min(hard);
        match setrlimit(Resource::RLIMIT_NOFILE, raised, hard) {
            Ok(()) => tracing::info!(from = soft, to = raised, "raised the open-files limit"),
            Err(e) => tracing::warn!(error = %e, "cannot raise the open-files limit"),
        }
    }
    if hard < wanted {
        tracing::warn!(
            hard_limit = hard,
            wanted,
            "the open-files limit is below server.max_connections plus {SPARE_FILES} spare: past it, accepting stops briefly; raise LimitNOFILE= (or `ulimit -n`) or lower server.max_connections"
        );
    }
}
