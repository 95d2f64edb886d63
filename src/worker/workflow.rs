//! Workflow jobs: the worker's side of [`WorkflowHost`]. Agent stages run
//! the kernel with a journal scope of their own (so a resumed stage replays
//! its completed model and tool steps); checkpoints and artifacts are
//! journal entries, written with the job's held events in one group
//! commit; every stage run becomes a `StageEnd` event (log, metrics, spans).

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use crate::events::Event;
use crate::journal::{ARTIFACTS_SCOPE, CHECKPOINTS_SCOPE, RunJournal};
use crate::kernel::RunFailure;
use crate::queue::{LeasedJob, Outcome};
use crate::registry::LoadedBundle;
use crate::runner::{RunOptions, RunScope, Runner};
use crate::workflow::{
    AgentOutput, Checkpoint, Engine, EngineError, HostError, StageReport, Workflow, WorkflowHost,
};

/// One attempt of a workflow job.
pub(super) struct WorkflowJob<'a> {
    pub runner: &'a Runner,
    pub loaded: &'a LoadedBundle,
    pub job: &'a LeasedJob,
    pub scope: &'a RunScope,
    pub record_messages: bool,
    /// The one stage to run alone (the job's kind `stage`).
    pub only: Option<&'a str>,
}

struct Host<'a> {
    run: &'a WorkflowJob<'a>,
    checkpoints: RunJournal,
    artifacts: RunJournal,
    /// `workflow.artifacts_dir`, rendered: artifacts are also written here.
    artifacts_dir: Option<std::path::PathBuf>,
}

#[async_trait]
impl WorkflowHost for Host<'_> {
    async fn run_agent(
        &self,
        key: &str,
        bundle: Option<&str>,
        prompt: String,
    ) -> Result<AgentOutput, RunFailure> {
        let run = self.run;
        let options = RunOptions {
            record_messages: run.record_messages,
            stand_ins: run.job.controls.stand_ins.clone(),
            ..RunOptions::default()
        };
        let scope = run
            .scope
            .nested(0, key, bundle.unwrap_or(run.loaded.name()));
        let result = match bundle {
            Some(name) => {
                run.runner
                    .run_nested_bundle(name, &prompt, &run.job.variables, &options, scope)
                    .await?
            }
            // The workflow's own bundle: the content the job is pinned to.
            None => {
                let messages = run
                    .loaded
                    .bundle
                    .prompts
                    .render(&prompt, &run.job.variables)
                    .map_err(|e| {
                        RunFailure::Bundle(format!("bundle {:?}: {e}", run.loaded.name()))
                    })?;
                let scope = scope.running(run.loaded);
                run.runner
                    .run(run.loaded, messages, &options, &scope)
                    .await?
            }
        };
        Ok(AgentOutput {
            text: result.final_message.content.unwrap_or_default(),
            final_output: result.final_output,
        })
    }

    async fn checkpoint(&self, checkpoint: &Checkpoint) -> Result<(), HostError> {
        self.checkpoints
            .record_value(checkpoint.step, "checkpoint", checkpoint)
            .await
            .map_err(|e| HostError::Store(Box::new(e)))?;
        crate::failpoint::hit(crate::failpoint::Failpoint::AfterCheckpoint);
        Ok(())
    }

    async fn artifact(&self, name: &str, body: &Value) -> Result<(), HostError> {
        self.artifacts
            .record_value(0, name, body)
            .await
            .map_err(|e| HostError::Store(Box::new(e)))?;
        if let Some(dir) = &self.artifacts_dir {
            let text = match body {
                Value::String(text) => text.clone(),
                other => serde_json::to_string_pretty(other).unwrap_or_default(),
            };
            let path = dir.join(name);
            tokio::fs::create_dir_all(dir)
                .await
                .and(tokio::fs::write(&path, text).await)
                .map_err(|source| HostError::ArtifactFile { path, source })?;
        }
        Ok(())
    }

    async fn stage_finished(&self, report: &StageReport) {
        tracing::info!(
            job_id = %self.run.job.id,
            step = report.step,
            stage = %report.stage,
            event = %report.event,
            original_event = %report.original_event,
            iteration = report.iteration,
            reason = %report.reason,
            next = %report.next,
            "workflow stage"
        );
        self.run
            .scope
            .sink
            .emit(Event::StageEnd {
                step: report.step,
                stage: report.stage.clone(),
                kind: report.kind.to_string(),
                event: report.event.clone(),
                original_event: report.original_event.clone(),
                next: report.next.clone(),
                iteration: report.iteration,
                reason: report.reason.clone(),
                ran: report.ran,
                started_at: humantime::format_rfc3339_millis(report.started_at).to_string(),
                duration_ms: report.duration.as_millis() as u64,
            })
            .await;
    }
}

