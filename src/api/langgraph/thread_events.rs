//! The thread streaming protocol's events (LangChain's Agent Protocol,
//! `POST /threads/{id}/stream`): a run's LangGraph frames
//! (`stream::Translator`'s, followed through its parks) told as the
//! protocol's channels — `lifecycle`, `input` (`input.requested`,
//! `input.answered`), `values`, `updates`, `messages` (a message's start,
//! its text as deltas, its blocks' ends, its finish), `tools`,
//! `checkpoints`, `tasks` and `custom` — on the root namespace, and a
//! nested run's on its subgraph's (`subgraphs`), which a subscription
//! filters by prefix and depth as LangGraph's clients match them.
//!
//! An event made from something stored has a `seq` (and an `event_id`
//! naming it) that is a pure function of where it stands on the thread:
//! [`RUN_ROOM`] numbers per run (the thread's runs oldest first, from the
//! first), within a run [`FRAME_ROOM`] per frame of the translator (whose
//! ids are a pure function of the job's log). A client that asks again
//! `since` one gets exactly what follows, also after a daemon restart.
//! Tokens and progress are never stored and carry no `seq`: a client that
//! did not see them live gets the message whole at its step.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::super::error::{ApiError, ErrorCode};
use super::follower::RESUMED;
use super::stream::Frame;
use super::stream_modes::{Mode, Modes};

/// The numbers one run of a thread has room for.
pub(super) const RUN_ROOM: u64 = 1 << 36;
/// The numbers one frame of a run has room for.
pub(super) const FRAME_ROOM: u64 = 64;

/// A channel a client subscribes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Channel {
    Values,
    Updates,
    Messages,
    Tools,
    Lifecycle,
    Input,
    Checkpoints,
    Tasks,
    Custom,
}

impl Channel {
    const NAMES: [(&str, Channel); 9] = [
        ("values", Channel::Values),
        ("updates", Channel::Updates),
        ("messages", Channel::Messages),
        ("tools", Channel::Tools),
        ("lifecycle", Channel::Lifecycle),
        ("input", Channel::Input),
        ("checkpoints", Channel::Checkpoints),
        ("tasks", Channel::Tasks),
        ("custom", Channel::Custom),
    ];

    /// Every channel's name.
    pub fn names() -> impl Iterator<Item = &'static str> {
        Self::NAMES.iter().map(|(name, _)| *name)
    }

    /// The channel an event of `method` is on.
    fn of_method(method: &str) -> Channel {
        match method {
            "input.requested" | "input.answered" => Channel::Input,
            _ => Self::NAMES
                .iter()
                .find(|(name, _)| *name == method)
                .map_or(Channel::Custom, |(_, channel)| *channel),
        }
    }
}

/// What one stream sends: the channels asked (`custom:<name>`: the custom
/// events of that name), on the namespaces asked (each a prefix, no more
/// than `depth` parts below it; all when none is asked), after `since`.
#[derive(Debug, Clone)]
pub(super) struct Filter {
    channels: Vec<Channel>,
    custom_names: Vec<String>,
    namespaces: Option<Vec<Vec<String>>>,
    depth: Option<u64>,
    pub since: Option<u64>,
}

impl Filter {
    /// Reads a stream request's `channels`, `namespaces`, `depth` and
    /// `since`; an unknown channel is a 422 naming the ones served.
    pub fn read(
        channels: &[String],
        namespaces: Option<&[Vec<String>]>,
        depth: Option<u64>,
        since: Option<u64>,
    ) -> Result<Self, ApiError> {
        let mut filter = Self {
            channels: Vec::new(),
            custom_names: Vec::new(),
            namespaces: namespaces.filter(|all| !all.is_empty()).map(<[_]>::to_vec),
            depth,
            since,
        };
        if channels.is_empty() {
            return Err(unknown_channel("no channel"));
        }
        for name in channels {
            if let Some(custom) = name.strip_prefix("custom:").filter(|n| !n.is_empty()) {
                filter.custom_names.push(custom.to_string());
                continue;
            }
            let channel = Channel::NAMES
                .iter()
                .find(|(known, _)| known == name)
                .map(|(_, channel)| *channel)
                .ok_or_else(|| unknown_channel(&format!("channel {name:?}")))?;
            filter.channels.push(channel);
        }
        Ok(filter)
    }

