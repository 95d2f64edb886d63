//! OpenTelemetry spans for job runs, named and attributed by the GenAI
//! semantic conventions: `invoke_agent {bundle}` (INTERNAL) per run, with
//! `chat {model}` (CLIENT) per model call and `execute_tool {tool}`
//! (INTERNAL) per tool call as children (`agent`); turns are events on the
//! root. Opted-in message content goes out as log-based events (`content`),
//! and each grade of an eval run as a `gen_ai.evaluation.result` event
//! (`evaluation`), both through the OTLP logs pipeline (`logs`).
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
use opentelemetry::logs::LoggerProvider as _;
use opentelemetry::trace::{
    Span, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
    Tracer, TracerProvider,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::logs::SdkLoggerProvider;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter,
};

mod agent;
mod content;
mod evaluation;
mod logs;
mod workflow;

use crate::client::EndpointInfo;
use crate::events::daemon::{
    Change, DaemonEvent, DaemonObserver, EvalRan, InputKind, ReloadOutcome, ReloadResult,
};
use crate::events::{Event, EventEnvelope, Observer, ObserverError};
use crate::trace_context::TraceContext;
use crate::types::AgentCatalog;
use content::{ChatDetails, ContentEvents};
use evaluation::Evaluations;

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
    /// The conversation the job continues (`gen_ai.conversation.id`);
    /// `None` for a job on its own.
    pub conversation_id: Option<String>,
    pub bundle: String,
    pub bundle_version: String,
    pub model: String,
    pub endpoint: EndpointInfo,
    /// W3C trace context the job's spans join (its `tracestate` travels
    /// on in theirs).
    pub trace: Option<TraceContext>,
    /// The loaded bundles' and their tools' descriptions (nested runs run
    /// other bundles).
    pub agents: Arc<AgentCatalog>,
}

impl JobSpanInfo {
    /// `gen_ai.conversation.id`, when the job belongs to a conversation.
    fn conversation(&self) -> Option<KeyValue> {
        let id = self.conversation_id.as_ref()?;
        Some(KeyValue::new("gen_ai.conversation.id", id.clone()))
    }
}

enum Item {
    Event(Arc<JobSpanInfo>, Box<EventEnvelope>),
    /// A reload's outcome, as a span of its own.
    Reload(Arc<ReloadOutcome>, SystemTime),
    /// An eval run's report: each grade as an evaluation event.
    Evaluated(Box<EvalRan>, SystemTime),
    /// Flush what is pending and stop (shutdown).
    Stop,
}

