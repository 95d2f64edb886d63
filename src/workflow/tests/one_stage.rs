//! One stage as a whole run (`only_stage`): it starts at that stage and
//! ends after it — finished on a passing event, fatal (naming the event and
//! why) otherwise — and a resumed attempt keeps running only that stage.

use serde_json::{Map, json};

use super::engine::flow;
use super::host::{FakeHost, Reply, ok};
use crate::workflow::{
    Checkpoint, Engine, EngineError, OnlyStageError, Outcome, Workflow, WorkflowStatus,
};

async fn run(w: &Workflow, host: &FakeHost, stage: &str) -> Result<Outcome, EngineError> {
    Engine::new(w, host, &host.dir)
        .start_only(&Map::new(), stage)
        .await
}

fn reason(outcome: &Outcome) -> String {
    let fatal = outcome.fatal().expect("a fatal outcome");
    format!("{:?} {}", fatal.event, fatal.reason)
}

#[tokio::test]
async fn a_passing_stage_finishes_the_run_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let w = flow(|f| f);
    let host = FakeHost::new(dir.path()).script("simplify", vec![ok("RESULT: pass")]);
    let outcome = run(&w, &host, "simplify").await.unwrap();
    assert_eq!(outcome.status, WorkflowStatus::Finished);
    assert_eq!(host.events(), ["simplify:pass"]);
    let cp = &outcome.checkpoint;
    assert_eq!((cp.stage.as_str(), cp.step), ("finish", 1));
    assert_eq!(cp.only_stage.as_deref(), Some("simplify"));
    assert_eq!(cp.history[0].next, "finish", "{:?}", cp.history);
    assert_eq!(host.reports.lock().unwrap()[0].next, "finish");
    assert_eq!(
        host.log(),
        [
            "checkpoint:simplify:1",
            "artifact:simplify-input-1",
            "agent:s1-simplify",
            "checkpoint:finish:1"
        ]
    );
}

#[tokio::test]
async fn a_passing_command_gate_finishes_too() {
    let dir = tempfile::tempdir().unwrap();
    let w = flow(|f| f);
    let host = FakeHost::new(dir.path());
    let outcome = run(&w, &host, "pr").await.unwrap();
    assert_eq!(outcome.status, WorkflowStatus::Finished);
    assert_eq!(host.events(), ["pr:pass"]);
}

#[tokio::test]
async fn an_event_that_is_not_the_stages_completion_is_fatal_with_the_event() {
    let dir = tempfile::tempdir().unwrap();
    let w = flow(|f| f);
    // `fail` leads back to implement, not to fatal: still not a pass.
    let host = FakeHost::new(dir.path()).script("simplify", vec![ok("RESULT: fail")]);
    let outcome = run(&w, &host, "simplify").await.unwrap();
    assert_eq!(outcome.status, WorkflowStatus::Fatal);
    assert_eq!(host.events(), ["simplify:fail"]);
    let why = reason(&outcome);
    assert!(
        why.contains("Some(\"fail\")")
            && why.contains("one-stage run of simplify: event fail is not a passing one")
            && why.contains("not the stage's completion event"),
        "{why}"
    );
    assert_eq!(outcome.checkpoint.history[0].next, "fatal");
    assert!(host.artifact(crate::workflow::FATAL_ARTIFACT).is_some());
}

#[tokio::test]
async fn a_failed_gate_is_fatal_though_its_transition_retries() {
    let dir = tempfile::tempdir().unwrap();
    let w = flow(|f| f);
    let broken = Reply {
        result: Ok("STATUS: done".into()),
        files: vec![("broken", Some("x"))],
    };
    let host = FakeHost::new(dir.path()).script("implement", vec![broken]);
    let outcome = run(&w, &host, "implement").await.unwrap();
    assert_eq!(host.events(), ["implement:parse_fail"]);
    let why = reason(&outcome);
    assert!(why.contains("its gate did not pass"), "{why}");
    assert!(why.contains("SyntaxError in a.py"), "{why}");

    std::fs::write(dir.path().join("pr_code"), "1").unwrap();
    let host = FakeHost::new(dir.path());
    let outcome = run(&w, &host, "pr").await.unwrap();
    assert_eq!(host.events(), ["pr:fail_fixable"]);
    assert!(reason(&outcome).contains("its gate did not pass"));
}

