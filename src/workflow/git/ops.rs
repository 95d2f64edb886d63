//! The git facts the git stage kinds need, each one `git` process with a
//! deadline and an output cap (through `run_command`, so in its own process
//! group with a cleared environment): the files of the last commit, the
//! commit at `HEAD`, the remote's default branch; and the two ways a gate
//! runs git (`GateContext::git`, `GateContext::base`).

use std::path::Path;
use std::time::Duration;

use crate::workflow::command::{CommandRun, run_command, run_process};
use crate::workflow::compile::RenderError;
use crate::workflow::gate::GateContext;

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

/// Why a git gate could not learn a value it needs before it acts (the
/// branch to push, the base branch, the PR body), naming the setting that
/// would give it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GateInputError {
    #[error(transparent)]
    Render(#[from] RenderError),
    #[error(transparent)]
    Git(#[from] GitError),
    #[error("cannot detect the base branch from {remote}'s HEAD: {source}; set `{key}`")]
    NoBase {
        remote: String,
        key: String,
        source: GitError,
    },
    #[error("cannot read the PR body file {}: {source}", path.display())]
    BodyFile {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
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
pub(super) async fn git_step(dir: &Path, args: &[&str]) -> CommandRun {
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

pub(super) fn lines(text: &str) -> Vec<String> {
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

impl GateContext<'_> {
    /// Runs `git args…` in the gate's directory.
    pub(super) async fn git(&self, dir: &Path, args: &[&str]) -> CommandRun {
        git(dir, args, self.timeout(), self.spec.max_output_bytes).await
    }

    /// The branch a PR targets or a rebase goes onto: `set` rendered when
    /// the bundle sets it (at `key`), else the remote's default branch.
    pub(super) async fn base(
        &self,
        dir: &Path,
        key: &str,
        set: Option<&String>,
        remote: &str,
    ) -> Result<String, GateInputError> {
        if set.is_some() {
            return Ok(self.render(key, self.vars)?);
        }
        default_branch(dir, remote, self.timeout(), self.spec.max_output_bytes)
            .await
            .map_err(|source| GateInputError::NoBase {
                remote: remote.to_string(),
                key: key.to_string(),
                source,
            })
    }
}
