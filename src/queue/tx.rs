//! What the lifecycle and a database share beside the statements
//! (`statements::JobStatements`): why a write failed ([`Fail`]), the one
//! row → [`Job`] mapping over [`Columns`] and the values a new row binds,
//! the rows a write reads before it changes one, and the change list every
//! write leaves for the wake-ups.
//!
//! A dialect (`sqlite`, `postgres`) implements `JobStatements` (and the
//! outbox's and the schedules' statement sets, together a
//! `transaction::Tx`) with its SQL; it must
//! not decide anything: which job leases, what an outcome records, when an
//! attempt is stale, all live in `lifecycle` and `rules`.

use serde_json::Value;

use super::*;

/// Why a statement or a whole write did not happen: the database failed
/// (its message), the database gave the write up to break a lock cycle or
/// a serialization conflict with a concurrent write (nothing is wrong with
/// it: the writer runs it again), or the write refused itself (stale
/// attempt, duplicate event, ...). Either way the write's transaction or
/// savepoint rolls back.
#[derive(Debug)]
pub(crate) enum Fail {
    Db(String),
    Conflict(String),
    Refused(QueueError),
}

pub(crate) type Res<T> = Result<T, Fail>;

impl Fail {
    /// The error a caller sees, naming the store (`path`) for a database
    /// failure.
    pub(crate) fn into_error(self, store: &str) -> QueueError {
        match self {
            Fail::Db(detail) | Fail::Conflict(detail) => QueueError::Store {
                path: store.to_string(),
                detail,
            },
            Fail::Refused(e) => e,
        }
    }
}

/// What a committed write changed, for the wake-ups: `Runnable` wakes idle
/// workers (here and, through NOTIFY, on other daemons); every change wakes
/// the job's event streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    Updated,
    Runnable,
    /// A running job was asked to stop: its worker stops the run at once
    /// instead of at its next heartbeat.
    CancelRequested,
}

/// The columns every job query selects, in the order [`job_from_row`]
/// reads them.
pub(crate) const JOB_COLUMNS: &str = "id, bundle, bundle_version, input, variables, priority, state, attempts, max_attempts, idempotency_key, traceparent, cancel_requested, result, error, run_at, created_at, updated_at, started_at, finished_at, lease_expires_at, bundle_digest, pending_call, messages, conversation_id, crash_resumes, limits, tokens_spent, cost_micros, owner, termination_reason, tool_errors, forked_from, forked_at_turn, kind, controls, tracestate, run_meta";

/// The columns the lease queries select, in the order [`candidate_from_row`]
/// reads them.
pub(crate) const CANDIDATE_COLUMNS: &str = "id, state, crash_resumes, bundle";

/// A result row as the mapping reads it. Integers of any width (and
/// PostgreSQL's booleans) read as `i64`.
pub(crate) trait Columns {
    fn text(&self, i: usize) -> Res<Option<String>>;
    fn int(&self, i: usize) -> Res<Option<i64>>;

    fn req_text(&self, i: usize) -> Res<String> {
        self.text(i)?
            .ok_or_else(|| Fail::Db(format!("column {i} is NULL")))
    }

    fn req_int(&self, i: usize) -> Res<i64> {
        self.int(i)?
            .ok_or_else(|| Fail::Db(format!("column {i} is NULL")))
    }
}

/// Counters are stored signed and never negative.
fn count(n: i64) -> u32 {
    u32::try_from(n.max(0)).unwrap_or(u32::MAX)
}

