//! What a lease hands the worker for one attempt ([`LeasedJob`]): only what
//! running the job needs — what to run (bundle, pin, kind, controls), with
//! what (input, variables, messages, conversation), for whom (owner,
//! priority, limits, trace) and where the attempt stands — not its outcome
//! fields, its idempotency key or its timestamps, which the queue alone
//! reads and writes. The stored row is [`Job`], the API's body its
//! serialization.

use serde_json::{Map, Value};

use super::{Controls, Job, JobId, JobKind};
use crate::budget::BudgetLimits;
use crate::trace_context::TraceContext;

/// A job as one attempt runs it.
#[derive(Debug, Clone, PartialEq)]
pub struct LeasedJob {
    pub id: JobId,
    pub bundle: String,
    /// The version and content digest the job is pinned to (`None` until
    /// its first lease pinned them: the bundle was not loaded then).
    pub bundle_version: Option<String>,
    pub bundle_digest: Option<String>,
    /// What the worker runs, and the daemon's controls over the run.
    pub kind: JobKind,
    pub controls: Controls,
    pub input: String,
    /// What the templates render.
    pub variables: Map<String, Value>,
    /// Chat messages the job runs over instead of its bundle's user prompt.
    pub messages: Option<Vec<Value>>,
    /// The conversation whose earlier turns the job starts from.
    pub conversation_id: Option<String>,
    /// The API key that submitted it: whose bundles its router reaches,
    /// whose share of the endpoints its calls take.
    pub owner: Option<String>,
    pub priority: i32,
    /// The submitter's budget limits, lowering the bundle's.
    pub limits: Option<BudgetLimits>,
    /// The caller's trace context, continued by the job's spans.
    pub trace: Option<TraceContext>,
    /// Leases taken so far, this one included.
    pub attempts: u32,
    /// Attempts that began because the worker before died.
    pub crash_resumes: u32,
    /// A cancel was asked for before this attempt began.
    pub cancel_requested: bool,
    /// When the job was due (RFC 3339 UTC).
    pub run_at: String,
    /// When its first attempt started (its wall-time budget counts from
    /// there), RFC 3339 UTC.
    pub started_at: Option<String>,
}

impl From<Job> for LeasedJob {
    fn from(job: Job) -> Self {
        Self {
            id: job.id,
            bundle: job.bundle,
            bundle_version: job.bundle_version,
            bundle_digest: job.bundle_digest,
            kind: job.kind,
            controls: job.controls,
            input: job.input,
            variables: job.variables,
            messages: job.messages,
            conversation_id: job.conversation_id,
            owner: job.owner,
            priority: job.priority,
            limits: job.limits,
            trace: TraceContext::stored(job.traceparent.as_deref(), job.tracestate.as_deref()),
            attempts: job.attempts,
            crash_resumes: job.crash_resumes,
            cancel_requested: job.cancel_requested,
            run_at: job.run_at,
            started_at: job.started_at,
        }
    }
}
