//! The workflow's durable state: the checkpoint the host stores before
//! every dispatch (in the same transaction as the job's progress), from
//! which a new attempt resumes exactly, and the fatal report. The
//! checkpoint is generic: what a family of stage kinds keeps (the git
//! kinds' commit base, PR and CI failure) is its own section, `kinds`.
//! Checkpoints of format 1, which kept the git kinds' fields at the top,
//! are read into that section (`lift_format_1`), so a job stored by an
//! older daemon resumes.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use super::kind::KindState;

/// The checkpoint layout this build writes and reads; a different one is
/// refused rather than misread. Format 1 (the git kinds' fields at the top
/// level) is read and lifted to this one.
pub const CHECKPOINT_FORMAT: u32 = 2;

/// The top-level fields of format 1 that are the git kinds' section now.
const FORMAT_1_GIT_FIELDS: [&str; 4] = ["commit_base", "pr_url", "pr_number", "ci_failure"];

/// Where a workflow stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkflowStatus {
    Running,
    Finished,
    Fatal,
}

/// Everything needed to resume a workflow exactly. (De)serialized through
/// the impls below, which read format 1 too; `remote = "Self"` makes the
/// derives the inner functions they call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(remote = "Self")]
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
    /// Every finished stage run, in order.
    pub history: Vec<StageRecord>,
    /// The workflow variables (spec data with the job's overrides).
    pub data: Map<String, Value>,
    /// Set when `status` is `fatal`.
    pub fatal: Option<FatalReport>,
    /// What the families of stage kinds keep between stages, each in its
    /// own typed section (`kind`).
    #[serde(default, skip_serializing_if = "KindState::is_empty")]
    pub kinds: KindState,
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
            history: Vec::new(),
            data,
            fatal: None,
            kinds: KindState::default(),
            only_stage: None,
        }
    }

    pub fn is_terminal(&self) -> bool {
        self.status != WorkflowStatus::Running
    }
}

impl Serialize for Checkpoint {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Checkpoint::serialize(self, serializer)
    }
}

impl<'de> Deserialize<'de> for Checkpoint {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut value = Value::deserialize(deserializer)?;
        lift_format_1(&mut value);
        Checkpoint::deserialize(value).map_err(serde::de::Error::custom)
    }
}

/// Moves a format-1 checkpoint's git fields into `kinds.git` and marks it
/// format 2 (the rest of the layout is the same); any other value is left
/// as it is, for the engine to accept or refuse by its format.
fn lift_format_1(value: &mut Value) {
    let Some(top) = value.as_object_mut() else {
        return;
    };
    if top.get("format").and_then(Value::as_u64) != Some(1) {
        return;
    }
    let mut git = Map::new();
    for field in FORMAT_1_GIT_FIELDS {
        if let Some(v) = top.remove(field).filter(|v| !v.is_null()) {
            git.insert(field.into(), v);
        }
    }
    let mut kinds = Map::new();
    kinds.insert("git".into(), Value::Object(git));
    top.insert("kinds".into(), Value::Object(kinds));
    top.insert("format".into(), CHECKPOINT_FORMAT.into());
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