/// The one mapping of a job row (selected with [`JOB_COLUMNS`]).
pub(crate) fn job_from_row(row: &impl Columns) -> Res<Job> {
    let json =
        |i| -> Res<Option<Value>> { Ok(row.text(i)?.and_then(|t| serde_json::from_str(&t).ok())) };
    let ts = |i| -> Res<Option<String>> { Ok(row.int(i)?.map(rfc3339)) };
    let state = row.req_text(6)?;
    let owner = row.text(28)?;
    let id = row.req_text(0)?;
    let kind = super::kind::from_column(row.text(33)?, "kind", &id);
    let controls = super::kind::from_column(row.text(34)?, "controls", &id);
    Ok(Job {
        bundle: row.req_text(1)?,
        bundle_version: row.text(2)?,
        bundle_digest: row.text(20)?,
        input: row.req_text(3)?,
        variables: match json(4)? {
            Some(Value::Object(map)) => map,
            _ => Default::default(),
        },
        messages: match json(22)? {
            Some(Value::Array(messages)) => Some(messages),
            _ => None,
        },
        conversation_id: row.text(23)?,
        priority: i32::try_from(row.req_int(5)?).unwrap_or_default(),
        state: JobState::parse(&state).unwrap_or(JobState::Failed),
        attempts: count(row.req_int(7)?),
        max_attempts: count(row.req_int(8)?),
        crash_resumes: count(row.req_int(24)?),
        idempotency_key: row
            .text(9)?
            .map(|stored| shown_key(owner.as_deref(), stored)),
        traceparent: row.text(10)?,
        tracestate: row.text(35)?,
        run_meta: json(36)?,
        cancel_requested: row.req_int(11)? != 0,
        result: json(12)?,
        error: row.text(13)?,
        // Rows of any version read into today's shape, naming where a
        // decision on this job goes.
        pending_call: row
            .text(21)?
            .and_then(|text| serde_json::from_str::<crate::approval::ParkedCall>(&text).ok())
            .map(|parked| parked.for_job(&id, owner.as_deref())),
        run_at: rfc3339(row.req_int(14)?),
        created_at: rfc3339(row.req_int(15)?),
        updated_at: rfc3339(row.req_int(16)?),
        started_at: ts(17)?,
        finished_at: ts(18)?,
        lease_expires_at: ts(19)?,
        heartbeat_every_ms: None,
        id: JobId(id),
        limits: row
            .text(25)?
            .and_then(|text| serde_json::from_str(&text).ok()),
        tokens_spent: row.req_int(26)?.max(0) as u64,
        cost_spent: micros_to_cost(row.req_int(27)?),
        owner,
        termination_reason: row
            .text(29)?
            .as_deref()
            .and_then(crate::types::TerminationReason::parse),
        tool_errors: row.req_int(30)?.max(0) as u64,
        forked_from: match (row.text(31)?, row.int(32)?) {
            (Some(job_id), Some(turn)) => Some(JobOrigin {
                job_id: JobId(job_id),
                at_turn: count(turn),
            }),
            _ => None,
        },
        kind,
        controls,
    })
}

/// An idempotency key as stored: namespaced by the job's owner, so two API
/// keys never share one (and one cannot learn the other's job ids by
/// reusing its keys).
pub(crate) fn stored_key(owner: Option<&str>, key: &str) -> String {
    match owner {
        Some(owner) => format!("{owner}/{key}"),
        None => key.to_string(),
    }
}

/// A stored idempotency key as its submitter sent it.
fn shown_key(owner: Option<&str>, stored: String) -> String {
    match owner.and_then(|o| stored.strip_prefix(o)?.strip_prefix('/')) {
        Some(key) => key.to_string(),
        None => stored,
    }
}

/// Cost is stored in millionths (an integer in both dialects).
pub(crate) fn cost_to_micros(cost: f64) -> i64 {
    (cost * 1_000_000.0).round() as i64
}

fn micros_to_cost(micros: i64) -> f64 {
    micros as f64 / 1_000_000.0
}

/// A lease candidate (selected with [`CANDIDATE_COLUMNS`]).
pub(crate) fn candidate_from_row(row: &impl Columns) -> Res<Candidate> {
    Ok(Candidate {
        id: row.req_text(0)?,
        running: row.req_text(1)? == "running",
        crash_resumes: count(row.req_int(2)?),
        bundle: row.req_text(3)?,
        fair_pass: None,
    })
}

/// A journal row (`scope, turn, step, body`).
pub(crate) fn entry_from_row(row: &impl Columns) -> Res<JournalEntry> {
    Ok(JournalEntry {
        scope: row.req_text(0)?,
        turn: count(row.req_int(1)?),
        step: row.req_text(2)?,
        body: row.req_text(3)?,
    })
}

/// The job row's attempt fields, read (and on PostgreSQL locked) before a
/// write guarded by the attempt.
pub(crate) struct AttemptRow {
    pub state: String,
    pub attempts: u32,
    /// `max_attempts + crash_resumes`: resumes after a crash are not
    /// failures, so they extend the attempts a job may use.
    pub allowed: u32,
    pub cancel_requested: bool,
}

impl AttemptRow {
    pub(crate) fn from_row(row: &impl Columns) -> Res<Self> {
        Ok(Self {
            state: row.req_text(0)?,
            attempts: count(row.req_int(1)?),
            allowed: count(row.req_int(2)?),
            cancel_requested: row.req_int(3)? != 0,
        })
    }
}

/// A conversation as the store keys it: its owner's key (`""` for jobs from
/// before keys) and the id that key gave it. Two keys' conversations of
/// one id are two conversations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conversation<'a> {
    pub owner: &'a str,
    pub id: &'a str,
}

