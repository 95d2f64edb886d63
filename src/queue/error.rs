//! What a queue operation can fail with, each saying what failed, where,
//! and what to do about it.

use super::{Job, JobId, JobState};

#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("queue database {path}: {detail}")]
    Store { path: String, detail: String },
    #[error(
        "queue database {path} has schema version {found}, newer than this binary supports ({supported}); upgrade structured-agents or point queue.path elsewhere"
    )]
    TooNew {
        path: String,
        found: u32,
        supported: u32,
    },
    #[error(
        "PostgreSQL queue {location} has schema version {found}, newer than this binary supports ({supported}); upgrade structured-agents, or point queue.schema at another schema"
    )]
    SchemaTooNew {
        location: String,
        found: u32,
        supported: u32,
    },
    #[error(
        "cannot connect to PostgreSQL at {url} (queue.url): {detail}; check that the server is running (e.g. `pg_ctlcluster 15 main start`) and that queue.url and queue.password_env are right"
    )]
    Connect { url: String, detail: String },
    /// A queue setting that cannot work, named by its config key.
    #[error("{key}: {message}")]
    Setting { key: &'static str, message: String },
    #[error(
        "job {job}: attempt {attempt} is not the current attempt (a newer attempt owns the job, or it ended)"
    )]
    StaleAttempt { job: JobId, attempt: u32 },
    #[error("job {job}: event {seq} is already stored")]
    DuplicateEvent { job: JobId, seq: u64 },
    /// A batch submit reused an idempotency key for different content: the
    /// whole batch is refused.
    #[error(
        "job {index} of the batch: idempotency key {key:?} was already used for job {} with a different bundle, input or variables; use a new key, or GET /v1/jobs/{} for the existing job",
        existing.id, existing.id
    )]
    KeyConflict {
        index: usize,
        key: String,
        existing: Box<Job>,
    },
    /// A job (the `index`-th of its submit; 0 alone) is under a daily
    /// budget with nothing left for it: nothing is queued.
    #[error("{refusal}")]
    DailyBudget {
        index: usize,
        refusal: crate::budget::DailyRefusal,
    },
    /// A push config past a cap of `server.max_push_configs*` (or a
    /// task's 16): nothing is stored.
    #[error("{}", push_full(holder, *held, *limit))]
    PushConfigsFull {
        holder: super::push_configs::PushHolder,
        held: usize,
        limit: usize,
    },
    /// The store's write queue is full: too many writes wait for it already.
    #[error(
        "queue database {store}: {waiting} writes are already waiting for the store; try again shortly"
    )]
    Busy { store: String, waiting: usize },
    #[error(
        "job {index} of the batch asks to wait behind its conversation's turns, which only a job submitted alone can: submit it by itself"
    )]
    HeldInBatch { index: usize },
    #[error("invalid cursor {0:?}")]
    Cursor(String),
    #[error("job {0} does not exist")]
    NotFound(JobId),
    #[error(
        "job {job} is {state}, not needs_attention: only a parked job can be resolved (see its state with `structured-agents job {job}`)"
    )]
    NotParked { job: JobId, state: JobState },
    #[error(
        "job {0} parked because its worker died repeatedly, not at a call: there is no result to skip; use --retry or --fail"
    )]
    NoCallToSkip(JobId),
    /// Outputs sent for a job that waits for none, or that do not answer
    /// exactly the calls it waits on.
    #[error(
        "job {job} {problem}: send one output for each call it waits on ({expected}), and no other"
    )]
    CallerOutputs {
        job: JobId,
        problem: String,
        expected: String,
    },
    #[error(
        "job {job} is {state}, not awaiting_approval: there is nothing to decide (each decision is taken once; see `structured-agents job {job}`)"
    )]
    NotAwaitingApproval { job: JobId, state: JobState },
    #[error(
        "job {job} awaits a decision on call {awaited} of tool `{tool}`, not on call {call}: decide on {awaited} (`structured-agents approvals {job}`)"
    )]
    NotTheAwaitedCall {
        job: JobId,
        call: String,
        awaited: String,
        tool: String,
    },
    #[error("job {job}: {source}")]
    Decision {
        job: JobId,
        #[source]
        source: crate::approval::DecisionError,
    },
}

impl QueueError {
    /// Whether the store, not the request, is the trouble: it cannot be
    /// reached, cannot write (a full disk, a deleted file, an I/O error) or
    /// has too many writes waiting. A caller should try again later (the
    /// API answers 503 with `Retry-After`); everything else is the request's
    /// fault or a bug.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            QueueError::Store { .. } | QueueError::Connect { .. } | QueueError::Busy { .. }
        )
    }

    /// What a client is told when [`Self::is_unavailable`]: the rule, not
    /// the store's path or error text (those go to the daemon log).
    pub fn unavailable_message(&self) -> &'static str {
        match self {
            QueueError::Busy { .. } => {
                "the job queue has too many writes waiting; try again after Retry-After seconds"
            }
            _ => {
                "the job queue cannot be reached or cannot write (see the daemon log and GET /readyz); try again after Retry-After seconds"
            }
        }
    }
}

/// Why a push config was refused, and what to do.
fn push_full(holder: &super::push_configs::PushHolder, held: usize, limit: usize) -> String {
    use super::push_configs::PushHolder;
    match holder {
        PushHolder::Task(task) => format!(
            "task {task} already has {held} push notification configs, the most it holds ({limit}): delete one (DeleteTaskPushNotificationConfig) first"
        ),
        PushHolder::Key(key) => format!(
            "API key {key:?} holds {held} push notification configs on tasks not ended, its share (server.max_push_configs_per_key, {limit}): delete some, or wait for its tasks to end"
        ),
        PushHolder::Daemon => format!(
            "the daemon holds {held} push notification configs on tasks not ended, its limit (server.max_push_configs, {limit}): delete some, or ask the operator to raise it"
        ),
    }
}

/// Why a job has no answer to give: it is parked (the operator or an
/// approver can move it on) or it ended without one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoAnswer {
    /// Parked, not ended: says so, and what the operator can do.
    #[error(
        "job {id} needs attention (it is parked, not ended): {reason}; see `structured-agents job {id}` and `structured-agents resolve {id} --retry | --skip RESULT | --fail`"
    )]
    NeedsAttention { id: JobId, reason: String },
    #[error(
        "job {id} awaits approval (it is parked, not ended): {reason}; see `structured-agents approvals {id}`, then `structured-agents approve {id}` or `deny {id} --reason R`"
    )]
    AwaitingApproval { id: JobId, reason: String },
    #[error("job {id} ended {}: {error}", state.as_str())]
    Ended {
        id: JobId,
        state: JobState,
        error: String,
    },
}

impl NoAnswer {
    /// Whether the job waits for someone (it may still answer later).
    pub fn is_parked(&self) -> bool {
        !matches!(self, NoAnswer::Ended { .. })
    }
}
