//! The step journal: every completed step of a run (its rendered input, each
//! model reply, each tool result, and the start of each tool call whose
//! repetition would matter) is recorded durably before the run acts on it.
//! A new attempt of the job loads what earlier attempts recorded and replays
//! it: no model call and no tool call for a recorded step, and execution
//! continues at the first step without a record.
//!
//! This module is the seam between the kernel (which records and replays)
//! and a store (the queue, through the worker). It knows neither: it holds
//! the recorded entries and the `JournalStore` trait.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::approval::{ParkedCall, RecordedDecision};
use crate::types::{Message, StepResult, TokenUsage, ToolResult};

/// One journal row as a store keeps it: a run scope (`""` for the job's own
/// run, `"2:call_1/"` for the agent run started by call `call_1` of turn 2),
/// the turn, the step key and the JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalEntry {
    pub scope: String,
    pub turn: u32,
    /// `input`, `reply`, `start@<position>` or `result@<position>`.
    pub step: String,
    pub body: String,
}

impl JournalEntry {
    pub fn new(scope: &str, turn: u32, step: &str, body: String) -> Self {
        Self {
            scope: scope.into(),
            turn,
            step: step.into(),
            body,
        }
    }

    /// The step that records the start of the call at `position` (0-based)
    /// in its turn's reply. Keys are the daemon's own: the model's call id
    /// is data (any id, duplicate or odd, is accepted), never a key.
    pub fn start_key(position: usize) -> String {
        format!("start@{position}")
    }

    pub fn result_key(position: usize) -> String {
        format!("result@{position}")
    }

    /// The keys journals written before 0.2 used (the model's call id), read
    /// so a job in flight across an upgrade still resumes at its step.
    fn legacy_keys(call_id: &str) -> (String, String) {
        (format!("start:{call_id}"), format!("result:{call_id}"))
    }

    /// The journal steps of a parked call's start and result records.
    pub fn call_steps(call: &ParkedCall) -> (String, String) {
        match call.position {
            Some(position) => (Self::start_key(position), Self::result_key(position)),
            None => Self::legacy_keys(&call.call_id),
        }
    }

    /// The step that records the approval request of the call at `position`.
    pub fn approval_key(position: usize) -> String {
        format!("approval@{position}")
    }

    /// The step that records the decision on that request.
    pub fn decision_key(position: usize) -> String {
        format!("decision@{position}")
    }

    /// Whether the step marks something about a call (its start, its
    /// approval) rather than completing one.
    fn is_marker(step: &str) -> bool {
        ["start@", "start:", "approval@", "decision@", "budget"]
            .iter()
            .any(|prefix| step.starts_with(prefix))
    }
}

/// A model reply as the kernel acted on it: the parsed assistant message
/// (content, tool calls with their ids and raw argument text), the parse
/// error of each call, usage and who answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedReply {
    pub assistant: Message,
    /// One per tool call, `Some(detail)` when its arguments did not parse.
    #[serde(default)]
    pub parse_errors: Vec<Option<String>>,
    pub usage: TokenUsage,
    /// The model the request named.
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
}

/// A tool call's result as the model saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedResult {
    pub result: ToolResult,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
}

/// A tool call that started and may have had its effect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedStart {
    pub tool_name: String,
    pub arguments: serde_json::Value,
    /// `read_only`, `idempotent` or `unsafe`.
    pub effect: String,
    pub idempotency_key: String,
}

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("cannot record step {step} of turn {turn} in the journal: {detail}")]
    Store {
        turn: u32,
        step: String,
        detail: String,
    },
    #[error(
        "journal entry {step} of turn {turn} (scope {scope:?}) is not valid JSON for this version: {detail}; the job cannot be resumed"
    )]
    Corrupt {
        scope: String,
        turn: u32,
        step: String,
        detail: String,
    },
}

/// Why a store could not make a run's steps durable: the store's own
/// error (the queue's, for the worker's adapter), kept whole; the journal
/// sits below the queue and names none of its types.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct StoreError(pub Box<dyn std::error::Error + Send + Sync>);

/// Where a run's steps are recorded (the worker's adapter over the queue,
/// guarded by the attempt number).
#[async_trait]
pub trait JournalStore: Send + Sync {
    /// Returns once the entries are durable (all or none).
    async fn record(&self, entries: Vec<JournalEntry>) -> Result<(), StoreError>;
}

