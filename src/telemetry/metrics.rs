//! Prometheus metrics: one registry, every family defined here (names follow
//! Prometheus rules: base units, `_seconds`, `_total`; labels are bounded —
//! bundle, model, tool, state, outcome — never a job id), fed by kernel
//! events through `MetricsObserver`.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::events::daemon::{DaemonEvent, DaemonObserver};
use crate::types::DeclaredTools;
use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

use super::otel_metrics::{DURATION_BUCKETS, JOB_BUCKETS, TOKEN_BUCKETS, TOOL_BUCKETS, kv};
use crate::events::{Event, EventEnvelope, Observer, ObserverError};

pub struct Metrics {
    registry: Registry,
    pub operation_duration: HistogramVec,
    pub token_usage: HistogramVec,
    pub jobs_submitted: IntCounterVec,
    pub jobs_finished: IntCounterVec,
    /// Jobs that ended (succeeded, failed, dead, cancelled) by why: the
    /// kernel's termination reasons, a bounded set.
    pub jobs_ended: IntCounterVec,
    pub job_duration: HistogramVec,
    pub queue_jobs: IntGaugeVec,
    pub jobs_in_flight: IntGauge,
    /// 1 while the last queue operation seen by workers or `/readyz` worked.
    pub queue_up: IntGauge,
    pub queue_errors: IntCounterVec,
    pub jobs_purged: IntCounter,
    pub leases_lost: IntCounter,
    pub requests_refused: IntCounterVec,
    pub submissions_refused: IntCounterVec,
    pub approvals_requested: IntCounterVec,
    pub approval_decisions: IntCounterVec,
    pub tokens_spent: IntCounterVec,
    pub cost_spent: prometheus::CounterVec,
    pub budget_stops: IntCounterVec,
    pub turns: IntCounterVec,
    pub tool_calls: IntCounterVec,
    pub tool_duration: HistogramVec,
    pub tool_cache_hits: IntCounterVec,
    pub job_retries: IntCounterVec,
    pub model_errors: IntCounterVec,
    pub reloads: IntCounterVec,
    pub bundles: IntGaugeVec,
    pub workflow_stages: IntCounterVec,
    pub workflow_stage_duration: HistogramVec,
    pub workflows_finished: IntCounterVec,
    pub observer_dropped: GaugeVec,
    pub spans_dropped: IntGauge,
    pub schedule_fires: IntCounterVec,
    pub schedule_lateness: HistogramVec,
    pub schedules_removed: IntCounterVec,
    pub schedule_next_fire: IntGaugeVec,
    pub webhook_deliveries: IntCounterVec,
    pub webhooks_dead: IntGauge,
    /// Settles of claims that were no longer current: they changed nothing.
    pub stale_settles: IntCounterVec,
    /// Load-aware admission per endpoint.
    pub load: super::load_metrics::LoadMetrics,
    /// The same measurements over OTLP, when configured.
    pub otlp: std::sync::OnceLock<super::otel_metrics::OtelMeters>,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot register metric: {0}")]
pub struct MetricsError(#[from] prometheus::Error);

impl Metrics {
    pub fn new() -> Result<Arc<Self>, MetricsError> {
        let registry = Registry::new();
        let histogram = |name: &str,
                         help: &str,
                         labels: &[&str],
                         buckets: &[f64]|
         -> Result<HistogramVec, MetricsError> {
            let h = HistogramVec::new(
                HistogramOpts::new(name, help).buckets(buckets.to_vec()),
                labels,
            )?;
            registry.register(Box::new(h.clone()))?;
            Ok(h)
        };
        let counter =
            |name: &str, help: &str, labels: &[&str]| -> Result<IntCounterVec, MetricsError> {
                let c = IntCounterVec::new(Opts::new(name, help), labels)?;
                registry.register(Box::new(c.clone()))?;
                Ok(c)
            };
        let gauge_vec =
            |name: &str, help: &str, labels: &[&str]| -> Result<IntGaugeVec, MetricsError> {
                let g = IntGaugeVec::new(Opts::new(name, help), labels)?;
                registry.register(Box::new(g.clone()))?;
                Ok(g)
            };
        let build_info = IntGaugeVec::new(
            Opts::new(
                "structured_agents_build_info",
                "Build information; the value is always 1.",
            ),
            &["version"],
        )?;
        registry.register(Box::new(build_info.clone()))?;
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        let jobs_in_flight = IntGauge::new(
            "structured_agents_jobs_in_flight",
            "Jobs being run by this daemon's workers now.",
        )?;
        registry.register(Box::new(jobs_in_flight.clone()))?;
        let spans_dropped = IntGauge::new(
            "structured_agents_otel_spans_dropped",
            "Spans dropped because the OTLP export queue was full (cumulative).",
        )?;
        registry.register(Box::new(spans_dropped.clone()))?;
        let webhooks_dead = IntGauge::new(
            "structured_agents_webhooks_dead",
            "Webhook deliveries dead-lettered (all attempts failed), in the queue's store.",
        )?;
        registry.register(Box::new(webhooks_dead.clone()))?;
        let observer_dropped = GaugeVec::new(
            Opts::new(
                "structured_agents_observer_plugin_events_dropped",
                "Events an observer plugin's full queue dropped (cumulative).",
            ),
            &["observer"],
        )?;
        registry.register(Box::new(observer_dropped.clone()))?;
        let jobs_purged = IntCounter::new(
            "structured_agents_jobs_purged_total",
            "Finished jobs deleted with their events and journals after queue.retention.",
        )?;
        registry.register(Box::new(jobs_purged.clone()))?;
        let leases_lost = IntCounter::new(
            "structured_agents_leases_lost_total",
            "Attempts whose outcome was dropped because a newer attempt of the job took it over (a stalled daemon's lease expired).",
        )?;
        registry.register(Box::new(leases_lost.clone()))?;
        let queue_up = IntGauge::new(
            "structured_agents_queue_up",
            "1 when the last queue operation of the workers or /readyz reached the store, 0 when it failed.",
        )?;
        registry.register(Box::new(queue_up.clone()))?;
        // The queue was reachable when the daemon opened it.
        queue_up.set(1);
        Ok(Arc::new(Self {
            queue_up,
            queue_errors: counter(
                "structured_agents_queue_errors_total",
                "Queue operations (lease by the workers, ping by /readyz) that could not reach the store.",
                &["operation"],
            )?,
            jobs_purged,
            leases_lost,
            requests_refused: counter(
                "structured_agents_http_requests_refused_total",
                "Requests refused before any handler: a Host not served (host), a web page's origin (origin), a body that is not JSON (media_type), no or an unknown API key (unauthorized), a key without the route's scope (forbidden).",
                &["reason"],
            )?,
            submissions_refused: counter(
                "structured_agents_submissions_refused_total",
                "Jobs admission refused, by API key and reason (forbidden, invalid, unknown_bundle, quota, budget, conflict, not_found).",
                &["key", "reason"],
            )?,
            approvals_requested: counter(
                "structured_agents_approvals_requested_total",
                "Tool calls that waited for a person's decision (the job parked in awaiting_approval).",
                &["bundle", "tool"],
            )?,
            approval_decisions: counter(
                "structured_agents_approval_decisions_total",
                "Decisions on calls awaiting approval: approve, deny or edit, by a person or by the approval timeout.",
                &["bundle", "decision", "by"],
            )?,
            tokens_spent: counter(
                "structured_agents_tokens_spent_total",
                "Tokens spent by model calls, per bundle, model and kind (prompt, completion).",
                &["bundle", "model", "kind"],
            )?,
            cost_spent: {
                let c = prometheus::CounterVec::new(
                    Opts::new(
                        "structured_agents_cost_spent_total",
                        "What model calls cost by the daemon's [prices] table, per bundle and model.",
                    ),
                    &["bundle", "model"],
                )?;
                registry.register(Box::new(c.clone()))?;
                c
            },
            budget_stops: counter(
                "structured_agents_budget_stops_total",
                "Jobs ended because they used up a budget, per bundle and budget.",
                &["bundle", "budget"],
            )?,
            operation_duration: histogram(
                "gen_ai_client_operation_duration_seconds",
                "GenAI operation duration (model calls), per the OpenTelemetry GenAI conventions.",
                &[
                    "gen_ai_operation_name",
                    "gen_ai_request_model",
                    "gen_ai_provider_name",
                    "error_type",
                ],
                DURATION_BUCKETS,
            )?,
            token_usage: histogram(
                "gen_ai_client_token_usage",
                "Tokens used per model call, by token type (input, output).",
                &[
                    "gen_ai_operation_name",
                    "gen_ai_request_model",
                    "gen_ai_provider_name",
                    "gen_ai_token_type",
                ],
                TOKEN_BUCKETS,
            )?,
            jobs_submitted: counter(
                "structured_agents_jobs_submitted_total",
                "Jobs accepted by the API.",
                &["bundle"],
            )?,
            jobs_finished: counter(
                "structured_agents_jobs_finished_total",
                "Job attempts that ended, by resulting state.",
                &["bundle", "state"],
            )?,
            jobs_ended: counter(
                "structured_agents_jobs_ended_total",
                "Jobs that ended, by termination reason (no_tool_calls, max_turns, termination_tool, cancelled, timeout, error, budget_exceeded, workflow_finished, ...).",
                &["bundle", "reason"],
            )?,
            job_duration: histogram(
                "structured_agents_job_duration_seconds",
                "Duration of job attempts.",
                &["bundle", "state"],
                JOB_BUCKETS,
            )?,
            queue_jobs: gauge_vec(
                "structured_agents_queue_jobs",
                "Jobs in the queue by state.",
                &["state"],
            )?,
            jobs_in_flight,
            turns: counter(
                "structured_agents_turns_total",
                "Kernel turns completed.",
                &["bundle"],
            )?,
            tool_calls: counter(
                "structured_agents_tool_calls_total",
                "Tool calls by outcome (ok or the error code).",
                &["bundle", "tool", "outcome"],
            )?,
            tool_duration: histogram(
                "structured_agents_tool_duration_seconds",
                "Tool call duration.",
                &["tool", "outcome"],
                TOOL_BUCKETS,
            )?,
            tool_cache_hits: counter(
                "structured_agents_tool_cache_hits_total",
                "Tool calls answered from the cache.",
                &["tool"],
            )?,
            job_retries: counter(
                "structured_agents_job_retries_total",
                "Job attempts that failed and were requeued.",
                &["bundle"],
            )?,
            model_errors: counter(
                "structured_agents_model_request_errors_total",
                "Model calls that failed, by error type.",
                &["model", "error_type"],
            )?,
            reloads: counter(
                "structured_agents_reloads_total",
                "Registry reloads by result (applied, partial, rejected).",
                &["result"],
            )?,
            bundles: gauge_vec(
                "structured_agents_bundles",
                "Bundles by status (ok, degraded, invalid).",
                &["status"],
            )?,
            // Stage and event names come from the bundles' workflow
            // definitions, so these labels are bounded like tool names.
            workflow_stages: counter(
                "structured_agents_workflow_stages_total",
                "Workflow stage runs by the event they produced.",
                &["bundle", "stage", "event"],
            )?,
            workflow_stage_duration: histogram(
                "structured_agents_workflow_stage_duration_seconds",
                "Duration of workflow stage runs.",
                &["bundle", "stage"],
                JOB_BUCKETS,
            )?,
            workflows_finished: counter(
                "structured_agents_workflows_finished_total",
                "Workflow runs that reached finish or fatal.",
                &["bundle", "outcome"],
            )?,
            observer_dropped,
            spans_dropped,
            schedule_fires: counter(
                "structured_agents_schedule_fires_total",
                "Schedule fires this daemon handled, by the bundle they fire and outcome (submitted, missed, skipped_overlap, refused).",
                &["bundle", "outcome"],
            )?,
            schedules_removed: counter(
                "structured_agents_schedules_removed_total",
                "Bundle schedules this daemon took out of the store, by why (bundle_removed, schedule_removed_from_bundle).",
                &["reason"],
            )?,
            schedule_lateness: histogram(
                "structured_agents_schedule_lateness_seconds",
                "How late after its cron time a schedule's fire was submitted, by the bundle it fires.",
                &["bundle"],
                &[0.1, 0.5, 1.0, 2.0, 5.0, 15.0, 60.0, 300.0, 3600.0],
            )?,
            webhook_deliveries: counter(
                "structured_agents_webhook_deliveries_total",
                "Webhook delivery attempts this daemon made, by outcome (delivered, retry, dead).",
                &["outcome"],
            )?,
            webhooks_dead,
            stale_settles: counter(
                "structured_agents_stale_settles_total",
                "Settles that came too late and changed nothing, by kind of claim: an attempt's finish after a newer attempt took the job (job), a delivery another sender re-claimed after this one's lease ran out (delivery), a schedule fire another daemon recorded first (schedule_fire).",
                &["claim"],
            )?,
            schedule_next_fire: gauge_vec(
                "structured_agents_schedule_next_fire_timestamp_seconds",
                "When the bundle's schedules fire next, the soonest of them (Unix seconds; absent when all are paused or never fire again).",
                &["bundle"],
            )?,
            load: super::load_metrics::LoadMetrics::register(&registry)?,
            registry,
            otlp: std::sync::OnceLock::new(),
        }))
    }

    pub fn job_submitted(&self, bundle: &str) {
        self.jobs_submitted.with_label_values(&[bundle]).inc();
        if let Some(o) = self.otlp.get() {
            o.jobs_submitted.add(1, &[kv("bundle", bundle)]);
        }
    }

    /// Counts a job an operator's request ended without a run (a cancelled
    /// queued or parked job, a failed resolve), from its final event.
    pub fn job_ended_by_request(&self, event: &EventEnvelope) {
        let Event::JobState {
            state,
            termination_reason,
            ..
        } = &event.event
        else {
            return;
        };
        let (bundle, state) = (event.bundle.as_str(), state.as_str());
        self.jobs_finished.with_label_values(&[bundle, state]).inc();
        self.job_ended(bundle, *termination_reason);
        if let Some(o) = self.otlp.get() {
            o.jobs_finished
                .add(1, &[kv("bundle", bundle), kv("state", state)]);
        }
    }

    /// Counts a job that ended, by why (its final event says).
    fn job_ended(&self, bundle: &str, reason: Option<crate::types::TerminationReason>) {
        if let Some(reason) = reason {
            self.jobs_ended
                .with_label_values(&[bundle, reason.as_str()])
                .inc();
        }
    }

    /// Records whether a queue operation (`lease`, `ping`) reached the store.
    pub fn queue_operation(&self, operation: &str, worked: bool) {
        self.queue_up.set(i64::from(worked));
        if !worked {
            self.queue_errors.with_label_values(&[operation]).inc();
        }
    }

    pub fn reload(&self, result: &str) {
        self.reloads.with_label_values(&[result]).inc();
        if let Some(o) = self.otlp.get() {
            o.reloads.add(1, &[kv("result", result)]);
        }
    }

    /// The classic Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::error!(error = %e, "cannot encode metrics");
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

/// The daemon's happenings as metrics: the one place they are counted.
impl DaemonObserver for Metrics {
    fn on_daemon_event(&self, event: &DaemonEvent) {
        match event {
            DaemonEvent::Reload(outcome) => {
                self.reload(outcome.result.as_str());
                let counts = &outcome.bundles;
                for (status, n) in [
                    ("ok", counts.ok),
                    ("degraded", counts.degraded),
                    ("invalid", counts.invalid),
                ] {
                    self.bundles.with_label_values(&[status]).set(n as i64);
                }
            }
            DaemonEvent::JobSubmitted { bundle } => self.job_submitted(bundle),
            DaemonEvent::JobEndedByRequest { event } => self.job_ended_by_request(event),
            DaemonEvent::QueueOperation { operation, worked } => {
                self.queue_operation(operation, *worked)
            }
            DaemonEvent::JobsPurged { count } => self.jobs_purged.inc_by(*count),
            DaemonEvent::ApprovalDecided {
                bundle,
                decision,
                by,
                ..
            } => {
                let by = if by == "timeout" { "timeout" } else { "person" };
                self.approval_decisions
                    .with_label_values(&[bundle.as_str(), decision, by])
                    .inc()
            }
            DaemonEvent::LeaseLost { .. } => self.leases_lost.inc(),
            DaemonEvent::EndpointLoad { endpoint, change } => self.load.observe(endpoint, change),
            DaemonEvent::RequestRefused { reason } => {
                self.requests_refused.with_label_values(&[reason]).inc()
            }
            // Key names come from the operator's keys file, never from a
            // request: a bounded label set.
            DaemonEvent::SubmissionRefused { key, reason } => self
                .submissions_refused
                .with_label_values(&[key.as_str(), reason])
                .inc(),
            // Counted where they happen or by another family: the bundle
            // gauge comes with the reload, `queue_up` with each operation,
            // plugin loads are in the reload outcome. Every variant is named
            // here so a new one cannot go unmeasured by accident.
            // By bundle, never by schedule id: any `submit` key makes
            // schedules, and ids as labels grew a series each.
            DaemonEvent::ScheduleFired {
                bundle,
                outcome,
                count,
                lateness,
                ..
            } => {
                self.schedule_fires
                    .with_label_values(&[bundle.as_str(), outcome])
                    .inc_by(*count);
                if *outcome == "submitted" {
                    self.schedule_lateness
                        .with_label_values(&[bundle.as_str()])
                        .observe(lateness.as_secs_f64());
                }
            }
            DaemonEvent::ScheduleRemoved { reason, .. } => {
                self.schedules_removed.with_label_values(&[reason]).inc()
            }
            DaemonEvent::WebhookDelivery { outcome } => {
                self.webhook_deliveries.with_label_values(&[outcome]).inc()
            }
            DaemonEvent::StaleSettle { claim } => self
                .stale_settles
                .with_label_values(&[claim.as_str()])
                .inc(),
            DaemonEvent::ReloadStarted { .. }
            | DaemonEvent::PluginLoaded { .. }
            | DaemonEvent::PluginUnloaded { .. }
            | DaemonEvent::BundleDegraded(_)
            | DaemonEvent::QueueUp { .. }
            | DaemonEvent::QueueDown { .. }
            | DaemonEvent::JobsMoved { .. }
            | DaemonEvent::DrainStarted
            | DaemonEvent::DrainDone => {}
        }
    }
}

/// The `tool` label of a call to a tool no bundle declares. Tool names in
/// calls come from the model, which can invent any number of them; as label
/// values they would grow the metric families without bound.
pub const UNKNOWN_TOOL_LABEL: &str = "unknown";

/// Turns one job's events into metric updates.
pub struct MetricsObserver {
    metrics: Arc<Metrics>,
    provider: String,
    model: Mutex<String>,
    /// Every loaded bundle and the tools it declares: a run's events (the
    /// job's own or a nested run's) may use only its bundle's names as
    /// labels, and a bundle not listed has none.
    declared: Option<Arc<DeclaredTools>>,
}

impl MetricsObserver {
    pub fn new(metrics: Arc<Metrics>, provider: impl Into<String>) -> Self {
        Self {
            metrics,
            provider: provider.into(),
            model: Mutex::new(String::new()),
            declared: None,
        }
    }

    /// Restricts the tool labels of every run's events (nested runs of
    /// other bundles included) to the tools its bundle declares.
    pub fn with_declared_tools(mut self, declared: Arc<DeclaredTools>) -> Self {
        self.declared = Some(declared);
        self
    }

    /// The label for a tool name from an event. The engine answers a call
    /// to a name the bundle does not declare with `unknown_tool` (before
    /// anything else), so that verdict alone keeps invented names out; the
    /// declared list, when given, is a second fence.
    fn tool_label<'a>(&self, bundle: &str, tool: &'a str, outcome: Option<&str>) -> &'a str {
        if outcome == Some("unknown_tool") {
            return UNKNOWN_TOOL_LABEL;
        }
        match &self.declared {
            Some(declared)
                if !declared
                    .get(bundle)
                    .is_some_and(|tools| tools.contains(tool)) =>
            {
                UNKNOWN_TOOL_LABEL
            }
            _ => tool,
        }
    }

    fn model(&self) -> String {
        self.model.lock().map(|m| m.clone()).unwrap_or_default()
    }
}

impl MetricsObserver {
    /// A model call's tokens, cost and duration.
    fn model_response(
        &self,
        bundle: &str,
        duration_ms: u64,
        usage: &crate::types::TokenUsage,
        cost: Option<f64>,
    ) {
        let m = &self.metrics;
        let model = self.model();
        for (kind, n) in [
            ("prompt", usage.prompt_tokens),
            ("completion", usage.completion_tokens),
        ] {
            m.tokens_spent
                .with_label_values(&[bundle, &model, kind])
                .inc_by(n);
        }
        if let Some(cost) = cost {
            m.cost_spent
                .with_label_values(&[bundle, &model])
                .inc_by(cost);
        }
        m.operation_duration
            .with_label_values(&["chat", &model, &self.provider, ""])
            .observe(duration_ms as f64 / 1000.0);
        let tokens = [
            ("input", usage.prompt_tokens),
            ("output", usage.completion_tokens),
        ];
        for (kind, n) in tokens {
            m.token_usage
                .with_label_values(&["chat", &model, &self.provider, kind])
                .observe(n as f64);
        }
        if let Some(o) = m.otlp.get() {
            let base = [
                kv("gen_ai.operation.name", "chat"),
                kv("gen_ai.request.model", &model),
                kv("gen_ai.provider.name", &self.provider),
            ];
            o.operation_duration
                .record(duration_ms as f64 / 1000.0, &base);
            for (kind, n) in tokens {
                let mut attrs = base.to_vec();
                attrs.push(kv("gen_ai.token.type", kind));
                o.token_usage.record(n, &attrs);
            }
        }
    }

