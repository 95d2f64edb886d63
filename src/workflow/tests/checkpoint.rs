//! Checkpoints stored before the git kinds had their own section (format
//! 1: `commit_base`, `pr_url`, `pr_number` and `ci_failure` at the top) are
//! read into it and resume: a job an older daemon stored goes on after an
//! upgrade.

use serde_json::{Value, json};

use super::ci::FLOW;
use super::compile;
use super::host::{FakeHost, ok};
use crate::workflow::checkpoint::CHECKPOINT_FORMAT;
use crate::workflow::{Checkpoint, Engine, GitState, WorkflowStatus};

/// A checkpoint as the format-1 build stored it for `FLOW` (with no PR in
/// the workflow's data): dispatching the second `implement` after the `ci`
/// gate failed on PR 9.
const FORMAT_1: &str = include_str!("checkpoint-format-1.json");

/// `FLOW` whose checks command records the PR it was given and passes.
fn flow() -> String {
    FLOW.replace(
        r#", pr_url: "https://github.com/o/r/pull/7", pr_number: 7"#,
        "",
    )
    .replace(
        r#"command: [sh, -c, "echo checking PR {{ pr_number }}; if [ -e ci_failed_once ]; then exit 0; fi; touch ci_failed_once; printf 'lint\tfail\t1m\thttps://ci.example/1\n'; exit 1"]"#,
        r#"command: [sh, -c, "echo {{ pr_number }} > seen_pr"]"#,
    )
}

#[test]
fn a_format_1_checkpoint_is_read_into_the_git_section() {
    let cp: Checkpoint = serde_json::from_str(FORMAT_1).unwrap();
    assert_eq!(cp.format, CHECKPOINT_FORMAT);
    assert_eq!(
        cp.kinds.git,
        GitState {
            commit_base: Some("4b825dc642cb6eb9a060e54bf8d69288fbee4904".into()),
            pr_url: Some("https://github.com/o/r/pull/9".into()),
            pr_number: Some(9),
            ci_failure: Some(
                "PR: https://github.com/o/r/pull/9\nFailing checks:\nlint\tfail".into()
            ),
        }
    );
    assert_eq!(
        (cp.stage.as_str(), cp.step, cp.iteration),
        ("implement", 3, 2)
    );
    assert_eq!(cp.history.len(), 2);
    // Written back in this format: the section, nothing at the top.
    let written = serde_json::to_value(&cp).unwrap();
    assert_eq!(written["format"], CHECKPOINT_FORMAT);
    assert_eq!(written["kinds"]["git"]["pr_number"], 9);
    for field in ["commit_base", "pr_url", "pr_number", "ci_failure"] {
        assert!(
            written.get(field).is_none(),
            "{field} at the top: {written}"
        );
    }
    let again: Checkpoint = serde_json::from_value(written).unwrap();
    assert_eq!(again, cp);
}

#[test]
fn an_empty_section_is_left_out_and_other_formats_are_not_lifted() {
    let cp = Checkpoint::new("v1", "implement", Default::default());
    let written = serde_json::to_value(&cp).unwrap();
    assert!(written.get("kinds").is_none(), "{written}");
    assert_eq!(serde_json::from_value::<Checkpoint>(written).unwrap(), cp);

    // A format this build does not know keeps its number, for the engine
    // to refuse by name.
    let mut future: Value = serde_json::from_str(FORMAT_1).unwrap();
    future["format"] = json!(99);
    let cp: Checkpoint = serde_json::from_value(future).unwrap();
    assert_eq!(cp.format, 99);
    assert_eq!(cp.kinds.git, GitState::default());
}

#[tokio::test]
async fn a_format_1_checkpoint_resumes_with_its_pr_and_ci_failure() {
    let dir = tempfile::tempdir().unwrap();
    let w = compile(&flow());
    let cp: Checkpoint = serde_json::from_str(FORMAT_1).unwrap();
    let host = FakeHost::new(dir.path()).script("implement", vec![ok("STATUS: done")]);
    let outcome = Engine::new(&w, &host, dir.path()).resume(cp).await.unwrap();
    assert_eq!(outcome.status, WorkflowStatus::Finished, "{outcome:?}");
    assert_eq!(host.events(), ["implement:done", "ci:pass"]);
    // The stored CI failure reached the agent once, as `ci_failure`…
    let prompts = host.prompts.lock().unwrap().clone();
    assert_eq!(
        prompts[0].1,
        "Implement #2\nCI failure context:\nPR: https://github.com/o/r/pull/9\nFailing checks:\nlint\tfail"
    );
    assert_eq!(outcome.checkpoint.kinds.git.ci_failure, None);
    // …and the stored PR reached the `ci` gate's template.
    let seen = std::fs::read_to_string(dir.path().join("seen_pr")).unwrap();
    assert_eq!(seen.trim(), "9");
    assert_eq!(outcome.checkpoint.kinds.git.pr_number, Some(9));
    assert_eq!(outcome.checkpoint.history.len(), 4);
}
