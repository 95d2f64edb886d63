//! AG-UI events as this daemon sends them, and one run's translation of a
//! job's feed into them: `RUN_STARTED`; `TEXT_MESSAGE_START`/`CONTENT`/
//! `END` for the job's answer stream; `TOOL_CALL_START`/`ARGS`/`END`/
//! `RESULT` for its own tool calls; then `RUN_FINISHED` (its outcome
//! `success`, `interrupt` for a call that waits for approval, or
//! `cancelled`) or `RUN_ERROR`.

use std::borrow::Cow;
use std::convert::Infallible;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::Serialize;
use serde_json::{Value, json};

use super::super::document::{json_text, sse_event};
use super::super::feed::Item;
use crate::events::answer::AnswerStream;
use crate::events::{Event, EventEnvelope};
use crate::queue::{Job, JobState};

/// One AG-UI event: the JSON `data:` of one Server-Sent Event. A run
/// sends `RUN_STARTED` first and `RUN_FINISHED` or `RUN_ERROR` last.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(
    tag = "type",
    rename_all = "SCREAMING_SNAKE_CASE",
    rename_all_fields = "camelCase"
)]
pub enum AguiEvent {
    RunStarted {
        thread_id: String,
        run_id: String,
    },
    /// The job's answer begins (the answer stream, as chat completions').
    TextMessageStart {
        message_id: String,
        role: MessageRole,
    },
    /// A piece of the answer; together, the answer.
    TextMessageContent {
        message_id: String,
        delta: String,
    },
    TextMessageEnd {
        message_id: String,
    },
    /// A tool call of the job's own run.
    ToolCallStart {
        tool_call_id: String,
        tool_call_name: String,
    },
    /// The call's arguments, whole, as JSON text.
    ToolCallArgs {
        tool_call_id: String,
        delta: String,
    },
    ToolCallEnd {
        tool_call_id: String,
    },
    /// The call's result (a preview).
    ToolCallResult {
        message_id: String,
        tool_call_id: String,
        content: String,
        role: MessageRole,
    },
    /// The run ends: the job succeeded (`result` its answer), a call waits
    /// for approval, or the job was cancelled.
    RunFinished {
        thread_id: String,
        run_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        result: Option<String>,
        outcome: RunOutcome,
    },
    /// The job failed (`job_failed`), or its feed was lost (`feed_lost`:
    /// the job goes on).
    RunError {
        message: String,
        code: String,
    },
}

/// One event of an AG-UI run's stream — for the API document only (no
/// value has this type): unnamed, its `data:` the JSON of an [`AguiEvent`].
pub enum AguiStreamEvent {}

impl JsonSchema for AguiStreamEvent {
    fn schema_name() -> Cow<'static, str> {
        "AguiStreamEvent".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        sse_event(
            None,
            "AG-UI events, one `data:` each (`RUN_STARTED` … `RUN_FINISHED` or `RUN_ERROR`)",
            json_text(generator.subschema_for::<AguiEvent>()),
        )
    }
}

/// Who a message is from.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "AguiRole")]
pub enum MessageRole {
    Assistant,
    Tool,
}

/// How a run finished.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
#[schemars(rename = "AguiRunOutcome")]
pub enum RunOutcome {
    Success,
    /// Calls wait for a decision: the next run's `resume[]` answers them.
    Interrupt {
        interrupts: Vec<Interrupt>,
    },
    Cancelled,
}

/// A call that waits for approval.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "AguiInterrupt")]
pub struct Interrupt {
    /// `<job>/<digest>/<call>`: what a resume entry's `interruptId` names.
    pub id: String,
    /// `tool_approval`.
    pub reason: String,
    pub message: String,
    pub tool_call_id: String,
    /// What a resolved entry's `payload` is: `{"approved", "reason"?,
    /// "arguments"?}`.
    pub response_schema: Value,
    pub metadata: InterruptMetadata,
}

/// The parked call an interrupt is about.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "AguiInterruptMetadata")]
pub struct InterruptMetadata {
    pub job_id: String,
    pub tool: String,
    pub arguments: Value,
    pub digest: String,
}

