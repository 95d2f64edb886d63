//! The agent loop. Each turn: trim the history, ask the model (through its
//! plugin and a `ChatBackend`), read the tool calls, run them through the
//! tool engine, append the assistant message and the tool messages — and
//! emit kernel events on the way. The order of one tool call is in
//! [`call`], as types.
//!
//! The kernel knows nothing of HTTP servers, the queue or telemetry: it calls
//! traits and emits events.
//!
//! Its files, one concept each: `config` (how one run behaves), `shape`
//! (what a turn's request says about tools), `answer` (a caller's answer
//! format on the turns that may answer), `error` (why a run or a step
//! stops), `reply` (the model's side of a turn: the request, the reply
//! replayed or asked and recorded), `call` (one tool call's stages),
//! `gates` (budget and approval checks), `progress`, `failure`, `history`;
//! this file holds the [`Kernel`] and its loop over turns and tool calls.

mod answer;
mod call;
mod config;
mod error;
mod failure;
mod gates;
pub mod history;
mod progress;
mod reply;
mod shape;

pub use answer::AnswerShape;
pub use config::{CallBudget, DEFAULT_MAX_CONCURRENCY, DEFAULT_MAX_TURNS, KernelConfig};
pub use error::{KernelError, Phase, RunError, StepError};
pub use failure::RunFailure;
pub use history::{History, HistoryPlugin, HistoryPluginError, HistoryStrategy, OnMaxTurns};
pub use shape::TurnShape;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::approval::ParkedKind;
use crate::client::ChatBackend;
use crate::events::{Event, EventSink};
use crate::journal::RunJournal;
use crate::model::ModelPlugin;
use crate::tools::ToolEngine;
use crate::tools::agent::AgentHost;
use crate::types::{
    Message, RunResult, StepResult, TerminationReason, TokenUsage, ToolCall, ToolResult, ToolSchema,
};
use call::{Admission, CallSite, Executed, Replay, ToolCallAt};

