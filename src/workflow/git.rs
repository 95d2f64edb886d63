//! The git facts and steps a workflow needs, each one `git` process with a
//! deadline and an output cap (through `run_command`, so in its own process
//! group with a cleared environment): the files of the last commit, the
//! commit at `HEAD`, the remote's default branch, and the commit-report step
//! that stages and commits what an agent stage changed (as `lol impl`'s
//! implementation stage did).

use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::command::{CommandRun, run_command, run_process};

/// How long one git command may take, and how much it may print, in the
/// steps that have no gate settings of their own (the commit step, `HEAD`).
const GIT_TIMEOUT: Duration = Duration::from_secs(60);
const GIT_MAX_OUTPUT: usize = 1024 * 1024;

/// Why a git fact could not be had: which command failed (with its exit
/// status and the tail of its output), or what the remote does not say.
/// The caller says what the fact was for and what to set instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum GitError {
    /// [`CommandRun::describe`]: the command, its status, its output.
    #[error("{0}")]
    Failed(String),
    #[error("the remote {remote:?} does not name a default branch (its HEAD)")]
    NoDefaultBranch { remote: String },
}

fn argv(args: &[&str]) -> Vec<String> {
    std::iter::once("git")
        .chain(args.iter().copied())
        .map(String::from)
        .collect()
}

/// Runs `git args…` in `dir` as (part of) a gate.
pub(crate) async fn git(dir: &Path, args: &[&str], timeout: Duration, cap: usize) -> CommandRun {
    run_command(&argv(args), dir, timeout, cap, &[]).await
}

/// Runs `git args…` in `dir` for the engine's own steps (`HEAD` at
/// dispatch, the commit step), which are no gate.
async fn git_step(dir: &Path, args: &[&str]) -> CommandRun {
    run_process(&argv(args), dir, GIT_TIMEOUT, GIT_MAX_OUTPUT, &[], false).await
}

/// The files the last commit in `dir` changed (all files of a first
/// commit), each git command under `timeout` and `max_output` bytes.
pub(crate) async fn last_commit_files(
    dir: &Path,
    timeout: Duration,
    max_output: usize,
) -> Result<Vec<String>, GitError> {
    let mut run = git(
        dir,
        &["diff", "--name-only", "HEAD~1", "HEAD"],
        timeout,
        max_output,
    )
    .await;
    if !run.success() {
        // HEAD~1 does not exist on a first commit: list what it added.
        let args = [
            "diff-tree",
            "--root",
            "--no-commit-id",
            "--name-only",
            "-r",
            "HEAD",
        ];
        run = git(dir, &args, timeout, max_output).await;
    }
    if !run.success() {
        return Err(GitError::Failed(
            run.describe("git diff --name-only HEAD~1 HEAD"),
        ));
    }
    Ok(lines(&run.stdout))
}

fn lines(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

/// The commit `HEAD` names in `dir`: `None` on a branch with no commit yet;
/// an error when `dir` is not a git work tree.
pub(crate) async fn head(dir: &Path) -> Result<Option<String>, GitError> {
    let inside = git_step(dir, &["rev-parse", "--is-inside-work-tree"]).await;
    if !inside.success() {
        return Err(GitError::Failed(
            inside.describe("git rev-parse --is-inside-work-tree"),
        ));
    }
    let run = git_step(dir, &["rev-parse", "--verify", "--quiet", "HEAD"]).await;
    Ok(run
        .success()
        .then(|| run.stdout.trim().to_string())
        .filter(|sha| !sha.is_empty()))
}

/// The default branch of `remote`, as its `HEAD` names it: the local
/// `refs/remotes/<remote>/HEAD` (a clone has it; no network), else what
/// the remote itself says (`git ls-remote --symref`: works against a local
/// bare remote offline, and is the same connection a push makes).
pub(crate) async fn default_branch(
    dir: &Path,
    remote: &str,
    timeout: Duration,
    cap: usize,
) -> Result<String, GitError> {
    let local = format!("refs/remotes/{remote}/HEAD");
    let run = git(
        dir,
        &["symbolic-ref", "--quiet", "--short", &local],
        timeout,
        cap,
    )
    .await;
    let prefix = format!("{remote}/");
    if let Some(branch) = run
        .success()
        .then(|| run.stdout.trim())
        .and_then(|s| s.strip_prefix(&prefix))
        .filter(|b| !b.is_empty())
    {
        return Ok(branch.to_string());
    }
    let run = git(
        dir,
        &["ls-remote", "--symref", remote, "HEAD"],
        timeout,
        cap,
    )
    .await;
    if !run.success() {
        return Err(GitError::Failed(
            run.describe(&format!("git ls-remote --symref {remote} HEAD")),
        ));
    }
    run.stdout
        .lines()
        .find_map(|l| {
            let target = l.strip_prefix("ref:")?.split_whitespace().next()?;
            target.strip_prefix("refs/heads/").map(String::from)
        })
        .ok_or_else(|| GitError::NoDefaultBranch {
            remote: remote.to_string(),
        })
}

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
