//! The engine loop: a state machine over `(stage, event)` that runs one
//! stage per step through a `WorkflowHost`, counts steps, attempts,
//! iterations and streaks, feeds a failed gate's retry context to the next
//! agent stage once, writes artifacts, and checkpoints before every
//! dispatch so a new attempt resumes exactly where the last one stopped.
//!
//! It knows nothing of HTTP, the queue or OpenTelemetry: agents run,
//! checkpoints and artifacts are stored, and stage reports are observed
//! through the host. Command gates run here (see `gates`). Stage kinds
//! beyond the core (the git kinds' commit base, PR and CI failure) are
//! reached only through `kind`, at dispatch and when a result is applied.

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use serde_json::{Map, Value, json};

use super::checkpoint::{
    CHECKPOINT_FORMAT, Checkpoint, FatalReport, StageRecord, StageReport, WorkflowStatus, now,
};
use super::compile::{ERROR_EVENT, RenderError, Workflow};
use super::host::{EngineError, WorkflowHost};
use super::kind::KindEffect;
use super::one_stage::NotPassing;
use super::spec::{CapAction, FATAL, FINISH, StageSpec};

/// The name of the fatal report artifact.
pub const FATAL_ARTIFACT: &str = "fatal-report.json";

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
    /// What the gate's report tells a family of stage kinds (a PR made,
    /// a CI failure for the next agent stage instead of the retry context).
    pub effect: Option<KindEffect>,
}

impl StageResult {
    pub(crate) fn event(event: &str, reason: impl Into<String>) -> Self {
        Self {
            event: event.to_string(),
            reason: reason.into(),
            gate: None,
            score: None,
            fatal: None,
            effect: None,
        }
    }

