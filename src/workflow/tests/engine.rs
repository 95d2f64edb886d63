//! The engine loop with a fake host: scripted agent replies, recorded
//! checkpoints, artifacts and stage reports. Gates are tiny `sh` commands
//! whose outcome the fake agent controls through files in the work dir.

use serde_json::{Map, Value, json};

use super::compile;
use super::host::{FakeHost, Reply, ok};
use crate::workflow::{
    Checkpoint, Engine, EngineError, FATAL_ARTIFACT, Outcome, Workflow, WorkflowStatus,
};

/// The example's table with argv gates instead of git: `parse` fails while
/// the file `broken` exists; `pr` and `rebase` exit with the code in
/// `pr_code` / `rebase_code`.
pub(super) const FLOW: &str = r#"
start: implement
data: {issue: 13}
run_alone: [implement, simplify, pr, rebase]
stages:
  implement:
    kind: agent
    artifact: impl
    prompt: "Implement {{ issue }} #{{ iteration }}{% if retry_context %} RETRY: {{ retry_context }}{% endif %}"
    result: {regex: 'STATUS: (\w+)', events: [done], otherwise: not_done}
    gate:
      name: parse
      check: {argv: [sh, -c, "if [ -e broken ]; then echo 'SyntaxError in a.py' >&2; exit 1; fi"]}
  review:
    kind: score
    prompt: "Review {{ issue }}"
  simplify:
    kind: agent
    prompt: "Simplify"
    result: {regex: 'RESULT: (?P<event>\w+)', events: [pass, fail], otherwise: fail}
  pr:
    kind: command
    argv: [sh, -c, "exit $(cat pr_code 2>/dev/null || echo 0)"]
    exit_codes: {1: fail_fixable, 2: fail_need_rebase}
  rebase:
    kind: command
    argv: [sh, -c, "exit $(cat rebase_code 2>/dev/null || echo 0)"]
    exit_codes: {0: ok, 1: conflict}
    pass_events: [ok]
transitions:
  implement: {not_done: implement, parse_fail: implement, done: review}
  review: {pass: simplify, fail: implement}
  simplify: {pass: pr, fail: implement}
  pr: {pass: finish, fail: implement, fail_fixable: implement, fail_need_rebase: rebase}
  rebase: {ok: implement, fail: fatal, conflict: fatal}
limits:
  attempts: {}
"#;

const PASSING: &str =
    r#"{"scores": {"faithful": 95, "style": 90, "docs": 90, "corner_cases": 90}}"#;

fn review(score: u32) -> String {
    format!(
        r#"{{"scores": {{"faithful": {score}, "style": {score}, "docs": {score}, "corner_cases": {score}}}}}"#
    )
}

pub(super) fn flow(edit: impl Fn(String) -> String) -> Workflow {
    compile(&edit(FLOW.to_string()))
}

async fn start(w: &Workflow, host: &FakeHost) -> Result<Outcome, EngineError> {
    Engine::new(w, host, &host.dir).start(&Map::new()).await
}

