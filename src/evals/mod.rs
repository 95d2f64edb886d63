//! Eval suites: the cases a bundle carries under `evals/` (JSONL cases, a
//! `suite.yaml` of graders, or a promptfoo config), the graders that score
//! what a case's job did, and a case's and a suite's weighted score.
//!
//! Reading, scoring and reporting only: running each case as a job, the
//! judge bundle and the process grader are the caller's (an eval run's
//! job, `worker/eval`), which hands back what a job did as an
//! [`Observed`] and each case's runs for the [`RunReport`].

mod case;
mod check;
mod error;
mod grader;
mod judge;
mod promptfoo;
mod report;
mod score;
mod suite;

pub use case::{EvalCase, SuiteFile};
pub use check::{Check, Observed, ObservedCall};
pub use error::{CaseProblem, EvalError, GraderProblem};
pub use grader::{External, GraderSpec, Verdict};
pub use judge::{Judgement, JudgementProblem, judge_input, read_judgement};
pub use report::{ANSWER_CHARS, CaseReport, CaseRun, Change, PassRule, RunReport};
pub use score::{CaseResult, Grade};
pub use suite::Suite;

#[cfg(test)]
mod tests;
