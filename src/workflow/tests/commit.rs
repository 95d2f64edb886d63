//! The commit-report step of an agent stage against a real git repository:
//! it commits what the stage changed with the agent's report (never the
//! report itself), never twice when the stage runs again after a crash, and
//! ends the workflow with `ImplError` where `lol impl` raised it.

use std::path::Path;
use std::process::Command;

use serde_json::Map;

use super::compile;
use super::host::{FakeHost, Reply};
use crate::workflow::{Engine, Outcome, WorkflowStatus};

const FLOW: &str = r#"
start: implement
data: {issue: 13}
stages:
  implement:
    kind: agent
    artifact: impl
    prompt: "Implement {{ issue }} #{{ iteration }}"
    result: {regex: 'STATUS: (\w+)', events: [done], otherwise: not_done}
    commit: {}
transitions:
  implement: {not_done: implement, done: finish}
limits: {max_steps: 3}
"#;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A repository with one commit and the agent's `.tmp/` directory (not
/// ignored: the step itself keeps the report out of the commit).
fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    git(dir.path(), &["init", "-q", "-b", "main"]);
    git(dir.path(), &["config", "user.name", "Agent"]);
    git(dir.path(), &["config", "user.email", "agent@example.com"]);
    std::fs::write(dir.path().join("README.md"), "hi\n").unwrap();
    git(dir.path(), &["add", "README.md"]);
    git(dir.path(), &["commit", "-q", "-m", "init"]);
    std::fs::create_dir(dir.path().join(".tmp")).unwrap();
    dir
}

fn reply(text: &str, files: Vec<(&'static str, Option<&'static str>)>) -> Reply {
    Reply {
        result: Ok(text.into()),
        files,
    }
}

fn reason(outcome: &Outcome) -> String {
    outcome
        .fatal()
        .map(|f| f.reason.clone())
        .unwrap_or_default()
}

fn commits(dir: &Path) -> usize {
    git(dir, &["rev-list", "--count", "HEAD"]).parse().unwrap()
}

#[tokio::test]
async fn the_stage_commits_its_changes_with_the_report_once() {
    let dir = repo();
    let w = compile(FLOW);
    let writes = || {
        vec![
            ("a.py", Some("a = 1\n")),
            (
                ".tmp/commit-report-iter-1.txt",
                Some("Add a\n\nThe body.\n"),
            ),
        ]
    };
    let host = FakeHost::new(dir.path()).script("implement", vec![reply("STATUS: done", writes())]);
    let outcome = Engine::new(&w, &host, dir.path())
        .start(&Map::new())
        .await
        .unwrap();
    assert_eq!(
        outcome.status,
        WorkflowStatus::Finished,
        "{}",
        reason(&outcome)
    );
    assert_eq!(commits(dir.path()), 2);
    assert_eq!(
        git(dir.path(), &["log", "-1", "--format=%B"]),
        "Add a\n\nThe body."
    );
    assert_eq!(
        git(dir.path(), &["show", "--name-only", "--format=", "HEAD"]),
        "a.py",
        "the report is not committed"
    );
    let artifact = host.artifact("impl-commit-iter-1.json").unwrap();
    assert_eq!(artifact["committed"], true, "{artifact}");
    assert_eq!(artifact["files"], serde_json::json!(["a.py"]));

    // A crash after the commit: the stage runs again from the checkpoint
    // stored at its dispatch (its agent replays the same writes).
    let dispatched = host.checkpoints.lock().unwrap()[0].clone();
    assert!(dispatched.dispatched && dispatched.kinds.git.commit_base.is_some());
    let again =
        FakeHost::new(dir.path()).script("implement", vec![reply("STATUS: done", writes())]);
    let outcome = Engine::new(&w, &again, dir.path())
        .resume(dispatched)
        .await
        .unwrap();
    assert_eq!(
        outcome.status,
        WorkflowStatus::Finished,
        "{}",
        reason(&outcome)
    );
    assert_eq!(commits(dir.path()), 2, "committed once");
}

#[tokio::test]
async fn a_completion_that_changed_nothing_is_an_impl_error_unless_allowed() {
    let dir = repo();
    let w = compile(FLOW);
    let host = FakeHost::new(dir.path()).script("implement", vec![reply("STATUS: done", vec![])]);
    let outcome = Engine::new(&w, &host, dir.path())
        .start(&Map::new())
        .await
        .unwrap();
    assert_eq!(outcome.status, WorkflowStatus::Fatal);
    let why = reason(&outcome);
    assert!(
        why.starts_with("ImplError: stage implement (iteration 1)")
            && why.contains("changed nothing")
            && why.contains("commit.allow_empty"),
        "{why}"
    );

    let allowed = compile(&FLOW.replace("commit: {}", "commit: {allow_empty: true}"));
    let host = FakeHost::new(dir.path()).script("implement", vec![reply("STATUS: done", vec![])]);
    let outcome = Engine::new(&allowed, &host, dir.path())
        .start(&Map::new())
        .await
        .unwrap();
    assert_eq!(
        outcome.status,
        WorkflowStatus::Finished,
        "{}",
        reason(&outcome)
    );
    assert_eq!(commits(dir.path()), 1);
}

#[tokio::test]
async fn changes_without_a_report_wait_until_completion_then_are_an_impl_error() {
    let dir = repo();
    let w = compile(FLOW);
    let host = FakeHost::new(dir.path()).script(
        "implement",
        vec![
            // Not finished: the change waits for a report, as in `lol impl`.
            reply("working", vec![("a.py", Some("a = 1\n"))]),
            reply("STATUS: done", vec![("b.py", Some("b = 1\n"))]),
        ],
    );
    let outcome = Engine::new(&w, &host, dir.path())
        .start(&Map::new())
        .await
        .unwrap();
    assert_eq!(host.events(), ["implement:not_done", "implement:error"]);
    let why = reason(&outcome);
    assert!(
        why.contains("wrote no commit report to .tmp/commit-report-iter-1.txt"),
        "{why}"
    );
    assert_eq!(commits(dir.path()), 1);

    // With a message template, the changes are committed with it.
    let with_message = compile(&FLOW.replace(
        "commit: {}",
        "commit: {message: \"Implement issue {{ issue }}\"}",
    ));
    let host = FakeHost::new(dir.path()).script("implement", vec![reply("STATUS: done", vec![])]);
    let outcome = Engine::new(&with_message, &host, dir.path())
        .start(&Map::new())
        .await
        .unwrap();
    assert_eq!(
        outcome.status,
        WorkflowStatus::Finished,
        "{}",
        reason(&outcome)
    );
    assert_eq!(
        git(dir.path(), &["log", "-1", "--format=%s"]),
        "Implement issue 13"
    );
    assert_eq!(
        git(dir.path(), &["show", "--name-only", "--format=", "HEAD"]),
        "a.py\nb.py"
    );
}

#[tokio::test]
async fn a_committing_stage_outside_a_git_work_tree_is_an_impl_error() {
    let dir = tempfile::tempdir().unwrap();
    let w = compile(FLOW);
    let host = FakeHost::new(dir.path()).script("implement", vec![reply("STATUS: done", vec![])]);
    let outcome = Engine::new(&w, &host, dir.path())
        .start(&Map::new())
        .await
        .unwrap();
    let why = reason(&outcome);
    assert!(
        why.starts_with("ImplError: stage implement commits")
            && why.contains("not a git work tree"),
        "{why}"
    );
    assert!(
        host.log().iter().all(|l| !l.starts_with("agent:")),
        "no agent ran"
    );
}
