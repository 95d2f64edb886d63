//! The built-in `ci` gate (`lol impl --wait-for-ci`): a stand-in checks
//! command that fails once then passes; the failure reaches the next agent
//! stage once as `ci_failure`, also after a resume.

use serde_json::Map;

use super::host::{FakeHost, ok};
use super::{compile, has, problems};
use crate::workflow::{Checkpoint, Engine, WorkflowStatus};

/// The checks fail (listing one failing check) until `ci_failed_once` exists.
pub(super) const FLOW: &str = r#"
start: implement
data: {issue: 13, pr_url: "https://github.com/o/r/pull/7", pr_number: 7}
stages:
  implement:
    kind: agent
    event_prefix: impl
    prompt: "Implement #{{ iteration }}{% if ci_failure %}\nCI failure context:\n{{ ci_failure }}{% endif %}{% if retry_context %}\nRETRY{% endif %}"
    result: {regex: 'STATUS: (\w+)', events: [done], otherwise: not_done}
  ci:
    kind: command
    builtin: ci
    ci:
      command: [sh, -c, "echo checking PR {{ pr_number }}; if [ -e ci_failed_once ]; then exit 0; fi; touch ci_failed_once; printf 'lint\tfail\t1m\thttps://ci.example/1\n'; exit 1"]
transitions:
  implement: {impl_done: ci, impl_not_done: implement}
  ci: {ci_pass: finish, ci_fail: implement}
"#;

fn prompts(host: &FakeHost) -> Vec<String> {
    host.prompts
        .lock()
        .unwrap()
        .iter()
        .map(|(_, p)| p.clone())
        .collect()
}

#[tokio::test]
async fn failing_checks_feed_ci_failure_to_the_next_iteration_once() {
    let dir = tempfile::tempdir().unwrap();
    let w = compile(FLOW);
    let host =
        FakeHost::new(dir.path()).script("implement", vec![ok("STATUS: done"), ok("STATUS: done")]);
    let outcome = Engine::new(&w, &host, dir.path())
        .start(&Map::new())
        .await
        .unwrap();
    assert_eq!(outcome.status, WorkflowStatus::Finished, "{outcome:?}");
    assert_eq!(
        host.events(),
        ["implement:done", "ci:fail", "implement:done", "ci:pass"]
    );
    let prompts = prompts(&host);
    assert_eq!(prompts[0], "Implement #1");
    assert_eq!(
        prompts[1],
        "Implement #2\nCI failure context:\nPR: https://github.com/o/r/pull/7\nFailing checks:\nchecking PR 7\nlint\tfail\t1m\thttps://ci.example/1"
    );
    // The failure is `ci_failure`, not the retry context, and it is stored
    // in the checkpoint dispatching the next agent stage, then cleared.
    let checkpoints = host.checkpoints.lock().unwrap().clone();
    let before = checkpoints
        .iter()
        .find(|c| c.stage == "implement" && c.step == 3)
        .unwrap();
    assert!(
        before
            .kinds
            .git
            .ci_failure
            .as_deref()
            .unwrap()
            .contains("lint\tfail")
    );
    assert_eq!(before.retry_context, None);
    assert_eq!(outcome.checkpoint.kinds.git.ci_failure, None);
    assert_eq!(outcome.checkpoint.iteration, 2);
    let report = host.artifact("ci-iter-1.json").unwrap();
    assert_eq!(report["pass"], false);
    assert_eq!(report["details"]["exit_code"], 1);
    assert!(
        report["details"]["ci_failure"]
            .as_str()
            .unwrap()
            .starts_with("PR: ")
    );
}

#[tokio::test]
async fn a_resumed_job_keeps_ci_failure() {
    let dir = tempfile::tempdir().unwrap();
    let w = compile(FLOW);
    // The first attempt dies in the second implement stage (no reply).
    let host = FakeHost::new(dir.path()).script("implement", vec![ok("STATUS: done")]);
    Engine::new(&w, &host, dir.path())
        .start(&Map::new())
        .await
        .unwrap_err();
    let saved = host.last_checkpoint();
    assert_eq!((saved.stage.as_str(), saved.step), ("implement", 3));
    let saved: Checkpoint = serde_json::from_value(serde_json::to_value(&saved).unwrap()).unwrap();

    let host = FakeHost::new(dir.path()).script("implement", vec![ok("STATUS: done")]);
    let outcome = Engine::new(&w, &host, dir.path())
        .resume(saved)
        .await
        .unwrap();
    assert_eq!(outcome.status, WorkflowStatus::Finished);
    let prompts = prompts(&host);
    assert!(
        prompts[0].contains("CI failure context:\nPR: https://github.com/o/r/pull/7"),
        "{prompts:?}"
    );
}

