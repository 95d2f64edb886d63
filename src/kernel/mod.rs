//! The agent loop. Each turn: trim the history, ask the model (through its
//! plugin and a `ChatBackend`), read the tool calls, run them through the
//! tool engine, append the assistant message and the tool messages — and
//! emit the seven kernel events on the way.
//!
//! The kernel knows nothing of HTTP servers, the queue or telemetry: it calls
//! traits and emits events.

pub mod history;

pub use history::HistoryStrategy;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::client::{ChatBackend, ChatRequest, ClientError, OnToken};
use crate::events::{Event, EventSink, preview};
use crate::model::ModelPlugin;
use crate::tools::{ToolEngine, ToolOutcome};
use crate::types::{Message, RunResult, StepResult, TerminationReason, TokenUsage, ToolResult};

/// How one run behaves; built from a bundle.
#[derive(Debug, Clone)]
pub struct KernelConfig {
    /// The request's `model`.
    pub model: String,
    /// A different model (e.g. a LoRA adapter) for particular turns.
    pub turn_models: BTreeMap<u32, String>,
    pub max_turns: u32,
    pub history: HistoryStrategy,
    pub max_history_messages: usize,
    /// Tool calls of one turn run at most this many at a time.
    pub max_concurrency: usize,
    /// A successful call of this tool ends the run; its output is the result.
    pub termination_tool: Option<String>,
    /// A deadline for the whole run.
    pub timeout: Option<Duration>,
    /// temperature, max_tokens, top_p, stop, ...
    pub sampling: Map<String, Value>,
    /// Keys from the model plugin (grammar, stop sequences).
    pub request_fragment: Map<String, Value>,
    /// Merged into the request last, overriding anything else.
    pub extra_body: Map<String, Value>,
    /// Put the request's messages on ModelRequest events (for observers that
    /// record content, when the operator opted in); off saves a copy per turn.
    pub record_messages: bool,
}

impl Default for KernelConfig {
    fn default() -> Self {
        Self {
            model: "default".into(),
            turn_models: BTreeMap::new(),
            max_turns: 10,
            history: HistoryStrategy::SlidingWindow,
            max_history_messages: 50,
            max_concurrency: 4,
            termination_tool: None,
            timeout: None,
            sampling: Map::new(),
            request_fragment: Map::new(),
            extra_body: Map::new(),
            record_messages: false,
        }
    }
}

/// Where in a turn a run failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    ModelCall,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Phase::ModelCall => "model call",
        })
    }
}

/// A run that could not go on.
#[derive(Debug, thiserror::Error)]
#[error("turn {turn}, {phase}: {source}")]
pub struct KernelError {
    pub turn: u32,
    pub phase: Phase,
    #[source]
    pub source: ClientError,
}

impl KernelError {
    pub fn is_retryable(&self) -> bool {
        self.source.is_retryable()
    }
}

/// Why a step did not complete.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error(transparent)]
    Model(#[from] KernelError),
    #[error("the step was interrupted (cancelled or out of time)")]
    Interrupted { partial: Option<StepResult> },
}

pub struct Kernel {
    config: KernelConfig,
    plugin: Arc<dyn ModelPlugin>,
    backend: Arc<dyn ChatBackend>,
    tools: Arc<ToolEngine>,
}

impl Kernel {
    pub fn new(
        config: KernelConfig,
        plugin: Arc<dyn ModelPlugin>,
        backend: Arc<dyn ChatBackend>,
        tools: Arc<ToolEngine>,
    ) -> Self {
        Self {
            config,
            plugin,
            backend,
            tools,
        }
    }

    pub fn config(&self) -> &KernelConfig {
        &self.config
    }

    pub fn tools(&self) -> &Arc<ToolEngine> {
        &self.tools
    }

    fn request(&self, messages: &[Message], turn: u32) -> ChatRequest {
        let schemas = self.tools.schemas();
        let model = self
            .config
            .turn_models
            .get(&turn)
            .unwrap_or(&self.config.model);
        let mut body = Map::new();
        body.insert("model".into(), json!(model));
        body.insert(
            "messages".into(),
            Value::Array(self.plugin.format_messages(messages)),
        );
        // `tool_choice` is left out (not "none") when there are no tools:
        // several servers reject "none" without tools.
        if let Some(tools) = self.plugin.format_tools(schemas) {
            body.insert("tools".into(), tools);
            body.insert("tool_choice".into(), json!("auto"));
        }
        for source in [
            &self.config.sampling,
            &self.config.request_fragment,
            &self.config.extra_body,
        ] {
            for (key, value) in source {
                body.insert(key.clone(), value.clone());
            }
        }
        ChatRequest { body }
    }

