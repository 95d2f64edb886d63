//! The raw `bundle.yaml` schema: what operators write, checked by serde
//! (unknown keys are errors) and described for editors by schemars
//! (`structured-agents schema bundle`). Doc comments here are user docs.
//! Nothing outside `bundle` sees these types; `load` resolves them.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use super::release_section::ReleaseSection;
use crate::duration::HumanDuration;
use crate::model::{GrammarMode, ServerKind, ToolChoice};
use crate::tools::policy::{CacheSpec, GuardrailSpec};

/// An agent bundle: one directory with `bundle.yaml`, its prompts and tools.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawBundle {
    /// Unique name; jobs refer to the bundle by it. Letters, digits, `-`, `_`.
    pub name: String,
    /// The bundle's version; jobs pin the version they started with.
    #[serde(deserialize_with = "string_or_number")]
    #[schemars(with = "String")]
    pub version: String,
    /// What the agent does.
    #[serde(default)]
    pub description: String,
    /// Which model answers and how requests are shaped.
    pub model: ModelSection,
    /// The conversation's opening messages (minijinja templates).
    pub prompts: PromptsSection,
    /// Turn, history, concurrency and time limits.
    #[serde(default)]
    pub limits: LimitsSection,
    /// How a run ends besides the model answering without tool calls.
    #[serde(default)]
    pub termination: Option<TerminationSection>,
    /// The tools the model may call.
    #[serde(default)]
    pub tools: Vec<ToolSpec>,
    /// The approval policy of every tool without its own `approval`
    /// (default `never`; see docs/approvals.md).
    #[serde(default)]
    pub approval: Option<crate::approval::ApprovalSpec>,
    /// Observer plugins (by name, from the plugins directory) that receive this bundle's events.
    #[serde(default)]
    pub observers: Vec<String>,
    /// Makes the bundle a workflow: staged jobs whose agent stages use this
    /// bundle's model, prompts and tools (see docs/workflows.md).
    #[serde(default)]
    pub workflow: Option<crate::workflow::WorkflowSpec>,
    /// How the runtime API presents the bundle as an agent (`GET /api/agents`).
    #[serde(default)]
    pub agent: Option<AgentSection>,
    /// Makes the bundle the host of group chats (`POST /api/group-chat`);
    /// its own model and prompts are the default selector.
    #[serde(default)]
    pub group_chat: Option<crate::group_chat::GroupChatSpec>,
    /// What a new version of the bundle does to its waiting and parked
    /// jobs: `pin` (default) keeps them on the content they started with;
    /// `move` moves each to the new version after the reload, when its
    /// journal replays there (docs/daemon.md, "Forks and versions").
    #[serde(default)]
    pub on_new_version: OnNewVersion,
    /// Runs the bundle on a cron schedule (see docs/daemon.md, Schedules).
    #[serde(default)]
    pub schedule: Option<crate::schedule::ScheduleSpec>,
    /// Where every job's state changes are POSTed unless the job names its
    /// own (within `egress.allow`; docs/api.md, Completion webhooks).
    #[serde(default)]
    pub webhook: Option<String>,
    /// Takes the caller's own tools: a request's `tools` (Responses and
    /// chat completions) are offered to the model beside the bundle's, and
    /// a call of one ends the answer with the call for the client to run;
    /// its output resumes the same job (docs/api.md, Caller tools). Without
    /// this section a request with `tools` is refused.
    #[serde(default)]
    pub caller_tools: Option<CallerToolsSection>,
    /// Gates a new version on the bundle's eval suite (`evals/`): a new
    /// version dropped in loads as a candidate, its suite runs against the
    /// version serving, and only when it passes does it serve; meanwhile
    /// and on a failure the version before it keeps serving (docs/evals.md,
    /// The release gate).
    #[serde(default)]
    pub release: Option<ReleaseSection>,
}

impl RawBundle {
    /// The stages of its workflow that run a command (none for an agent
    /// bundle): what no stand-in answers (`WorkflowSpec::command_stages`).
    pub fn command_stages(&self) -> Vec<&str> {
        self.workflow
            .as_ref()
            .map(|w| w.command_stages())
            .unwrap_or_default()
    }
}

/// Caller tools a bundle takes (see [`RawBundle::caller_tools`]).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallerToolsSection {
    /// The most tools one request may bring (default 16, at most 128).
    #[serde(default = "default_max_caller_tools")]
    pub max: usize,
}

