//! The model's side of a turn: the request a turn sends (its model, its
//! shape, the history window, the answer format) and the reply — replayed
//! from the journal, or asked of the model (its tokens streamed, its
//! progress published) and recorded before anything acts on it.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::Kernel;
use super::error::{KernelError, Phase, RunError, StepError};
use super::progress::model_started;
use super::{history, progress};
use crate::budget::Budget;
use crate::client::{ChatRequest, OnToken, watch};
use crate::events::live::ProgressKind;
use crate::events::{Event, EventSink};
use crate::journal::{RecordedReply, RunJournal};
use crate::types::{Message, ToolCall};

/// The model's side of a turn: replayed from the journal or asked for now.
pub(super) struct Reply {
    pub recorded: RecordedReply,
    /// Replayed: no events, nothing recorded.
    pub replayed: bool,
}

impl Kernel {
    /// The model turn `turn` asks.
    pub(super) fn turn_model(&self, turn: u32) -> &str {
        self.config
            .turn_models
            .get(&turn)
            .unwrap_or(&self.config.model)
    }

    fn request(&self, messages: &[Message], turn: u32) -> ChatRequest {
        let schemas = &self.offered;
        let model = self.turn_model(turn);
        let shape = self
            .config
            .turn_shapes
            .get(&turn)
            .unwrap_or(&self.config.shape);
        let mut wire_messages = self.plugin.format_messages(messages);
        let mut body = Map::new();
        body.insert("model".into(), json!(model));
        // `tool_choice` is left out (not "none") when there are no tools:
        // several servers reject "none" without tools.
        let offered = self.plugin.format_tools(schemas);
        let answer = self.config.answer.as_ref();
        let answer = answer.and_then(|a| a.for_turn(shape, offered.is_some()));
        if let Some(tools) = offered {
            if shape.list_tools {
                body.insert("tools".into(), tools);
                body.insert("tool_choice".into(), shape.tool_choice.to_wire());
            } else {
                self.plugin.declare_tools(&mut wire_messages, schemas);
            }
        }
        body.insert("messages".into(), Value::Array(wire_messages));
        let no_answer = Map::new();
        for source in [
            &self.config.sampling,
            &shape.fragment,
            answer.unwrap_or(&no_answer),
            &self.config.extra_body,
        ] {
            for (key, value) in source {
                body.insert(key.clone(), value.clone());
            }
        }
        ChatRequest { body }
    }

    /// The turn's model reply: the journal's record, or a model call whose
    /// reply is recorded before anything acts on it.
    // It takes `step_journaled`'s arguments (`kernel/mod.rs`) again, being
    // that step's first half: kept a function of its own so that the step
    // reads as its reply, then its calls.
    pub(super) async fn reply(
        &self,
        history: &[Message],
        turn: u32,
        events: &EventSink,
        cancel: &CancellationToken,
        journal: &RunJournal,
    ) -> Result<Reply, StepError> {
        if let Some(replayed) = self.replayed_reply(turn, journal)? {
            return Ok(replayed);
        }
        self.check_budget(turn, "budget", journal, events, Budget::before_model_call)
            .await?;
        let (request, messages) = self.turn_request(history, turn, events).await?;
        crate::failpoint::hit(crate::failpoint::Failpoint::BeforeModelCall);
        let started = Instant::now();
        let response = self
            .call_model(&request, turn, messages, events, cancel)
            .await?;
        let raw_content = response.message.content.clone();
        let native_tool_calls_count = response.message.tool_calls.len();
        let recorded = self
            .record_reply(&request, &response, turn, journal)
            .await?;
        let cost = self
            .config
            .budget
            .as_ref()
            .map(|budget| budget.add_reply(&recorded.model, &recorded.usage));
        events
            .emit(Event::ModelResponse {
                turn,
                duration_ms: started.elapsed().as_millis() as u64,
                content: raw_content,
                tool_calls_count: native_tool_calls_count,
                usage: response.usage,
                response_id: response.id,
                finish_reason: response.finish_reason,
                response_model: response.model,
                cost,
                parsed_content: recorded.assistant.content.clone(),
                parsed_tool_calls_count: recorded.assistant.tool_calls.len(),
            })
            .await;
        Ok(Reply {
            recorded,
            replayed: false,
        })
    }

    /// The journal's record of turn `turn`'s reply, its tokens counted
    /// against the budget again; `None` when the turn was never asked.
    fn replayed_reply(&self, turn: u32, journal: &RunJournal) -> Result<Option<Reply>, RunError> {
        let journal_err = |source| RunError::Journal { turn, source };
        let Some(recorded) = journal.recorded_reply(turn).map_err(journal_err)? else {
            return Ok(None);
        };
        if let Some(budget) = &self.config.budget {
            budget.add_reply(&recorded.model, &recorded.usage);
        }
        Ok(Some(Reply {
            recorded,
            replayed: true,
        }))
    }

