//! The commit-report step of an agent stage (as `lol impl`'s
//! implementation stage): after the agent ran, stage what it changed and
//! commit it with the agent's commit report, never twice (`HEAD` at
//! dispatch is in the checkpoint's git section); and what makes it an
//! `ImplError` (completion with nothing changed, or changes and no report).

use std::path::Path;

use serde::Serialize;
use serde_json::{Map, Value};

use super::ops::{GitError, git_step, head, lines};
use crate::workflow::compile::{RenderError, Workflow};
use crate::workflow::spec::CommitSettings;

/// The files staged for the next commit.
async fn staged(dir: &Path) -> Result<Vec<String>, CommitError> {
    let run = git_step(dir, &["diff", "--cached", "--name-only"]).await;
    if !run.success() {
        return Err(CommitError::Git(GitError::Failed(
            run.describe("git diff --cached --name-only"),
        )));
    }
    Ok(lines(&run.stdout))
}

/// What the commit step did: the artifact `<prefix>-commit-iter-N.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct CommitReport {
    /// A commit was made by this step.
    pub committed: bool,
    /// `HEAD` after the step.
    pub head: Option<String>,
    /// `HEAD` when the stage was dispatched.
    pub base: Option<String>,
    /// The files the commit changed.
    pub files: Vec<String>,
    /// The commit message (the agent's commit report).
    pub message: Option<String>,
    /// Why nothing was committed, when nothing was.
    pub note: Option<String>,
}

/// What the commit step is asked to do.
pub(crate) struct CommitRequest<'a> {
    pub dir: &'a Path,
    /// `HEAD` when the stage was dispatched (stored in the checkpoint
    /// before the agent ran): a `HEAD` that moved since is this stage's
    /// commit — made by this step before a crash, or by the agent's tools.
    pub base: Option<&'a str>,
    /// The commit message, when there is one.
    pub message: Option<&'a str>,
    /// Paths (relative to `dir`) never committed: the commit report itself.
    pub exclude: &'a [String],
}

/// Why the commit step could not commit: the workflow ends fatal with it,
/// as `lol impl` raised `ImplError`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CommitError {
    #[error("{0}")]
    Git(#[from] GitError),
    #[error("there are changes to commit but no commit report")]
    NoMessage,
}

/// Stages everything the stage changed (`git add -A`, minus `exclude`) and
/// commits it with `message`. Committing twice is impossible: a step run
/// again after a crash finds nothing staged and `HEAD` past `base`, which
/// is its own commit. `Ok` with `committed: false` and `head == base` means
/// nothing changed.
pub(crate) async fn commit(req: &CommitRequest<'_>) -> Result<CommitReport, CommitError> {
    let run = |args: Vec<String>| async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        git_step(req.dir, &args).await
    };
    let added = run(["add", "-A"].map(String::from).to_vec()).await;
    if !added.success() {
        return Err(CommitError::Git(GitError::Failed(
            added.describe("git add -A"),
        )));
    }
    let mut files = staged(req.dir).await?;
    // The report is unstaged rather than left out by a pathspec, which git
    // refuses for an ignored file (the original's `.tmp/` is ignored).
    let report: Vec<String> = files
        .iter()
        .filter(|f| req.exclude.contains(f))
        .cloned()
        .collect();
    if !report.is_empty() {
        let born = head(req.dir).await.map_err(CommitError::Git)?.is_some();
        let mut unstage: Vec<String> = if born {
            ["reset", "-q", "--"].map(String::from).to_vec()
        } else {
            ["rm", "--cached", "-q", "--"].map(String::from).to_vec()
        };
        unstage.extend(report);
        let unstaged = run(unstage).await;
        if !unstaged.success() {
            return Err(CommitError::Git(GitError::Failed(
                unstaged.describe("git reset -- REPORT"),
            )));
        }
        files = staged(req.dir).await?;
    }
    let mut report = CommitReport {
        committed: false,
        head: None,
        base: req.base.map(String::from),
        files: Vec::new(),
        message: req.message.map(String::from),
        note: None,
    };
    if files.is_empty() {
        report.head = head(req.dir).await.map_err(CommitError::Git)?;
        report.note = Some(if report.head.as_deref() == req.base {
            "nothing changed".into()
        } else {
            "nothing to stage: HEAD moved since the stage started (its commit)".into()
        });
        return Ok(report);
    }
    let Some(message) = req.message else {
        return Err(CommitError::NoMessage);
    };
    let committed = run(["commit", "-q", "-m", message].map(String::from).to_vec()).await;
    if !committed.success() {
        return Err(CommitError::Git(GitError::Failed(
            committed.describe("git commit"),
        )));
    }
    report.committed = true;
    report.files = files;
    report.head = head(req.dir).await.map_err(CommitError::Git)?;
    Ok(report)
}

