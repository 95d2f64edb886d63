//! The order of one tool call, as types. It *is* the exactly-once contract:
//!
//! ```text
//! ToolCallAt ─replay─▶ Fresh ─announce─▶ Announced ─admit─▶ Admitted ─start─▶ Started ─execute─▶ Answered ─record─▶ result
//!      │ (journaled result)                    │ (refused, bad arguments,                        │ (cut short by
//!      ▼                                       ▼  denied, not preparable)                        ▼  cancellation)
//!   replayed                                Answered ─record─▶ result                        not recorded
//! ```
//!
//! - **replay**: a result the journal holds is handed back without running
//!   anything again (it counts against the budget as it did the first time);
//! - **announce**: the `ToolCall` event, once (a call that asked for approval
//!   was announced when it asked);
//! - **admit**: the budget, the schema coercion (the one canonical form that
//!   the approval rule, its digest, the journal and the tool all see), then
//!   the approval gate, which may park the run;
//! - **start**: a start found in the journal parks the job (the call may have
//!   had its effect), and an `unsafe` call's start marker is journaled before
//!   it runs;
//! - **execute**: the tool engine runs it (its start and end are published
//!   to the run's live watchers as they happen);
//! - **record**: the answer is journaled, counted, and its `ToolResult` event
//!   emitted.
//!
//! Each stage is a type only the method of the stage before it returns, and
//! each method consumes its stage: the kernel cannot skip a step or take two
//! in the other order, because that would not compile.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::gates::Gate;
use super::{Kernel, NotRun, RunError};
use crate::approval::{CallerCall, ParkedCall, ParkedKind};
use crate::budget::Budget;
use crate::events::live::{ProgressKind, capped_arguments};
use crate::events::{Event, EventSink, OUTPUT_PREVIEW, preview};
use crate::failpoint::{self, Failpoint};
use crate::journal::{RecordedResult, RecordedStart, RunJournal};
use crate::tools::{CallPlace, Effect, PreparedCall, ToolOutcome};
use crate::types::{ToolCall, ToolResult};

/// Where a call stands in its run: what every stage needs besides the call.
#[derive(Clone, Copy)]
pub(super) struct CallSite<'a> {
    pub turn: u32,
    /// 0-based, in the order of the reply's tool calls.
    pub position: usize,
    pub events: &'a EventSink,
    pub cancel: &'a CancellationToken,
    pub journal: &'a RunJournal,
}

impl CallSite<'_> {
    fn journal_error(&self) -> impl Fn(crate::journal::JournalError) -> RunError {
        let turn = self.turn;
        move |source| RunError::Journal { turn, source }
    }
}

/// A tool call of the model's reply, before anything is decided about it.
pub(super) struct ToolCallAt<'a> {
    kernel: &'a Kernel,
    call: &'a ToolCall,
    site: CallSite<'a>,
}

/// What the journal says of a call.
pub(super) enum Replay<'a> {
    /// An earlier attempt recorded its result: hand it back, run nothing.
    Recorded(ToolResult),
    /// Not answered yet.
    Fresh(Fresh<'a>),
}

/// A call the journal has no answer for.
pub(super) struct Fresh<'a>(ToolCallAt<'a>);

/// A call whose `ToolCall` event is out.
pub(super) struct Announced<'a> {
    at: ToolCallAt<'a>,
    /// It asked for approval in an earlier attempt (and was announced then).
    asked_before: bool,
}

/// What admission decided.
pub(super) enum Admission<'a> {
    /// Within budget, prepared in its canonical form, approved or free to run.
    Run(Admitted<'a>),
    /// Answered without running: refused, bad arguments, denied, or its
    /// arguments do not fit the tool.
    Answer(Answered<'a>),
}

/// A call that may run, in the form it will run in.
pub(super) struct Admitted<'a> {
    at: ToolCallAt<'a>,
    prepared: PreparedCall,
}