    /// A tool call's outcome and duration.
    fn tool_result(
        &self,
        bundle: &str,
        tool_name: &str,
        duration_ms: u64,
        error_type: Option<&str>,
    ) {
        let m = &self.metrics;
        let outcome = error_type.unwrap_or("ok");
        let tool_name = self.tool_label(bundle, tool_name, error_type);
        m.tool_calls
            .with_label_values(&[bundle, tool_name, outcome])
            .inc();
        m.tool_duration
            .with_label_values(&[tool_name, outcome])
            .observe(duration_ms as f64 / 1000.0);
        if let Some(o) = m.otlp.get() {
            let attrs = [
                kv("bundle", bundle),
                kv("tool", tool_name),
                kv("outcome", outcome),
            ];
            o.tool_calls.add(1, &attrs);
            o.tool_duration
                .record(duration_ms as f64 / 1000.0, &attrs[1..]);
        }
    }

    /// A job attempt began or ended.
    fn job_state(&self, bundle: &str, state: &str, duration_ms: Option<u64>) {
        let m = &self.metrics;
        match state {
            "running" => m.jobs_in_flight.inc(),
            finished => {
                m.jobs_in_flight.dec();
                if finished == "retrying" {
                    m.job_retries.with_label_values(&[bundle]).inc();
                }
                m.jobs_finished.with_label_values(&[bundle, finished]).inc();
                if let Some(o) = m.otlp.get() {
                    let attrs = [kv("bundle", bundle), kv("state", finished)];
                    o.jobs_finished.add(1, &attrs);
                    if let Some(ms) = duration_ms {
                        o.job_duration.record(ms as f64 / 1000.0, &attrs);
                    }
                }
                if let Some(ms) = duration_ms {
                    m.job_duration
                        .with_label_values(&[bundle, finished])
                        .observe(ms as f64 / 1000.0);
                }
            }
        }
    }
}

#[async_trait]
impl Observer for MetricsObserver {
    async fn on_event(&self, envelope: &EventEnvelope) -> Result<(), ObserverError> {
        let m = &self.metrics;
        let bundle = envelope.bundle.as_str();
        match &envelope.event {
            Event::ModelRequest { model, .. } => {
                if let Ok(mut current) = self.model.lock() {
                    current.clone_from(model);
                }
            }
            Event::ModelResponse {
                duration_ms,
                usage,
                cost,
                ..
            } => self.model_response(bundle, *duration_ms, usage, *cost),
            Event::ToolResult {
                tool_name,
                duration_ms,
                error_type,
                ..
            } => self.tool_result(bundle, tool_name, *duration_ms, error_type.as_deref()),
            Event::BudgetExceeded { budget, .. } => {
                m.budget_stops.with_label_values(&[bundle, budget]).inc();
            }
            Event::ApprovalRequested { tool_name, .. } => {
                let tool_name = self.tool_label(bundle, tool_name, None);
                m.approvals_requested
                    .with_label_values(&[bundle, tool_name])
                    .inc();
            }
            Event::ToolTrace {
                tool_name, stage, ..
            } if stage == "cache.hit" => {
                let tool_name = self.tool_label(bundle, tool_name, None);
                m.tool_cache_hits.with_label_values(&[tool_name]).inc();
            }
            Event::StageEnd {
                stage,
                event,
                duration_ms,
                ..
            } => {
                m.workflow_stages
                    .with_label_values(&[bundle, stage, event])
                    .inc();
                m.workflow_stage_duration
                    .with_label_values(&[bundle, stage])
                    .observe(*duration_ms as f64 / 1000.0);
            }
            Event::WorkflowEnd { outcome, .. } => {
                m.workflows_finished
                    .with_label_values(&[bundle, outcome])
                    .inc();
            }
            Event::TurnComplete { .. } => {
                m.turns.with_label_values(&[bundle]).inc();
                if let Some(o) = m.otlp.get() {
                    o.turns.add(1, &[kv("bundle", bundle)]);
                }
            }
            // A run that parks for a person did not fail.
            Event::KernelEnd {
                error_type: Some(kind),
                ..
            } if !matches!(
                kind.as_str(),
                "needs_attention" | "awaiting_approval" | "budget_exceeded"
            ) =>
            {
                m.model_errors
                    .with_label_values(&[&self.model(), kind])
                    .inc();
                if let Some(o) = m.otlp.get() {
                    o.model_errors
                        .add(1, &[kv("model", &self.model()), kv("error.type", kind)]);
                }
            }
            Event::JobState {
                state,
                duration_ms,
                termination_reason,
                ..
            } => {
                self.job_state(bundle, state.as_str(), *duration_ms);
                m.job_ended(bundle, *termination_reason);
            }
            _ => {}
        }
        Ok(())
    }