/// An agent stage whose agent ran, as the steps after it (the commit
/// step) see it: where they run and what their templates see.
// Alike in shape to the worker's `WorkflowJob` (a struct of borrows), by
// shape only: each borrows what its own step reads.
pub(crate) struct AgentStep<'a> {
    pub workflow: &'a Workflow,
    pub work_dir: &'a Path,
    /// The stage's key path (`workflow.stages.implement`), under which its
    /// `commit` templates are compiled.
    pub at: &'a str,
    pub stage: &'a str,
    pub iteration: u32,
    pub vars: &'a Map<String, Value>,
    /// The agent reported completion (the first of its result's events).
    pub done: bool,
}

/// What the commit step did: its report (the stage's
/// `<prefix>-commit-iter-N.json` artifact), and the reason the workflow
/// ends fatal when `lol impl` would have raised `ImplError`.
#[derive(Debug, Default)]
pub(crate) struct CommitOutcome {
    pub report: Option<Value>,
    pub fatal: Option<String>,
}

impl AgentStep<'_> {
    fn impl_error(&self, what: String) -> CommitOutcome {
        CommitOutcome {
            report: None,
            fatal: Some(format!(
                "ImplError: stage {} (iteration {}): {what}",
                self.stage, self.iteration
            )),
        }
    }

    /// The commit message: the agent's report in `report_path`, else the
    /// stage's `commit.message` rendered; `None` when neither says anything.
    fn message(
        &self,
        settings: &CommitSettings,
        report_path: &str,
    ) -> Result<Option<String>, RenderError> {
        if let Ok(text) = std::fs::read_to_string(self.work_dir.join(report_path))
            && !text.trim().is_empty()
        {
            return Ok(Some(text.trim().to_string()));
        }
        if settings.message.is_none() {
            return Ok(None);
        }
        let message = self
            .workflow
            .render(&format!("{}.commit.message", self.at), self.vars)?;
        Ok(Some(message.trim().to_string()).filter(|m| !m.is_empty()))
    }

    /// The commit step: commits what the stage changed since `base` (`HEAD`
    /// when it was dispatched) with the agent's report and says (`fatal`)
    /// when it is an `ImplError`: at completion (`done`), nothing changed or
    /// changes without a report.
    pub(crate) async fn commit(
        &self,
        settings: &CommitSettings,
        base: Option<&str>,
    ) -> CommitOutcome {
        let report_path = match self
            .workflow
            .render(&format!("{}.commit.report", self.at), self.vars)
        {
            Ok(path) => path,
            Err(e) => return self.impl_error(e.to_string()),
        };
        let message = match self.message(settings, &report_path) {
            Ok(message) => message,
            Err(e) => return self.impl_error(e.to_string()),
        };
        // A report outside the work tree cannot be staged anyway (and git
        // refuses a pathspec there).
        let inside = !report_path.starts_with("..") && !Path::new(&report_path).is_absolute();
        let exclude = if inside {
            vec![report_path.clone()]
        } else {
            Vec::new()
        };
        let request = CommitRequest {
            dir: self.work_dir,
            base: base.filter(|b| !b.is_empty()),
            message: message.as_deref(),
            exclude: &exclude,
        };
        let report = match commit(&request).await {
            Ok(report) => report,
            // Not finished yet: the changes wait for a later report, as
            // `lol impl` skipped the commit of an iteration without one.
            Err(CommitError::NoMessage) if !self.done => return CommitOutcome::default(),
            Err(CommitError::NoMessage) => {
                return self.impl_error(format!(
                    "the agent reported completion with uncommitted changes but wrote no commit report to {report_path}: have it write the report there, or give the stage `commit.message`"
                ));
            }
            Err(CommitError::Git(e)) => {
                return self.impl_error(format!("committing the changes failed: {e}"));
            }
        };
        let unchanged = !report.committed && report.head.as_deref() == request.base;
        let mut outcome = CommitOutcome {
            report: Some(serde_json::to_value(&report).unwrap_or(Value::Null)),
            fatal: None,
        };
        if self.done && unchanged && !settings.allow_empty {
            outcome.fatal = self
                .impl_error(format!(
                    "the agent reported completion but changed nothing in {} since the stage started; set `commit.allow_empty: true` on the stage to go on without a commit",
                    self.work_dir.display()
                ))
                .fatal;
        }
        outcome
    }
}
