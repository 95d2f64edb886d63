//! The stage kinds beyond the engine's core (agent, command and score
//! stages, gates, transitions, limits): the one door through which the
//! engine reaches them. Each family of kinds keeps its own typed section of
//! the checkpoint (a field of [`KindState`]) and is called at the engine's
//! fixed points: the template variables of a stage, the dispatch of a
//! stage, a gate's report, an agent stage's run and its files. Today one
//! family: `git`, the original system's commit step and `pr`, `rebase` and
//! `ci` gates. A new family adds a section here and an arm to each hook;
//! the engine and the generic checkpoint do not change.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::gate::GateReport;
pub(crate) use super::git::{AgentStep, CommitOutcome, GitError};
use super::git::{GitEffect, GitState, last_files};
use super::spec::{AgentStage, StageSpec};

/// Every family's section of the checkpoint (`kinds` in its JSON).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KindState {
    /// The git stage kinds': `HEAD` at dispatch, the PR, the CI failure.
    #[serde(default, skip_serializing_if = "GitState::is_empty")]
    pub git: GitState,
}

/// What a stage run tells a family's section.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum KindEffect {
    Git(GitEffect),
}

/// A family's reason to end the workflow fatal at one of its points.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KindFatal {
    pub reason: String,
    pub details: Value,
}

impl KindEffect {
    /// What a gate's report tells the families, if anything.
    pub(crate) fn of(report: &GateReport) -> Option<Self> {
        GitEffect::of(report).map(Self::Git)
    }

    /// The effect carries the failure's context for the next agent stage
    /// in a variable of its own: the generic retry context stays unset.
    pub(crate) fn replaces_retry_context(&self) -> bool {
        matches!(self, Self::Git(GitEffect::CiFailed(_)))
    }
}

impl KindState {
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }

    /// Adds every family's template variables.
    pub(crate) fn vars(&self, vars: &mut Map<String, Value>) {
        self.git.vars(vars);
    }

    pub(crate) fn record(&mut self, effect: &KindEffect) {
        match effect {
            KindEffect::Git(effect) => self.git.record(effect),
        }
    }

    /// An agent stage ran: what the families told it once is delivered.
    pub(crate) fn delivered(&mut self) {
        self.git.delivered();
    }

    /// Before `stage` (`spec`) is dispatched: the facts its families need
    /// stored with the dispatch (`HEAD` for a commit step).
    pub(crate) async fn dispatch(
        &mut self,
        stage: &str,
        spec: Option<&StageSpec>,
        work_dir: &Path,
    ) -> Result<(), KindFatal> {
        let commits = matches!(spec, Some(StageSpec::Agent(agent)) if agent.commit.is_some());
        Box::pin(self.git.dispatch(commits, work_dir))
            .await
            .map_err(|e| KindFatal {
                reason: format!(
                    "ImplError: stage {stage} commits what it changes, but its working directory {} is not a git work tree: {e}",
                    work_dir.display()
                ),
                details: json!({"error": "ImplError"}),
            })
    }

    /// After an agent stage's agent ran: its commit step, if it has one
    /// (its report to store as the artifact, and a fatal reason).
    pub(crate) async fn after_agent(
        &self,
        agent: &AgentStage,
        step: &AgentStep<'_>,
    ) -> Option<CommitOutcome> {
        let settings = agent.commit.as_ref()?;
        let base = self.git.commit_base.as_deref();
        Some(Box::pin(step.commit(settings, base)).await)
    }
}

/// An agent stage's `files` variable: the files the last commit changed,
/// at most `max_files` (`Ok(None)` when the stage sets none).
pub(crate) async fn agent_files(
    agent: &AgentStage,
    work_dir: &Path,
) -> Result<Option<Value>, GitError> {
    let Some(max) = agent.max_files else {
        return Ok(None);
    };
    let files = last_files(work_dir, max).await?;
    Ok(Some(Value::Array(
        files.into_iter().map(Value::from).collect(),
    )))
}
