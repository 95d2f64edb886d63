//! Validation of a `WorkflowSpec` into the `Workflow` the engine runs:
//! every problem is collected (not just the first) as a key path under
//! `workflow.` plus a message, templates are compiled and regexes built once
//! (`names`: the events' original names).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use minijinja::{Environment, UndefinedBehavior};
use regex::Regex;
use serde_json::{Map, Value};

use super::spec::{
    AgentGate, AgentStage, Builtin, CapAction, CommandStage, FATAL, FINISH, ResultRule, StageSpec,
    WorkflowSpec,
};

mod names;

pub(crate) use names::ERROR_EVENT;

/// One problem in a workflow spec: the key path (e.g.
/// `workflow.transitions.review`) and what is wrong, with a hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecProblem {
    pub path: String,
    pub message: String,
}

impl fmt::Display for SpecProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Everything wrong with a workflow spec.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SpecErrors(pub Vec<SpecProblem>);

impl fmt::Display for SpecErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&lines.join("\n"))
    }
}

/// What the engine needs to know about one stage beyond its spec.
#[derive(Debug, Clone, Default)]
pub struct StageInfo {
    /// Every event the stage can emit.
    pub events: BTreeSet<String>,
    /// The events that count as its gate passing (empty for a plain agent).
    pub pass_events: BTreeSet<String>,
    /// The events that are a failed gate (add an iteration, set the retry context).
    pub fail_events: BTreeSet<String>,
    /// The gate's name for streaks and artifacts, when the stage is or has a gate.
    pub gate: Option<String>,
    /// Each event's original name (`<event_prefix>_<event>`, as `lol impl`
    /// named its stages' events).
    pub original: BTreeMap<String, String>,
}

impl StageInfo {
    /// The event a stage passed through by its attempt cap emits unless the
    /// cap names one: its first passing event, else `pass` when it has one.
    pub fn default_pass_event(&self) -> Option<&str> {
        self.pass_events
            .first()
            .or_else(|| self.events.get("pass"))
            .map(String::as_str)
    }
}

/// A validated workflow: the spec, its version (the digest the integrator
/// passes, e.g. the bundle digest) and compiled templates and regexes.
pub struct Workflow {
    pub spec: WorkflowSpec,
    pub version: String,
    pub(crate) stages: BTreeMap<String, StageInfo>,
    templates: Environment<'static>,
    regexes: HashMap<String, Regex>,
}

