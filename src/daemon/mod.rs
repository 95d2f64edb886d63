//! `structured-agents serve`: wires config, queue, registry (with its
//! watcher and SIGHUP), the worker pool and the HTTP API together, speaks
//! sd_notify, and shuts down gracefully on SIGTERM/SIGINT.
//!
//! Glue only: each part lives in its own module.

pub mod notify;
mod retention;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::FutureExt;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use crate::api::{self, AppState, Auth, ReloadFn};
use crate::bundle::ToolEnv;
use crate::config::{Config, QueueBackend, QueueDurability};
use crate::plugins::{PluginObserver, PluginRegistry};
use crate::queue::postgres::{PostgresOptions, PostgresQueue};
use crate::queue::sqlite::{Durability, SqliteQueue};
use crate::queue::{HealthProbe, JobQueue, QueueError};
use crate::registry::{Registry, RegistryError, ReloadReport, watch};
use crate::telemetry::otel::{JobSpanInfo, OtelSettings, OtelTelemetry};
use crate::telemetry::otel_metrics::OtelMeters;
use crate::telemetry::{Metrics, MetricsObserver};
use crate::worker::{WorkerPool, WorkerSettings};

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("queue: {0}")]
    Queue(#[from] crate::queue::QueueError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(
        "refusing to listen on non-loopback {0} without a token: set server.token_file or server.token_env"
    )]
    NoToken(SocketAddr),
    #[error("cannot read the token: {0}")]
    Token(String),
    #[error("{0}")]
    Other(String),
}

