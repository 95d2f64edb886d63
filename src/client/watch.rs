//! Who watches a model call while it runs: told when an HTTP attempt fails
//! and the client waits out a backoff before the next, and when the call
//! waits for a free slot of its endpoint — what the job's live progress
//! shows. A task-local rather than a parameter, so the `ChatBackend`
//! signature (and every backend) stays as it is: the kernel scopes its
//! model call with [`watching`], and the backends [`note`] what happens
//! where it happens. Outside a watched call, noting costs a lookup.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};

use super::ClientError;

/// What happened inside a watched model call.
#[derive(Debug)]
pub enum CallNote<'a> {
    /// HTTP attempt `attempt` (from 1) failed with `error`; the next
    /// starts after `delay`.
    Retrying {
        attempt: u32,
        error: &'a ClientError,
        delay: Duration,
        /// The model the call asks (its request's `model`).
        model: &'a str,
    },
    /// HTTP attempt `attempt` (from 2) starts now.
    Attempt(u32),
    /// The call waits for a free slot of its endpoint.
    WaitingForSlot,
    /// It has one.
    SlotTaken,
}

/// The watcher of one model call.
pub type CallWatcher = Arc<dyn Fn(CallNote<'_>) + Send + Sync>;

tokio::task_local! {
    static WATCHER: CallWatcher;
}

/// Runs `call` with `watcher` told of what happens inside it.
pub async fn watching<F: Future>(watcher: Option<CallWatcher>, call: F) -> F::Output {
    match watcher {
        Some(watcher) => WATCHER.scope(watcher, call).await,
        None => call.await,
    }
}

/// Runs `call` with `extra` told of what happens inside it as well as the
/// current watcher, if any (an endpoint's gate hearing its refusals).
pub async fn also_watching<F: Future>(extra: CallWatcher, call: F) -> F::Output {
    let outer = WATCHER.try_with(Clone::clone).ok();
    let both: CallWatcher = match outer {
        Some(outer) => Arc::new(move |note: CallNote<'_>| {
            extra(match &note {
                CallNote::Retrying {
                    attempt,
                    error,
                    delay,
                    model,
                } => CallNote::Retrying {
                    attempt: *attempt,
                    error,
                    delay: *delay,
                    model,
                },
                CallNote::Attempt(n) => CallNote::Attempt(*n),
                CallNote::WaitingForSlot => CallNote::WaitingForSlot,
                CallNote::SlotTaken => CallNote::SlotTaken,
            });
            outer(note);
        }),
        None => extra,
    };
    WATCHER.scope(both, call).await
}

/// Tells the current call's watcher, if any.
pub fn note(note: CallNote<'_>) {
    let _ = WATCHER.try_with(|watcher| watcher(note));
}

/// A slot of an endpoint's concurrency `limit`, noting the wait when none
/// is free. The semaphore is never closed, so acquiring cannot fail; if it
/// ever were, running unthrottled beats failing the job.
pub async fn slot(limit: &Semaphore) -> Option<SemaphorePermit<'_>> {
    if let Ok(permit) = limit.try_acquire() {
        return Some(permit);
    }
    note(CallNote::WaitingForSlot);
    let permit = limit.acquire().await.ok();
    note(CallNote::SlotTaken);
    permit
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[tokio::test]
    async fn a_watched_call_hears_its_notes_and_an_unwatched_one_nothing() {
        let heard = Arc::new(Mutex::new(Vec::new()));
        let sink = heard.clone();
        let watcher: CallWatcher =
            Arc::new(move |note| sink.lock().unwrap().push(format!("{note:?}")));
        let limit = Semaphore::new(1);
        let held = limit.try_acquire().unwrap();
        let call = async {
            note(CallNote::Attempt(2));
            let waiting = slot(&limit);
            tokio::pin!(waiting);
            assert!(futures::poll!(&mut waiting).is_pending());
            drop(held);
            waiting.await.is_some()
        };
        assert!(watching(Some(watcher), call).await);
        assert_eq!(
            *heard.lock().unwrap(),
            ["Attempt(2)", "WaitingForSlot", "SlotTaken"]
        );
        note(CallNote::Attempt(3));
        assert_eq!(
            heard.lock().unwrap().len(),
            3,
            "outside the call: nobody hears"
        );
    }
}
