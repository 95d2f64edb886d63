//! An agent run's spans: `invoke_agent {bundle}` (INTERNAL) as its root, a
//! `chat {model}` (CLIENT) per model call and an `execute_tool {tool}`
//! (INTERNAL) per tool call under it; a nested run (an `agent` tool running
//! another bundle) under the `execute_tool` span of the call that started it.

use std::collections::HashMap;
use std::time::SystemTime;

use opentelemetry::trace::{Span, SpanKind, Status, TraceContextExt};
use opentelemetry::{Context, KeyValue};

use super::content::ChatDetails;
use super::{JobSpanInfo, RunSpans, SpanBuilder, remote_parent, start_span};
use crate::events::{Event, EventEnvelope};

/// `gen_ai.tool.type` of every tool the daemon runs: the conventions call a
/// tool the agent runs itself (on its side, reaching out to other systems)
/// an `extension`; `function` is a tool the client runs.
const TOOL_TYPE: &str = "extension";

// The handlers below open alike (their event's fields, then the run's
// spans, returning when either is missing), kept so: each reads its own
// event, and a shared opening would hold `self.runs` borrowed across the
// `self.tracer` and `self.content` each one then uses.

impl SpanBuilder {
    /// The run's root span (`invoke_agent`): under the `execute_tool` span
    /// of the call that started it, its parent run's root, or the job's
    /// remote parent.
    pub(super) fn start_run(
        &mut self,
        info: &JobSpanInfo,
        envelope: &EventEnvelope,
        at: SystemTime,
    ) {
        let Event::KernelStart {
            max_turns,
            tools_count,
            ..
        } = &envelope.event
        else {
            return;
        };
        let parent = match &envelope.parent {
            Some(p) => self
                .runs
                .get(&p.run_id)
                .map(|run| run.tools.get(&p.call_id).unwrap_or(&run.root).clone())
                .unwrap_or_default(),
            None => remote_parent(info.trace.as_ref()),
        };
        let bundle = envelope.bundle.clone();
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", "invoke_agent"),
            // The bundle's name is the agent's id everywhere the daemon
            // serves it (the runtime API, A2A, MCP); its version is apart.
            KeyValue::new("gen_ai.agent.id", bundle.clone()),
            KeyValue::new("gen_ai.agent.name", bundle.clone()),
            KeyValue::new("gen_ai.agent.version", envelope.bundle_version.clone()),
            KeyValue::new("gen_ai.request.model", info.model.clone()),
            KeyValue::new("gen_ai.provider.name", info.endpoint.provider.clone()),
            KeyValue::new("structured_agents.job.id", info.job_id.clone()),
            KeyValue::new("structured_agents.max_turns", *max_turns as i64),
            KeyValue::new("structured_agents.tools_count", *tools_count as i64),
        ];
        if let Some(description) = info
            .agents
            .get(&bundle)
            .map(|facts| facts.description.trim())
            .filter(|d| !d.is_empty())
        {
            attributes.push(KeyValue::new(
                "gen_ai.agent.description",
                description.to_string(),
            ));
        }
        attributes.extend(info.conversation());
        let span = start_span(
            &self.tracer,
            format!("invoke_agent {bundle}"),
            SpanKind::Internal,
            at,
            attributes,
            &parent,
        );
        let root = parent.with_span(span);
        self.runs
            .insert(envelope.run_id.clone(), RunSpans::new(root));
    }

    /// A model call's span (`chat`), open until its response.
    pub(super) fn start_chat(
        &mut self,
        info: &JobSpanInfo,
        envelope: &EventEnvelope,
        at: SystemTime,
    ) {
        let Event::ModelRequest {
            model,
            parameters,
            messages,
            ..
        } = &envelope.event
        else {
            return;
        };
        let capture = self.content.is_some();
        let Some(run) = self.runs.get_mut(&envelope.run_id) else {
            return;
        };
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", "chat"),
            KeyValue::new("gen_ai.provider.name", info.endpoint.provider.clone()),
            KeyValue::new("gen_ai.request.model", model.clone()),
            KeyValue::new("server.address", info.endpoint.address.clone()),
        ];
        if let Some(port) = info.endpoint.port {
            attributes.push(KeyValue::new("server.port", port as i64));
        }
        for (param, attr) in [
            ("temperature", "gen_ai.request.temperature"),
            ("top_p", "gen_ai.request.top_p"),
            ("max_tokens", "gen_ai.request.max_tokens"),
            ("seed", "gen_ai.request.seed"),
        ] {
            match parameters.get(param) {
                Some(v) if v.is_i64() || v.is_u64() => {
                    attributes.push(KeyValue::new(attr, v.as_i64().unwrap_or_default()))
                }
                Some(v) if v.is_f64() => {
                    attributes.push(KeyValue::new(attr, v.as_f64().unwrap_or_default()))
                }
                _ => {}
            }
        }
        attributes.extend(info.conversation());
        // The request's content leaves with the call's details event, never
        // on the span: kept until the response closes the call.
        run.chat_details = capture.then(|| ChatDetails::new(attributes.clone(), messages));
        let span = start_span(
            &self.tracer,
            format!("chat {model}"),
            SpanKind::Client,
            at,
            attributes,
            &run.root,
        );
        run.chat = Some(span);
    }

    /// Closes the model call's span with its usage and response.
    pub(super) fn end_chat(&mut self, envelope: &EventEnvelope, at: SystemTime) {
        let Event::ModelResponse {
            usage,
            response_id,
            finish_reason,
            response_model,
            parsed_content,
            ..
        } = &envelope.event
        else {
            return;
        };
        let Some(run) = self.runs.get_mut(&envelope.run_id) else {
            return;
        };
        let Some(mut span) = run.chat.take() else {
            return;
        };
        let mut attributes = vec![
            KeyValue::new("gen_ai.usage.input_tokens", usage.prompt_tokens as i64),
            KeyValue::new("gen_ai.usage.output_tokens", usage.completion_tokens as i64),
        ];
        if let Some(id) = response_id {
            attributes.push(KeyValue::new("gen_ai.response.id", id.clone()));
        }
        if let Some(model) = response_model {
            attributes.push(KeyValue::new("gen_ai.response.model", model.clone()));
        }
        if let Some(reason) = finish_reason {
            attributes.push(KeyValue::new(
                "gen_ai.response.finish_reasons",
                opentelemetry::Value::Array(
                    vec![opentelemetry::StringValue::from(reason.clone())].into(),
                ),
            ));
        }
        span.set_attributes(attributes.clone());
        if let (Some(content), Some(mut details)) = (&self.content, run.chat_details.take()) {
            details.attributes.extend(attributes);
            details.answered(parsed_content.as_deref(), finish_reason.as_deref());
            content.emit(details, span.span_context(), at);
        }
        span.end_with_timestamp(at);
    }

    /// A tool call's span (`execute_tool`), open until its result.
    pub(super) fn start_tool(
        &mut self,
        info: &JobSpanInfo,
        envelope: &EventEnvelope,
        at: SystemTime,
    ) {
        let Event::ToolCall {
            tool_name,
            call_id,
            arguments,
            ..
        } = &envelope.event
        else {
            return;
        };
        let capture = self.content.is_some();
        let Some(run) = self.runs.get_mut(&envelope.run_id) else {
            return;
        };
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("gen_ai.tool.name", tool_name.clone()),
            KeyValue::new("gen_ai.tool.call.id", call_id.clone()),
            KeyValue::new("gen_ai.tool.type", TOOL_TYPE),
        ];
        if let Some(description) = info
            .agents
            .get(&envelope.bundle)
            .and_then(|facts| facts.tools.get(tool_name))
            .filter(|d| !d.trim().is_empty())
        {
            attributes.push(KeyValue::new(
                "gen_ai.tool.description",
                description.clone(),
            ));
        }
        // Tool arguments and results have no event of their own in the
        // conventions: with content opted in, they are the span's.
        if capture {
            attributes.push(KeyValue::new(
                "gen_ai.tool.call.arguments",
                arguments.to_string(),
            ));
        }
        let span = start_span(
            &self.tracer,
            format!("execute_tool {tool_name}"),
            SpanKind::Internal,
            at,
            attributes,
            &run.root,
        );
        run.tools.insert(call_id.clone(), run.root.with_span(span));
    }

    /// Closes the tool call's span, as an error when the call failed.
    pub(super) fn end_tool(&mut self, envelope: &EventEnvelope, at: SystemTime) {
        let Event::ToolResult {
            call_id,
            is_error,
            error_type,
            output_preview,
            ..
        } = &envelope.event
        else {
            return;
        };
        let capture = self.content.is_some();
        let Some(run) = self.runs.get_mut(&envelope.run_id) else {
            return;
        };
        let Some(tool) = run.tools.remove(call_id) else {
            return;
        };
        let span = tool.span();
        if *is_error {
            let kind = error_type.clone().unwrap_or_else(|| "tool_error".into());
            span.set_attribute(KeyValue::new("error.type", kind.clone()));
            span.set_status(Status::error(kind));
        }
        if capture {
            span.set_attribute(KeyValue::new(
                "gen_ai.tool.call.result",
                output_preview.clone(),
            ));
        }
        span.end_with_timestamp(at);
    }

    /// A finished turn, as an event on the run's root span.
    pub(super) fn turn_event(&mut self, envelope: &EventEnvelope, at: SystemTime) {
        let Event::TurnComplete {
            turn,
            tool_calls_count,
            errors_count,
            ..
        } = &envelope.event
        else {
            return;
        };
        let Some(run) = self.runs.get(&envelope.run_id) else {
            return;
        };
        run.root.span().add_event_with_timestamp(
            "turn",
            at,
            vec![
                KeyValue::new("structured_agents.turn", *turn as i64),
                KeyValue::new("structured_agents.tool_calls", *tool_calls_count as i64),
                KeyValue::new("structured_agents.tool_errors", *errors_count as i64),
            ],
        );
    }

    /// Closes the run: a failed model call's open span, its tools' spans,
    /// then its root — which a job's top run leaves behind for the
    /// evaluation events of an eval that grades the job.
    pub(super) fn end_run(&mut self, info: &JobSpanInfo, envelope: &EventEnvelope, at: SystemTime) {
        let Event::KernelEnd {
            termination_reason,
            error_type,
            turn_count,
            ..
        } = &envelope.event
        else {
            return;
        };
        let Some(mut run) = self.runs.remove(&envelope.run_id) else {
            return;
        };
        // A model call that failed leaves its chat span open: close it as an error.
        if let (Some(mut chat), Some(kind)) = (run.chat.take(), error_type) {
            chat.set_attribute(KeyValue::new("error.type", kind.clone()));
            chat.set_status(Status::error(kind.clone()));
            if let (Some(content), Some(mut details)) = (&self.content, run.chat_details.take()) {
                details
                    .attributes
                    .push(KeyValue::new("error.type", kind.clone()));
                content.emit(details, chat.span_context(), at);
            }
            chat.end_with_timestamp(at);
        }
        for (_, tool) in run.tools.drain() {
            tool.span().end_with_timestamp(at);
        }
        let root = run.root.span();
        root.set_attribute(KeyValue::new(
            "structured_agents.termination_reason",
            termination_reason.as_str(),
        ));
        root.set_attribute(KeyValue::new("structured_agents.turns", *turn_count as i64));
        if let Some(kind) = error_type {
            root.set_attribute(KeyValue::new("error.type", kind.clone()));
            root.set_status(Status::error(kind.clone()));
        }
        root.end_with_timestamp(at);
        if envelope.parent.is_none() {
            self.evaluations
                .remember(&info.job_id, root.span_context().clone());
        }
    }
}

impl RunSpans {
    pub(super) fn new(root: Context) -> Self {
        Self {
            root,
            chat: None,
            chat_details: None,
            tools: HashMap::new(),
        }
    }
}