/// Runs the daemon until SIGTERM/SIGINT; returns after draining.
pub async fn serve(config: Config) -> Result<(), ServeError> {
    let config = Arc::new(config);
    let termination = termination_signal()?;
    let token = load_token(&config)?;
    if !config.server.listen.ip().is_loopback() && token.is_none() {
        return Err(ServeError::NoToken(config.server.listen));
    }

    let queue = open_queue(&config).await?;
    let queue_location = queue_location(&config);
    let metrics = Metrics::new().map_err(|e| ServeError::Other(e.to_string()))?;
    let (plugins, observer_plugins) = load_plugins(&config).await?;
    let otel = start_otel(&config).await?;
    let otlp_endpoint = config.telemetry.otlp_endpoint.clone();
    let meters = tokio::task::spawn_blocking(move || {
        OtelMeters::init(otlp_endpoint.as_deref(), Duration::from_secs(10))
    })
    .await
    .map_err(|e| ServeError::Other(format!("starting OTLP metrics: {e}")))?
    .map_err(|e| ServeError::Other(e.to_string()))?;
    if let Some(meters) = meters {
        tracing::info!("exporting metrics over OTLP");
        let _ = metrics.otlp.set(meters);
    }
    let capture_content = config.telemetry.capture_message_content
        || std::env::var("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
            .is_ok_and(|v| v.eq_ignore_ascii_case("true"));
    // Reloads are asked for by file changes, SIGHUP and MCP servers whose
    // tools changed (the reload binds those bundles again).
    let (changed_tx, mut changed_rx) = mpsc::channel::<()>(1);
    let tool_env = ToolEnv {
        runs_agents: true,
        remote_agents: config.agents.clone(),
        plugins: Some(plugins),
        tools_changed: Some(changed_tx.clone()),
    };
    let registry = Registry::new(config.clone(), tool_env)?;
    let first = registry.reload().await?;
    record_reload(&metrics, &registry, Ok(&first));
    let ready = Arc::new(AtomicBool::new(true));

    if let Some(otel) = &otel {
        otel.record(reload_event(Ok(&first)));
    }
    let mcp_hub = api::mcp::McpHub::default();
    let reload: ReloadFn = {
        let registry = registry.clone();
        let metrics = metrics.clone();
        let otel = otel.clone();
        let mcp_hub = mcp_hub.clone();
        Arc::new(move || {
            let registry = registry.clone();
            let metrics = metrics.clone();
            let otel = otel.clone();
            let mcp_hub = mcp_hub.clone();
            async move {
                let result = reload_with_notify(&registry).await;
                record_reload(&metrics, &registry, result.as_ref());
                if let Some(otel) = &otel {
                    otel.record(reload_event(result.as_ref()));
                }
                if let Ok(report) = &result
                    && report.bundles_changed()
                {
                    // MCP clients list the bundles again; a slow one must
                    // not hold up the reload.
                    tokio::spawn(async move { mcp_hub.notify_tools_changed().await });
                }
                result
            }
            .boxed()
        })
    };

    // Reload on file changes and on SIGHUP.
    let _watcher = watch::watch(
        &[
            config.paths.bundles_dir.clone(),
            config.paths.models_dir.clone(),
        ],
        Duration::from_millis(150),
        changed_tx.clone(),
    )
    .map_err(|e| ServeError::Other(e.to_string()))?;
    let mut hangup = signal(SignalKind::hangup())
        .map_err(|e| ServeError::Other(format!("cannot handle SIGHUP: {e}")))?;
    let reloader = {
        let reload = reload.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    Some(()) = changed_rx.recv() => {}
                    Some(()) = hangup.recv() => tracing::info!("SIGHUP: reloading"),
                    else => return,
                }
                if let Err(e) = reload().await {
                    tracing::error!(error = %e, "reload rejected; keeping the last good snapshot");
                }
            }
        })
    };

    let wake = Arc::new(Notify::new());
    // Jobs submitted, released or resolved by another daemon sharing the
    // queue wake this one's idle workers at once, not at the next poll.
    if let Some(mut runnable) = queue.runnable() {
        let wake = wake.clone();
        tokio::spawn(async move {
            loop {
                match runnable.recv().await {
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        wake.notify_one()
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        });
    }
    let queue_probe = health_probe(&metrics, &queue_location);
    // Tokens of running jobs for whoever watches them (SSE, streaming
    // chat completions); ephemeral, in this process only.
    let tokens = crate::events::tokens::TokenHub::new();
    let shutdown = CancellationToken::new();
    let state = AppState {
        tokens: tokens.clone(),
        mcp: mcp_hub.clone(),
        stop: shutdown.clone(),
        queue_probe: Some(queue_probe.clone()),
        queue: queue.clone(),
        registry: registry.clone(),
        reload,
        metrics: config.telemetry.metrics.then(|| {
            let metrics = metrics.clone();
            let queue = queue.clone();
            let observer_plugins = observer_plugins.clone();
            let otel = otel.clone();
            Arc::new(move || {
                let metrics = metrics.clone();
                let queue = queue.clone();
                let observer_plugins = observer_plugins.clone();
                if let Some(otel) = &otel {
                    metrics.spans_dropped.set(otel.dropped() as i64);
                }
                async move {
                    for observer in observer_plugins.values() {
                        metrics
                            .observer_dropped
                            .with_label_values(&[observer.plugin_name()])
                            .set(observer.dropped() as f64);
                    }
                    render_metrics(&metrics, &queue).await
                }
                .boxed()
            }) as api::MetricsFn
        }),
        wake: wake.clone(),
        ready: ready.clone(),
        max_attempts: config.queue.max_attempts,
        sse_heartbeat: config.server.sse_heartbeat.into(),
        sse_recheck: Duration::from(config.queue.poll_interval).max(api::SSE_MIN_RECHECK),
        on_submit: {
            let metrics = metrics.clone();
            Arc::new(move |bundle: &str| metrics.job_submitted(bundle))
        },
        on_ended: {
            let metrics = metrics.clone();
            Arc::new(move |event: &crate::events::EventEnvelope| {
                metrics.job_ended_by_request(event)
            })
        },
    };
    let app = api::router(
        state,
        Auth(token.map(Arc::new)),
        config.server.max_body_bytes,
    );
    let listener = tokio::net::TcpListener::bind(config.server.listen)
        .await
        .map_err(|source| ServeError::Listen {
            addr: config.server.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| ServeError::Listen {
        addr: config.server.listen,
        source,
    })?;

    let pool = Arc::new(
        WorkerPool::new(
            queue.clone(),
            registry.clone(),
            WorkerSettings {
                worker_id: format!("{}-{}", hostname(), std::process::id()),
                concurrency: config.queue.workers,
                lease: config.queue.lease.into(),
                poll_interval: config.queue.poll_interval.into(),
                drain_timeout: config.queue.drain_timeout.into(),
                record_messages: capture_content,
            },
            {
                let metrics = metrics.clone();
                let tokens = tokens.clone();
                let global: Vec<String> = config.observers.enabled.clone();
                let observer_plugins = observer_plugins.clone();
                let otel = otel.clone();
                Arc::new(
                    move |loaded: &crate::registry::LoadedBundle, job: &crate::queue::Job| {
                        let endpoint = loaded.backend.info();
                        // Only the bundle's declared tools become label values.
                        let declared = loaded.tools.schemas().iter().map(|s| s.name.clone());
                        let mut observers = vec![Arc::new(
                            MetricsObserver::new(metrics.clone(), endpoint.provider.clone())
                                .with_declared_tools(loaded.name(), declared),
                        )
                            as Arc<dyn crate::events::Observer>];
                        if let Some(otel) = &otel {
                            observers.push(otel.observer(JobSpanInfo {
                                job_id: job.id.to_string(),
                                bundle: loaded.name().to_string(),
                                bundle_version: loaded.version().to_string(),
                                model: loaded.bundle.raw.model.name.clone(),
                                endpoint,
                                traceparent: job.traceparent.clone(),
                            }));
                        }
                        for name in global.iter().chain(loaded.bundle.raw.observers.iter()) {
                            if let Some(plugin) = observer_plugins.get(name) {
                                observers.push(plugin.clone());
                            }
                        }
                        observers.push(Arc::new(crate::events::tokens::TokenObserver::new(
                            tokens.clone(),
                            job.id.to_string(),
                        )));
                        observers
                    },
                )
            },
            wake,
        )
        .with_health_probe(queue_probe),
    );
    let workers = tokio::spawn(pool.run(shutdown.clone()));
    let retention: Duration = config.queue.retention.into();
    let _retention = retention::spawn(
        queue.clone(),
        retention,
        (retention / 10).min(Duration::from_secs(60)),
        metrics.clone(),
        shutdown.clone(),
    );

    let server_stop = CancellationToken::new();
    let server = {
        let stop = server_stop.clone();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await
        })
    };
    let bundles = registry.snapshot().bundles.len();
    tracing::info!(%addr, bundles, queue = %queue_location, "structured-agents is ready");
    // For scripts and tests that start the daemon on port 0.
    println!("listening on http://{addr}");
    notify::ready(&format!("serving on {addr}; {bundles} bundles"));
    notify::spawn_watchdog(shutdown.clone());

    termination.await;
    notify::stopping();
    tracing::info!("shutting down: draining jobs");
    shutdown.cancel();
    if let Err(e) = workers.await {
        tracing::error!(error = %e, "worker pool task failed");
    }
    server_stop.cancel();
    reloader.abort();
    if let Some(otel) = otel {
        otel.shutdown().await;
    }
    if metrics.otlp.get().is_some() {
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
    match tokio::time::timeout(Duration::from_secs(5), server).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => tracing::warn!(error = %e, "HTTP server stopped with an error"),
        _ => tracing::warn!("HTTP server did not stop in time (open event streams)"),
    }
    ready.store(false, Ordering::SeqCst);
    tracing::info!("stopped");
    Ok(())
}