impl DaemonObserver for OtelTelemetry {
    fn on_daemon_event(&self, event: &DaemonEvent) {
        let item = match event {
            DaemonEvent::Reload(outcome) => Item::Reload(outcome.clone(), SystemTime::now()),
            DaemonEvent::EvalRan(ran) => Item::Evaluated(ran.clone(), SystemTime::now()),
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
            | DaemonEvent::Release { .. }
            | DaemonEvent::JobsMoved { .. }
            | DaemonEvent::ScheduleFired { .. }
            | DaemonEvent::ScheduleRemoved { .. }
            | DaemonEvent::WebhookDelivery { .. }
            | DaemonEvent::StaleSettle { .. }
            | DaemonEvent::DrainStarted
            | DaemonEvent::DrainDone
            | DaemonEvent::EndpointLoad { .. }
            | DaemonEvent::ModelAttemptFailed { .. } => return,
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
    /// The log-based events' pipeline (content, when opted in; eval
    /// results).
    logs: SdkLoggerProvider,
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
        let mut resource = Resource::builder();
        if env("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name("structured-agents");
        }
        let resource = resource
            .with_attributes([KeyValue::new("service.version", env!("CARGO_PKG_VERSION"))])
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(span_processor(&protocol, &settings)?)
            .with_resource(resource.clone())
            .build();
        let capture = settings.capture_message_content
            || env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
                .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let logs = logs::provider(
            &protocol,
            settings.endpoint.as_deref(),
            resource,
            settings.max_queue_size,
        )?;
        let logger = logs.logger("structured-agents");
        let content = capture.then(|| ContentEvents::new(logger.clone()));
        let evaluations = Evaluations::new(logger, capture);
        let (queue, events) = sync_channel::<Item>(settings.max_queue_size.max(1));
        let tracer = provider.tracer("structured-agents");
        let worker = std::thread::Builder::new()
            .name("otel-spans".into())
            .spawn(move || {
                SpanBuilder {
                    tracer,
                    content,
                    evaluations,
                    runs: HashMap::new(),
                }
                .run(events)
            })
            .map_err(|e| OtelError::Exporter(format!("cannot start the span thread: {e}")))?;
        Ok(Some(Arc::new(Self {
            queue,
            dropped: Arc::new(AtomicU64::new(0)),
            provider,
            logs,
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
            if let Err(e) = this.logs.shutdown() {
                tracing::warn!(error = %e, "OTLP logs exporter shutdown");
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

/// The batch span processor over OTLP `protocol`: http/protobuf to
/// `{endpoint}/v1/traces` (config wins over the environment; the per-signal
/// variable is used as it is), or gRPC in a build with `otlp-grpc`.
fn span_processor(
    protocol: &str,
    settings: &OtelSettings,
) -> Result<BatchSpanProcessor, OtelError> {
    let exporter = match protocol {
        "http/protobuf" => {
            // The batch processor exports from its own thread: it needs a
            // blocking client (an async one panics without a reactor).
            let mut builder = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_http_client(blocking_client()?);
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
    Ok(
        BatchSpanProcessor::builder(ReportingExporter::new(exporter))
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_max_queue_size(settings.max_queue_size.max(64) * 4)
                    .with_scheduled_delay(Duration::from_millis(500))
                    .build(),
            )
            .build(),
    )
}

/// The HTTP client of an OTLP exporter's own thread.
fn blocking_client() -> Result<reqwest::blocking::Client, OtelError> {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| OtelError::Exporter(e.to_string()))
}

/// Logs the first failed export (an unreachable collector) once, and the
/// recovery; the batch processor keeps retrying with later batches.
#[derive(Debug)]
struct ReportingExporter<E> {
    inner: E,
    failing: AtomicBool,
}

impl<E> ReportingExporter<E> {
    fn new(inner: E) -> Self {
        Self {
            inner,
            failing: AtomicBool::new(false),
        }
    }

    /// Logs an export's failure when it is the first since the last
    /// success, and the first success after failures.
    fn report(&self, result: &OTelSdkResult, signal: &'static str, items: usize) {
        match result {
            Err(e) if !self.failing.swap(true, Ordering::SeqCst) => {
                tracing::warn!(error = %e, items, "OTLP {signal} export failed; they are dropped until the collector is reachable (logged once)");
            }
            Ok(()) if self.failing.swap(false, Ordering::SeqCst) => {
                tracing::info!("OTLP {signal} export recovered")
            }
            _ => {}
        }
    }
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
            self.report(&result, "span", spans);
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
    /// The open model call's details, for its content event (opted in).
    chat_details: Option<ChatDetails>,
    /// Open tool calls' spans by call id, each in a context a nested run
    /// started by the call hangs under.
    tools: HashMap<String, Context>,
}

struct SpanBuilder {
    tracer: opentelemetry_sdk::trace::Tracer,
    /// Where message content goes, when opted in.
    content: Option<ContentEvents>,
    /// Where eval results go, and the finished runs' root spans they are
    /// parented to.
    evaluations: Evaluations,
    runs: HashMap<String, RunSpans>,
}

/// A span named `name` of `kind`, started at `at` with `attributes`
/// under `parent`: how every span here starts.
fn start_span(
    tracer: &opentelemetry_sdk::trace::Tracer,
    name: impl Into<std::borrow::Cow<'static, str>>,
    kind: SpanKind,
    at: SystemTime,
    attributes: Vec<KeyValue>,
    parent: &Context,
) -> opentelemetry_sdk::trace::Span {
    tracer
        .span_builder(name)
        .with_kind(kind)
        .with_start_time(at)
        .with_attributes(attributes)
        .start_with_context(tracer, parent)
}

fn time_of(event: &EventEnvelope) -> SystemTime {
    humantime::parse_rfc3339_weak(&event.timestamp).unwrap_or_else(|_| SystemTime::now())
}

/// The caller's span, as the parent of a job's root span: its trace and
/// span ids and flags, and its `tracestate`, which the SDK's sampler hands
/// on to every span of the job (the OTLP `trace_state` of each).
fn remote_parent(trace: Option<&TraceContext>) -> Context {
    let Some(trace) = trace else {
        return Context::new();
    };
    let parts: Vec<&str> = trace.traceparent().split('-').collect();
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
        trace
            .tracestate()
            .and_then(|state| state.parse::<TraceState>().ok())
            .unwrap_or_default(),
    );
    Context::new().with_remote_span_context(context)
}

impl SpanBuilder {
    fn run(mut self, events: Receiver<Item>) {
        for item in events {
            match item {
                Item::Event(info, event) => self.handle(&info, &event),
                Item::Reload(outcome, at) => self.reload(&outcome, at),
                Item::Evaluated(ran, at) => self.evaluations.emit(&ran, at),
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
        let mut span = start_span(
            &self.tracer,
            "reload",
            SpanKind::Internal,
            at,
            vec![
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
            ],
            &Context::new(),
        );
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
            Event::ToolCall { .. } => self.start_tool(info, envelope, at),
            Event::ToolResult { .. } => self.end_tool(envelope, at),
            Event::TurnComplete { .. } => self.turn_event(envelope, at),
            Event::KernelEnd { .. } => self.end_run(info, envelope, at),
            _ => {}
        }
    }
}
