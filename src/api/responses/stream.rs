//! A job told as a Responses API event stream (`response.created`, output
//! items, `response.output_text.delta`, …, `response.completed`), and the
//! rule that numbers those events so a stream resumes with
//! `starting_after` — also across a daemon restart.
//!
//! A `sequence_number` is a pure function of where the event stands in the
//! job's durable log: the stored event it follows (`stored`), how many bytes
//! of the answer were sent before or with it (`text`), and which step it is
//! of that place (`step`), packed as `stored << 27 | text << 4 | step`. The
//! stored events and the answer are the same after a restart, so numbers
//! are too; live tokens (never stored) count by the answer's bytes, which is
//! why a client that resumes gets the rest of the text however it was cut
//! into deltas. Numbers grow but are not contiguous.
//!
//! Text comes from the job's one answer stream ([`AnswerStream`]), as for
//! chat completions; the job's own tool calls are `mcp_call` items (the
//! daemon runs them: see [`super::items`]), opened at the call and done at
//! its result. A call that waits for a person (at any depth) is an `mcp_approval_request`
//! item, the Responses API's one item for a call awaiting approval, sent
//! when the job parks; the stream stays open and goes on after the
//! decision (`POST /v1/jobs/{id}/approvals/{call}`, named in the item).
//! Calls of the caller's own tools are `function_call` items, sent when
//! the job parks on them ([`Translator::hand_over`]); the stream ends
//! there, as the non-streamed response does.

use serde_json::{Value, json};

use super::super::caller_tools::parks;
use super::super::feed::approval_required;
use super::items;
use super::object::{ResponseObject, ResponseStatus};
use crate::events::answer::AnswerStream;
use crate::events::{Event, EventEnvelope};
use crate::queue::Job;

/// Bits of a sequence number for the step at one place of the log.
const STEP_BITS: u32 = 4;
/// Bits for the answer's bytes sent (an answer past 8 MiB numbers its
/// later deltas one by one, see [`Translator::number`]).
const TEXT_BITS: u32 = 23;
const TEXT_MAX: u64 = (1 << TEXT_BITS) - 1;

/// The steps at one place of the log, in the order they are sent. A
/// call's steps stand at its `ToolCall` event, its result's at its
/// `ToolResult` event (or at the end, for a call that never got one), so
/// they share values; all of them come before the message's.
mod step {
    pub const TEXT: u64 = 0;
    pub const CREATED: u64 = 1;
    pub const IN_PROGRESS: u64 = 2;
    pub const CALL_ADDED: u64 = 3;
    pub const CALL_IN_PROGRESS: u64 = 4;
    pub const CALL_ARGS_DELTA: u64 = 5;
    pub const CALL_ARGS_DONE: u64 = 6;
    pub const CALL_RESULT: u64 = 3;
    pub const CALL_DONE: u64 = 4;
    pub const MESSAGE_ADDED: u64 = 7;
    pub const PART_ADDED: u64 = 8;
    pub const TEXT_DONE: u64 = 9;
    pub const PART_DONE: u64 = 10;
    pub const MESSAGE_DONE: u64 = 11;
    pub const FINAL: u64 = 12;
    pub const APPROVAL_ADDED: u64 = 13;
    pub const APPROVAL_DONE: u64 = 14;
    /// A park on the caller's calls: its events stand at the park's stored
    /// event, where nothing else is, numbered one after another from here
    /// (past the step bits for many calls; a resume point there is read
    /// by where the translator stands, see `park.rs`).
    pub const HANDED_OVER: u64 = 1;
}

/// Where an event stands: see the module's documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Position {
    pub stored: u64,
    pub text: u64,
    pub step: u64,
}

impl Position {
    pub fn number(self) -> u64 {
        (self.stored << (TEXT_BITS + STEP_BITS))
            | (self.text.min(TEXT_MAX) << STEP_BITS)
            | self.step
    }

    pub fn of(number: u64) -> Self {
        Self {
            stored: number >> (TEXT_BITS + STEP_BITS),
            text: (number >> STEP_BITS) & TEXT_MAX,
            step: number & ((1 << STEP_BITS) - 1),
        }
    }
}

/// One event of the stream: its `type` and its body (with `type` and
/// `sequence_number` in it).
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub kind: &'static str,
    pub body: Value,
}

/// The message item's id.
fn message_id(job_id: &str) -> String {
    format!("msg_{job_id}")
}

