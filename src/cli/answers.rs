//! Puts a job's streamed answer in its place among the job's durable events.
//!
//! On the daemon's event stream the model's tokens arrive live while the
//! durable events (the turn's header `ModelRequest`, its `ModelResponse`, the
//! tool calls) arrive as they are stored, a little later: printed as they
//! come, the second turn's answer would appear before `turn 2 · asking …`,
//! between the first turn's tool lines. This module decides what to print
//! when: a turn's tokens wait until its header is printed, print on one line
//! after it, and the turn's `ModelResponse` completes that line with whatever
//! did not stream (tokens sent before the client connected are never seen)
//! before the response's own line. Tokens of a turn already answered are
//! dropped: its `ModelResponse` printed the whole answer.
//!
//! Pure text in, text out: the printer writes what this returns.

use std::collections::{HashMap, HashSet};

use crate::events::{Event, EventEnvelope};

/// A model turn of one run (a job's nested agent runs have their own).
type Turn = (String, u32);

/// The prefix of an answer's first line.
pub const ANSWER_MARK: &str = "  💬 ";
/// The indentation of an answer's further lines (under the text after the mark).
const ANSWER_INDENT: &str = "     ";

/// An answer as printed: the mark, then the text with its lines indented.
pub fn answer_lines(text: &str) -> String {
    format!("{ANSWER_MARK}{}", indented(text))
}

fn indented(text: &str) -> String {
    text.replace('\n', &format!("\n{ANSWER_INDENT}"))
}

/// What the printer prints around one durable event.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct AroundEvent {
    /// Before the event's line(s): the end of an answer line.
    pub before: String,
    /// The event's answer is already on screen: print the event without it.
    pub answer_shown: bool,
}

/// The state of a job's answer stream.
#[derive(Debug, Default)]
pub struct Answers {
    /// The turn whose header was printed last and whose answer is not.
    open: Option<Turn>,
    /// Whether the open turn's answer line has text and no line end yet.
    line_open: bool,
    /// What of the open turn's answer is on screen (without leading blanks).
    shown: String,
    /// Tokens of turns whose header has not been printed yet.
    pending: HashMap<Turn, String>,
    /// Turns whose `ModelResponse` has been printed.
    answered: HashSet<Turn>,
}

impl Answers {
    /// What to print for a token now: the text, after the answer mark on the
    /// turn's first token; nothing while the token waits for its header or
    /// when its turn is over.
    pub fn token(&mut self, run_id: &str, turn: u32, text: &str) -> String {
        let key = (run_id.to_string(), turn);
        if self.answered.contains(&key) {
            return String::new();
        }
        if self.open.as_ref() != Some(&key) {
            self.pending.entry(key).or_default().push_str(text);
            return String::new();
        }
        self.show(text)
    }

    fn show(&mut self, text: &str) -> String {
        let text = if self.shown.is_empty() {
            text.trim_start()
        } else {
            text
        };
        if text.is_empty() {
            return String::new();
        }
        let mark = if self.line_open { "" } else { ANSWER_MARK };
        self.line_open = true;
        self.shown.push_str(text);
        format!("{mark}{}", indented(text))
    }

    /// Ends the open answer line, if any: nothing more prints on it.
    fn close_line(&mut self) -> String {
        if std::mem::take(&mut self.line_open) {
            "\n".into()
        } else {
            String::new()
        }
    }

    /// What to print before a durable event, and whether its answer is
    /// already on screen.
    pub fn before_event(&mut self, envelope: &EventEnvelope) -> AroundEvent {
        let Event::ModelResponse {
            turn,
            parsed_content: content,
            ..
        } = &envelope.event
        else {
            return AroundEvent {
                before: self.close_line(),
                answer_shown: false,
            };
        };
        let key = (envelope.run_id.clone(), *turn);
        let streaming_here = self.open.as_ref() == Some(&key) && self.line_open;
        let full = content.as_deref().unwrap_or_default().trim();
        let rest = full.strip_prefix(self.shown.as_str());
        self.pending.remove(&key);
        self.answered.insert(key.clone());
        if self.open.as_ref() == Some(&key) {
            self.open = None;
        }
        self.shown.clear();
        match rest {
            // The line holds the start of this answer: finish it.
            Some(rest) if streaming_here => {
                self.line_open = false;
                AroundEvent {
                    before: format!("{}\n", indented(rest.trim_end())),
                    answer_shown: true,
                }
            }
            // Nothing streamed, or not the answer's start (a template's
            // markup, say): the event prints the answer as parsed.
            _ => AroundEvent {
                before: self.close_line(),
                answer_shown: false,
            },
        }
    }

