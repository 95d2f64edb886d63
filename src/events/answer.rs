//! A job's answer as a stream: the one rule for what of the model's live
//! tokens a client is sent as the answer (`/v1/chat/completions` with
//! `stream: true`, `/api/query` with `stream`, the CLI's `--follow`), so
//! that the streamed text, concatenated, is the job's answer.
//!
//! - Only the job's own run answers: nested runs (agent tools, workflow
//!   stages, group-chat agents) stream tokens too, and are not the answer.
//! - A turn's text is held while the turn could still become a tool call,
//!   and dropped when it does (a `ToolCall` of that turn, a `ModelResponse`
//!   with calls, or call markup in the text, found by the model plugin's
//!   [`CallStart`]). When the job's bundle offers no tools, a turn can
//!   become a call only through markup, so its text before any possible
//!   markup is sent as it arrives; otherwise a turn's text is sent once
//!   its `ModelResponse` says it called nothing.
//! - A turn is sent as parsed (its `ModelResponse`'s `parsed_content`),
//!   not as the raw tokens: a retried model call, whose failed attempt sent
//!   tokens too, does not send them twice.
//! - At the end, whatever of the answer was not streamed is sent (a resumed
//!   job's journaled turns, a termination tool's output).
//!
//! Pure: tokens and events in, text out.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Event, EventEnvelope};

/// The model plugin's answer to "where could a tool call begin in this
/// partial text": the byte offset, or `None` (see `ModelPlugin::call_start`).
pub type CallStart = Arc<dyn Fn(&str) -> Option<usize> + Send + Sync>;

/// What is known of one turn of the job's own run.
#[derive(Debug, Default)]
struct Turn {
    /// Its tokens so far.
    text: String,
    /// Bytes of `text` already sent.
    sent: usize,
    /// Decided: it called tools (`Some(false)`) or answered (`Some(true)`).
    answered: Option<bool>,
}

/// The answer stream of one job.
pub struct AnswerStream {
    job: String,
    call_start: Option<CallStart>,
    /// Whether a turn's text may be sent before its turn is decided: no
    /// tools are offered, so only markup could make it a call.
    early: bool,
    turns: BTreeMap<u32, Turn>,
    /// Everything sent so far.
    sent: String,
    ended: bool,
}

impl AnswerStream {
    /// The stream of job `job`. `call_start` is its bundle's model plugin's
    /// (none when unknown: turns are held until decided); `tools_offered`
    /// says whether a turn can become a call without markup.
    pub fn new(job: &str, call_start: Option<CallStart>, tools_offered: bool) -> Self {
        Self {
            job: job.to_string(),
            early: !tools_offered && call_start.is_some(),
            call_start,
            turns: BTreeMap::new(),
            sent: String::new(),
            ended: false,
        }
    }

    /// Everything sent so far.
    pub fn sent(&self) -> &str {
        &self.sent
    }

    /// What to send for a live token of run `run_id`'s `turn`.
    pub fn token(&mut self, run_id: &str, turn: u32, text: &str) -> String {
        if self.ended || run_id != self.job {
            return String::new();
        }
        let entry = self.turns.entry(turn).or_default();
        if entry.answered.is_some() {
            return String::new();
        }
        entry.text.push_str(text);
        if !self.early {
            return String::new();
        }
        // Text from where a call could begin waits for the turn's end.
        let safe = self
            .call_start
            .as_ref()
            .and_then(|find| find(&entry.text))
            .unwrap_or(entry.text.len());
        if safe <= entry.sent {
            return String::new();
        }
        let out = entry.text[entry.sent..safe].to_string();
        entry.sent = safe;
        self.sent.push_str(&out);
        out
    }

