//! `structured-agents serve`: builds the daemon's services once
//! ([`Daemon::build`]), runs them until SIGTERM/SIGINT ([`Daemon::run`]) and
//! drains ([`Daemon::shutdown`]).
//!
//! Glue only: the services live in their own modules (queue, registry and
//! its reload pipeline, workers, API, telemetry) and talk through traits and
//! the daemon event bus, never through closures handed across.

mod approval_timeouts;
mod lifecycle;
mod new_versions;
pub mod notify;
mod retention;
pub mod state_dir;
mod subscribers;
mod sweep;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::api::{self, AppState, Auth};
use crate::config::Config;
use crate::events::daemon::{DaemonBus, DaemonEvent, QueueHealth, ReloadResult, ReloadTrigger};
use crate::queue::{self, JobQueue};
use crate::registry::{self, Registry, ReloadHandle, Reloader};
use crate::telemetry::Metrics;
use crate::telemetry::logging::LogFilter;
use crate::telemetry::otel::OtelTelemetry;
use crate::worker::{PoolSeams, WorkerPool, WorkerSettings};

use subscribers::{JobTelemetry, LogLines, MetricsScrape, PluginFeed};

pub use lifecycle::SPARE_FILES;

/// How often the daemon checks its queue on its own (see
/// [`api::check_queue`]).
const HEALTH_CHECK_PERIOD: Duration = Duration::from_secs(10);