/// Turns a job's feed into Responses events. Fed from the start of the log
/// every time; with a resume point it sends only what follows it.
pub struct Translator {
    job_id: String,
    answer: AnswerStream,
    /// The client has every event numbered up to this one.
    after: Option<u64>,
    /// Bytes of the answer the client has.
    client_text: u64,
    /// Whether the client has the message item opened, and its content
    /// part (a client can leave between the two).
    client_opened: bool,
    client_has_part: bool,
    last: Option<u64>,
    stored: u64,
    /// The answer so far.
    text: String,
    /// The output items so far (calls, then the message).
    pub items: Vec<Value>,
    /// The calls without a result yet: call id, index in `items`.
    open_calls: Vec<(String, usize)>,
    /// The message item's index in `items`, once opened.
    message: Option<usize>,
    /// The caller's tools: their calls are the client's, never `mcp_call`
    /// items (see [`items::function_call`]).
    caller_tools: Vec<String>,
    /// Whether the last stored event parked the job in `needs_attention`.
    at_park: bool,
}

impl Translator {
    /// For a stream of job `job_id` that resumes after `after` (none: from
    /// the start).
    pub fn new(job_id: &str, answer: AnswerStream, after: Option<u64>) -> Self {
        let resume = after.map(Position::of).unwrap_or_default();
        let opened_by_step = matches!(
            resume.step,
            step::MESSAGE_ADDED | step::PART_ADDED | step::TEXT_DONE..=step::FINAL
        );
        let client_opened = after.is_some() && (resume.text > 0 || opened_by_step);
        Self {
            job_id: job_id.to_string(),
            answer,
            after,
            client_text: resume.text,
            client_opened,
            client_has_part: client_opened
                && !(resume.text == 0 && resume.step == step::MESSAGE_ADDED),
            last: None,
            stored: 0,
            text: String::new(),
            items: Vec::new(),
            open_calls: Vec::new(),
            message: None,
            caller_tools: Vec::new(),
            at_park: false,
        }
    }

    /// The same, told that calls of `tools` are the caller's to run.
    pub fn handing_over(mut self, tools: impl IntoIterator<Item = String>) -> Self {
        self.caller_tools = tools.into_iter().collect();
        self
    }

    /// The number of an event at `step` here; strictly after the last one
    /// sent (past the text cap several deltas share a place).
    fn number(&mut self, step: u64) -> u64 {
        let place = Position {
            stored: self.stored,
            text: self.text.len() as u64,
            step,
        };
        let number = match self.last {
            Some(last) => place.number().max(last + 1),
            None => place.number(),
        };
        self.last = Some(number);
        number
    }

    /// An event at `step`, unless the client already has it.
    fn frame(&mut self, step: u64, kind: &'static str, mut body: Value) -> Option<Frame> {
        let number = self.number(step);
        if self.after.is_some_and(|after| number <= after) {
            return None;
        }
        body["type"] = json!(kind);
        body["sequence_number"] = json!(number);
        Some(Frame { kind, body })
    }

    /// `response.created` and `response.in_progress`, given the response
    /// as it starts.
    pub fn start(&mut self, response: ResponseObject) -> Vec<Frame> {
        let mut running = response.clone();
        running.status = ResponseStatus::InProgress;
        let created = self.frame(
            step::CREATED,
            "response.created",
            json!({"response": as_json(&response)}),
        );
        let running = as_json(&running);
        let progress = self.frame(
            step::IN_PROGRESS,
            "response.in_progress",
            json!({"response": running}),
        );
        created.into_iter().chain(progress).collect()
    }

    /// A live token of the job.
    pub fn token(&mut self, run_id: &str, turn: u32, text: &str) -> Vec<Frame> {
        let piece = self.answer.token(run_id, turn, text);
        self.text_frames(&piece)
    }

    /// A stored event (`seq`, its JSON as stored).
    pub fn stored(&mut self, seq: u64, json: &str) -> Vec<Frame> {
        self.stored = seq;
        self.at_park = false;
        let Ok(envelope) = serde_json::from_str::<EventEnvelope>(json) else {
            return Vec::new();
        };
        if parks(&self.job_id, &envelope) {
            self.parked();
        }
        let mut frames = Vec::new();
        if let Some(parked) = approval_required(&self.job_id, json) {
            frames.extend(self.approval(&envelope.bundle, &parked));
        }
        // Calls of nested agents are theirs: the response shows its own.
        let own = envelope.run_id == self.job_id && envelope.parent.is_none();
        match &envelope.event {
            Event::ToolCall {
                tool_name,
                call_id,
                arguments,
                ..
            } if own && !self.caller_tools.contains(tool_name) => {
                frames.extend(self.call(&envelope.bundle, tool_name, call_id, arguments))
            }
            Event::ToolResult {
                call_id,
                is_error,
                output_preview,
                error_type,
                ..
            } if own => frames.extend(self.result(
                call_id,
                *is_error,
                output_preview,
                error_type.as_deref(),
            )),
            _ => {}
        }
        let piece = self.answer.event(&envelope);
        frames.extend(self.text_frames(&piece));
        frames
    }