#[tokio::test]
async fn a_transition_to_fatal_is_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let w = flow(|f| f);
    std::fs::write(dir.path().join("rebase_code"), "1").unwrap();
    let host = FakeHost::new(dir.path());
    let outcome = run(&w, &host, "rebase").await.unwrap();
    assert_eq!(host.events(), ["rebase:conflict"]);
    assert!(
        reason(&outcome).contains("its transition leads to fatal"),
        "{}",
        reason(&outcome)
    );
}

#[tokio::test]
async fn a_resumed_attempt_runs_only_its_stage_again() {
    let dir = tempfile::tempdir().unwrap();
    let w = flow(|f| f);
    // The first attempt dies in the stage (no scripted reply).
    let host = FakeHost::new(dir.path());
    run(&w, &host, "simplify").await.unwrap_err();
    let saved = host.last_checkpoint();
    assert_eq!(
        (saved.stage.as_str(), saved.dispatched, saved.step),
        ("simplify", true, 1)
    );
    // Through the store's JSON, as the worker reads it back.
    let saved =
        serde_json::from_value::<Checkpoint>(serde_json::to_value(&saved).unwrap()).unwrap();
    assert_eq!(saved.only_stage.as_deref(), Some("simplify"));

    let host = FakeHost::new(dir.path()).script("simplify", vec![ok("RESULT: pass")]);
    let outcome = Engine::new(&w, &host, dir.path())
        .resume(saved)
        .await
        .unwrap();
    assert_eq!(outcome.status, WorkflowStatus::Finished);
    assert_eq!(
        host.log(),
        [
            "checkpoint:simplify:1",
            "artifact:simplify-input-1",
            "agent:s1-simplify",
            "checkpoint:finish:1"
        ]
    );
    assert_eq!(outcome.checkpoint.history.len(), 1);
}

#[test]
fn the_stage_must_be_one_of_the_workflows() {
    let w = flow(|f| f);
    assert_eq!(w.only_stage("pr"), Ok(()));
    let err = w.only_stage("tidy").unwrap_err();
    assert_eq!(
        err.to_string(),
        "the workflow has no stage \"tidy\"; its stages are implement, pr, rebase, review, simplify: name one of them"
    );
    // review is not in the fixture's `run_alone`: no job skips to it.
    let err = w.only_stage("review").unwrap_err();
    assert_eq!(
        err.to_string(),
        "stage \"review\" may not run alone: the workflow's `run_alone` lists implement, simplify, pr, rebase; add the stage to `workflow.run_alone` in the bundle to allow it, or submit the job without `only_stage` to run the whole workflow"
    );
    let none = flow(|f| f.replace("run_alone: [implement, simplify, pr, rebase]\n", ""));
    assert!(matches!(
        none.only_stage("simplify"),
        Err(OnlyStageError::NotAlone { allowed, .. }) if allowed.is_empty()
    ));
}

#[tokio::test]
async fn a_job_that_names_its_files_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let w = flow(|f| {
        f.replace(
            "    prompt: \"Simplify\"\n",
            "    prompt: \"Simplify{% for f in files %} {{ f }}{% endfor %}\"\n    max_files: 3\n",
        )
    });
    let host = FakeHost::new(dir.path()).script("simplify", vec![ok("RESULT: pass")]);
    let mut variables = Map::new();
    variables.insert("files".into(), json!(["a.py", "b.py"]));
    let outcome = Engine::new(&w, &host, dir.path())
        .start_only(&variables, "simplify")
        .await
        .unwrap();
    assert_eq!(
        outcome.status,
        WorkflowStatus::Finished,
        "{:?}",
        outcome.fatal()
    );
    let prompts = host.prompts.lock().unwrap().clone();
    assert_eq!(
        prompts,
        [("simplify".to_string(), "Simplify a.py b.py".to_string())]
    );
}