    /// The request turn `turn` sends over the history's window (with the
    /// window's length), the model plugin prepared for the offered tools and
    /// `ModelRequest` emitted.
    async fn turn_request(
        &self,
        history: &[Message],
        turn: u32,
        events: &EventSink,
    ) -> Result<(ChatRequest, usize), RunError> {
        let schemas = &self.offered;
        let window = history::window(
            &self.config.history,
            history,
            self.config.max_history_messages,
            self.turn_model(turn),
        )
        .await
        .map_err(|source| RunError::HistoryPlugin { turn, source })?;
        self.plugin
            .prepare(schemas)
            .await
            .map_err(|source| RunError::ModelPlugin { turn, source })?;
        let request = self.request(&window, turn);
        events
            .emit(Event::ModelRequest {
                turn,
                messages_count: window.len(),
                tools_count: schemas.len(),
                model: request.model().to_string(),
                parameters: Value::Object(self.config.sampling.clone()),
                messages: if self.config.record_messages {
                    request.body.get("messages").cloned().unwrap_or(Value::Null)
                } else {
                    Value::Null
                },
            })
            .await;
        Ok((request, window.len()))
    }

    /// The model's reply read by its plugin (each call given a storable
    /// id) and recorded in the journal before anything acts on it.
    async fn record_reply(
        &self,
        request: &ChatRequest,
        response: &crate::client::ChatResponse,
        turn: u32,
        journal: &RunJournal,
    ) -> Result<RecordedReply, RunError> {
        let parsed = self
            .plugin
            .read_reply(&response.message, &self.offered)
            .await
            .map_err(|source| RunError::ModelPlugin { turn, source })?;
        let recorded = RecordedReply {
            parse_errors: parsed.calls.iter().map(|c| c.error.clone()).collect(),
            assistant: Message::assistant(
                parsed.content,
                parsed
                    .calls
                    .into_iter()
                    .enumerate()
                    .map(|(position, c)| ToolCall {
                        id: storable_call_id(c.call.id, turn, position),
                        ..c.call
                    })
                    .collect(),
            ),
            usage: response.usage,
            model: request.model().to_string(),
            response_model: response.model.clone(),
            response_id: response.id.clone(),
            finish_reason: response.finish_reason.clone(),
        };
        journal
            .record_reply(turn, &recorded)
            .await
            .map_err(|source| RunError::Journal { turn, source })?;
        crate::failpoint::hit(crate::failpoint::Failpoint::AfterReplyRecorded);
        Ok(recorded)
    }

    /// The model call itself, its tokens streamed to the observers that
    /// want them and its progress (each HTTP attempt, backoff and wait for
    /// an endpoint slot) published to those watching the run.
    async fn call_model(
        &self,
        request: &ChatRequest,
        turn: u32,
        messages: usize,
        events: &EventSink,
        cancel: &CancellationToken,
    ) -> Result<crate::client::ChatResponse, StepError> {
        let on_token: Option<OnToken> = events.observer().wants_tokens().then(|| {
            let observer = events.observer().clone();
            let run_id = events.context().run_id.clone();
            Arc::new(move |text: &str| {
                observer.on_token(crate::events::TokenDelta {
                    run_id: &run_id,
                    turn,
                    text,
                });
            }) as OnToken
        });
        let model = request.model().to_string();
        let live = events.live();
        live.publish(turn, model_started(&model, messages, 1));
        let watcher = events
            .observer()
            .wants_progress()
            .then(|| progress::model_call_watcher(live.clone(), turn, model, messages));
        let call = watch::watching(watcher, self.backend.complete(request, on_token));
        let response = tokio::select! {
            r = call => r,
            _ = cancel.cancelled() => {
                live.publish(turn, ProgressKind::ModelCallEnded { ok: false, error: Some("cancelled".into()) });
                return Err(StepError::Interrupted { partial: None });
            }
        };
        live.publish(
            turn,
            ProgressKind::ModelCallEnded {
                ok: response.is_ok(),
                error: response.as_ref().err().map(ToString::to_string),
            },
        );
        Ok(response.map_err(|source| KernelError {
            turn,
            phase: Phase::ModelCall,
            source,
        })?)
    }
}

/// The model's id for the call at `position` of `turn`'s reply, or the
/// daemon's own key of that call (`call_{turn}_{position}`) when the model's
/// holds a control character (a NUL, which PostgreSQL refuses in text,
/// failed the journal write on every attempt of the job). The replacement
/// is made before the reply is journaled, so the history, the journal, the
/// events and the next request all carry it. (An empty id is the model
/// plugins' to fill: they mint one.)
fn storable_call_id(id: String, turn: u32, position: usize) -> String {
    if id.chars().any(char::is_control) {
        format!("call_{turn}_{position}")
    } else {
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_ids_with_control_characters_are_replaced_by_the_daemons_key() {
        assert_eq!(storable_call_id("call_9".into(), 1, 0), "call_9");
        assert_eq!(storable_call_id("id-\u{e9}".into(), 1, 0), "id-\u{e9}");
        assert_eq!(storable_call_id("bad\0id".into(), 2, 1), "call_2_1");
        assert_eq!(storable_call_id("line\nbreak".into(), 3, 0), "call_3_0");
        assert_eq!(storable_call_id("\u{7f}".into(), 1, 4), "call_1_4");
    }
}