impl fmt::Debug for Workflow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Workflow")
            .field("version", &self.version)
            .field("stages", &self.stages.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Checks a spec without keeping the result: every problem, for `validate`.
pub fn validate(spec: &WorkflowSpec) -> Vec<SpecProblem> {
    match Workflow::compile(spec.clone(), "") {
        Ok(_) => Vec::new(),
        Err(SpecErrors(problems)) => problems,
    }
}

impl Workflow {
    /// Validates and compiles `spec`; `version` identifies it in checkpoints.
    pub fn compile(mut spec: WorkflowSpec, version: impl Into<String>) -> Result<Self, SpecErrors> {
        let mut c = Compiler::default();
        c.templates
            .set_undefined_behavior(UndefinedBehavior::Strict);
        let mut stages = BTreeMap::new();
        for (name, stage) in &spec.stages {
            let at = format!("workflow.stages.{name}");
            if name == FINISH || name == FATAL {
                c.problem(
                    &at,
                    format!("`{name}` is a reserved terminal stage; rename the stage"),
                );
            } else if name.is_empty()
                || !name
                    .chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || "-_".contains(ch))
            {
                c.problem(
                    &at,
                    format!("invalid stage name {name:?} (use letters, digits, `-` and `_`)"),
                );
            }
            let mut info = c.stage(name, stage, &at);
            c.original_names(name, stage, &mut info, &at);
            stages.insert(name.clone(), info);
        }
        for (i, stage) in spec.run_alone.iter().enumerate() {
            if !spec.stages.contains_key(stage) {
                c.problem(
                    &format!("workflow.run_alone[{i}]"),
                    format!("unknown stage {stage:?} (stages: {})", names(&stages)),
                );
            }
        }
        if !spec.stages.contains_key(&spec.start) {
            c.problem(
                "workflow.start",
                format!(
                    "unknown stage {:?} (stages: {})",
                    spec.start,
                    names(&stages)
                ),
            );
        }
        for (key, dir) in [
            ("workflow.working_dir", &spec.working_dir),
            ("workflow.artifacts_dir", &spec.artifacts_dir),
        ] {
            if let Some(dir) = dir {
                c.template(key, dir);
            }
        }
        c.canonical_events(&mut spec, &stages);
        c.transitions(&spec, &stages);
        c.limits(&spec, &stages);
        if !c.problems.is_empty() {
            return Err(SpecErrors(c.problems));
        }
        Ok(Self {
            spec,
            version: version.into(),
            stages,
            templates: c.templates,
            regexes: c.regexes,
        })
    }

    /// The stage's events and gate information.
    pub fn stage_info(&self, stage: &str) -> Option<&StageInfo> {
        self.stages.get(stage)
    }

    /// The next stage after `event` at `stage`, if the table has the pair.
    pub fn next(&self, stage: &str, event: &str) -> Option<&str> {
        self.spec
            .transitions
            .get(stage)?
            .get(event)
            .map(String::as_str)
    }

    /// Renders the template compiled under `path` (e.g.
    /// `workflow.stages.implement.prompt`).
    pub(crate) fn render(
        &self,
        path: &str,
        context: &Map<String, Value>,
    ) -> Result<String, RenderError> {
        let failed = |e: minijinja::Error| {
            let undefined = e.kind() == minijinja::ErrorKind::UndefinedError;
            RenderError {
                path: path.to_string(),
                detail: e.to_string(),
                hint: if undefined {
                    " (define it in `workflow.data` or the job's variables)"
                } else {
                    ""
                },
            }
        };
        let template = self.templates.get_template(path).map_err(failed)?;
        let context = minijinja::Value::from(minijinja::value::Serde(context));
        template.render(&context).map_err(failed)
    }

    /// The regex compiled under `path`.
    pub(crate) fn regex(&self, path: &str) -> Option<&Regex> {
        self.regexes.get(path)
    }
}

/// A workflow template that did not render: its key path, why, and what
/// to do when a variable is missing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {detail}{hint}")]
pub struct RenderError {
    pub path: String,
    pub detail: String,
    pub hint: &'static str,
}

fn names(stages: &BTreeMap<String, StageInfo>) -> String {
    let all: Vec<&str> = stages.keys().map(String::as_str).collect();
    all.join(", ")
}

fn list(events: &BTreeSet<String>) -> String {
    let all: Vec<&str> = events.iter().map(String::as_str).collect();
    all.join(", ")
}

#[derive(Default)]
struct Compiler {
    problems: Vec<SpecProblem>,
    templates: Environment<'static>,
    regexes: HashMap<String, Regex>,
}

impl Compiler {
    fn problem(&mut self, path: &str, message: String) {
        self.problems.push(SpecProblem {
            path: path.to_string(),
            message,
        });
    }

    fn template(&mut self, path: &str, source: &str) {
        if let Err(e) = self
            .templates
            .add_template_owned(path.to_string(), source.to_string())
        {
            self.problem(path, format!("invalid template: {e}"));
        }
    }

    fn regex(&mut self, path: &str, pattern: &str) {
        match Regex::new(pattern) {
            Ok(r) => {
                self.regexes.insert(path.to_string(), r);
            }
            Err(e) => self.problem(path, format!("invalid regex {pattern:?}: {e}")),
        }
    }