impl<'a> Conversation<'a> {
    pub fn of(owner: Option<&'a str>, id: &'a str) -> Self {
        Self {
            owner: owner.unwrap_or_default(),
            id,
        }
    }
}

/// What marking a conversation's newest turn found (a job waiting behind
/// the conversation's turns, `NewJob::after_turns`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TurnAhead {
    /// No turn is queued or running: the job is queued as any other.
    Idle,
    /// The newest turn queued or running and not held itself, now marked
    /// followed: the job waits behind it.
    Followed(String),
    /// That turn ended between the read and the mark (PostgreSQL): the
    /// write is made again.
    Moved,
}

/// What a day's jobs spent and hold as the store sums it (cost in
/// millionths): spent, and held by jobs not finished beyond their spend.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct StoredSpend {
    pub tokens: i64,
    pub cost_micros: i64,
    pub held_tokens: i64,
    pub held_cost_micros: i64,
}

impl StoredSpend {
    pub(crate) fn day(self) -> crate::budget::DaySpend {
        crate::budget::DaySpend {
            tokens: self.tokens.max(0) as u64,
            cost: self.cost_micros as f64 / 1_000_000.0,
            held_tokens: self.held_tokens.max(0) as u64,
            held_cost: self.held_cost_micros.max(0) as f64 / 1_000_000.0,
        }
    }
}

/// A new job's column values, as every dialect binds them
/// ([`ROW_VALUES`] a row).
pub(crate) struct JobValues<'a> {
    pub id: &'a str,
    pub bundle: &'a str,
    pub bundle_version: Option<&'a str>,
    pub input: &'a str,
    pub variables: String,
    pub priority: i32,
    pub max_attempts: u32,
    /// Namespaced by the owner ([`stored_key`]).
    pub idempotency_key: Option<String>,
    pub traceparent: Option<&'a str>,
    pub tracestate: Option<&'a str>,
    pub run_at: i64,
    pub messages: Option<String>,
    pub conversation_id: Option<&'a str>,
    pub limits: Option<String>,
    pub owner: Option<&'a str>,
    pub bundle_digest: Option<&'a str>,
    pub forked_from: Option<&'a str>,
    pub forked_at_turn: Option<i64>,
    /// [`JobKind`] as JSON.
    pub kind: String,
    /// [`Controls`] as JSON.
    pub controls: String,
    pub run_meta: Option<String>,
}

impl<'a> JobValues<'a> {
    pub(crate) fn of(id: &'a JobId, job: &'a NewJob, now: i64) -> Self {
        Self {
            id: id.as_str(),
            bundle: &job.bundle,
            bundle_version: job.bundle_version.as_deref(),
            input: &job.input,
            variables: Value::Object(job.variables.clone()).to_string(),
            priority: job.priority,
            max_attempts: job.max_attempts.unwrap_or(3).max(1),
            idempotency_key: job
                .idempotency_key
                .as_deref()
                .map(|key| stored_key(job.owner.as_deref(), key)),
            traceparent: job.trace.as_ref().map(TraceContext::traceparent),
            tracestate: job.trace.as_ref().and_then(TraceContext::tracestate),
            run_at: job.run_at.map(millis).unwrap_or(now),
            messages: job.messages.clone().map(|m| Value::Array(m).to_string()),
            conversation_id: job.conversation_id.as_deref(),
            limits: job
                .limits
                .as_ref()
                .and_then(|l| serde_json::to_string(l).ok()),
            owner: job.owner.as_deref(),
            bundle_digest: job.bundle_digest.as_deref(),
            forked_from: job.fork.as_ref().map(|f| f.origin.job_id.as_str()),
            forked_at_turn: job.fork.as_ref().map(|f| i64::from(f.origin.at_turn)),
            kind: super::kind::column_text(&job.kind),
            controls: super::kind::column_text(&job.controls),
            run_meta: job.run_meta.as_ref().map(Value::to_string),
        }
    }
}

/// An attempt to start on a leased candidate (`JobStatements::start_attempt`):
/// `pin` pins a first attempt's bundle when none is pinned yet.
pub(crate) struct AttemptStart<'a> {
    pub candidate: &'a Candidate,
    pub worker: &'a str,
    pub expires: i64,
    pub now: i64,
    pub pin: Option<&'a Pin>,
}

