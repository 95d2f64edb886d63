//! An eval run's report: each case as it went on the version under test
//! (and on the version it is compared against), the suite's score, the
//! regressions and improvements, and the verdict with its reason — what
//! the `eval` command prints, the API answers and a release gate decides
//! on.

use serde::{Deserialize, Serialize};

use super::score::{CaseResult, Grade};

/// The most characters of an answer a report keeps (the case's job has
/// the whole of it).
pub const ANSWER_CHARS: usize = 2000;

/// One case on one version.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CaseRun {
    /// The case's job (`GET /v1/jobs/{id}`); none when it could not be
    /// submitted.
    pub job_id: Option<String>,
    pub pass: bool,
    pub score: f64,
    pub grades: Vec<Grade>,
    /// The answer, cut at [`ANSWER_CHARS`].
    pub answer: Option<String>,
    /// Why the case's job gave no answer (or could not be submitted).
    pub error: Option<String>,
    /// The tools called, in order.
    pub tool_calls: Vec<String>,
    pub turns: u32,
    pub tokens: u64,
    /// The case job's cost.
    pub cost_usd: f64,
    /// What its judges cost (their own jobs).
    pub judge_cost_usd: f64,
    pub duration_ms: u64,
}

impl CaseRun {
    /// The run's grades scored: its `score` and `pass` from `result`.
    pub fn scored(mut self, result: CaseResult) -> Self {
        self.score = result.score;
        self.pass = result.pass;
        self.grades = result.grades;
        self
    }

    /// A case that ran nothing: `error` says why; it fails.
    pub fn failed(job_id: Option<String>, error: String) -> Self {
        CaseRun {
            job_id,
            error: Some(error),
            ..CaseRun::default()
        }
    }
}

/// How a case went against the version it is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// Passed there, fails here.
    Regressed,
    /// Failed there, passes here.
    Improved,
    Same,
}

/// One case of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseReport {
    pub case: String,
    /// On the version under test.
    #[serde(flatten)]
    pub run: CaseRun,
    /// On the version compared against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub against: Option<CaseRun>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<Change>,
}

impl CaseReport {
    pub fn new(case: String, run: CaseRun, against: Option<CaseRun>) -> Self {
        let change = against.as_ref().map(|there| match (there.pass, run.pass) {
            (true, false) => Change::Regressed,
            (false, true) => Change::Improved,
            _ => Change::Same,
        });
        CaseReport {
            case,
            run,
            against,
            change,
        }
    }
}

/// What makes a suite pass.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PassRule {
    /// Pass at this mean score; without it, when every case passes.
    pub min_score: Option<f64>,
    /// Fail on any regression against the compared version.
    pub no_regressions: bool,
}

/// An eval run's report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    pub bundle: String,
    pub version: String,
    /// The version compared against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub against: Option<String>,
    pub cases: Vec<CaseReport>,
    /// The mean of the cases' scores on the version under test.
    pub score: f64,
    pub passed: usize,
    pub failed: usize,
    /// The same mean on the version compared against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub against_score: Option<f64>,
    /// Cases that passed on the compared version and fail here.
    pub regressions: Vec<String>,
    /// Cases that failed on the compared version and pass here.
    pub improvements: Vec<String>,
    /// Every case job and judge job, on both versions.
    pub cost_usd: f64,
    pub pass: bool,
    /// Why it passed or failed, in one sentence.
    pub verdict: String,
    /// The case jobs really ran their tools with side effects.
    #[serde(default)]
    pub real_tools: bool,
    /// The tools (of the version under test) stand-ins answered, so that
    /// nothing of theirs really ran; empty with `real_tools`.
    #[serde(default)]
    pub stand_ins: Vec<String>,
}

impl RunReport {
    pub fn new(
        bundle: String,
        version: String,
        against: Option<String>,
        cases: Vec<CaseReport>,
        rule: PassRule,
    ) -> Self {
        let mean = |runs: &mut dyn Iterator<Item = &CaseRun>| {
            let scores: Vec<f64> = runs.map(|r| r.score).collect();
            match scores.is_empty() {
                true => 0.0,
                false => scores.iter().sum::<f64>() / scores.len() as f64,
            }
        };
        let score = mean(&mut cases.iter().map(|c| &c.run));
        let against_score = against
            .as_ref()
            .map(|_| mean(&mut cases.iter().filter_map(|c| c.against.as_ref())));
        let with = |change| -> Vec<String> {
            cases
                .iter()
                .filter(|c| c.change == Some(change))
                .map(|c| c.case.clone())
                .collect()
        };
        let (regressions, improvements) = (with(Change::Regressed), with(Change::Improved));
        let passed = cases.iter().filter(|c| c.run.pass).count();
        let cost_usd = cases
            .iter()
            .flat_map(|c| std::iter::once(&c.run).chain(&c.against))
            .map(|r| r.cost_usd + r.judge_cost_usd)
            .sum();
        let (pass, verdict) = verdict(score, passed, cases.len(), &regressions, rule);
        RunReport {
            bundle,
            version,
            against,
            failed: cases.len() - passed,
            passed,
            cases,
            score,
            against_score,
            regressions,
            improvements,
            cost_usd,
            pass,
            verdict,
            real_tools: false,
            stand_ins: Vec::new(),
        }
    }
}

/// Whether a suite passes by `rule`, and why.
fn verdict(
    score: f64,
    passed: usize,
    total: usize,
    regressions: &[String],
    rule: PassRule,
) -> (bool, String) {
    if rule.no_regressions && !regressions.is_empty() {
        return (
            false,
            format!(
                "{} case(s) regressed against the compared version: {}",
                regressions.len(),
                regressions.join(", ")
            ),
        );
    }
    match rule.min_score {
        Some(min) if score < min => (
            false,
            format!("the score {score:.3} is below the minimum {min}"),
        ),
        Some(min) => (
            true,
            format!("the score {score:.3} reaches the minimum {min}"),
        ),
        None if passed < total => (
            false,
            format!(
                "{} of {total} case(s) failed (without a minimum score every case must pass)",
                total - passed
            ),
        ),
        None => (true, format!("all {total} case(s) passed")),
    }
}
