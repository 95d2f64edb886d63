//! The agent loop. Each turn: trim the history, ask the model (through its
//! plugin and a `ChatBackend`), read the tool calls, run them through the
//! tool engine, append the assistant message and the tool messages — and
//! emit kernel events on the way. The order of one tool call is in
//! [`call`], as types.
//!
//! The kernel knows nothing of HTTP servers, the queue or telemetry: it calls
//! traits and emits events.

mod answer;
pub mod history;

pub use answer::AnswerShape;
pub use history::{History, HistoryPlugin, HistoryPluginError, HistoryStrategy, OnMaxTurns};

use std::collections::BTreeMap;
mod call;
mod failure;
mod gates;
mod progress;

use call::{Admission, CallSite, Executed, Replay, ToolCallAt};

pub use failure::RunFailure;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::approval::{ParkedCall, ParkedKind};
use crate::budget::{Budget, BudgetStop};
use crate::client::{ChatBackend, ChatRequest, ClientError, OnToken, watch};
use crate::events::live::ProgressKind;
use crate::events::{Event, EventSink};
use crate::journal::{JournalError, RecordedReply, RunJournal};
use crate::model::{ModelPlugin, ModelPluginError, ToolChoice};
use crate::tools::ToolEngine;
use crate::tools::agent::AgentHost;
use crate::types::{
    Message, RunResult, StepResult, TerminationReason, TokenUsage, ToolCall, ToolResult, ToolSchema,
};
use progress::model_started;

/// What a turn's request says about tools besides their schemas.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnShape {
    pub tool_choice: ToolChoice,
    /// Merged into the request body: the grammar on its server's wire, stop
    /// sequences.
    pub fragment: Map<String, Value>,
    /// Whether the request lists `tools` (and `tool_choice`). When the
    /// server refuses tools beside the grammar, the model plugin declares
    /// them in the prompt instead.
    pub list_tools: bool,
}

impl Default for TurnShape {
    fn default() -> Self {
        Self {
            tool_choice: ToolChoice::Auto,
            fragment: Map::new(),
            list_tools: true,
        }
    }
}

/// Model calls per run unless the bundle says otherwise (the Python kernel's).
pub const DEFAULT_MAX_TURNS: u32 = 20;
/// Tool calls of one turn running at once unless the bundle says otherwise:
/// one at a time, as in the Python kernel.
pub const DEFAULT_MAX_CONCURRENCY: usize = 1;

/// How one run behaves; built from a bundle.
#[derive(Debug, Clone)]
pub struct KernelConfig {
    /// The request's `model`.
    pub model: String,
    /// A different model (e.g. a LoRA adapter) for particular turns.
    pub turn_models: BTreeMap<u32, String>,
    pub max_turns: u32,
    /// Whether a run that used `max_turns` without a final answer fails.
    pub on_max_turns: OnMaxTurns,
    pub history: History,
    pub max_history_messages: usize,
    /// Tool calls of one turn run at most this many at a time.
    pub max_concurrency: usize,
    /// A successful call of this tool ends the run; its output is the result.
    pub termination_tool: Option<String>,
    /// A deadline for the whole run.
    pub timeout: Option<Duration>,
    /// temperature, max_tokens, top_p, stop, ...
    pub sampling: Map<String, Value>,
    /// `tool_choice` and the model plugin's keys (grammar, stop sequences)
    /// for every turn without its own entry in `turn_shapes`.
    pub shape: TurnShape,
    /// Turns that differ (e.g. a named tool on turn 1).
    pub turn_shapes: BTreeMap<u32, TurnShape>,
    /// Merged into the request last, overriding anything else.
    pub extra_body: Map<String, Value>,
    /// Put the request's messages on ModelRequest events (for observers that
    /// record content, when the operator opted in); off saves a copy per turn.
    pub record_messages: bool,
    /// A cap on calls of some tools in one run (the runtime API's
    /// `max_agents`); calls beyond it get a tool error instead of running.
    pub call_budget: Option<CallBudget>,
    /// What the job may spend, shared with its other runs; checked before
    /// each model call and each tool call.
    pub budget: Option<Budget>,
    /// A caller's answer format, asked of the model on the turns that may
    /// answer (see [`AnswerShape::for_turn`]).
    pub answer: Option<AnswerShape>,
    /// The caller's own tools, offered beside the bundle's: the kernel
    /// never runs them; a call of one parks the run (`caller_call`) until
    /// its output is journaled as the call's result.
    pub caller_tools: Vec<ToolSchema>,
}