/// Why a tool call is answered without running its tool.
enum NotRun {
    /// Its arguments did not parse.
    BadArgs(String),
    /// Over the run's [`CallBudget`].
    Refused(String),
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
        let tool_calls_count = calls.len();
        let items = self.calls_to_run(history, calls, &reply.recorded.parse_errors);
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
        let answered = Answered::gather(outcomes, reply.replayed)?;
        let step = StepResult {
            assistant: reply.recorded.assistant,
            tool_results: answered.results,
            usage: reply.recorded.usage,
        };
        if cancel.is_cancelled() {
            return Err(StepError::Interrupted {
                partial: Some(step),
            });
        }
        if answered.ran_now {
            events
                .emit(Event::TurnComplete {
                    turn,
                    tool_calls_count,
                    tool_results_count: step.tool_results.len(),
                    errors_count: answered.errors_count,
                })
                .await;
        }
        Ok(step)
    }

    /// Each of a turn's calls with its position and, when it is answered
    /// without running, why: arguments that do not parse are reported
    /// before a budget is. Owned items: a borrowing closure over them trips
    /// the higher-ranked lifetime check when the run future must be Send.
    fn calls_to_run(
        &self,
        history: &[Message],
        calls: &[ToolCall],
        parse_errors: &[Option<String>],
    ) -> Vec<(usize, ToolCall, Option<NotRun>)> {
        let refusals = match &self.config.call_budget {
            Some(budget) => budget.refusals(history, calls),
            None => vec![None; calls.len()],
        };
        calls
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
            .collect()
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
        let history = match run_input(initial, journal) {
            Ok(history) => history,
            Err(err) => {
                self.emit_end(events, 0, Err(&err), started).await;
                return Err(err);
            }
        };
        self.emit_start(events, history.len(), journal).await;
        // The run's own token: cancelled by the caller or by the deadline.
        let run_token = cancel.child_token();
        let timed_out = Arc::new(AtomicBool::new(false));
        let _deadline = self.deadline(&run_token, &timed_out);
        let mut run = RunState::new(history);
        let outcome = self
            .take_turns(&mut run, events, &run_token, &timed_out, journal)
            .await;
        self.emit_end(events, run.turn, outcome.as_ref().map(|r| *r), started)
            .await;
        outcome.map(|termination_reason| run.result(termination_reason))
    }

    /// `KernelStart`, and `Resumed` when the journal holds an earlier
    /// attempt's steps.
    async fn emit_start(&self, events: &EventSink, messages: usize, journal: &RunJournal) {
        events
            .emit(Event::KernelStart {
                max_turns: self.config.max_turns,
                tools_count: self.tools.len(),
                initial_messages_count: messages,
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
    }

    /// The timer of the run's `timeout`: when it passes, `timed_out` is set
    /// and `run_token` cancelled; dropping the guard stops it.
    fn deadline(
        &self,
        run_token: &CancellationToken,
        timed_out: &Arc<AtomicBool>,
    ) -> Option<DropGuard> {
        self.config.timeout.map(|timeout| {
            let token = run_token.clone();
            let flag = timed_out.clone();
            DropGuard(tokio::spawn(async move {
                tokio::time::sleep(timeout).await;
                flag.store(true, Ordering::SeqCst);
                token.cancel();
            }))
        })
    }

    /// Takes turns until one ends the run: cancelled (by the caller or the
    /// deadline), out of turns, the termination tool answered, a reply
    /// without calls, or an error.
    async fn take_turns(
        &self,
        run: &mut RunState,
        events: &EventSink,
        run_token: &CancellationToken,
        timed_out: &AtomicBool,
        journal: &RunJournal,
    ) -> Result<TerminationReason, RunError> {
        loop {
            if run_token.is_cancelled() {
                return Ok(interrupted_reason(timed_out));
            }
            if run.turn >= self.config.max_turns {
                return Ok(TerminationReason::MaxTurns);
            }
            run.turn += 1;
            match self
                .step_journaled(&run.history, run.turn, events, run_token, journal)
                .await
            {
                Ok(step) => {
                    run.usage.add(&step.usage);
                    let no_calls = step.assistant.tool_calls.is_empty();
                    if let Some(name) = &self.config.termination_tool {
                        run.final_output = step
                            .tool_results
                            .iter()
                            .find(|r| &r.name == name && !r.is_error)
                            .map(|r| r.output.clone());
                    }
                    append(&mut run.history, step);
                    if run.final_output.is_some() {
                        return Ok(TerminationReason::TerminationTool);
                    }
                    if no_calls {
                        return Ok(TerminationReason::NoToolCalls);
                    }
                }
                Err(StepError::Interrupted { partial }) => {
                    if let Some(step) = partial {
                        run.usage.add(&step.usage);
                        append(&mut run.history, step);
                    }
                    return Ok(interrupted_reason(timed_out));
                }
                Err(StepError::Run(err)) => return Err(err),
            }
        }
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

/// A turn's tool calls answered: their results in call order, how many
/// are errors, and whether any ran now (rather than all replayed).
struct Answered {
    results: Vec<ToolResult>,
    errors_count: usize,
    ran_now: bool,
}

impl Answered {
    /// The outcomes of a turn's calls gathered, after a reply `replayed`
    /// or not. The first error ends the turn, as it always did; a park on a
    /// caller's call carries every caller call of the turn, so the client
    /// answers them in one go.
    fn gather(
        outcomes: Vec<Result<(ToolResult, bool), RunError>>,
        replayed: bool,
    ) -> Result<Self, RunError> {
        let mut answered = Answered {
            results: Vec::with_capacity(outcomes.len()),
            errors_count: 0,
            ran_now: !replayed,
        };
        let mut first_error = None;
        let mut caller_calls = Vec::new();
        for outcome in outcomes {
            match outcome {
                Ok((result, replayed)) => {
                    answered.errors_count += usize::from(result.is_error);
                    answered.ran_now |= !replayed;
                    answered.results.push(result);
                }
                Err(err) => {
                    if let RunError::Parked(parked) = &err {
                        caller_calls.extend(parked.caller_calls.iter().cloned());
                    }
                    first_error.get_or_insert(err);
                }
            }
        }
        match first_error {
            Some(mut err) => {
                if let RunError::Parked(parked) = &mut err
                    && parked.kind == ParkedKind::CallerCall
                {
                    parked.caller_calls = caller_calls;
                }
                Err(err)
            }
            None => Ok(answered),
        }
    }
}

/// A run's state over its turns: the history so far, the tokens used, the
/// last turn taken and the termination tool's output.
struct RunState {
    history: Vec<Message>,
    usage: TokenUsage,
    turn: u32,
    final_output: Option<String>,
}

impl RunState {
    fn new(history: Vec<Message>) -> Self {
        Self {
            history,
            usage: TokenUsage::default(),
            turn: 0,
            final_output: None,
        }
    }

    /// The run's result, ended for `termination_reason`.
    fn result(self, termination_reason: TerminationReason) -> RunResult {
        RunResult {
            final_message: self
                .history
                .iter()
                .rev()
                .find(|m| m.role == crate::types::Role::Assistant)
                .cloned()
                .unwrap_or_else(|| Message::assistant(None, vec![])),
            history: self.history,
            turn_count: self.turn,
            termination_reason,
            usage: self.usage,
            final_output: self.final_output,
        }
    }
}

/// The run's input: the journal's recorded one on a resume, else `initial`,
/// recorded first.
fn run_input(initial: Vec<Message>, journal: &RunJournal) -> Result<Vec<Message>, RunError> {
    let recorded = match journal.recorded_input() {
        Ok(Some(recorded)) => Ok(recorded),
        Ok(None) => journal.record_input(&initial).map(|()| initial),
        Err(source) => Err(source),
    };
    recorded.map_err(|source| RunError::Journal { turn: 0, source })
}

fn interrupted_reason(timed_out: &AtomicBool) -> TerminationReason {
    if timed_out.load(Ordering::SeqCst) {
        TerminationReason::Timeout
    } else {
        TerminationReason::Cancelled
    }
}

fn append(history: &mut Vec<Message>, step: StepResult) {
    history.extend(StepResult::turn_messages(
        step.assistant,
        &step.tool_results,
    ));
}

/// Aborts the deadline timer when the run ends.
struct DropGuard(tokio::task::JoinHandle<()>);

impl Drop for DropGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}
