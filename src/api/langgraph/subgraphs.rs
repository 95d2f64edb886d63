//! A job's nested runs told as LangGraph's subgraphs, for a stream that
//! asked `stream_subgraphs` (and the Agent Protocol's thread stream, whose
//! subscriptions filter by namespace). A nested run — an agent tool's
//! bundle, a workflow's stage, a group chat's reply — writes its events to
//! the job's log as run `<parent>/<key>` and journals its steps under its
//! own scope; each is told by a `stream::Translator` of its own, in the
//! namespace LangGraph gives a subgraph: the parent's, then
//! `<node>:<task id>` — node `tools` for a run an agent call started
//! (key `<turn>:<position>`), the key itself for a stage or a reply — so
//! its events are named `values|tools:<id>`, `messages|tools:<id>`, ….
//!
//! A nested run is known from its first stored event, or its first token
//! (its parent is in its id): what its stream tells from then on is what
//! the job's own stream tells of the job, numbered at the same stored
//! events (after its parent's, at its end, which tells its parent's
//! call's result), so a client that resumes after an id gets the same
//! events.

use std::collections::HashMap;

use serde_json::{Value, json};
use uuid::Uuid;

use super::messages::{Step, Told, nested_scope, nested_steps};
use super::stream::{Frame, RunInfo, Translator};
use super::stream_modes::Modes;
use crate::events::live::{Progress, Token};
use crate::events::{Event, EventEnvelope};
use crate::journal::JournalEntry;
use crate::types::agent_message;

/// The namespace a subgraph's task ids are derived in
/// (`uuid5(NAMESPACE, nested run id)`): the same id on every read.
const TASKS: Uuid = Uuid::from_u128(0x5d1b_6e0f_3c2a_4f57_9a8e_2b4c_7d10_e6a3);

/// The nested runs of one job, each told as a subgraph.
pub(super) struct Subgraphs {
    /// The job's own run: what every nested run inherits.
    job: RunInfo,
    modes: Modes,
    after: Option<u64>,
    /// The arguments of every tool call told so far, by run and call id:
    /// an agent call's are its nested run's input.
    calls: HashMap<(String, String), Value>,
    runs: HashMap<String, Nested>,
}

struct Nested {
    translator: Translator,
    /// Where its parent journals (its own scope is found in the journal).
    parent_scope: String,
    key: String,
    scope: Option<String>,
    input: Option<String>,
    steps: Vec<Step>,
    /// Whether its start was told.
    announced: bool,
}

impl Subgraphs {
    /// The subgraphs of the job `job` tells, in `modes`, after `after`.
    pub fn new(job: &RunInfo, modes: Modes, after: Option<u64>) -> Self {
        Self {
            job: job.clone(),
            modes,
            after,
            calls: HashMap::new(),
            runs: HashMap::new(),
        }
    }

    /// Whether `envelope` tells a nested run's step, which its journal
    /// has (read it for [`Self::stored`]).
    pub fn wants_journal(&self, envelope: &EventEnvelope) -> bool {
        envelope.parent.is_some()
            && (Told::of(envelope, &envelope.run_id).is_some()
                || matches!(envelope.event, Event::KernelEnd { .. }))
    }

    /// What the job's stored event `seq` tells of its nested runs;
    /// `journal` is the job's, read when [`Self::wants_journal`] said so.
    pub fn stored(
        &mut self,
        seq: u64,
        envelope: &EventEnvelope,
        journal: Option<&[JournalEntry]>,
    ) -> Vec<Frame> {
        if let Event::ToolCall {
            call_id, arguments, ..
        } = &envelope.event
        {
            self.calls.insert(
                (envelope.run_id.clone(), call_id.clone()),
                arguments.clone(),
            );
        }
        let Some(parent) = &envelope.parent else {
            return Vec::new();
        };
        let input = self
            .calls
            .get(&(parent.run_id.clone(), parent.call_id.clone()))
            .map(agent_message);
        let Some(run) = self.run(&envelope.run_id) else {
            return Vec::new();
        };
        if !run.announced {
            run.input = run.input.take().or(input);
        }
        let mut frames = run.told_at(seq, envelope, journal);
        // At its end, its parent's call's result, recorded with that end
        // (the job's own run tells it when it is the parent).
        if matches!(envelope.event, Event::KernelEnd { .. })
            && let Some(told) = Told::of(envelope, &parent.run_id)
            && let Some(up) = self.runs.get_mut(&parent.run_id)
        {
            up.translator.at_event(seq, envelope);
            if let Some(journal) = journal {
                up.read(journal);
            }
            frames.extend(up.tell(&told));
        }
        frames
    }

    /// A token of a nested run, as it streams.
    pub fn token(&mut self, token: &Token) -> Vec<Frame> {
        match self.run(&token.run_id) {
            Some(run) => run.translator.token(token),
            None => Vec::new(),
        }
    }

