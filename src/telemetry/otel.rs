//! OpenTelemetry spans for job runs, named and attributed by the GenAI
//! semantic conventions: `invoke_agent {bundle}` (INTERNAL) per run, with
//! `chat {model}` (CLIENT) per model call and `execute_tool {tool}`
//! (INTERNAL) per tool call as children; turns are events on the root.
//!
//! The per-job observer never blocks a job: it `try_send`s the event to a
//! bounded queue (drops are counted) read by one thread that builds the spans
//! from the events' own timestamps and hands them to the SDK's batch
//! exporter (OTLP http/protobuf, or gRPC with the `otlp-grpc` feature).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use opentelemetry::trace::{
    Span, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
    Tracer, TracerProvider,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter,
};

mod workflow;

use crate::client::EndpointInfo;
use crate::events::daemon::{
    Change, DaemonEvent, DaemonObserver, InputKind, ReloadOutcome, ReloadResult,
};
use crate::events::{Event, EventEnvelope, Observer, ObserverError};

/// Operator settings (config `[telemetry]` plus the standard OTEL_* variables).
#[derive(Debug, Clone)]
pub struct OtelSettings {
    /// Base endpoint (e.g. `http://127.0.0.1:4318`); `OTEL_EXPORTER_OTLP_ENDPOINT`
    /// or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` also enable export.
    pub endpoint: Option<String>,
    /// `http/protobuf` (default) or `grpc`.
    pub protocol: Option<String>,
    pub capture_message_content: bool,
    pub max_queue_size: usize,
    pub shutdown_timeout: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum OtelError {
    #[error("OTLP exporter: {0}")]
    Exporter(String),
    #[error(
        "OTLP protocol {0:?} is not available (use http/protobuf, or build with the otlp-grpc feature for grpc)"
    )]
    Protocol(String),
}

/// What spans need to know about a job besides its events.
#[derive(Debug, Clone, Default)]
pub struct JobSpanInfo {
    pub job_id: String,
    pub bundle: String,
    pub bundle_version: String,
    pub model: String,
    pub endpoint: EndpointInfo,
    /// W3C trace context the job's spans join.
    pub traceparent: Option<String>,
}

enum Item {
    Event(Arc<JobSpanInfo>, Box<EventEnvelope>),
    /// A reload's outcome, as a span of its own.
    Reload(Arc<ReloadOutcome>, SystemTime),
    /// Flush what is pending and stop (shutdown).
    Stop,
}