fn reason(outcome: &Outcome) -> String {
    outcome
        .fatal()
        .map(|f| f.reason.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn the_happy_path_checkpoints_before_every_dispatch_and_writes_artifacts() {
    let dir = tempfile::tempdir().unwrap();
    let w = flow(|f| f);
    let host = FakeHost::new(dir.path())
        .script("implement", vec![ok("working"), ok("STATUS: done")])
        .script("review", vec![ok(PASSING)])
        .script("simplify", vec![ok("RESULT: pass")]);
    let outcome = start(&w, &host).await.unwrap();
    assert_eq!(outcome.status, WorkflowStatus::Finished);
    assert_eq!(
        host.events(),
        [
            "implement:not_done",
            "implement:done",
            "review:pass",
            "simplify:pass",
            "pr:pass"
        ]
    );
    let log = host.log();
    for (i, entry) in log.iter().enumerate() {
        if let Some(key) = entry.strip_prefix("agent:") {
            let (step, stage) = key[1..].split_once('-').unwrap();
            let expected = format!("checkpoint:{stage}:{step}");
            let last_checkpoint = log[..i]
                .iter()
                .rev()
                .find(|e| e.starts_with("checkpoint:"))
                .unwrap();
            assert_eq!(last_checkpoint, &expected, "{log:#?}");
        }
    }
    assert_eq!(log.last().unwrap(), "checkpoint:finish:5");
    for name in [
        "impl-input-1",
        "parse-iter-1.json",
        "review-iter-1.json",
        "pr-iter-1.json",
    ] {
        assert!(host.artifact(name).is_some(), "{name}: {log:#?}");
    }
    let review = host.artifact("review-iter-1.json").unwrap();
    assert_eq!(review["pass"], true);
    assert_eq!(host.artifact("parse-iter-1.json").unwrap()["pass"], true);
    assert_eq!(
        host.artifact("impl-input-1").unwrap(),
        json!("Implement 13 #1")
    );
    let cp = outcome.checkpoint;
    assert_eq!((cp.step, cp.iteration, cp.stage.as_str()), (5, 1, "finish"));
    assert_eq!(cp.attempts["implement"], 2);
    assert_eq!(cp.history.len(), 5);
    assert_eq!(cp.history[2].next, "simplify");
}

#[tokio::test]
async fn a_failed_gate_adds_an_iteration_and_a_one_shot_retry_context() {
    let dir = tempfile::tempdir().unwrap();
    let w = flow(|f| f);
    let bad = "faithful=60<90";
    let host = FakeHost::new(dir.path())
        .script(
            "implement",
            vec![ok("STATUS: done"), ok("STATUS: nope"), ok("STATUS: done")],
        )
        .script("review", vec![ok(&review(60)), ok(PASSING)])
        .script("simplify", vec![ok("RESULT: pass")]);
    let outcome = start(&w, &host).await.unwrap();
    assert_eq!(
        outcome.status,
        WorkflowStatus::Finished,
        "{:?}",
        outcome.fatal()
    );
    let prompts: Vec<String> = host
        .prompts
        .lock()
        .unwrap()
        .iter()
        .filter(|(s, _)| s == "implement")
        .map(|(_, p)| p.clone())
        .collect();
    assert_eq!(prompts[0], "Implement 13 #1");
    assert!(
        prompts[1].starts_with("Implement 13 #2 RETRY: ") && prompts[1].contains(bad),
        "{}",
        prompts[1]
    );
    assert_eq!(
        prompts[2], "Implement 13 #2",
        "the retry context is given once"
    );
    assert_eq!(outcome.checkpoint.iteration, 2);
    assert!(
        host.artifact("impl-input-2").is_some() && host.artifact("review-iter-2.json").is_some()
    );
}

#[tokio::test]
async fn a_failing_parse_gate_maps_to_parse_fail_and_its_streak_is_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let w = flow(|f| {
        f.replace(
            "  attempts: {}",
            "  attempts: {}\n  failure_streak: {parse: 3}",
        )
    });
    let broken = || Reply {
        result: Ok("STATUS: done".into()),
        files: vec![("broken", Some("x"))],
    };
    let host = FakeHost::new(dir.path()).script("implement", vec![broken(), broken(), broken()]);
    let outcome = start(&w, &host).await.unwrap();
    assert_eq!(outcome.status, WorkflowStatus::Fatal);
    assert_eq!(host.events(), ["implement:parse_fail"; 3]);
    assert_eq!(
        reason(&outcome),
        "gate parse failed 3 times in a row (cap 3)"
    );
    let report = host.artifact("parse-iter-2.json").unwrap();
    assert_eq!(report["pass"], false);
    assert!(
        report["traceback"]
            .as_str()
            .unwrap()
            .contains("SyntaxError"),
        "{report}"
    );
    let fatal = host.artifact(FATAL_ARTIFACT).unwrap();
    for key in [
        "stage",
        "event",
        "iteration",
        "reason",
        "details",
        "timestamp",
    ] {
        assert!(fatal.get(key).is_some(), "{key}: {fatal}");
    }
    assert_eq!(fatal["stage"], "implement");
    assert_eq!(fatal["event"], "parse_fail");
    assert_eq!(fatal["iteration"], 4);
    let prompts = host.prompts.lock().unwrap().clone();
    assert!(prompts[1].1.contains("SyntaxError in a.py"), "{prompts:?}");
}

#[tokio::test]
async fn a_passing_gate_resets_the_failure_streak_and_an_agent_error_stops_the_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let w = flow(|f| {
        f.replace(
            "  attempts: {}",
            "  attempts: {}\n  failure_streak: {parse: 2}",
        )
    });
    let done = |file: Option<&'static str>| Reply {
        result: Ok("STATUS: done".into()),
        files: vec![("broken", file)],
    };
    let host = FakeHost::new(dir.path())
        .script(
            "implement",
            vec![done(Some("x")), done(None), done(Some("x"))],
        )
        .script("review", vec![ok(&review(10))]);
    // The fourth implement has no scripted reply: the agent fails.
    let err = start(&w, &host).await.unwrap_err();
    assert!(
        matches!(&err, EngineError::Agent { stage, .. } if stage == "implement"),
        "{err}"
    );
    assert!(err.to_string().contains("resumes this stage"), "{err}");
    assert_eq!(
        host.events(),
        [
            "implement:parse_fail",
            "implement:done",
            "review:fail",
            "implement:parse_fail"
        ]
    );
    let cp = host.last_checkpoint();
    assert_eq!(
        cp.failure_streaks["parse"], 1,
        "reset by the pass, then one failure"
    );
    assert_eq!(
        (cp.stage.as_str(), cp.dispatched, cp.step, cp.iteration),
        ("implement", true, 5, 4)
    );
}