/// Caller tools one request may bring unless the bundle says otherwise.
pub const DEFAULT_MAX_CALLER_TOOLS: usize = 16;
/// The bound on `caller_tools.max`.
pub const MAX_CALLER_TOOLS: usize = 128;

fn default_max_caller_tools() -> usize {
    DEFAULT_MAX_CALLER_TOOLS
}

/// What a new bundle version does to the jobs of earlier ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnNewVersion {
    /// Jobs keep the content they started with.
    #[default]
    Pin,
    /// Waiting and parked jobs move to the new version when their journal
    /// replays on it.
    Move,
}

/// The bundle as an agent of the runtime API.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentSection {
    /// Display name (default: the bundle's name).
    #[serde(default)]
    pub name: Option<String>,
    /// What it can do (default: its tools' names).
    #[serde(default)]
    pub capabilities: Option<Vec<String>>,
    /// Example questions clients may offer.
    #[serde(default)]
    pub conversation_starters: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    /// A named endpoint from the daemon config, an `http(s)://…/v1` URL, or
    /// `scripted:<file>` (a reply script, relative to the bundle directory).
    pub endpoint: String,
    /// The request's `model` (as the server names it).
    pub name: String,
    /// The model plugin (`openai`, `qwen`, `function_gemma`), a variant from the models directory, or a model plugin library from the plugins directory (by its name).
    #[serde(default = "default_plugin")]
    pub plugin: String,
    /// Grammar-constrained output.
    #[serde(default)]
    pub grammar: Option<GrammarSection>,
    /// Sampling parameters sent with every request.
    #[serde(default)]
    pub sampling: SamplingSection,
    /// Keys merged into every request body last (server-specific options).
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, Value>")]
    pub extra_body: Map<String, Value>,
    /// A different model for particular turns (e.g. a LoRA adapter): turn number → model name.
    #[serde(default)]
    pub turn_models: BTreeMap<u32, String>,
    /// Which tools the model may call: `auto` (default), `required`, `none`
    /// or one tool's name. The grammar follows it (a required call leaves no
    /// room for free text; a named tool is the only one offered).
    #[serde(default)]
    #[schemars(with = "String")]
    pub tool_choice: ToolChoice,
    /// A different `tool_choice` for particular turns: turn number → choice.
    #[serde(default)]
    #[schemars(with = "BTreeMap<u32, String>")]
    pub turn_tool_choice: BTreeMap<u32, ToolChoice>,
    /// The model server's family when `endpoint` is a URL (`vllm`,
    /// `llama_cpp`, `ollama`, `sglang`, `openai`): it picks where grammars go.
    /// Named endpoints declare theirs in the daemon config; this overrides it.
    #[serde(default)]
    pub server: Option<ServerKind>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrammarSection {
    /// `ebnf`, `structural_tag` or `json_schema`; the model config's default when absent.
    #[serde(default)]
    pub mode: Option<GrammarMode>,
    /// Whether one reply may hold several tool calls.
    #[serde(default = "default_true")]
    pub allow_parallel_calls: bool,
}

/// Sampling parameters. `temperature` and `max_tokens` have the Python
/// kernel's defaults (0.1 and 4096) so a bundle behaves the same on any
/// server; `null` leaves a key out of the request (the server's default).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SamplingSection {
    /// Default 0.1; `null` sends none.
    #[serde(default = "default_temperature")]
    pub temperature: Option<f64>,
    /// Default 4096; `null` sends none.
    #[serde(default = "default_max_tokens")]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
}

impl Default for SamplingSection {
    fn default() -> Self {
        Self {
            temperature: default_temperature(),
            max_tokens: default_max_tokens(),
            top_p: None,
            seed: None,
            stop: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PromptsSection {
    /// The system message. Variables: `input` and the job's variables.
    #[serde(default)]
    pub system: Option<String>,
    /// The first user message.
    #[serde(default = "default_user_prompt")]
    pub user: String,
}

/// `limits.history`: a built-in strategy or a history plugin, by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(
    untagged,
    expecting = "`sliding_window`, `keep_all`, a history plugin's name or `{plugin: NAME}`"
)]
pub enum HistorySetting {
    /// `sliding_window`, `keep_all`, or the name of a history plugin.
    Name(String),
    /// `{plugin: NAME}`: a history plugin only, never a built-in.
    Plugin(HistoryPluginRef),
}

/// `{plugin: NAME}` in `limits.history`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HistoryPluginRef {
    /// The name of a `kind: history` library in `paths.plugins_dir`.
    pub plugin: String,
}

