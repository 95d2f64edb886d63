//! The two instruments of `verify`: a journal store that keeps what a crash
//! at one step boundary would keep, and an observer that counts how often
//! each tool call really reached its backend.
//!
//! Why stopping the run here is what a crash (SIGKILL) leaves: the kernel
//! awaits every journal write before it acts on the step, and a write is
//! all-or-none in both queue backends. So a process killed at any moment
//! leaves the journal as a prefix of the run's writes, and the effects done
//! are those of the steps before the kill. The store ends the run at write
//! `k` in one of two ways: `after` (write `k` is durable and nothing after it
//! runs: the kill came as the commit returned) or `before` (write `k` is lost
//! and everything before it ran: the kill came as it was being committed).
//! Between those, the only thing that happens is a tool call, which this
//! treats as atomic (it ran or it did not). Once the store has "crashed" no
//! write returns, and the driver drops the run's future (a tool's process
//! group is killed with it), so nothing more of the attempt runs.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::events::{Event, EventEnvelope, Observer, ObserverError};
use crate::journal::{JournalEntry, JournalStore, StoreError};

/// When, relative to a journal write, the crash comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Moment {
    /// The write is lost; everything the run did before it happened.
    Before,
    /// The write is durable; nothing the run would do after it happens.
    After,
}

impl Moment {
    pub fn as_str(self) -> &'static str {
        match self {
            Moment::Before => "before",
            Moment::After => "after",
        }
    }
}

/// A crash at write `write` (1-based, in the run's order of writes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CrashAt {
    pub write: usize,
    pub moment: Moment,
}

/// An in-memory journal: each write (one batch of entries) kept in order,
/// until the crash it was set up with.
pub struct CrashingStore {
    crash: Option<CrashAt>,
    writes: Mutex<Vec<Vec<JournalEntry>>>,
    attempted: AtomicUsize,
    crashed: CancellationToken,
}

impl CrashingStore {
    pub fn new(crash: Option<CrashAt>) -> Self {
        Self {
            crash,
            writes: Mutex::default(),
            attempted: AtomicUsize::new(0),
            crashed: CancellationToken::new(),
        }
    }

    /// Cancelled when the crash happened: the run must stop now.
    pub fn crashed(&self) -> CancellationToken {
        self.crashed.clone()
    }

    /// The writes that became durable, in order.
    pub fn writes(&self) -> Vec<Vec<JournalEntry>> {
        self.writes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn keep(&self, entries: Vec<JournalEntry>) {
        self.writes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(entries);
    }
}

#[async_trait]
impl JournalStore for CrashingStore {
    async fn record(&self, entries: Vec<JournalEntry>) -> Result<(), StoreError> {
        if self.crashed.is_cancelled() {
            return std::future::pending().await;
        }
        let write = self.attempted.fetch_add(1, Ordering::SeqCst) + 1;
        match self.crash {
            Some(crash) if crash.write == write => {
                if crash.moment == Moment::After {
                    self.keep(entries);
                }
                self.crashed.cancel();
                // The process is gone: this write never answers.
                std::future::pending().await
            }
            _ => {
                self.keep(entries);
                Ok(())
            }
        }
    }
}

/// One real execution of a tool call: its first attempt reached the tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Execution {
    pub turn: u32,
    pub call_id: String,
    pub tool: String,
}

/// Counts the executions of the job's own run (not of nested runs) from the
/// tool engine's `tool.invoke.*` trace, which it emits once per attempt
/// that reached the tool (a cache hit, a guardrail block or bad arguments
/// never do); retries of one call count as one execution.
#[derive(Default)]
pub struct ExecutionCounter {
    seen: Mutex<Vec<Execution>>,
}

impl ExecutionCounter {
    pub fn executions(&self) -> Vec<Execution> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

#[async_trait]
impl Observer for ExecutionCounter {
    async fn on_event(&self, envelope: &EventEnvelope) -> Result<(), ObserverError> {
        if envelope.parent.is_some() {
            return Ok(());
        }
        if let Event::ToolTrace {
            turn,
            call_id,
            tool_name,
            stage,
            detail,
        } = &envelope.event
            && stage.starts_with("tool.invoke.")
            && detail["attempt"] == 1
        {
            self.seen
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(Execution {
                    turn: *turn,
                    call_id: call_id.clone(),
                    tool: tool_name.clone(),
                });
        }
        Ok(())
    }

    fn name(&self) -> &str {
        "verify-executions"
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use futures::FutureExt;

    fn entry(step: &str) -> Vec<JournalEntry> {
        vec![JournalEntry::new("", 1, step, "{}".into())]
    }

    #[tokio::test]
    async fn a_crash_after_a_write_keeps_it_and_a_crash_before_loses_it() {
        for (moment, kept) in [(Moment::After, 2), (Moment::Before, 1)] {
            let store = CrashingStore::new(Some(CrashAt { write: 2, moment }));
            store.record(entry("reply")).await.unwrap();
            let second = store.record(entry("x")).now_or_never();
            assert!(second.is_none(), "the crashing write must not return");
            assert!(store.crashed().is_cancelled());
            let third = store.record(entry("y")).now_or_never();
            assert!(third.is_none(), "nothing is written after the crash");
            assert_eq!(store.writes().len(), kept, "{moment:?}");
        }
    }
}
