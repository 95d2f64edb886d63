//! What a job runs ([`JobKind`]) and the daemon's controls over its run
//! ([`Controls`]): typed fields of a job, stored in their own columns
//! (`kind`, `controls`) beside the submitter's `variables`, which hold only
//! what templates render. Admission writes both, in one place; the worker
//! reads them as they are and never looks into `variables` for them.
//!
//! Before these columns the controls rode in `variables` under the names
//! below, and wires still accept them there: [`Asked::lift`] is the one
//! rule that takes them out (every way in goes through admission, which
//! asks it), and the migration that added the columns moved those of the
//! jobs already stored the same way (SQLite 0015, PostgreSQL 0016).
//!
//! This module must not know about bundles: whether a bundle offers the
//! tools or has the stage is admission's check.

use std::collections::BTreeMap;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use crate::group_chat::Plan;
use crate::types::{AnswerFormat, StandIns, ToolSchema, tool_names};

/// The variable that offers the model only some of the bundle's tools (the
/// Python kernel's `tools=[names]`): a list of tool names, or one
/// comma-separated string (as `--var tools=a,b` sends it).
pub use crate::types::TOOLS_VARIABLE;
/// The variable that caps a run's agent calls (`agent` and `http_agent`
/// tools): the runtime API's `max_agents`.
pub const MAX_AGENTS_VARIABLE: &str = "max_agents";
/// The variable that names the one stage of a workflow to run.
pub const ONLY_STAGE_VARIABLE: &str = "only_stage";

/// What the worker runs for a job.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum JobKind {
    /// Its bundle's own run: the workflow when the content the job is
    /// pinned to has one, else its agent. Which of the two is a fact of
    /// that content (fixed for every attempt by the pin), not of the job.
    #[default]
    Bundle,
    /// One stage of its bundle's workflow, alone: the run starts there and
    /// ends after it (`only_stage`; `structured-agents simplify`).
    Stage { stage: String },
    /// A group chat by the plan the daemon built from `POST
    /// /api/group-chat`, run by the host bundle. A submitter cannot ask for
    /// one: only the runtime API hands admission a plan.
    GroupChat { plan: Box<Plan> },
    /// One call of its bundle's tool `tool` with `arguments` (the JSON text
    /// a model would write), outside any run: `POST
    /// /v1/bundles/{name}/tools/{tool}:run` makes one and waits for its
    /// answer, so the call runs where jobs run, on a worker, under the
    /// job's lease, log and cancellation. A submitter cannot ask for one
    /// on another way in: no wire's body sets a job's kind.
    ToolRun { tool: String, arguments: String },
    /// A verify of its bundle, the crash matrix (`POST
    /// /v1/bundles/{name}/verify` makes one and waits for its report): it
    /// runs where jobs run, on a worker, under the job's lease and
    /// cancellation, never in the API process. Like a tool run, only that
    /// route makes one.
    Verify(Box<VerifyRun>),
    /// An eval run of its bundle (`POST /v1/bundles/{name}/evals`, the
    /// `eval` command, a release gate): the suite under `evals/` of the
    /// content the job is pinned to, each case submitted as a job of the
    /// same owner and graded; the report is the job's result. It waits on
    /// its cases' jobs, so it holds no worker slot of its own. Only that
    /// route and the gate make one.
    Eval(Box<EvalRun>),
}

/// What an eval run runs, stored with its job so that a run resumed on
/// another daemon submits (and finds, by their idempotency keys) the same
/// case jobs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EvalRun {
    /// Only the cases with one of these tags (every case when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Case jobs in flight at once.
    pub concurrency: u32,
    /// Another version of the bundle every case also runs on, compared
    /// case by case (regressions, improvements).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub against: Option<EvalPin>,
    /// Each case job's budget limits (within the bundle's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<crate::budget::BudgetLimits>,
    /// The suite passes at this mean score; without it, when every case
    /// passes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_score: Option<f64>,
    /// The suite fails when a case that passed on `against` fails.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_regressions: bool,
    /// Really run the case jobs' tools whose effect is not `read_only`
    /// (else stand-ins answer them with the cases' `tool_results`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub real_tools: bool,
}

/// One content of a bundle, as a case job is pinned to it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EvalPin {
    pub version: String,
    /// The content's identity (`GET /v1/bundles/{name}`'s `identity`).
    pub digest: String,
}

