//! The `Observer` seam, its null and composite implementations, and the
//! `EventSink` that stamps events with their run context and sequence number.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use futures::FutureExt;

use super::live::{Progress, ProgressKind};
use super::{Event, EventEnvelope, RunContext, timestamp_now};

/// Why an observer could not take an event. Observers' failures are logged
/// and never reach the kernel.
#[derive(Debug, thiserror::Error)]
#[error("observer {observer}: {message}")]
pub struct ObserverError {
    pub observer: String,
    pub message: String,
}

/// A streamed piece of the model's answer.
#[derive(Debug, Clone)]
pub struct TokenDelta<'a> {
    pub run_id: &'a str,
    pub turn: u32,
    pub text: &'a str,
}

/// Receives events. Implementations must return quickly: anything slow goes
/// to a queue of the observer's own.
#[async_trait]
pub trait Observer: Send + Sync {
    async fn on_event(&self, event: &EventEnvelope) -> Result<(), ObserverError>;

    /// Whether this observer wants the answer token by token (makes the
    /// kernel stream its model calls).
    fn wants_tokens(&self) -> bool {
        false
    }

    /// Called from inside the model call: must not block.
    fn on_token(&self, _delta: TokenDelta<'_>) {}

    /// Whether this observer wants the run's live [`Progress`] (asked at
    /// each step, so an unwatched run builds none).
    fn wants_progress(&self) -> bool {
        false
    }

    /// A step of the run as it happens; never stored. Must not block.
    fn on_progress(&self, _progress: &Progress) {}

    /// A short name for logs.
    fn name(&self) -> &str {
        "observer"
    }
}

/// Discards everything.
pub struct NullObserver;

#[async_trait]
impl Observer for NullObserver {
    async fn on_event(&self, _event: &EventEnvelope) -> Result<(), ObserverError> {
        Ok(())
    }

    fn name(&self) -> &str {
        "null"
    }
}

/// Fans events out to several observers; one that fails or panics is logged
/// and the others still receive the event.
#[derive(Default, Clone)]
pub struct CompositeObserver {
    observers: Vec<Arc<dyn Observer>>,
}

impl CompositeObserver {
    pub fn new(observers: Vec<Arc<dyn Observer>>) -> Self {
        Self { observers }
    }

    pub fn push(&mut self, observer: Arc<dyn Observer>) {
        self.observers.push(observer);
    }
}

#[async_trait]
impl Observer for CompositeObserver {
    async fn on_event(&self, event: &EventEnvelope) -> Result<(), ObserverError> {
        for observer in &self.observers {
            match AssertUnwindSafe(observer.on_event(event))
                .catch_unwind()
                .await
            {
                Ok(Ok(())) => {}
                Ok(Err(err)) => {
                    tracing::warn!(observer = observer.name(), run_id = %event.run_id, seq = event.seq, error = %err, "observer failed")
                }
                Err(_) => {
                    tracing::error!(observer = observer.name(), run_id = %event.run_id, seq = event.seq, "observer panicked; event skipped for it")
                }
            }
        }
        Ok(())
    }

    fn wants_tokens(&self) -> bool {
        self.observers.iter().any(|o| o.wants_tokens())
    }

    fn on_token(&self, delta: TokenDelta<'_>) {
        for observer in self.observers.iter().filter(|o| o.wants_tokens()) {
            let delta = delta.clone();
            if std::panic::catch_unwind(AssertUnwindSafe(|| observer.on_token(delta))).is_err() {
                tracing::error!(observer = observer.name(), "observer panicked on a token");
            }
        }
    }

    fn wants_progress(&self) -> bool {
        self.observers.iter().any(|o| o.wants_progress())
    }

    fn on_progress(&self, progress: &Progress) {
        for observer in self.observers.iter().filter(|o| o.wants_progress()) {
            if std::panic::catch_unwind(AssertUnwindSafe(|| observer.on_progress(progress)))
                .is_err()
            {
                tracing::error!(observer = observer.name(), "observer panicked on progress");
            }
        }
    }

    fn name(&self) -> &str {
        "composite"
    }
}

/// A run's live progress out, detached from its sink (for callbacks that
/// outlive a borrow of it, such as a model call's watcher).
#[derive(Clone)]
pub struct LiveOut {
    run_id: String,
    observer: Arc<dyn Observer>,
}

impl LiveOut {
    /// Whether anyone watches the run now.
    pub fn watched(&self) -> bool {
        self.observer.wants_progress()
    }

