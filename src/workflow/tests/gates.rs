//! Command gates against a throwaway git repository with a local bare
//! remote in a tempdir (real `git` and `python3`, no network).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Map, Value};

use super::compile;
use crate::workflow::gate::{GateContext, GateReport};
use crate::workflow::gates::run_gate;
use crate::workflow::spec::StageSpec;
use crate::workflow::valid_pr_title;

const GATES: &str = r#"
start: parse
data: {issue: 13, tag: feat, title: Workflows}
stages:
  parse: {kind: command, builtin: py_compile}
  slow: {kind: command, argv: [sh, -c, "sleep 30 & echo $! > slow.pid.tmp && mv slow.pid.tmp slow.pid; wait"], timeout: 5s}
  pr:
    kind: command
    builtin: pr
    pr:
      title: "[{{ tag }}][#{{ issue }}] {{ title }}"
      create_command: [sh, -c, "echo \"$0 $1\"", "{{ title }}", "{{ branch }}"]
  pr_body:
    kind: command
    builtin: pr
    pr:
      title: "[{{ tag }}][#{{ issue }}] {{ title }}"
      body: "Adds {{ title }}."
      create_command: [sh, -c, "printf '%s' \"$0\" > ../pr-body.txt; echo https://github.com/o/r/pull/42", "{{ body }}"]
  bad_title:
    kind: command
    builtin: pr
    pr: {title: "{{ title }}", create_command: ["true"]}
  pr_exists:
    kind: command
    builtin: pr
    pr:
      title: "[x][#1] y"
      create_command: [sh, -c, "echo 'a pull request for branch already exists' >&2; exit 1"]
  pr_broken:
    kind: command
    builtin: pr
    pr: {title: "[x][#1] y", create_command: [sh, -c, "echo 'HTTP 401' >&2; exit 1"]}
  pr_file:
    kind: command
    builtin: pr
    pr:
      title: "[{{ tag }}][#{{ issue }}] {{ title }}"
      body: "Template body."
      body_file: .tmp/finalize.txt
      create_command: [sh, -c, "printf '%s' \"$0\" > ../pr-body.txt; echo \"a pull request into $1 already exists: https://github.com/o/r/pull/9\" >&2; exit 1", "{{ body }}", "{{ base }}"]
  rebase: {kind: command, builtin: rebase, rebase: {onto: feature}}
  rebase_default: {kind: command, builtin: rebase}
transitions:
  parse: {pass: finish, fail: finish}
  slow: {pass: finish, fail: finish}
  pr: {pass: finish, fail_fixable: finish, fail_need_rebase: finish}
  pr_body: {pass: finish, fail_fixable: finish, fail_need_rebase: finish}
  bad_title: {pass: finish, fail_fixable: finish, fail_need_rebase: finish}
  pr_exists: {pass: finish, fail_fixable: finish, fail_need_rebase: finish}
  pr_broken: {pass: finish, fail_fixable: finish, fail_need_rebase: finish}
  pr_file: {pass: finish, fail_fixable: finish, fail_need_rebase: finish}
  rebase: {ok: finish, conflict: fatal}
  rebase_default: {ok: finish, conflict: fatal}
"#;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn commit(dir: &Path, files: &[(&str, &str)], message: &str) {
    for (name, content) in files {
        std::fs::write(dir.join(name), content).unwrap();
        git(dir, &["add", name]);
    }
    git(dir, &["commit", "-q", "--allow-empty", "-m", message]);
}

/// A clone `work` of a bare `remote.git`, on branch `feature`; `main` and
/// `feature` exist on the remote.
struct Repo {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    work: PathBuf,
}

impl Repo {
    fn new() -> Self {
        Self::with_base("main")
    }

    /// As `new`, with `base` the remote's default branch.
    fn with_base(base: &str) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        git(&root, &["init", "-q", "--bare", "-b", base, "remote.git"]);
        git(&root, &["clone", "-q", "remote.git", "work"]);
        let work = root.join("work");
        Self::identity(&work);
        commit(&work, &[("README.md", "hello\n")], "init");
        git(
            &work,
            &["push", "-q", "origin", &format!("HEAD:refs/heads/{base}")],
        );
        git(&work, &["checkout", "-q", "-b", "feature"]);
        Self {
            _tmp: tmp,
            root,
            work,
        }
    }

    fn identity(dir: &Path) {
        git(dir, &["config", "user.email", "agent@example.com"]);
        git(dir, &["config", "user.name", "Agent"]);
    }

    /// Another clone that pushes `files` to `branch` (the remote moves).
    fn push_elsewhere(&self, branch: &str, files: &[(&str, &str)]) {
        let other = self.root.join("other");
        if !other.exists() {
            git(&self.root, &["clone", "-q", "remote.git", "other"]);
            Self::identity(&other);
        }
        git(&other, &["fetch", "-q", "origin"]);
        git(
            &other,
            &["checkout", "-q", "-B", branch, &format!("origin/{branch}")],
        );
        commit(&other, files, "elsewhere");
        git(
            &other,
            &["push", "-q", "origin", &format!("HEAD:refs/heads/{branch}")],
        );
    }
}