/// A call whose start is journaled when repeating it would matter.
pub(super) struct Started<'a> {
    at: ToolCallAt<'a>,
    prepared: PreparedCall,
}

/// How a started call ended.
pub(super) enum Executed<'a> {
    /// It ended: its answer is to be recorded.
    Done(Answered<'a>),
    /// Cancellation cut it short: not a result to replay, so not recorded.
    CutShort(ToolResult),
}

/// A call with its answer, not yet journaled.
pub(super) struct Answered<'a> {
    at: ToolCallAt<'a>,
    outcome: ToolOutcome,
}

impl<'a> ToolCallAt<'a> {
    pub(super) fn new(kernel: &'a Kernel, call: &'a ToolCall, site: CallSite<'a>) -> Self {
        Self { kernel, call, site }
    }

    /// The journaled result of an earlier attempt, or the call as fresh.
    pub(super) fn replay(self) -> Result<Replay<'a>, RunError> {
        let site = self.site;
        let recorded = site
            .journal
            .recorded_result(site.turn, site.position, &self.call.id)
            .map_err(site.journal_error())?;
        Ok(match recorded {
            Some(recorded) => {
                // Replayed steps count as they did the first time.
                if let Some(budget) = &self.kernel.config.budget {
                    budget.add_tool_call();
                }
                Replay::Recorded(recorded.result)
            }
            None => Replay::Fresh(Fresh(self)),
        })
    }

    /// This call answered with `outcome`, without running.
    fn answer(self, outcome: ToolOutcome) -> Answered<'a> {
        Answered { at: self, outcome }
    }
}

impl<'a> Fresh<'a> {
    /// Emits the `ToolCall` event, unless the call asked for approval in an
    /// earlier attempt: its log shows it once.
    pub(super) async fn announce(self) -> Result<Announced<'a>, RunError> {
        let at = self.0;
        let site = at.site;
        let asked_before = site
            .journal
            .recorded_approval(site.turn, site.position)
            .map_err(site.journal_error())?
            .is_some();
        if !asked_before {
            site.events
                .emit(Event::ToolCall {
                    turn: site.turn,
                    tool_name: at.call.name.clone(),
                    call_id: at.call.id.clone(),
                    arguments: at.call.arguments.clone(),
                })
                .await;
        }
        Ok(Announced { at, asked_before })
    }
}

impl<'a> Announced<'a> {
    /// A call of one of the caller's tools: not run here, it parks the run
    /// for the client to run it (the park lists it; the turn's other
    /// caller calls join it, see `Kernel::step_journaled`). Its output,
    /// journaled as its result, is what a replay hands the model.
    pub(super) fn hand_to_caller(self) -> RunError {
        let at = self.at;
        let site = at.site;
        let call = at.call;
        RunError::Parked(Box::new(ParkedCall {
            kind: ParkedKind::CallerCall,
            scope: site.journal.scope().to_string(),
            bundle: Some(site.events.context().bundle.clone()),
            turn: site.turn,
            position: Some(site.position),
            call_id: call.id.clone(),
            tool: call.name.clone(),
            arguments: call.arguments.clone(),
            effect: "caller".into(),
            idempotency_key: site
                .journal
                .idempotency_key(site.turn, &site.position.to_string()),
            approval: None,
            decide: None,
            not_by: None,
            caller_calls: vec![CallerCall {
                position: site.position,
                call_id: call.id.clone(),
                tool: call.name.clone(),
                arguments: call.arguments.clone(),
            }],
        }))
    }