/// Why a tool call is answered without running its tool.
enum NotRun {
    /// Its arguments did not parse.
    BadArgs(String),
    /// Over the run's [`CallBudget`].
    Refused(String),
}

/// At most `max_calls` calls of `tools` per run.
#[derive(Debug, Clone, PartialEq)]
pub struct CallBudget {
    pub tools: std::collections::BTreeSet<String>,
    pub max_calls: usize,
    /// The tool error a refused call gets (it tells the model what to do).
    pub refusal: String,
}

impl CallBudget {
    /// For each of this turn's `calls`, the refusal when it is over the
    /// budget, counting the calls already in `history`. Replays agree with
    /// the first run: the count depends only on the conversation.
    fn refusals(&self, history: &[Message], calls: &[ToolCall]) -> Vec<Option<String>> {
        let counted = |call: &&ToolCall| self.tools.contains(&call.name);
        let mut used = history
            .iter()
            .flat_map(|m| &m.tool_calls)
            .filter(counted)
            .count();
        calls
            .iter()
            .map(|call| {
                if !counted(&call) {
                    return None;
                }
                used += 1;
                (used > self.max_calls).then(|| self.refusal.clone())
            })
            .collect()
    }
}

impl Default for KernelConfig {
    fn default() -> Self {
        Self {
            model: "default".into(),
            turn_models: BTreeMap::new(),
            max_turns: DEFAULT_MAX_TURNS,
            on_max_turns: OnMaxTurns::Fail,
            history: History::Builtin(HistoryStrategy::SlidingWindow),
            max_history_messages: 50,
            max_concurrency: DEFAULT_MAX_CONCURRENCY,
            termination_tool: None,
            timeout: None,
            sampling: Map::new(),
            shape: TurnShape::default(),
            turn_shapes: BTreeMap::new(),
            extra_body: Map::new(),
            record_messages: false,
            call_budget: None,
            budget: None,
            answer: None,
            caller_tools: Vec::new(),
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

/// Why a run could not finish.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Model(#[from] KernelError),
    /// A step could not be recorded (or a recorded one read): acting on it
    /// would break the promise that a new attempt resumes exactly.
    #[error("turn {turn}: {source}")]
    Journal {
        turn: u32,
        #[source]
        source: JournalError,
    },
    /// The run waits for a person: an `unsafe` call of an earlier attempt
    /// has an unknown outcome, or a call waits for approval.
    #[error("{0}")]
    Parked(Box<ParkedCall>),
    /// A nested run cannot go on (its pinned bundle content is gone).
    #[error("{0}")]
    Aborted(String),
    /// The job used up one of its budgets.
    #[error("{0}")]
    OverBudget(Box<BudgetStop>),
    /// The model plugin (a library) could not format the request or read
    /// the reply.
    #[error("turn {turn}: {source}")]
    ModelPlugin {
        turn: u32,
        #[source]
        source: ModelPluginError,
    },
    /// The history plugin (a library) could not choose the messages to send.
    #[error("turn {turn}: {source}")]
    HistoryPlugin {
        turn: u32,
        #[source]
        source: HistoryPluginError,
    },
}

impl RunError {
    pub fn is_retryable(&self) -> bool {
        match self {
            RunError::Model(err) => err.is_retryable(),
            RunError::Journal { .. } => true,
            RunError::ModelPlugin { source, .. } => source.retryable,
            RunError::HistoryPlugin { source, .. } => source.retryable,
            RunError::Parked(_) | RunError::Aborted(_) | RunError::OverBudget(_) => false,
        }
    }

    /// A low-cardinality kind, for `error.type`.
    pub fn kind(&self) -> String {
        match self {
            RunError::Model(err) => err.source.kind().to_string(),
            RunError::Journal { .. } => "journal".into(),
            RunError::ModelPlugin { .. } => "model_plugin".into(),
            RunError::HistoryPlugin { .. } => "history_plugin".into(),
            RunError::Parked(parked) => match parked.kind {
                ParkedKind::UnknownOutcome => "needs_attention".into(),
                ParkedKind::Approval => "awaiting_approval".into(),
                ParkedKind::CallerCall => "caller_call".into(),
            },
            RunError::Aborted(_) => "aborted".into(),
            RunError::OverBudget(_) => "budget_exceeded".into(),
        }
    }
}

/// Why a step did not complete.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("the step was interrupted (cancelled or out of time)")]
    Interrupted { partial: Option<StepResult> },
}

impl From<KernelError> for StepError {
    fn from(err: KernelError) -> Self {
        StepError::Run(RunError::Model(err))
    }
}

/// The model's side of a turn: replayed from the journal or asked for now.
struct Reply {
    recorded: RecordedReply,
    /// Replayed: no events, nothing recorded.
    replayed: bool,
}

pub struct Kernel {
    config: KernelConfig,
    plugin: Arc<dyn ModelPlugin>,
    backend: Arc<dyn ChatBackend>,
    tools: Arc<ToolEngine>,
    /// Runs the bundles of `agent` tools (the daemon's runner).
    agents: Option<Arc<dyn AgentHost>>,
    /// The tools offered to the model: the engine's, then the caller's.
    offered: Vec<ToolSchema>,
}

impl Kernel {
    pub fn new(
        config: KernelConfig,
        plugin: Arc<dyn ModelPlugin>,
        backend: Arc<dyn ChatBackend>,
        tools: Arc<ToolEngine>,
        agents: Option<Arc<dyn AgentHost>>,
    ) -> Self {
        let offered = tools
            .schemas()
            .iter()
            .chain(&config.caller_tools)
            .cloned()
            .collect();
        Self {
            config,
            plugin,
            backend,
            tools,
            agents,
            offered,
        }
    }