    /// One turn: model call, tool calls, events. `history` is the whole
    /// conversation so far; the result holds what to append to it.
    pub async fn step(
        &self,
        history: &[Message],
        turn: u32,
        events: &EventSink,
        cancel: &CancellationToken,
    ) -> Result<StepResult, StepError> {
        let schemas = self.tools.schemas();
        let window = history::trim(
            history,
            self.config.history,
            self.config.max_history_messages,
        );
        let request = self.request(&window, turn);
        events
            .emit(Event::ModelRequest {
                turn,
                messages_count: window.len(),
                tools_count: schemas.len(),
                model: request.model().to_string(),
                parameters: Value::Object(self.config.sampling.clone()),
                messages: if self.config.record_messages {
                    request.body.get("messages").cloned().unwrap_or(Value::Null)
                } else {
                    Value::Null
                },
            })
            .await;

        let started = Instant::now();
        let on_token: Option<OnToken> = events.observer().wants_tokens().then(|| {
            let observer = events.observer().clone();
            let run_id = events.context().run_id.clone();
            Arc::new(move |text: &str| {
                observer.on_token(crate::events::TokenDelta {
                    run_id: &run_id,
                    turn,
                    text,
                });
            }) as OnToken
        });
        let response = tokio::select! {
            r = self.backend.complete(&request, on_token) => r,
            _ = cancel.cancelled() => return Err(StepError::Interrupted { partial: None }),
        };
        let response = response.map_err(|source| KernelError {
            turn,
            phase: Phase::ModelCall,
            source,
        })?;
        let parsed = self.plugin.parse_reply(&response.message, schemas);
        events
            .emit(Event::ModelResponse {
                turn,
                duration_ms: started.elapsed().as_millis() as u64,
                content: parsed.content.clone(),
                tool_calls_count: parsed.calls.len(),
                usage: response.usage,
                response_id: response.id.clone(),
                finish_reason: response.finish_reason.clone(),
                response_model: response.model.clone(),
            })
            .await;

        for parsed_call in &parsed.calls {
            events
                .emit(Event::ToolCall {
                    turn,
                    tool_name: parsed_call.call.name.clone(),
                    call_id: parsed_call.call.id.clone(),
                    arguments: parsed_call.call.arguments.clone(),
                })
                .await;
            if let Some(detail) = &parsed_call.error {
                events
                    .emit(Event::ParseError {
                        turn,
                        detail: detail.clone(),
                    })
                    .await;
            }
        }

        // Owned items: a borrowing closure here trips the higher-ranked
        // lifetime check when the run future must be Send.
        let run_call = |parsed_call: crate::model::ParsedCall| async move {
            match &parsed_call.error {
                Some(detail) => ToolOutcome {
                    result: ToolResult::error(&parsed_call.call, format!("bad_args:{detail}")),
                    error_code: Some("bad_args"),
                    attempts: 0,
                    cached: false,
                    duration: Duration::ZERO,
                },
                None => {
                    self.tools
                        .execute(&parsed_call.call, turn, cancel, events)
                        .await
                }
            }
        };
        let outcomes: Vec<ToolOutcome> = futures::stream::iter(parsed.calls.clone())
            .map(run_call)
            .buffered(self.config.max_concurrency.max(1))
            .collect()
            .await;

        let mut errors_count = 0;
        for outcome in &outcomes {
            errors_count += usize::from(outcome.result.is_error);
            events
                .emit(Event::ToolResult {
                    turn,
                    tool_name: outcome.result.name.clone(),
                    call_id: outcome.result.call_id.clone(),
                    is_error: outcome.result.is_error,
                    duration_ms: outcome.duration.as_millis() as u64,
                    output_preview: preview(&outcome.result.output, 200),
                    error_type: outcome.error_code.map(str::to_string),
                })
                .await;
        }
        events
            .emit(Event::TurnComplete {
                turn,
                tool_calls_count: parsed.calls.len(),
                tool_results_count: outcomes.len(),
                errors_count,
            })
            .await;

        let step = StepResult {
            assistant: Message::assistant(
                parsed.content,
                parsed.calls.into_iter().map(|c| c.call).collect(),
            ),
            tool_results: outcomes.into_iter().map(|o| o.result).collect(),
            usage: response.usage,
        };
        if cancel.is_cancelled() {
            return Err(StepError::Interrupted {
                partial: Some(step),
            });
        }
        Ok(step)
    }