async fn gate(stage: &str, dir: &Path) -> GateReport {
    let w = compile(GATES);
    let Some(StageSpec::Command(spec)) = w.spec.stages.get(stage) else {
        panic!("{stage}")
    };
    let at = format!("workflow.stages.{stage}");
    let vars: Map<String, Value> = w.spec.data.clone();
    let ctx = GateContext {
        workflow: &w,
        at: &at,
        spec,
        work_dir: dir,
        vars: &vars,
    };
    run_gate(&ctx).await
}

#[tokio::test]
async fn py_compile_checks_the_python_files_of_the_last_commit() {
    let repo = Repo::new();
    let report = gate("parse", &repo.work).await;
    assert!(report.pass, "no Python file changed: {report:?}");
    assert_eq!(report.details["checked_files"], Value::Array(vec![]));

    commit(
        &repo.work,
        &[("good.py", "x = 1\n"), ("notes.txt", "(")],
        "good",
    );
    let report = gate("parse", &repo.work).await;
    assert!(report.pass, "{report:?}");
    assert_eq!(
        report.details["checked_files"],
        serde_json::json!(["good.py"])
    );

    commit(
        &repo.work,
        &[("bad.py", "def f(:\n"), ("ok.py", "y = 2\n")],
        "bad",
    );
    let report = gate("parse", &repo.work).await;
    assert_eq!((report.pass, report.event.as_str()), (false, "fail"));
    assert_eq!(report.failed_files, ["bad.py"]);
    assert!(
        report.traceback.contains("SyntaxError"),
        "{}",
        report.traceback
    );
    assert_eq!(report.suggestions, ["fix the syntax error in bad.py"]);
    assert!(
        !repo.work.join("__pycache__").exists(),
        "bytecode stays out of the repository"
    );
}

#[tokio::test]
async fn py_compile_handles_a_first_commit() {
    let tmp = tempfile::tempdir().unwrap();
    git(tmp.path(), &["init", "-q", "-b", "main"]);
    Repo::identity(tmp.path());
    commit(tmp.path(), &[("bad.py", "if:\n")], "first");
    let report = gate("parse", tmp.path()).await;
    assert_eq!(report.failed_files, ["bad.py"], "{report:?}");
    let body = serde_json::to_value(&report).unwrap();
    for key in ["pass", "failed_files", "traceback", "suggestions"] {
        assert!(body.get(key).is_some(), "{key}");
    }
}