    /// What to send for an event of the job (live or stored; each at most
    /// once matters).
    pub fn event(&mut self, envelope: &EventEnvelope) -> String {
        if self.ended || envelope.run_id != self.job || envelope.parent.is_some() {
            return String::new();
        }
        match &envelope.event {
            Event::ToolCall { turn, .. } => {
                self.turns.entry(*turn).or_default().answered = Some(false);
                String::new()
            }
            Event::ModelResponse {
                turn,
                parsed_content,
                parsed_tool_calls_count,
                ..
            } => {
                let entry = self.turns.entry(*turn).or_default();
                if entry.answered.is_some() {
                    return String::new();
                }
                let answered = *parsed_tool_calls_count == 0;
                entry.answered = Some(answered);
                if !answered {
                    return String::new();
                }
                let content = parsed_content.as_deref().unwrap_or_default();
                self.extend_to(content)
            }
            _ => String::new(),
        }
    }

    /// What is left to send of `answer` once the job has ended.
    pub fn end(&mut self, answer: &str) -> String {
        let out = self.extend_to(answer);
        self.ended = true;
        out
    }

    /// What `full` adds to what was sent, when what was sent starts it.
    fn extend_to(&mut self, full: &str) -> String {
        match full.strip_prefix(self.sent.as_str()) {
            Some(rest) => {
                let rest = rest.to_string();
                self.sent.push_str(&rest);
                rest
            }
            None => {
                tracing::warn!(job_id = %self.job, "the streamed text is not the start of the answer; the rest is not streamed");
                String::new()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(run_id: &str, event: serde_json::Value) -> EventEnvelope {
        crate::events::test_envelope(run_id, event)
    }

    fn response(turn: u32, content: &str, calls: usize) -> EventEnvelope {
        event(
            "j",
            json!({"type": "ModelResponse", "turn": turn, "duration_ms": 1, "content": content,
                   "tool_calls_count": calls, "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                   "parsed_content": content, "parsed_tool_calls_count": calls}),
        )
    }

    fn tool_call(turn: u32) -> EventEnvelope {
        event(
            "j",
            json!({"type": "ToolCall", "turn": turn, "tool_name": "add", "call_id": "c", "arguments": {}}),
        )
    }

    fn qwen_like() -> CallStart {
        Arc::new(|text: &str| {
            ["<tool_call>"]
                .iter()
                .filter_map(|m| text.find(m))
                .min()
                .or_else(|| {
                    text.rfind('<')
                        .filter(|&i| "<tool_call>".starts_with(&text[i..]))
                })
        })
    }

    #[test]
    fn a_tool_turns_text_is_never_sent_and_the_answer_is() {
        let mut stream = AnswerStream::new("j", None, true);
        let mut out = stream.token("j", 1, "I'll compute ");
        out += &stream.token("j", 1, "both parts.");
        out += &stream.event(&tool_call(1));
        out += &stream.token("j/1:0", 1, "nested text");
        out += &stream.token("j", 2, "2 + 3 = 5.");
        out += &stream.event(&response(1, "I'll compute both parts.", 2));
        out += &stream.event(&response(2, "2 + 3 = 5.", 0));
        out += &stream.end("2 + 3 = 5.");
        assert_eq!(out, "2 + 3 = 5.");
    }

    #[test]
    fn without_tools_text_streams_up_to_where_markup_could_begin() {
        let mut stream = AnswerStream::new("j", Some(qwen_like()), false);
        assert_eq!(stream.token("j", 1, "Hello"), "Hello");
        assert_eq!(stream.token("j", 1, " there <tool"), " there ");
        assert_eq!(stream.token("j", 1, "box> ok"), "<toolbox> ok");
        assert_eq!(stream.end("Hello there <toolbox> ok"), "");
        assert_eq!(stream.sent(), "Hello there <toolbox> ok");
    }

    #[test]
    fn a_retried_model_call_sends_its_turn_once_as_parsed() {
        let mut stream = AnswerStream::new("j", None, true);
        let mut out = stream.token("j", 1, "The ans");
        out += &stream.token("j", 1, "The answer is 4.");
        out += &stream.event(&response(1, "The answer is 4.", 0));
        out += &stream.end("The answer is 4.");
        assert_eq!(out, "The answer is 4.");
    }

    #[test]
    fn what_did_not_stream_is_sent_at_the_end() {
        let mut stream = AnswerStream::new("j", None, true);
        assert_eq!(stream.end("from the journal"), "from the journal");
        assert_eq!(stream.token("j", 3, "late"), "");
    }
}
