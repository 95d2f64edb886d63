//! A run's events as metric updates: model calls (tokens, cost, duration),
//! tool calls (by outcome, under a bounded `tool` label) and job states,
//! counted into the daemon's one [`Metrics`] registry.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::metrics::Metrics;
use super::otel_metrics::kv;
use crate::events::{Event, EventEnvelope, Observer, ObserverError};
use crate::types::DeclaredTools;

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
            .with_label_values(&[bundle, tool_name, outcome])
            .observe(duration_ms as f64 / 1000.0);
        if let Some(o) = m.otlp.get() {
            let attrs = [
                kv("bundle", bundle),
                kv("tool", tool_name),
                kv("outcome", outcome),
            ];
            o.tool_calls.add(1, &attrs);
            o.tool_duration.record(duration_ms as f64 / 1000.0, &attrs);
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

/// Each event's metrics: one match, an arm an event kind.
#[async_trait]
impl Observer for MetricsObserver {
    /// One match, an arm an event kind, so a new event is a decision here:
    /// it stays one function for that.
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
            // A reply the model plugin could not read; the client's errors
            // are counted per HTTP attempt where they happen
            // (`DaemonEvent::ModelAttemptFailed`), and a run that parks, runs
            // out of budget or is cancelled did not fail a request.
            Event::KernelEnd {
                error_type: Some(kind),
                ..
            } if kind == "model_plugin" => m.model_attempt_failed(&self.model(), kind),
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
mod tests;
