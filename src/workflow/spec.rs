//! The raw `workflow:` section of `bundle.yaml`: what operators write,
//! checked by serde (unknown keys are errors) and described for editors by
//! schemars. Doc comments here are user docs. `compile` turns it into the
//! validated `Workflow` the engine runs; nothing else reads these types.
//!
//! Which events a stage can emit (so that "every required pair" of the
//! transition table is well defined):
//! - `agent`: the events of its `result` rule (`events` plus `otherwise`),
//!   plus its gate's failure event (`on_fail`) when it has a `gate`;
//! - `command`: `fail` (an unmapped exit code, a timeout, a command that
//!   cannot start), `pass` (exit 0, unless `exit_codes` maps 0), and every
//!   event named in `exit_codes` and `output`; `py_compile`: `pass`, `fail`;
//!   the built-in `pr` gate: `pass`, `fail_fixable`,
//!   `fail_need_rebase`; the built-in `rebase` gate: `ok`, `conflict`; the
//!   built-in `ci` gate: `pass`, `fail`;
//! - `score`: `pass` and `fail`.
//!
//! Every emitted event needs a row in `transitions`; `fatal` and `finish`
//! are valid targets from every stage. Each event also has an original name
//! (`event_prefix`), which `transitions` accepts as well.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::review::Thresholds;
use crate::duration::HumanDuration;

/// The terminal stage of a successful run.
pub const FINISH: &str = "finish";
/// The terminal stage of a failed run; reachable from every stage.
pub const FATAL: &str = "fatal";

/// A staged workflow: stages, a transition table over `(stage, event)` and limits.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkflowSpec {
    /// The stage the workflow starts at.
    pub start: String,
    /// The stages by name (`finish` and `fatal` are reserved).
    pub stages: BTreeMap<String, StageSpec>,
    /// `stage: {event: next_stage}`; targets may be `finish` or `fatal`.
    pub transitions: BTreeMap<String, BTreeMap<String, String>>,
    /// Step, iteration, attempt and streak limits.
    #[serde(default)]
    pub limits: WorkflowLimits,
    /// Workflow variables for every template (a job's variables override them).
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, Value>")]
    pub data: Map<String, Value>,
    /// Where command gates run and marker files are looked up (a template;
    /// relative to the directory the daemon gives the job).
    #[serde(default)]
    pub working_dir: Option<String>,
    /// Also write every artifact as a file in this directory (a template,
    /// relative to the directory the daemon gives the job), besides the job
    /// store; e.g. `"{{ repo }}/.agent-artifacts"`.
    #[serde(default)]
    pub artifacts_dir: Option<String>,
    /// The stages a job may run alone (its `only_stage` variable, e.g.
    /// `structured-agents simplify`). Default none: a job runs the whole
    /// workflow, so no job can skip the stages and gates before the one it
    /// wants (a review before `pr`, say).
    #[serde(default)]
    pub run_alone: Vec<String>,
}

/// One stage; `kind` says which keys apply.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StageSpec {
    /// Runs an agent with a rendered prompt; its result maps to an event.
    /// (Boxed, like `Command`: both are far larger than a score stage.)
    Agent(Box<AgentStage>),
    /// Runs an argv command (or a built-in gate) and maps its outcome to an event.
    /// (Boxed: a command spec is much larger than the other kinds.)
    Command(Box<CommandStage>),
    /// Runs a reviewer agent and scores its answer (`pass` or `fail`).
    Score(ScoreStage),
}

impl WorkflowSpec {
    /// The stages that run a command — a `command` stage, an `agent`
    /// stage's `gate` or `commit` — in name order. No stand-in answers a
    /// command, so a run whose tools with side effects must not really
    /// run (an eval's cases) cannot run such a workflow.
    pub fn command_stages(&self) -> Vec<&str> {
        self.stages
            .iter()
            .filter(|(_, stage)| match stage {
                StageSpec::Command(_) => true,
                StageSpec::Agent(agent) => agent.gate.is_some() || agent.commit.is_some(),
                StageSpec::Score(_) => false,
            })
            .map(|(name, _)| name.as_str())
            .collect()
    }
}

