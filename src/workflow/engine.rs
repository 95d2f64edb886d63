//! The engine loop: a state machine over `(stage, event)` that runs one
//! stage per step through a `WorkflowHost`, counts steps, attempts,
//! iterations and streaks, feeds a failed gate's retry context to the next
//! agent stage once, writes artifacts, and checkpoints before every
//! dispatch so a new attempt resumes exactly where the last one stopped.
//!
//! It knows nothing of HTTP, the queue or OpenTelemetry: agents run,
//! checkpoints and artifacts are stored, and stage reports are observed
//! through the host. Command gates run here (see `gates`).

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use super::checkpoint::{
    CHECKPOINT_FORMAT, Checkpoint, FatalReport, StageRecord, StageReport, WorkflowStatus, now,
};
use super::compile::Workflow;
use super::gates::{GateContext, GateReport, run_gate};
use super::review::{Review, parse_review};
use super::spec::{AgentStage, CapAction, FATAL, FINISH, ResultRule, StageSpec};

/// The name of the fatal report artifact.
pub const FATAL_ARTIFACT: &str = "fatal-report.json";

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
    ) -> Result<AgentOutput, String>;

    /// Stores the checkpoint durably (with the job's progress, in one
    /// transaction). Called before every dispatch and at the end.
    async fn checkpoint(&self, checkpoint: &Checkpoint) -> Result<(), String>;

    /// Stores an artifact; a later one with the same name replaces it.
    async fn artifact(&self, name: &str, body: &Value) -> Result<(), String>;

    /// Called after each stage run (for logs, spans and metrics).
    fn stage_finished(&self, report: &StageReport);
}

/// Why the engine stopped without reaching `finish` or `fatal`. The job
/// attempt fails; a new attempt resumes from the last stored checkpoint.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
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
        "storing the checkpoint before stage {stage:?} (step {step}) failed: {message}; check the job store, a new attempt resumes from the last checkpoint"
    )]
    Checkpoint {
        stage: String,
        step: u32,
        message: String,
    },
    #[error(
        "stage {stage:?}: the agent run failed: {message}; a new attempt of the job resumes this stage"
    )]
    Agent { stage: String, message: String },
    #[error("stage {stage:?}: storing artifact {name:?} failed: {message}; check the job store")]
    Artifact {
        stage: String,
        name: String,
        message: String,
    },
}

/// How a workflow ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// `finished` or `fatal`.
    pub status: WorkflowStatus,
    /// The final checkpoint (also stored through the host).
    pub checkpoint: Checkpoint,
}

impl Outcome {
    pub fn fatal(&self) -> Option<&FatalReport> {
        self.checkpoint.fatal.as_ref()
    }
}

/// What one stage run produced.
pub(crate) struct StageResult {
    pub event: String,
    pub reason: String,
    /// The gate's verdict, when a gate ran: `(pass, retry context)`.
    pub gate: Option<(bool, String)>,
    /// The overall score of a review.
    pub score: Option<u32>,
    /// A problem no retry can fix (a template that does not render): fatal.
    pub fatal: Option<String>,
}

impl StageResult {
    fn event(event: &str, reason: impl Into<String>) -> Self {
        Self {
            event: event.to_string(),
            reason: reason.into(),
            gate: None,
            score: None,
            fatal: None,
        }
    }

    fn fatal(reason: String) -> Self {
        Self {
            fatal: Some(reason.clone()),
            ..Self::event("error", reason)
        }
    }
}

/// Runs one workflow for one job.
pub struct Engine<'a> {
    pub(crate) workflow: &'a Workflow,
    pub(crate) host: &'a dyn WorkflowHost,
    pub(crate) work_dir: PathBuf,
}

impl<'a> Engine<'a> {
    /// `work_dir` is where command gates run and marker files are read
    /// (resolve the spec's `working_dir` with `Workflow::working_dir`).
    pub fn new(workflow: &'a Workflow, host: &'a dyn WorkflowHost, work_dir: &Path) -> Self {
        Self {
            workflow,
            host,
            work_dir: work_dir.to_path_buf(),
        }
    }

    /// The checkpoint of a new run: the spec's data with `overrides` on top.
    pub fn initial(&self, overrides: &Map<String, Value>) -> Checkpoint {
        let mut data = self.workflow.spec.data.clone();
        data.extend(overrides.iter().map(|(k, v)| (k.clone(), v.clone())));
        Checkpoint::new(&self.workflow.version, &self.workflow.spec.start, data)
    }