    /// Whether the call may run: `not_run` (the reply's own verdict on it),
    /// the budget, its arguments coerced to the tool's schema, then the
    /// approval gate (which parks the run while a person decides).
    pub(super) async fn admit(self, not_run: Option<&NotRun>) -> Result<Admission<'a>, RunError> {
        let Announced { at, asked_before } = self;
        let site = at.site;
        match not_run {
            Some(NotRun::Refused(reason)) => {
                let result = ToolResult::error(at.call, format!("refused:{reason}"));
                return Ok(Admission::Answer(
                    at.answer(not_run_outcome(result, "refused")),
                ));
            }
            Some(NotRun::BadArgs(detail)) => {
                site.events
                    .emit(Event::ParseError {
                        turn: site.turn,
                        detail: detail.clone(),
                    })
                    .await;
                let result = ToolResult::error(at.call, format!("bad_args:{detail}"));
                return Ok(Admission::Answer(
                    at.answer(not_run_outcome(result, "bad_args")),
                ));
            }
            None => {}
        }
        let kernel = at.kernel;
        let step = format!("budget@{}", site.position);
        kernel
            .check_budget(
                site.turn,
                &step,
                site.journal,
                site.events,
                Budget::before_tool_call,
            )
            .await?;
        // The arguments are coerced to the tool's schema once, here: the
        // approval rule, its digest, the journal and the tool all see this
        // one form of the call. A call prepared in an earlier attempt is
        // prepared again without its trace events.
        let prepared = if asked_before {
            kernel.tools.prepare_again(at.call, site.turn).await
        } else {
            kernel.tools.prepare(at.call, site.turn, site.events).await
        };
        let prepared = match prepared {
            Ok(prepared) => prepared,
            Err(outcome) => return Ok(Admission::Answer(at.answer(outcome))),
        };
        let gate = kernel
            .approval_gate(
                prepared.call(),
                site.turn,
                site.position,
                site.journal,
                &site.events.context().bundle,
            )
            .await?;
        let prepared = match gate {
            Gate::Run => Ok(prepared),
            Gate::RunEdited(edited) => kernel.tools.prepare(&edited, site.turn, site.events).await,
            Gate::Deny(reason) => {
                let denied = ToolResult::error(at.call, reason);
                return Ok(Admission::Answer(
                    at.answer(not_run_outcome(denied, "denied")),
                ));
            }
        };
        Ok(match prepared {
            Ok(prepared) => Admission::Run(Admitted { at, prepared }),
            Err(outcome) => Admission::Answer(at.answer(outcome)),
        })
    }
}

impl<'a> Admitted<'a> {
    /// Journals the start of a call whose repetition matters. A start an
    /// earlier attempt journaled parks the job whatever the tool is declared
    /// as now: the call may have had its effect, and an edit of the bundle
    /// must not make it run twice.
    pub(super) async fn start(self) -> Result<Started<'a>, RunError> {
        let Admitted { at, prepared } = self;
        let site = at.site;
        let journal = site.journal;
        if journal.is_durable() {
            let call = prepared.call();
            if let Some(start) = journal
                .recorded_start(site.turn, site.position, &call.id)
                .map_err(site.journal_error())?
            {
                return Err(RunError::Parked(Box::new(ParkedCall {
                    kind: ParkedKind::UnknownOutcome,
                    scope: journal.scope().to_string(),
                    bundle: Some(site.events.context().bundle.clone()),
                    turn: site.turn,
                    position: Some(site.position),
                    call_id: call.id.clone(),
                    tool: call.name.clone(),
                    arguments: start.arguments,
                    effect: start.effect,
                    idempotency_key: start.idempotency_key,
                    approval: None,
                    decide: None,
                    not_by: None,
                    caller_calls: Vec::new(),
                })));
            }
            failpoint::hit(Failpoint::BeforeToolStart);
            let effect = at.kernel.tools.effect(&call.name);
            if effect == Effect::Unsafe {
                let start = RecordedStart {
                    tool_name: call.name.clone(),
                    arguments: call.arguments.clone(),
                    effect: effect.as_str().to_string(),
                    idempotency_key: journal.idempotency_key(site.turn, &site.position.to_string()),
                };
                journal
                    .record_start(site.turn, site.position, &start)
                    .await
                    .map_err(site.journal_error())?;
            }
        }
        Ok(Started { at, prepared })
    }
}

