//! Workflows: a bundle that runs staged jobs — agent stages, command gates
//! and review score gates — driven by a transition table over
//! `(stage, event)`, with iteration and streak limits, one-shot retry
//! context, per-iteration artifacts and a checkpoint before every dispatch
//! so a killed run resumes exactly.
//!
//! - `spec`: the raw `workflow:` section of `bundle.yaml` (serde, schemars);
//! - `compile`: validation (all problems, as key path + message) into a
//!   `Workflow` with compiled templates and regexes;
//! - `engine`: the loop, over the `WorkflowHost` trait (`host`: the trait,
//!   what an agent answers, `EngineError`; `stages` runs one stage);
//! - `checkpoint`: the durable state (generic, with one typed section per
//!   family of stage kinds) and the fatal report;
//! - `kind`: the engine's one door to the stage kinds beyond its core:
//!   their checkpoint sections and the hooks the engine calls;
//! - `command`: running one argv command (process group, deadline, output cap);
//! - `gate`: what every gate is given and answers (`GateContext`, `GateReport`);
//! - `gates`: command gates and the built-in `py_compile` gate; the others
//!   are the git kinds';
//! - `git`: the git stage kinds, the original system's steps: the
//!   `pr`, `rebase` and `ci` gates, the commit-report step and `max_files`
//!   of an agent stage, their checkpoint section (`GitState`);
//! - `review`: the review score parser;
//! - `one_stage`: a job that runs one stage alone (`only_stage`).
//!
//! This module must not know about HTTP, the queue or OpenTelemetry: it
//! runs agents, stores checkpoints and artifacts and reports stage runs
//! only through `WorkflowHost`, which the worker implements.

pub mod checkpoint;
pub mod command;
pub mod compile;
pub mod engine;
pub mod gate;
pub mod gates;
mod git;
mod host;
pub mod kind;
pub mod one_stage;
pub mod review;
pub mod spec;
mod stages;

#[cfg(test)]
mod tests;

pub use checkpoint::{Checkpoint, FatalReport, StageRecord, StageReport, WorkflowStatus};
pub use command::run_command;
pub use compile::{RenderError, SpecErrors, SpecProblem, StageInfo, Workflow, validate};
pub use engine::{Engine, FATAL_ARTIFACT, Outcome};
pub use gate::GateReport;
pub use git::GitState;
pub use git::pr_text::valid_pr_title;
pub use host::{AgentOutput, EngineError, HostError, WorkflowHost};
pub use kind::KindState;
pub use one_stage::OnlyStageError;
pub use review::{Review, Scores, Thresholds, parse_review};
pub use spec::{FATAL, FINISH, WorkflowSpec};