    /// Whether `name` is one of the caller's tools (which the client runs).
    fn is_caller_tool(&self, name: &str) -> bool {
        self.config.caller_tools.iter().any(|t| t.name == name)
    }

    pub fn config(&self) -> &KernelConfig {
        &self.config
    }

    pub fn tools(&self) -> &Arc<ToolEngine> {
        &self.tools
    }

    /// The model turn `turn` asks.
    fn turn_model(&self, turn: u32) -> &str {
        self.config
            .turn_models
            .get(&turn)
            .unwrap_or(&self.config.model)
    }

    fn request(&self, messages: &[Message], turn: u32) -> ChatRequest {
        let schemas = &self.offered;
        let model = self.turn_model(turn);
        let shape = self
            .config
            .turn_shapes
            .get(&turn)
            .unwrap_or(&self.config.shape);
        let mut wire_messages = self.plugin.format_messages(messages);
        let mut body = Map::new();
        body.insert("model".into(), json!(model));
        // `tool_choice` is left out (not "none") when there are no tools:
        // several servers reject "none" without tools.
        let offered = self.plugin.format_tools(schemas);
        let answer = self.config.answer.as_ref();
        let answer = answer.and_then(|a| a.for_turn(shape, offered.is_some()));
        if let Some(tools) = offered {
            if shape.list_tools {
                body.insert("tools".into(), tools);
                body.insert("tool_choice".into(), shape.tool_choice.to_wire());
            } else {
                self.plugin.declare_tools(&mut wire_messages, schemas);
            }
        }
        body.insert("messages".into(), Value::Array(wire_messages));
        let no_answer = Map::new();
        for source in [
            &self.config.sampling,
            &shape.fragment,
            answer.unwrap_or(&no_answer),
            &self.config.extra_body,
        ] {
            for (key, value) in source {
                body.insert(key.clone(), value.clone());
            }
        }
        ChatRequest { body }
    }

