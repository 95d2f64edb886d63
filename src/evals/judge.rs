//! What a judge bundle is asked and how its answer (or a process
//! grader's output) is read: `{"score": 0..1, "reason": "…"}`, or
//! `{"pass": true|false, "reason": "…"}` (promptfoo's grading result).

use serde::Deserialize;
use serde_json::{Map, Value, json};

/// A grader's judgement, before its `pass_score` decides.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    pub score: f64,
    pub reason: String,
}

/// Why a judge's answer or a process grader's output cannot be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JudgementProblem {
    #[error(
        "its answer is not a JSON object ({0}); a judge answers {{\"score\": 0..1, \"reason\": \"…\"}}"
    )]
    NotJson(String),
    #[error(
        "its answer has neither a numeric `score` nor a boolean `pass`; a judge answers {{\"score\": 0..1, \"reason\": \"…\"}}"
    )]
    NoScore,
}

#[derive(Deserialize)]
struct Answer {
    score: Option<f64>,
    pass: Option<bool>,
    #[serde(default)]
    reason: String,
}

/// Reads a judgement from `text`: the JSON object it is, or the first one
/// in it (a judge may wrap its object in prose or a code fence).
pub fn read_judgement(text: &str) -> Result<Judgement, JudgementProblem> {
    let object = serde_json::from_str::<Map<String, Value>>(text.trim())
        .ok()
        .or_else(|| {
            super::check::json_in(text)
                .into_iter()
                .find_map(|v| v.as_object().cloned())
        })
        .ok_or_else(|| JudgementProblem::NotJson(preview(text)))?;
    let answer: Answer = serde_json::from_value(Value::Object(object))
        .map_err(|e| JudgementProblem::NotJson(e.to_string()))?;
    let score = match (answer.score, answer.pass) {
        (Some(score), _) => score,
        (None, Some(pass)) => f64::from(u8::from(pass)),
        (None, None) => return Err(JudgementProblem::NoScore),
    };
    Ok(Judgement {
        score,
        reason: answer.reason,
    })
}

/// The judge job's input: the rubric, the question and the answer, with
/// how to reply. Its variables carry the same three (`rubric`,
/// `question`, `answer`) for a judge bundle whose prompt places them.
pub fn judge_input(rubric: &str, question: &str, answer: &str) -> (String, Map<String, Value>) {
    let input = format!(
        "Grade the answer below against the rubric. Reply with one JSON object and nothing else: \
         {{\"score\": a number from 0 to 1, \"reason\": \"one sentence\"}}.\n\n\
         Rubric:\n{rubric}\n\nQuestion:\n{question}\n\nAnswer:\n{answer}"
    );
    let variables = [
        ("rubric", rubric),
        ("question", question),
        ("answer", answer),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_string(), json!(value)))
    .collect();
    (input, variables)
}

/// The start of `text`, for a message.
fn preview(text: &str) -> String {
    let cut: String = text.chars().take(120).collect();
    match cut.len() < text.len() {
        true => format!("{cut:?}…"),
        false => format!("{cut:?}"),
    }
}