    /// Whether a run's nested runs may have events this stream sends.
    pub fn reaches_nested(&self) -> bool {
        let below_root = self.depth.is_none_or(|depth| depth > 0);
        match &self.namespaces {
            None => true,
            Some(prefixes) => below_root || prefixes.iter().any(|p| !p.is_empty()),
        }
    }

    /// Whether this stream sends `event`.
    pub fn admits(&self, event: &ProtocolEvent) -> bool {
        if !self.reaches(&event.namespace)
            || event
                .seq
                .zip(self.since)
                .is_some_and(|(seq, since)| seq <= since)
        {
            return false;
        }
        let channel = Channel::of_method(event.method);
        self.channels.contains(&channel)
            || (channel == Channel::Custom
                && event.data["name"]
                    .as_str()
                    .is_some_and(|name| self.custom_names.iter().any(|n| n == name)))
    }
}

impl Filter {
    /// Whether `namespace` is under a prefix asked, within `depth` of it
    /// (LangGraph's clients' `namespace_matches`: a prefix part without
    /// `:` also matches a part that has it, by the name before its `:`).
    fn reaches(&self, namespace: &[String]) -> bool {
        let Some(prefixes) = &self.namespaces else {
            return true;
        };
        prefixes.iter().any(|prefix| {
            prefix.len() <= namespace.len()
                && prefix.iter().zip(namespace).all(|(asked, part)| {
                    part == asked
                        || (!asked.contains(':')
                            && part.split_once(':').is_some_and(|(name, _)| name == asked))
                })
                && self
                    .depth
                    .is_none_or(|depth| (namespace.len() - prefix.len()) as u64 <= depth)
        })
    }
}

fn unknown_channel(what: &str) -> ApiError {
    let names: Vec<&str> = Channel::names().collect();
    ApiError::field(
        ErrorCode::InvalidRequest,
        "channels",
        format!(
            "{what} is not served: ask for any of {} or `custom:<name>`",
            names.join(", ")
        ),
    )
}

/// One event of the protocol.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ProtocolEvent {
    pub seq: Option<u64>,
    pub method: &'static str,
    pub data: Value,
    /// The subgraph that made it; empty for the run's own.
    pub namespace: Vec<String>,
}

impl ProtocolEvent {
    /// Its wire form, stamped `now` (milliseconds since the epoch).
    pub fn json(&self, now: i64) -> Value {
        let mut event = json!({
            "type": "event",
            "method": self.method,
            "params": {"namespace": self.namespace, "timestamp": now, "data": self.data},
        });
        if let Some(seq) = self.seq {
            event["seq"] = json!(seq);
            event["event_id"] = json!(seq.to_string());
        }
        event
    }
}

/// The first number of the thread's `ordinal`-th run (from 0).
pub(super) fn run_base(ordinal: usize) -> u64 {
    (ordinal as u64).saturating_add(1).saturating_mul(RUN_ROOM)
}

/// Tells one run of a thread as the protocol's events.
pub(super) struct RunEvents {
    base: u64,
    job: String,
    graph: String,
    /// The text of each message told so far and not finished, by id.
    texts: HashMap<String, String>,
    /// The interrupts last told, which a resume answers.
    interrupts: Vec<String>,
}

/// Numbers the events one frame makes.
struct Numbering {
    first: Option<u64>,
    made: u64,
    namespace: Vec<String>,
    out: Vec<ProtocolEvent>,
}

impl Numbering {
    fn push(&mut self, method: &'static str, data: Value) {
        let seq = self
            .first
            .map(|first| first + self.made.min(FRAME_ROOM - 1));
        self.made += 1;
        self.out.push(ProtocolEvent {
            seq,
            method,
            data,
            namespace: self.namespace.clone(),
        });
    }
}

impl RunEvents {
    /// The thread's `ordinal`-th run (from 0), job `job` of bundle `graph`.
    pub fn new(ordinal: usize, job: &str, graph: &str) -> Self {
        Self {
            base: run_base(ordinal),
            job: job.to_string(),
            graph: graph.to_string(),
            texts: HashMap::new(),
            interrupts: Vec::new(),
        }
    }

