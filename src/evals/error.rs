//! What can be wrong with a suite, each naming the file (and line) and
//! what to do.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("cannot read {path}: {source}; check that the file exists and is readable")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path}:{line}: not an eval case: {message}; each line is one JSON object with `input` or `messages` and at least one grader (docs/evals.md)"
    )]
    Case {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{path}: {message} (docs/evals.md)")]
    Suite { path: PathBuf, message: String },
    #[error(
        "{path} is not a directory: a bundle's eval suite is an `evals/` directory beside its bundle.yaml, with a `*.jsonl` file of cases (docs/evals.md)"
    )]
    NoSuite { path: PathBuf },
    #[error(
        "{path}: no case has one of the tags {tags:?}; run without tags, or tag the cases (`tags` in a case)"
    )]
    NoneTagged { path: PathBuf, tags: Vec<String> },
    #[error(
        "{path}: promptfoo's {what} is not supported here: {why} (docs/evals.md lists the subset that is)"
    )]
    Unsupported {
        path: PathBuf,
        what: String,
        why: String,
    },
    #[error("{at}: grader `{grader}`: {message}")]
    Grader {
        at: String,
        grader: String,
        message: String,
    },
}

/// Why a grader as written could never grade.
#[derive(Debug, thiserror::Error)]
pub enum GraderProblem {
    #[error("`{key}`: {source}")]
    Field {
        key: &'static str,
        source: serde_json::Error,
    },
    #[error("{0}")]
    Check(serde_json::Error),
    #[error("`weight` is {0}: give a number of 0 or more")]
    Weight(f64),
    #[error("`expected` names a value, which a `{0}` check does not take: remove it")]
    ExpectedUnused(&'static str),
    #[error("a `{0}` check needs `value` or `expected`")]
    NoValue(&'static str),
    #[error("the regex {pattern:?} does not compile: {source}")]
    Regex {
        pattern: String,
        source: regex::Error,
    },
    #[error("the JSON Schema is not usable: {0}")]
    Schema(String),
    #[error("`pass_score` is {0}: give a number from 0 to 1")]
    PassScore(f64),
    #[error("`command` is empty: name the program and its arguments")]
    NoCommand,
}

/// Why a case could not be run or graded.
#[derive(Debug, thiserror::Error)]
pub enum CaseProblem {
    #[error("case `{0}` has neither `input` nor `messages`")]
    NoInput(String),
    #[error("case `{id}` has `threshold` {threshold}: give a score from 0 to 1")]
    Threshold { id: String, threshold: f64 },
    #[error(
        "no grader grades case `{0}`: give it an `assert` list, or `expected` values the suite's graders read"
    )]
    Ungraded(String),
}
