//! Prints events as they happen: a readable form for people, JSON lines for
//! programs. Used by `run`, and by `submit --follow` / `watch` on the
//! daemon's event stream.

use std::io::Write;
use std::sync::Mutex;

use async_trait::async_trait;

use super::answers::{Answers, answer_lines};
use super::words::count;
use crate::events::answer::AnswerStream;
use crate::events::{Event, EventEnvelope, Observer, ObserverError, TokenDelta};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Human,
    Json,
}

/// Writes each event to stdout.
pub struct Printer {
    format: Format,
    /// Whether streamed tokens are shown (`submit --follow`, `watch`).
    stream_tokens: bool,
    /// Where the streamed answer goes among the events.
    answers: Mutex<Answers>,
    /// What of the tokens is the job's answer (the daemon's one rule,
    /// [`AnswerStream`]): a tool turn's text is not.
    answer: Mutex<Option<AnswerStream>>,
}

impl Printer {
    /// What the job's answer stream lets out of a token or an event of run
    /// `run_id` (the stream starts with the first: its job is the run's).
    fn answer_text(&self, run_id: &str, feed: impl FnOnce(&mut AnswerStream) -> String) -> String {
        let Ok(mut answer) = self.answer.lock() else {
            return String::new();
        };
        // The CLI knows neither the bundle's tools nor its model plugin:
        // every turn is held until it is decided.
        let job = run_id.split('/').next().unwrap_or(run_id);
        feed(answer.get_or_insert_with(|| AnswerStream::new(job, None, true)))
    }
}

impl Printer {
    pub fn new(format: Format) -> Self {
        Self {
            format,
            stream_tokens: false,
            answers: Mutex::default(),
            answer: Mutex::default(),
        }
    }

    pub fn streaming(mut self) -> Self {
        self.stream_tokens = true;
        self
    }

    pub fn print(&self, envelope: &EventEnvelope) {
        let text = match self.format {
            Format::Json => serde_json::to_string(envelope).unwrap_or_default(),
            Format::Human => match human(&envelope.run_id, &envelope.event) {
                Some(t) => t,
                None => return,
            },
        };
        write_out(&format!("{text}\n"));
    }

    /// An event among streamed tokens: the answer line it ends, the event
    /// (without the answer when the tokens showed it), the tokens it lets out.
    fn print_among_tokens(&self, envelope: &EventEnvelope) {
        let text = self.answer_text(&envelope.run_id, |answer| answer.event(envelope));
        let Ok(mut answers) = self.answers.lock() else {
            return self.print(envelope);
        };
        // The answer a turn's end lets out goes on its line before the event.
        let mut shown = String::new();
        if let Event::ModelResponse { turn, .. } = &envelope.event
            && !text.is_empty()
        {
            shown = answers.token(&envelope.run_id, *turn, &text);
        }
        let around = answers.before_event(envelope);
        let mut text = shown + &around.before;
        let line = match &envelope.event {
            Event::ModelResponse { .. } if around.answer_shown => {
                let mut event = envelope.event.clone();
                if let Event::ModelResponse { parsed_content, .. } = &mut event {
                    *parsed_content = None;
                }
                human(&envelope.run_id, &event)
            }
            event => human(&envelope.run_id, event),
        };
        if let Some(line) = line {
            text.push_str(&line);
            text.push('\n');
        }
        text.push_str(&answers.after_event(envelope));
        write_out(&text);
    }
}

fn write_out(text: &str) {
    if text.is_empty() {
        return;
    }
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "{text}");
    let _ = out.flush();
}

/// The readable line(s) for an event of run `run_id`; `None` for events
/// not worth a line.
pub fn human(run_id: &str, event: &Event) -> Option<String> {
    // A nested run's id is `{job}/{key}`: commands name the job.
    let job = run_id.split('/').next().unwrap_or(run_id);
    kernel_line(event)
        .or_else(|| gate_line(job, event))
        .or_else(|| workflow_line(event))
        .or_else(|| job_line(event))
}

