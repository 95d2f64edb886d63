//! A case's score (its graders' weighted mean) and whether it passes.

use serde::{Deserialize, Serialize};

/// One grader's result on one case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Grade {
    pub grader: String,
    pub weight: f64,
    /// 0 to 1: 1 when it passed, the share of its parts that passed when
    /// it failed, or the judge's or program's score.
    pub score: f64,
    pub pass: bool,
    pub reason: String,
}

/// One case's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseResult {
    pub case: String,
    pub grades: Vec<Grade>,
    /// The graders' scores weighted by their weights (graders of weight 0
    /// are reported and not counted).
    pub score: f64,
    pub pass: bool,
}

impl CaseResult {
    /// Scores `grades`: with a `threshold` the case passes at that score;
    /// without one, when every grader that counts passes (as promptfoo
    /// does).
    pub fn new(case: String, grades: Vec<Grade>, threshold: Option<f64>) -> Self {
        let counted = || grades.iter().filter(|g| g.weight > 0.0);
        let weights: f64 = counted().map(|g| g.weight).sum();
        let score = match weights > 0.0 {
            true => counted().map(|g| g.weight * g.score).sum::<f64>() / weights,
            false => f64::from(u8::from(grades.iter().all(|g| g.pass))),
        };
        let pass = match threshold {
            Some(threshold) => score >= threshold,
            None => counted().all(|g| g.pass),
        };
        CaseResult {
            case,
            grades,
            score,
            pass,
        }
    }
}