impl<'a> Started<'a> {
    /// Runs the tool. A nested run that ends the whole job (parked, over
    /// budget, aborted) ends this run too.
    pub(super) async fn execute(self) -> Result<Executed<'a>, RunError> {
        let Started { at, prepared } = self;
        let site = at.site;
        let kernel = at.kernel;
        let place = CallPlace {
            turn: site.turn,
            position: site.position,
            journal: Some(site.journal),
            agents: kernel.agents.as_deref(),
            budget: kernel.config.budget.as_ref(),
        };
        let call = prepared.call();
        site.events.progress(
            site.turn,
            ProgressKind::ToolCallStarted {
                call_id: call.id.clone(),
                tool: call.name.clone(),
                arguments: capped_arguments(&call.arguments),
            },
        );
        let outcome = kernel
            .tools
            .execute_at(&prepared, place, site.cancel, site.events)
            .await;
        let cut_short = outcome.ends_job.is_none() && site.cancel.is_cancelled();
        let outcome = if cut_short {
            interrupted(outcome)
        } else {
            outcome
        };
        site.events.progress(
            site.turn,
            ProgressKind::ToolCallEnded {
                call_id: outcome.result.call_id.clone(),
                tool: outcome.result.name.clone(),
                ok: !outcome.result.is_error && outcome.ends_job.is_none(),
                output: preview(&outcome.result.output, OUTPUT_PREVIEW),
                duration_ms: outcome.duration.as_millis() as u64,
                error_type: outcome.error_code.map(str::to_string),
            },
        );
        if let Some(end) = outcome.ends_job {
            return Err(end.into());
        }
        if cut_short {
            emit_result(site.events, site.turn, &outcome).await;
            return Ok(Executed::CutShort(outcome.result));
        }
        Ok(Executed::Done(at.answer(outcome)))
    }
}

impl Answered<'_> {
    /// Journals the answer (what a replay hands the model), counts the call
    /// against the job's budget, and emits its `ToolResult` when it ends, so
    /// a tool's span has its true end even while other tools of the turn
    /// still run.
    pub(super) async fn record(self) -> Result<ToolResult, RunError> {
        let Answered { at, outcome } = self;
        let site = at.site;
        let recorded = RecordedResult {
            result: outcome.result.clone(),
            error_code: outcome.error_code.map(str::to_string),
        };
        site.journal
            .record_result(site.turn, site.position, &recorded)
            .await
            .map_err(site.journal_error())?;
        if let Some(budget) = &at.kernel.config.budget {
            budget.add_tool_call();
        }
        failpoint::hit(Failpoint::AfterToolResultRecorded);
        emit_result(site.events, site.turn, &outcome).await;
        Ok(outcome.result)
    }
}

/// The outcome of a call answered with `result` without running its tool.
fn not_run_outcome(result: ToolResult, error_code: &'static str) -> ToolOutcome {
    ToolOutcome {
        result,
        error_code: Some(error_code),
        attempts: 0,
        cached: false,
        duration: Duration::ZERO,
        ends_job: None,
    }
}

/// The `ToolResult` event of a tool call that ran in this attempt.
/// A call the job's cancel or deadline cut short, as its event tells it:
/// interrupted, not failed (a call that ended well before the cut keeps its
/// result).
fn interrupted(mut outcome: ToolOutcome) -> ToolOutcome {
    if outcome.result.is_error {
        outcome.error_code = Some(crate::types::INTERRUPTED_CALL);
        outcome.result.output =
            "interrupted: the job was cancelled or ran out of time before the call ended".into();
    }
    outcome
}

async fn emit_result(events: &EventSink, turn: u32, outcome: &ToolOutcome) {
    events
        .emit(Event::ToolResult {
            turn,
            tool_name: outcome.result.name.clone(),
            call_id: outcome.result.call_id.clone(),
            is_error: outcome.result.is_error,
            duration_ms: outcome.duration.as_millis() as u64,
            output_preview: preview(&outcome.result.output, OUTPUT_PREVIEW),
            error_type: outcome.error_code.map(str::to_string),
        })
        .await;
}