    /// What to print after a durable event: after a turn's header, the
    /// tokens of that turn that arrived before it.
    pub fn after_event(&mut self, envelope: &EventEnvelope) -> String {
        let Event::ModelRequest { turn, .. } = &envelope.event else {
            return String::new();
        };
        let key = (envelope.run_id.clone(), *turn);
        self.open = Some(key.clone());
        self.shown.clear();
        match self.pending.remove(&key) {
            Some(early) => self.show(&early),
            None => String::new(),
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

    fn request(run_id: &str, turn: u32) -> EventEnvelope {
        event(
            run_id,
            json!({"type": "ModelRequest", "turn": turn, "messages_count": 2, "tools_count": 0, "model": "m"}),
        )
    }

    fn response(run_id: &str, turn: u32, content: &str) -> EventEnvelope {
        event(
            run_id,
            json!({"type": "ModelResponse", "turn": turn, "duration_ms": 1, "content": content,
                   "parsed_content": content, "tool_calls_count": 0, "parsed_tool_calls_count": 0, "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}),
        )
    }

    fn tool_result(run_id: &str, turn: u32) -> EventEnvelope {
        event(
            run_id,
            json!({"type": "ToolResult", "turn": turn, "tool_name": "add", "call_id": "c",
                   "is_error": false, "duration_ms": 1, "output_preview": "5"}),
        )
    }

    #[test]
    fn tokens_before_their_header_wait_for_it_and_the_response_completes_the_line() {
        let mut answers = Answers::default();
        assert_eq!(
            answers.token("r", 2, "2 + 3 "),
            "",
            "turn 2 has no header yet"
        );
        let around = answers.before_event(&tool_result("r", 1));
        assert_eq!(around.before, "", "the tool line is not split");
        assert_eq!(answers.after_event(&tool_result("r", 1)), "");
        answers.before_event(&request("r", 2));
        assert_eq!(answers.after_event(&request("r", 2)), "  💬 2 + 3 ");
        assert_eq!(answers.token("r", 2, "= 5"), "= 5");
        let around = answers.before_event(&response("r", 2, "2 + 3 = 5, done."));
        assert_eq!(
            around,
            AroundEvent {
                before: ", done.\n".into(),
                answer_shown: true
            }
        );
        assert_eq!(answers.token("r", 2, " late"), "", "the turn is over");
    }

    #[test]
    fn an_answer_nobody_streamed_is_printed_by_its_event() {
        let mut answers = Answers::default();
        answers.before_event(&request("r", 1));
        answers.after_event(&request("r", 1));
        let around = answers.before_event(&response("r", 1, "hello"));
        assert_eq!(around, AroundEvent::default());
    }

    #[test]
    fn another_run_ends_the_line_and_its_tokens_wait_for_their_own_header() {
        let mut answers = Answers::default();
        answers.before_event(&request("outer", 1));
        answers.after_event(&request("outer", 1));
        assert_eq!(answers.token("outer", 1, "\n asking"), "  💬 asking");
        assert_eq!(answers.token("inner", 1, "five"), "");
        assert_eq!(answers.before_event(&request("inner", 1)).before, "\n");
        assert_eq!(answers.after_event(&request("inner", 1)), "  💬 five");
        assert_eq!(answers.token("r", 1, "a\nb"), "");
    }

    #[test]
    fn answer_lines_indent_every_line_under_the_mark() {
        assert_eq!(answer_lines("a\nb"), "  💬 a\n     b");
    }
}