    /// Checks a stage of any kind; what it can emit and which gate it is.
    fn stage(&mut self, name: &str, stage: &StageSpec, at: &str) -> StageInfo {
        match stage {
            StageSpec::Agent(agent) => self.agent_stage(agent, at),
            StageSpec::Command(command) => {
                let (events, pass_events) = self.command(command, at);
                StageInfo {
                    fail_events: events.difference(&pass_events).cloned().collect(),
                    events,
                    pass_events,
                    gate: Some(name.to_string()),
                    original: BTreeMap::new(),
                }
            }
            StageSpec::Score(score) => {
                self.template(&format!("{at}.prompt"), &score.prompt);
                StageInfo {
                    events: ["pass", "fail"].map(String::from).into(),
                    pass_events: ["pass".to_string()].into(),
                    fail_events: ["fail".to_string()].into(),
                    gate: Some(name.to_string()),
                    original: BTreeMap::new(),
                }
            }
        }
    }

    /// Checks an agent stage: its prompt, its result rule (one method at
    /// most, at least one event) and commit templates, and its gate.
    fn agent_stage(&mut self, agent: &AgentStage, at: &str) -> StageInfo {
        self.template(&format!("{at}.prompt"), &agent.prompt);
        let rule = &agent.result;
        let methods = [
            rule.field.is_some(),
            rule.regex.is_some(),
            rule.marker.is_some(),
        ];
        if methods.iter().filter(|m| **m).count() > 1 {
            self.problem(
                &format!("{at}.result"),
                "give at most one of `field`, `regex` and `marker`".into(),
            );
        }
        if let Some(pattern) = &rule.regex {
            self.regex(&format!("{at}.result.regex"), pattern);
        }
        if let Some(marker) = &rule.marker {
            self.template(&format!("{at}.result.marker.file"), &marker.file);
            self.template(&format!("{at}.result.marker.text"), &marker.text);
        }
        if let Some(commit) = &agent.commit {
            self.template(&format!("{at}.commit.report"), &commit.report);
            if let Some(message) = &commit.message {
                self.template(&format!("{at}.commit.message"), message);
            }
        }
        if rule.events.is_empty() {
            self.problem(
                &format!("{at}.result.events"),
                "must name at least one event".into(),
            );
        }
        let mut info = StageInfo::default();
        info.events.extend(rule.events.iter().cloned());
        info.events.insert(rule.otherwise.clone());
        if let Some(gate) = &agent.gate {
            self.agent_gate(gate, rule, at, &mut info);
        }
        info
    }

    /// Checks an agent stage's gate (run after the result's event `after`)
    /// and adds its events to the stage's.
    fn agent_gate(&mut self, gate: &AgentGate, rule: &ResultRule, at: &str, info: &mut StageInfo) {
        let gate_at = format!("{at}.gate");
        if !rule.events.contains(&gate.after) {
            self.problem(
                &format!("{gate_at}.after"),
                format!(
                    "{:?} is not one of the result's events ({})",
                    gate.after,
                    rule.events.join(", ")
                ),
            );
        }
        self.command(&gate.check, &format!("{gate_at}.check"));
        if gate.check.event_prefix.is_some() {
            self.problem(
                &format!("{gate_at}.check.event_prefix"),
                "applies to stages only: the gate's failure event is named by `on_fail` (default `<name>_fail`)".into(),
            );
        }
        info.events.insert(gate.fail_event());
        info.fail_events.insert(gate.fail_event());
        info.pass_events.insert(gate.after.clone());
        info.gate = Some(gate.name.clone());
    }

