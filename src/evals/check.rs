//! What a case's job did ([`Observed`]) and the checks that read it: the
//! answer's text and JSON, the tool calls, and the job's turns, tokens,
//! cost and time. Each gives a pass, a reason a reader can act on, and for
//! checks of several parts how many parts passed (partial credit).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::GraderProblem;
use crate::duration::HumanDuration;

/// What a grader checks.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Check {
    /// The answer is exactly `value`; a JSON value compares with the answer
    /// read as JSON.
    Equals { value: Option<Value> },
    /// The answer contains `value`.
    Contains { value: Option<String> },
    /// The answer contains `value`, in any case.
    Icontains { value: Option<String> },
    /// The answer matches the regular expression `value`.
    Regex { value: Option<String> },
    /// The answer is JSON (and valid against `schema`, when given).
    IsJson { schema: Option<Value> },
    /// The answer holds a JSON object or array somewhere in its text (one
    /// valid against `schema`, when given).
    ContainsJson { schema: Option<Value> },
    /// Which tools the job called: each of `called` at least once, none of
    /// `never`, `order` as a subsequence of the calls, and every call of a
    /// tool named in `arguments` valid against its schema.
    ToolCalls {
        #[serde(default)]
        called: Vec<String>,
        #[serde(default)]
        never: Vec<String>,
        #[serde(default)]
        order: Vec<String>,
        #[serde(default)]
        arguments: BTreeMap<String, Value>,
    },
    /// The job stayed within these.
    Limits {
        max_turns: Option<u32>,
        max_tokens: Option<u64>,
        max_cost_usd: Option<f64>,
        max_duration: Option<HumanDuration>,
    },
    /// A judge bundle scores the answer against `rubric`: its answer is
    /// `{"score": 0..1, "reason": "…"}`; the case passes it at `pass_score`.
    Judge {
        bundle: String,
        rubric: String,
        #[serde(default = "half")]
        pass_score: f64,
    },
    /// A program reads the case and what the job did as JSON on stdin and
    /// writes `{"score": 0..1, "reason": "…"}`; it passes at `pass_score`.
    Process {
        command: Vec<String>,
        timeout: HumanDuration,
        #[serde(default = "half")]
        pass_score: f64,
    },
}

fn half() -> f64 {
    0.5
}

/// What one case's job did, as a grader reads it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Observed {
    /// The final answer; `None` when the job did not finish.
    pub answer: Option<String>,
    /// Why the job did not finish, when it did not.
    pub error: Option<String>,
    /// The tool calls, in the order the model made them.
    pub tool_calls: Vec<ObservedCall>,
    pub turns: u32,
    pub tokens: u64,
    pub cost_usd: f64,
    #[serde(with = "millis")]
    pub duration: Duration,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ObservedCall {
    pub name: String,
    pub arguments: Value,
}

mod millis {
    pub fn serialize<S: serde::Serializer>(
        d: &std::time::Duration,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_u128(d.as_millis())
    }
}

impl Check {
    /// The check's `type`, as a suite writes it.
    pub fn kind(&self) -> &'static str {
        match self {
            Check::Equals { .. } => "equals",
            Check::Contains { .. } => "contains",
            Check::Icontains { .. } => "icontains",
            Check::Regex { .. } => "regex",
            Check::IsJson { .. } => "is_json",
            Check::ContainsJson { .. } => "contains_json",
            Check::ToolCalls { .. } => "tool_calls",
            Check::Limits { .. } => "limits",
            Check::Judge { .. } => "judge",
            Check::Process { .. } => "process",
        }
    }

    /// Refuses a check that could never grade: no value where one is
    /// needed, a regex or schema that does not compile, an `expected` key on
    /// a check that takes no value, a pass score outside 0..=1.
    pub(super) fn validate(&self, has_expected: bool) -> Result<(), GraderProblem> {
        let takes_value = matches!(
            self,
            Check::Equals { .. }
                | Check::Contains { .. }
                | Check::Icontains { .. }
                | Check::Regex { .. }
        );
        if has_expected
            && !takes_value
            && !matches!(self, Check::IsJson { .. } | Check::ContainsJson { .. })
        {
            return Err(GraderProblem::ExpectedUnused(self.kind()));
        }
        match self {
            Check::Equals { value: None }
            | Check::Contains { value: None }
            | Check::Icontains { value: None }
            | Check::Regex { value: None }
                if !has_expected =>
            {
                Err(GraderProblem::NoValue(self.kind()))
            }
            Check::Regex {
                value: Some(pattern),
            } => compile_regex(pattern).map(drop),
            Check::IsJson {
                schema: Some(schema),
            }
            | Check::ContainsJson {
                schema: Some(schema),
            } => compile_schema(schema).map(drop),
            Check::ToolCalls { arguments, .. } => arguments
                .values()
                .try_for_each(|schema| compile_schema(schema).map(drop)),
            Check::Judge { pass_score, .. } | Check::Process { pass_score, .. }
                if !(0.0..=1.0).contains(pass_score) =>
            {
                Err(GraderProblem::PassScore(*pass_score))
            }
            Check::Process { command, .. } if command.is_empty() => Err(GraderProblem::NoCommand),
            _ => Ok(()),
        }
    }
}