/// The journal scope (see [`RunJournal::named`]) of a workflow job's checkpoints.
pub const CHECKPOINTS_SCOPE: &str = "workflow";
/// The journal scope of a workflow job's artifacts.
pub const ARTIFACTS_SCOPE: &str = "artifacts";

/// The journal of one run: what earlier attempts recorded (shared by the
/// run and its nested runs) and where new steps go. A run without a store
/// (`structured-agents run`, `chat`) records nothing and replays nothing.
#[derive(Clone)]
pub struct RunJournal {
    store: Option<Arc<dyn JournalStore>>,
    recorded: Arc<HashMap<(String, u32, String), String>>,
    scope: String,
    /// `{job id}` for the job's run; the agent call's key for a nested run.
    key_prefix: String,
    /// Entries that need not be durable on their own (the rendered input,
    /// which the pinned bundle reproduces exactly): written with the next
    /// step that must be.
    deferred: Arc<std::sync::Mutex<Vec<JournalEntry>>>,
}

impl RunJournal {
    /// No durability: nothing is recorded or replayed.
    pub fn disabled(key_prefix: impl Into<String>) -> Self {
        Self {
            store: None,
            recorded: Arc::default(),
            scope: String::new(),
            key_prefix: key_prefix.into(),
            deferred: Arc::default(),
        }
    }

    /// The job's journal: `entries` as earlier attempts recorded them.
    pub fn new(job_id: &str, entries: Vec<JournalEntry>, store: Arc<dyn JournalStore>) -> Self {
        let recorded = entries
            .into_iter()
            .map(|e| ((e.scope, e.turn, e.step), e.body))
            .collect();
        Self {
            store: Some(store),
            recorded: Arc::new(recorded),
            scope: String::new(),
            key_prefix: job_id.to_string(),
            deferred: Arc::default(),
        }
    }

    /// A job's journal to read, never to write: what its run sent the
    /// model, for the API.
    pub fn reading(job_id: &str, entries: Vec<JournalEntry>) -> Self {
        Self {
            recorded: Arc::new(
                entries
                    .into_iter()
                    .map(|e| ((e.scope, e.turn, e.step), e.body))
                    .collect(),
            ),
            ..Self::disabled(job_id)
        }
    }

    /// The conversation of the run when turn `turn` asked the model: the
    /// recorded input, then each earlier turn's reply and its calls'
    /// results, grown as the kernel grows it
    /// ([`StepResult::turn_messages`]). `None` when a step of it was never
    /// recorded (the run did not get that far).
    pub fn conversation_before(&self, turn: u32) -> Result<Option<Vec<Message>>, JournalError> {
        let Some(mut messages) = self.recorded_input()? else {
            return Ok(None);
        };
        for earlier in 1..turn {
            let Some(reply) = self.recorded_reply(earlier)? else {
                return Ok(None);
            };
            let mut results = Vec::with_capacity(reply.assistant.tool_calls.len());
            for (position, call) in reply.assistant.tool_calls.iter().enumerate() {
                match self.recorded_result(earlier, position, &call.id)? {
                    Some(recorded) => results.push(recorded.result),
                    None => return Ok(None),
                }
            }
            messages.extend(StepResult::turn_messages(reply.assistant, &results));
        }
        Ok(Some(messages))
    }

    /// The journal of the nested run started under `key` in `turn` (a
    /// call's position in its reply, a workflow stage's or a group-chat
    /// reply's key): scope `{scope}{turn}:{key}/`.
    pub fn child(&self, turn: u32, key: &str) -> Self {
        Self {
            store: self.store.clone(),
            recorded: self.recorded.clone(),
            scope: format!("{}{turn}:{key}/", self.scope),
            key_prefix: self.idempotency_key(turn, key),
            deferred: self.deferred.clone(),
        }
    }

    /// The journal of the nested run started by the call at `position` of
    /// `turn`; a run an earlier version journaled under the call's id
    /// resumes there.
    pub fn child_of_call(&self, turn: u32, position: usize, call_id: &str) -> Self {
        let legacy = self.child(turn, call_id);
        if !call_id.contains('/') && legacy.has_records() {
            return legacy;
        }
        self.child(turn, &position.to_string())
    }

