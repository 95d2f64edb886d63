//! The durable job queue: the `JobQueue` trait (the seam between the API,
//! the workers and a store), its types, and the embedded SQLite backend.
//!
//! Semantics (every backend must pass `tests/queue_conformance.rs`):
//! at-least-once delivery with leases renewed by heartbeats; every state
//! change is guarded by the attempt number, so a stale worker can never
//! overwrite a newer outcome and a finished job never runs again; retryable
//! failures come back after exponential backoff with jitter until
//! `max_attempts`, then the job is dead; each job's events are stored in the
//! same database, gap-free by sequence number.
//!
//! This module must not know about bundles, the kernel or HTTP.

pub mod sqlite;

use std::fmt;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::sync::broadcast;

use crate::events::EventEnvelope;

/// A job's id (a UUIDv7: time-ordered).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    Dead,
}

impl JobState {
    pub const ALL: [JobState; 6] = [
        Self::Queued,
        Self::Running,
        Self::Succeeded,
        Self::Failed,
        Self::Cancelled,
        Self::Dead,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Dead => "dead",
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

/// What a client submits.
#[derive(Debug, Clone, Default)]
pub struct NewJob {
    pub bundle: String,
    /// The version the job must run with; `None` pins the current version at
    /// the first lease.
    pub bundle_version: Option<String>,
    pub input: String,
    pub variables: Map<String, Value>,
    /// Higher runs first.
    pub priority: i32,
    pub run_at: Option<SystemTime>,
    /// A second submit with the same key returns the first job.
    pub idempotency_key: Option<String>,
    pub max_attempts: Option<u32>,
    pub traceparent: Option<String>,
}

/// A job as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub id: JobId,
    pub bundle: String,
    pub bundle_version: Option<String>,
    pub input: String,
    pub variables: Map<String, Value>,
    pub priority: i32,
    pub state: JobState,
    pub attempts: u32,
    pub max_attempts: u32,
    pub idempotency_key: Option<String>,
    pub traceparent: Option<String>,
    pub cancel_requested: bool,
    pub result: Option<Value>,
    pub error: Option<String>,
    /// RFC 3339 UTC.
    pub run_at: String,
    pub created_at: String,
    pub updated_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub lease_expires_at: Option<String>,
}

/// A job handed to a worker for one attempt.
#[derive(Debug, Clone)]
pub struct Lease {
    pub job: Job,
    pub attempt: u32,
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Succeeded(Value),
    Failed { error: String, retryable: bool },
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

#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    pub state: Option<JobState>,
    pub bundle: Option<String>,
    pub limit: usize,
    /// From a previous page's `next_cursor`.
    pub cursor: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Page {
    pub jobs: Vec<Job>,
    pub next_cursor: Option<String>,
}

/// One stored event.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub seq: u64,
    pub event_json: String,
}

/// Retry timing.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub backoff_base: Duration,
    pub backoff_max: Duration,
}

impl RetryPolicy {
    /// Exponential backoff with jitter (50–100 % of the capped delay).
    pub fn delay(&self, attempt: u32) -> Duration {
        use rand::Rng;
        let exp = self
            .backoff_base
            .saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1)));
        exp.min(self.backoff_max)
            .mul_f64(rand::rng().random_range(0.5..=1.0))
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
        }
    }
}

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
        "job {job}: attempt {attempt} is not the current attempt (a newer attempt owns the job, or it ended)"
    )]
    StaleAttempt { job: JobId, attempt: u32 },
    #[error("job {job}: event {seq} is already stored")]
    DuplicateEvent { job: JobId, seq: u64 },
    #[error("invalid cursor {0:?}")]
    Cursor(String),
}

/// The seam between API, workers and storage.
#[async_trait]
pub trait JobQueue: Send + Sync {
    async fn submit(&self, job: NewJob) -> Result<(Job, bool), QueueError>;
    async fn get(&self, id: &JobId) -> Result<Option<Job>, QueueError>;
    async fn list(&self, filter: JobFilter) -> Result<Page, QueueError>;
    /// (bundle, state, count) for every non-empty combination.
    async fn counts_by_state(&self) -> Result<Vec<(String, JobState, u64)>, QueueError>;
    /// The best runnable job: highest priority, then earliest `run_at`, then
    /// oldest; queued and due, or running with an expired lease.
    async fn lease(&self, worker: &str, lease_for: Duration) -> Result<Option<Lease>, QueueError>;
    async fn heartbeat(
        &self,
        id: &JobId,
        attempt: u32,
        lease_for: Duration,
    ) -> Result<HeartbeatReply, QueueError>;
    /// Records the bundle version a job runs with (first attempt only).
    async fn pin_version(&self, id: &JobId, attempt: u32, version: &str) -> Result<(), QueueError>;
    /// Records an attempt's outcome and appends `final_events` in the same transaction.
    async fn complete(
        &self,
        id: &JobId,
        attempt: u32,
        outcome: Outcome,
        final_events: &[EventEnvelope],
    ) -> Result<CompleteReply, QueueError>;
    /// Puts a running job back without consuming the attempt (graceful drain).
    async fn release(&self, id: &JobId, attempt: u32) -> Result<(), QueueError>;
    /// Cancels a queued job at once; asks a running job to stop.
    async fn cancel(&self, id: &JobId) -> Result<Option<Job>, QueueError>;
    async fn append_events(
        &self,
        id: &JobId,
        attempt: u32,
        events: &[EventEnvelope],
    ) -> Result<(), QueueError>;
    async fn events_after(
        &self,
        id: &JobId,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, QueueError>;
    async fn last_seq(&self, id: &JobId) -> Result<u64, QueueError>;
    /// Job ids whose events or state changed (in this process).
    fn subscribe(&self) -> broadcast::Receiver<JobId>;
    async fn ping(&self) -> Result<(), QueueError>;
}

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