    /// The turn's model reply: the journal's record, or a model call whose
    /// reply is recorded before anything acts on it.
    async fn reply(
        &self,
        history: &[Message],
        turn: u32,
        events: &EventSink,
        cancel: &CancellationToken,
        journal: &RunJournal,
    ) -> Result<Reply, StepError> {
        let journal_err = |source| RunError::Journal { turn, source };
        if let Some(recorded) = journal.recorded_reply(turn).map_err(journal_err)? {
            if let Some(budget) = &self.config.budget {
                budget.add_reply(&recorded.model, &recorded.usage);
            }
            return Ok(Reply {
                recorded,
                replayed: true,
            });
        }
        self.check_budget(turn, "budget", journal, events, Budget::before_model_call)
            .await?;
        let schemas = &self.offered;
        let window = history::window(
            &self.config.history,
            history,
            self.config.max_history_messages,
            self.turn_model(turn),
        )
        .await
        .map_err(|source| RunError::HistoryPlugin { turn, source })?;
        let plugin_err = |source| RunError::ModelPlugin { turn, source };
        self.plugin.prepare(schemas).await.map_err(plugin_err)?;
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

        crate::failpoint::hit(crate::failpoint::Failpoint::BeforeModelCall);
        let started = Instant::now();
        let response = self
            .call_model(&request, turn, window.len(), events, cancel)
            .await?;
        let raw_content = response.message.content.clone();
        let native_tool_calls_count = response.message.tool_calls.len();
        let parsed = self
            .plugin
            .read_reply(&response.message, schemas)
            .await
            .map_err(plugin_err)?;
        let recorded = RecordedReply {
            parse_errors: parsed.calls.iter().map(|c| c.error.clone()).collect(),
            assistant: Message::assistant(
                parsed.content,
                parsed
                    .calls
                    .into_iter()
                    .enumerate()
                    .map(|(position, c)| ToolCall {
                        id: storable_call_id(c.call.id, turn, position),
                        ..c.call
                    })
                    .collect(),
            ),
            usage: response.usage,
            model: request.model().to_string(),
            response_model: response.model.clone(),
            response_id: response.id.clone(),
            finish_reason: response.finish_reason.clone(),
        };
        journal
            .record_reply(turn, &recorded)
            .await
            .map_err(journal_err)?;
        crate::failpoint::hit(crate::failpoint::Failpoint::AfterReplyRecorded);
        let cost = self
            .config
            .budget
            .as_ref()
            .map(|budget| budget.add_reply(&recorded.model, &recorded.usage));
        events
            .emit(Event::ModelResponse {
                turn,
                duration_ms: started.elapsed().as_millis() as u64,
                content: raw_content,
                tool_calls_count: native_tool_calls_count,
                usage: response.usage,
                response_id: response.id,
                finish_reason: response.finish_reason,
                response_model: response.model,
                cost,
                parsed_content: recorded.assistant.content.clone(),
                parsed_tool_calls_count: recorded.assistant.tool_calls.len(),
            })
            .await;
        Ok(Reply {
            recorded,
            replayed: false,
        })
    }

    /// The model call itself, its tokens streamed to the observers that
    /// want them and its progress (each HTTP attempt, backoff and wait for
    /// an endpoint slot) published to those watching the run.
    async fn call_model(
        &self,
        request: &ChatRequest,
        turn: u32,
        messages: usize,
        events: &EventSink,
        cancel: &CancellationToken,
    ) -> Result<crate::client::ChatResponse, StepError> {
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
        let model = request.model().to_string();
        let live = events.live();
        live.publish(turn, model_started(&model, messages, 1));
        let watcher = events
            .observer()
            .wants_progress()
            .then(|| progress::model_call_watcher(live.clone(), turn, model, messages));
        let call = watch::watching(watcher, self.backend.complete(request, on_token));
        let response = tokio::select! {
            r = call => r,
            _ = cancel.cancelled() => {
                live.publish(turn, ProgressKind::ModelCallEnded { ok: false, error: Some("cancelled".into()) });
                return Err(StepError::Interrupted { partial: None });
            }
        };
        live.publish(
            turn,
            ProgressKind::ModelCallEnded {
                ok: response.is_ok(),
                error: response.as_ref().err().map(ToString::to_string),
            },
        );
        Ok(response.map_err(|source| KernelError {
            turn,
            phase: Phase::ModelCall,
            source,
        })?)
    }

    /// One tool call of a turn: its recorded result (`true`: replayed), or
    /// the call taken through the stages of [`call`] in their one order.
    async fn tool_call(
        &self,
        call: &ToolCall,
        not_run: Option<&NotRun>,
        site: CallSite<'_>,
    ) -> Result<(ToolResult, bool), RunError> {
        let fresh = match ToolCallAt::new(self, call, site).replay()? {
            Replay::Recorded(result) => return Ok((result, true)),
            Replay::Fresh(fresh) => fresh,
        };
        let announced = fresh.announce().await?;
        // A caller's call the model made well is the client's to run.
        if not_run.is_none() && self.is_caller_tool(&call.name) {
            return Err(announced.hand_to_caller());
        }
        let admitted = match announced.admit(not_run).await? {
            Admission::Run(admitted) => admitted,
            Admission::Answer(answer) => return Ok((answer.record().await?, false)),
        };
        match admitted.start().await?.execute().await? {
            Executed::Done(answer) => Ok((answer.record().await?, false)),
            Executed::CutShort(result) => Ok((result, false)),
        }
    }

    /// One turn outside any journal (see [`Kernel::step_journaled`]).
    pub async fn step(
        &self,
        history: &[Message],
        turn: u32,
        events: &EventSink,
        cancel: &CancellationToken,
    ) -> Result<StepResult, StepError> {
        let journal = RunJournal::disabled(events.context().run_id.clone());
        self.step_journaled(history, turn, events, cancel, &journal)
            .await
    }

