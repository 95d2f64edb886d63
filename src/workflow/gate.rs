//! One gate run, as every gate sees it: what a gate is given
//! (`GateContext`: the workflow, its spec, the working directory and the
//! template variables) and what it answers (`GateReport`). The gates
//! themselves are in `gates` and, for the git stage kinds (`pr`, `rebase`,
//! `ci`), in `git`; both stand on this file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::compile::{RenderError, Workflow};
use super::spec::CommandStage;

/// A gate's report, written as its artifact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateReport {
    pub pass: bool,
    pub failed_files: Vec<String>,
    pub traceback: String,
    pub suggestions: Vec<String>,
    /// The event the gate emitted.
    pub event: String,
    /// Gate-specific facts (the PR title and URL, the exit code, the `ci`
    /// gate's `ci_failure`…).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub details: Map<String, Value>,
    /// Nothing an agent does can fix it (a PR title template that does not
    /// read `[tag][#N] text`): the workflow ends fatal, as in `lol impl`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fatal: bool,
}

impl GateReport {
    pub(super) fn new(event: &str, pass: bool) -> Self {
        Self {
            pass,
            failed_files: Vec::new(),
            traceback: String::new(),
            suggestions: Vec::new(),
            event: event.to_string(),
            details: Map::new(),
            fatal: false,
        }
    }

    pub(super) fn fail(
        event: &str,
        traceback: impl Into<String>,
        suggestion: impl Into<String>,
    ) -> Self {
        let mut report = Self::new(event, false);
        report.traceback = traceback.into();
        report.suggestions.push(suggestion.into());
        report
    }

    /// The retry context a failed gate hands the next agent stage.
    pub fn retry_context(&self) -> String {
        let mut parts = Vec::new();
        if !self.failed_files.is_empty() {
            parts.push(format!("Failed files: {}", self.failed_files.join(", ")));
        }
        if !self.traceback.trim().is_empty() {
            parts.push(self.traceback.trim().to_string());
        }
        if !self.suggestions.is_empty() {
            parts.push(self.suggestions.join("\n"));
        }
        parts.join("\n\n")
    }
}

/// Where a gate runs and what its templates see.
pub struct GateContext<'a> {
    pub workflow: &'a Workflow,
    /// The key path of the gate's spec (`workflow.stages.parse`), under which its templates are compiled.
    pub at: &'a str,
    pub spec: &'a CommandStage,
    /// The workflow's working directory.
    pub work_dir: &'a Path,
    /// Template variables (workflow data, iteration, step, stage).
    pub vars: &'a Map<String, Value>,
}

impl GateContext<'_> {
    pub(super) fn render(
        &self,
        key: &str,
        vars: &Map<String, Value>,
    ) -> Result<String, RenderError> {
        self.workflow.render(&format!("{}.{key}", self.at), vars)
    }

    pub(super) fn dir(&self) -> Result<PathBuf, RenderError> {
        match &self.spec.working_dir {
            Some(_) => Ok(self.work_dir.join(self.render("working_dir", self.vars)?)),
            None => Ok(self.work_dir.to_path_buf()),
        }
    }

    pub(super) fn timeout(&self) -> Duration {
        self.spec.timeout.into()
    }
}
