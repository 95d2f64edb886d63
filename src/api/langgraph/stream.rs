//! A run told as LangGraph's stream: the SSE events its clients read for
//! each `stream_mode` (`values`, `updates`, `messages-tuple`, `messages`,
//! `events`, `custom`, `debug`, `checkpoints`, `tasks`), made from the job's
//! durable steps (`messages::steps_of`, the same messages and ids as the
//! thread's state), its live tokens and progress, and its end.
//!
//! The job's steps come in LangGraph's super-steps: the input, each reply
//! (node `model`), and each turn's tool results together (node `tools`);
//! `values`, `updates`, `debug` and the `on_…_end` events come once a
//! super-step is whole, a message's own events as soon as it is.
//!
//! An event made from something stored carries an `id:` that is a pure
//! function of where it stands in the job's log — the stored event it was
//! made at, times [`PER_EVENT`], plus its place among the events made
//! there — so a client that reconnects with `Last-Event-ID` (also after a
//! daemon restart) gets exactly what follows. Tokens and progress are never
//! stored and have no `id:`: a reconnect gets the stored events after its
//! id, then the live ones from then on; a reply whose tokens a stream did
//! not see live comes as one chunk at its step.

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};

use super::interrupts::interrupt;
use super::messages::{Step, StepKind, chunk};
use super::stream_modes::{Mode, Modes};
use crate::events::live::{Progress, Token};
use crate::events::{Event, EventEnvelope};

/// The `id:` numbers one stored event has room for.
pub(super) const PER_EVENT: u64 = 1 << 12;

/// Where, at a nested run's end, the numbers its parent's teller takes
/// start (the call's result recorded with that end): the nested run's own
/// teller takes those before, so its rest is told first.
const PARENTS_SHARE: u64 = PER_EVENT / 2;

/// How a run ended, as its stream tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ending<'a> {
    Done,
    /// Failed: the error's kind and message.
    Failed(&'a str, &'a str),
    /// Cancelled, and why: LangGraph's clients read `end`; the Agent
    /// Protocol's `lifecycle` reads it as failed.
    Cancelled(&'a str),
}

/// One SSE event of the stream.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Frame {
    pub event: &'static str,
    pub data: Value,
    pub id: Option<u64>,
    /// The subgraph that made it (`["tools:<id>", …]`, LangGraph's
    /// namespace of a nested run); empty for the run's own.
    pub namespace: Vec<String>,
}

impl Frame {
    /// A frame of the run's own (the root namespace).
    pub fn root(event: &'static str, data: Value, id: Option<u64>) -> Self {
        Self {
            event,
            data,
            id,
            namespace: Vec::new(),
        }
    }

    /// Its SSE event name: LangGraph's `event|ns1|ns2` for a subgraph's.
    pub fn name(&self) -> std::borrow::Cow<'static, str> {
        match self.namespace.is_empty() {
            true => self.event.into(),
            false => format!("{}|{}", self.event, self.namespace.join("|")).into(),
        }
    }
}

/// The run a stream tells.
#[derive(Debug, Clone)]
pub(super) struct RunInfo {
    pub job: String,
    pub thread: Option<String>,
    /// Its bundle.
    pub graph: String,
    pub assistant: String,
    /// The thread's messages before the run's (none for a stateless run
    /// or a nested one).
    pub prior: Vec<Value>,
    /// Where a nested run stands (`subgraphs::Subgraphs`); empty for the
    /// job's own run.
    pub namespace: Vec<String>,
}

/// Turns a run's feed into LangGraph's events; see the module's
/// documentation. Fed from the start of the job's log every time; with a
/// resume point it sends only what follows it.
pub(super) struct Translator {
    run: RunInfo,
    modes: Modes,
    /// The client has every event numbered up to this one.
    after: Option<u64>,
    /// The stored event the next numbered events stand at, and how many
    /// were numbered there already.
    at: u64,
    numbered: u64,
    /// The job's steps made into events so far, and their messages.
    sent: usize,
    messages: Vec<Value>,
    /// The tool results of the turn whose super-step is not whole yet.
    open_tools: Vec<Value>,
    /// The text of each turn's reply this stream saw token by token.
    streamed: HashMap<u32, String>,
    /// Message ids whose `messages/metadata` was sent.
    announced: HashSet<String>,
    /// The calls waiting for a person, since the job last ran.
    parked: Vec<Value>,
}