/// A run's start and end, its model calls and tool calls: one match, an
/// arm an event kind, so it stays one function.
fn kernel_line(event: &Event) -> Option<String> {
    Some(match event {
        Event::KernelStart {
            max_turns,
            tools_count,
            initial_messages_count,
        } => {
            format!(
                "▶ start · {} · {} · at most {}",
                count(*tools_count, "tool"),
                count(*initial_messages_count, "message"),
                count(*max_turns, "turn")
            )
        }
        Event::ModelRequest {
            turn,
            messages_count,
            model,
            ..
        } => {
            format!(
                "turn {turn} · asking {model} ({})…",
                count(*messages_count, "message")
            )
        }
        Event::ModelResponse {
            duration_ms,
            parsed_tool_calls_count: tool_calls_count,
            usage,
            parsed_content: content,
            ..
        } => {
            // The answer first: streamed, it is on screen before the figures.
            let figures = format!(
                "  model answered in {duration_ms} ms · {} · {}",
                count(*tool_calls_count, "tool call"),
                count(usage.total_tokens, "token")
            );
            match content.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
                Some(text) => format!("{}\n{figures}", answer_lines(text)),
                None => figures,
            }
        }
        Event::ToolCall {
            tool_name,
            arguments,
            ..
        } => format!("  ƒ(x) calling {tool_name}...\n     ↪ {arguments}"),
        Event::ToolResult {
            tool_name,
            is_error,
            duration_ms,
            output_preview,
            ..
        } => {
            let mark = if *is_error { "✗" } else { "✓" };
            format!("  {mark} {tool_name} ({duration_ms} ms)\n     ↪ {output_preview}")
        }
        Event::TurnComplete {
            turn, errors_count, ..
        } if *errors_count > 0 => {
            format!(
                "  turn {turn} done · {}",
                count(*errors_count, "tool error")
            )
        }
        Event::KernelEnd {
            turn_count,
            termination_reason,
            total_duration_ms,
            error,
            ..
        } => {
            let mut line = format!(
                "■ end · {termination_reason} after {} in {total_duration_ms} ms",
                count(*turn_count, "turn")
            );
            // A run parked for a decision said why on its ⏸ line.
            if let Some(e) = error
                && *termination_reason != crate::types::TerminationReason::AwaitingApproval
            {
                line.push_str(&format!("\n  error: {e}"));
            }
            line
        }
        Event::ParseError { detail, .. } => format!("  ⚠ unparseable tool call: {detail}"),
        _ => return None,
    })
}

/// A call waiting for approval, its decision, and a budget used up.
fn gate_line(job: &str, event: &Event) -> Option<String> {
    Some(match event {
        Event::ApprovalRequested {
            tool_name,
            call_id,
            arguments,
            ..
        } => format!(
            "  ⏸ {tool_name} (call {call_id}) waits for approval with {arguments}: `structured-agents approve {job} {call_id}` or `structured-agents deny {job} {call_id} --reason R` (still following)"
        ),
        Event::ApprovalDecided {
            tool_name,
            decision,
            by,
            reason,
            ..
        } => format!(
            "  ▶ {tool_name}: {decision} by {by}{}",
            reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        ),
        Event::BudgetExceeded {
            budget,
            limit,
            spent,
            ..
        } => format!("  ■ budget {budget} used up: limit {limit}, spent {spent}"),
        _ => return None,
    })
}