/// One run's translation of the job's feed into AG-UI events.
pub(super) struct Run {
    thread_id: String,
    run_id: String,
    job_id: String,
    answer: AnswerStream,
    /// The answer's text message, once started.
    message_open: bool,
}

impl Run {
    pub(super) fn new(thread_id: &str, run_id: &str, job: &Job, answer: AnswerStream) -> Self {
        Self {
            thread_id: thread_id.to_string(),
            run_id: run_id.to_string(),
            job_id: job.id.to_string(),
            answer,
            message_open: false,
        }
    }

    fn message_id(&self) -> String {
        format!("{}-answer", self.job_id)
    }

    fn started(&self) -> AguiEvent {
        AguiEvent::RunStarted {
            thread_id: self.thread_id.clone(),
            run_id: self.run_id.clone(),
        }
    }

    fn finished(&self, result: Option<String>, outcome: RunOutcome) -> AguiEvent {
        AguiEvent::RunFinished {
            thread_id: self.thread_id.clone(),
            run_id: self.run_id.clone(),
            result,
            outcome,
        }
    }

    fn text(&mut self, piece: &str) -> Vec<AguiEvent> {
        if piece.is_empty() {
            return Vec::new();
        }
        let message_id = self.message_id();
        let mut out = Vec::new();
        if !self.message_open {
            self.message_open = true;
            out.push(AguiEvent::TextMessageStart {
                message_id: message_id.clone(),
                role: MessageRole::Assistant,
            });
        }
        out.push(AguiEvent::TextMessageContent {
            message_id,
            delta: piece.to_string(),
        });
        out
    }

    fn close_text(&mut self) -> Vec<AguiEvent> {
        if !std::mem::take(&mut self.message_open) {
            return Vec::new();
        }
        vec![AguiEvent::TextMessageEnd {
            message_id: self.message_id(),
        }]
    }

    /// Events for a stored event, and whether the run ends with them.
    fn stored(&mut self, json_text: &str) -> (Vec<AguiEvent>, bool) {
        if let Some(parked) = super::super::feed::approval_required(&self.job_id, json_text) {
            let mut out = self.close_text();
            out.push(self.interrupted(&parked));
            return (out, true);
        }
        let Ok(envelope) = serde_json::from_str::<EventEnvelope>(json_text) else {
            return (Vec::new(), false);
        };
        let own = envelope.run_id == self.job_id && envelope.parent.is_none();
        let mut out = Vec::new();
        match &envelope.event {
            Event::ToolCall {
                tool_name,
                call_id,
                arguments,
                ..
            } if own => {
                out.extend(self.close_text());
                out.extend([
                    AguiEvent::ToolCallStart {
                        tool_call_id: call_id.clone(),
                        tool_call_name: tool_name.clone(),
                    },
                    AguiEvent::ToolCallArgs {
                        tool_call_id: call_id.clone(),
                        delta: arguments.to_string(),
                    },
                    AguiEvent::ToolCallEnd {
                        tool_call_id: call_id.clone(),
                    },
                ]);
            }
            Event::ToolResult {
                call_id,
                output_preview,
                ..
            } if own => {
                out.push(AguiEvent::ToolCallResult {
                    message_id: format!("{call_id}-result"),
                    tool_call_id: call_id.clone(),
                    content: output_preview.clone(),
                    role: MessageRole::Tool,
                });
            }
            _ => {}
        }
        let piece = self.answer.event(&envelope);
        out.extend(self.text(&piece));
        (out, false)
    }