#[tokio::test]
async fn no_pr_or_a_checks_command_that_cannot_run_is_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let no_pr = FLOW.replace(
        r#"data: {issue: 13, pr_url: "https://github.com/o/r/pull/7", pr_number: 7}"#,
        "data: {issue: 13}",
    );
    let w = compile(&no_pr);
    let host = FakeHost::new(dir.path()).script("implement", vec![ok("STATUS: done")]);
    let outcome = Engine::new(&w, &host, dir.path())
        .start(&Map::new())
        .await
        .unwrap();
    let fatal = outcome.fatal().unwrap();
    assert!(
        fatal.reason.contains("ImplError: no PR to wait for"),
        "{fatal:?}"
    );
    assert_eq!(fatal.original_event.as_deref(), Some("fatal"));

    let missing = FLOW.replace("command: [sh, -c,", "command: [no-such-checks-command, -c,");
    let w = compile(&missing);
    let host = FakeHost::new(dir.path()).script("implement", vec![ok("STATUS: done")]);
    let outcome = Engine::new(&w, &host, dir.path())
        .start(&Map::new())
        .await
        .unwrap();
    let reason = &outcome.fatal().unwrap().reason;
    assert!(
        reason.contains("cannot start `no-such-checks-command`"),
        "{reason}"
    );
    assert_eq!(host.events(), ["implement:done", "ci:error"]);
}

#[test]
fn the_pr_stages_checkpoint_gives_ci_templates_pr_url_and_pr_number() {
    let w = compile(
        FLOW.replace(
            r#", pr_url: "https://github.com/o/r/pull/7", pr_number: 7"#,
            "",
        )
        .as_str(),
    );
    let mut cp = Checkpoint::new("v1", "ci", w.spec.data.clone());
    let vars = crate::workflow::stages::vars(&cp);
    assert!(!vars.contains_key("pr_url") && !vars.contains_key("pr_number"));
    assert_eq!(vars["ci_failure"], serde_json::Value::Null);
    cp.kinds.git.pr_url = Some("https://github.com/o/r/pull/9".into());
    cp.kinds.git.pr_number = Some(9);
    cp.kinds.git.ci_failure = Some("PR: …".into());
    let vars = crate::workflow::stages::vars(&cp);
    assert_eq!(vars["pr_url"], "https://github.com/o/r/pull/9");
    assert_eq!(vars["pr_number"], 9);
    assert_eq!(vars["ci_failure"], "PR: …");
}

#[test]
fn bad_ci_settings_are_named_by_key_path() {
    let empty = FLOW.replace(
        r#"command: [sh, -c, "echo checking PR {{ pr_number }}; if [ -e ci_failed_once ]; then exit 0; fi; touch ci_failed_once; printf 'lint\tfail\t1m\thttps://ci.example/1\n'; exit 1"]"#,
        "command: []",
    );
    let p = problems(&empty);
    assert!(
        has(&p, "workflow.stages.ci.ci.command", "must not be empty"),
        "{p:?}"
    );

    let misplaced = FLOW.replace("builtin: ci", "builtin: py_compile");
    let p = problems(&misplaced);
    assert!(
        has(&p, "workflow.stages.ci.ci", "applies to `builtin: ci` only"),
        "{p:?}"
    );

    let bad_template = FLOW.replace("{{ pr_number }}", "{{ pr_number");
    let p = problems(&bad_template);
    assert!(
        has(&p, "workflow.stages.ci.ci.command[2]", "invalid template"),
        "{p:?}"
    );

    // Unset `ci`: the default `gh pr checks {{ pr_number }} --watch` compiles.
    let default = compile(&FLOW.replace(
        r#"    ci:
      command: [sh, -c, "echo checking PR {{ pr_number }}; if [ -e ci_failed_once ]; then exit 0; fi; touch ci_failed_once; printf 'lint\tfail\t1m\thttps://ci.example/1\n'; exit 1"]
"#,
        "",
    ));
    assert_eq!(
        default
            .stage_info("ci")
            .unwrap()
            .events
            .iter()
            .collect::<Vec<_>>(),
        ["fail", "pass"]
    );
}