    /// Checks a command gate; returns its events and passing events.
    fn command(&mut self, c: &CommandStage, at: &str) -> (BTreeSet<String>, BTreeSet<String>) {
        let strings = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        let (mut events, default_pass) = match c.builtin {
            Some(Builtin::Pr) => (
                strings(&["pass", "fail_fixable", "fail_need_rebase"]),
                strings(&["pass"]),
            ),
            Some(Builtin::Rebase) => (strings(&["ok", "conflict"]), strings(&["ok"])),
            Some(Builtin::PyCompile | Builtin::Ci) => {
                (strings(&["pass", "fail"]), strings(&["pass"]))
            }
            // `pass` unless exit code 0 is mapped to another event; `fail`
            // for other exit codes, a timeout or a command that cannot start.
            None if c.exit_codes.keys().any(|k| k.trim() == "0") => {
                (strings(&["fail"]), strings(&["pass"]))
            }
            None => (strings(&["pass", "fail"]), strings(&["pass"])),
        };
        match (c.builtin, c.argv.is_empty()) {
            (None, true) => self.problem(
                &format!("{at}.argv"),
                "give the command as an argv list, or a `builtin` (py_compile, pr, rebase, ci)"
                    .into(),
            ),
            (Some(_), false) => self.problem(
                &format!("{at}.argv"),
                "give either `argv` or `builtin`, not both".into(),
            ),
            _ => {}
        }
        for (i, arg) in c.argv.iter().enumerate() {
            self.template(&format!("{at}.argv[{i}]"), arg);
        }
        if let Some(dir) = &c.working_dir {
            self.template(&format!("{at}.working_dir"), dir);
        }
        if c.builtin.is_some() && (!c.exit_codes.is_empty() || !c.output.is_empty()) {
            self.problem(
                at,
                "`exit_codes` and `output` apply to `argv` commands only".into(),
            );
        }
        for (code, event) in &c.exit_codes {
            if code.trim().parse::<i32>().is_err() {
                self.problem(
                    &format!("{at}.exit_codes.{code}"),
                    format!("{code:?} is not an exit code (use integers, e.g. `1: fail_fixable`)"),
                );
            }
            events.insert(event.clone());
        }
        for (i, rule) in c.output.iter().enumerate() {
            self.regex(&format!("{at}.output[{i}].regex"), &rule.regex);
            events.insert(rule.event.clone());
        }
        self.pr_settings(c, at);
        self.ci_settings(c, at);
        if c.rebase.is_some() && c.builtin != Some(Builtin::Rebase) {
            self.problem(
                &format!("{at}.rebase"),
                "applies to `builtin: rebase` only".into(),
            );
        }
        if let Some(onto) = c.rebase.as_ref().and_then(|r| r.onto.as_ref()) {
            self.template(&format!("{at}.rebase.onto"), onto);
        }
        let pass = match &c.pass_events {
            Some(list) => list.iter().cloned().collect(),
            None => default_pass,
        };
        for event in pass.difference(&events) {
            self.problem(
                &format!("{at}.pass_events"),
                format!("{event:?} is not an event of this gate ({})", list(&events)),
            );
        }
        (events, pass)
    }

    /// The `ci` gate's command (its default when `ci` is unset, so that the
    /// default's templates are compiled too).
    fn ci_settings(&mut self, c: &CommandStage, at: &str) {
        if c.builtin != Some(Builtin::Ci) {
            if c.ci.is_some() {
                self.problem(&format!("{at}.ci"), "applies to `builtin: ci` only".into());
            }
            return;
        }
        let ci = c.ci.clone().unwrap_or_default();
        if ci.command.is_empty() {
            self.problem(
                &format!("{at}.ci.command"),
                "must not be empty: give the argv that waits for the PR's checks, e.g. [gh, pr, checks, \"{{ pr_number }}\", --watch]".into(),
            );
        }
        for (i, arg) in ci.command.iter().enumerate() {
            self.template(&format!("{at}.ci.command[{i}]"), arg);
        }
    }

    fn pr_settings(&mut self, c: &CommandStage, at: &str) {
        match (c.builtin, &c.pr) {
            (Some(Builtin::Pr), None) => self.problem(
                &format!("{at}.pr"),
                "the `pr` gate needs `pr: {title: …}`".into(),
            ),
            (Some(Builtin::Pr), Some(pr)) => {
                self.template(&format!("{at}.pr.title"), &pr.title);
                self.template(&format!("{at}.pr.body"), &pr.body);
                for (key, value) in [("body_file", &pr.body_file), ("base", &pr.base)] {
                    if let Some(value) = value {
                        self.template(&format!("{at}.pr.{key}"), value);
                    }
                }
                if let Some(branch) = &pr.branch {
                    self.template(&format!("{at}.pr.branch"), branch);
                }
                if pr.create_command.is_empty() {
                    self.problem(
                        &format!("{at}.pr.create_command"),
                        "must not be empty".into(),
                    );
                }
                for (i, arg) in pr.create_command.iter().enumerate() {
                    self.template(&format!("{at}.pr.create_command[{i}]"), arg);
                }
            }
            (_, Some(_)) => {
                self.problem(&format!("{at}.pr"), "applies to `builtin: pr` only".into())
            }
            _ => {}
        }
    }