    pub(crate) fn fatal(reason: impl Into<String>) -> Self {
        let reason = reason.into();
        Self {
            fatal: Some(reason.clone()),
            ..Self::event(ERROR_EVENT, reason)
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

    /// The checkpoint of a new run: the spec's data with `overrides` on
    /// top; with `only`, a one-stage run that starts at that stage (see
    /// `one_stage`).
    pub fn initial(&self, overrides: &Map<String, Value>, only: Option<&str>) -> Checkpoint {
        let mut data = self.workflow.spec.data.clone();
        data.extend(overrides.iter().map(|(k, v)| (k.clone(), v.clone())));
        let start = only.unwrap_or(&self.workflow.spec.start);
        let mut checkpoint = Checkpoint::new(&self.workflow.version, start, data);
        checkpoint.only_stage = only.map(String::from);
        checkpoint
    }

    /// Runs a new workflow from its start stage.
    pub async fn start(&self, overrides: &Map<String, Value>) -> Result<Outcome, EngineError> {
        self.run(self.initial(overrides, None)).await
    }

    /// Runs stage `stage` alone: it starts there and ends after it.
    pub async fn start_only(
        &self,
        overrides: &Map<String, Value>,
        stage: &str,
    ) -> Result<Outcome, EngineError> {
        self.run(self.initial(overrides, Some(stage))).await
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
        // Each step's futures are boxed: nested in place they make one
        // frame deep enough to overflow a runtime thread's stack in an
        // unoptimized build.
        loop {
            if cp.stage == FINISH {
                cp.status = WorkflowStatus::Finished;
                return self.finish(cp).await;
            }
            if !cp.dispatched {
                if let Some(done) = Box::pin(self.count(&mut cp)).await? {
                    return Ok(done);
                }
                if !cp.dispatched {
                    continue; // passed through by its attempt cap
                }
            }
            self.save(&mut cp).await?;
            let started_at = SystemTime::now();
            let clock = Instant::now();
            let result = Box::pin(self.run_stage(&cp)).await?;
            let applied = Box::pin(self.apply(&mut cp, result, true, started_at, clock));
            if let Some(done) = applied.await? {
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
            return self.dispatch(cp).await;
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

    /// Lets the families of stage kinds record what they need with the
    /// dispatch (stored before the stage runs): `Some` (fatal) when one
    /// cannot (a commit step outside a git work tree).
    async fn dispatch(&self, cp: &mut Checkpoint) -> Result<Option<Outcome>, EngineError> {
        let spec = self.workflow.spec.stages.get(&cp.stage);
        match cp.kinds.dispatch(&cp.stage, spec, &self.work_dir).await {
            Ok(()) => Ok(None),
            Err(e) => self.fatal(cp, None, e.reason, e.details).await.map(Some),
        }
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
            // Delivered once: the run that received them has finished.
            cp.retry_context = None;
            cp.kinds.delivered();
        }
        let ended = self.account(cp, &stage, &result);
        if let Some(effect) = &result.effect {
            cp.kinds.record(effect);
        }
        // A one-stage run ends after its stage.
        let only = cp.only_stage.is_some().then(|| {
            super::one_stage::verdict(self.workflow, &stage, &result.event, &result.reason)
        });
        let next = self.next_stage(&stage, &result, ended.is_some(), only.as_ref());
        let duration = clock.elapsed();
        let original_event = self.workflow.original_event(&stage, &result.event);
        cp.history.push(StageRecord {
            step: cp.step,
            stage: stage.clone(),
            event: result.event.clone(),
            original_event: original_event.clone(),
            iteration,
            reason: result.reason.clone(),
            next: next.clone(),
            duration_ms: duration.as_millis() as u64,
        });
        self.host
            .stage_finished(&StageReport {
                step: cp.step,
                stage: stage.clone(),
                kind: self.kind(&stage),
                event: result.event.clone(),
                original_event,
                iteration,
                reason: result.reason.clone(),
                next: next.clone(),
                ran,
                started_at,
                duration,
            })
            .await;
        self.conclude(cp, &stage, result, ended, only).await
    }

    /// Moves on after a recorded stage run: fatal when a limit (`ended`) or
    /// the stage ended the workflow, the end of a one-stage run by its
    /// `verdict`, else the transition the table names (none: fatal).
    async fn conclude(
        &self,
        cp: &mut Checkpoint,
        stage: &str,
        result: StageResult,
        ended: Option<String>,
        verdict: Option<Result<(), NotPassing>>,
    ) -> Result<Option<Outcome>, EngineError> {
        let event = Some(result.event.clone());
        let details = json!({"reason": result.reason});
        if let Some(reason) = ended.or(result.fatal) {
            return self.fatal(cp, event, reason, details).await.map(Some);
        }
        if let Some(verdict) = verdict {
            return self.end_one_stage(cp, verdict, event, details).await;
        }
        match self.workflow.next(stage, &result.event) {
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

    /// Where a stage's result leads: `fatal` when a limit or the stage
    /// ended the workflow, else the transition's target; in a one-stage
    /// run, `finish` or `fatal` by its `verdict`.
    fn next_stage(
        &self,
        stage: &str,
        result: &StageResult,
        ended: bool,
        verdict: Option<&Result<(), NotPassing>>,
    ) -> String {
        match verdict {
            _ if ended || result.fatal.is_some() => FATAL,
            Some(Ok(())) => FINISH,
            Some(Err(_)) => FATAL,
            None => self.workflow.next(stage, &result.event).unwrap_or(FATAL),
        }
        .to_string()
    }

    /// Ends a one-stage run after its stage: `finish` on a passing
    /// `verdict`, else `fatal` with its reason.
    async fn end_one_stage(
        &self,
        cp: &mut Checkpoint,
        verdict: Result<(), NotPassing>,
        event: Option<String>,
        details: Value,
    ) -> Result<Option<Outcome>, EngineError> {
        match verdict {
            Ok(()) => {
                cp.stage = FINISH.to_string();
                cp.dispatched = false;
                Ok(None)
            }
            Err(why) => {
                let reason = why.to_string();
                self.fatal(cp, event, reason, details).await.map(Some)
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
        // A family that carries the failure in a variable of its own (the
        // `ci` gate's `ci_failure`) records it with the effect.
        if !result
            .effect
            .as_ref()
            .is_some_and(KindEffect::replaces_retry_context)
        {
            cp.retry_context = Some(retry.clone());
        }
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

    /// Stamps and stores the checkpoint through the host.
    async fn save(&self, cp: &mut Checkpoint) -> Result<(), EngineError> {
        cp.timestamp = now();
        self.host
            .checkpoint(cp)
            .await
            .map_err(|source| EngineError::Checkpoint {
                stage: cp.stage.clone(),
                step: cp.step,
                source,
            })
    }

    async fn finish(&self, mut cp: Checkpoint) -> Result<Outcome, EngineError> {
        cp.dispatched = false;
        self.save(&mut cp).await?;
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
        let original_event = event
            .as_deref()
            .map(|e| self.workflow.original_event(&cp.stage, e));
        let report = FatalReport {
            stage: cp.stage.clone(),
            event,
            original_event,
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
            .map_err(|source| EngineError::Artifact {
                stage: stage.to_string(),
                name: name.to_string(),
                source,
            })
    }
}

impl Workflow {
    /// The working directory: the spec's `working_dir` (rendered with the
    /// data) under `base`, or `base` itself.
    pub fn working_dir(
        &self,
        base: &Path,
        data: &Map<String, Value>,
    ) -> Result<PathBuf, RenderError> {
        match &self.spec.working_dir {
            None => Ok(base.to_path_buf()),
            Some(_) => self
                .render("workflow.working_dir", data)
                .map(|dir| base.join(dir)),
        }
    }

    /// The directory artifacts are also written to (`artifacts_dir`,
    /// rendered with the data, under `base`), if any.
    pub fn artifacts_dir(
        &self,
        base: &Path,
        data: &Map<String, Value>,
    ) -> Result<Option<PathBuf>, RenderError> {
        self.spec
            .artifacts_dir
            .as_ref()
            .map(|_| {
                self.render("workflow.artifacts_dir", data)
                    .map(|dir| base.join(dir))
            })
            .transpose()
    }
}