/// The statement that starts an attempt, in either dialect (value `n` is
/// spelled `placeholder(n)`): 1 the job's id, 2 whether it resumes (1) or
/// not (0), 3 the worker, 4 when the lease expires, 5 now, 6 and 7 the pin's
/// version and digest, 8 the key's fair pass. A version the job was
/// submitted with stays; a pinned digest stays. The started row comes back.
pub(crate) fn start_attempt_sql(placeholder: impl Fn(usize) -> String) -> String {
    let p = |n| placeholder(n);
    format!(
        "UPDATE jobs SET state = 'running', attempts = attempts + 1, crash_resumes = crash_resumes + {}, lease_owner = {}, lease_expires_at = {}, started_at = COALESCE(started_at, {now}), updated_at = {now},
         bundle_version = CASE WHEN bundle_digest IS NULL THEN COALESCE(bundle_version, {}) ELSE bundle_version END, bundle_digest = COALESCE(bundle_digest, {}),
         fair_pass = COALESCE({}, fair_pass)
         WHERE id = {} RETURNING {JOB_COLUMNS}",
        p(2),
        p(3),
        p(4),
        p(6),
        p(7),
        p(8),
        p(1),
        now = p(5),
    )
}

/// Values one job row binds in [`insert_jobs_sql`].
pub(crate) const ROW_VALUES: usize = 21;

/// The multi-row insert of `rows` new jobs, in either dialect: value `n`
/// is spelled `placeholder(n)`; value 1 is the time, then 21 a row in the
/// order of [`JobValues`]. A job whose idempotency key is taken is skipped
/// (a concurrent submit with that key is waited for); `key_index` is the
/// conflict target that names the dialect's unique index of the keys. The
/// inserted rows come back.
pub(crate) fn insert_jobs_sql(
    rows: usize,
    placeholder: impl Fn(usize) -> String,
    key_index: &str,
) -> String {
    let now = placeholder(1);
    let values: Vec<String> = (0..rows)
        .map(|row| {
            let p = |i: usize| placeholder(2 + row * ROW_VALUES + i);
            format!(
                "({}, {}, {}, {}, {}, {}, 'queued', 0, {}, {}, {}, {}, {now}, {now}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {})",
                p(0),
                p(1),
                p(2),
                p(3),
                p(4),
                p(5),
                p(6),
                p(7),
                p(8),
                p(9),
                p(10),
                p(11),
                p(12),
                p(13),
                p(14),
                p(15),
                p(16),
                p(17),
                p(18),
                p(19),
                p(20)
            )
        })
        .collect();
    format!(
        "INSERT INTO jobs (id, bundle, bundle_version, input, variables, priority, state, attempts, max_attempts, idempotency_key, traceparent, run_at, created_at, updated_at, messages, conversation_id, limits, owner, bundle_digest, forked_from, forked_at_turn, kind, controls, tracestate, run_meta)
         VALUES {} ON CONFLICT {key_index} DO NOTHING RETURNING {JOB_COLUMNS}",
        values.join(", ")
    )
}

/// The outcome fields a transition writes to a job row; the lease is
/// cleared with them.
pub(crate) struct Settle<'a> {
    pub state: JobState,
    /// Why the job ended (`TerminationReason::as_str`), `None` while it can
    /// still run.
    pub termination_reason: Option<&'a str>,
    pub result: Option<String>,
    pub error: Option<&'a str>,
    /// A retry's new `run_at` (`None` keeps it).
    pub run_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub pending_call: Option<String>,
}

/// A first attempt's pin, taken in the lease that starts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    pub version: String,
    pub digest: String,
}

/// The wake-ups of one queue handle: every change wakes the job's event
/// streams (`subscribe`), a runnable job wakes idle workers (`runnable`).
#[derive(Clone)]
pub(crate) struct Wakeups {
    pub changes: tokio::sync::broadcast::Sender<JobId>,
    pub runnable: tokio::sync::broadcast::Sender<JobId>,
    pub cancels: tokio::sync::broadcast::Sender<JobId>,
}

impl Wakeups {
    pub(crate) fn new() -> Self {
        Self {
            changes: tokio::sync::broadcast::channel(1024).0,
            runnable: tokio::sync::broadcast::channel(1024).0,
            cancels: tokio::sync::broadcast::channel(1024).0,
        }
    }

    /// Tells this handle's subscribers about a committed change.
    pub(crate) fn publish(&self, change: Change, id: &JobId) {
        // No subscriber is not an error.
        let _ = self.changes.send(id.clone());
        match change {
            Change::Runnable => {
                let _ = self.runnable.send(id.clone());
            }
            Change::CancelRequested => {
                let _ = self.cancels.send(id.clone());
            }
            Change::Updated => {}
        }
    }

    pub(crate) fn publish_all(&self, changes: &[(Change, JobId)]) {
        for (change, id) in changes {
            self.publish(*change, id);
        }
    }
}
