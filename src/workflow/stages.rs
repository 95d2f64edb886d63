//! Running one stage of each kind for the engine: rendering its prompt,
//! calling the host's agent, running its gate, mapping the result to an
//! event and writing the stage's artifacts. What the families of stage
//! kinds add to an agent stage (the git kinds' `files` and commit step)
//! comes through `kind`.

use serde_json::{Map, Value};

use super::checkpoint::Checkpoint;
use super::compile::RenderError;
use super::engine::{Engine, StageResult};
use super::gate::{GateContext, GateReport};
use super::gates::run_gate;
use super::host::{AgentOutput, EngineError};
use super::kind::{AgentStep, GitError, KindEffect, agent_files};
use super::review::{Review, parse_review};
use super::spec::{AgentGate, AgentStage, ResultRule, StageSpec};

/// The template variables of a stage run.
pub(crate) fn vars(cp: &Checkpoint) -> Map<String, Value> {
    let mut vars = cp.data.clone();
    vars.insert("iteration".into(), cp.iteration.into());
    vars.insert("step".into(), cp.step.into());
    vars.insert("stage".into(), cp.stage.clone().into());
    vars.insert("retry_context".into(), cp.retry_context.clone().into());
    cp.kinds.vars(&mut vars);
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
                    Err(e) => return Ok(StageResult::fatal(e.to_string())),
                };
                let key = format!("s{}-{stage}", cp.step);
                let review = match self
                    .host
                    .run_agent(&key, score.bundle.as_deref(), prompt)
                    .await
                {
                    Ok(out) => parse_review(&out.text, &score.thresholds),
                    // Not a failed review: the job waits for an operator.
                    Err(source) if source.ends_job() => {
                        return Err(EngineError::Agent {
                            stage: stage.to_string(),
                            source,
                        });
                    }
                    Err(e) => Review::reviewer_error(&e.to_string()),
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
        if report.fatal {
            return Ok(StageResult::fatal(first_line(&report.traceback)));
        }
        let reason = if report.pass {
            "gate passed".to_string()
        } else {
            first_line(&report.traceback)
        };
        let mut result = StageResult::event(&report.event, reason);
        result.gate = Some((report.pass, report.retry_context()));
        result.effect = KindEffect::of(&report);
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
        let prompt = match self.agent_prompt(agent, at, vars).await {
            Ok(p) => p,
            Err(e) => return Ok(StageResult::fatal(e.to_string())),
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
            .map_err(|source| EngineError::Agent {
                stage: stage.to_string(),
                source,
            })?;
        let event = match self.result_event(&agent.result, at, vars, &output) {
            Ok(event) => event,
            Err(e) => return Ok(StageResult::fatal(e.to_string())),
        };
        let step = AgentStep {
            workflow: self.workflow,
            work_dir: &self.work_dir,
            at,
            stage,
            iteration: cp.iteration,
            vars,
            done: agent.result.events.first() == Some(&event),
        };
        if let Some(done) = cp.kinds.after_agent(agent, &step).await {
            if let Some(report) = &done.report {
                let name = format!("{prefix}-commit-iter-{}.json", cp.iteration);
                self.store(stage, &name, report).await?;
            }
            if let Some(reason) = done.fatal {
                return Ok(StageResult::fatal(reason));
            }
        }
        match agent.gate.as_ref().filter(|g| g.after == event) {
            Some(gate) => self.agent_gate(cp, gate, at, vars, event).await,
            None => Ok(StageResult::event(&event, "agent result")),
        }
    }

    /// The agent's prompt, rendered with the stage's variables and, for a
    /// stage with `max_files`, the files of the last commit (`Err`: why the
    /// workflow ends fatal).
    async fn agent_prompt(
        &self,
        agent: &AgentStage,
        at: &str,
        vars: &Map<String, Value>,
    ) -> Result<String, AgentStageFault> {
        let mut prompt_vars = vars.clone();
        // The job's own `files` (a list: `structured-agents simplify
        // --file`) stand instead of the last commit's.
        let named = vars.get("files").is_some_and(Value::is_array);
        if !named {
            let files = agent_files(agent, &self.work_dir).await.map_err(|source| {
                AgentStageFault::LastCommitFiles {
                    at: at.to_string(),
                    source,
                }
            })?;
            if let Some(files) = files {
                prompt_vars.insert("files".into(), files);
            }
        }
        Ok(self
            .workflow
            .render(&format!("{at}.prompt"), &prompt_vars)?)
    }

    /// The gate an agent stage runs after its agent reported the gate's
    /// `after` event: the stage emits that event when the gate passes, else
    /// the gate's failure event.
    async fn agent_gate(
        &self,
        cp: &Checkpoint,
        gate: &AgentGate,
        at: &str,
        vars: &Map<String, Value>,
        event: String,
    ) -> Result<StageResult, EngineError> {
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
            .gate_result(&cp.stage, &gate.name, cp.iteration, report)
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
    ) -> Result<String, AgentStageFault> {
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
                .ok_or_else(|| AgentStageFault::RegexNotCompiled { at: at.to_string() })?;
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

/// Why an agent stage cannot go on: the workflow ends fatal with this as
/// its reason, naming the stage's key at fault.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AgentStageFault {
    #[error("{at}.max_files: cannot list the files of the last commit: {source}")]
    LastCommitFiles { at: String, source: GitError },
    #[error(transparent)]
    Render(#[from] RenderError),
    /// A bug: the bundle's load compiles every stage's regex.
    #[error("{at}.result.regex: not compiled")]
    RegexNotCompiled { at: String },
}

fn first_line(text: &str) -> String {
    text.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("gate failed")
        .trim()
        .to_string()
}
