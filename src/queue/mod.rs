//! The durable job queue: its types here, the `JobQueue` trait (the seam
//! between the API, the workers and a store) in `seam.rs`, the lifecycle
//! written once for every dialect, and the two stores.
//!
//! Backends: `sqlite` (one daemon, one file) and `postgres` (several daemons
//! sharing one database).
//!
//! Semantics (every backend must pass `tests/queue_conformance.rs`):
//! at-least-once delivery with leases renewed by heartbeats; every state
//! change is guarded by the attempt number, so a stale worker can never
//! overwrite a newer outcome and a finished job never runs again (an
//! outbox delivery's settle is guarded the same way, by its claim's
//! generation, and a schedule's fire by its expected next fire); retryable
//! failures come back after exponential backoff with jitter until
//! `max_attempts`, then the job is dead; each job's events are stored in the
//! same database, gap-free by sequence number; each job's step journal is
//! stored there too, so a new attempt resumes where the last one stopped.
//!
//! The queue alone decides a job's outcome: [`decide`] is the one rule, and a
//! backend applies it and stamps the final event inside the transaction that
//! records it.
//!
//! This module must not know about bundles, the kernel or HTTP.

mod assistant_calls;
mod assistants;
mod backend;
mod decisions;
mod driver;
mod error;
mod fair;
mod item_calls;
mod items;
mod kind;
mod leased;
mod lifecycle;
mod listing;
mod op;
mod open;
mod origin;
pub mod outbox;
mod poison;
pub mod postgres;
mod push_configs;
mod reads;
mod releases;
mod reservations;
mod resolution;
mod retry;
mod rules;
mod schedules;
mod seam;
pub mod sqlite;
mod statements;
mod stats;
mod threads;
mod transaction;
mod tx;
mod versions;

pub use assistants::{
    ASSISTANTS_SCANNED, AssistantCreated, AssistantPatch, AssistantSettings, StoredAssistant,
    StoredAssistantVersion, VERSIONS_LISTED,
};
pub use driver::Queue;
pub use error::{NoAnswer, QueueError};
pub(crate) use fair::ReadyKey;
pub use fair::Shares;
pub use items::{
    ITEMS_SCANNED, MAX_VALUE_BYTES, NAMESPACES_SCANNED, NewItem, SEPARATOR, StoredItem,
};
pub use kind::{
    Asked, ControlError, Controls, EvalPin, EvalRun, JobKind, MAX_AGENTS_VARIABLE,
    ONLY_STAGE_VARIABLE, TOOLS_VARIABLE, VerifyRun,
};
pub use leased::LeasedJob;
pub use lifecycle::Pinner;
pub use listing::{JobFilter, JobOrder, Page, UpdateCursor, conversation_history};
pub use outbox::{
    Delivery, DeliveryFilter, DeliveryPage, DeliveryRecord, DeliveryResult, DeliveryState,
    PushAuth, PushConfig, PushPayload, Redrive, Settled,
};
pub use push_configs::{PushCaps, PushHolder};
pub use reads::Deletion;
pub use releases::{RELEASES_KEPT, Replaces, StoredRelease};
pub(crate) use resolution::parked_call;
pub use resolution::{CallerOutput, Resolution};
pub use retry::RetryPolicy;
pub(crate) use rules::{Candidate, lost_reply};
pub use rules::{Decision, decide, decide_release, stamp_final};
pub use schedules::{FireRecord, StoredSchedule};
pub use seam::{AssistantStore, ItemStore, JobQueue};
pub use stats::WriteCounts;
pub(crate) use stats::WriteStats;
pub use threads::{
    Created, MAX_COPIED_RUNS, StoredThread, THREADS_SCANNED, ThreadCopy, ThreadDeletion,
};
pub use tx::Pin;

pub use open::{MigrationStatus, location, open, postgres_options};
pub use origin::{ForkSeed, JobOrigin};

use std::fmt;
use std::time::{Duration, SystemTime};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::events::EventEnvelope;
use crate::journal::JournalEntry;
use crate::trace_context::TraceContext;

/// A job's id (a UUIDv7: time-ordered).
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(transparent)]
pub struct JobId(pub String);