    /// A journal of its own for something else the job records (a
    /// workflow's checkpoints, its artifacts): scope `{scope}{name}/`.
    pub fn named(&self, name: &str) -> Self {
        Self {
            store: self.store.clone(),
            recorded: self.recorded.clone(),
            scope: format!("{}{name}/", self.scope),
            key_prefix: format!("{}:{name}", self.key_prefix),
            deferred: self.deferred.clone(),
        }
    }

    /// Records `value` as `step` of `turn` in this scope (replacing an
    /// earlier record of the same step).
    pub async fn record_value<T: serde::Serialize>(
        &self,
        turn: u32,
        step: &str,
        value: &T,
    ) -> Result<(), JournalError> {
        self.record(turn, step.to_string(), value).await
    }

    /// The value recorded as `step` in this scope's highest turn, if any.
    pub fn latest_value<T: serde::de::DeserializeOwned>(
        &self,
        step: &str,
    ) -> Result<Option<T>, JournalError> {
        let turn = self
            .recorded
            .keys()
            .filter(|(scope, _, s)| scope == &self.scope && s == step)
            .map(|(_, turn, _)| *turn)
            .max();
        match turn {
            Some(turn) => self.lookup(turn, step),
            None => Ok(None),
        }
    }

    /// The stable key a backend receives for a call: `{job}:{turn}:{key}`,
    /// `key` being the call's position in its reply (a nested run's keys
    /// extend its agent call's key).
    pub fn idempotency_key(&self, turn: u32, key: &str) -> String {
        format!("{}:{turn}:{key}", self.key_prefix)
    }

    pub fn is_durable(&self) -> bool {
        self.store.is_some()
    }

    pub fn scope(&self) -> &str {
        &self.scope
    }

    /// Whether this run has anything recorded (it is resuming).
    pub fn has_records(&self) -> bool {
        self.recorded
            .keys()
            .any(|(scope, _, _)| scope == &self.scope)
    }

    /// The steps of this run an earlier attempt completed (input, replies
    /// and results), which this attempt replays.
    pub fn recorded_steps(&self) -> usize {
        self.recorded
            .keys()
            .filter(|(scope, _, step)| scope == &self.scope && !JournalEntry::is_marker(step))
            .count()
    }

    fn lookup<T: serde::de::DeserializeOwned>(
        &self,
        turn: u32,
        step: &str,
    ) -> Result<Option<T>, JournalError> {
        let Some(body) = self
            .recorded
            .get(&(self.scope.clone(), turn, step.to_string()))
        else {
            return Ok(None);
        };
        serde_json::from_str(body)
            .map(Some)
            .map_err(|e| JournalError::Corrupt {
                scope: self.scope.clone(),
                turn,
                step: step.to_string(),
                detail: e.to_string(),
            })
    }

    pub fn recorded_input(&self) -> Result<Option<Vec<Message>>, JournalError> {
        self.lookup(0, "input")
    }

    /// [`Self::lookup`] of `step`, else of `legacy`: the step's name in a
    /// journal written before calls were keyed by their position.
    fn lookup_or_legacy<T: serde::de::DeserializeOwned>(
        &self,
        turn: u32,
        step: &str,
        legacy: &str,
    ) -> Result<Option<T>, JournalError> {
        match self.lookup(turn, step)? {
            Some(found) => Ok(Some(found)),
            None => self.lookup(turn, legacy),
        }
    }

    pub fn recorded_reply(&self, turn: u32) -> Result<Option<RecordedReply>, JournalError> {
        self.lookup(turn, "reply")
    }

    pub fn recorded_result(
        &self,
        turn: u32,
        position: usize,
        call_id: &str,
    ) -> Result<Option<RecordedResult>, JournalError> {
        let legacy = JournalEntry::legacy_keys(call_id).1;
        self.lookup_or_legacy(turn, &JournalEntry::result_key(position), &legacy)
    }

    /// A call that an earlier attempt started and left without a result.
    pub fn recorded_start(
        &self,
        turn: u32,
        position: usize,
        call_id: &str,
    ) -> Result<Option<RecordedStart>, JournalError> {
        let legacy = JournalEntry::legacy_keys(call_id).0;
        self.lookup_or_legacy(turn, &JournalEntry::start_key(position), &legacy)
    }

    /// The value an earlier attempt recorded as `step` of `turn` in this scope.
    pub fn recorded_step<T: serde::de::DeserializeOwned>(
        &self,
        turn: u32,
        step: &str,
    ) -> Result<Option<T>, JournalError> {
        self.lookup(turn, step)
    }