#[tokio::test]
async fn max_steps_is_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let w = flow(|f| f.replace("  attempts: {}", "  attempts: {}\n  max_steps: 3"));
    let host =
        FakeHost::new(dir.path()).script("implement", vec![ok("no"), ok("no"), ok("no"), ok("no")]);
    let outcome = start(&w, &host).await.unwrap();
    assert_eq!(outcome.status, WorkflowStatus::Fatal);
    assert_eq!(reason(&outcome), "max workflow steps exceeded");
    assert_eq!(host.events().len(), 3);
    let fatal = host.artifact(FATAL_ARTIFACT).unwrap();
    assert_eq!(fatal["details"]["max_steps"], 3);
    assert_eq!(fatal["event"], Value::Null);
    assert_eq!(outcome.checkpoint.stage, "fatal");
    assert_eq!(host.last_checkpoint().status, WorkflowStatus::Fatal);
}

#[tokio::test]
async fn max_iterations_is_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let w = flow(|f| f.replace("  attempts: {}", "  attempts: {}\n  max_iterations: 2"));
    let host = FakeHost::new(dir.path())
        .script("implement", vec![ok("STATUS: done"), ok("STATUS: done")])
        .script("review", vec![ok(&review(50)), ok(&review(60))]);
    let outcome = start(&w, &host).await.unwrap();
    assert_eq!(reason(&outcome), "max iterations exceeded (2)");
    assert_eq!(outcome.checkpoint.iteration, 3);
    assert_eq!(outcome.fatal().unwrap().stage, "review");
}

#[tokio::test]
async fn an_attempt_cap_is_fatal_or_passes_the_stage_through() {
    let dir = tempfile::tempdir().unwrap();
    let w = flow(|f| {
        f.replace("  attempts: {}", "  attempts:\n    review: {max: 1, on_exceed: pass}\n    implement: {max: 3, on_exceed: fatal}")
    });
    let host = FakeHost::new(dir.path())
        .script(
            "implement",
            vec![ok("STATUS: done"), ok("STATUS: done"), ok("STATUS: nope")],
        )
        .script("review", vec![ok(&review(10))])
        .script("simplify", vec![ok("RESULT: fail")]);
    let outcome = start(&w, &host).await.unwrap();
    assert_eq!(
        host.events(),
        [
            "implement:done",
            "review:fail",
            "implement:done",
            "review:pass",
            "simplify:fail",
            "implement:not_done"
        ]
    );
    let passed: Vec<bool> = host.reports.lock().unwrap().iter().map(|r| r.ran).collect();
    assert_eq!(passed, [true, true, true, false, true, true]);
    let reviews = host
        .log()
        .iter()
        .filter(|e| e.starts_with("agent:") && e.ends_with("-review"))
        .count();
    assert_eq!(reviews, 1, "a passed-through stage does not run");
    assert_eq!(reason(&outcome), "stage implement exceeded its 3 attempts");
    assert_eq!(outcome.checkpoint.attempts["implement"], 4);
}