impl JobId {
    pub fn new() -> Self {
        Self(uuid::Uuid::now_v7().to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for JobId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<String> for JobId {
    fn from(s: String) -> Self {
        Self(s)
    }
}

impl From<&str> for JobId {
    fn from(s: &str) -> Self {
        Self(s.to_string())
    }
}

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    Dead,
    /// An `unsafe` tool call of an interrupted attempt has an unknown
    /// outcome; an operator resolves the job (retry, skip or fail).
    NeedsAttention,
    /// A tool call waits for a person's decision (approve, deny, edit);
    /// the job holds no worker meanwhile.
    AwaitingApproval,
}

impl JobState {
    pub const ALL: [JobState; 8] = [
        Self::Queued,
        Self::Running,
        Self::Succeeded,
        Self::Failed,
        Self::Cancelled,
        Self::Dead,
        Self::NeedsAttention,
        Self::AwaitingApproval,
    ];

    /// The states a job can still leave.
    pub const LIVE: [JobState; 4] = [
        Self::Queued,
        Self::Running,
        Self::NeedsAttention,
        Self::AwaitingApproval,
    ];

    /// The states of a job that ended in an error: it failed, or used up
    /// its attempts (dead). A cancelled job did not err; a job whose
    /// attempt failed and that will be retried is still queued.
    pub const ERRORED: [JobState; 2] = [Self::Failed, Self::Dead];

    /// Parked: the job waits for a person, holding no worker.
    pub fn is_parked(self) -> bool {
        matches!(self, Self::NeedsAttention | Self::AwaitingApproval)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Dead => "dead",
            Self::NeedsAttention => "needs_attention",
            Self::AwaitingApproval => "awaiting_approval",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Succeeded | Self::Failed | Self::Cancelled | Self::Dead
        )
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Job {
    /// The final answer the job's run produced (`result.output`), if any.
    pub fn answer(&self) -> Option<&str> {
        self.result.as_ref().and_then(|r| r["output"].as_str())
    }

    /// Whether a repeat submit with this job's idempotency key asks for the
    /// same job (bundle, input, variables, kind and controls).
    pub fn same_content(&self, job: &NewJob) -> bool {
        self.bundle == job.bundle
            && self.input == job.input
            && self.variables == job.variables
            && self.kind == job.kind
            && self.controls == job.controls
    }

    /// The answer of a succeeded job, or why the job has none, naming it.
    pub fn answer_or_error(&self) -> Result<&str, NoAnswer> {
        let id = self.id.clone();
        let reason = |none: &str| self.error.clone().unwrap_or_else(|| none.to_string());
        match self.state {
            JobState::Succeeded => Ok(self.answer().unwrap_or_default()),
            JobState::NeedsAttention => Err(NoAnswer::NeedsAttention {
                id,
                reason: reason("no reason recorded"),
            }),
            JobState::AwaitingApproval => Err(NoAnswer::AwaitingApproval {
                id,
                reason: reason("no reason recorded"),
            }),
            state => Err(NoAnswer::Ended {
                id,
                state,
                error: reason("no error recorded"),
            }),
        }
    }
}

/// What a client submits.
#[derive(Debug, Clone, Default)]
pub struct NewJob {
    /// The id to give the job; a fresh UUIDv7 when `None`. A caller that
    /// must listen to the job before it can start (a streaming chat
    /// completion) picks its id first.
    pub id: Option<JobId>,
    pub bundle: String,
    /// The version the job must run with; `None` pins the current version at
    /// the first lease.
    pub bundle_version: Option<String>,
    /// The content identity the job must run, pinned at insert (a fork
    /// runs its source's pin, or the version its replay was checked
    /// against); `None` pins at the first lease.
    pub bundle_digest: Option<String>,
    /// A fork's origin and the journal it replays, written with the job.
    pub fork: Option<ForkSeed>,
    pub input: String,
    /// What templates render; never a daemon control (see `kind`).
    pub variables: Map<String, Value>,
    /// What the worker runs. Admission decides it (from `only_stage` sent
    /// as a variable, or the plan of a group chat the daemon built); a
    /// submitter's own value is not taken as it is.
    pub kind: JobKind,
    /// The daemon's controls over the run, set at admission (a wire's
    /// typed fields, or the variables [`Asked::lift`] takes out).
    pub controls: Controls,
    /// Chat messages (OpenAI wire form) the job runs over instead of its
    /// bundle's user prompt (`/v1/chat/completions`); the bundle's system
    /// prompt still comes first.
    pub messages: Option<Vec<Value>>,
    /// The conversation of its owner the job continues: it starts from the
    /// conversation's earlier turns (`GET /v1/conversations/{id}`). A
    /// conversation is its key's: the first job of a key to name an id
    /// makes it, in the same write; another key naming the same id has a
    /// conversation of its own.
    pub conversation_id: Option<String>,
    /// Waits behind its conversation's newest queued or running job: held
    /// (its `run_at` is [`HELD_RUN_AT_MS`]) until that job ends or parks,
    /// so the conversation's turns run one after another (LangGraph's
    /// `enqueue`). Without such a job it is queued as any other. Only a job
    /// submitted alone may wait ([`QueueError::HeldInBatch`]).
    pub after_turns: bool,
    /// Higher runs first.
    pub priority: i32,
    pub run_at: Option<SystemTime>,
    /// A second submit with the same key returns the first job.
    pub idempotency_key: Option<String>,
    pub max_attempts: Option<u32>,
    /// The caller's W3C trace context (its `traceparent` and `tracestate`),
    /// which the job's spans continue.
    pub trace: Option<TraceContext>,
    /// What a LangGraph client attached to its run ([`Job::run_meta`]).
    pub run_meta: Option<Value>,
    /// The submitter's budget limits (each at most the bundle's).
    pub limits: Option<crate::budget::BudgetLimits>,
    /// The name of the API key that submitted the job; its idempotency key
    /// is namespaced by it.
    pub owner: Option<String>,
    /// Where the job's state changes are sent (a completion webhook; see
    /// `outbox`), as admission decided it.
    pub webhook: Option<String>,
    /// A2A push notification configs written with the job (a
    /// `SendMessage` that names one): it is told of every state change.
    pub push: Vec<PushConfig>,
    /// The daily budgets the job is queued under (its key's, its
    /// bundle's), as admission found them: the write that queues it
    /// reserves its share, and refuses it when a day has nothing left
    /// ([`QueueError::DailyBudget`]).
    pub daily: Option<crate::budget::DailyBudgets>,
    /// The caps its `push` configs are held to with the ones already held
    /// (`None`: not checked; every way in that takes configs sets them).
    pub push_caps: Option<PushCaps>,
}

/// What an API key's jobs hold and spent (see `JobQueue::owner_load`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OwnerLoad {
    /// Its jobs not finished (queued, running or parked).
    pub in_flight: u64,
    /// What its jobs created in the window spent and hold.
    pub spend: crate::budget::DaySpend,
}

/// A job as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Job {
    pub id: JobId,
    pub bundle: String,
    pub bundle_version: Option<String>,
    /// The digest of the bundle content the job runs with, pinned at its
    /// first lease: every attempt runs exactly that content.
    pub bundle_digest: Option<String>,
    pub input: String,
    /// What templates render.
    pub variables: Map<String, Value>,
    /// What the worker runs (`bundle`, one `stage` of its workflow, a
    /// `group_chat`).
    #[serde(default)]
    pub kind: JobKind,
    /// The daemon's controls over the run (`tools`, `max_agents`,
    /// `verbose`): `{}` when none is set.
    #[serde(default)]
    pub controls: Controls,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    pub priority: i32,
    pub state: JobState,
    /// Leases taken, including resumes after a crash (each lease is a new
    /// attempt number, so a stale worker can write nothing).
    pub attempts: u32,
    /// Retryable failures allowed; resumes after a crash do not count.
    pub max_attempts: u32,
    /// Attempts that began because the worker of the one before died (its
    /// lease expired): resumed from the journal, not failures.
    #[serde(default)]
    pub crash_resumes: u32,
    pub idempotency_key: Option<String>,
    pub traceparent: Option<String>,
    /// The W3C `tracestate` the caller sent with `traceparent`, when it was
    /// valid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
    /// What a LangGraph client attached to its run (its metadata, the
    /// assistant, the request's settings): kept, never read by the queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_meta: Option<Value>,
    pub cancel_requested: bool,
    pub result: Option<Value>,
    pub error: Option<String>,
    /// The call the job is parked on, in one shape whatever parked it
    /// (`kind`: `approval`, `unknown_outcome` or `caller_call`); `None`
    /// when it is not parked, or parked as a poison pill on no call.
    pub pending_call: Option<crate::approval::ParkedCall>,
    /// RFC 3339 UTC.
    pub run_at: String,
    pub created_at: String,
    pub updated_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub lease_expires_at: Option<String>,
    /// While it runs: how often its worker renews the lease (the daemon's
    /// `queue.lease` / 3), each renewal setting `updated_at` and
    /// `lease_expires_at`; a running job silent for two of these has likely
    /// lost its worker (it resumes once the lease expires). Said by
    /// `GET /v1/jobs/{id}` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_every_ms: Option<u64>,
    /// The submitter's budget limits, lowering the bundle's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<crate::budget::BudgetLimits>,
    /// Tokens (prompt and completion) the job spent, as its last attempt's
    /// final event said.
    #[serde(default)]
    pub tokens_spent: u64,
    /// What those tokens cost by the daemon's price table.
    #[serde(default)]
    pub cost_spent: f64,
    /// The name of the API key that submitted the job (`None` for jobs from
    /// before API keys).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Why the job ended (`null` while it can still run): its own run's
    /// reason (`no_tool_calls`, `max_turns`, `termination_tool`, …),
    /// `cancelled` or `error`, as the queue decided with its final state.
    #[serde(default)]
    pub termination_reason: Option<crate::types::TerminationReason>,
    /// Tool calls of any of its runs that ended in an error, all attempts.
    #[serde(default)]
    pub tool_errors: u64,
    /// The job this one was forked from, and the turn it ran live from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<JobOrigin>,
}

/// A job handed to a worker for one attempt.
#[derive(Debug, Clone)]
pub struct Lease {
    /// Only what running the job needs.
    pub job: LeasedJob,
    pub attempt: u32,
    /// The next sequence number of the job's event log.
    pub next_seq: u64,
    /// What earlier attempts journaled (empty on a first attempt): all a run
    /// needs comes with its lease, in one round trip.
    pub journal: Vec<JournalEntry>,
}

/// The lease a worker asks for as it ends an attempt
/// ([`JobQueue::finish_and_lease`]): the slot it frees takes its next job
/// in the same write.
#[derive(Clone)]
pub struct NextLease {
    pub worker: String,
    pub lease_for: Duration,
    /// Jobs at most (0: only finish).
    pub n: usize,
    pub pin: Option<std::sync::Arc<Pinner>>,
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Succeeded(Value),
    Failed {
        error: String,
        retryable: bool,
    },
    /// An `unsafe` call's outcome is unknown: park the job for an operator.
    NeedsAttention {
        error: String,
        pending_call: Box<crate::approval::ParkedCall>,
    },
    /// A call waits for a person's decision: park the job until one comes
    /// (or its timeout denies the call).
    AwaitingApproval {
        error: String,
        request: Box<crate::approval::ParkedCall>,
    },
}

/// A job as an operator's request left it, and the final `JobState` event
/// the same transaction recorded when the request ended it.
#[derive(Debug, Clone)]
pub struct Changed {
    pub job: Job,
    pub final_event: Option<EventEnvelope>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeartbeatReply {
    /// The lease is renewed.
    Ok,
    /// Someone asked to cancel the job: stop and complete it.
    CancelRequested,
    /// The lease belongs to a newer attempt (or the job ended): stop, record nothing.
    Lost,
}

/// What `complete` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompleteReply {
    /// The job is now in this state (`Queued` means it will be retried).
    Recorded(JobState),
    /// The attempt was stale: nothing was written.
    Stale,
}

/// What `finish` recorded: the reply, and the final event as stored (only
/// when recorded: a stale attempt reports nothing).
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub reply: CompleteReply,
    /// The `ApprovalRequested` event a park wrote (just before the final
    /// event); `None` for any other end.
    pub request_event: Option<EventEnvelope>,
    pub final_event: Option<EventEnvelope>,
    /// When a job that waits (a retry's backoff, an approval's timeout)
    /// runs again at the latest (RFC 3339); `None` otherwise.
    pub run_at: Option<String>,
}