    /// The number of the run's last event: its end.
    pub fn last_seq(&self) -> u64 {
        self.base + RUN_ROOM - 1
    }

    /// The translator's modes the protocol's channels are made from.
    pub fn modes() -> Modes {
        Modes::read([
            "values",
            "updates",
            "messages",
            "events",
            "custom",
            "checkpoints",
            "tasks",
        ])
        .unwrap_or_default()
        .with(Mode::Lifecycle)
    }

    /// Where the events of a frame numbered `id` start (none for a live
    /// frame).
    fn first_of(&self, frame: &Frame) -> Option<u64> {
        match frame.event {
            "metadata" => Some(self.base),
            "end" | "error" => Some(self.last_seq()),
            _ => frame.id.map(|id| {
                (self.base + (id.saturating_add(1)).saturating_mul(FRAME_ROOM))
                    .min(self.last_seq() - FRAME_ROOM)
            }),
        }
    }

    /// The protocol's events of `frame`.
    pub fn tell(&mut self, frame: &Frame) -> Vec<ProtocolEvent> {
        let mut out = Numbering {
            first: self.first_of(frame),
            made: 0,
            namespace: frame.namespace.clone(),
            out: Vec::new(),
        };
        let data = &frame.data;
        match frame.event {
            "metadata" => out.push(
                "lifecycle",
                json!({"event": "running", "graph_name": self.graph}),
            ),
            "values" | "updates" if data.get("__interrupt__").is_some() => {
                self.interrupted(&data["__interrupt__"], &mut out)
            }
            "values" => out.push("values", data.clone()),
            "updates" => {
                for (node, values) in data.as_object().into_iter().flatten() {
                    out.push("updates", json!({"node": node, "values": values}));
                }
            }
            "messages/metadata" => {
                for (id, about) in data.as_object().into_iter().flatten() {
                    let node = about["metadata"]["langgraph_node"].as_str();
                    let role = if node == Some("tools") { "tool" } else { "ai" };
                    self.start(id, role, &about["metadata"], &mut out);
                }
            }
            "messages/partial" => self.partial(&data[0], &mut out),
            "messages/complete" => self.complete(&data[0], &mut out),
            "checkpoints" => out.push("checkpoints", data.clone()),
            "tasks" => out.push("tasks", data.clone()),
            "custom" => out.push("custom", json!({"name": "progress", "payload": data})),
            "events" => self.tool_event(data, &mut out),
            RESUMED => {
                let answered = std::mem::take(&mut self.interrupts);
                out.push("input.answered", json!({"interrupt_ids": answered}));
                out.push(
                    "lifecycle",
                    json!({"event": "running", "graph_name": self.graph}),
                );
            }
            // A nested run's start and end, in its namespace.
            "lifecycle" => out.push("lifecycle", data.clone()),
            // A cancelled run did not complete its work.
            "end" if data["cancelled"].is_string() => out.push(
                "lifecycle",
                json!({
                    "event": "failed", "graph_name": self.graph,
                    "error": format!("cancelled: {}", data["cancelled"].as_str().unwrap_or_default()),
                }),
            ),
            "end" => out.push(
                "lifecycle",
                json!({"event": "completed", "graph_name": self.graph}),
            ),
            "error" => out.push(
                "lifecycle",
                json!({"event": "failed", "graph_name": self.graph, "error": data["message"]}),
            ),
            _ => {}
        }
        out.out
    }

    /// A run parked for a person: each interrupt it waits on, then its
    /// state.
    fn interrupted(&mut self, interrupts: &Value, out: &mut Numbering) {
        self.interrupts.clear();
        for interrupt in interrupts.as_array().into_iter().flatten() {
            let id = interrupt["id"].as_str().unwrap_or_default().to_string();
            out.push(
                "input.requested",
                json!({
                    "interrupt_id": id,
                    // `payload` is the protocol's name, `value` the one
                    // LangGraph's Python client reads.
                    "payload": interrupt["value"],
                    "value": interrupt["value"],
                }),
            );
            self.interrupts.push(id);
        }
        out.push(
            "lifecycle",
            json!({"event": "interrupted", "graph_name": self.graph}),
        );
    }