/// Loads the plugins directory and starts every observer plugin (each with
/// its `[observers.config.<name>]`). A plugin that fails is logged and left
/// out; the daemon still starts.
async fn load_plugins(
    config: &Config,
) -> Result<
    (
        Arc<PluginRegistry>,
        Arc<std::collections::BTreeMap<String, Arc<PluginObserver>>>,
    ),
    ServeError,
> {
    let (dir, cache) = (
        config.paths.plugins_dir.clone(),
        config.paths.state_dir.join("plugin-cache"),
    );
    let observers_config = config.observers.clone();
    tokio::task::spawn_blocking(move || {
        let (registry, errors) = PluginRegistry::load_dir(&dir, &cache);
        for e in &errors {
            tracing::error!(error = %e, "plugin not loaded");
        }
        let mut observers = std::collections::BTreeMap::new();
        for info in registry.list().into_iter().filter(|p| p.kind == "observer") {
            let Some(plugin) = registry.get(&info.name) else { continue };
            let plugin_config = observers_config.config.get(&info.name).cloned().unwrap_or(serde_json::Value::Null);
            let capacity = observers_config.queue_capacity.unwrap_or(1024);
            match PluginObserver::start(plugin.clone(), &plugin_config, capacity, 5) {
                Ok(observer) => {
                    observers.insert(info.name.clone(), observer);
                }
                Err(e) => tracing::error!(observer = %info.name, error = %e, "observer plugin not started"),
            }
        }
        for name in &observers_config.enabled {
            if !observers.contains_key(name) {
                tracing::error!(observer = %name, "observers.enabled names an observer plugin that is not loaded");
            }
        }
        (Arc::new(registry), Arc::new(observers))
    })
    .await
    .map_err(|e| ServeError::Other(format!("loading plugins: {e}")))
}

