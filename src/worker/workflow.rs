//! Workflow jobs: the worker's side of [`WorkflowHost`]. Agent stages run
//! the kernel with a journal scope of their own (so a resumed stage replays
//! its completed model and tool steps); checkpoints and artifacts are
//! journal entries, written with the job's held events in one group
//! commit; every stage run becomes a `StageEnd` event (log, metrics, spans).

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::events::{Event, EventSink, ParentRun, RunContext};
use crate::journal::{ARTIFACTS_SCOPE, CHECKPOINTS_SCOPE, RunJournal};
use crate::kernel::Kernel;
use crate::queue::{Job, Outcome};
use crate::registry::{LoadedBundle, Registry};
use crate::workflow::{
    AgentOutput, Checkpoint, Engine, EngineError, StageReport, Workflow, WorkflowHost,
};

/// One attempt of a workflow job.
pub(super) struct WorkflowJob<'a> {
    pub registry: &'a Registry,
    pub loaded: &'a Arc<LoadedBundle>,
    pub job: &'a Job,
    pub sink: &'a EventSink,
    pub journal: &'a RunJournal,
    pub cancel: CancellationToken,
    pub record_messages: bool,
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
    ) -> Result<AgentOutput, String> {
        let run = self.run;
        let loaded = match bundle {
            None => run.loaded.clone(),
            Some(name) => run.registry.resolve(name, None).ok_or_else(|| {
                format!("bundle {name:?} is not loaded; check `structured-agents bundles`")
            })?,
        };
        let messages = loaded
            .bundle
            .prompts
            .render(&prompt, &run.job.variables)
            .map_err(|e| format!("bundle {:?}: {e}", loaded.name()))?;
        let mut config = loaded.bundle.kernel_config();
        config.record_messages = run.record_messages;
        let kernel = Kernel::new(
            config,
            loaded.bundle.model.plugin.clone(),
            loaded.backend.clone(),
            loaded.tools.clone(),
        );
        let sink = run.sink.child(RunContext {
            run_id: format!("{}/{key}", run.job.id),
            bundle: loaded.name().to_string(),
            bundle_version: loaded.version().to_string(),
            parent: Some(ParentRun {
                run_id: run.job.id.to_string(),
                call_id: key.to_string(),
                depth: 1,
            }),
        });
        let journal = run.journal.child(0, key);
        let result = kernel
            .run_journaled(messages, &sink, run.cancel.clone(), &journal)
            .await
            .map_err(|e| e.to_string())?;
        if run.cancel.is_cancelled() {
            return Err("cancelled".into());
        }
        Ok(AgentOutput {
            text: result.final_message.content.unwrap_or_default(),
            final_output: result.final_output,
        })
    }

    async fn checkpoint(&self, checkpoint: &Checkpoint) -> Result<(), String> {
        self.checkpoints
            .record_value(checkpoint.step, "checkpoint", checkpoint)
            .await
            .map_err(|e| e.to_string())?;
        crate::failpoint::hit("after_checkpoint");
        Ok(())
    }

    async fn artifact(&self, name: &str, body: &Value) -> Result<(), String> {
        self.artifacts
            .record_value(0, name, body)
            .await
            .map_err(|e| e.to_string())?;
        if let Some(dir) = &self.artifacts_dir {
            let text = match body {
                Value::String(text) => text.clone(),
                other => serde_json::to_string_pretty(other).unwrap_or_default(),
            };
            let path = dir.join(name);
            tokio::fs::create_dir_all(dir)
                .await
                .and(tokio::fs::write(&path, text).await)
                .map_err(|e| {
                    format!(
                        "cannot write artifact {}: {e} (check workflow.artifacts_dir)",
                        path.display()
                    )
                })?;
        }
        Ok(())
    }

    async fn stage_finished(&self, report: &StageReport) {
        tracing::info!(
            job_id = %self.run.job.id,
            step = report.step,
            stage = %report.stage,
            event = %report.event,
            iteration = report.iteration,
            reason = %report.reason,
            next = %report.next,
            "workflow stage"
        );
        self.run
            .sink
            .emit(Event::StageEnd {
                step: report.step,
                stage: report.stage.clone(),
                kind: report.kind.to_string(),
                event: report.event.clone(),
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
    let mut host = Host {
        run: &run,
        checkpoints: run.journal.named(CHECKPOINTS_SCOPE),
        artifacts: run.journal.named(ARTIFACTS_SCOPE),
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
    // `working_dir` (a template over the workflow's data), relative to the
    // bundle directory.
    let base = &run.loaded.bundle.dir;
    let all_data = match resumed.as_ref() {
        Some(checkpoint) => checkpoint.data.clone(),
        None => {
            let mut all = workflow.spec.data.clone();
            all.extend(data.clone());
            all
        }
    };
    let dirs = workflow
        .working_dir(base, &all_data)
        .and_then(|work| Ok((work, workflow.artifacts_dir(base, &all_data)?)));
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
        || (workflow.spec.start.clone(), 1),
        |c| (c.stage.clone(), c.iteration),
    );
    run.sink
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
                None => engine.start(&data).await,
            }
        } => r,
        _ = run.cancel.cancelled() => {
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
    run.sink
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
            "bundle_version": run.loaded.version(),
        })),
    }
}