    /// A message's start, once.
    fn start(&mut self, id: &str, role: &str, metadata: &Value, out: &mut Numbering) {
        if self.texts.contains_key(id) {
            return;
        }
        self.texts.insert(id.to_string(), String::new());
        out.push(
            "messages",
            json!({
                "event": "message-start", "id": id, "message_id": id, "role": role,
                "metadata": metadata,
            }),
        );
        out.push(
            "messages",
            json!({
                "event": "content-block-start", "message_id": id, "index": 0,
                "content": {"type": "text", "text": ""},
            }),
        );
    }

    /// What `text` adds to message `id`'s text told so far.
    fn delta(&mut self, id: &str, text: &str, out: &mut Numbering) {
        let Some(told) = self.texts.get_mut(id) else {
            return;
        };
        let Some(new) = text
            .strip_prefix(told.as_str())
            .filter(|new| !new.is_empty())
        else {
            return;
        };
        out.push(
            "messages",
            json!({
                "event": "content-block-delta", "message_id": id, "index": 0,
                "delta": {"type": "text-delta", "text": new},
            }),
        );
        *told = text.to_string();
    }

    /// A reply's text so far (`messages/partial`).
    fn partial(&mut self, chunk: &Value, out: &mut Numbering) {
        let id = chunk["id"].as_str().unwrap_or_default();
        self.delta(id, chunk["content"].as_str().unwrap_or_default(), out);
    }

    /// A whole message: its start when not told yet, the rest of its text,
    /// each block's end (its text, then each tool call) and its finish.
    fn complete(&mut self, message: &Value, out: &mut Numbering) {
        let id = message["id"].as_str().unwrap_or_default().to_string();
        let role = match message["type"].as_str() {
            Some("tool") => "tool",
            Some("human") => "human",
            _ => "ai",
        };
        self.start(&id, role, &json!({}), out);
        let text = match &message["content"] {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        self.delta(&id, &text, out);
        self.texts.remove(&id);
        out.push(
            "messages",
            json!({
                "event": "content-block-finish", "message_id": id, "index": 0,
                "content": {"type": "text", "text": text},
            }),
        );
        for (k, call) in message["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let (call_id, name) = (&call["id"], &call["name"]);
            out.push(
                "messages",
                json!({
                    "event": "content-block-start", "message_id": id, "index": k + 1,
                    "content": {"type": "tool_call_chunk", "id": call_id, "name": name, "args": ""},
                }),
            );
            out.push(
                "messages",
                json!({
                    "event": "content-block-finish", "message_id": id, "index": k + 1,
                    "content": {"type": "tool_call", "id": call_id, "name": name, "args": call["args"]},
                }),
            );
        }
        let mut finish = Map::new();
        finish.insert("event".into(), json!("message-finish"));
        finish.insert("message_id".into(), json!(id));
        if message["usage_metadata"].is_object() {
            finish.insert("usage".into(), message["usage_metadata"].clone());
        }
        out.push("messages", Value::Object(finish));
    }

    /// A tool call's start and end (LangChain's `on_tool_start` and
    /// `on_tool_end`, whose run ids are `<run>:t<turn>:<call id>`, the run
    /// the job's or a nested one, `<job>/<key>`).
    fn tool_event(&self, event: &Value, out: &mut Numbering) {
        let call_id = event["run_id"]
            .as_str()
            .and_then(|run| run.strip_prefix(self.job.as_str()))
            .and_then(|rest| rest.split_once(":t"))
            .and_then(|(_, rest)| rest.split_once(':'))
            .map(|(_, call)| call.to_string())
            .unwrap_or_default();
        let output = &event["data"]["output"];
        match event["event"].as_str() {
            Some("on_tool_start") => out.push(
                "tools",
                json!({
                    "event": "tool-started", "tool_call_id": call_id,
                    "tool_name": event["name"], "input": event["data"]["input"],
                }),
            ),
            Some("on_tool_end") if output["status"] == "error" => out.push(
                "tools",
                json!({
                    "event": "tool-error", "tool_call_id": call_id,
                    "message": output["content"],
                }),
            ),
            Some("on_tool_end") => out.push(
                "tools",
                json!({
                    "event": "tool-finished", "tool_call_id": call_id,
                    "output": output["content"],
                }),
            ),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;
