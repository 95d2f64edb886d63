//! Eval suites: the cases a bundle carries under `evals/` (JSONL cases, a
//! `suite.yaml` of graders, or a promptfoo config), the graders that score
//! what a case's job did, and a case's and a suite's weighted score.
//!
//! Reading and scoring only: running each case as a job, the judge bundle
//! and the process grader are the caller's (the `eval` command, the API,
//! the release gate), which hand back what a job did as an [`Observed`].

mod case;
mod check;
mod error;
mod grader;
mod promptfoo;
mod score;
mod suite;

pub use case::{EvalCase, SuiteFile};
pub use check::{Check, Observed, ObservedCall};
pub use error::{CaseProblem, EvalError, GraderProblem};
pub use grader::{External, GraderSpec, Verdict};
pub use score::{CaseResult, Grade, SuiteReport};
pub use suite::Suite;

#[cfg(test)]
mod tests;