    /// `RUN_FINISHED` with the interrupt outcome for a parked call.
    fn interrupted(&self, parked: &Value) -> AguiEvent {
        let text = |key: &str| parked[key].as_str().unwrap_or_default().to_string();
        let (call, digest, tool) = (text("call_id"), text("digest"), text("tool"));
        let interrupt = Interrupt {
            id: format!("{}/{digest}/{call}", self.job_id),
            reason: "tool_approval".into(),
            message: format!(
                "approve the call of tool `{tool}` with {}?",
                parked["arguments"]
            ),
            tool_call_id: call,
            response_schema: json!({"type": "object", "required": ["approved"], "properties": {
                "approved": {"type": "boolean"}, "reason": {"type": "string"}, "arguments": {"type": "object"}}}),
            metadata: InterruptMetadata {
                job_id: self.job_id.clone(),
                tool,
                arguments: parked["arguments"].clone(),
                digest,
            },
        };
        let outcome = RunOutcome::Interrupt {
            interrupts: vec![interrupt],
        };
        self.finished(None, outcome)
    }

    /// The job ended: the rest of the answer, then how the run finished.
    fn ended(&mut self, job: &Job) -> Vec<AguiEvent> {
        let mut out = Vec::new();
        if job.state == JobState::Succeeded {
            let answer = job.answer().unwrap_or_default().to_string();
            let rest = self.answer.end(&answer);
            out.extend(self.text(&rest));
            out.extend(self.close_text());
            out.push(self.finished(Some(answer), RunOutcome::Success));
            return out;
        }
        out.extend(self.close_text());
        if job.state == JobState::Cancelled {
            out.push(self.finished(None, RunOutcome::Cancelled));
        } else {
            let message = job
                .answer_or_error()
                .err()
                .map(|why| why.to_string())
                .unwrap_or_default();
            out.push(AguiEvent::RunError {
                message,
                code: "job_failed".into(),
            });
        }
        out
    }

    fn feed_lost(&self) -> AguiEvent {
        AguiEvent::RunError {
            code: "feed_lost".into(),
            message: format!(
                "lost the feed of job {} (the store could not be read); the job goes on: GET /v1/jobs/{}",
                self.job_id, self.job_id
            ),
        }
    }
}

/// The run's SSE stream: `RUN_STARTED`, then the feed told as events
/// until the run finishes (the job ends or parks for a decision).
pub(super) fn events(
    run: Run,
    feed: impl Stream<Item = Item> + Send + 'static,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let first = run.started();
    let body = futures::stream::unfold((Box::pin(feed), Some(run)), |(mut feed, run)| async move {
        let mut run = run?;
        loop {
            let (out, last) = match feed.next().await {
                Some(Item::Token(token)) => {
                    let piece = run.answer.token(&token.run_id, token.turn, &token.text);
                    (run.text(&piece), false)
                }
                Some(Item::Event { json, .. }) => run.stored(&json),
                Some(Item::Progress(_)) => continue,
                Some(Item::End(job)) => (run.ended(&job), true),
                None => (vec![run.feed_lost()], true),
            };
            if last {
                return Some((out, (feed, None)));
            }
            if !out.is_empty() {
                return Some((out, (feed, Some(run))));
            }
        }
    })
    .flat_map(futures::stream::iter);
    let events = futures::stream::once(async { first })
        .chain(body)
        .map(|event| {
            let json = serde_json::to_string(&event).unwrap_or_else(|_| "{}".into());
            Ok(SseEvent::default().data(json))
        });
    Sse::new(events).keep_alive(KeepAlive::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The events serialize to AG-UI's names: `type` in screaming snake
    /// case, fields in camel case, the outcome's `type` in snake case.
    #[test]
    fn events_have_ag_ui_names() {
        let finished = AguiEvent::RunFinished {
            thread_id: "t".into(),
            run_id: "r".into(),
            result: None,
            outcome: RunOutcome::Cancelled,
        };
        assert_eq!(
            serde_json::to_value(&finished).unwrap(),
            json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r",
                   "outcome": {"type": "cancelled"}})
        );
        let result = AguiEvent::ToolCallResult {
            message_id: "c-result".into(),
            tool_call_id: "c".into(),
            content: "ok".into(),
            role: MessageRole::Tool,
        };
        assert_eq!(
            serde_json::to_value(&result).unwrap(),
            json!({"type": "TOOL_CALL_RESULT", "messageId": "c-result", "toolCallId": "c",
                   "content": "ok", "role": "tool"})
        );
    }
}