impl Translator {
    pub fn new(run: RunInfo, modes: Modes, after: Option<u64>) -> Self {
        Self {
            run,
            modes,
            after,
            at: 0,
            numbered: 0,
            sent: 0,
            messages: Vec::new(),
            open_tools: Vec::new(),
            streamed: HashMap::new(),
            announced: HashSet::new(),
            parked: Vec::new(),
        }
    }

    /// The run it tells: the job's, or a nested run's id.
    pub fn run_id(&self) -> &str {
        &self.run.job
    }

    /// What it tells, how, and after which id.
    pub fn settings(&self) -> (&RunInfo, &Modes, Option<u64>) {
        (&self.run, &self.modes, self.after)
    }

    /// Where the run it tells stands: empty for the job's own.
    pub fn namespace(&self) -> &[String] {
        &self.run.namespace
    }

    /// The numbered events from here stand at stored event `seq`.
    pub fn at(&mut self, seq: u64) {
        if seq != self.at {
            self.at = seq;
            self.numbered = 0;
        }
    }

    /// The numbered events from here stand at `envelope`, stored as
    /// `seq`: from its first number when it is this run's event, from
    /// [`PARENTS_SHARE`] when it is the end of a run this one nested.
    pub fn at_event(&mut self, seq: u64, envelope: &EventEnvelope) {
        if envelope.run_id == self.run.job {
            self.at(seq);
        } else {
            self.at = seq;
            self.numbered = PARENTS_SHARE;
        }
    }

    /// A numbered `lifecycle` frame (a nested run's start or end), for
    /// streams that tell lifecycles.
    pub fn lifecycle(&mut self, data: Value) -> Vec<Frame> {
        self.numbered(Mode::Lifecycle, "lifecycle", |_| data)
            .into_iter()
            .collect()
    }

    /// Takes the next number at this place, whether or not the stream
    /// sends the event, so that numbers do not depend on the modes asked (a
    /// client joining in other modes resumes at the same place); the event,
    /// when its `mode` was asked and the client does not have it yet.
    fn numbered(
        &mut self,
        mode: Mode,
        event: &'static str,
        data: impl FnOnce(&Self) -> Value,
    ) -> Option<Frame> {
        let id = self
            .at
            .saturating_mul(PER_EVENT)
            .saturating_add(self.numbered.min(PER_EVENT - 1));
        self.numbered += 1;
        if !self.modes.has(mode) || self.after.is_some_and(|after| id <= after) {
            return None;
        }
        Some(Frame {
            event,
            data: data(self),
            id: Some(id),
            namespace: self.run.namespace.clone(),
        })
    }

    fn live(&self, event: &'static str, data: Value) -> Frame {
        Frame {
            event,
            data,
            id: None,
            namespace: self.run.namespace.clone(),
        }
    }

    /// The first event: the run and its attempt (never numbered: every
    /// connection gets it).
    pub fn opening(&self, attempt: u32) -> Frame {
        self.live(
            "metadata",
            json!({"run_id": self.run.job, "attempt": attempt.max(1)}),
        )
    }

    /// `events`' start of the run, numbered at the log's start.
    pub fn started(&mut self, input: &Value) -> Vec<Frame> {
        let data = json!({"input": {"messages": [input]}});
        self.numbered(Mode::Events, "events", |this| {
            this.chain_event("on_chain_start", data)
        })
        .into_iter()
        .collect()
    }

    fn chain_event(&self, name: &str, data: Value) -> Value {
        json!({
            "event": name, "name": self.run.graph, "run_id": self.run.job,
            "parent_ids": [], "tags": [], "metadata": self.metadata("__start__", 0),
            "data": data,
        })
    }

    /// What LangGraph tells of the node that made something.
    fn metadata(&self, node: &str, step: u32) -> Value {
        json!({
            "langgraph_node": node,
            "langgraph_step": step,
            "langgraph_triggers": [format!("branch:to:{node}")],
            "langgraph_path": ["__pregel_pull", node],
            "langgraph_checkpoint_ns": self.checkpoint_ns(Some(node)),
            "thread_id": self.run.thread,
            "run_id": self.run.job,
            "assistant_id": self.run.assistant,
            "graph_id": self.run.graph,
        })
    }