    /// Runs a new workflow from its start stage.
    pub async fn start(&self, overrides: &Map<String, Value>) -> Result<Outcome, EngineError> {
        self.run(self.initial(overrides)).await
    }

    /// Resumes from a stored checkpoint. A checkpoint of another workflow
    /// version or format is refused; a finished or fatal one is returned as
    /// it is, without running anything.
    pub async fn resume(&self, checkpoint: Checkpoint) -> Result<Outcome, EngineError> {
        if checkpoint.format != CHECKPOINT_FORMAT {
            return Err(EngineError::Format {
                found: checkpoint.format,
            });
        }
        if checkpoint.version != self.workflow.version {
            return Err(EngineError::VersionMismatch {
                found: checkpoint.version,
                expected: self.workflow.version.clone(),
            });
        }
        if checkpoint.is_terminal() {
            return Ok(Outcome {
                status: checkpoint.status,
                checkpoint,
            });
        }
        if !self.workflow.spec.stages.contains_key(&checkpoint.stage) {
            return Err(EngineError::UnknownStage {
                stage: checkpoint.stage,
            });
        }
        self.run(checkpoint).await
    }

    async fn run(&self, mut cp: Checkpoint) -> Result<Outcome, EngineError> {
        loop {
            if cp.stage == FINISH {
                cp.status = WorkflowStatus::Finished;
                return self.finish(cp).await;
            }
            if !cp.dispatched {
                if let Some(done) = self.count(&mut cp).await? {
                    return Ok(done);
                }
                if !cp.dispatched {
                    continue; // passed through by its attempt cap
                }
            }
            cp.timestamp = now();
            self.host
                .checkpoint(&cp)
                .await
                .map_err(|message| EngineError::Checkpoint {
                    stage: cp.stage.clone(),
                    step: cp.step,
                    message,
                })?;
            let started_at = SystemTime::now();
            let clock = Instant::now();
            let result = self.run_stage(&cp).await?;
            if let Some(done) = self.apply(&mut cp, result, true, started_at, clock).await? {
                return Ok(done);
            }
        }
    }

    /// Counts the step and the stage attempt and applies their limits:
    /// `Some` when the workflow ended; `cp.dispatched` stays false when the
    /// stage was passed through.
    async fn count(&self, cp: &mut Checkpoint) -> Result<Option<Outcome>, EngineError> {
        let limits = &self.workflow.spec.limits;
        let stage = cp.stage.clone();
        cp.step += 1;
        if cp.step > limits.max_steps {
            let details = json!({"max_steps": limits.max_steps});
            return self
                .fatal(cp, None, "max workflow steps exceeded".into(), details)
                .await
                .map(Some);
        }
        let attempt = cp.attempts.entry(stage.clone()).or_insert(0);
        *attempt += 1;
        let attempt = *attempt;
        let Some(cap) = limits.attempts.get(&stage).filter(|c| attempt > c.max) else {
            cp.dispatched = true;
            return Ok(None);
        };
        let details = json!({"attempt": attempt, "max": cap.max});
        if cap.on_exceed == CapAction::Fatal {
            let reason = format!("stage {stage} exceeded its {} attempts", cap.max);
            return self.fatal(cp, None, reason, details).await.map(Some);
        }
        let info = self.workflow.stage_info(&stage);
        let event = cap
            .pass_event
            .clone()
            .or_else(|| info.and_then(|i| i.default_pass_event().map(String::from)))
            .unwrap_or_else(|| "pass".into());
        let reason = format!(
            "attempt {attempt} over the cap of {}: passed through",
            cap.max
        );
        let result = StageResult::event(&event, reason);
        self.apply(cp, result, false, SystemTime::now(), Instant::now())
            .await
    }