    /// One turn: model call, tool calls, events. `history` is the whole
    /// conversation so far; the result holds what to append to it. Steps the
    /// journal holds are replayed without a model or tool call and without
    /// events; new steps are recorded before the kernel acts on them.
    pub async fn step_journaled(
        &self,
        history: &[Message],
        turn: u32,
        events: &EventSink,
        cancel: &CancellationToken,
        journal: &RunJournal,
    ) -> Result<StepResult, StepError> {
        let reply = self.reply(history, turn, events, cancel, journal).await?;
        let calls = &reply.recorded.assistant.tool_calls;
        let parse_errors = &reply.recorded.parse_errors;
        // Owned items: a borrowing closure here trips the higher-ranked
        // lifetime check when the run future must be Send.
        let refusals = match &self.config.call_budget {
            Some(budget) => budget.refusals(history, calls),
            None => vec![None; calls.len()],
        };
        // Arguments that do not parse are reported before a budget is.
        let items: Vec<(usize, ToolCall, Option<NotRun>)> = calls
            .iter()
            .zip(refusals)
            .enumerate()
            .map(|(i, (call, refusal))| {
                let bad_args = parse_errors.get(i).cloned().flatten();
                let not_run = bad_args
                    .map(NotRun::BadArgs)
                    .or(refusal.map(NotRun::Refused));
                (i, call.clone(), not_run)
            })
            .collect();
        let run_call = |(position, call, not_run): (usize, ToolCall, Option<NotRun>)| async move {
            let site = CallSite {
                turn,
                position,
                events,
                cancel,
                journal,
            };
            self.tool_call(&call, not_run.as_ref(), site).await
        };
        let outcomes: Vec<Result<(ToolResult, bool), RunError>> = futures::stream::iter(items)
            .map(run_call)
            .buffered(self.config.max_concurrency.max(1))
            .collect()
            .await;

        let mut results = Vec::with_capacity(outcomes.len());
        let mut errors_count = 0;
        let mut ran_now = !reply.replayed;
        let mut first_error = None;
        let mut caller_calls = Vec::new();
        for outcome in outcomes {
            match outcome {
                Ok((result, replayed)) => {
                    errors_count += usize::from(result.is_error);
                    ran_now |= !replayed;
                    results.push(result);
                }
                Err(err) => {
                    if let RunError::Parked(parked) = &err {
                        caller_calls.extend(parked.caller_calls.iter().cloned());
                    }
                    first_error.get_or_insert(err);
                }
            }
        }
        // The first error ends the turn, as it always did; a park on a
        // caller's call carries every caller call of the turn, so the
        // client answers them in one go.
        if let Some(mut err) = first_error {
            if let RunError::Parked(parked) = &mut err
                && parked.kind == ParkedKind::CallerCall
            {
                parked.caller_calls = caller_calls;
            }
            return Err(err.into());
        }
        if cancel.is_cancelled() {
            return Err(StepError::Interrupted {
                partial: Some(StepResult {
                    assistant: reply.recorded.assistant,
                    tool_results: results,
                    usage: reply.recorded.usage,
                }),
            });
        }
        if ran_now {
            events
                .emit(Event::TurnComplete {
                    turn,
                    tool_calls_count: calls.len(),
                    tool_results_count: results.len(),
                    errors_count,
                })
                .await;
        }
        Ok(StepResult {
            assistant: reply.recorded.assistant,
            tool_results: results,
            usage: reply.recorded.usage,
        })
    }

    /// Runs turns outside any journal (see [`Kernel::run_journaled`]).
    pub async fn run(
        &self,
        initial: Vec<Message>,
        events: &EventSink,
        cancel: CancellationToken,
    ) -> Result<RunResult, RunError> {
        let journal = RunJournal::disabled(events.context().run_id.clone());
        self.run_journaled(initial, events, cancel, &journal).await
    }