/// What a verify job runs: the body of `POST /v1/bundles/{name}/verify`
/// as checked, stored with the job so that a verify resumed on another
/// daemon runs the same.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VerifyRun {
    /// The reply script's text (the mock server's format); none: the
    /// bundle's own `scripted:` endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exchange: Option<String>,
    /// The run's input (`{{ input }}` in the prompts).
    pub input: String,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub variables: Map<String, Value>,
    /// Really run the tools whose effect is not `read_only` (else
    /// stand-ins answer them with `tool_results`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub real_tools: bool,
    /// What the stand-ins answer, by tool name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tool_results: BTreeMap<String, Value>,
}

impl JobKind {
    pub fn is_group_chat(&self) -> bool {
        matches!(self, Self::GroupChat { .. })
    }

    /// A job that waits on jobs of its own (an eval run's cases) rather
    /// than running work: it must not hold a worker slot those jobs need.
    pub fn waits_on_jobs(&self) -> bool {
        matches!(self, Self::Eval(_))
    }
}

/// The daemon's controls over one job's run, one typed field each; unset
/// fields leave the bundle's own behaviour.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Controls {
    /// Offer the model only these of the bundle's tools (`tools`).
    #[serde(
        default,
        deserialize_with = "some_tool_names",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(schema_with = "tool_names_schema")]
    pub tools: Option<Vec<String>>,
    /// The most agent calls (`agent` and `http_agent` tools) the run makes;
    /// later ones are refused to the model (`max_agents`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_agents: Option<u32>,
    /// The runtime API's query asked for a verbose execution trace (its
    /// conversation shows the same trace later).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub verbose: bool,
    /// The shape the final answer must have (a wire's `response_format` or
    /// `text.format`): asked of the model on the turns that may answer and
    /// checked when the run ends, on every attempt (it is stored with the
    /// job, so a job resumed after a restart still holds to it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_format: Option<AnswerFormat>,
    /// The caller's own tools (a wire's `tools`, when the bundle takes
    /// them: `caller_tools`), offered to the model beside the bundle's;
    /// a call of one parks the job until the client sends its output.
    /// Stored with the job, so a resumed job offers them still.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub caller_tools: Vec<ToolSchema>,
    /// Its tools with a side effect (and those of the bundles it runs
    /// nested) are answered by stand-ins, never really run: an eval's case
    /// and judge jobs, unless the eval asked for the real tools. No wire's
    /// body sets it; only an eval run's worker does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stand_ins: Option<StandIns>,
}

impl Controls {
    /// `self`, with each field `other` sets taken from it.
    pub fn or(self, other: Controls) -> Controls {
        Controls {
            tools: self.tools.or(other.tools),
            max_agents: self.max_agents.or(other.max_agents),
            verbose: self.verbose || other.verbose,
            answer_format: self.answer_format.or(other.answer_format),
            caller_tools: match self.caller_tools.is_empty() {
                true => other.caller_tools,
                false => self.caller_tools,
            },
            stand_ins: self.stand_ins.or(other.stand_ins),
        }
    }
}

/// Why a control sent in `variables` cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`variables.{variable}` {problem}")]
pub struct ControlError {
    /// The variable's name (`tools`, `only_stage`, `max_agents`).
    pub variable: &'static str,
    pub problem: String,
}

/// What a submitter's `variables` asked of the daemon, taken out of them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Asked {
    /// The one stage to run (`only_stage`).
    pub stage: Option<String>,
    pub controls: Controls,
}

impl Asked {
    /// The one rule for controls sent as variables: `tools`, `only_stage`
    /// and `max_agents` leave `variables` for their typed fields; every
    /// other variable stays for the templates. A value of the wrong shape
    /// is refused naming its variable (and nothing is taken).
    pub fn lift(variables: &mut Map<String, Value>) -> Result<Self, ControlError> {
        let tools = variables
            .get(TOOLS_VARIABLE)
            .map(|value| {
                tool_names(value).map_err(|e| ControlError {
                    variable: TOOLS_VARIABLE,
                    problem: e.to_string(),
                })
            })
            .transpose()?;
        let stage = match variables.get(ONLY_STAGE_VARIABLE) {
            None => None,
            Some(Value::String(stage)) => Some(stage.clone()),
            Some(other) => {
                return Err(ControlError {
                    variable: ONLY_STAGE_VARIABLE,
                    problem: format!("must be a stage name (a string), not {other}"),
                });
            }
        };
        let max_agents = match variables.get(MAX_AGENTS_VARIABLE) {
            None => None,
            Some(value) => Some(
                value
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| ControlError {
                        variable: MAX_AGENTS_VARIABLE,
                        problem: format!(
                            "must be a whole number of agent calls (0 to {}), not {value}",
                            u32::MAX
                        ),
                    })?,
            ),
        };
        for name in [TOOLS_VARIABLE, ONLY_STAGE_VARIABLE, MAX_AGENTS_VARIABLE] {
            variables.remove(name);
        }
        Ok(Asked {
            stage,
            controls: Controls {
                tools,
                max_agents,
                ..Controls::default()
            },
        })
    }
}