    /// Records a stage's result, updates counters and streaks, and moves to
    /// the next stage: `Some` when the workflow ended.
    async fn apply(
        &self,
        cp: &mut Checkpoint,
        result: StageResult,
        ran: bool,
        started_at: SystemTime,
        clock: Instant,
    ) -> Result<Option<Outcome>, EngineError> {
        let stage = cp.stage.clone();
        let iteration = cp.iteration;
        tracing::info!(
            stage = %stage, event = %result.event, iteration, reason = %result.reason,
            "workflow stage finished"
        );
        if ran
            && matches!(
                self.workflow.spec.stages.get(&stage),
                Some(StageSpec::Agent(_))
            )
        {
            // Delivered once: the run that received it has finished.
            cp.retry_context = None;
        }
        let ended = self.account(cp, &stage, &result);
        let next = match (&ended, &result.fatal) {
            (Some(_), _) | (_, Some(_)) => FATAL.to_string(),
            _ => self
                .workflow
                .next(&stage, &result.event)
                .unwrap_or(FATAL)
                .to_string(),
        };
        let duration = clock.elapsed();
        cp.history.push(StageRecord {
            step: cp.step,
            stage: stage.clone(),
            event: result.event.clone(),
            iteration,
            reason: result.reason.clone(),
            next: next.clone(),
            duration_ms: duration.as_millis() as u64,
        });
        self.host.stage_finished(&StageReport {
            step: cp.step,
            stage: stage.clone(),
            kind: self.kind(&stage),
            event: result.event.clone(),
            iteration,
            reason: result.reason.clone(),
            next: next.clone(),
            ran,
            started_at,
            duration,
        });
        let event = Some(result.event.clone());
        let details = json!({"reason": result.reason});
        if let Some(reason) = ended.or(result.fatal) {
            return self.fatal(cp, event, reason, details).await.map(Some);
        }
        match self.workflow.next(&stage, &result.event) {
            None => {
                let reason = format!(
                    "unmapped event {}: no transition for {stage} + {}",
                    result.event, result.event
                );
                self.fatal(cp, event, reason, details).await.map(Some)
            }
            Some(FATAL) => {
                let reason = format!("transition to fatal: {stage} + {}", result.event);
                self.fatal(cp, event, reason, details).await.map(Some)
            }
            Some(target) => {
                cp.stage = target.to_string();
                cp.dispatched = false;
                Ok(None)
            }
        }
    }

    /// Gate accounting: iterations, retry context, failure and
    /// non-improvement streaks. Returns the reason when a limit is fatal.
    fn account(&self, cp: &mut Checkpoint, stage: &str, result: &StageResult) -> Option<String> {
        let limits = &self.workflow.spec.limits;
        let gate = self.workflow.stage_info(stage).and_then(|i| i.gate.clone());
        let (Some(gate), Some((pass, retry))) = (gate, &result.gate) else {
            return None;
        };
        let mut fatal = None;
        if let Some(score) = result.score {
            let streak = match cp.last_scores.get(stage) {
                Some(last) if score <= *last => {
                    cp.no_improvement_streaks.get(stage).map_or(1, |s| s + 1)
                }
                _ => 1,
            };
            cp.no_improvement_streaks.insert(stage.to_string(), streak);
            cp.last_scores.insert(stage.to_string(), score);
            if let Some(cap) = limits.no_improvement_streak.get(stage)
                && !pass
                && streak >= *cap
            {
                fatal = Some(format!(
                    "score of {stage} did not improve for {streak} reviews (cap {cap})"
                ));
            }
        }
        if *pass {
            cp.failure_streaks.insert(gate, 0);
            return fatal;
        }
        cp.iteration += 1;
        cp.retry_context = Some(retry.clone());
        let streak = cp.failure_streaks.entry(gate.clone()).or_insert(0);
        *streak += 1;
        if let Some(cap) = limits.failure_streak.get(&gate)
            && *streak >= *cap
        {
            fatal = fatal.or(Some(format!(
                "gate {gate} failed {streak} times in a row (cap {cap})"
            )));
        }
        if cp.iteration > limits.max_iterations {
            fatal = fatal.or(Some(format!(
                "max iterations exceeded ({})",
                limits.max_iterations
            )));
        }
        fatal
    }