#[tokio::test]
async fn the_score_streak_resets_on_improvement_and_is_fatal_at_its_cap() {
    let dir = tempfile::tempdir().unwrap();
    let w = flow(|f| {
        f.replace(
            "  attempts: {}",
            "  attempts: {}\n  no_improvement_streak: {review: 3}",
        )
    });
    let host = FakeHost::new(dir.path())
        .script("implement", (0..5).map(|_| ok("STATUS: done")).collect())
        .script(
            "review",
            [60, 70, 70, 65, 80]
                .iter()
                .map(|s| ok(&review(*s)))
                .collect(),
        );
    let outcome = start(&w, &host).await.unwrap();
    let streaks: Vec<u32> = host
        .checkpoints
        .lock()
        .unwrap()
        .iter()
        .filter(|c| c.stage == "implement" && c.step > 1)
        .map(|c| c.no_improvement_streaks["review"])
        .collect();
    assert_eq!(streaks, [1, 1, 2], "60 → 1, 70 → 1 (improved), 70 → 2");
    assert_eq!(
        reason(&outcome),
        "score of review did not improve for 3 reviews (cap 3)"
    );
    assert_eq!(outcome.checkpoint.last_scores["review"], 65);
}

#[tokio::test]
async fn pr_and_rebase_events_follow_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let w = flow(|f| f);
    std::fs::write(dir.path().join("pr_code"), "2").unwrap();
    let host = FakeHost::new(dir.path())
        .script(
            "implement",
            vec![
                ok("STATUS: done"),
                Reply {
                    result: Ok("STATUS: done".into()),
                    files: vec![("pr_code", Some("1"))],
                },
                Reply {
                    result: Ok("STATUS: done".into()),
                    files: vec![("pr_code", Some("2")), ("rebase_code", Some("1"))],
                },
            ],
        )
        .script("review", vec![ok(PASSING), ok(PASSING), ok(PASSING)])
        .script(
            "simplify",
            vec![ok("RESULT: pass"), ok("RESULT: pass"), ok("RESULT: pass")],
        );
    let outcome = start(&w, &host).await.unwrap();
    let events = host.events();
    let tail: Vec<&str> = events
        .iter()
        .filter(|e| e.starts_with("pr") || e.starts_with("rebase"))
        .map(String::as_str)
        .collect();
    assert_eq!(
        tail,
        [
            "pr:fail_need_rebase",
            "rebase:ok",
            "pr:fail_fixable",
            "pr:fail_need_rebase",
            "rebase:conflict"
        ]
    );
    assert_eq!(reason(&outcome), "transition to fatal: rebase + conflict");
    assert_eq!(
        outcome.checkpoint.iteration, 5,
        "pr fail ×3 and the conflict are failed gates"
    );
    assert!(
        host.artifact("pr-iter-1.json").is_some() && host.artifact("rebase-iter-2.json").is_some()
    );
}

#[tokio::test]
async fn a_reviewer_error_scores_zero_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let w = flow(|f| f.replace("  attempts: {}", "  attempts: {}\n  max_iterations: 1"));
    let host = FakeHost::new(dir.path())
        .script("implement", vec![ok("STATUS: done")])
        .script(
            "review",
            vec![Reply {
                result: Err("model down".into()),
                files: vec![],
            }],
        );
    let outcome = start(&w, &host).await.unwrap();
    assert_eq!(host.events(), ["implement:done", "review:fail"]);
    let body = host.artifact("review-iter-1.json").unwrap();
    assert_eq!(
        body["scores"],
        json!({"faithful": 0, "style": 0, "docs": 0, "corner_cases": 0})
    );
    assert_eq!(body["pass"], false);
    assert_eq!(outcome.status, WorkflowStatus::Fatal);
}

