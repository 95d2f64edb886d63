//! A case and `suite.yaml` as a suite writes them, and the cases of one
//! `*.jsonl` file (one JSON object a line).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::error::{CaseProblem, EvalError};
use super::grader::GraderSpec;

/// One case: what to submit, what to expect, its graders.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalCase {
    /// Unique in the suite: given, or `FILE:LINE`.
    pub id: String,
    pub input: String,
    pub variables: Map<String, Value>,
    pub messages: Option<Vec<Value>>,
    /// Values graders read by key (`expected:` on a grader).
    pub expected: Map<String, Value>,
    pub tags: Vec<String>,
    /// The suite's graders, then the case's own.
    pub graders: Vec<GraderSpec>,
    /// The score at which it passes; `None`: when every counted grader
    /// passes.
    pub threshold: Option<f64>,
    /// What a stand-in answers for a tool with a side effect, by tool name
    /// (the suite's, then the case's own): the case job's tools with side
    /// effects never really run unless the eval asks for the real tools.
    pub tool_results: BTreeMap<String, Value>,
}

/// One line of a `*.jsonl` file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseLine {
    id: Option<String>,
    #[serde(default)]
    input: String,
    #[serde(default)]
    variables: Map<String, Value>,
    messages: Option<Vec<Value>>,
    #[serde(default)]
    expected: Map<String, Value>,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default, rename = "assert")]
    graders: Vec<GraderSpec>,
    threshold: Option<f64>,
    #[serde(default)]
    tool_results: BTreeMap<String, Value>,
}

/// `evals/suite.yaml`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuiteFile {
    /// Graders of every case (one with `expected:` grades the cases that
    /// have that key).
    #[serde(default)]
    pub graders: Vec<GraderSpec>,
    /// The score at which a case passes, unless the case says.
    pub threshold: Option<f64>,
    /// The bundle that judges promptfoo's `llm-rubric` assertions.
    pub judge: Option<String>,
    /// What stand-ins answer for the tools with side effects, by tool
    /// name, in every case (a case's own `tool_results` win).
    #[serde(default)]
    pub tool_results: BTreeMap<String, Value>,
}

impl SuiteFile {
    /// The suite's stand-in results with a case's `own` over them.
    pub(super) fn tool_results_with(
        &self,
        own: BTreeMap<String, Value>,
    ) -> BTreeMap<String, Value> {
        let mut results = self.tool_results.clone();
        results.extend(own);
        results
    }
}

/// The cases of one `*.jsonl` file.
pub(super) fn parse_cases(
    path: &Path,
    text: &str,
    file: &SuiteFile,
) -> Result<Vec<EvalCase>, EvalError> {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut cases = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        if line.trim().is_empty() {
            continue;
        }
        let bad = |message: String| EvalError::Case {
            path: path.to_path_buf(),
            line: number,
            message,
        };
        let parsed: CaseLine = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
        let case = EvalCase {
            id: parsed.id.unwrap_or_else(|| format!("{stem}:{number}")),
            input: parsed.input,
            variables: parsed.variables,
            messages: parsed.messages,
            expected: parsed.expected,
            tags: parsed.tags,
            graders: file.graders.iter().cloned().chain(parsed.graders).collect(),
            threshold: parsed.threshold.or(file.threshold),
            tool_results: file.tool_results_with(parsed.tool_results),
        };
        check_case(&case).map_err(|problem| bad(problem.to_string()))?;
        cases.push(case);
    }
    Ok(cases)
}

/// A case something can be submitted for and some grader grades.
pub(super) fn check_case(case: &EvalCase) -> Result<(), CaseProblem> {
    if case.input.trim().is_empty() && case.messages.as_ref().is_none_or(Vec::is_empty) {
        return Err(CaseProblem::NoInput(case.id.clone()));
    }
    if let Some(threshold) = case.threshold.filter(|t| !(0.0..=1.0).contains(t)) {
        return Err(CaseProblem::Threshold {
            id: case.id.clone(),
            threshold,
        });
    }
    let graded = case.graders.iter().any(|g| {
        g.expected
            .as_ref()
            .is_none_or(|key| case.expected.contains_key(key))
    });
    match graded {
        true => Ok(()),
        false => Err(CaseProblem::Ungraded(case.id.clone())),
    }
}
