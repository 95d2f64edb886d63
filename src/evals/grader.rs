//! A grader as a suite writes it: a check, its weight, whether it is
//! negated, and where its expected value comes from; and what grading one
//! case with it gives — a grade, nothing (the case has no expected value
//! for it), or a grader the caller runs (a judge bundle, a process).

use serde::Deserialize;
use serde_json::{Map, Value};

use super::check::{self, Check, Observed};
use super::error::GraderProblem;
use super::score::Grade;
use crate::duration::HumanDuration;

/// One grader: `type` names the check, the other keys are the check's own
/// beside `name`, `weight`, `not` and `expected`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "Map<String, Value>")]
pub struct GraderSpec {
    /// The name in reports (the check's type when not given).
    pub name: String,
    /// How much the grader counts in the case's score (default 1; 0 reports
    /// it without counting it).
    pub weight: f64,
    /// Passes when the check fails (promptfoo's `not-` prefix).
    pub not: bool,
    /// Reads the check's value from the case's `expected` under this key; a
    /// case without the key is not graded by it.
    pub expected: Option<String>,
    pub check: Check,
}

/// What grading one case with one grader gives.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The case has no expected value for this grader.
    Skip,
    Done(Grade),
    /// A grader the caller runs; it turns the score into a [`Grade`] with
    /// [`GraderSpec::external_grade`].
    External(External),
}

/// A judge or a process grader, with what it needs to run.
#[derive(Debug, Clone, PartialEq)]
pub enum External {
    Judge {
        bundle: String,
        rubric: String,
    },
    Process {
        command: Vec<String>,
        timeout: HumanDuration,
    },
}

impl TryFrom<Map<String, Value>> for GraderSpec {
    type Error = GraderProblem;

    fn try_from(mut map: Map<String, Value>) -> Result<Self, GraderProblem> {
        let name = take::<Option<String>>(&mut map, "name")?;
        let weight = take::<Option<f64>>(&mut map, "weight")?.unwrap_or(1.0);
        let not = take::<Option<bool>>(&mut map, "not")?.unwrap_or(false);
        let expected = take::<Option<String>>(&mut map, "expected")?;
        let check: Check =
            serde_json::from_value(Value::Object(map)).map_err(GraderProblem::Check)?;
        if !weight.is_finite() || weight < 0.0 {
            return Err(GraderProblem::Weight(weight));
        }
        let spec = GraderSpec {
            name: name.unwrap_or_else(|| check.kind().to_string()),
            weight,
            not,
            expected,
            check,
        };
        spec.check.validate(spec.expected.is_some())?;
        Ok(spec)
    }
}

/// Takes `key` out of `map` as `T`, naming the key when it does not read.
fn take<T: serde::de::DeserializeOwned>(
    map: &mut Map<String, Value>,
    key: &'static str,
) -> Result<T, GraderProblem> {
    let value = map.remove(key).unwrap_or(Value::Null);
    serde_json::from_value(value).map_err(|source| GraderProblem::Field { key, source })
}

impl GraderSpec {
    /// Grades what a case's job did, reading the value named by `expected`
    /// from the case's `expected` values.
    pub fn grade(&self, expected_values: &Map<String, Value>, observed: &Observed) -> Verdict {
        let expected = match &self.expected {
            Some(key) => match expected_values.get(key) {
                Some(value) => Some(value),
                None => return Verdict::Skip,
            },
            None => None,
        };
        let outcome = match &self.check {
            Check::Judge { bundle, rubric, .. } => {
                return Verdict::External(External::Judge {
                    bundle: bundle.clone(),
                    rubric: rubric.clone(),
                });
            }
            Check::Process {
                command, timeout, ..
            } => {
                return Verdict::External(External::Process {
                    command: command.clone(),
                    timeout: *timeout,
                });
            }
            check => check::run(check, expected, observed),
        };
        let partial = outcome.partial(self.not);
        let (pass, reason) = match (self.not, outcome.pass) {
            (false, pass) => (pass, outcome.reason),
            (true, pass) => (!pass, format!("not: {}", outcome.reason)),
        };
        Verdict::Done(self.graded(if pass { 1.0 } else { partial }, pass, reason))
    }

    /// The grade of an external grader that scored `score` (0..=1).
    pub fn external_grade(&self, score: f64, reason: String) -> Grade {
        let pass_score = match &self.check {
            Check::Judge { pass_score, .. } | Check::Process { pass_score, .. } => *pass_score,
            _ => 1.0,
        };
        let score = if score.is_finite() {
            score.clamp(0.0, 1.0)
        } else {
            0.0
        };
        self.graded(score, score >= pass_score, reason)
    }

    fn graded(&self, score: f64, pass: bool, reason: String) -> Grade {
        Grade {
            grader: self.name.clone(),
            weight: self.weight,
            score,
            pass,
            reason,
        }
    }
}