    /// An `mcp_call` item for a tool call of the job's own run, open
    /// until its result. A call already shown (an attempt that resumed and
    /// ran it again) is not shown twice.
    fn call(&mut self, bundle: &str, tool: &str, call_id: &str, arguments: &Value) -> Vec<Frame> {
        if self.items.iter().any(|item| item["call_id"] == call_id) {
            return Vec::new();
        }
        let arguments = arguments.to_string();
        let item_id = items::call_item_id(call_id);
        let index = self.items.len();
        let item = items::started(call_id, bundle, tool, &arguments);
        self.items.push(item.clone());
        self.open_calls.push((call_id.to_string(), index));
        let mut added = item;
        added["arguments"] = json!("");
        [
            self.frame(
                step::CALL_ADDED,
                "response.output_item.added",
                json!({"output_index": index, "item": added}),
            ),
            self.frame(
                step::CALL_IN_PROGRESS,
                "response.mcp_call.in_progress",
                json!({"item_id": item_id, "output_index": index}),
            ),
            self.frame(
                step::CALL_ARGS_DELTA,
                "response.mcp_call_arguments.delta",
                json!({"item_id": item_id, "output_index": index, "delta": arguments}),
            ),
            self.frame(
                step::CALL_ARGS_DONE,
                "response.mcp_call_arguments.done",
                json!({"item_id": item_id, "output_index": index, "arguments": arguments}),
            ),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// The result of an open call: its item completed (with the output)
    /// or failed (with the error), and done.
    fn result(
        &mut self,
        call_id: &str,
        is_error: bool,
        output: &str,
        error_type: Option<&str>,
    ) -> Vec<Frame> {
        let Some(open) = self.open_calls.iter().position(|(id, _)| id == call_id) else {
            return Vec::new();
        };
        let (_, index) = self.open_calls.remove(open);
        items::finish(&mut self.items[index], is_error, output, error_type);
        let kind = match is_error {
            true => "response.mcp_call.failed",
            false => "response.mcp_call.completed",
        };
        self.close_call(index, Some(kind))
    }

    /// `response.mcp_call.completed`/`.failed` (`kind`, if any) and
    /// `response.output_item.done` for the call item at `index`.
    fn close_call(&mut self, index: usize, kind: Option<&'static str>) -> Vec<Frame> {
        let item = self.items[index].clone();
        let ended = kind.and_then(|kind| {
            self.frame(
                step::CALL_RESULT,
                kind,
                json!({"item_id": item["id"], "output_index": index}),
            )
        });
        let done = self.frame(
            step::CALL_DONE,
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
        ended.into_iter().chain(done).collect()
    }

    /// An `mcp_approval_request` item for a call the job waits on (the
    /// approval frame of the job's other streams, `parked`): its `name` and
    /// `arguments` as the API has them, `server_label` the bundle whose tool
    /// it is, and where to decide.
    fn approval(&mut self, bundle: &str, parked: &Value) -> Vec<Frame> {
        let call_id = parked["call_id"].as_str().unwrap_or_default();
        let request_id = format!("mcpr_{call_id}");
        // The call's own item (open: the job records a call before it
        // parks on it) names the request, as the API links the two.
        if let Some(call) = self
            .items
            .iter_mut()
            .find(|item| item["type"] == "mcp_call" && item["call_id"] == call_id)
        {
            call["approval_request_id"] = json!(request_id);
        }
        let index = self.items.len();
        let item = json!({"type": "mcp_approval_request", "id": request_id,
                          "server_label": bundle, "name": parked["tool"],
                          "arguments": parked["arguments"].to_string(),
                          "call_id": call_id, "digest": parked["digest"],
                          "decide": parked["decide"]});
        self.items.push(item.clone());
        [
            self.frame(
                step::APPROVAL_ADDED,
                "response.output_item.added",
                json!({"output_index": index, "item": item}),
            ),
            self.frame(
                step::APPROVAL_DONE,
                "response.output_item.done",
                json!({"output_index": index, "item": item}),
            ),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// Opens the message item (once), for text or the end.
    fn open_message(&mut self) -> Vec<Frame> {
        if self.message.is_some() {
            return Vec::new();
        }
        let index = self.items.len();
        let id = message_id(&self.job_id);
        let item = json!({"type": "message", "id": id, "role": "assistant", "status": "in_progress", "content": []});
        self.items.push(item.clone());
        self.message = Some(index);
        let added = self.frame(
            step::MESSAGE_ADDED,
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
        );
        let part = self.frame(
            step::PART_ADDED,
            "response.content_part.added",
            json!({"item_id": id, "output_index": index, "content_index": 0, "part": text_part("")}),
        );
        if self.client_has_part {
            return Vec::new();
        }
        if self.client_opened {
            return part.into_iter().collect();
        }
        added.into_iter().chain(part).collect()
    }

    /// The frames for `piece` of the answer: the message opened, then a
    /// delta with what the client does not have yet.
    fn text_frames(&mut self, piece: &str) -> Vec<Frame> {
        if piece.is_empty() {
            return Vec::new();
        }
        let mut frames = self.open_message();
        let start = self.text.len() as u64;
        self.text.push_str(piece);
        let skip = self.client_text.saturating_sub(start) as usize;
        let number = self.number(step::TEXT);
        let fresh = piece.get(skip.min(piece.len())..).unwrap_or_default();
        if fresh.is_empty() || self.after.is_some_and(|after| number <= after) {
            return frames;
        }
        let index = self.message.unwrap_or_default();
        frames.push(Frame {
            kind: "response.output_text.delta",
            body: json!({"type": "response.output_text.delta", "sequence_number": number,
                         "item_id": message_id(&self.job_id), "output_index": index,
                         "content_index": 0, "delta": fresh, "logprobs": []}),
        });
        frames
    }

    /// The job ended: the rest of the answer, the message closed, and the
    /// final event (`response.completed`, `.failed`, `.cancelled`) with
    /// `response` (see [`super::object::response`]) built by the caller
    /// from [`Translator::items`].
    pub fn end(
        &mut self,
        job: &Job,
        response: impl FnOnce(&[Value]) -> ResponseObject,
    ) -> Vec<Frame> {
        // The end's place follows every stored event.
        self.stored += 1;
        let mut frames = Vec::new();
        for (_, index) in std::mem::take(&mut self.open_calls) {
            items::abandon(&mut self.items[index]);
            frames.extend(self.close_call(index, None));
        }
        let answer = job
            .answer()
            .filter(|_| job.state == crate::queue::JobState::Succeeded);
        if let Some(answer) = answer {
            let rest = self.answer.end(answer);
            frames.extend(self.text_frames(&rest));
            frames.extend(self.open_message());
        }
        if let Some(index) = self.message {
            frames.extend(self.close_message(index));
        }
        let body = response(&self.items);
        let kind = match body.status {
            ResponseStatus::Completed => "response.completed",
            ResponseStatus::Cancelled => "response.cancelled",
            _ => "response.failed",
        };
        frames.extend(self.frame(step::FINAL, kind, json!({"response": as_json(&body)})));
        frames
    }

    fn close_message(&mut self, index: usize) -> Vec<Frame> {
        let id = message_id(&self.job_id);
        let item = json!({"type": "message", "id": id, "role": "assistant", "status": "completed",
                          "content": [text_part(&self.text)]});
        self.items[index] = item.clone();
        let text = self.text.clone();
        [
            self.frame(
                step::TEXT_DONE,
                "response.output_text.done",
                json!({"item_id": id, "output_index": index, "content_index": 0, "text": text, "logprobs": []}),
            ),
            self.frame(
                step::PART_DONE,
                "response.content_part.done",
                json!({"item_id": id, "output_index": index, "content_index": 0, "part": text_part(&text)}),
            ),
            self.frame(
                step::MESSAGE_DONE,
                "response.output_item.done",
                json!({"output_index": index, "item": item}),
            ),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

/// A response object as an event's field.
fn as_json(response: &ResponseObject) -> Value {
    serde_json::to_value(response).unwrap_or_default()
}

/// An `output_text` content part.
pub fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

mod park;
#[cfg(test)]
mod tests;
