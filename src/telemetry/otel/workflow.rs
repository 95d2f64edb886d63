//! Workflow spans: `invoke_workflow {name}` for a workflow job, with a child
//! span `stage {stage}` per stage run (true start and end, from the stage's
//! own times) carrying stage, event, iteration and reason. Agent runs of
//! stages hang under the workflow span like nested agent runs.

use std::time::{Duration, SystemTime};

use opentelemetry::KeyValue;
use opentelemetry::trace::{Span, SpanKind, Status, TraceContextExt};

use super::{JobSpanInfo, RunSpans, SpanBuilder, remote_parent, start_span};
use crate::events::{Event, EventEnvelope};

impl SpanBuilder {
    /// Handles a workflow event; false for any other event. One match, an
    /// arm a workflow event kind (its span opened, a stage's child span, its
    /// span closed), so it stays one function.
    pub(super) fn workflow(
        &mut self,
        info: &JobSpanInfo,
        envelope: &EventEnvelope,
        at: SystemTime,
    ) -> bool {
        let key = envelope.run_id.clone();
        match &envelope.event {
            Event::WorkflowStart {
                workflow,
                stage,
                iteration,
                resumed,
            } => {
                let parent = remote_parent(info.trace.as_ref());
                let mut attributes = vec![
                    KeyValue::new("gen_ai.operation.name", "invoke_workflow"),
                    KeyValue::new("gen_ai.workflow.name", workflow.clone()),
                    KeyValue::new("structured_agents.workflow", workflow.clone()),
                    KeyValue::new("gen_ai.agent.version", envelope.bundle_version.clone()),
                    KeyValue::new("structured_agents.job.id", info.job_id.clone()),
                    KeyValue::new("structured_agents.workflow.stage", stage.clone()),
                    KeyValue::new("structured_agents.workflow.iteration", *iteration as i64),
                    KeyValue::new("structured_agents.workflow.resumed", *resumed),
                ];
                attributes.extend(info.conversation());
                let span = start_span(
                    &self.tracer,
                    format!("invoke_workflow {workflow}"),
                    SpanKind::Internal,
                    at,
                    attributes,
                    &parent,
                );
                self.runs.insert(key, RunSpans::new(parent.with_span(span)));
            }
            Event::StageEnd {
                step,
                stage,
                kind,
                event,
                original_event,
                next,
                iteration,
                reason,
                ran,
                started_at,
                duration_ms,
            } => {
                let Some(run) = self.runs.get(&key) else {
                    return true;
                };
                let start = humantime::parse_rfc3339_weak(started_at).unwrap_or(at);
                let mut span = start_span(
                    &self.tracer,
                    format!("stage {stage}"),
                    SpanKind::Internal,
                    start,
                    vec![
                        KeyValue::new("structured_agents.workflow.step", *step as i64),
                        KeyValue::new("structured_agents.workflow.stage", stage.clone()),
                        KeyValue::new("structured_agents.workflow.stage_kind", kind.clone()),
                        KeyValue::new("structured_agents.workflow.event", event.clone()),
                        KeyValue::new(
                            "structured_agents.workflow.original_event",
                            original_event.clone(),
                        ),
                        KeyValue::new("structured_agents.workflow.next", next.clone()),
                        KeyValue::new("structured_agents.workflow.iteration", *iteration as i64),
                        KeyValue::new("structured_agents.workflow.reason", reason.clone()),
                        KeyValue::new("structured_agents.workflow.ran", *ran),
                    ],
                    &run.root,
                );
                if next == crate::workflow::FATAL {
                    span.set_attribute(KeyValue::new("error.type", "workflow_fatal"));
                    span.set_status(Status::error(reason.clone()));
                }
                span.end_with_timestamp(start + Duration::from_millis(*duration_ms));
            }
            Event::WorkflowEnd {
                outcome,
                stage,
                iteration,
                reason,
            } => {
                let Some(run) = self.runs.remove(&key) else {
                    return true;
                };
                let root = run.root.span();
                root.set_attribute(KeyValue::new(
                    "structured_agents.workflow.outcome",
                    outcome.clone(),
                ));
                root.set_attribute(KeyValue::new(
                    "structured_agents.workflow.stage",
                    stage.clone(),
                ));
                root.set_attribute(KeyValue::new(
                    "structured_agents.workflow.iteration",
                    *iteration as i64,
                ));
                if outcome == crate::workflow::FATAL {
                    root.set_attribute(KeyValue::new("error.type", "workflow_fatal"));
                    root.set_status(Status::error(reason.clone()));
                }
                root.end_with_timestamp(at);
            }
            _ => return false,
        }
        true
    }
}