impl StageSpec {
    /// The stage's `event_prefix`, as written.
    pub fn event_prefix(&self) -> Option<&str> {
        match self {
            Self::Agent(agent) => agent.event_prefix.as_deref(),
            Self::Command(command) => command.event_prefix.as_deref(),
            Self::Score(score) => score.event_prefix.as_deref(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentStage {
    /// Another bundle to run (by name); this bundle's prompts and tools when absent.
    #[serde(default)]
    pub bundle: Option<String>,
    /// The prefix of this stage's events under their original names
    /// (`<prefix>_<event>`, as `lol impl` named them: `impl_done`,
    /// `review_pass`, `pr_fail_need_rebase`); shown beside the event in
    /// `StageEnd` events and reports, and accepted in `transitions`.
    /// Default the stage name; `""` for none. The
    /// failure event of its `gate` keeps its own name (`parse_fail`) unless
    /// it is one of the result's events (`on_fail: fail`: `simp_fail`).
    #[serde(default)]
    pub event_prefix: Option<String>,
    /// The agent's input (minijinja). Variables: the workflow `data`,
    /// `iteration`, `step`, `stage`, `retry_context` (none unless a gate
    /// failed since the last agent stage), `ci_failure` (none unless the
    /// `ci` gate failed since the last agent stage: the PR and its failing
    /// checks), and `pr_url`/`pr_number` once a `pr` gate passed.
    pub prompt: String,
    /// How the agent's result becomes an event.
    #[serde(default)]
    pub result: ResultRule,
    /// A command gate run after the agent reports its `after` event; when
    /// the gate fails the stage emits `on_fail` instead.
    #[serde(default)]
    pub gate: Option<AgentGate>,
    /// The artifact name prefix (`<artifact>-input-<iteration>`); default the stage name.
    #[serde(default)]
    pub artifact: Option<String>,
    /// Gives the prompt a `files` variable: the files the last commit in
    /// the working directory changed, at most this many (the `lol impl`
    /// simplify stage works on at most 3). Unset: no `files`. A job whose
    /// `files` variable is a list keeps its own.
    #[serde(default)]
    pub max_files: Option<usize>,
    /// The commit-report step after the agent ran (as `lol impl`'s
    /// implementation stage): stage what changed and commit it with the
    /// agent's commit report. Unset: the stage commits nothing.
    #[serde(default)]
    pub commit: Option<CommitSettings>,
}

/// The commit-report step of an agent stage. After the agent ran, every
/// change in the working directory is staged (`git add -A`, except the
/// report) and committed with the report as its message. The stage's
/// completion event (the first of its result's `events`) with nothing
/// changed since the stage started, or with changes and no report, ends the
/// workflow fatal (`ImplError`), unless `allow_empty`. A stage run again
/// after a crash never commits twice: `HEAD` at dispatch is in the checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommitSettings {
    /// The file the agent writes its commit report to (a template, relative
    /// to the working directory; never committed). Default
    /// `.tmp/commit-report-iter-{{ iteration }}.txt`, as in `lol impl`.
    #[serde(default = "default_commit_report")]
    pub report: String,
    /// The commit message when the report is missing or blank (a
    /// template). Unset: changes without a report are not committed, and
    /// at completion they are an `ImplError`.
    #[serde(default)]
    pub message: Option<String>,
    /// A completion that changed nothing goes on (no commit) instead of
    /// ending fatal. Default false.
    #[serde(default)]
    pub allow_empty: bool,
}

/// Maps an agent's result to an event. At most one of `field`, `regex` and
/// `marker`; with none, the stage always emits the first of `events`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResultRule {
    /// A field of the termination tool's JSON output (else of the final
    /// answer parsed as JSON) whose string value is the event.
    #[serde(default)]
    pub field: Option<String>,
    /// A regex over the final answer: the `event` named group, else the first
    /// group, else the whole match is the event.
    #[serde(default)]
    pub regex: Option<String>,
    /// A file that, when it contains the rendered text, means the first of `events`.
    #[serde(default)]
    pub marker: Option<MarkerRule>,
    /// The events the rule may produce. Default `[done]`.
    #[serde(default = "default_events")]
    pub events: Vec<String>,
    /// The event when nothing matches (or the value is not in `events`). Default `not_done`.
    #[serde(default = "default_otherwise")]
    pub otherwise: String,
}

impl Default for ResultRule {
    fn default() -> Self {
        Self {
            field: None,
            regex: None,
            marker: None,
            events: default_events(),
            otherwise: default_otherwise(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MarkerRule {
    /// The file, relative to the working directory (a template).
    pub file: String,
    /// The text it must contain (a template), e.g. `Issue {{ issue }} resolved`.
    pub text: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentGate {
    /// The gate's name: its artifact (`<name>-iter-<iteration>.json`) and its
    /// key in `limits.failure_streak`.
    pub name: String,
    /// The agent event after which the gate runs. Default `done`.
    #[serde(default = "default_after")]
    pub after: String,
    /// The stage's event when the gate fails. Default `<name>_fail`.
    #[serde(default)]
    pub on_fail: Option<String>,
    /// The check to run.
    pub check: CommandStage,
}

impl AgentGate {
    pub fn fail_event(&self) -> String {
        self.on_fail
            .clone()
            .unwrap_or_else(|| format!("{}_fail", self.name))
    }
}

/// A built-in command gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Builtin {
    /// `python3 -m py_compile` on the `.py` files changed by the last commit.
    PyCompile,
    /// Validates the title, pushes the branch and runs the create-PR command.
    Pr,
    /// Fetches and rebases; aborts the rebase on conflict.
    Rebase,
    /// Waits for the checks of the PR the `pr` gate opened (`lol impl
    /// --wait-for-ci`): `pass` when they pass, `fail` (and `ci_failure` for
    /// the next agent stage) when they fail.
    Ci,
}

/// A command gate: `argv` or a `builtin`. The report it writes is
/// `{pass, failed_files, traceback, suggestions}`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommandStage {
    /// The command as an argv list (never run through a shell); each item a template.
    #[serde(default)]
    pub argv: Vec<String>,
    /// A built-in gate instead of `argv`.
    #[serde(default)]
    pub builtin: Option<Builtin>,
    /// Working directory, relative to the workflow's (a template).
    #[serde(default)]
    pub working_dir: Option<String>,
    /// Deadline; on expiry the command's process group is killed and the gate fails. Default 10m.
    #[serde(default = "default_gate_timeout")]
    pub timeout: HumanDuration,
    /// The most output read from each of the command's stdout and stderr,
    /// in bytes (default 1 MiB); a command that writes more fails the gate
    /// with an error naming this cap.
    #[serde(default = "default_gate_max_output")]
    pub max_output_bytes: usize,
    /// Exit code → event (default: 0 → `pass`, anything else → `fail`).
    #[serde(default)]
    pub exit_codes: BTreeMap<String, String>,
    /// Output rules checked before the exit code, first match wins.
    #[serde(default)]
    pub output: Vec<OutputRule>,
    /// Events that count as the gate passing (the rest are failures that
    /// add an iteration). Default `[pass]` (`[ok]` for `rebase`).
    #[serde(default)]
    pub pass_events: Option<Vec<String>>,
    /// Settings of the built-in `pr` gate.
    #[serde(default)]
    pub pr: Option<PrSettings>,
    /// Settings of the built-in `rebase` gate.
    #[serde(default)]
    pub rebase: Option<RebaseSettings>,
    /// Settings of the built-in `ci` gate.
    #[serde(default)]
    pub ci: Option<CiSettings>,
    /// The prefix of this stage's events under their original names
    /// (`<prefix>_<event>`, as `lol impl` named them: `impl_done`,
    /// `review_pass`, `pr_fail_need_rebase`); shown beside the event in
    /// `StageEnd` events and reports, and accepted in `transitions`.
    /// Default the stage name; `""` for none.
    /// A stage's key only (not of an agent stage's gate `check`).
    #[serde(default)]
    pub event_prefix: Option<String>,
    /// The artifact name prefix (`<artifact>-iter-<iteration>.json`); default the stage name.
    #[serde(default)]
    pub artifact: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OutputRule {
    /// A regex over stdout and stderr.
    pub regex: String,
    pub event: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PrSettings {
    /// The title (a template); must read `[tag][#N] text`.
    pub title: String,
    /// The body (a template), when `body_file` is unset, missing or blank.
    #[serde(default)]
    pub body: String,
    /// A file whose text is the body when it exists and is not blank (a
    /// template, relative to the gate's directory), e.g. the agent's
    /// `.tmp/finalize.txt` as in `lol impl`.
    #[serde(default)]
    pub body_file: Option<String>,
    /// The branch to push; default the checked-out branch.
    #[serde(default)]
    pub branch: Option<String>,
    /// The base branch the PR targets (a template). Default: the remote's
    /// default branch (its `HEAD`).
    #[serde(default)]
    pub base: Option<String>,
    /// Default `origin`.
    #[serde(default = "default_remote")]
    pub remote: String,
    /// Extra `git push` arguments, e.g. `--force-with-lease`.
    #[serde(default)]
    pub push_args: Vec<String>,
    /// The create-PR argv (templates; variables also `title`, `body`,
    /// `branch`, `base`, `remote`). Default `gh pr create --title … --body …
    /// --head … --base …`.
    #[serde(default = "default_create_command")]
    pub create_command: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RebaseSettings {
    /// Default `origin`.
    #[serde(default = "default_remote")]
    pub remote: String,
    /// The branch of `remote` to rebase onto (a template). Default: the
    /// remote's default branch (its `HEAD`).
    #[serde(default)]
    pub onto: Option<String>,
}

/// The built-in `ci` gate: runs `command` in the gate's directory, with
/// the gate's `timeout` and `max_output_bytes` (set a `timeout` longer
/// than the checks take). Exit 0: `pass`; another exit code: `fail`, and
/// the output becomes `ci_failure`; no exit code (cannot start, timed out,
/// too much output) or no PR to wait for: the workflow ends fatal.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CiSettings {
    /// The argv that waits for the PR's checks and exits 0 when all pass
    /// (templates; variables also `pr_url` and `pr_number`, of the PR the
    /// last passing `pr` gate made or found, else from `workflow.data`).
    /// Default `gh pr checks {{ pr_number }} --watch --interval 30`, as in
    /// `lol impl`.
    #[serde(default = "default_ci_command")]
    pub command: Vec<String>,
}

impl Default for CiSettings {
    fn default() -> Self {
        Self {
            command: default_ci_command(),
        }
    }
}

// Its keys are an agent stage's (`bundle`, `event_prefix`, `prompt`,
// `artifact`) again, as other structs here repeat keys of each other; kept
// so: each refuses unknown keys, which a `#[serde(flatten)]` shared part
// cannot, and each key's doc (the editors' schema) says what it is there.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScoreStage {
    /// The reviewer bundle (by name); this bundle when absent.
    #[serde(default)]
    pub bundle: Option<String>,
    /// The prefix of this stage's events under their original names
    /// (`<prefix>_<event>`, as `lol impl` named them: `impl_done`,
    /// `review_pass`, `pr_fail_need_rebase`); shown beside the event in
    /// `StageEnd` events and reports, and accepted in `transitions`.
    /// Default the stage name; `""` for none.
    #[serde(default)]
    pub event_prefix: Option<String>,
    /// The reviewer's input (minijinja, same variables as an agent stage).
    pub prompt: String,
    /// The minimum score per dimension.
    #[serde(default)]
    pub thresholds: Thresholds,
    /// The artifact name prefix (`<artifact>-iter-<iteration>.json`); default the stage name.
    #[serde(default)]
    pub artifact: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkflowLimits {
    /// Stage runs per workflow; one more is fatal. Default 200.
    #[serde(default = "default_max_steps")]
    pub max_steps: u32,
    /// Iterations (1 + failed gates); one more is fatal. Default 10.
    #[serde(default = "default_max_iterations")]
    pub max_iterations: u32,
    /// Per stage: how many runs it may have, and what the next one does.
    #[serde(default)]
    pub attempts: BTreeMap<String, AttemptCap>,
    /// Per gate (a command or score stage, or an agent stage's gate name):
    /// consecutive failures that are fatal.
    #[serde(default)]
    pub failure_streak: BTreeMap<String, u32>,
    /// Per score stage: a streak of reviews without a better score that is
    /// fatal (the streak is 1 after an improvement and grows otherwise).
    #[serde(default)]
    pub no_improvement_streak: BTreeMap<String, u32>,
}

impl Default for WorkflowLimits {
    fn default() -> Self {
        Self {
            max_steps: default_max_steps(),
            max_iterations: default_max_iterations(),
            attempts: BTreeMap::new(),
            failure_streak: BTreeMap::new(),
            no_improvement_streak: BTreeMap::new(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AttemptCap {
    /// Runs allowed; the run after the last one does `on_exceed`.
    pub max: u32,
    /// `fatal` ends the workflow; `pass` skips the stage as if it emitted `pass_event`.
    pub on_exceed: CapAction,
    /// The event a skipped stage emits. Default: its first passing event.
    #[serde(default)]
    pub pass_event: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CapAction {
    Fatal,
    Pass,
}

fn default_events() -> Vec<String> {
    vec!["done".into()]
}
fn default_otherwise() -> String {
    "not_done".into()
}
fn default_after() -> String {
    "done".into()
}
fn default_gate_timeout() -> HumanDuration {
    HumanDuration::from_secs(600)
}
fn default_gate_max_output() -> usize {
    1024 * 1024
}
fn default_commit_report() -> String {
    ".tmp/commit-report-iter-{{ iteration }}.txt".into()
}
fn default_remote() -> String {
    "origin".into()
}
fn default_max_steps() -> u32 {
    200
}
fn default_max_iterations() -> u32 {
    10
}
fn default_ci_command() -> Vec<String> {
    [
        "gh",
        "pr",
        "checks",
        "{{ pr_number }}",
        "--watch",
        "--interval",
        "30",
    ]
    .map(String::from)
    .to_vec()
}
pub(crate) fn default_create_command() -> Vec<String> {
    [
        "gh",
        "pr",
        "create",
        "--title",
        "{{ title }}",
        "--body",
        "{{ body }}",
        "--head",
        "{{ branch }}",
        "--base",
        "{{ base }}",
    ]
    .map(String::from)
    .to_vec()
}
