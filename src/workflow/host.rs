//! The daemon side of a workflow, as the engine sees it: the
//! `WorkflowHost` it runs agents, stores checkpoints and artifacts and
//! reports stage runs through (the worker implements it), what an agent
//! run answers, and why the engine stops without reaching `finish` or
//! `fatal` (`EngineError`).

use async_trait::async_trait;
use serde_json::Value;

use super::checkpoint::{CHECKPOINT_FORMAT, Checkpoint, StageReport};
use crate::kernel::RunFailure;

/// What an agent run answered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentOutput {
    /// The final answer's text.
    pub text: String,
    /// The termination tool's output, when that ended the run.
    pub final_output: Option<String>,
}

/// The daemon side of a workflow: runs agents, stores checkpoints and
/// artifacts, observes stage reports.
#[async_trait]
pub trait WorkflowHost: Send + Sync {
    /// Runs an agent (this bundle when `bundle` is `None`, else the named
    /// one) with `prompt` as its input. `key` (`s{step}-{stage}`) is stable
    /// across attempts: give the run its own journal scope under it so a
    /// resumed stage replays its completed model and tool steps.
    async fn run_agent(
        &self,
        key: &str,
        bundle: Option<&str>,
        prompt: String,
    ) -> Result<AgentOutput, RunFailure>;

    /// Stores the checkpoint durably (with the job's progress, in one
    /// transaction). Called before every dispatch and at the end.
    async fn checkpoint(&self, checkpoint: &Checkpoint) -> Result<(), HostError>;

    /// Stores an artifact; a later one with the same name replaces it.
    async fn artifact(&self, name: &str, body: &Value) -> Result<(), HostError>;

    /// Called after each stage run (for logs, spans and metrics).
    async fn stage_finished(&self, report: &StageReport);
}

/// Why the host could not store what the engine handed it.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The job store refused the write; its error is the host's own (the
    /// engine knows no store).
    #[error("{0}")]
    Store(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// An artifact could not be copied into the artifacts directory.
    #[error("cannot write artifact {}: {source} (check workflow.artifacts_dir)", path.display())]
    ArtifactFile {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// Why the engine stopped without reaching `finish` or `fatal`. The job
/// attempt fails; a new attempt resumes from the last stored checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(
        "the checkpoint belongs to workflow version {found:?}, but the bundle's workflow is version {expected:?}: resubmit the job, or run it with the bundle version it started with"
    )]
    VersionMismatch { found: String, expected: String },
    #[error(
        "the checkpoint has format {found}, this build reads format {CHECKPOINT_FORMAT}: run the job with the daemon version that started it, or resubmit it"
    )]
    Format { found: u32 },
    #[error(
        "the checkpoint names stage {stage:?}, which the workflow does not have: resubmit the job"
    )]
    UnknownStage { stage: String },
    #[error(
        "storing the checkpoint before stage {stage:?} (step {step}) failed: {source}; check the job store, a new attempt resumes from the last checkpoint"
    )]
    Checkpoint {
        stage: String,
        step: u32,
        source: HostError,
    },
    #[error(
        "stage {stage:?}: the agent run failed: {source}; a new attempt of the job resumes this stage"
    )]
    Agent {
        stage: String,
        #[source]
        source: RunFailure,
    },
    #[error("stage {stage:?}: storing artifact {name:?} failed: {source}; check the job store")]
    Artifact {
        stage: String,
        name: String,
        source: HostError,
    },
}