/// A check's result before `not` and weight.
pub(super) struct Outcome {
    pub pass: bool,
    pub reason: String,
    passed: usize,
    parts: usize,
}

impl Outcome {
    fn whole(pass: bool, reason: String) -> Self {
        Outcome {
            pass,
            reason,
            passed: usize::from(pass),
            parts: 1,
        }
    }

    /// The score of a failed check: the share of its parts that passed
    /// (none for a negated check, whose parts passing is the failure).
    pub fn partial(&self, negated: bool) -> f64 {
        match negated || self.parts == 0 {
            true => 0.0,
            false => self.passed as f64 / self.parts as f64,
        }
    }
}

/// The longest regex a suite may compile (bytes of the compiled program):
/// a suite is an operator's file, but a case's `expected` is data.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

fn compile_regex(pattern: &str) -> Result<regex::Regex, GraderProblem> {
    regex::RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|source| GraderProblem::Regex {
            pattern: pattern.to_string(),
            source,
        })
}

fn compile_schema(schema: &Value) -> Result<jsonschema::Validator, GraderProblem> {
    jsonschema::validator_for(schema).map_err(|e| GraderProblem::Schema(e.to_string()))
}

/// Runs a check that needs no caller (not a judge or a process); the
/// check's value is `expected` when the grader reads it from the case.
pub(super) fn run(check: &Check, expected: Option<&Value>, observed: &Observed) -> Outcome {
    match check {
        Check::ToolCalls {
            called,
            never,
            order,
            arguments,
        } => tool_calls(observed, called, never, order, arguments),
        Check::Limits {
            max_turns,
            max_tokens,
            max_cost_usd,
            max_duration,
        } => {
            let mut parts = Parts::default();
            if let Some(max) = max_turns {
                parts.check(observed.turns <= *max, || {
                    format!("{} turns (at most {max})", observed.turns)
                });
            }
            if let Some(max) = max_tokens {
                parts.check(observed.tokens <= *max, || {
                    format!("{} tokens (at most {max})", observed.tokens)
                });
            }
            if let Some(max) = max_cost_usd {
                parts.check(observed.cost_usd <= *max, || {
                    format!("cost ${} (at most ${max})", observed.cost_usd)
                });
            }
            if let Some(max) = max_duration {
                parts.check(observed.duration <= max.0, || {
                    format!(
                        "took {} ms (at most {} ms)",
                        observed.duration.as_millis(),
                        max.0.as_millis()
                    )
                });
            }
            parts.outcome("within every limit")
        }
        check => match &observed.answer {
            Some(answer) => on_answer(check, expected, answer),
            None => Outcome::whole(
                false,
                format!(
                    "the job gave no answer: {}",
                    observed.error.as_deref().unwrap_or("it did not finish")
                ),
            ),
        },
    }
}

/// The checks of the answer's text.
fn on_answer(check: &Check, expected: Option<&Value>, answer: &str) -> Outcome {
    let text = |value: &Option<String>| match (expected, value) {
        (Some(Value::String(s)), _) => s.clone(),
        (Some(other), _) => other.to_string(),
        (None, Some(s)) => s.clone(),
        (None, None) => String::new(),
    };
    match check {
        Check::Equals { value } => {
            let want = expected.or(value.as_ref()).cloned().unwrap_or(Value::Null);
            let pass = match &want {
                Value::String(s) => answer == s,
                json => serde_json::from_str::<Value>(answer).is_ok_and(|got| &got == json),
            };
            Outcome::whole(
                pass,
                format!(
                    "the answer {} {want}",
                    if pass { "equals" } else { "is not" }
                ),
            )
        }
        Check::Contains { value } => {
            let want = text(value);
            let pass = answer.contains(&want);
            Outcome::whole(pass, format!("the answer {} {want:?}", contains(pass)))
        }
        Check::Icontains { value } => {
            let want = text(value);
            let pass = answer.to_lowercase().contains(&want.to_lowercase());
            Outcome::whole(
                pass,
                format!("the answer {} {want:?} (any case)", contains(pass)),
            )
        }
        Check::Regex { value } => match compile_regex(&text(value)) {
            Ok(re) => {
                let pass = re.is_match(answer);
                Outcome::whole(
                    pass,
                    format!(
                        "the answer {} /{}/",
                        if pass { "matches" } else { "does not match" },
                        re.as_str()
                    ),
                )
            }
            Err(e) => Outcome::whole(false, e.to_string()),
        },
        Check::IsJson { schema } => json_check(
            expected.or(schema.as_ref()),
            serde_json::from_str(answer).ok(),
            "is",
        ),
        Check::ContainsJson { schema } => {
            let schema = expected.or(schema.as_ref());
            let found = json_in(answer)
                .into_iter()
                .map(|json| json_check(schema, Some(json), "contains"));
            let mut last =
                Outcome::whole(false, "the answer contains no JSON object or array".into());
            for outcome in found {
                if outcome.pass {
                    return outcome;
                }
                last = outcome;
            }
            last
        }
        _ => Outcome::whole(
            false,
            format!("a `{}` check does not read the answer", check.kind()),
        ),
    }
}

