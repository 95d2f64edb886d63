//! The model's answer token by token, for whoever is watching a job right
//! now (SSE clients, `/v1/chat/completions` with `stream: true`). Tokens are
//! ephemeral: never stored, never numbered, so the durable event log and
//! `Last-Event-ID` resumption are unaffected. A job streams its model calls
//! only while someone listens ([`TokenObserver::wants_tokens`] is asked per
//! model call), so unwatched jobs pay nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde::Serialize;
use tokio::sync::broadcast;

use super::{EventEnvelope, Observer, ObserverError, TokenDelta};

/// Tokens a slow listener may fall behind by before it loses some (it is
/// told how many, and the durable events still arrive complete).
const BUFFER: usize = 1024;

/// One streamed piece of a job's answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Token {
    /// The run that produced it: the job id, or `<job>/<…>` for nested runs.
    pub run_id: String,
    pub turn: u32,
    pub text: String,
    /// Instead of text: a tool call of the job's own run starting or ending,
    /// as it happens (the stored event can come later, after the next
    /// durable write), for listeners that interleave calls with the answer
    /// (the runtime API's streams). Only subscriptions that ask get these.
    #[serde(skip)]
    pub event: Option<Arc<EventEnvelope>>,
}

/// Live token streams by job id.
#[derive(Default)]
pub struct TokenHub {
    streams: Mutex<HashMap<String, broadcast::Sender<Token>>>,
}

impl TokenHub {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Starts listening to `job`'s tokens; the stream stops being produced
    /// when the last subscription is dropped.
    pub fn subscribe(self: &Arc<Self>, job: &str) -> TokenSubscription {
        self.subscribe_with(job, false)
    }

    /// Like [`TokenHub::subscribe`], also receiving the job's tool calls as
    /// they start and end ([`Token::event`]).
    pub fn subscribe_with_calls(self: &Arc<Self>, job: &str) -> TokenSubscription {
        self.subscribe_with(job, true)
    }

    fn subscribe_with(self: &Arc<Self>, job: &str, calls: bool) -> TokenSubscription {
        let mut streams = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        let receiver = streams
            .entry(job.to_string())
            .or_insert_with(|| broadcast::channel(BUFFER).0)
            .subscribe();
        TokenSubscription {
            hub: self.clone(),
            job: job.to_string(),
            receiver: Some(receiver),
            calls,
        }
    }

    /// Whether anyone listens to `job` now.
    pub fn listening(&self, job: &str) -> bool {
        self.streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(job)
            .is_some_and(|s| s.receiver_count() > 0)
    }

    fn publish(&self, job: &str, token: Token) {
        if let Some(sender) = self
            .streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(job)
        {
            // No receiver left is not an error: the listener just went away.
            let _ = sender.send(token);
        }
    }

    fn unsubscribe(&self, job: &str) {
        let mut streams = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        if streams.get(job).is_some_and(|s| s.receiver_count() == 0) {
            streams.remove(job);
        }
    }
}

/// A listener's end of a job's token stream.
pub struct TokenSubscription {
    hub: Arc<TokenHub>,
    job: String,
    /// `None` only while being dropped.
    receiver: Option<broadcast::Receiver<Token>>,
    /// Whether tool-call events are wanted too.
    calls: bool,
}

impl TokenSubscription {
    /// A token already waiting, without waiting for one.
    pub fn try_next(&mut self) -> Option<Token> {
        let receiver = self.receiver.as_mut()?;
        loop {
            match receiver.try_recv() {
                Ok(token) if token.event.is_some() && !self.calls => continue,
                Ok(token) => return Some(token),
                Err(broadcast::error::TryRecvError::Lagged(missed)) => {
                    tracing::debug!(job_id = %self.job, missed, "token listener lagged");
                }
                Err(_) => return None,
            }
        }
    }

    /// The next token; `None` once the hub is gone. Tokens a slow listener
    /// missed are skipped.
    pub async fn next(&mut self) -> Option<Token> {
        let receiver = self.receiver.as_mut()?;
        loop {
            match receiver.recv().await {
                Ok(token) if token.event.is_some() && !self.calls => continue,
                Ok(token) => return Some(token),
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::debug!(job_id = %self.job, missed, "token listener lagged");
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

impl Drop for TokenSubscription {
    fn drop(&mut self) {
        // The receiver must be gone before the count is checked.
        drop(self.receiver.take());
        self.hub.unsubscribe(&self.job);
    }
}

/// The observer that feeds one job's tokens to the hub.
pub struct TokenObserver {
    hub: Arc<TokenHub>,
    job: String,
}

impl TokenObserver {
    pub fn new(hub: Arc<TokenHub>, job: impl Into<String>) -> Self {
        Self {
            hub,
            job: job.into(),
        }
    }
}

#[async_trait]
impl Observer for TokenObserver {
    async fn on_event(&self, event: &EventEnvelope) -> Result<(), ObserverError> {
        use super::Event;
        let turn = match &event.event {
            Event::ToolCall { turn, .. } | Event::ToolResult { turn, .. } => *turn,
            _ => return Ok(()),
        };
        if event.parent.is_none() && self.hub.listening(&self.job) {
            self.hub.publish(
                &self.job,
                Token {
                    run_id: event.run_id.clone(),
                    turn,
                    text: String::new(),
                    event: Some(Arc::new(event.clone())),
                },
            );
        }
        Ok(())
    }

    fn wants_tokens(&self) -> bool {
        self.hub.listening(&self.job)
    }

    fn on_token(&self, delta: TokenDelta<'_>) {
        self.hub.publish(
            &self.job,
            Token {
                run_id: delta.run_id.to_string(),
                turn: delta.turn,
                text: delta.text.to_string(),
                event: None,
            },
        );
    }

    fn name(&self) -> &str {
        "tokens"
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tokens_reach_listeners_of_their_job_only_while_they_listen() {
        let hub = TokenHub::new();
        let observer = TokenObserver::new(hub.clone(), "j1");
        assert!(!observer.wants_tokens());
        let mut sub = hub.subscribe("j1");
        let mut other = hub.subscribe("j2");
        assert!(observer.wants_tokens());
        observer.on_token(TokenDelta {
            run_id: "j1",
            turn: 1,
            text: "Hel",
        });
        observer.on_token(TokenDelta {
            run_id: "j1",
            turn: 1,
            text: "lo",
        });
        assert_eq!(sub.next().await.unwrap().text, "Hel");
        assert_eq!(sub.next().await.unwrap().text, "lo");
        assert!(other.receiver.as_mut().unwrap().try_recv().is_err());
        drop(sub);
        assert!(!observer.wants_tokens());
        assert!(hub.listening("j2"));
        drop(other);
        assert!(hub.streams.lock().unwrap().is_empty());
    }
}