impl DaemonObserver for OtelTelemetry {
    fn on_daemon_event(&self, event: &DaemonEvent) {
        let item = match event {
            DaemonEvent::Reload(outcome) => Item::Reload(outcome.clone(), SystemTime::now()),
            // Only a reload is a span of its own; jobs' spans come from
            // their kernel events, and the rest are metrics and log lines.
            // Every variant is named so a new one is a decision.
            DaemonEvent::ReloadStarted { .. }
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
            | DaemonEvent::JobsMoved { .. }
            | DaemonEvent::ScheduleFired { .. }
            | DaemonEvent::ScheduleRemoved { .. }
            | DaemonEvent::WebhookDelivery { .. }
            | DaemonEvent::StaleSettle { .. }
            | DaemonEvent::DrainStarted
            | DaemonEvent::DrainDone
            | DaemonEvent::EndpointLoad { .. } => return,
        };
        if let Err(TrySendError::Full(_)) = self.queue.try_send(item) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The running exporter.
pub struct OtelTelemetry {
    queue: SyncSender<Item>,
    dropped: Arc<AtomicU64>,
    provider: SdkTracerProvider,
    worker: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
    shutdown_timeout: Duration,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl OtelTelemetry {
    /// `None` when no endpoint is configured anywhere.
    pub fn init(settings: OtelSettings) -> Result<Option<Arc<Self>>, OtelError> {
        let traces_env = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
        let base_env = env("OTEL_EXPORTER_OTLP_ENDPOINT");
        if settings.endpoint.is_none() && traces_env.is_none() && base_env.is_none() {
            return Ok(None);
        }
        let protocol = settings
            .protocol
            .clone()
            .or_else(|| env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
            .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
            .unwrap_or_else(|| "http/protobuf".into());
        let exporter = match protocol.as_str() {
            "http/protobuf" => {
                // The batch processor exports from its own thread: it needs a
                // blocking client (an async one panics without a reactor).
                let client = reqwest::blocking::Client::builder()
                    .timeout(Duration::from_secs(10))
                    .build()
                    .map_err(|e| OtelError::Exporter(e.to_string()))?;
                let mut builder = opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_http_client(client);
                // Config wins over the environment; per-signal env is used as-is.
                if let Some(base) = &settings.endpoint {
                    builder =
                        builder.with_endpoint(format!("{}/v1/traces", base.trim_end_matches('/')));
                }
                builder
                    .build()
                    .map_err(|e| OtelError::Exporter(e.to_string()))?
            }
            #[cfg(feature = "otlp-grpc")]
            "grpc" => {
                use opentelemetry_otlp::WithTonicConfig as _;
                let mut builder = opentelemetry_otlp::SpanExporter::builder().with_tonic();
                if let Some(base) = &settings.endpoint {
                    builder = builder.with_endpoint(base.clone());
                }
                builder
                    .build()
                    .map_err(|e| OtelError::Exporter(e.to_string()))?
            }
            other => return Err(OtelError::Protocol(other.to_string())),
        };
        let processor = BatchSpanProcessor::builder(ReportingExporter {
            inner: exporter,
            failing: AtomicBool::new(false),
        })
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_max_queue_size(settings.max_queue_size.max(64) * 4)
                .with_scheduled_delay(Duration::from_millis(500))
                .build(),
        )
        .build();
        let mut resource = Resource::builder();
        if env("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name("structured-agents");
        }
        let resource = resource
            .with_attributes([KeyValue::new("service.version", env!("CARGO_PKG_VERSION"))])
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(resource)
            .build();
        let (queue, events) = sync_channel::<Item>(settings.max_queue_size.max(1));
        let tracer = provider.tracer("structured-agents");
        let capture = settings.capture_message_content
            || env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
                .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let worker = std::thread::Builder::new()
            .name("otel-spans".into())
            .spawn(move || {
                SpanBuilder {
                    tracer,
                    capture,
                    runs: HashMap::new(),
                }
                .run(events)
            })
            .map_err(|e| OtelError::Exporter(format!("cannot start the span thread: {e}")))?;
        Ok(Some(Arc::new(Self {
            queue,
            dropped: Arc::new(AtomicU64::new(0)),
            provider,
            worker: std::sync::Mutex::new(Some(worker)),
            shutdown_timeout: settings.shutdown_timeout,
        })))
    }

    /// An observer for one job run.
    pub fn observer(self: &Arc<Self>, info: JobSpanInfo) -> Arc<dyn Observer> {
        Arc::new(JobSpans {
            otel: self.clone(),
            info: Arc::new(info),
        })
    }

    /// Events not turned into spans because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Flushes and stops the exporter within the shutdown deadline.
    pub async fn shutdown(self: Arc<Self>) {
        let timeout = self.shutdown_timeout;
        let this = self.clone();
        let flush = tokio::task::spawn_blocking(move || {
            // The span thread drains the queue up to the stop marker.
            let worker = this.worker.lock().ok().and_then(|mut w| w.take());
            let _ = this.queue.send(Item::Stop);
            if let Some(worker) = worker {
                let _ = worker.join();
            }
            if let Err(e) = this.provider.shutdown() {
                tracing::warn!(error = %e, "OTLP exporter shutdown");
            }
        });
        if tokio::time::timeout(timeout, flush).await.is_err() {
            tracing::warn!(
                timeout_ms = timeout.as_millis() as u64,
                "OTLP flush did not finish before the shutdown deadline"
            );
        }
    }
}

/// Logs the first failed export (an unreachable collector) once, and the
/// recovery; the batch processor keeps retrying with later batches.
#[derive(Debug)]
struct ReportingExporter<E> {
    inner: E,
    failing: AtomicBool,
}

impl<E: SpanExporter> SpanExporter for ReportingExporter<E> {
    fn export(
        &self,
        batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        let spans = batch.len();
        let export = self.inner.export(batch);
        async move {
            let result = export.await;
            match &result {
                Err(e) if !self.failing.swap(true, Ordering::SeqCst) => {
                    tracing::warn!(error = %e, spans, "OTLP span export failed; spans are dropped until the collector is reachable (logged once)");
                }
                Ok(()) if self.failing.swap(false, Ordering::SeqCst) => {
                    tracing::info!("OTLP span export recovered")
                }
                _ => {}
            }
            result
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

struct JobSpans {
    otel: Arc<OtelTelemetry>,
    info: Arc<JobSpanInfo>,
}

#[async_trait]
impl Observer for JobSpans {
    async fn on_event(&self, event: &EventEnvelope) -> Result<(), ObserverError> {
        match self
            .otel
            .queue
            .try_send(Item::Event(self.info.clone(), Box::new(event.clone())))
        {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(_)) => {
                self.otel.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    fn name(&self) -> &str {
        "otel"
    }
}

/// The spans of one run being built.
struct RunSpans {
    root: Context,
    chat: Option<opentelemetry_sdk::trace::Span>,
    tools: HashMap<String, opentelemetry_sdk::trace::Span>,
    model_error: bool,
}

struct SpanBuilder {
    tracer: opentelemetry_sdk::trace::Tracer,
    capture: bool,
    runs: HashMap<String, RunSpans>,
}

fn time_of(event: &EventEnvelope) -> SystemTime {
    humantime::parse_rfc3339_weak(&event.timestamp).unwrap_or_else(|_| SystemTime::now())
}

fn remote_parent(traceparent: Option<&str>) -> Context {
    let Some(tp) = traceparent else {
        return Context::new();
    };
    let parts: Vec<&str> = tp.split('-').collect();
    if parts.len() != 4 {
        return Context::new();
    }
    let (Ok(trace_id), Ok(span_id), Ok(flags)) = (
        TraceId::from_hex(parts[1]),
        SpanId::from_hex(parts[2]),
        u8::from_str_radix(parts[3], 16),
    ) else {
        return Context::new();
    };
    let context = SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags),
        true,
        TraceState::default(),
    );
    Context::new().with_remote_span_context(context)
}

impl SpanBuilder {
    fn run(mut self, events: Receiver<Item>) {
        for item in events {
            match item {
                Item::Event(info, event) => self.handle(&info, &event),
                Item::Reload(outcome, at) => self.reload(&outcome, at),
                Item::Stop => return,
            }
        }
    }

    fn reload(&mut self, outcome: &ReloadOutcome, at: SystemTime) {
        let count = |change: Change| {
            InputKind::ALL
                .iter()
                .map(|kind| outcome.names(*kind, change).len() as i64)
                .sum::<i64>()
        };
        let mut span = self
            .tracer
            .span_builder("reload")
            .with_kind(SpanKind::Internal)
            .with_start_time(at)
            .with_attributes(vec![
                KeyValue::new(
                    "structured_agents.reload.generation",
                    outcome.generation as i64,
                ),
                KeyValue::new("structured_agents.reload.result", outcome.result.as_str()),
                KeyValue::new(
                    "structured_agents.reload.trigger",
                    format!("{:?}", outcome.trigger).to_lowercase(),
                ),
                KeyValue::new("structured_agents.reload.added", count(Change::Added)),
                KeyValue::new("structured_agents.reload.changed", count(Change::Changed)),
                KeyValue::new("structured_agents.reload.removed", count(Change::Removed)),
                KeyValue::new("structured_agents.reload.failed", outcome.failed.join(",")),
            ])
            .start_with_context(&self.tracer, &Context::new());
        if outcome.result != ReloadResult::Applied {
            span.set_attribute(KeyValue::new(
                "error.type",
                format!("reload_{}", outcome.result.as_str()),
            ));
            span.set_status(Status::error(outcome.errors.join("; ")));
        }
        span.end_with_timestamp(SystemTime::now().max(at));
    }

    fn handle(&mut self, info: &JobSpanInfo, envelope: &EventEnvelope) {
        let at = time_of(envelope);
        if self.workflow(info, envelope, at) {
            return;
        }
        match &envelope.event {
            Event::KernelStart { .. } => self.start_run(info, envelope, at),
            Event::ModelRequest { .. } => self.start_chat(info, envelope, at),
            Event::ModelResponse { .. } => self.end_chat(envelope, at),
            Event::ToolCall { .. } => self.start_tool(envelope, at),
            Event::ToolResult { .. } => self.end_tool(envelope, at),
            Event::TurnComplete { .. } => self.turn_event(envelope, at),
            Event::KernelEnd { .. } => self.end_run(envelope, at),
            _ => {}
        }
    }

    /// The run's root span (`invoke_agent`), under its parent run's or the job's remote parent.
    fn start_run(&mut self, info: &JobSpanInfo, envelope: &EventEnvelope, at: SystemTime) {
        let Event::KernelStart {
            max_turns,
            tools_count,
            ..
        } = &envelope.event
        else {
            return;
        };
        let key = envelope.run_id.clone();
        let parent = match &envelope.parent {
            // A nested agent run hangs under its parent's root span.
            Some(p) => self
                .runs
                .get(&p.run_id)
                .map(|r| r.root.clone())
                .unwrap_or_default(),
            None => remote_parent(info.traceparent.as_deref()),
        };
        let span = self
            .tracer
            .span_builder(format!("invoke_agent {}", envelope.bundle))
            .with_kind(SpanKind::Internal)
            .with_start_time(at)
            .with_attributes(vec![
                KeyValue::new("gen_ai.operation.name", "invoke_agent"),
                KeyValue::new("gen_ai.agent.name", envelope.bundle.clone()),
                KeyValue::new("gen_ai.agent.version", envelope.bundle_version.clone()),
                KeyValue::new("gen_ai.conversation.id", info.job_id.clone()),
                KeyValue::new("gen_ai.request.model", info.model.clone()),
                KeyValue::new("gen_ai.provider.name", info.endpoint.provider.clone()),
                KeyValue::new("structured_agents.max_turns", *max_turns as i64),
                KeyValue::new("structured_agents.tools_count", *tools_count as i64),
            ])
            .start_with_context(&self.tracer, &parent);
        let root = parent.with_span(span);
        self.runs.insert(
            key,
            RunSpans {
                root,
                chat: None,
                tools: HashMap::new(),
                model_error: false,
            },
        );
    }

    /// A model call's span (`chat`), open until its response.
    fn start_chat(&mut self, info: &JobSpanInfo, envelope: &EventEnvelope, at: SystemTime) {
        let Event::ModelRequest {
            model,
            parameters,
            messages,
            ..
        } = &envelope.event
        else {
            return;
        };
        let key = envelope.run_id.clone();
        let Some(run) = self.runs.get_mut(&key) else {
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
        if self.capture && !messages.is_null() {
            attributes.push(KeyValue::new("gen_ai.input.messages", messages.to_string()));
        }
        let span = self
            .tracer
            .span_builder(format!("chat {model}"))
            .with_kind(SpanKind::Client)
            .with_start_time(at)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &run.root);
        run.chat = Some(span);
    }

    /// Closes the model call's span with its usage and response.
    fn end_chat(&mut self, envelope: &EventEnvelope, at: SystemTime) {
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
        let key = envelope.run_id.clone();
        let Some(run) = self.runs.get_mut(&key) else {
            return;
        };
        let Some(mut span) = run.chat.take() else {
            return;
        };
        span.set_attribute(KeyValue::new(
            "gen_ai.usage.input_tokens",
            usage.prompt_tokens as i64,
        ));
        span.set_attribute(KeyValue::new(
            "gen_ai.usage.output_tokens",
            usage.completion_tokens as i64,
        ));
        if let Some(id) = response_id {
            span.set_attribute(KeyValue::new("gen_ai.response.id", id.clone()));
        }
        if let Some(model) = response_model {
            span.set_attribute(KeyValue::new("gen_ai.response.model", model.clone()));
        }
        if let Some(reason) = finish_reason {
            span.set_attribute(KeyValue::new(
                "gen_ai.response.finish_reasons",
                opentelemetry::Value::Array(
                    vec![opentelemetry::StringValue::from(reason.clone())].into(),
                ),
            ));
        }
        if self.capture {
            let output = serde_json::json!([{"role": "assistant", "content": parsed_content}]);
            span.set_attribute(KeyValue::new("gen_ai.output.messages", output.to_string()));
        }
        span.end_with_timestamp(at);
    }

    /// A tool call's span (`execute_tool`), open until its result.
    fn start_tool(&mut self, envelope: &EventEnvelope, at: SystemTime) {
        let Event::ToolCall {
            tool_name,
            call_id,
            arguments,
            ..
        } = &envelope.event
        else {
            return;
        };
        let key = envelope.run_id.clone();
        let Some(run) = self.runs.get_mut(&key) else {
            return;
        };
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("gen_ai.tool.name", tool_name.clone()),
            KeyValue::new("gen_ai.tool.call.id", call_id.clone()),
            KeyValue::new("gen_ai.tool.type", "function"),
        ];
        if self.capture {
            attributes.push(KeyValue::new(
                "gen_ai.tool.call.arguments",
                arguments.to_string(),
            ));
        }
        let span = self
            .tracer
            .span_builder(format!("execute_tool {tool_name}"))
            .with_kind(SpanKind::Internal)
            .with_start_time(at)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &run.root);
        run.tools.insert(call_id.clone(), span);
    }

    /// Closes the tool call's span, as an error when the call failed.
    fn end_tool(&mut self, envelope: &EventEnvelope, at: SystemTime) {
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
        let key = envelope.run_id.clone();
        let Some(run) = self.runs.get_mut(&key) else {
            return;
        };
        let Some(mut span) = run.tools.remove(call_id) else {
            return;
        };
        if *is_error {
            let kind = error_type.clone().unwrap_or_else(|| "tool_error".into());
            span.set_attribute(KeyValue::new("error.type", kind.clone()));
            span.set_status(Status::error(kind));
        }
        if self.capture {
            span.set_attribute(KeyValue::new(
                "gen_ai.tool.call.result",
                output_preview.clone(),
            ));
        }
        span.end_with_timestamp(at);
    }

    /// A finished turn, as an event on the run's root span.
    fn turn_event(&mut self, envelope: &EventEnvelope, at: SystemTime) {
        let Event::TurnComplete {
            turn,
            tool_calls_count,
            errors_count,
            ..
        } = &envelope.event
        else {
            return;
        };
        let key = envelope.run_id.clone();
        let Some(run) = self.runs.get(&key) else {
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

    /// Closes the run: a failed model call's open span, its tools' spans, then its root.
    fn end_run(&mut self, envelope: &EventEnvelope, at: SystemTime) {
        let Event::KernelEnd {
            termination_reason,
            error_type,
            turn_count,
            ..
        } = &envelope.event
        else {
            return;
        };
        let key = envelope.run_id.clone();
        let Some(mut run) = self.runs.remove(&key) else {
            return;
        };
        // A model call that failed leaves its chat span open: close it as an error.
        if let (Some(mut chat), Some(kind)) = (run.chat.take(), error_type) {
            chat.set_attribute(KeyValue::new("error.type", kind.clone()));
            chat.set_status(Status::error(kind.clone()));
            chat.end_with_timestamp(at);
            run.model_error = true;
        }
        for (_, mut span) in run.tools.drain() {
            span.end_with_timestamp(at);
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
    }
}
