//! The workflow's durable state: the checkpoint the host stores before
//! every dispatch (in the same transaction as the job's progress), from
//! which a new attempt resumes exactly, and the fatal report.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The checkpoint layout this build writes and reads; a different one is
/// refused rather than misread.
pub const CHECKPOINT_FORMAT: u32 = 1;

/// Where a workflow stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkflowStatus {
    Running,
    Finished,
    Fatal,
}

/// Everything needed to resume a workflow exactly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The checkpoint layout (`CHECKPOINT_FORMAT`).
    pub format: u32,
    /// The version of the workflow spec (the digest the integrator passed to `Workflow::compile`).
    pub version: String,
    /// When it was written (RFC 3339).
    pub timestamp: String,
    pub status: WorkflowStatus,
    /// The stage to run next, or the one dispatched (`dispatched`), or `finish`/`fatal`.
    pub stage: String,
    /// `stage` was counted (step and attempt) and dispatched as `step`: a
    /// resume runs it again with the same key and counts nothing.
    pub dispatched: bool,
    /// Stage runs so far (including a dispatched one).
    pub step: u32,
    /// 1 + the number of failed gates.
    pub iteration: u32,
    /// Runs per stage.
    pub attempts: BTreeMap<String, u32>,
    /// Consecutive failures per gate.
    pub failure_streaks: BTreeMap<String, u32>,
    /// Per score stage: reviews since (and including) the last improvement.
    pub no_improvement_streaks: BTreeMap<String, u32>,
    /// Per score stage: the overall score of its last review.
    pub last_scores: BTreeMap<String, u32>,
    /// What the next agent stage is told once (then cleared).
    pub retry_context: Option<String>,
    /// What the `ci` gate's failing checks tell the next agent stage once
    /// (its `ci_failure` variable; then cleared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci_failure: Option<String>,
    /// Every finished stage run, in order.
    pub history: Vec<StageRecord>,
    /// The workflow variables (spec data with the job's overrides).
    pub data: Map<String, Value>,
    /// Set when `status` is `fatal`.
    pub fatal: Option<FatalReport>,
    /// `HEAD` of the working directory when a stage with a commit step
    /// was dispatched (`""` before the first commit): what a run of its
    /// commit step again after a crash compares with, so it never commits
    /// twice nor mistakes its own commit for "nothing changed".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_base: Option<String>,
    /// The PR the last passing `pr` gate made or found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pr_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pr_number: Option<u64>,
    /// The one stage this run runs, when the job named it (`only_stage`):
    /// the run ends after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only_stage: Option<String>,
}

impl Checkpoint {
    /// A workflow at its first step.
    pub fn new(version: &str, start: &str, data: Map<String, Value>) -> Self {
        Self {
            format: CHECKPOINT_FORMAT,
            version: version.to_string(),
            timestamp: now(),
            status: WorkflowStatus::Running,
            stage: start.to_string(),
            dispatched: false,
            step: 0,
            iteration: 1,
            attempts: BTreeMap::new(),
            failure_streaks: BTreeMap::new(),
            no_improvement_streaks: BTreeMap::new(),
            last_scores: BTreeMap::new(),
            retry_context: None,
            ci_failure: None,
            history: Vec::new(),
            data,
            fatal: None,
            commit_base: None,
            pr_url: None,
            pr_number: None,
            only_stage: None,
        }
    }

    pub fn is_terminal(&self) -> bool {
        self.status != WorkflowStatus::Running
    }
}

/// One finished stage run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageRecord {
    pub step: u32,
    pub stage: String,
    pub event: String,
    /// The event's original name (`impl_done`; see `event_prefix`); empty
    /// in checkpoints written before it was recorded.
    #[serde(default)]
    pub original_event: String,
    /// The iteration the stage ran in.
    pub iteration: u32,
    pub reason: String,
    /// The stage the transition led to (`finish`, `fatal` or a stage).
    pub next: String,
    pub duration_ms: u64,
}

/// Why a workflow ended in `fatal`; also its `fatal-report.json` artifact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FatalReport {
    pub stage: String,
    /// The event that led here, when a stage ran.
    pub event: Option<String>,
    /// Its original name (`pr_fail_fixable`; see `event_prefix`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_event: Option<String>,
    pub iteration: u32,
    pub reason: String,
    pub details: Value,
    pub timestamp: String,
}

/// What the host hears after each stage run (for logs, spans and metrics).
#[derive(Debug, Clone, PartialEq)]
pub struct StageReport {
    pub step: u32,
    pub stage: String,
    /// `agent`, `command` or `score`.
    pub kind: &'static str,
    pub event: String,
    /// The event's original name (`impl_done`; see `event_prefix`).
    pub original_event: String,
    pub iteration: u32,
    pub reason: String,
    /// Where the transition leads.
    pub next: String,
    /// False when an attempt cap passed the stage through without running it.
    pub ran: bool,
    pub started_at: SystemTime,
    pub duration: Duration,
}

/// The current time as RFC 3339 with milliseconds.
pub(crate) fn now() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}
