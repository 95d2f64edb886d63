//! Prometheus metrics: one registry, every family defined here (names follow
//! Prometheus rules: base units, `_seconds`, `_total`; labels are bounded —
//! bundle, model, tool, state, outcome — never a job id), fed by the
//! daemon's events here and by kernel events through
//! [`super::run_metrics::MetricsObserver`].

use std::sync::Arc;

use crate::events::daemon::{DaemonEvent, DaemonObserver};
use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

use super::otel_metrics::{DURATION_BUCKETS, JOB_BUCKETS, TOKEN_BUCKETS, TOOL_BUCKETS, kv};
use crate::events::{Event, EventEnvelope};

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
    pub releases: IntCounterVec,
    pub eval_runs: IntCounterVec,
    pub eval_cases: IntCounterVec,
    pub eval_score: GaugeVec,
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

/// `metric`, once `registry` serves it.
fn registered<M: prometheus::core::Collector + Clone + 'static>(
    registry: &Registry,
    metric: M,
) -> Result<M, MetricsError> {
    registry.register(Box::new(metric.clone()))?;
    Ok(metric)
}

impl Metrics {
    /// The registry and every family, each declared once, here: one
    /// declaration list, long because the families are many (a family
    /// split from the others would be a second place to look for one).
    pub fn new() -> Result<Arc<Self>, MetricsError> {
        let registry = Registry::new();
        let histogram = |name: &str,
                         help: &str,
                         labels: &[&str],
                         buckets: &[f64]|
         -> Result<HistogramVec, MetricsError> {
            let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
            registered(&registry, HistogramVec::new(opts, labels)?)
        };
        let counter =
            |name: &str, help: &str, labels: &[&str]| -> Result<IntCounterVec, MetricsError> {
                registered(
                    &registry,
                    IntCounterVec::new(Opts::new(name, help), labels)?,
                )
            };
        let gauge_vec =
            |name: &str, help: &str, labels: &[&str]| -> Result<IntGaugeVec, MetricsError> {
                registered(&registry, IntGaugeVec::new(Opts::new(name, help), labels)?)
            };
        let gauge = |name: &str, help: &str| -> Result<IntGauge, MetricsError> {
            registered(&registry, IntGauge::new(name, help)?)
        };
        let total = |name: &str, help: &str| -> Result<IntCounter, MetricsError> {
            registered(&registry, IntCounter::new(name, help)?)
        };
        gauge_vec(
            "structured_agents_build_info",
            "Build information; the value is always 1.",
            &["version"],
        )?
        .with_label_values(&[env!("CARGO_PKG_VERSION")])
        .set(1);
        let queue_up = gauge(
            "structured_agents_queue_up",
            "1 when the last queue operation of the workers or /readyz reached the store, 0 when it failed.",
        )?;
        // The queue was reachable when the daemon opened it.
        queue_up.set(1);
        Ok(Arc::new(Self {
            queue_up,
            queue_errors: counter(
                "structured_agents_queue_errors_total",
                "Queue operations (lease by the workers, ping by /readyz) that could not reach the store.",
                &["operation"],
            )?,
            jobs_purged: total(
                "structured_agents_jobs_purged_total",
                "Finished jobs deleted with their events and journals after queue.retention.",
            )?,
            leases_lost: total(
                "structured_agents_leases_lost_total",
                "Attempts whose outcome was dropped because a newer attempt of the job took it over (a stalled daemon's lease expired).",
            )?,
            releases: counter(
                "structured_agents_release_transitions_total",
                "The release gate's moves of a bundle's versions: held (a new version loaded as a candidate), promoted, rejected.",
                &["bundle", "state"],
            )?,
            eval_runs: counter(
                "structured_agents_eval_runs_total",
                "Eval runs that stored a report, by bundle, version under test and verdict (pass, fail).",
                &["bundle", "version", "verdict"],
            )?,
            eval_cases: counter(
                "structured_agents_eval_cases_total",
                "Eval cases graded, by bundle, version under test and result (pass, fail).",
                &["bundle", "version", "result"],
            )?,
            eval_score: registered(
                &registry,
                GaugeVec::new(
                    Opts::new(
                        "structured_agents_eval_score",
                        "The mean case score of the last eval run of a bundle's version (0 to 1).",
                    ),
                    &["bundle", "version"],
                )?,
            )?,
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
            cost_spent: registered(
                &registry,
                prometheus::CounterVec::new(
                    Opts::new(
                        "structured_agents_cost_spent_total",
                        "What model calls cost by the daemon's [prices] table, per bundle and model.",
                    ),
                    &["bundle", "model"],
                )?,
            )?,
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
            jobs_in_flight: gauge(
                "structured_agents_jobs_in_flight",
                "Jobs being run by this daemon's workers now.",
            )?,
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
                "Tool call duration, by the bundle whose job called it.",
                &["bundle", "tool", "outcome"],
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
                "Failed model requests, by error type: each HTTP attempt that failed (a call retried 4 times on 503 counts 4, 5 when its last attempt fails too), and replies the model plugin could not read (model_plugin).",
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
            observer_dropped: registered(
                &registry,
                GaugeVec::new(
                    Opts::new(
                        "structured_agents_observer_plugin_events_dropped",
                        "Events an observer plugin's full queue dropped (cumulative).",
                    ),
                    &["observer"],
                )?,
            )?,
            spans_dropped: gauge(
                "structured_agents_otel_spans_dropped",
                "Spans dropped because the OTLP export queue was full (cumulative).",
            )?,
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
            webhooks_dead: gauge(
                "structured_agents_webhooks_dead",
                "Webhook deliveries dead-lettered (all attempts failed), in the queue's store.",
            )?,
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
    pub(crate) fn job_ended(&self, bundle: &str, reason: Option<crate::types::TerminationReason>) {
        if let Some(reason) = reason {
            self.jobs_ended
                .with_label_values(&[bundle, reason.as_str()])
                .inc();
        }
    }

    /// An eval run's report, as its metrics: the run, its cases, its score.
    fn eval_ran(&self, ran: &crate::events::daemon::EvalRan) {
        let ran = &ran.report;
        let (bundle, version) = (ran.bundle.as_str(), ran.version.as_str());
        let verdict = if ran.pass { "pass" } else { "fail" };
        self.eval_runs
            .with_label_values(&[bundle, version, verdict])
            .inc();
        for (result, n) in [("pass", ran.passed), ("fail", ran.failed)] {
            self.eval_cases
                .with_label_values(&[bundle, version, result])
                .inc_by(n as u64);
        }
        self.eval_score
            .with_label_values(&[bundle, version])
            .set(ran.score);
    }

    /// Counts one failed model request of `model`: an HTTP attempt, or a
    /// reply its plugin could not read.
    pub(crate) fn model_attempt_failed(&self, model: &str, error_type: &str) {
        self.model_errors
            .with_label_values(&[model, error_type])
            .inc();
        if let Some(o) = self.otlp.get() {
            o.model_errors
                .add(1, &[kv("model", model), kv("error.type", error_type)]);
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

/// The daemon's happenings as metrics: the one place they are counted
/// (one match, an arm an event, so a new event is a decision here).
impl DaemonObserver for Metrics {
    /// One match, an arm an event, so a new event is a decision here: it
    /// stays one function for that.
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
            DaemonEvent::ModelAttemptFailed {
                model, error_type, ..
            } => self.model_attempt_failed(model, error_type),
            DaemonEvent::EndpointLoad { endpoint, change } => self.load.observe(endpoint, change),
            DaemonEvent::RequestRefused { reason } => {
                self.requests_refused.with_label_values(&[reason]).inc()
            }
            // Bundle names come from the operator's directory: bounded.
            DaemonEvent::Release { bundle, state, .. } => self
                .releases
                .with_label_values(&[bundle.as_str(), state])
                .inc(),
            DaemonEvent::EvalRan(ran) => self.eval_ran(ran),
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

#[cfg(test)]
mod tests;