    /// LangGraph's checkpoint namespace of this run, and of `node` in it:
    /// its namespace's parts, then `node:<run>`, joined by `|`.
    fn checkpoint_ns(&self, node: Option<&str>) -> String {
        let mut parts = self.run.namespace.clone();
        parts.extend(node.map(|node| format!("{node}:{}", self.run.job)));
        parts.join("|")
    }

    /// A token of this run (other runs' tokens are theirs).
    pub fn token(&mut self, token: &Token) -> Vec<Frame> {
        if token.run_id != self.run.job || token.event.is_some() || token.text.is_empty() {
            return Vec::new();
        }
        let id = format!("{}:t{}", self.run.job, token.turn);
        let so_far = self.streamed.entry(token.turn).or_default();
        so_far.push_str(&token.text);
        let so_far = so_far.clone();
        let metadata = self.metadata("model", token.turn);
        let mut frames = Vec::new();
        if self.modes.has(Mode::MessagesTuple) {
            let chunk = chunk(&id, &token.text, Vec::new(), Value::Null, Value::Null);
            frames.push(self.live("messages", json!([chunk, metadata])));
        }
        if self.modes.has(Mode::Messages) {
            if self.announced.insert(id.clone()) {
                frames.push(self.live(
                    "messages/metadata",
                    json!({ id.clone(): {"metadata": metadata} }),
                ));
            }
            let whole = chunk(&id, &so_far, Vec::new(), Value::Null, Value::Null);
            frames.push(self.live("messages/partial", json!([whole])));
        }
        if self.modes.has(Mode::Events) {
            let chunk = chunk(&id, &token.text, Vec::new(), Value::Null, Value::Null);
            frames.push(self.live(
                "events",
                json!({
                    "event": "on_chat_model_stream", "name": "model", "run_id": id,
                    "parent_ids": [self.run.job], "tags": [], "metadata": metadata,
                    "data": {"chunk": chunk},
                }),
            ));
        }
        frames
    }

    /// A step of the run as it happens: `custom`, the daemon's own stream.
    pub fn progress(&self, progress: &Progress) -> Vec<Frame> {
        if !self.modes.has(Mode::Custom) {
            return Vec::new();
        }
        serde_json::to_value(progress)
            .map(|data| vec![self.live("custom", data)])
            .unwrap_or_default()
    }