    fn kind(&self, stage: &str) -> &'static str {
        match self.workflow.spec.stages.get(stage) {
            Some(StageSpec::Agent(_)) => "agent",
            Some(StageSpec::Command(_)) => "command",
            Some(StageSpec::Score(_)) => "score",
            None => "unknown",
        }
    }

    async fn finish(&self, mut cp: Checkpoint) -> Result<Outcome, EngineError> {
        cp.dispatched = false;
        cp.timestamp = now();
        self.host
            .checkpoint(&cp)
            .await
            .map_err(|message| EngineError::Checkpoint {
                stage: cp.stage.clone(),
                step: cp.step,
                message,
            })?;
        Ok(Outcome {
            status: cp.status,
            checkpoint: cp,
        })
    }

    async fn fatal(
        &self,
        cp: &mut Checkpoint,
        event: Option<String>,
        reason: String,
        details: Value,
    ) -> Result<Outcome, EngineError> {
        tracing::warn!(stage = %cp.stage, iteration = cp.iteration, reason = %reason, "workflow fatal");
        let report = FatalReport {
            stage: cp.stage.clone(),
            event,
            iteration: cp.iteration,
            reason,
            details,
            timestamp: now(),
        };
        let body = serde_json::to_value(&report).unwrap_or(Value::Null);
        self.store(&cp.stage, FATAL_ARTIFACT, &body).await?;
        cp.fatal = Some(report);
        cp.status = WorkflowStatus::Fatal;
        cp.stage = FATAL.to_string();
        self.finish(cp.clone()).await
    }

    pub(crate) async fn store(
        &self,
        stage: &str,
        name: &str,
        body: &Value,
    ) -> Result<(), EngineError> {
        self.host
            .artifact(name, body)
            .await
            .map_err(|message| EngineError::Artifact {
                stage: stage.to_string(),
                name: name.to_string(),
                message,
            })
    }
}

impl Workflow {
    /// The working directory: the spec's `working_dir` (rendered with the
    /// data) under `base`, or `base` itself.
    pub fn working_dir(&self, base: &Path, data: &Map<String, Value>) -> Result<PathBuf, String> {
        match &self.spec.working_dir {
            None => Ok(base.to_path_buf()),
            Some(template) => {
                let env = minijinja::Environment::new();
                let ctx = minijinja::Value::from(minijinja::value::Serde(data));
                env.render_str(template, ctx)
                    .map(|dir| base.join(dir))
                    .map_err(|e| format!("workflow.working_dir: {e}"))
            }
        }
    }
}

mod stages {
    //! Running one stage of each kind.
    use super::*;

    /// The template variables of a stage run.
    pub(crate) fn vars(cp: &Checkpoint) -> Map<String, Value> {
        let mut vars = cp.data.clone();
        vars.insert("iteration".into(), cp.iteration.into());
        vars.insert("step".into(), cp.step.into());
        vars.insert("stage".into(), cp.stage.clone().into());
        vars.insert("retry_context".into(), cp.retry_context.clone().into());
        vars
    }

    impl Engine<'_> {
        pub(crate) async fn run_stage(&self, cp: &Checkpoint) -> Result<StageResult, EngineError> {
            let stage = cp.stage.as_str();
            let at = format!("workflow.stages.{stage}");
            let vars = vars(cp);
            match self.workflow.spec.stages.get(stage) {
                Some(StageSpec::Agent(agent)) => self.agent_stage(cp, agent, &at, &vars).await,
                Some(StageSpec::Command(command)) => {
                    let prefix = command.artifact.as_deref().unwrap_or(stage);
                    let ctx = GateContext {
                        workflow: self.workflow,
                        at: &at,
                        spec: command,
                        work_dir: &self.work_dir,
                        vars: &vars,
                    };
                    let report = run_gate(&ctx).await;
                    self.gate_result(stage, prefix, cp.iteration, report).await
                }
                Some(StageSpec::Score(score)) => {
                    let prompt = match self.workflow.render(&format!("{at}.prompt"), &vars) {
                        Ok(p) => p,
                        Err(e) => return Ok(StageResult::fatal(e)),
                    };
                    let key = format!("s{}-{stage}", cp.step);
                    let review = match self
                        .host
                        .run_agent(&key, score.bundle.as_deref(), prompt)
                        .await
                    {
                        Ok(out) => parse_review(&out.text, &score.thresholds),
                        Err(e) => Review::reviewer_error(&e),
                    };
                    let prefix = score.artifact.as_deref().unwrap_or(stage);
                    let name = format!("{prefix}-iter-{}.json", cp.iteration);
                    self.store(stage, &name, &review.to_artifact()).await?;
                    let event = if review.pass { "pass" } else { "fail" };
                    let feedback = review.feedback(&score.thresholds);
                    let mut result = StageResult::event(
                        event,
                        format!(
                            "overall {}; {}",
                            review.scores.overall(),
                            feedback.join("; ")
                        ),
                    );
                    result.gate = Some((review.pass, feedback.join("\n")));
                    result.score = Some(review.scores.overall());
                    Ok(result)
                }
                None => Ok(StageResult::fatal(format!("unknown stage {stage}"))),
            }
        }

