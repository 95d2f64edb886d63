//! Where the daemon's telemetry plugs in: the observers of each job (metrics,
//! spans, observer plugins, live tokens), the `/metrics` page, and the
//! subscribers of the daemon bus that are not a telemetry module's own
//! (one log line per happening; observer plugins hearing them too).

use std::sync::Arc;

use async_trait::async_trait;

use crate::events::daemon::{DaemonEvent, DaemonObserver, ReloadOutcome, ReloadResult};
use crate::events::{Observer, live};
use crate::queue::{JobQueue, LeasedJob};
use crate::registry::{LoadedBundle, Registry};
use crate::telemetry::logging::LogFilter;
use crate::telemetry::otel::{JobSpanInfo, OtelTelemetry};
use crate::telemetry::{Metrics, MetricsObserver};
use crate::worker::JobObservers;

/// The observers of one job, from what the registry serves now.
pub struct JobTelemetry {
    pub metrics: Arc<Metrics>,
    pub otel: Option<Arc<OtelTelemetry>>,
    pub live: Arc<live::LiveHub>,
    pub registry: Arc<Registry>,
}

impl JobObservers for JobTelemetry {
    fn observers(&self, loaded: &LoadedBundle, job: &LeasedJob) -> Vec<Arc<dyn Observer>> {
        let endpoint = loaded.backend.info();
        let snapshot = self.registry.snapshot();
        // Only declared tools become label values, in nested runs too.
        let mut observers = vec![Arc::new(
            MetricsObserver::new(self.metrics.clone(), endpoint.provider.clone())
                .with_declared_tools(snapshot.declared_tools.clone()),
        ) as Arc<dyn Observer>];
        if let Some(otel) = &self.otel {
            observers.push(otel.observer(JobSpanInfo {
                job_id: job.id.to_string(),
                conversation_id: job.conversation_id.clone(),
                bundle: loaded.name().to_string(),
                bundle_version: loaded.version().to_string(),
                model: loaded.bundle.raw.model.name.clone(),
                endpoint,
                trace: job.trace.clone(),
                agents: snapshot.agents.clone(),
            }));
        }
        for plugin in snapshot.observers_of(&loaded.bundle) {
            observers.push(plugin);
        }
        observers.push(Arc::new(live::LiveObserver::new(
            self.live.clone(),
            job.id.to_string(),
        )));
        observers
    }
}

/// `/metrics`: the live queue gauges and drop counters are read at scrape
/// time (finished jobs are counted by `jobs_finished_total`).
pub struct MetricsScrape {
    pub metrics: Arc<Metrics>,
    pub queue: Arc<dyn JobQueue>,
    pub otel: Option<Arc<OtelTelemetry>>,
    pub registry: Arc<Registry>,
}