impl Finished {
    /// The answer to an attempt that is no longer the job's current one:
    /// nothing was recorded.
    pub fn stale() -> Self {
        Self {
            reply: CompleteReply::Stale,
            request_event: None,
            final_event: None,
            run_at: None,
        }
    }
}

/// One stored event.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub seq: u64,
    pub event_json: String,
}

/// Jobs with the ids they will have (a fresh UUIDv7 where none was chosen).
pub(crate) fn with_ids(jobs: Vec<NewJob>) -> Vec<(JobId, NewJob)> {
    jobs.into_iter()
        .map(|mut job| (job.id.take().unwrap_or_default(), job))
        .collect()
}

/// The `run_at` of a job held behind its conversation's turn
/// ([`NewJob::after_turns`]): 9999-12-31T23:59:59.999Z, which no lease
/// reaches; the release that ends the turn sets it to now.
pub const HELD_RUN_AT_MS: i64 = 253_402_300_799_999;

/// Milliseconds since the Unix epoch.
pub(crate) fn millis(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

pub(crate) fn rfc3339(ms: i64) -> String {
    let t = SystemTime::UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parked_job_answers_that_it_needs_attention_never_that_it_ended() {
        let job: Job = serde_json::from_value(serde_json::json!({
            "id": "j1", "bundle": "b", "bundle_version": null, "bundle_digest": null,
            "input": "x", "variables": {}, "priority": 0, "state": "needs_attention",
            "attempts": 1, "max_attempts": 3, "idempotency_key": null, "traceparent": null,
            "cancel_requested": false, "result": null, "error": "tool `charge` was started",
            "pending_call": null, "run_at": "", "created_at": "", "updated_at": "",
            "started_at": null, "finished_at": null, "lease_expires_at": null,
        }))
        .unwrap();
        let said = job.answer_or_error().unwrap_err().to_string();
        assert!(
            said.contains("job j1 needs attention")
                && said.contains("tool `charge` was started")
                && said.contains("resolve j1")
                && !said.contains("ended needs_attention"),
            "{said}"
        );
    }
}