/// `tools` as stored: in either of the shapes [`tool_names`] reads (a job
/// migrated from `variables` keeps the shape its submitter sent).
fn some_tool_names<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    let value = Option::<Value>::deserialize(d)?;
    value
        .map(|v| tool_names(&v).map_err(serde::de::Error::custom))
        .transpose()
}

/// `tools` on the wire: written as a list; read by [`some_tool_names`],
/// which also takes one comma-separated string, or `null` for none.
fn tool_names_schema(generator: &mut SchemaGenerator) -> Schema {
    let list = json_schema!({"type": "array", "items": {"type": "string"}});
    if generator.contract().is_serialize() {
        return list;
    }
    json_schema!({
        "anyOf": [list, {"type": "string", "description": "Names separated by commas."}, {"type": "null"}]
    })
}

/// A typed JSON column (`kind`, `controls`) as read: an empty or
/// unreadable one (a row written by hand, or a plan of a newer format) reads
/// as the default, logged, so that one bad row cannot stop every lease.
pub(super) fn from_column<T: Default + serde::de::DeserializeOwned>(
    text: Option<String>,
    column: &str,
    job: &str,
) -> T {
    let Some(text) = text else {
        return T::default();
    };
    serde_json::from_str(&text).unwrap_or_else(|e| {
        tracing::warn!(job_id = job, column, error = %e, "a job's column is not readable; it reads as unset");
        T::default()
    })
}

/// A typed column's JSON as written (these types always serialize).
pub(super) fn column_text(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "{}".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vars(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn controls_sent_as_variables_leave_them_for_their_fields() {
        let mut variables = vars(json!({
            "tools": "a, b", "only_stage": "simplify", "max_agents": 2, "city": "Oslo"
        }));
        let asked = Asked::lift(&mut variables).unwrap();
        assert_eq!(asked.stage.as_deref(), Some("simplify"));
        assert_eq!(
            asked.controls,
            Controls {
                tools: Some(vec!["a".into(), "b".into()]),
                max_agents: Some(2),
                ..Controls::default()
            }
        );
        assert_eq!(variables, vars(json!({"city": "Oslo"})));
    }

    #[test]
    fn a_control_of_the_wrong_shape_is_refused_naming_it_and_nothing_is_taken() {
        for (sent, variable) in [
            (json!({"tools": 3}), "tools"),
            (json!({"tools": ["a", 1]}), "tools"),
            (json!({"only_stage": ["s"]}), "only_stage"),
            (json!({"max_agents": -1}), "max_agents"),
            (json!({"max_agents": "two"}), "max_agents"),
        ] {
            let mut variables = vars(sent.clone());
            let err = Asked::lift(&mut variables).unwrap_err();
            assert_eq!(err.variable, variable, "{sent}");
            assert!(
                err.to_string()
                    .starts_with(&format!("`variables.{variable}`"))
            );
            assert_eq!(Value::Object(variables), sent);
        }
    }

    #[test]
    fn stored_controls_read_both_shapes_of_tools_and_kinds_round_trip() {
        let stored: Controls =
            serde_json::from_value(json!({"tools": "x,y", "verbose": true})).unwrap();
        assert_eq!(stored.tools, Some(vec!["x".into(), "y".into()]));
        assert!(stored.verbose);
        assert_eq!(
            serde_json::to_value(Controls::default()).unwrap(),
            json!({})
        );
        let stage = JobKind::Stage {
            stage: "simplify".into(),
        };
        let text = serde_json::to_string(&stage).unwrap();
        assert_eq!(text, r#"{"type":"stage","stage":"simplify"}"#);
        assert_eq!(serde_json::from_str::<JobKind>(&text).unwrap(), stage);
        assert_eq!(
            serde_json::from_str::<JobKind>(r#"{"type":"bundle"}"#).unwrap(),
            JobKind::Bundle
        );
    }

    #[test]
    fn an_unreadable_column_reads_as_unset_instead_of_stopping_the_lease() {
        let kind: JobKind = from_column(Some("{\"type\":\"later\"}".into()), "kind", "j1");
        assert_eq!(kind, JobKind::Bundle);
        let controls: Controls = from_column(None, "controls", "j1");
        assert_eq!(controls, Controls::default());
        let stage = JobKind::Stage { stage: "s".into() };
        assert_eq!(
            from_column::<JobKind>(Some(column_text(&stage)), "kind", "j1"),
            stage
        );
    }
}