    /// Publishes `kind` at `turn`, if anyone watches.
    pub fn publish(&self, turn: u32, kind: ProgressKind) {
        if !self.watched() {
            return;
        }
        self.observer.on_progress(&Progress {
            run_id: self.run_id.clone(),
            turn,
            at: timestamp_now(),
            kind,
        });
    }
}

/// Stamps events with the run context and a gap-free sequence number and
/// hands them to the observer.
pub struct EventSink {
    context: RunContext,
    /// Shared with nested runs so a job's log stays one gap-free sequence.
    next_seq: Arc<AtomicU64>,
    /// Held from stamping to delivery, so observers receive a run's events
    /// (also those of concurrent tools and nested runs) in sequence order —
    /// a stream reader that resumes after sequence N must never miss N−1.
    order: Arc<tokio::sync::Mutex<()>>,
    observer: Arc<dyn Observer>,
}

impl EventSink {
    /// `first_seq` lets a retried job continue its event log without a gap.
    pub fn new(context: RunContext, first_seq: u64, observer: Arc<dyn Observer>) -> Self {
        Self {
            context,
            next_seq: Arc::new(AtomicU64::new(first_seq.max(1))),
            order: Arc::default(),
            observer,
        }
    }

    /// A sink for a nested run (an `agent` tool): its events carry the child
    /// run's context and continue this sink's sequence, to the same observer.
    pub fn child(&self, context: RunContext) -> EventSink {
        EventSink {
            context,
            next_seq: self.next_seq.clone(),
            order: self.order.clone(),
            observer: self.observer.clone(),
        }
    }

    pub fn context(&self) -> &RunContext {
        &self.context
    }

    pub fn observer(&self) -> &Arc<dyn Observer> {
        &self.observer
    }

    /// The sequence number the next event will get.
    pub fn next_seq(&self) -> u64 {
        self.next_seq.load(Ordering::SeqCst)
    }

    /// Stamps an event with the next sequence number without dispatching it
    /// (for an event stored by other means, e.g. with a job's final state).
    pub fn stamp(&self, event: Event) -> EventEnvelope {
        EventEnvelope {
            run_id: self.context.run_id.clone(),
            bundle: self.context.bundle.clone(),
            bundle_version: self.context.bundle_version.clone(),
            parent: self.context.parent.clone(),
            seq: self.next_seq.fetch_add(1, Ordering::SeqCst),
            timestamp: timestamp_now(),
            event,
        }
    }

    /// Where this run's live progress goes: to the observers that watch
    /// it now; free when none does. Never stored, never numbered.
    pub fn live(&self) -> LiveOut {
        LiveOut {
            run_id: self.context.run_id.clone(),
            observer: self.observer.clone(),
        }
    }

    /// Publishes a step of this run as it happens (see [`EventSink::live`]).
    pub fn progress(&self, turn: u32, kind: ProgressKind) {
        if self.observer.wants_progress() {
            self.live().publish(turn, kind);
        }
    }

    pub async fn emit(&self, event: Event) {
        let _in_order = self.order.lock().await;
        let envelope = self.stamp(event);
        if let Err(err) = self.observer.on_event(&envelope).await {
            tracing::warn!(run_id = %envelope.run_id, error = %err, "observer failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    struct Recorder(Mutex<Vec<u64>>);
    #[async_trait]
    impl Observer for Recorder {
        async fn on_event(&self, e: &EventEnvelope) -> Result<(), ObserverError> {
            self.0.lock().unwrap().push(e.seq);
            Ok(())
        }
    }
    struct Panicker;
    #[async_trait]
    impl Observer for Panicker {
        async fn on_event(&self, _: &EventEnvelope) -> Result<(), ObserverError> {
            panic!("boom")
        }
    }
    struct Failer;
    #[async_trait]
    impl Observer for Failer {
        async fn on_event(&self, _: &EventEnvelope) -> Result<(), ObserverError> {
            Err(ObserverError {
                observer: "failer".into(),
                message: "nope".into(),
            })
        }
    }

    #[tokio::test]
    async fn failing_and_panicking_observers_do_not_starve_others() {
        let rec = Arc::new(Recorder(Mutex::new(vec![])));
        let comp = CompositeObserver::new(vec![Arc::new(Panicker), Arc::new(Failer), rec.clone()]);
        let sink = EventSink::new(RunContext::default(), 1, Arc::new(comp));
        for turn in 1..=3 {
            sink.emit(Event::ParseError {
                turn,
                detail: String::new(),
            })
            .await;
        }
        assert_eq!(*rec.0.lock().unwrap(), vec![1, 2, 3]);
    }
}