    /// Runs turns until a termination condition. KernelEnd is emitted on
    /// every path, including errors. With a journal that holds an earlier
    /// attempt's steps, the run replays them (the initial messages too) and
    /// emits `Resumed` once before continuing at the first unfinished turn.
    pub async fn run_journaled(
        &self,
        initial: Vec<Message>,
        events: &EventSink,
        cancel: CancellationToken,
        journal: &RunJournal,
    ) -> Result<RunResult, RunError> {
        let started = Instant::now();
        let history = match journal.recorded_input() {
            Ok(Some(recorded)) => Ok(recorded),
            Ok(None) => journal.record_input(&initial).map(|()| initial),
            Err(source) => Err(source),
        };
        let history = match history {
            Ok(history) => history,
            Err(source) => {
                let err = RunError::Journal { turn: 0, source };
                self.emit_end(events, 0, Err(&err), started).await;
                return Err(err);
            }
        };
        events
            .emit(Event::KernelStart {
                max_turns: self.config.max_turns,
                tools_count: self.tools.len(),
                initial_messages_count: history.len(),
            })
            .await;
        if journal.has_records() {
            events
                .emit(Event::Resumed {
                    from_turn: journal.resume_turn(),
                    replayed_steps: journal.recorded_steps(),
                })
                .await;
        }

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

        let mut history = history;
        let mut usage = TokenUsage::default();
        let mut turn = 0;
        let mut final_output = None;
        let outcome: Result<TerminationReason, RunError> = loop {
            if run_token.is_cancelled() {
                break Ok(interrupted_reason(&timed_out));
            }
            if turn >= self.config.max_turns {
                break Ok(TerminationReason::MaxTurns);
            }
            turn += 1;
            match self
                .step_journaled(&history, turn, events, &run_token, journal)
                .await
            {
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
                Err(StepError::Run(err)) => break Err(err),
            }
        };

        self.emit_end(events, turn, outcome.as_ref().map(|r| *r), started)
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

    async fn emit_end(
        &self,
        events: &EventSink,
        turn: u32,
        outcome: Result<TerminationReason, &RunError>,
        started: Instant,
    ) {
        let (reason, error, error_type) = match outcome {
            Ok(reason) => (reason, None, None),
            Err(err @ RunError::Parked(parked)) => (
                match parked.kind {
                    // The job parks in `needs_attention` until the client
                    // answers; the parked call's kind says why.
                    ParkedKind::UnknownOutcome | ParkedKind::CallerCall => {
                        TerminationReason::NeedsAttention
                    }
                    ParkedKind::Approval => TerminationReason::AwaitingApproval,
                },
                Some(err.to_string()),
                Some(err.kind()),
            ),
            Err(err @ RunError::OverBudget(_)) => (
                TerminationReason::BudgetExceeded,
                Some(err.to_string()),
                Some(err.kind()),
            ),
            Err(err) => (
                TerminationReason::Error,
                Some(err.to_string()),
                Some(err.kind()),
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

/// The model's id for the call at `position` of `turn`'s reply, or the
/// daemon's own key of that call (`call_{turn}_{position}`) when the model's
/// holds a control character (a NUL, which PostgreSQL refuses in text,
/// failed the journal write on every attempt of the job). The replacement
/// is made before the reply is journaled, so the history, the journal, the
/// events and the next request all carry it. (An empty id is the model
/// plugins' to fill: they mint one.)
fn storable_call_id(id: String, turn: u32, position: usize) -> String {
    if id.chars().any(char::is_control) {
        format!("call_{turn}_{position}")
    } else {
        id
    }
}

/// Aborts the deadline timer when the run ends.
struct DropGuard(tokio::task::JoinHandle<()>);

impl Drop for DropGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str, name: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: Value::Null,
            raw_arguments: None,
        }
    }

    #[test]
    fn call_ids_with_control_characters_are_replaced_by_the_daemons_key() {
        assert_eq!(storable_call_id("call_9".into(), 1, 0), "call_9");
        assert_eq!(storable_call_id("id-\u{e9}".into(), 1, 0), "id-\u{e9}");
        assert_eq!(storable_call_id("bad\0id".into(), 2, 1), "call_2_1");
        assert_eq!(storable_call_id("line\nbreak".into(), 3, 0), "call_3_0");
        assert_eq!(storable_call_id("\u{7f}".into(), 1, 4), "call_1_4");
    }

    #[test]
    fn a_call_budget_counts_earlier_turns_and_refuses_only_its_tools_past_the_cap() {
        let budget = CallBudget {
            tools: ["ask_a".to_string(), "ask_b".to_string()].into(),
            max_calls: 2,
            refusal: "no more".into(),
        };
        let earlier = Message::assistant(None, vec![call("c1", "ask_a"), call("c2", "add")]);
        let refusals = budget.refusals(
            &[Message::user("q"), earlier],
            &[call("c3", "add"), call("c4", "ask_b"), call("c5", "ask_a")],
        );
        assert_eq!(refusals, vec![None, None, Some("no more".to_string())]);
    }
}