/// Runs (or resumes from its last checkpoint) a workflow job; the queue
/// decides what the returned outcome means for the job.
pub(super) async fn run(run: WorkflowJob<'_>, workflow: &Workflow) -> Outcome {
    if let Some(refused) = commands_refused(&run, workflow) {
        return refused;
    }
    let mut host = Host {
        run: &run,
        checkpoints: run.scope.journal.named(CHECKPOINTS_SCOPE),
        artifacts: run.scope.journal.named(ARTIFACTS_SCOPE),
        artifacts_dir: None,
    };
    let resumed: Option<Checkpoint> = match host.checkpoints.latest_value("checkpoint") {
        Ok(c) => c,
        Err(e) => {
            return Outcome::Failed {
                error: format!("job {}: {e}", run.job.id),
                retryable: false,
            };
        }
    };
    let mut data = Map::new();
    data.insert("input".into(), Value::String(run.job.input.clone()));
    data.extend(run.job.variables.clone());
    // Command gates run and marker files are read here: the spec's
    // `working_dir` (a template over the workflow's own `data`), relative to
    // the bundle directory. Job variables never decide where gates run or
    // files are written: the bundle does.
    let base = &run.loaded.bundle.dir;
    let own_data = &workflow.spec.data;
    let dirs = workflow
        .working_dir(base, own_data)
        .and_then(|work| Ok((work, workflow.artifacts_dir(base, own_data)?)));
    let work_dir = match dirs {
        Ok((dir, artifacts_dir)) => {
            host.artifacts_dir = artifacts_dir;
            dir
        }
        Err(e) => {
            return Outcome::Failed {
                error: format!("job {}: workflow {:?}: {e}", run.job.id, run.loaded.name()),
                retryable: false,
            };
        }
    };
    let engine = Engine::new(workflow, &host, &work_dir);
    let (stage, iteration) = resumed.as_ref().map_or_else(
        || (engine.initial(&data, run.only).stage, 1),
        |c| (c.stage.clone(), c.iteration),
    );
    run.scope
        .sink
        .emit(Event::WorkflowStart {
            workflow: run.loaded.name().to_string(),
            stage,
            iteration,
            resumed: resumed.is_some(),
        })
        .await;
    let result = tokio::select! {
        r = async {
            match resumed {
                Some(checkpoint) => engine.resume(checkpoint).await,
                None => match run.only {
                    Some(stage) => engine.start_only(&data, stage).await,
                    None => engine.start(&data).await,
                },
            }
        } => r,
        _ = run.scope.cancel.cancelled() => {
            return Outcome::Failed { error: "cancelled by request".into(), retryable: false };
        }
    };
    outcome(&run, result).await
}

/// The job outcome of a workflow run, after its `WorkflowEnd` event.
async fn outcome(
    run: &WorkflowJob<'_>,
    result: Result<crate::workflow::Outcome, EngineError>,
) -> Outcome {
    let ended = match result {
        Ok(ended) => ended,
        // An unknown outcome inside a stage parks the whole job.
        Err(EngineError::Agent { source, .. }) if source.ends_job() => {
            return source.into();
        }
        Err(e) => {
            // Storage and agent failures end this attempt; the next one
            // resumes from the last checkpoint. A checkpoint this workflow
            // cannot read never will be.
            let retryable = matches!(
                e,
                EngineError::Checkpoint { .. }
                    | EngineError::Agent { .. }
                    | EngineError::Artifact { .. }
            );
            return Outcome::Failed {
                error: format!("job {}: workflow {:?}: {e}", run.job.id, run.loaded.name()),
                retryable,
            };
        }
    };
    let checkpoint = &ended.checkpoint;
    let fatal = ended.fatal();
    run.scope
        .sink
        .emit(Event::WorkflowEnd {
            outcome: if fatal.is_some() { "fatal" } else { "finish" }.into(),
            stage: checkpoint.stage.clone(),
            iteration: checkpoint.iteration,
            reason: fatal.map(|f| f.reason.clone()).unwrap_or_default(),
        })
        .await;
    match fatal {
        Some(report) => Outcome::Failed {
            error: format!(
                "job {}: workflow {:?} ended fatal at stage {:?} (iteration {}): {}",
                run.job.id,
                run.loaded.name(),
                report.stage,
                report.iteration,
                report.reason
            ),
            retryable: false,
        },
        None => Outcome::Succeeded(json!({
            "workflow": run.loaded.name(),
            "outcome": "finish",
            "steps": checkpoint.step,
            "iteration": checkpoint.iteration,
            "history": checkpoint.history,
            "data": checkpoint.data,
            "pr_url": checkpoint.kinds.git.pr_url,
            "pr_number": checkpoint.kinds.git.pr_number,
            "bundle_version": run.loaded.version(),
        })),
    }
}

/// A job whose tools with side effects must not really run (stand-ins
/// answer them: an eval's case) does not start a workflow that runs
/// commands, which no stand-in answers.
fn commands_refused(run: &WorkflowJob<'_>, workflow: &Workflow) -> Option<Outcome> {
    run.job.controls.stand_ins.as_ref()?;
    let commands = workflow.spec.command_stages();
    (!commands.is_empty()).then(|| Outcome::Failed {
        error: format!(
            "job {}: workflow {:?} runs commands (stages {}), and stand-ins answer only tools: this job's side effects must not really run (an eval's case), so it did not start; run the eval with the real tools (`--real-tools`, `\"real_tools\": true`) to run them",
            run.job.id,
            run.loaded.name(),
            commands.join(", ")
        ),
        retryable: false,
    })
}