#[tokio::test]
async fn an_unmapped_event_and_an_unrenderable_template_are_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = flow(|f| f);
    w.spec
        .transitions
        .get_mut("implement")
        .unwrap()
        .remove("not_done");
    let host = FakeHost::new(dir.path()).script("implement", vec![ok("nothing")]);
    let outcome = start(&w, &host).await.unwrap();
    assert_eq!(
        reason(&outcome),
        "unmapped event not_done: no transition for implement + not_done"
    );

    let w = flow(|f| f.replace("Review {{ issue }}", "Review {{ missing }}"));
    let host = FakeHost::new(dir.path()).script("implement", vec![ok("STATUS: done")]);
    let outcome = start(&w, &host).await.unwrap();
    let reason = reason(&outcome);
    assert!(
        reason.contains("workflow.stages.review.prompt") && reason.contains("undefined"),
        "{reason}"
    );
}

#[tokio::test]
async fn resume_reruns_the_dispatched_stage_with_the_same_key_and_counters() {
    let dir = tempfile::tempdir().unwrap();
    let w = flow(|f| f);
    // The first attempt dies in the simplify stage (no scripted reply).
    let host = FakeHost::new(dir.path())
        .script("implement", vec![ok("STATUS: done")])
        .script("review", vec![ok(PASSING)]);
    start(&w, &host).await.unwrap_err();
    let saved = host.last_checkpoint();
    assert_eq!(
        (saved.stage.as_str(), saved.dispatched, saved.step),
        ("simplify", true, 3)
    );
    let saved =
        serde_json::from_value::<Checkpoint>(serde_json::to_value(&saved).unwrap()).unwrap();

    let host = FakeHost::new(dir.path()).script("simplify", vec![ok("RESULT: pass")]);
    let outcome = Engine::new(&w, &host, dir.path())
        .resume(saved)
        .await
        .unwrap();
    assert_eq!(outcome.status, WorkflowStatus::Finished);
    let log = host.log();
    assert_eq!(log[0], "checkpoint:simplify:3");
    assert!(log.contains(&"agent:s3-simplify".to_string()), "{log:?}");
    assert!(
        !log.iter()
            .any(|e| e.contains("implement") || e.contains("review")),
        "completed stages are not run again: {log:?}"
    );
    let cp = outcome.checkpoint;
    assert_eq!(
        (cp.attempts["simplify"], cp.step, cp.history.len()),
        (1, 4, 4)
    );
}

#[tokio::test]
async fn resume_refuses_other_versions_and_never_reruns_a_finished_workflow() {
    let dir = tempfile::tempdir().unwrap();
    let w = flow(|f| f);
    let host = FakeHost::new(dir.path());
    let engine = Engine::new(&w, &host, dir.path());
    let mut cp = engine.initial(&Map::new(), None);
    cp.version = "old".into();
    let err = engine.resume(cp.clone()).await.unwrap_err();
    assert!(
        matches!(&err, EngineError::VersionMismatch { found, expected } if found == "old" && expected == "v1"),
        "{err:?}"
    );
    assert!(err.to_string().contains("resubmit the job"), "{err}");

    cp.version = "v1".into();
    cp.format = 99;
    assert!(matches!(
        engine.resume(cp.clone()).await,
        Err(EngineError::Format { found: 99 })
    ));

    cp.format = crate::workflow::checkpoint::CHECKPOINT_FORMAT;
    for status in [WorkflowStatus::Finished, WorkflowStatus::Fatal] {
        cp.status = status;
        let outcome = engine.resume(cp.clone()).await.unwrap();
        assert_eq!(outcome.status, status);
    }
    assert!(host.log().is_empty(), "nothing ran: {:?}", host.log());
}

#[tokio::test]
async fn job_variables_override_the_spec_data() {
    let dir = tempfile::tempdir().unwrap();
    let w = flow(|f| f.replace("  attempts: {}", "  attempts: {}\n  max_steps: 1"));
    let host = FakeHost::new(dir.path()).script("implement", vec![ok("no")]);
    let mut vars = Map::new();
    vars.insert("issue".into(), json!(42));
    Engine::new(&w, &host, dir.path())
        .start(&vars)
        .await
        .unwrap();
    assert_eq!(
        host.artifact("impl-input-1").unwrap(),
        json!("Implement 42 #1")
    );
}

