//! The raw `release:` section of `bundle.yaml`: how a new version of a
//! bundle goes live (its eval gate and canary), as operators write it.
//! Doc comments here are user docs (`structured-agents schema bundle`);
//! `release` acts on it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How a new version of the bundle goes live (see `RawBundle::release`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseSection {
    /// What gates it: `evals`, the bundle's eval suite.
    pub gate: ReleaseGate,
    /// The suite passes at this mean case score (0 to 1); without it,
    /// when every case passes.
    #[serde(default)]
    pub min_score: Option<f64>,
    /// The suite fails when a case that passes on the serving version
    /// fails on the new one.
    #[serde(default)]
    pub no_regressions: bool,
    /// Only the cases with one of these tags gate it (every case when
    /// empty).
    #[serde(default)]
    pub tags: Vec<String>,
    /// Case jobs in flight at once (1 to 64; default 4).
    #[serde(default)]
    pub concurrency: Option<u32>,
    /// The gate's case jobs really run the tools whose effect is not
    /// `read_only` (default: stand-ins answer them with the cases'
    /// `tool_results`, so a gate never pays or writes for real).
    #[serde(default)]
    pub real_tools: bool,
    /// A candidate whose evals pass first takes this share of the new
    /// jobs beside the version serving, and is promoted or rolled back by
    /// how those jobs do (absent: it is promoted when its evals pass).
    #[serde(default)]
    pub canary: Option<CanarySection>,
}

/// How a candidate that passed its evals is tried on live jobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CanarySection {
    /// The share of new jobs (those not pinned to a version) the
    /// candidate takes, above 0 and below 1.
    pub share: f64,
    /// Its jobs that must end before it is judged (default 20).
    #[serde(default = "default_canary_jobs")]
    pub min_jobs: u32,
    /// It is rolled back when its share of failed jobs exceeds the serving
    /// version's (over the same time) by more than this (default 0.05).
    #[serde(default = "default_failure_margin")]
    pub failure_margin: f64,
    /// It is rolled back when its cost per job exceeds the serving
    /// version's by more than this fraction (default 0.25: 25 % more).
    #[serde(default = "default_cost_margin")]
    pub cost_margin: f64,
}

fn default_canary_jobs() -> u32 {
    20
}

fn default_failure_margin() -> f64 {
    0.05
}

fn default_cost_margin() -> f64 {
    0.25
}

/// What gates a new version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReleaseGate {
    /// The bundle's eval suite (`evals/`).
    Evals,
}