#[async_trait]
impl crate::api::MetricsPage for MetricsScrape {
    async fn render(&self) -> String {
        let metrics = &self.metrics;
        if let Some(otel) = &self.otel {
            metrics.spans_dropped.set(otel.dropped() as i64);
        }
        for observer in self.registry.snapshot().observers.values() {
            metrics
                .observer_dropped
                .with_label_values(&[observer.plugin_name()])
                .set(observer.dropped() as f64);
        }
        match self.queue.live_counts().await {
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
        match self.queue.schedules().await {
            Ok(schedules) => {
                metrics.schedule_next_fire.reset();
                // The soonest next fire of each bundle's schedules.
                let mut soonest: std::collections::BTreeMap<String, i64> = Default::default();
                for schedule in schedules.iter().filter(|s| !s.paused) {
                    let (Some(next), Some(bundle)) = (
                        schedule.next_fire,
                        crate::api::schedules::bundle_of(schedule),
                    ) else {
                        continue;
                    };
                    let at = soonest.entry(bundle).or_insert(next);
                    *at = (*at).min(next);
                }
                for (bundle, next) in soonest {
                    metrics
                        .schedule_next_fire
                        .with_label_values(&[bundle.as_str()])
                        .set(next / 1000);
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot read the schedules for metrics"),
        }
        match self.queue.dead_deliveries().await {
            Ok(n) => metrics
                .webhooks_dead
                .set(i64::try_from(n).unwrap_or(i64::MAX)),
            Err(e) => {
                tracing::warn!(error = %e, "cannot count dead webhook deliveries for metrics")
            }
        }
        metrics.render()
    }
}

/// Observer plugins hear the daemon's happenings too, as
/// `{"daemon_event": {...}}` (queue operations excepted: one per lease).
pub struct PluginFeed {
    registry: Arc<Registry>,
}

impl PluginFeed {
    pub fn new(registry: Arc<Registry>) -> Self {
        Self { registry }
    }
}

impl DaemonObserver for PluginFeed {
    fn on_daemon_event(&self, event: &DaemonEvent) {
        if matches!(event, DaemonEvent::QueueOperation { .. }) {
            return;
        }
        let snapshot = self.registry.snapshot();
        if snapshot.observers.is_empty() {
            return;
        }
        let json = serde_json::json!({ "daemon_event": event }).to_string();
        for observer in snapshot.observers.values() {
            observer.send_json(json.clone());
        }
    }
}

/// One log line per happening, and the log filter a reload set.
pub struct LogLines {
    filter: Option<LogFilter>,
    registry: Arc<Registry>,
}

impl LogLines {
    pub fn new(filter: Option<LogFilter>, registry: Arc<Registry>) -> Self {
        Self { filter, registry }
    }

    /// A reload's log line (an error when rejected, each of its errors a
    /// warning), and the log filter it changed set on the logger.
    fn reloaded(&self, outcome: &ReloadOutcome) {
        let changes = serde_json::to_string(&outcome.changes).unwrap_or_default();
        match outcome.result {
            ReloadResult::Rejected => tracing::error!(
                trigger = ?outcome.trigger,
                generation = outcome.generation,
                errors = ?outcome.errors,
                "reload rejected; the last good state keeps serving"
            ),
            result => {
                tracing::info!(trigger = ?outcome.trigger, generation = outcome.generation, result = result.as_str(), %changes, failed = ?outcome.failed, "reload");
                for error in &outcome.errors {
                    tracing::warn!(%error, "reload error");
                }
            }
        }
        // The first load "adds" the filter the logger started with.
        let log_filter_changed = outcome
            .of(crate::events::daemon::InputKind::LogFilter)
            .is_some_and(|c| !c.changed.is_empty());
        if log_filter_changed && let Some(filter) = &self.filter {
            let wanted = self.registry.snapshot().config.telemetry.log_filter.clone();
            match filter.set(&wanted) {
                Ok(()) => tracing::info!(filter = %wanted, "log filter changed"),
                Err(e) => tracing::warn!(error = %e, "log filter not changed"),
            }
        }
    }
}

impl DaemonObserver for LogLines {
    /// One log line for each daemon event: one match, an arm an event, so
    /// a new event is a decision here; it stays one function for that.
    fn on_daemon_event(&self, event: &DaemonEvent) {
        match event {
            DaemonEvent::ReloadStarted { trigger } => {
                tracing::debug!(trigger = ?trigger, "reload started")
            }
            DaemonEvent::Reload(outcome) => self.reloaded(outcome),
            DaemonEvent::JobSubmitted { bundle } => tracing::debug!(%bundle, "job submitted"),
            DaemonEvent::JobEndedByRequest { event } => {
                tracing::info!(job_id = %event.run_id, bundle = %event.bundle, "job ended by an operator's request")
            }
            DaemonEvent::PluginLoaded { name, kind, sha256 } => {
                tracing::info!(plugin = %name, %kind, %sha256, "plugin loaded")
            }
            DaemonEvent::PluginUnloaded { name } => {
                tracing::info!(plugin = %name, "plugin unloaded: no longer called by new jobs")
            }
            DaemonEvent::BundleDegraded(degraded) => tracing::warn!(
                bundle = %degraded.name,
                errors = ?degraded.errors,
                "bundle degraded: its last edit is broken; the last good version keeps serving"
            ),
            DaemonEvent::QueueOperation { .. } => {}
            DaemonEvent::QueueUp { location } => {
                tracing::info!(queue = %location, "queue reachable again")
            }
            DaemonEvent::QueueDown {
                location,
                operation,
            } => tracing::error!(
                queue = %location,
                operation,
                "queue unreachable: no job is leased or recorded until it answers (retrying; see structured_agents_queue_up)"
            ),
            DaemonEvent::ApprovalDecided {
                job,
                bundle,
                decision,
                by,
            } => tracing::info!(
                job_id = %job,
                %bundle,
                decision,
                by = %by,
                "approval decided; the job runs again"
            ),
            DaemonEvent::JobsPurged { count } => tracing::info!(
                purged = count,
                "retention: deleted finished jobs with their events and journals"
            ),
            DaemonEvent::LeaseLost { job, attempt } => tracing::warn!(
                job_id = %job,
                attempt,
                "lease lost to a newer attempt; discarding this attempt's outcome"
            ),
            DaemonEvent::RequestRefused { reason } => {
                tracing::debug!(reason, "request refused at the front door")
            }
            DaemonEvent::SubmissionRefused { key, reason } => {
                tracing::info!(key = %key, reason, "submission refused by admission")
            }
            DaemonEvent::EvalRan(ran) => tracing::info!(
                job_id = %ran.job,
                bundle = %ran.report.bundle,
                version = %ran.report.version,
                score = ran.report.score,
                passed = ran.report.passed,
                failed = ran.report.failed,
                pass = ran.report.pass,
                "eval: {}", ran.report.verdict
            ),
            DaemonEvent::Release {
                bundle,
                version,
                state,
                serving,
                by,
                reason,
            } => match *state {
                "rejected" => {
                    tracing::warn!(bundle = %bundle, version = %version, serving = %serving, by = %by, "release gate: version {version} rejected, {serving} keeps serving: {reason}")
                }
                _ => {
                    tracing::info!(bundle = %bundle, version = %version, serving = %serving, by = %by, state, "release gate: version {version} {state}: {reason}")
                }
            },
            DaemonEvent::JobsMoved {
                bundle,
                version,
                moved,
                refused,
            } => {
                tracing::info!(bundle = %bundle, version = %version, moved, refused = refused.len(), "on_new_version: move moved the bundle's waiting and parked jobs to its new version");
                for (job, reason) in refused {
                    tracing::warn!(job_id = %job, bundle = %bundle, version = %version, "job stays on its pinned version: {reason}");
                }
            }
            DaemonEvent::ScheduleFired {
                schedule,
                bundle,
                outcome,
                count,
                lateness,
            } => {
                tracing::info!(schedule = %schedule, bundle = %bundle, outcome, count, lateness_ms = lateness.as_millis() as u64, "schedule fired")
            }
            DaemonEvent::ScheduleRemoved {
                schedule,
                daemon,
                reason,
            } => tracing::warn!(
                schedule = %schedule,
                daemon = %daemon,
                reason,
                "schedule removed: a reload of this daemon took away its bundle or the bundle's `schedule:`"
            ),
            DaemonEvent::WebhookDelivery { .. } => {}
            DaemonEvent::StaleSettle { claim } => tracing::info!(
                claim = claim.as_str(),
                "a settle came after a newer claim took over; it changed nothing"
            ),
            DaemonEvent::DrainStarted => tracing::info!("shutting down: draining jobs"),
            DaemonEvent::DrainDone => tracing::info!("drained: no job runs in this daemon"),
            DaemonEvent::EndpointLoad { endpoint, change } => log_load(endpoint, change),
            // The client logs each failed attempt where it happens.
            DaemonEvent::ModelAttemptFailed { .. } => {}
        }
    }
}

/// An endpoint's load-aware admission, in the log: a fallback is a warning
/// (the operator's load page is broken), the rest is detail.
fn log_load(endpoint: &str, change: &crate::events::daemon::LoadChange) {
    use crate::events::daemon::LoadChange;
    match change {
        LoadChange::Fallback { reason } => tracing::warn!(
            endpoint,
            reason = %reason,
            "cannot read the endpoint's load page; only its fixed max_concurrent permit applies until it reads again (check endpoints.{endpoint}.load.metrics_url)"
        ),
        LoadChange::Recovered => tracing::info!(endpoint, "the endpoint's load page reads again"),
        LoadChange::Refused { status } => {
            tracing::info!(
                endpoint,
                status,
                "model server refused a call: holding new calls"
            )
        }
        other => tracing::trace!(endpoint, change = ?other, "endpoint load"),
    }
}