    /// The approval request an earlier attempt recorded for the call at
    /// `position` of `turn`.
    pub fn recorded_approval(
        &self,
        turn: u32,
        position: usize,
    ) -> Result<Option<ParkedCall>, JournalError> {
        self.lookup(turn, &JournalEntry::approval_key(position))
    }

    /// The decision on that request (written by the queue when a person
    /// decided, before the job ran again).
    pub fn recorded_decision(
        &self,
        turn: u32,
        position: usize,
    ) -> Result<Option<RecordedDecision>, JournalError> {
        self.lookup(turn, &JournalEntry::decision_key(position))
    }

    pub async fn record_approval(
        &self,
        turn: u32,
        position: usize,
        request: &ParkedCall,
    ) -> Result<(), JournalError> {
        self.record(turn, JournalEntry::approval_key(position), request)
            .await
    }

    fn has_step(&self, turn: u32, step: String) -> bool {
        self.recorded
            .contains_key(&(self.scope.clone(), turn, step))
    }

    /// The first turn an earlier attempt did not finish: the turn of the last
    /// recorded reply when some of its calls have no result, else the next.
    pub fn resume_turn(&self) -> u32 {
        let last = self
            .recorded
            .keys()
            .filter(|(scope, _, step)| scope == &self.scope && step == "reply")
            .map(|(_, turn, _)| *turn)
            .max();
        let Some(turn) = last else { return 1 };
        let complete = self
            .lookup::<RecordedReply>(turn, "reply")
            .ok()
            .flatten()
            .is_some_and(|reply| {
                let calls = reply.assistant.tool_calls.iter().enumerate();
                calls.into_iter().all(|(position, call)| {
                    self.has_step(turn, JournalEntry::result_key(position))
                        || self.has_step(turn, JournalEntry::legacy_keys(&call.id).1)
                })
            });
        if complete { turn + 1 } else { turn }
    }

    /// Records the rendered input with the run's next durable step: an
    /// attempt that dies before then renders it again from the pinned
    /// bundle, identically.
    pub fn record_input(&self, messages: &[Message]) -> Result<(), JournalError> {
        self.defer_value(0, "input", &messages)
    }

    /// Records `value` as `step` of `turn` with the run's next durable step
    /// (for what an attempt that dies before then reproduces identically).
    pub fn defer_value<T: Serialize>(
        &self,
        turn: u32,
        step: &str,
        value: &T,
    ) -> Result<(), JournalError> {
        if self.store.is_none() {
            return Ok(());
        }
        let entry = self.entry(turn, step.into(), value)?;
        self.deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(entry);
        Ok(())
    }

    pub async fn record_reply(&self, turn: u32, reply: &RecordedReply) -> Result<(), JournalError> {
        self.record(turn, "reply".into(), reply).await
    }

    pub async fn record_start(
        &self,
        turn: u32,
        position: usize,
        start: &RecordedStart,
    ) -> Result<(), JournalError> {
        self.record(turn, JournalEntry::start_key(position), start)
            .await
    }

    pub async fn record_result(
        &self,
        turn: u32,
        position: usize,
        result: &RecordedResult,
    ) -> Result<(), JournalError> {
        self.record(turn, JournalEntry::result_key(position), result)
            .await
    }

    fn entry<T: Serialize>(
        &self,
        turn: u32,
        step: String,
        body: &T,
    ) -> Result<JournalEntry, JournalError> {
        let body = serde_json::to_string(body).map_err(|e| JournalError::Store {
            turn,
            step: step.clone(),
            detail: e.to_string(),
        })?;
        Ok(JournalEntry {
            scope: self.scope.clone(),
            turn,
            step,
            body,
        })
    }

    async fn record<T: Serialize>(
        &self,
        turn: u32,
        step: String,
        body: &T,
    ) -> Result<(), JournalError> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        let entry = self.entry(turn, step.clone(), body)?;
        let mut entries =
            std::mem::take(&mut *self.deferred.lock().unwrap_or_else(|p| p.into_inner()));
        entries.push(entry);
        store.record(entries.clone()).await.map_err(|failed| {
            // Put back what did not become durable (all but the step that
            // failed, which the caller reports).
            entries.pop();
            self.deferred
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .splice(0..0, entries);
            JournalError::Store {
                turn,
                step,
                detail: failed.to_string(),
            }
        })
    }
}

#[cfg(test)]
mod tests;