        async fn gate_result(
            &self,
            stage: &str,
            prefix: &str,
            iteration: u32,
            report: GateReport,
        ) -> Result<StageResult, EngineError> {
            let name = format!("{prefix}-iter-{iteration}.json");
            let body = serde_json::to_value(&report).unwrap_or(Value::Null);
            self.store(stage, &name, &body).await?;
            let reason = if report.pass {
                "gate passed".to_string()
            } else {
                first_line(&report.traceback)
            };
            let mut result = StageResult::event(&report.event, reason);
            result.gate = Some((report.pass, report.retry_context()));
            Ok(result)
        }

        async fn agent_stage(
            &self,
            cp: &Checkpoint,
            agent: &AgentStage,
            at: &str,
            vars: &Map<String, Value>,
        ) -> Result<StageResult, EngineError> {
            let stage = cp.stage.as_str();
            let prompt = match self.workflow.render(&format!("{at}.prompt"), vars) {
                Ok(p) => p,
                Err(e) => return Ok(StageResult::fatal(e)),
            };
            let prefix = agent.artifact.as_deref().unwrap_or(stage);
            self.store(
                stage,
                &format!("{prefix}-input-{}", cp.iteration),
                &Value::String(prompt.clone()),
            )
            .await?;
            let key = format!("s{}-{stage}", cp.step);
            let output = self
                .host
                .run_agent(&key, agent.bundle.as_deref(), prompt)
                .await
                .map_err(|message| EngineError::Agent {
                    stage: stage.to_string(),
                    message,
                })?;
            let event = match self.result_event(&agent.result, at, vars, &output) {
                Ok(event) => event,
                Err(e) => return Ok(StageResult::fatal(e)),
            };
            let Some(gate) = agent.gate.as_ref().filter(|g| g.after == event) else {
                return Ok(StageResult::event(&event, "agent result"));
            };
            let check_at = format!("{at}.gate.check");
            let ctx = GateContext {
                workflow: self.workflow,
                at: &check_at,
                spec: &gate.check,
                work_dir: &self.work_dir,
                vars,
            };
            let report = run_gate(&ctx).await;
            let mut result = self
                .gate_result(stage, &gate.name, cp.iteration, report)
                .await?;
            if !result.gate.as_ref().is_some_and(|(pass, _)| *pass) {
                result.event = gate.fail_event();
            } else {
                result.event = event;
            }
            Ok(result)
        }

        /// Maps an agent's output to an event by the stage's rule.
        fn result_event(
            &self,
            rule: &ResultRule,
            at: &str,
            vars: &Map<String, Value>,
            output: &AgentOutput,
        ) -> Result<String, String> {
            let first = rule
                .events
                .first()
                .cloned()
                .unwrap_or_else(|| rule.otherwise.clone());
            let known = |found: Option<String>| match found {
                Some(e) if rule.events.contains(&e) => e,
                _ => rule.otherwise.clone(),
            };
            if let Some(field) = &rule.field {
                let text = output.final_output.as_deref().unwrap_or(&output.text);
                let value = serde_json::from_str::<Value>(text.trim()).ok();
                let found = value
                    .as_ref()
                    .and_then(|v| v.get(field))
                    .and_then(Value::as_str)
                    .map(String::from);
                return Ok(known(found));
            }
            if rule.regex.is_some() {
                let regex = self
                    .workflow
                    .regex(&format!("{at}.result.regex"))
                    .ok_or_else(|| format!("{at}.result.regex: not compiled"))?;
                let found = regex
                    .captures(&output.text)
                    .and_then(|c| c.name("event").or_else(|| c.get(1)).or_else(|| c.get(0)))
                    .map(|m| m.as_str().to_string());
                return Ok(known(found));
            }
            if rule.marker.is_some() {
                let file = self
                    .workflow
                    .render(&format!("{at}.result.marker.file"), vars)?;
                let text = self
                    .workflow
                    .render(&format!("{at}.result.marker.text"), vars)?;
                let content = std::fs::read_to_string(self.work_dir.join(file)).unwrap_or_default();
                return Ok(if content.contains(&text) {
                    first
                } else {
                    rule.otherwise.clone()
                });
            }
            Ok(first)
        }
    }

    fn first_line(text: &str) -> String {
        text.lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("gate failed")
            .trim()
            .to_string()
    }
}