/// Starts OTLP span export when an endpoint is configured (config or OTEL_* env).
async fn start_otel(config: &Config) -> Result<Option<Arc<OtelTelemetry>>, ServeError> {
    let t = &config.telemetry;
    let settings = OtelSettings {
        endpoint: t.otlp_endpoint.clone(),
        protocol: t.otlp_protocol.clone(),
        capture_message_content: t.capture_message_content,
        max_queue_size: t.max_queue_size,
        shutdown_timeout: t.shutdown_timeout.into(),
    };
    // The exporter's blocking HTTP client must be built off the runtime.
    let otel = tokio::task::spawn_blocking(move || OtelTelemetry::init(settings))
        .await
        .map_err(|e| ServeError::Other(format!("starting OTLP export: {e}")))?
        .map_err(|e| ServeError::Other(e.to_string()))?;
    if otel.is_some() {
        tracing::info!("exporting spans over OTLP");
    }
    Ok(otel)
}

/// A reload wrapped in RELOADING=1 … READY=1 with a STATUS line.
pub async fn reload_with_notify(registry: &Arc<Registry>) -> Result<ReloadReport, RegistryError> {
    notify::reloading();
    let result = registry.reload().await;
    match &result {
        Ok(report) => {
            log_report(report);
            let status = if report.failed.is_empty() {
                format!("reload {} applied", report.generation)
            } else {
                format!(
                    "reload {}: {} bundle(s) rejected: {}",
                    report.generation,
                    report.failed.len(),
                    report.errors.first().cloned().unwrap_or_default()
                )
            };
            notify::ready(&status);
        }
        Err(e) => {
            tracing::error!(error = %e, "reload rejected; keeping the last good snapshot");
            notify::ready(&format!("reload rejected: {e}"));
        }
    }
    result
}

/// The `Reload` event of a reload's outcome.
fn reload_event(result: Result<&ReloadReport, &RegistryError>) -> crate::events::EventEnvelope {
    let event = match result {
        Ok(r) => crate::events::Event::Reload {
            generation: r.generation,
            result: r.result.to_string(),
            added: r.added.clone(),
            changed: r.changed.clone(),
            removed: r.removed.clone(),
            failed: r.failed.clone(),
            errors: r.errors.clone(),
        },
        Err(e) => crate::events::Event::Reload {
            generation: 0,
            result: "rejected".into(),
            added: vec![],
            changed: vec![],
            removed: vec![],
            failed: vec![],
            errors: vec![e.to_string()],
        },
    };
    crate::events::EventEnvelope {
        run_id: String::new(),
        bundle: String::new(),
        bundle_version: String::new(),
        parent: None,
        seq: 0,
        timestamp: crate::events::timestamp_now(),
        event,
    }
}

/// Counts a reload and refreshes the bundle-status gauges.
fn record_reload(
    metrics: &Metrics,
    registry: &Registry,
    result: Result<&ReloadReport, &RegistryError>,
) {
    let outcome = match result {
        Ok(report) => report.result,
        Err(_) => "rejected",
    };
    metrics.reload(outcome);
    let snapshot = registry.snapshot();
    for status in ["ok", "degraded", "invalid"] {
        let count = snapshot
            .bundles
            .values()
            .chain(&snapshot.rejected)
            .filter(|e| {
                serde_json::to_value(e.status)
                    .ok()
                    .and_then(|v| v.as_str().map(|s| s == status))
                    .unwrap_or(false)
            })
            .count();
        metrics
            .bundles
            .with_label_values(&[status])
            .set(count as i64);
    }
}

/// Feeds the queue's health (leases, `/readyz` pings) to the metrics and
/// logs each change between reachable and unreachable once.
fn health_probe(metrics: &Arc<Metrics>, location: &str) -> HealthProbe {
    let metrics = metrics.clone();
    let location = location.to_string();
    let up = Arc::new(AtomicBool::new(true));
    Arc::new(move |operation: &'static str, worked: bool| {
        metrics.queue_operation(operation, worked);
        if up.swap(worked, Ordering::SeqCst) != worked {
            if worked {
                tracing::info!(queue = %location, operation, "queue reachable again");
            } else {
                tracing::error!(
                    queue = %location,
                    operation,
                    "queue unreachable: no job is leased or recorded until it answers (retrying; see structured_agents_queue_up)"
                );
            }
        }
    })
}

