//! What the gate knows of the job a model call belongs to: its priority,
//! whose turn it takes (fairness across bundles and API keys) and whether
//! it has made a call yet. A task-local, so the `ChatBackend` signature and
//! the kernel stay as they are: the worker scopes each job's run with
//! [`JobTicket::scope`].

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

tokio::task_local! {
    static TICKET: Arc<JobTicket>;
}

#[derive(Debug)]
pub struct JobTicket {
    /// Higher goes first.
    pub priority: i32,
    /// Calls of different `fairness` keys take turns at equal priority.
    pub fairness: String,
    /// Whether the job has made (or, resumed, had made) a model call.
    started: AtomicBool,
}

/// What the gate reads of the current call.
#[derive(Debug, Clone, PartialEq)]
pub struct CallTicket {
    pub priority: i32,
    pub fairness: String,
    /// The job's first model call: held at the lower threshold.
    pub first_call: bool,
}

impl JobTicket {
    pub fn new(priority: i32, fairness: String, started: bool) -> Arc<Self> {
        Arc::new(Self {
            priority,
            fairness,
            started: AtomicBool::new(started),
        })
    }

    /// Runs `run` with its model calls described by `ticket`.
    pub async fn scope<F: Future>(ticket: Arc<Self>, run: F) -> F::Output {
        TICKET.scope(ticket, run).await
    }
}

/// The current call's ticket, marking its job started. Outside a job (a
/// CLI run), a call is an ordinary in-flight call of priority 0.
pub fn current_call() -> CallTicket {
    TICKET
        .try_with(|job| CallTicket {
            priority: job.priority,
            fairness: job.fairness.clone(),
            first_call: !job.started.swap(true, Ordering::Relaxed),
        })
        .unwrap_or(CallTicket {
            priority: 0,
            fairness: String::new(),
            first_call: false,
        })
}