#[tokio::test]
async fn a_command_that_times_out_fails_and_its_group_is_killed() {
    let tmp = tempfile::tempdir().unwrap();
    // `sleep 30` outlives the 5 s timeout: only the timeout can end the gate
    // with "timed out", so no wall-clock bound is needed. The pid file is
    // renamed into place, so it is whole once it exists, and the timeout
    // leaves the shell seconds to write it.
    let report = gate("slow", tmp.path()).await;
    assert_eq!((report.pass, report.event.as_str()), (false, "fail"));
    assert!(
        report.traceback.contains("timed out"),
        "{}",
        report.traceback
    );
    let pid: i32 = std::fs::read_to_string(tmp.path().join("slow.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Up to a minute: a busy machine may be slow to deliver the kill.
    let mut gone = false;
    for _ in 0..3000 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.is_empty() || stat.split_whitespace().nth(2) == Some("Z") {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone, "the gate's grandchild {pid} survived its timeout");
}

#[test]
fn pr_titles_must_read_tag_issue_text() {
    for ok in ["[feat][#13] Workflows", "[fix bug][#1] x"] {
        assert!(valid_pr_title(ok), "{ok}");
    }
    for bad in [
        "Workflows",
        "[feat] Workflows",
        "[feat][13] x",
        "[feat][#13]",
        "[][#1] x",
        "[feat][#13]x",
    ] {
        assert!(!valid_pr_title(bad), "{bad}");
    }
}

#[tokio::test]
async fn the_pr_gate_pushes_and_creates_or_says_what_to_do() {
    let repo = Repo::new();
    // As in `lol impl`, a title no iteration can fix ends the workflow.
    let report = gate("bad_title", &repo.work).await;
    assert_eq!(
        (report.pass, report.fatal, report.event.as_str()),
        (false, true, "fail_fixable")
    );
    assert!(
        report.traceback.contains("[tag][#N] text"),
        "{}",
        report.traceback
    );

    commit(&repo.work, &[("a.py", "a = 1\n")], "work");
    let report = gate("pr", &repo.work).await;
    assert!(report.pass, "{report:?}");
    assert_eq!(report.details["url"], "[feat][#13] Workflows feature");
    assert_eq!(
        git(&repo.root.join("remote.git"), &["rev-parse", "feature"]),
        git(&repo.work, &["rev-parse", "HEAD"])
    );

    // As in `lol impl`: the body closes the title's issue, and the PR's
    // number is read from the URL the create command printed.
    let report = gate("pr_body", &repo.work).await;
    assert!(report.pass, "{report:?}");
    let body = std::fs::read_to_string(repo.work.join("../pr-body.txt")).unwrap();
    assert_eq!(body, "Adds Workflows.\n\nCloses #13");
    assert_eq!(report.details["pr_number"], 42, "{report:?}");

    assert!(
        gate("pr_exists", &repo.work).await.pass,
        "an existing PR is success"
    );
    let report = gate("pr_broken", &repo.work).await;
    assert_eq!(report.event, "fail_fixable");
    assert!(
        report.traceback.contains("HTTP 401"),
        "{}",
        report.traceback
    );
}

#[tokio::test]
async fn a_moved_remote_needs_a_rebase_and_the_rebase_gate_recovers_or_aborts() {
    let repo = Repo::new();
    commit(&repo.work, &[("a.py", "a = 1\n")], "mine");
    assert!(gate("pr", &repo.work).await.pass);
    repo.push_elsewhere("feature", &[("b.py", "b = 1\n")]);
    commit(&repo.work, &[("a.py", "a = 2\n")], "mine again");

    let report = gate("pr", &repo.work).await;
    assert_eq!(report.event, "fail_need_rebase", "{report:?}");
    let report = gate("rebase", &repo.work).await;
    assert_eq!(
        (report.pass, report.event.as_str()),
        (true, "ok"),
        "{report:?}"
    );
    assert!(gate("pr", &repo.work).await.pass, "pushes after the rebase");

    repo.push_elsewhere("feature", &[("a.py", "a = 'theirs'\n")]);
    commit(&repo.work, &[("a.py", "a = 'mine'\n")], "conflicting");
    let head = git(&repo.work, &["rev-parse", "HEAD"]);
    let report = gate("rebase", &repo.work).await;
    assert_eq!(
        (report.pass, report.event.as_str()),
        (false, "conflict"),
        "{report:?}"
    );
    assert_eq!(report.failed_files, ["a.py"]);
    assert!(
        !repo.work.join(".git/rebase-merge").exists(),
        "the rebase was aborted"
    );
    assert_eq!(git(&repo.work, &["rev-parse", "HEAD"]), head);
}

/// As in `lol impl`: the PR body is the agent's finalize file when there is
/// one, the base is the remote's default branch (detected, here `develop`),
/// and a PR that already exists is a pass with its URL and number.
#[tokio::test]
async fn the_pr_body_is_the_finalize_file_and_the_base_the_remotes_default_branch() {
    let repo = Repo::with_base("develop");
    commit(&repo.work, &[("a.py", "a = 1\n")], "work");
    let report = gate("pr_file", &repo.work).await;
    assert!(report.pass, "{report:?}");
    assert_eq!(report.details["base"], "develop", "{report:?}");
    assert_eq!(report.details["pr_url"], "https://github.com/o/r/pull/9");
    assert_eq!(report.details["pr_number"], 9);
    let body = std::fs::read_to_string(repo.root.join("pr-body.txt")).unwrap();
    assert_eq!(body, "Template body.\n\nCloses #13", "no finalize file yet");

    std::fs::create_dir_all(repo.work.join(".tmp")).unwrap();
    let finalize = "[feat][#13] Workflows\n\nAdds them.\nIssue 13 resolved\n";
    std::fs::write(repo.work.join(".tmp/finalize.txt"), finalize).unwrap();
    assert!(gate("pr_file", &repo.work).await.pass);
    let body = std::fs::read_to_string(repo.root.join("pr-body.txt")).unwrap();
    assert_eq!(body, format!("{}\n\nCloses #13", finalize.trim_end()));

    // The rebase gate detects the same base.
    let report = gate("rebase_default", &repo.work).await;
    assert_eq!(report.details["onto"], "origin/develop", "{report:?}");
}