    fn name(&self) -> &str {
        "metrics"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stale settle is counted by the kind of claim it held, and only
    /// by the stale-settle counter.
    #[test]
    fn a_stale_settle_is_counted_by_its_claim() {
        use crate::events::daemon::StaleClaim;
        let metrics = Metrics::new().unwrap();
        for claim in [
            StaleClaim::Delivery,
            StaleClaim::Delivery,
            StaleClaim::ScheduleFire,
        ] {
            metrics.on_daemon_event(&DaemonEvent::StaleSettle { claim });
        }
        let text = metrics.render();
        assert!(
            text.contains("structured_agents_stale_settles_total{claim=\"delivery\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("structured_agents_stale_settles_total{claim=\"schedule_fire\"} 1"),
            "{text}"
        );
        assert!(!text.contains("structured_agents_webhook_deliveries_total{"));
    }

    fn result(bundle: &str, tool: &str, error_type: Option<&str>) -> EventEnvelope {
        EventEnvelope {
            run_id: "r".into(),
            bundle: bundle.into(),
            bundle_version: "1".into(),
            parent: None,
            seq: 1,
            timestamp: String::new(),
            event: Event::ToolResult {
                turn: 1,
                tool_name: tool.into(),
                call_id: "c".into(),
                is_error: error_type.is_some(),
                duration_ms: 1,
                output_preview: String::new(),
                error_type: error_type.map(str::to_string),
            },
        }
    }

    /// The `tool` label values of the tool-call counter.
    fn tool_labels(metrics: &Metrics) -> Vec<String> {
        let mut out: Vec<String> = metrics
            .render()
            .lines()
            .filter(|l| l.starts_with("structured_agents_tool_calls_total{"))
            .filter_map(|l| {
                let start = l.find("tool=\"")? + 6;
                let end = start + l[start..].find('"')?;
                Some(l[start..end].to_string())
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }

    #[tokio::test]
    async fn invented_tool_names_never_become_label_values() {
        let metrics = Metrics::new().unwrap();
        let observer = MetricsObserver::new(metrics.clone(), "openai");
        observer.on_event(&result("b", "add", None)).await.unwrap();
        for invented in ["rm -rf /", "tool_0001", "tool_0002"] {
            observer
                .on_event(&result("b", invented, Some("unknown_tool")))
                .await
                .unwrap();
        }
        assert_eq!(tool_labels(&metrics), ["add", UNKNOWN_TOOL_LABEL]);
    }

    #[tokio::test]
    async fn with_declared_tools_only_declared_names_are_labels() {
        let metrics = Metrics::new().unwrap();
        let declared: DeclaredTools = [
            (
                "b".to_string(),
                std::collections::HashSet::from(["add".to_string()]),
            ),
            (
                "other".to_string(),
                std::collections::HashSet::from(["search".to_string()]),
            ),
        ]
        .into();
        let observer =
            MetricsObserver::new(metrics.clone(), "openai").with_declared_tools(Arc::new(declared));
        observer.on_event(&result("b", "add", None)).await.unwrap();
        // Whatever the engine said, an undeclared name is not a label.
        observer
            .on_event(&result("b", "made_up", Some("tool_error")))
            .await
            .unwrap();
        // A nested run of another bundle keeps its own declared names…
        observer
            .on_event(&result("other", "search", None))
            .await
            .unwrap();
        // …and a name the model invented there is not a label either.
        observer
            .on_event(&result("other", "invented_in_a_nested_run", None))
            .await
            .unwrap();
        // Nor is anything of a bundle that is not loaded.
        observer
            .on_event(&result("gone", "search", None))
            .await
            .unwrap();
        assert_eq!(tool_labels(&metrics), ["add", "search", UNKNOWN_TOOL_LABEL]);
    }
}