    /// A nested run's progress (`custom` in its namespace).
    pub fn progress(&mut self, progress: &Progress) -> Vec<Frame> {
        match self.run(&progress.run_id) {
            Some(run) => run.translator.progress(progress),
            None => Vec::new(),
        }
    }

    /// Nested run `id`, known from now on (none for the job's own run, or
    /// an id that names no run nested in it).
    fn run(&mut self, id: &str) -> Option<&mut Nested> {
        if !self.runs.contains_key(id) {
            let (parent, key) = id.rsplit_once('/')?;
            let (namespace, parent_scope) = match parent == self.job.job {
                true => (Vec::new(), String::new()),
                false => {
                    let parent = self.run(parent)?;
                    let scope = parent.scope.clone()?;
                    (parent.translator.namespace().to_vec(), scope)
                }
            };
            let mut namespace = namespace;
            namespace.push(segment(id, key));
            let info = RunInfo {
                job: id.to_string(),
                prior: Vec::new(),
                namespace,
                ..self.job.clone()
            };
            self.runs.insert(
                id.to_string(),
                Nested {
                    translator: Translator::new(info, self.modes.clone(), self.after),
                    parent_scope,
                    key: key.to_string(),
                    scope: None,
                    input: None,
                    steps: Vec::new(),
                    announced: false,
                },
            );
        }
        self.runs.get_mut(id)
    }
}

impl Nested {
    /// What its stored event `envelope` (stored as `seq`) tells: its start
    /// at its first (`lifecycle`'s `started`, caused by the agent call
    /// whose input it has; its input), each step at the event that tells
    /// it (`Told`), at its end the rest and how it ended.
    fn told_at(
        &mut self,
        seq: u64,
        envelope: &EventEnvelope,
        journal: Option<&[JournalEntry]>,
    ) -> Vec<Frame> {
        self.translator.at_event(seq, envelope);
        let mut frames = Vec::new();
        if !self.announced {
            self.announced = true;
            let mut started = json!({"event": "started", "graph_name": envelope.bundle});
            if let Some(parent) = envelope.parent.as_ref().filter(|_| self.input.is_some()) {
                started["cause"] = json!({"type": "toolCall", "tool_call_id": parent.call_id});
            }
            frames.extend(self.translator.lifecycle(started));
        }
        frames.extend(self.translator.stored(envelope));
        match journal {
            Some(journal) => self.read(journal),
            None if self.steps.is_empty() => self.read(&[]),
            None => {}
        }
        let told = match &envelope.event {
            Event::KernelEnd { .. } => Some(self.steps.len()),
            _ => Told::of(envelope, &envelope.run_id)
                .and_then(|told| self.steps.iter().position(|step| told.is(step)))
                .map(|k| k + 1),
        };
        let input = usize::from(self.input.is_some()).min(self.steps.len());
        frames.extend(
            self.translator
                .steps(&self.steps, told.unwrap_or(0).max(input)),
        );
        if let Event::KernelEnd { error, .. } = &envelope.event {
            let ended = match error {
                Some(error) => {
                    json!({"event": "failed", "graph_name": envelope.bundle, "error": error})
                }
                None => json!({"event": "completed", "graph_name": envelope.bundle}),
            };
            frames.extend(self.translator.lifecycle(ended));
        }
        frames
    }

    /// Events of its steps up to the one `told` names.
    fn tell(&mut self, told: &Told) -> Vec<Frame> {
        match self.steps.iter().position(|step| told.is(step)) {
            Some(k) => self.translator.steps(&self.steps, k + 1),
            None => Vec::new(),
        }
    }

    /// Its steps as the journal has them now (its input alone before its
    /// scope is found).
    fn read(&mut self, journal: &[JournalEntry]) {
        if self.scope.is_none() {
            self.scope = nested_scope(journal, &self.parent_scope, &self.key);
        }
        let (journal, scope) = match &self.scope {
            Some(scope) => (journal, scope.as_str()),
            None => (&[][..], ""),
        };
        let run = self.translator.run_id().to_string();
        self.steps = nested_steps(&run, self.input.as_deref(), journal, scope);
    }
}

/// The namespace part of nested run `id` (`key` the last part of its id):
/// `tools:<task>` for an agent call's (`<turn>:<position>`), `<key>:<task>`
/// for a stage's or a reply's.
fn segment(id: &str, key: &str) -> String {
    let by_call = key
        .split_once(':')
        .is_some_and(|(turn, position)| is_number(turn) && is_number(position));
    let node = if by_call { "tools" } else { key };
    format!("{node}:{}", Uuid::new_v5(&TASKS, id.as_bytes()))
}

fn is_number(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests;