/// How long an event stream waits for a change notification before it reads
/// the store anyway. With PostgreSQL another daemon's changes arrive over
/// LISTEN, which can miss some while its connection is down: the queue's
/// poll interval. With SQLite every change is announced in this process
/// (and a lagging stream rereads at once), so the recheck is only a safety
/// net: thousands of open streams rereading every half second would keep
/// the store's one reader busy for nothing.
fn sse_recheck(config: &Config) -> Duration {
    match config.queue.backend {
        crate::config::QueueBackend::Sqlite => Duration::from_secs(30),
        crate::config::QueueBackend::Postgres => {
            Duration::from(config.queue.poll_interval).max(api::SSE_MIN_RECHECK)
        }
    }
}

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("queue: {0}")]
    Queue(#[from] crate::queue::QueueError),
    #[error(transparent)]
    StateDir(#[from] state_dir::StateDirError),
    #[error(transparent)]
    Failpoints(#[from] crate::failpoint::FailpointError),
    #[error("the first load failed: {0}")]
    FirstLoad(String),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("{0}")]
    Other(String),
}

/// Runs the daemon until SIGTERM/SIGINT; returns after draining.
/// `config_file` is `--config`, read again by every reload; `new_queue`
/// is `--new-queue` (start an empty queue where one was lost).
pub async fn serve(
    config: Config,
    config_file: Option<PathBuf>,
    log_filter: Option<LogFilter>,
    new_queue: bool,
) -> Result<(), ServeError> {
    crate::failpoint::check_env()?;
    let termination = lifecycle::termination_signal()?;
    let daemon = Daemon::build(config, config_file, log_filter, new_queue).await?;
    daemon.run(termination).await
}

/// The daemon's services, built and wired, not yet serving.
pub struct Daemon {
    config: Arc<Config>,
    queue: Arc<dyn JobQueue>,
    registry: Arc<Registry>,
    reloads: ReloadHandle,
    reloader: Option<Reloader>,
    bus: DaemonBus,
    metrics: Arc<Metrics>,
    otel: Option<Arc<OtelTelemetry>>,
    health: Arc<QueueHealth>,
    wake: Arc<Notify>,
    mcp: api::mcp::McpHub,
    live: Arc<crate::events::live::LiveHub>,
    shutdown: CancellationToken,
    /// Inside another command (`eval --dir`): no address on stdout, no
    /// word to a service manager.
    embedded: bool,
}

impl Daemon {
    /// Makes the state directory private, opens the queue, starts
    /// telemetry and wires every subscriber of the daemon bus. Nothing is
    /// loaded or served until [`Daemon::run`].
    pub async fn build(
        config: Config,
        config_file: Option<PathBuf>,
        log_filter: Option<LogFilter>,
        new_queue: bool,
    ) -> Result<Daemon, ServeError> {
        let config = Arc::new(config);
        {
            let config = config.clone();
            tokio::task::spawn_blocking(move || state_dir::prepare(&config, new_queue))
                .await
                .map_err(|e| ServeError::Other(format!("preparing the state directory: {e}")))??;
        }
        let queue = queue::open(&config).await?;
        let metrics = Metrics::new().map_err(|e| ServeError::Other(e.to_string()))?;
        let otel = lifecycle::start_otel(&config, &metrics).await?;
        let bus = DaemonBus::new();
        let (registry, reloads, reloader) =
            registry::reload::pipeline(config.clone(), config_file, bus.clone());
        registry.keep_pins_of(Arc::new(crate::versions::pins::QueuePins(queue.clone())));
        let reloader = reloader.after_reload(new_versions::moves_jobs(
            queue.clone(),
            registry.clone(),
            bus.clone(),
        ));
        let mcp = api::mcp::McpHub::default();
        bus.subscribe(Arc::new(LogLines::new(log_filter, registry.clone())));
        bus.subscribe(metrics.clone());
        if let Some(otel) = &otel {
            bus.subscribe(otel.clone());
        }
        bus.subscribe(Arc::new(PluginFeed::new(registry.clone())));
        bus.subscribe(Arc::new(mcp.clone()));
        bus.subscribe(Arc::new(lifecycle::SystemdStatus));
        let health = QueueHealth::new(bus.clone(), queue::location(&config));
        Ok(Daemon {
            config,
            queue,
            registry,
            reloads,
            reloader: Some(reloader),
            bus,
            metrics,
            otel,
            health,
            wake: Arc::new(Notify::new()),
            mcp,
            live: crate::events::live::LiveHub::new(),
            shutdown: CancellationToken::new(),
            embedded: false,
        })
    }

    /// The daemon as part of another command (`eval --dir`): its stdout is
    /// the command's, and no service manager waits on it.
    pub fn embedded(mut self) -> Self {
        self.embedded = true;
        self
    }

    /// Loads every input (the first reload), starts the reloader, workers,
    /// retention and the HTTP API, and serves until `termination`.
    pub async fn run(
        mut self,
        termination: impl std::future::Future<Output = ()>,
    ) -> Result<(), ServeError> {
        let stop_reloads = self.first_load().await?;
        let (listener, addr) = self.listen().await?;
        lifecycle::forward_wakeups(&self.queue, &self.wake);
        let _hangups = lifecycle::reload_on_hangup(self.reloads.clone())?;
        let control = crate::control::Control::new(addr);
        let ready = Arc::new(AtomicBool::new(true));
        let state = self.app_state(ready.clone(), control.reload_key.clone().into());
        let workers = tokio::spawn(self.worker_pool(&state).run(self.shutdown.clone()));
        let _sweeps = self.spawn_sweeps();
        let _control_file = control
            .publish(&self.config.paths.state_dir)
            .map_err(|e| {
                tracing::warn!(error = %e, "cannot write the control file; `structured-agents reload --config` falls back to the config's address and token")
            })
            .ok();
        let server_stop = CancellationToken::new();
        // A reload that revokes a key ends its open streams and listens.
        self.bus
            .subscribe(Arc::new(api::RevokedStreams::new(&state)));
        let _scheduler = self.spawn_scheduler(&state);
        let _release_gate = self.spawn_release_gate(&state);
        let _webhooks = self.spawn_webhooks()?;
        let server = self.serve_api(listener, state, server_stop.clone());
        self.announce_ready(addr);

        termination.await;
        self.shutdown(workers, server, server_stop, stop_reloads)
            .await;
        ready.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Starts the reloader and waits for the first load, which must not be
    /// rejected; then moves the jobs of bundles edited while the daemon was
    /// down. Answers the token that stops the reloader.
    async fn first_load(&mut self) -> Result<CancellationToken, ServeError> {
        let stop_reloads = CancellationToken::new();
        if let Some(reloader) = self.reloader.take() {
            tokio::spawn(reloader.run(stop_reloads.clone()));
        }
        let first = self
            .reloads
            .reload(ReloadTrigger::Start)
            .await
            .ok_or_else(|| ServeError::FirstLoad("the reloader stopped".into()))?;
        if first.result == ReloadResult::Rejected {
            return Err(ServeError::FirstLoad(first.errors.join("; ")));
        }
        // Bundles edited while the daemon was down: their `move` jobs move
        // now, before a worker can lease one on its old version.
        new_versions::after_start(self.queue.as_ref(), &self.registry, &self.bus).await;
        Ok(stop_reloads)
    }

    /// The API's listener on `server.listen`, and the address it got.
    async fn listen(&self) -> Result<(tokio::net::TcpListener, SocketAddr), ServeError> {
        // An open key ring on a network address was refused by the load
        // itself (`access::KeyRing::check_exposure`), as a reload would be.
        let listen = self.config.server.listen;
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|source| ServeError::Listen {
                addr: listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| ServeError::Listen {
            addr: listen,
            source,
        })?;
        Ok((listener, addr))
    }

    /// The periodic sweeps, until shutdown: retention, approval timeouts
    /// and the queue's health check.
    fn spawn_sweeps(&self) -> [tokio::task::JoinHandle<()>; 3] {
        let retention = retention::spawn(
            self.queue.clone(),
            self.config.queue.retention.into(),
            self.bus.clone(),
            self.shutdown.clone(),
        );
        let approval_timeouts =
            approval_timeouts::spawn(self.queue.clone(), self.bus.clone(), self.shutdown.clone());
        // Without a reader of /readyz, a deleted queue file or a full disk
        // is still noticed (logged, counted) within a period.
        let health_checks = {
            let (queue, health) = (self.queue.clone(), self.health.clone());
            sweep::every(HEALTH_CHECK_PERIOD, self.shutdown.clone(), move || {
                let (queue, health) = (queue.clone(), health.clone());
                async move {
                    api::check_queue(queue.as_ref(), &health).await;
                }
            })
        };
        [retention, approval_timeouts, health_checks]
    }

    /// The scheduler's loop, its fires admitted through the API's admission.
    fn spawn_scheduler(&self, state: &AppState) -> tokio::task::JoinHandle<()> {
        crate::scheduler::spawn(
            crate::scheduler::Scheduler {
                queue: self.queue.clone(),
                registry: self.registry.clone(),
                bus: self.bus.clone(),
                admission: Arc::new(api::on_behalf::Admission(state.clone())),
            },
            format!("{}-{}", lifecycle::hostname(), std::process::id()),
            self.shutdown.clone(),
        )
    }

    /// The release gate's loop, its candidates' evals admitted through the
    /// API's admission as the daemon.
    fn spawn_release_gate(&self, state: &AppState) -> tokio::task::JoinHandle<()> {
        crate::release::spawn(
            crate::release::ReleaseGate {
                recorder: crate::release::Recorder {
                    queue: self.queue.clone(),
                    registry: self.registry.clone(),
                    reloads: self.reloads.clone(),
                    bus: self.bus.clone(),
                },
                queue: self.queue.clone(),
                admission: Arc::new(api::on_behalf::Admission(state.clone())),
            },
            self.shutdown.clone(),
        )
    }

    /// The sender of the outbox's deliveries: webhooks, and A2A pushes in
    /// their own format.
    fn spawn_webhooks(&self) -> Result<tokio::task::JoinHandle<()>, ServeError> {
        crate::webhook::Sender::new(
            self.queue.clone(),
            self.config.webhooks.clone(),
            self.bus.clone(),
            self.registry.clone(),
        )
        .map(|sender| {
            let pushes = std::sync::Arc::new(api::A2aPushFormat);
            let sender = sender.with_format(crate::queue::outbox::A2A_PUSH, pushes);
            crate::webhook::spawn(sender, self.shutdown.clone())
        })
        .map_err(|e| ServeError::Other(e.to_string()))
    }

    /// Serves the API on `listener` under the server's body and connection
    /// limits until `server_stop`.
    fn serve_api(
        &self,
        listener: tokio::net::TcpListener,
        state: AppState,
        server_stop: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let server_settings = &self.config.server;
        let app = api::router(
            state,
            api::serve::BodyLimits {
                timeout: server_settings.body_timeout.into(),
                max_bytes: server_settings.max_body_bytes,
            },
        );
        let limits = api::serve::ConnectionLimits {
            max_connections: server_settings.max_connections,
            header_timeout: server_settings.header_timeout.into(),
            idle_timeout: server_settings.idle_timeout.into(),
        };
        lifecycle::raise_open_files(limits.max_connections);
        tokio::spawn(api::serve::serve(listener, app, limits, server_stop))
    }

    /// Says the daemon is ready: the log, stdout, systemd (and its watchdog).
    fn announce_ready(&self, addr: SocketAddr) {
        let bundles = self.registry.snapshot().bundles.len();
        let location = queue::location(&self.config);
        tracing::info!(%addr, bundles, queue = %location, "structured-agents is ready");
        if self.embedded {
            return;
        }
        // For scripts and tests that start the daemon on port 0.
        println!("listening on http://{addr}");
        let noun = if bundles == 1 { "bundle" } else { "bundles" };
        notify::ready(&format!("serving on {addr}; {bundles} {noun}"));
        notify::spawn_watchdog(self.shutdown.clone());
    }

    /// Drains the workers, stops the API and the reloader, flushes telemetry.
    async fn shutdown(
        self,
        workers: tokio::task::JoinHandle<()>,
        server: tokio::task::JoinHandle<()>,
        server_stop: CancellationToken,
        stop_reloads: CancellationToken,
    ) {
        self.bus.publish(DaemonEvent::DrainStarted);
        self.shutdown.cancel();
        if let Err(e) = workers.await {
            tracing::error!(error = %e, "worker pool task failed");
        }
        self.bus.publish(DaemonEvent::DrainDone);
        server_stop.cancel();
        stop_reloads.cancel();
        lifecycle::flush_telemetry(&self.config, self.otel, &self.metrics).await;
        match tokio::time::timeout(Duration::from_secs(5), server).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "HTTP server task failed"),
            Err(_) => tracing::warn!("HTTP server did not stop in time (open event streams)"),
        }
        tracing::info!("stopped");
    }

    /// The workers; an eval job's cases are admitted through `state`'s
    /// admission.
    fn worker_pool(&self, state: &AppState) -> Arc<WorkerPool> {
        let config = &self.config;
        let telemetry = JobTelemetry {
            metrics: self.metrics.clone(),
            otel: self.otel.clone(),
            live: self.live.clone(),
            registry: self.registry.clone(),
        };
        Arc::new(WorkerPool::new(
            self.queue.clone(),
            self.registry.clone(),
            WorkerSettings {
                worker_id: format!("{}-{}", lifecycle::hostname(), std::process::id()),
                concurrency: config.queue.workers,
                lease: config.queue.lease.into(),
                poll_interval: config.queue.poll_interval.into(),
                drain_timeout: config.queue.drain_timeout.into(),
                record_messages: lifecycle::capture_content(config),
            },
            PoolSeams {
                observers: Arc::new(telemetry),
                admission: Arc::new(api::on_behalf::Admission(state.clone())),
            },
            self.wake.clone(),
            self.health.clone(),
            self.bus.clone(),
        ))
    }

    fn app_state(&self, ready: Arc<AtomicBool>, reload_key: Arc<str>) -> AppState {
        let config = &self.config;
        let metrics = config.telemetry.metrics.then(|| {
            Arc::new(MetricsScrape {
                metrics: self.metrics.clone(),
                queue: self.queue.clone(),
                otel: self.otel.clone(),
                registry: self.registry.clone(),
            }) as Arc<dyn api::MetricsPage>
        });
        AppState {
            queue: self.queue.clone(),
            registry: self.registry.clone(),
            auth: Auth {
                registry: self.registry.clone(),
                reload_key: Some(reload_key),
                bus: self.bus.clone(),
            },
            front_door: api::guard::FrontDoor::new(
                self.bus.clone(),
                &config.server.public_hosts,
                &config.server.allowed_origins,
            ),
            reloads: self.reloads.clone(),
            metrics,
            bus: self.bus.clone(),
            ready,
            max_attempts: config.queue.max_attempts,
            sse_heartbeat: config.server.sse_heartbeat.into(),
            job_heartbeat: crate::config::heartbeat_every(config.queue.lease.into()),
            sse_recheck: sse_recheck(config),
            queue_health: self.health.clone(),
            live: self.live.clone(),
            mcp: self.mcp.clone(),
            stop: self.shutdown.clone(),
            admission: Arc::default(),
            streams: api::limits::StreamPermits::new(
                config.server.max_event_streams,
                config.server.streams_per_caller(),
            ),
            verifying: Arc::default(),
        }
    }
}