#[tokio::test]
async fn field_and_marker_rules_map_results_to_events() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = r#"
start: a
data: {issue: 7}
stages:
  a: {kind: agent, prompt: go, result: {field: status, events: [done, blocked]}}
  b:
    kind: agent
    prompt: go
    result: {marker: {file: "STATUS-{{ issue }}.md", text: "Issue {{ issue }} resolved"}}
transitions:
  a: {done: b, blocked: fatal, not_done: a}
  b: {done: finish, not_done: b}
"#;
    let w = compile(yaml);
    let host = FakeHost::new(dir.path())
        .script(
            "a",
            vec![ok(r#"{"status": "maybe"}"#), ok(r#"{"status": "done"}"#)],
        )
        .script(
            "b",
            vec![
                Reply {
                    result: Ok("x".into()),
                    files: vec![("STATUS-7.md", Some("Issue 7 pending"))],
                },
                Reply {
                    result: Ok("x".into()),
                    files: vec![("STATUS-7.md", Some("# Issue 7 resolved\n"))],
                },
            ],
        );
    let outcome = Engine::new(&w, &host, dir.path())
        .start(&Map::new())
        .await
        .unwrap();
    assert_eq!(outcome.status, WorkflowStatus::Finished);
    assert_eq!(
        host.events(),
        ["a:not_done", "a:done", "b:not_done", "b:done"]
    );
    let base = dir.path();
    assert_eq!(w.working_dir(base, &Map::new()).unwrap(), base);
}

/// As `lol impl`'s simplify stage: an agent stage with `max_files` gets
/// the last commit's files, at most that many, as `files`.
#[tokio::test]
async fn max_files_gives_the_prompt_the_last_commits_files() {
    let dir = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "-q"]);
    for name in ["a.py", "b.py", "c.py", "d.py"] {
        std::fs::write(dir.path().join(name), "x = 1\n").unwrap();
    }
    git(&["add", "."]);
    git(&["commit", "-q", "-m", "four files"]);
    let w = flow(|f| {
        f.replace(
            "    prompt: \"Simplify\"",
            "    prompt: \"Simplify{% for f in files %} {{ f }}{% endfor %}\"\n    max_files: 3",
        )
    });
    let host = FakeHost::new(dir.path())
        .script("implement", vec![ok("STATUS: done")])
        .script("review", vec![ok(PASSING)])
        .script("simplify", vec![ok("RESULT: pass")]);
    let outcome = start(&w, &host).await.unwrap();
    let prompts = host.prompts.lock().unwrap().clone();
    assert_eq!(reason(&outcome), "", "{prompts:?}");
    let simplify: Vec<&str> = prompts
        .iter()
        .filter(|(stage, _)| stage.contains("simplify"))
        .map(|(_, prompt)| prompt.as_str())
        .collect();
    assert_eq!(simplify, ["Simplify a.py b.py c.py"], "{prompts:?}");
}

/// As in `lol impl`: a PR title that does not read `[tag][#N] text` ends
/// the workflow (no implementation iteration can change it).
#[tokio::test]
async fn an_invalid_pr_title_is_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let w = flow(|f| {
        f.replace(
            "    argv: [sh, -c, \"exit $(cat pr_code 2>/dev/null || echo 0)\"]\n    exit_codes: {1: fail_fixable, 2: fail_need_rebase}",
            "    builtin: pr\n    pr: {title: \"Issue {{ issue }}\", create_command: [\"true\"]}",
        )
        .replace(
            "pr: {pass: finish, fail: implement, fail_fixable: implement, fail_need_rebase: rebase}",
            "pr: {pass: finish, fail_fixable: implement, fail_need_rebase: rebase}",
        )
    });
    let host = FakeHost::new(dir.path())
        .script("implement", vec![ok("STATUS: done")])
        .script("review", vec![ok(PASSING)])
        .script("simplify", vec![ok("RESULT: pass")]);
    let outcome = start(&w, &host).await.unwrap();
    assert!(
        reason(&outcome).contains("\"Issue 13\" does not read `[tag][#N] text`"),
        "{}",
        reason(&outcome)
    );
    assert!(host.artifact("pr-iter-1.json").is_some());
}