    fn transitions(&mut self, spec: &WorkflowSpec, stages: &BTreeMap<String, StageInfo>) {
        for (stage, row) in &spec.transitions {
            let at = format!("workflow.transitions.{stage}");
            let Some(info) = stages.get(stage) else {
                self.problem(
                    &at,
                    format!("unknown stage {stage:?} (stages: {})", names(stages)),
                );
                continue;
            };
            for (event, target) in row {
                if !info.events.contains(event) {
                    self.problem(
                        &format!("{at}.{event}"),
                        format!(
                            "unknown event {event:?} for stage {stage:?} (it emits: {})",
                            list(&info.events)
                        ),
                    );
                }
                if target != FINISH && target != FATAL && !stages.contains_key(target) {
                    self.problem(
                        &format!("{at}.{event}"),
                        format!(
                            "unknown target stage {target:?} (stages: {}, or `finish`, `fatal`)",
                            names(stages)
                        ),
                    );
                }
            }
        }
        for (stage, info) in stages {
            let row = spec.transitions.get(stage);
            for event in &info.events {
                if row.is_none_or(|r| !r.contains_key(event)) {
                    self.problem(
                        &format!("workflow.transitions.{stage}"),
                        format!("missing transition: {stage} + {event}"),
                    );
                }
            }
        }
    }

    fn limits(&mut self, spec: &WorkflowSpec, stages: &BTreeMap<String, StageInfo>) {
        let limits = &spec.limits;
        for (key, value) in [
            ("max_steps", limits.max_steps),
            ("max_iterations", limits.max_iterations),
        ] {
            if value == 0 {
                self.problem(
                    &format!("workflow.limits.{key}"),
                    "must be at least 1".into(),
                );
            }
        }
        for (stage, cap) in &limits.attempts {
            let at = format!("workflow.limits.attempts.{stage}");
            let Some(info) = stages.get(stage) else {
                self.problem(
                    &at,
                    format!("unknown stage {stage:?} (stages: {})", names(stages)),
                );
                continue;
            };
            if cap.on_exceed == CapAction::Pass {
                match cap.pass_event.as_deref().or(info.default_pass_event()) {
                    Some(event) if info.events.contains(event) => {}
                    Some(event) => self.problem(&format!("{at}.pass_event"), format!("{event:?} is not an event of stage {stage:?} ({})", list(&info.events))),
                    None => self.problem(&format!("{at}.pass_event"), format!("stage {stage:?} has no passing event: name the event a skipped run emits ({})", list(&info.events))),
                }
            }
        }
        let gates: BTreeSet<&str> = stages.values().filter_map(|i| i.gate.as_deref()).collect();
        for (gate, value) in &limits.failure_streak {
            if !gates.contains(gate.as_str()) {
                let known: Vec<&str> = gates.iter().copied().collect();
                self.problem(
                    &format!("workflow.limits.failure_streak.{gate}"),
                    format!("unknown gate {gate:?} (gates: {})", known.join(", ")),
                );
            } else if *value == 0 {
                self.problem(
                    &format!("workflow.limits.failure_streak.{gate}"),
                    "must be at least 1".into(),
                );
            }
        }
        for (stage, value) in &limits.no_improvement_streak {
            let at = format!("workflow.limits.no_improvement_streak.{stage}");
            if !matches!(spec.stages.get(stage), Some(StageSpec::Score(_))) {
                self.problem(&at, format!("{stage:?} is not a `score` stage"));
            } else if *value == 0 {
                self.problem(&at, "must be at least 1".into());
            }
        }
    }
}