/// Opens the configured queue backend, applying pending migrations.
/// (With PostgreSQL, other daemons' submissions reach this one through
/// `JobQueue::runnable`, which `serve` forwards to the workers' wake-up.)
pub async fn open_queue(config: &Config) -> Result<Arc<dyn JobQueue>, QueueError> {
    let retry = crate::queue::RetryPolicy {
        backoff_base: config.queue.backoff_base.into(),
        backoff_max: config.queue.backoff_max.into(),
        max_crash_resumes: config.queue.max_crash_resumes,
    };
    Ok(match config.queue.backend {
        QueueBackend::Sqlite => {
            let durability = match config.queue.durability {
                QueueDurability::Full => Durability::Full,
                QueueDurability::Fast => Durability::Fast,
            };
            Arc::new(SqliteQueue::open_with(&config.queue_path(), retry, durability).await?)
        }
        QueueBackend::Postgres => {
            Arc::new(PostgresQueue::open(postgres_options(config)?, retry).await?)
        }
    })
}

/// Where the queue lives, for logs.
pub fn queue_location(config: &Config) -> String {
    match config.queue.backend {
        QueueBackend::Sqlite => config.queue_path().display().to_string(),
        QueueBackend::Postgres => format!(
            "{} (schema {})",
            config.queue.url.as_deref().unwrap_or_default(),
            config.queue.schema
        ),
    }
}

/// The PostgreSQL settings, with the password read from the variable
/// `queue.password_env` names (never from the file).
pub fn postgres_options(config: &Config) -> Result<PostgresOptions, QueueError> {
    let queue = &config.queue;
    let url = queue.url.clone().ok_or_else(|| QueueError::Setting {
        key: "queue.url",
        message: "backend \"postgres\" needs a url: add url = \"postgres://USER@HOST:PORT/DATABASE\" under [queue]".into(),
    })?;
    let password = match &queue.password_env {
        None => None,
        Some(name) => Some(std::env::var(name).map_err(|e| QueueError::Setting {
            key: "queue.password_env",
            message: format!(
                "names the environment variable {name}, which cannot be read ({e}): export it with the database password, or remove queue.password_env for trust or peer authentication"
            ),
        })?),
    };
    Ok(PostgresOptions {
        url,
        password,
        schema: queue.schema.clone(),
        pool_size: queue.pool_size,
    })
}

/// Renders /metrics; the live queue gauges are read from the store's index
/// at scrape time (finished jobs are counted by `jobs_finished_total`).
async fn render_metrics(metrics: &Metrics, queue: &Arc<dyn JobQueue>) -> String {
    match queue.live_counts().await {
        Ok(counts) => {
            for (state, n) in counts {
                metrics
                    .queue_jobs
                    .with_label_values(&[state.as_str()])
                    .set(n as i64);
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot read queue depth for metrics"),
    }
    metrics.render()
}

fn log_report(report: &ReloadReport) {
    tracing::info!(
        generation = report.generation,
        result = report.result,
        added = ?report.added,
        changed = ?report.changed,
        removed = ?report.removed,
        failed = ?report.failed,
        "reload"
    );
    for e in &report.errors {
        tracing::warn!(error = %e, "bundle error");
    }
}

/// Installs the SIGTERM/SIGINT handlers now (so a signal arriving during
/// start-up is not fatal) and resolves when one arrives.
fn termination_signal() -> Result<impl std::future::Future<Output = ()>, ServeError> {
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

fn load_token(config: &Config) -> Result<Option<String>, ServeError> {
    if let Some(file) = &config.server.token_file {
        let text = std::fs::read_to_string(file)
            .map_err(|e| ServeError::Token(format!("{}: {e}", file.display())))?;
        let token = text.lines().next().unwrap_or_default().trim().to_string();
        if token.is_empty() {
            return Err(ServeError::Token(format!("{} is empty", file.display())));
        }
        return Ok(Some(token));
    }
    if let Some(var) = &config.server.token_env {
        return match std::env::var(var) {
            Ok(t) if !t.trim().is_empty() => Ok(Some(t.trim().to_string())),
            _ => Err(ServeError::Token(format!(
                "environment variable {var} (server.token_env) is not set"
            ))),
        };
    }
    Ok(None)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "worker".into())
}

/// Checks a config file and everything it points at (for `validate --config`).
pub fn check_paths(config: &Config) -> Vec<String> {
    let mut problems = Vec::new();
    for (key, dir) in [
        ("paths.bundles_dir", &config.paths.bundles_dir),
        ("paths.models_dir", &config.paths.models_dir),
    ] {
        if !Path::new(dir).is_dir() {
            problems.push(format!("{key}: {} is not a directory", dir.display()));
        }
    }
    problems
}