    /// What a stored event of the job tells by itself: `events`' starts of
    /// this run's model calls and tool calls, and the calls parked for a
    /// person (any run's: the job parks for them).
    pub fn stored(&mut self, envelope: &EventEnvelope) -> Vec<Frame> {
        let own = envelope.run_id == self.run.job;
        match &envelope.event {
            Event::ApprovalRequested {
                turn,
                call_id,
                tool_name,
                arguments,
                digest,
            } => {
                self.parked.push(json!({
                    "run_id": envelope.run_id, "turn": turn, "call_id": call_id,
                    "tool": tool_name, "arguments": arguments, "digest": digest,
                }));
                Vec::new()
            }
            Event::JobState { state, .. } if own && state.as_str() == "running" => {
                self.parked.clear();
                Vec::new()
            }
            Event::ModelRequest { turn, .. } if own => self
                .numbered(Mode::Events, "events", |this| {
                    json!({
                        "event": "on_chat_model_start", "name": "model",
                        "run_id": format!("{}:t{turn}", this.run.job),
                        "parent_ids": [this.run.job], "tags": [],
                        "metadata": this.metadata("model", *turn), "data": {"input": {}},
                    })
                })
                .into_iter()
                .collect(),
            Event::ToolCall {
                turn,
                tool_name,
                call_id,
                arguments,
            } if own => self
                .numbered(Mode::Events, "events", |this| {
                    json!({
                        "event": "on_tool_start", "name": tool_name,
                        "run_id": format!("{}:t{turn}:{call_id}", this.run.job),
                        "parent_ids": [this.run.job], "tags": [],
                        "metadata": this.metadata("tools", *turn), "data": {"input": arguments},
                    })
                })
                .into_iter()
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Makes events of `steps[..upto]` that were not made yet: each
    /// message's own events, and each super-step's once it is whole.
    pub fn steps(&mut self, steps: &[Step], upto: usize) -> Vec<Frame> {
        let mut frames = Vec::new();
        let upto = upto.min(steps.len());
        while self.sent < upto {
            let k = self.sent;
            self.sent += 1;
            self.step(k, &steps[k], &mut frames);
        }
        frames
    }

    fn step(&mut self, k: usize, step: &Step, frames: &mut Vec<Frame>) {
        let message = step.message.clone();
        self.messages.push(message.clone());
        match step.kind {
            StepKind::Input => self.superstep(k, "__start__", Vec::new(), frames),
            StepKind::Reply { turn, .. } => {
                self.reply_messages(turn, &message, frames);
                frames.extend(self.numbered(Mode::Events, "events", |this| {
                    json!({
                        "event": "on_chat_model_end", "name": "model",
                        "run_id": message["id"], "parent_ids": [this.run.job], "tags": [],
                        "metadata": this.metadata("model", turn), "data": {"output": message},
                    })
                }));
                self.superstep(k, "model", vec![message], frames);
            }
            StepKind::Result { turn, last, .. } => {
                self.whole_messages("tools", turn, &message, frames);
                frames.extend(self.numbered(Mode::Events, "events", |this| {
                    let call = message["tool_call_id"].as_str().unwrap_or_default();
                    json!({
                        "event": "on_tool_end", "name": message["name"],
                        "run_id": format!("{}:t{turn}:{call}", this.run.job),
                        "parent_ids": [this.run.job], "tags": [],
                        "metadata": this.metadata("tools", turn), "data": {"output": message},
                    })
                }));
                self.open_tools.push(message);
                if last {
                    let written = std::mem::take(&mut self.open_tools);
                    self.superstep(k, "tools", written, frames);
                }
            }
            StepKind::Answer => {
                self.whole_messages("model", 0, &message, frames);
                self.superstep(k, "model", vec![message], frames);
            }
        }
    }

    /// A reply's message events: the chunk of what this stream did not see
    /// token by token (the rest of its text, or all of it when what came
    /// is not its start; its tool calls and usage), and the whole message.
    fn reply_messages(&mut self, turn: u32, message: &Value, frames: &mut Vec<Frame>) {
        let id = message["id"].as_str().unwrap_or_default().to_string();
        let metadata = self.metadata("model", turn);
        frames.extend(self.numbered(Mode::MessagesTuple, "messages", |this| {
            let content = message["content"].as_str().unwrap_or_default();
            let seen = this.streamed.get(&turn).map_or("", String::as_str);
            let text = content.strip_prefix(seen).unwrap_or(content);
            let calls = message["tool_calls"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let last = chunk(
                &id,
                text,
                calls,
                message["usage_metadata"].clone(),
                message["response_metadata"].clone(),
            );
            json!([last, metadata])
        }));
        self.announce(&id, &metadata, frames);
        frames.extend(self.numbered(Mode::Messages, "messages/complete", |_| json!([message])));
    }

    /// A message written whole (a tool result, a workflow's answer).
    fn whole_messages(&mut self, node: &str, turn: u32, message: &Value, frames: &mut Vec<Frame>) {
        let metadata = self.metadata(node, turn);
        frames.extend(self.numbered(Mode::MessagesTuple, "messages", |_| {
            json!([message, metadata])
        }));
        let id = message["id"].as_str().unwrap_or_default().to_string();
        self.announce(&id, &metadata, frames);
        frames.extend(self.numbered(Mode::Messages, "messages/complete", |_| json!([message])));
    }

    /// A message's metadata, unless this stream sent it with its first
    /// token (numbered either way: numbers do not depend on what a stream
    /// saw live).
    fn announce(&mut self, id: &str, metadata: &Value, frames: &mut Vec<Frame>) {
        let frame = self.numbered(
            Mode::Messages,
            "messages/metadata",
            |_| json!({ id: {"metadata": metadata} }),
        );
        if frame.is_some() && self.announced.insert(id.to_string()) {
            frames.extend(frame);
        }
    }

    /// A whole super-step (its last step is the job's `k`-th): `values`,
    /// `updates`, and `debug`'s checkpoint and task result.
    fn superstep(&mut self, k: usize, node: &str, written: Vec<Value>, frames: &mut Vec<Frame>) {
        let values = self.values();
        let step = k as i64 - 1;
        frames.extend(self.numbered(Mode::Values, "values", |_| values.clone()));
        if node != "__start__" {
            frames.extend(self.numbered(
                Mode::Updates,
                "updates",
                |_| json!({ node: {"messages": written} }),
            ));
        }
        let task = json!({
            "id": format!("{}:{k}", self.run.job), "name": node, "error": null,
            "result": [["messages", written]], "interrupts": [],
        });
        frames.extend(self.numbered(Mode::Tasks, "tasks", |_| task.clone()));
        frames.extend(self.numbered(
            Mode::Debug,
            "debug",
            |_| json!({"type": "task_result", "step": step, "payload": task}),
        ));
        let checkpoint = self.checkpoint(k, node, values);
        frames.extend(self.numbered(Mode::Checkpoints, "checkpoints", |_| checkpoint.clone()));
        frames.extend(self.numbered(
            Mode::Debug,
            "debug",
            |_| json!({"type": "checkpoint", "step": step, "payload": checkpoint}),
        ));
    }

    /// A checkpoint's payload, as the thread's history names it.
    fn checkpoint(&self, k: usize, node: &str, values: Value) -> Value {
        let config = |k: usize| {
            json!({"configurable": {
                "thread_id": self.run.thread, "checkpoint_ns": self.checkpoint_ns(None),
                "checkpoint_id": format!("{}:{k}", self.run.job),
            }})
        };
        let next: Vec<&str> = match node {
            "__start__" | "tools" => vec!["model"],
            _ => match self.messages.last() {
                Some(m) if m["tool_calls"].as_array().is_some_and(|c| !c.is_empty()) => {
                    vec!["tools"]
                }
                _ => Vec::new(),
            },
        };
        json!({
            "config": config(k),
            "parent_config": k.checked_sub(1).map(config),
            "values": values,
            "metadata": {
                "source": if node == "__start__" { "input" } else { "loop" },
                "step": k as i64 - 1, "run_id": self.run.job, "thread_id": self.run.thread,
                "graph_id": self.run.graph, "assistant_id": self.run.assistant,
            },
            "next": next,
            "tasks": [],
        })
    }

    /// The thread's messages now: its earlier ones and the run's.
    pub fn thread_messages(&self) -> Vec<Value> {
        self.run
            .prior
            .iter()
            .chain(&self.messages)
            .cloned()
            .collect()
    }

    /// The thread's values now: its earlier messages and the run's.
    pub fn values(&self) -> Value {
        let messages: Vec<&Value> = self.run.prior.iter().chain(&self.messages).collect();
        json!({ "messages": messages })
    }

    /// The interrupt of a job parked for a person: each call it waits on
    /// (`interrupts::interrupt`), or an operator's resolve for a call of
    /// unknown outcome.
    pub fn interrupted(&mut self, why: Option<&str>) -> Vec<Frame> {
        let interrupts: Vec<Value> = match self.parked.is_empty() {
            true => vec![json!({
                "value": {
                    "type": "needs_attention",
                    "description": why.unwrap_or("a call's outcome is unknown: an operator resolves it"),
                    "resolve": format!("POST /v1/jobs/{}/resolve", self.run.job),
                },
                "id": format!("{}/needs_attention", self.run.job),
            })],
            false => self
                .parked
                .iter()
                .map(|call| {
                    let run = call["run_id"].as_str().unwrap_or_default();
                    interrupt(
                        run.split('/').next().unwrap_or(run),
                        call["call_id"].as_str().unwrap_or_default(),
                        call["tool"].as_str().unwrap_or_default(),
                        &call["arguments"],
                        call["digest"].as_str().unwrap_or_default(),
                    )
                })
                .collect(),
        };
        let (mode, event) = match self.modes.has(Mode::Updates) {
            true => (Mode::Updates, "updates"),
            false => (Mode::Values, "values"),
        };
        self.numbered(mode, event, |_| json!({"__interrupt__": interrupts}))
            .into_iter()
            .collect()
    }

    /// The run's end: `events`' end of the chain, then an `error` for a
    /// failed run or `end` (for a cancelled one, with why when this stream
    /// tells lifecycles).
    pub fn ended(&mut self, ending: Ending<'_>) -> Vec<Frame> {
        let mut frames: Vec<Frame> = self
            .numbered(Mode::Events, "events", |this| {
                this.chain_event("on_chain_end", json!({"output": this.values()}))
            })
            .into_iter()
            .collect();
        frames.push(match ending {
            Ending::Failed(error, message) => {
                self.live("error", json!({"error": error, "message": message}))
            }
            Ending::Cancelled(why) if self.modes.has(Mode::Lifecycle) => {
                self.live("end", json!({ "cancelled": why }))
            }
            Ending::Done | Ending::Cancelled(_) => self.live("end", Value::Null),
        });
        frames
    }
}

#[cfg(test)]
mod tests;
