//! One stage of a workflow as a whole job (the job kind `stage`, sent as
//! the variable `only_stage`;
//! `structured-agents simplify`): the run starts at that stage and ends
//! after it — `finish` when its event is a passing one (its transition does
//! not lead to `fatal` and, for a gated stage, its gate passed), else
//! `fatal` with the event and why. The stage is kept in the checkpoint, so
//! a resumed attempt ends the same way. Only the stages the workflow's
//! `run_alone` lists may run so: the others are reached through the stages
//! and gates the operator put before them.

use super::compile::Workflow;
use super::spec::{FATAL, StageSpec};

/// Why a job's `only_stage` cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OnlyStageError {
    #[error(
        "the workflow has no stage {stage:?}; its stages are {}: name one of them",
        .stages.join(", ")
    )]
    Unknown { stage: String, stages: Vec<String> },
    #[error(
        "stage {stage:?} may not run alone: the workflow's `run_alone` lists {}; add the stage to `workflow.run_alone` in the bundle to allow it, or submit the job without `only_stage` to run the whole workflow",
        if .allowed.is_empty() { "no stage".to_string() } else { .allowed.join(", ") }
    )]
    NotAlone { stage: String, allowed: Vec<String> },
}

/// Why the event a one-stage run's stage produced is not a passing one:
/// the run ends fatal with this as its reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("one-stage run of {stage}: event {event} is not a passing one ({why}): {reason}")]
pub(crate) struct NotPassing {
    stage: String,
    event: String,
    why: Failing,
    /// The stage's own reason for its event.
    reason: String,
}

/// Which rule of a passing event the event broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
enum Failing {
    #[error("no transition maps it")]
    Unmapped,
    #[error("its transition leads to fatal")]
    LeadsToFatal,
    #[error("its gate did not pass")]
    GateFailed,
    #[error("it is not the stage's completion event")]
    NotCompletion,
}

impl Workflow {
    /// Whether a job may run `stage` alone: a stage of this workflow that
    /// its `run_alone` lists.
    pub fn only_stage(&self, stage: &str) -> Result<(), OnlyStageError> {
        if !self.spec.stages.contains_key(stage) {
            return Err(OnlyStageError::Unknown {
                stage: stage.to_string(),
                stages: self.spec.stages.keys().cloned().collect(),
            });
        }
        // The operator's workflow decides which stages may be reached
        // without the ones before them.
        if !self.spec.run_alone.iter().any(|s| s == stage) {
            return Err(OnlyStageError::NotAlone {
                stage: stage.to_string(),
                allowed: self.spec.run_alone.clone(),
            });
        }
        Ok(())
    }
}

/// How a one-stage run ends after its stage produced `event` (for
/// `reason`): `Ok` to finish, `Err` why to end fatal. A passing event does not
/// lead to `fatal` and is, for a stage with a gate (a command or score
/// stage, an agent stage's `gate`), one of its gate's passing events; for an
/// agent stage without one, its completion event (the first of its
/// result's `events`).
pub(crate) fn verdict(
    workflow: &Workflow,
    stage: &str,
    event: &str,
    reason: &str,
) -> Result<(), NotPassing> {
    let gated = workflow.stage_info(stage).filter(|i| i.gate.is_some());
    let why = match (workflow.next(stage, event), gated) {
        (None, _) => Failing::Unmapped,
        (Some(FATAL), _) => Failing::LeadsToFatal,
        (_, Some(info)) if !info.pass_events.contains(event) => Failing::GateFailed,
        (_, None) if completion(workflow, stage) != Some(event) => Failing::NotCompletion,
        _ => return Ok(()),
    };
    Err(NotPassing {
        stage: stage.to_string(),
        event: event.to_string(),
        why,
        reason: reason.to_string(),
    })
}

fn completion<'w>(workflow: &'w Workflow, stage: &str) -> Option<&'w str> {
    match workflow.spec.stages.get(stage)? {
        StageSpec::Agent(agent) => agent.result.events.first().map(String::as_str),
        _ => None,
    }
}