fn contains(pass: bool) -> &'static str {
    if pass { "contains" } else { "does not contain" }
}

/// Whether `json` is there and valid against `schema`.
fn json_check(schema: Option<&Value>, json: Option<Value>, verb: &str) -> Outcome {
    let Some(json) = json else {
        return Outcome::whole(false, "the answer is not JSON".into());
    };
    let Some(schema) = schema else {
        return Outcome::whole(true, format!("the answer {verb} JSON"));
    };
    match compile_schema(schema) {
        Ok(validator) => match validator.iter_errors(&json).next() {
            None => Outcome::whole(
                true,
                format!("the answer {verb} JSON valid against the schema"),
            ),
            Some(e) => Outcome::whole(
                false,
                format!(
                    "the answer's JSON is not valid: {e} (at {})",
                    e.instance_path()
                ),
            ),
        },
        Err(e) => Outcome::whole(false, e.to_string()),
    }
}

/// The most places a JSON value is looked for in an answer: each failed
/// start reads on to where the text stops being JSON, so an answer of many
/// brackets must not cost a read per bracket.
const JSON_STARTS: usize = 64;

/// Every JSON object or array that starts at one of the first
/// [`JSON_STARTS`] brackets of `text` and reads whole from there, first
/// first.
pub(super) fn json_in(text: &str) -> Vec<Value> {
    text.char_indices()
        .filter(|(_, c)| *c == '{' || *c == '[')
        .take(JSON_STARTS)
        .filter_map(|(i, _)| {
            serde_json::Deserializer::from_str(&text[i..])
                .into_iter::<Value>()
                .next()?
                .ok()
        })
        .collect()
}

fn tool_calls(
    observed: &Observed,
    called: &[String],
    never: &[String],
    order: &[String],
    arguments: &std::collections::BTreeMap<String, Value>,
) -> Outcome {
    let names: Vec<&str> = observed
        .tool_calls
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    let mut parts = Parts::default();
    for tool in called {
        parts.check(names.contains(&tool.as_str()), || {
            format!("`{tool}` was never called")
        });
    }
    for tool in never {
        parts.check(!names.contains(&tool.as_str()), || {
            format!("`{tool}` was called")
        });
    }
    if !order.is_empty() {
        let mut rest = names.iter();
        let in_order = order.iter().all(|tool| rest.any(|name| name == tool));
        parts.check(in_order, || {
            format!("the calls {names:?} do not hold {order:?} in that order")
        });
    }
    for (tool, schema) in arguments {
        let calls: Vec<&ObservedCall> = observed
            .tool_calls
            .iter()
            .filter(|c| &c.name == tool)
            .collect();
        let problem = match compile_schema(schema) {
            Err(e) => Some(e.to_string()),
            Ok(_) if calls.is_empty() => Some(format!(
                "`{tool}` was never called, so its arguments were not checked"
            )),
            Ok(validator) => calls.iter().find_map(|call| {
                validator
                    .iter_errors(&call.arguments)
                    .next()
                    .map(|e| format!("`{tool}` was called with {}: {e}", call.arguments))
            }),
        };
        parts.check(problem.is_none(), || problem.clone().unwrap_or_default());
    }
    parts.outcome("the tool calls are as expected")
}

/// A check of several parts: each failed part's reason.
#[derive(Default)]
struct Parts {
    total: usize,
    failed: Vec<String>,
}

impl Parts {
    fn check(&mut self, pass: bool, reason: impl FnOnce() -> String) {
        self.total += 1;
        if !pass {
            self.failed.push(reason());
        }
    }

    fn outcome(self, all_well: &str) -> Outcome {
        let pass = self.failed.is_empty();
        Outcome {
            pass,
            reason: if pass {
                all_well.to_string()
            } else {
                self.failed.join("; ")
            },
            passed: self.total - self.failed.len(),
            parts: self.total,
        }
    }
}