impl Default for HistorySetting {
    fn default() -> Self {
        HistorySetting::Name("sliding_window".into())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    /// Model calls per run (default 20).
    #[serde(default = "default_max_turns")]
    pub max_turns: u32,
    /// What a run that used `max_turns` without a final answer (its last
    /// reply still called tools) ends as: `fail` (default: the job fails
    /// with `max_turns: …`) or `succeed` (its last reply's text is the
    /// answer).
    #[serde(default)]
    pub on_max_turns: crate::kernel::OnMaxTurns,
    /// Messages sent to the model per turn (with `sliding_window`).
    #[serde(default = "default_max_history")]
    pub max_history_messages: usize,
    /// Which messages each request sends: `sliding_window` (default: the
    /// first message and the most recent, `max_history_messages` in all),
    /// `keep_all`, or a history plugin library by name (`NAME` or
    /// `{plugin: NAME}`; docs/plugins.md, "History plugins").
    #[serde(default)]
    pub history: HistorySetting,
    /// Tool calls of one turn that run at the same time (default 1: one
    /// after another, in call order).
    #[serde(default = "default_concurrency")]
    pub max_concurrency: usize,
    /// A deadline for the whole run, e.g. "5m".
    #[serde(default)]
    pub timeout: Option<HumanDuration>,
    /// Budgets of one job (its nested agents, stages and group-chat replies
    /// included): checked before each model call and each tool call; using
    /// one up ends the job `budget_exceeded`. A submitter may lower each.
    /// Prompt plus completion tokens.
    #[serde(default)]
    pub tokens: Option<u64>,
    /// Prompt tokens.
    #[serde(default)]
    pub prompt_tokens: Option<u64>,
    /// Completion tokens.
    #[serde(default)]
    pub completion_tokens: Option<u64>,
    /// Cost, by the daemon's `[prices]` table.
    #[serde(default)]
    pub cost: Option<f64>,
    /// Time since the job's first attempt started, e.g. "10m".
    #[serde(default)]
    pub wall_time: Option<HumanDuration>,
    /// Tool calls.
    #[serde(default)]
    pub tool_calls: Option<u64>,
    /// Model calls.
    #[serde(default)]
    pub model_calls: Option<u64>,
    /// How deep agents may nest (1: the job's agent may call agents that call none).
    #[serde(default)]
    pub depth: Option<u32>,
    /// The bundle's spend over the last 24 hours past which new jobs are
    /// refused (HTTP 429): `{tokens: N, cost: X}`.
    #[serde(default)]
    pub per_day: Option<crate::budget::DailyLimits>,
}

impl LimitsSection {
    /// The per-job budgets this section sets.
    pub fn budget(&self) -> crate::budget::BudgetLimits {
        crate::budget::BudgetLimits {
            tokens: self.tokens,
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            cost: self.cost,
            wall_time: self.wall_time,
            tool_calls: self.tool_calls,
            model_calls: self.model_calls,
            depth: self.depth,
        }
    }
}

impl Default for LimitsSection {
    fn default() -> Self {
        Self {
            max_turns: default_max_turns(),
            on_max_turns: Default::default(),
            max_history_messages: default_max_history(),
            history: HistorySetting::default(),
            max_concurrency: default_concurrency(),
            timeout: None,
            tokens: None,
            prompt_tokens: None,
            completion_tokens: None,
            cost: None,
            wall_time: None,
            tool_calls: None,
            model_calls: None,
            depth: None,
            per_day: None,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TerminationSection {
    /// A tool whose successful result ends the run and becomes its output.
    pub tool: String,
}

/// Which backend runs a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    /// A local command: JSON arguments on stdin, one JSON value on stdout.
    Process,
    /// A tool exported by a dynamic plugin library.
    Plugin,
    /// The tools of an MCP server.
    Mcp,
    /// A remote agent reached over HTTP.
    HttpAgent,
    /// Another loaded bundle, run as a nested agent.
    Agent,
    /// A Grail `.pym` script run through Grail's Python API (the Python
    /// tool engine's GrailBackend): the arguments are its `Input()` values,
    /// with Grail's limits and externals answered by other tools.
    Grail,
}

/// One tool. Which keys apply depends on `kind`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolSpec {
    /// The name the model calls.
    pub name: String,
    pub kind: ToolKind,
    /// What the tool does, for the model.
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments (an object schema).
    #[serde(default = "default_parameters")]
    #[schemars(with = "Value")]
    pub parameters: Value,
    /// Per-attempt deadline.
    #[serde(default)]
    pub timeout: Option<HumanDuration>,
    /// Extra attempts after a retryable failure.
    #[serde(default)]
    pub retries: u32,
    /// Cache results by exact argument text.
    #[serde(default)]
    pub cache: Option<CacheSpec>,
    /// Input and output checks.
    #[serde(default)]
    pub guardrails: Option<GuardrailSpec>,
    /// What running the tool again does: `read_only` (nothing; a call cut
    /// short by a crash runs again), `idempotent` (safe to repeat with the same
    /// idempotency key; runs again with it) or `unsafe` (never repeated on its
    /// own: the job waits in `needs_attention` for an operator). Default
    /// `unsafe`, except `agent` tools (`idempotent`: the nested run resumes
    /// from its own journal).
    #[serde(default)]
    pub effect: Option<crate::tools::Effect>,
    /// Which calls wait for a person's decision before they run: `never`,
    /// `always`, `{when: "args.amount > 100"}` (a minijinja expression over
    /// the arguments) or `{matches: <JSON Schema>}`, each with an optional
    /// `timeout` after which the call is denied. Default: the bundle's
    /// `approval`, else `never`. See docs/approvals.md.
    #[serde(default)]
    pub approval: Option<crate::approval::ApprovalSpec>,

    /// process: the command as an argv list (never run through a shell).
    #[serde(default)]
    pub command: Vec<String>,
    /// grail: the `.pym` script, relative to the bundle directory.
    #[serde(default)]
    pub script: Option<String>,
    /// grail: the Python Grail runs in, its limits, its externals and its
    /// pool of host processes.
    #[serde(default)]
    pub grail: Option<crate::tools::grail::GrailSection>,
    /// process, grail: working directory, relative to the bundle (default: the bundle directory).
    #[serde(default)]
    pub working_dir: Option<String>,
    /// process, grail: variables set for the command.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// process, grail: variables passed through from the daemon (default: PATH, LANG, LC_ALL, TZ, HOME, TMPDIR).
    #[serde(default)]
    pub env_allowlist: Option<Vec<String>>,
    /// process: largest stdout accepted; grail: largest result; mcp: largest result of
    /// each of the server's tools (at most 16 MiB); in bytes (default 1 MiB).
    #[serde(default)]
    pub max_output_bytes: Option<usize>,

    /// plugin: the plugin's name (from its manifest).
    #[serde(default)]
    pub plugin: Option<String>,
    /// plugin: the tool's name inside the plugin (default: `name`).
    #[serde(default)]
    pub plugin_tool: Option<String>,

    /// mcp: the server to start or reach.
    #[serde(default)]
    #[schemars(with = "Option<Value>")]
    pub server: Option<Value>,
    /// mcp: which of the server's tools to expose (all when absent).
    #[serde(default)]
    pub allow: Option<Vec<String>>,
    /// mcp: prefix for the exposed tool names.
    #[serde(default)]
    pub prefix: Option<String>,

    /// http_agent: an agent id from the daemon config.
    #[serde(default)]
    pub agent: Option<String>,
    /// http_agent: the agent's endpoint URL (instead of `agent`).
    #[serde(default)]
    pub url: Option<String>,
    /// http_agent: the largest reply body accepted, in bytes (default: the
    /// agent's `max_response_bytes` in `[[agents]]`, else 1 MiB).
    #[serde(default)]
    pub max_response_bytes: Option<usize>,

    /// agent: the bundle to run as a nested agent.
    #[serde(default)]
    pub bundle: Option<String>,
}

fn default_plugin() -> String {
    "openai".into()
}
fn default_true() -> bool {
    true
}
fn default_user_prompt() -> String {
    "{{ input }}".into()
}
fn default_max_turns() -> u32 {
    crate::kernel::DEFAULT_MAX_TURNS
}
fn default_max_history() -> usize {
    50
}
fn default_concurrency() -> usize {
    crate::kernel::DEFAULT_MAX_CONCURRENCY
}
fn default_temperature() -> Option<f64> {
    Some(0.1)
}
fn default_max_tokens() -> Option<u32> {
    Some(4096)
}
pub(crate) fn default_parameters() -> Value {
    serde_json::json!({"type": "object", "properties": {}})
}

/// `version: 1.0` and `version: "1.0"` both mean the string "1.0".
fn string_or_number<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    match Value::deserialize(d)? {
        Value::String(s) => Ok(s),
        Value::Number(n) => Ok(n.to_string()),
        other => Err(serde::de::Error::custom(format!(
            "expected a version string, got {other}"
        ))),
    }
}