    /// Runs turns until a termination condition. KernelEnd is emitted on
    /// every path, including errors.
    pub async fn run(
        &self,
        initial: Vec<Message>,
        events: &EventSink,
        cancel: CancellationToken,
    ) -> Result<RunResult, KernelError> {
        let started = Instant::now();
        events
            .emit(Event::KernelStart {
                max_turns: self.config.max_turns,
                tools_count: self.tools.len(),
                initial_messages_count: initial.len(),
            })
            .await;

        // The run's own token: cancelled by the caller or by the deadline.
        let run_token = cancel.child_token();
        let timed_out = Arc::new(AtomicBool::new(false));
        let _deadline = self.config.timeout.map(|timeout| {
            let token = run_token.clone();
            let flag = timed_out.clone();
            DropGuard(tokio::spawn(async move {
                tokio::time::sleep(timeout).await;
                flag.store(true, Ordering::SeqCst);
                token.cancel();
            }))
        });

        let mut history = initial;
        let mut usage = TokenUsage::default();
        let mut turn = 0;
        let mut final_output = None;
        let outcome: Result<TerminationReason, KernelError> = loop {
            if run_token.is_cancelled() {
                break Ok(interrupted_reason(&timed_out));
            }
            if turn >= self.config.max_turns {
                break Ok(TerminationReason::MaxTurns);
            }
            turn += 1;
            match self.step(&history, turn, events, &run_token).await {
                Ok(step) => {
                    usage.add(&step.usage);
                    let no_calls = step.assistant.tool_calls.is_empty();
                    if let Some(name) = &self.config.termination_tool {
                        final_output = step
                            .tool_results
                            .iter()
                            .find(|r| &r.name == name && !r.is_error)
                            .map(|r| r.output.clone());
                    }
                    append(&mut history, step);
                    if final_output.is_some() {
                        break Ok(TerminationReason::TerminationTool);
                    }
                    if no_calls {
                        break Ok(TerminationReason::NoToolCalls);
                    }
                }
                Err(StepError::Interrupted { partial }) => {
                    if let Some(step) = partial {
                        usage.add(&step.usage);
                        append(&mut history, step);
                    }
                    break Ok(interrupted_reason(&timed_out));
                }
                Err(StepError::Model(err)) => break Err(err),
            }
        };

        let (reason, error, error_type) = match &outcome {
            Ok(reason) => (*reason, None, None),
            Err(err) => (
                TerminationReason::Error,
                Some(err.to_string()),
                Some(err.source.kind().to_string()),
            ),
        };
        events
            .emit(Event::KernelEnd {
                turn_count: turn,
                termination_reason: reason,
                total_duration_ms: started.elapsed().as_millis() as u64,
                error,
                error_type,
            })
            .await;
        outcome.map(|termination_reason| RunResult {
            final_message: history
                .iter()
                .rev()
                .find(|m| m.role == crate::types::Role::Assistant)
                .cloned()
                .unwrap_or_else(|| Message::assistant(None, vec![])),
            history,
            turn_count: turn,
            termination_reason,
            usage,
            final_output,
        })
    }
}

fn interrupted_reason(timed_out: &AtomicBool) -> TerminationReason {
    if timed_out.load(Ordering::SeqCst) {
        TerminationReason::Timeout
    } else {
        TerminationReason::Cancelled
    }
}

fn append(history: &mut Vec<Message>, step: StepResult) {
    history.push(step.assistant);
    history.extend(step.tool_results.iter().map(Message::tool));
}

/// Aborts the deadline timer when the run ends.
struct DropGuard(tokio::task::JoinHandle<()>);

impl Drop for DropGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}
