//! The git stage kinds: the original system's (`lol impl`'s) steps that
//! work on a git repository, kept out of the generic engine. They are the
//! built-in `pr`, `rebase` and `ci` gates of a command stage, and an agent
//! stage's `commit` step and `max_files` (the files of the last commit).
//! What they carry between stages is their own section of the checkpoint,
//! [`GitState`] (`HEAD` at dispatch, the PR, the CI failure); the engine
//! reaches all of it through `kind`, never directly.
//!
//! - `ops`: the git facts (one `git` process each, deadline, output cap);
//! - `commit`: the commit-report step;
//! - `pr` (with `pr_text`: the PR's title rule, closing reference, URL and
//!   number), `rebase`, `ci`: the built-in gates.

mod ci;
mod commit;
mod ops;
mod pr;
pub(crate) mod pr_text;
mod rebase;

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::gate::{GateContext, GateReport};
use super::spec::RebaseSettings;

pub(crate) use commit::{AgentStep, CommitOutcome};
pub(crate) use ops::{GitError, head, last_commit_files};

/// The key of a failed `ci` gate's context in its report's `details`.
const CI_FAILURE: &str = "ci_failure";

/// How long listing the last commit's files (`max_files`) may take, and
/// how much `git` may print.
const FILES_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
const FILES_MAX_OUTPUT: usize = 1024 * 1024;

/// The git stage kinds' section of the checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GitState {
    /// `HEAD` of the working directory when a stage with a commit step
    /// was dispatched (`""` before the first commit): what a run of its
    /// commit step again after a crash compares with, so it never commits
    /// twice nor mistakes its own commit for "nothing changed".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_base: Option<String>,
    /// The PR the last passing `pr` gate made or found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pr_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pr_number: Option<u64>,
    /// What the `ci` gate's failing checks tell the next agent stage once
    /// (its `ci_failure` variable; then cleared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci_failure: Option<String>,
}

/// What a git gate's report tells the git section.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum GitEffect {
    /// A passing `pr` gate made or found this PR.
    Pr {
        url: Option<String>,
        number: Option<u64>,
    },
    /// A failed `ci` gate: the PR and its failing checks, for the next
    /// agent stage instead of the retry context.
    CiFailed(String),
}

impl GitState {
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }

    /// The template variables of the section: `ci_failure` always (none
    /// until a `ci` gate failed), `pr_url`/`pr_number` once a `pr` gate
    /// passed (the `ci` gate's templates read them).
    pub(crate) fn vars(&self, vars: &mut Map<String, Value>) {
        vars.insert(CI_FAILURE.into(), self.ci_failure.clone().into());
        if let Some(url) = &self.pr_url {
            vars.insert("pr_url".into(), url.clone().into());
        }
        if let Some(number) = self.pr_number {
            vars.insert("pr_number".into(), number.into());
        }
    }

    pub(crate) fn record(&mut self, effect: &GitEffect) {
        match effect {
            GitEffect::Pr { url, number } => {
                self.pr_url = url.clone();
                self.pr_number = *number;
            }
            GitEffect::CiFailed(context) => self.ci_failure = Some(context.clone()),
        }
    }

    /// An agent stage ran: the CI failure was delivered once.
    pub(crate) fn delivered(&mut self) {
        self.ci_failure = None;
    }

    /// Records `HEAD` before a stage with a commit step runs (`commits`);
    /// `Err` when the working directory is not a git work tree.
    pub(crate) async fn dispatch(
        &mut self,
        commits: bool,
        work_dir: &Path,
    ) -> Result<(), GitError> {
        self.commit_base = None;
        if commits {
            self.commit_base = Some(head(work_dir).await?.unwrap_or_default());
        }
        Ok(())
    }
}

impl GitEffect {
    /// What a gate's report tells the git section, if anything: a passing
    /// `pr` gate's PR, a failed `ci` gate's context.
    pub(crate) fn of(report: &GateReport) -> Option<Self> {
        let details = &report.details;
        if report.pass && details.contains_key("pr_url") {
            return Some(Self::Pr {
                url: details["pr_url"].as_str().map(String::from),
                number: details.get("pr_number").and_then(Value::as_u64),
            });
        }
        let context = details.get(CI_FAILURE).and_then(Value::as_str);
        context
            .filter(|_| !report.pass)
            .map(|c| Self::CiFailed(c.to_string()))
    }
}

/// The files the last commit changed, at most `max`: an agent stage's
/// `files` variable when it sets `max_files`.
pub(crate) async fn last_files(work_dir: &Path, max: usize) -> Result<Vec<String>, GitError> {
    let mut files = last_commit_files(work_dir, FILES_TIMEOUT, FILES_MAX_OUTPUT).await?;
    files.truncate(max);
    Ok(files)
}

/// The built-in `pr` gate (its `pr` settings are required).
pub(crate) async fn pr_gate(ctx: &GateContext<'_>, dir: &Path) -> GateReport {
    match &ctx.spec.pr {
        Some(settings) => pr::pr_gate(ctx, settings, dir).await,
        None => GateReport::fail(
            "fail_fixable",
            "the pr gate has no `pr` settings",
            "add `pr: {title: …}`",
        ),
    }
}

/// The built-in `rebase` gate (default: onto `origin`'s default branch).
pub(crate) async fn rebase_gate(ctx: &GateContext<'_>, dir: &Path) -> GateReport {
    let defaults = RebaseSettings {
        remote: "origin".into(),
        onto: None,
    };
    let settings = ctx.spec.rebase.as_ref().unwrap_or(&defaults);
    rebase::rebase_gate(ctx, settings, dir).await
}

pub(crate) use ci::ci_gate;
