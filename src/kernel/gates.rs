//! What must hold before a call happens: a tool call that needs a person's
//! approval waits for it (journaled, so a decision is acted on once and a
//! resumed run finds it), and no model or tool call happens past the job's
//! budget (a stop is journaled at its step, so a replay stops there too).
//! A budget stop is journaled in one commit with its event
//! ([`with_its_event`]), so no crash leaves one without the other. An
//! approval request has no event from the run: whoever parks the job (the
//! queue) writes `ApprovalRequested` in the commit that parks it, so no
//! client hears of a request before it can be decided.

use super::{Kernel, RunError};
use crate::approval::{ApprovalTerms, ParkedCall, ParkedKind, Verdict};
use crate::budget::{Budget, BudgetStop};
use crate::events::{Event, EventSink};
use crate::journal::{JournalError, RunJournal};
use crate::types::ToolCall;

/// What the approval gate lets a call do.
pub(super) enum Gate {
    Run,
    /// Run with the arguments a person gave instead.
    RunEdited(ToolCall),
    /// Answer with this tool error (`denied:…`) instead.
    Deny(String),
}

impl Kernel {
    /// Whether the call may run: no approval needed, a decision recorded
    /// (approve, edit or deny), or none yet — then the request is journaled
    /// (once) and the run parks until a person decides. A request once
    /// recorded stands: the run never skips a pending decision. The run
    /// emits no event for it: the park announces it (see the module doc).
    pub(super) async fn approval_gate(
        &self,
        call: &ToolCall,
        turn: u32,
        position: usize,
        journal: &RunJournal,
        bundle: &str,
    ) -> Result<Gate, RunError> {
        let journal_err = |source| RunError::Journal { turn, source };
        let recorded = journal
            .recorded_approval(turn, position)
            .map_err(journal_err)?;
        let policy = self.tools.approval(&call.name);
        let needed = policy.is_some_and(|policy| policy.needs_approval(&call.arguments));
        if recorded.is_none() && !needed {
            return Ok(Gate::Run);
        }
        if let Some(decision) = journal
            .recorded_decision(turn, position)
            .map_err(journal_err)?
        {
            return Ok(match decision.verdict {
                Verdict::Approve => Gate::Run,
                Verdict::Edit { arguments } => Gate::RunEdited(ToolCall {
                    arguments,
                    raw_arguments: None,
                    ..call.clone()
                }),
                Verdict::Deny { reason } => Gate::Deny(format!(
                    "denied:{}",
                    reason
                        .unwrap_or_else(|| format!("a person ({}) denied this call", decision.by))
                )),
            });
        }
        let request = match recorded {
            Some(request) => request,
            None => {
                let request = ParkedCall {
                    kind: ParkedKind::Approval,
                    scope: journal.scope().to_string(),
                    bundle: Some(bundle.to_string()),
                    turn,
                    position: Some(position),
                    call_id: call.id.clone(),
                    tool: call.name.clone(),
                    arguments: call.arguments.clone(),
                    effect: self.tools.effect(&call.name).as_str().to_string(),
                    idempotency_key: journal.idempotency_key(turn, &position.to_string()),
                    approval: Some(ApprovalTerms {
                        digest: crate::approval::digest(&call.arguments),
                        rule: policy.map(|p| p.describe()),
                        parameters: self
                            .tools
                            .parameters(&call.name)
                            .cloned()
                            .unwrap_or_default(),
                        timeout_ms: policy.and_then(|p| p.timeout).map(|t| t.as_millis() as u64),
                        approver: policy.map(|p| p.approver).unwrap_or_default(),
                        requested_at: None,
                        expires_at: None,
                    }),
                    decide: None,
                    not_by: None,
                    caller_calls: Vec::new(),
                };
                journal
                    .record_approval(turn, position, &request)
                    .await
                    .map_err(journal_err)?;
                request
            }
        };
        Err(RunError::Parked(Box::new(request)))
    }

    /// Whether `check` lets the next step happen: a stop an earlier attempt
    /// recorded at this step stands (so a resumed job stops where it
    /// stopped), else the budget is checked now and a stop is journaled
    /// before the run ends on it.
    pub(super) async fn check_budget(
        &self,
        turn: u32,
        step: &str,
        journal: &RunJournal,
        events: &EventSink,
        check: impl Fn(&Budget) -> Result<(), BudgetStop>,
    ) -> Result<(), RunError> {
        let Some(budget) = &self.config.budget else {
            return Ok(());
        };
        let journal_err = |source| RunError::Journal { turn, source };
        let stop = match journal
            .recorded_step::<BudgetStop>(turn, step)
            .map_err(journal_err)?
        {
            Some(stop) => stop,
            None => {
                let Err(stop) = check(budget) else {
                    return Ok(());
                };
                let exceeded = Event::BudgetExceeded {
                    turn,
                    budget: stop.budget.clone(),
                    limit: stop.limit.clone(),
                    spent: stop.spent.clone(),
                };
                with_its_event(events, exceeded, journal.record_value(turn, step, &stop))
                    .await
                    .map_err(journal_err)?;
                stop
            }
        };
        Err(RunError::OverBudget(Box::new(stop)))
    }
}

/// Journals a decision that implies an event (a budget stop) so the two
/// cannot part: the event is emitted first, held
/// by the attempt's log, and written in the very commit that journals the
/// decision. A crash before that commit loses both (the next attempt
/// decides again and emits it then); after it, the log has the event the
/// journal implies, and a replay, which reads the decision and emits
/// nothing, cannot miss it.
async fn with_its_event(
    events: &EventSink,
    event: Event,
    record: impl std::future::Future<Output = Result<(), JournalError>>,
) -> Result<(), JournalError> {
    events.emit(event).await;
    record.await
}