// The event patterns of these `*_line` functions are alike in shape (to
// each other and to telemetry's, `otel/workflow.rs`), kept so: each
// destructures the fields its own line prints.
/// A workflow's start, each stage's end and the workflow's end.
fn workflow_line(event: &Event) -> Option<String> {
    Some(match event {
        Event::WorkflowStart {
            workflow,
            stage,
            iteration,
            resumed,
        } => {
            let how = if *resumed { "resumes" } else { "starts" };
            format!("◆ workflow {workflow} {how} at {stage} (iteration {iteration})")
        }
        Event::StageEnd {
            stage,
            event,
            original_event,
            next,
            iteration,
            reason,
            duration_ms,
            ..
        } => {
            let original = if original_event.is_empty() || original_event == event {
                String::new()
            } else {
                format!(" [{original_event}]")
            };
            format!(
                "◆ {stage} → {event}{original} (iteration {iteration}, {duration_ms} ms): {reason}\n  next: {next}"
            )
        }
        Event::WorkflowEnd {
            outcome, reason, ..
        } if reason.is_empty() => format!("◆ workflow {outcome}"),
        Event::WorkflowEnd {
            outcome, reason, ..
        } => format!("◆ workflow {outcome}: {reason}"),
        _ => return None,
    })
}

/// A job's state.
fn job_line(event: &Event) -> Option<String> {
    Some(match event {
        Event::JobState {
            state,
            attempt,
            error,
            ..
        } => match error {
            Some(e) if *state != crate::events::JobStatus::AwaitingApproval => {
                format!("job {state} (attempt {attempt}): {e}")
            }
            _ => format!("job {state} (attempt {attempt})"),
        },
        _ => return None,
    })
}

#[async_trait]
impl Observer for Printer {
    async fn on_event(&self, event: &EventEnvelope) -> Result<(), ObserverError> {
        if self.stream_tokens && self.format == Format::Human {
            self.print_among_tokens(event);
        } else {
            self.print(event);
        }
        Ok(())
    }

    fn wants_tokens(&self) -> bool {
        self.stream_tokens
    }

    fn on_token(&self, delta: TokenDelta<'_>) {
        let text = self.answer_text(delta.run_id, |answer| {
            answer.token(delta.run_id, delta.turn, delta.text)
        });
        if text.is_empty() {
            return;
        }
        if let Ok(mut answers) = self.answers.lock() {
            write_out(&answers.token(delta.run_id, delta.turn, &text));
        }
    }

    fn name(&self) -> &str {
        "printer"
    }
}

#[cfg(test)]
mod tests {
    use super::human;
    use crate::events::Event;

    fn stage_end(event: &str, original_event: &str) -> Event {
        Event::StageEnd {
            step: 2,
            stage: "implement".into(),
            kind: "agent".into(),
            event: event.into(),
            original_event: original_event.into(),
            next: "review".into(),
            iteration: 1,
            reason: "agent result".into(),
            ran: true,
            started_at: "2026-11-27T10:00:00.000Z".into(),
            duration_ms: 12,
        }
    }

    /// A stage line names the event's original name (`lol impl`'s) when it differs.
    #[test]
    fn a_stage_line_shows_the_original_event_name_beside_the_event() {
        assert_eq!(
            human("job", &stage_end("done", "impl_done")).unwrap(),
            "◆ implement → done [impl_done] (iteration 1, 12 ms): agent result\n  next: review"
        );
        for same in ["parse_fail", ""] {
            let event = if same.is_empty() { "done" } else { same };
            assert_eq!(
                human("job", &stage_end(event, same)).unwrap(),
                format!("◆ implement → {event} (iteration 1, 12 ms): agent result\n  next: review")
            );
        }
    }

    /// One of anything is said in the singular: no "1 tools".
    #[test]
    fn a_count_of_one_reads_in_the_singular() {
        let start = Event::KernelStart {
            max_turns: 1,
            tools_count: 1,
            initial_messages_count: 1,
        };
        assert_eq!(
            human("job", &start).unwrap(),
            "▶ start · 1 tool · 1 message · at most 1 turn"
        );
        let start = Event::KernelStart {
            max_turns: 6,
            tools_count: 2,
            initial_messages_count: 0,
        };
        assert_eq!(
            human("job", &start).unwrap(),
            "▶ start · 2 tools · 0 messages · at most 6 turns"
        );
    }
}
