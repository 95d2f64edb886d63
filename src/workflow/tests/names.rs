//! The events' original names (`lol impl`'s `impl_done`, `parse_fail`,
//! `pr_fail_need_rebase`, …): `<event_prefix>_<event>`, accepted in
//! `transitions` and reported beside our event in stage reports, the
//! checkpoint history and the fatal report.

use serde_json::{Map, json};

use super::host::{FakeHost, Reply, ok};
use super::{EXAMPLE, compile, has, problems};
use crate::workflow::{Engine, StageRecord, WorkflowStatus};

/// Every event of the example under its original name: exactly the names
/// `lol impl` emitted (its `state.py`).
#[test]
fn the_example_names_its_events_as_the_original() {
    let w = compile(EXAMPLE);
    let mut names: Vec<String> = w
        .spec
        .stages
        .keys()
        .flat_map(|stage| {
            let info = w.stage_info(stage).unwrap();
            info.events
                .iter()
                .map(|e| w.original_event(stage, e))
                .collect::<Vec<_>>()
        })
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "impl_done",
            "impl_not_done",
            "parse_fail",
            "pr_fail_fixable",
            "pr_fail_need_rebase",
            "pr_pass",
            "rebase_conflict",
            "rebase_ok",
            "review_fail",
            "review_pass",
            "simp_fail",
            "simp_pass",
        ]
    );
    // The engine's `error` (a problem no retry fixes) was the original's `fatal`.
    assert_eq!(w.original_event("implement", "error"), "fatal");
}

#[test]
fn transitions_accept_every_stages_original_names() {
    let yaml = EXAMPLE
        .replace(
            "implement: {not_done: implement, parse_fail: implement, done: review}",
            "implement: {impl_not_done: implement, parse_fail: implement, impl_done: review}",
        )
        .replace(
            "review: {pass: simplify, fail: implement}",
            "review: {review_pass: simplify, review_fail: implement}",
        )
        .replace(
            "simplify: {pass: pr, fail: implement}",
            "simplify: {simp_pass: pr, simp_fail: implement}",
        )
        .replace(
            "pr: {pass: finish, fail_fixable: implement, fail_need_rebase: rebase}",
            "pr: {pr_pass: finish, pr_fail_fixable: implement, pr_fail_need_rebase: rebase}",
        )
        .replace(
            "rebase: {ok: implement, conflict: fatal}",
            "rebase: {rebase_ok: implement, rebase_conflict: fatal}",
        );
    let w = compile(&yaml);
    assert_eq!(w.next("implement", "done"), Some("review"));
    assert_eq!(w.next("implement", "not_done"), Some("implement"));
    assert_eq!(w.next("review", "fail"), Some("implement"));
    assert_eq!(w.next("simplify", "pass"), Some("pr"));
    assert_eq!(w.next("pr", "fail_need_rebase"), Some("rebase"));
    assert_eq!(w.next("rebase", "conflict"), Some("fatal"));

    let both = EXAMPLE.replace("pr: {pass: finish,", "pr: {pass: finish, pr_pass: finish,");
    let p = problems(&both);
    assert!(
        has(
            &p,
            "workflow.transitions.pr.pr_pass",
            "another name of \"pass\""
        ),
        "{p:?}"
    );
    // The prefix is the stage's: `simplify_pass` is no name of simplify's `pass`.
    let wrong = EXAMPLE.replace("simplify: {pass: pr,", "simplify: {simplify_pass: pr,");
    let p = problems(&wrong);
    assert!(
        has(
            &p,
            "workflow.transitions.simplify.simplify_pass",
            "unknown event"
        ),
        "{p:?}"
    );
}

#[test]
fn the_prefix_defaults_to_the_stage_name_and_is_checked() {
    let w = compile(&EXAMPLE.replace("    event_prefix: simp\n", ""));
    assert_eq!(w.original_event("simplify", "pass"), "simplify_pass");
    let w = compile(&EXAMPLE.replace("event_prefix: simp", "event_prefix: \"\""));
    assert_eq!(w.original_event("simplify", "pass"), "pass");

    let p = problems(&EXAMPLE.replace("event_prefix: simp", "event_prefix: \"si mp\""));
    assert!(
        has(
            &p,
            "workflow.stages.simplify.event_prefix",
            "invalid prefix"
        ),
        "{p:?}"
    );
    let p = problems(&EXAMPLE.replace(
        "        builtin: py_compile\n",
        "        builtin: py_compile\n        event_prefix: parse\n",
    ));
    assert!(
        has(
            &p,
            "workflow.stages.implement.gate.check.event_prefix",
            "applies to stages only"
        ),
        "{p:?}"
    );
    // The gate's failure event named `impl_done` collides with `done`'s name.
    let p = problems(
        &EXAMPLE
            .replace(
                "      name: parse\n",
                "      name: parse\n      on_fail: impl_done\n",
            )
            .replace("parse_fail: implement", "impl_done: implement"),
    );
    assert!(
        has(
            &p,
            "workflow.stages.implement.event_prefix",
            "would both be named \"impl_done\""
        ),
        "{p:?}"
    );
}

const FLOW: &str = r#"
start: implement
stages:
  implement:
    kind: agent
    event_prefix: impl
    prompt: "Implement"
    result: {regex: 'STATUS: (\w+)', events: [done], otherwise: not_done}
    gate:
      name: parse
      check: {argv: [sh, -c, "exit $(cat parse_code 2>/dev/null || echo 0)"]}
  rebase:
    kind: command
    argv: [sh, -c, "exit 1"]
    exit_codes: {0: ok, 1: conflict}
    pass_events: [ok]
transitions:
  implement: {impl_not_done: implement, parse_fail: implement, impl_done: rebase}
  rebase: {rebase_ok: finish, rebase_fail: fatal, rebase_conflict: fatal}
"#;

#[tokio::test]
async fn reports_history_and_the_fatal_report_carry_both_names() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("parse_code"), "1").unwrap();
    let w = compile(FLOW);
    let host = FakeHost::new(dir.path()).script(
        "implement",
        vec![
            ok("working"),
            ok("STATUS: done"),
            Reply {
                result: Ok("STATUS: done".into()),
                files: vec![("parse_code", None)],
            },
        ],
    );
    let outcome = Engine::new(&w, &host, dir.path())
        .start(&Map::new())
        .await
        .unwrap();
    assert_eq!(outcome.status, WorkflowStatus::Fatal);
    let reported: Vec<(String, String)> = host
        .reports
        .lock()
        .unwrap()
        .iter()
        .map(|r| (r.event.clone(), r.original_event.clone()))
        .collect();
    let pairs = |items: &[(&str, &str)]| -> Vec<(String, String)> {
        items
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    let expected = pairs(&[
        ("not_done", "impl_not_done"),
        ("parse_fail", "parse_fail"),
        ("done", "impl_done"),
        ("conflict", "rebase_conflict"),
    ]);
    assert_eq!(reported, expected);
    let history: Vec<(String, String)> = outcome
        .checkpoint
        .history
        .iter()
        .map(|r| (r.event.clone(), r.original_event.clone()))
        .collect();
    assert_eq!(history, expected);
    let fatal = outcome.fatal().unwrap();
    assert_eq!(fatal.event.as_deref(), Some("conflict"));
    assert_eq!(fatal.original_event.as_deref(), Some("rebase_conflict"));
    let artifact = host.artifact(crate::workflow::FATAL_ARTIFACT).unwrap();
    assert_eq!(artifact["original_event"], "rebase_conflict");
}

/// A checkpoint stored before the original names were recorded still loads.
#[test]
fn an_older_history_record_loads_without_the_original_name() {
    let record: StageRecord = serde_json::from_value(json!({
        "step": 1, "stage": "implement", "event": "done", "iteration": 1,
        "reason": "agent result", "next": "review", "duration_ms": 3
    }))
    .unwrap();
    assert_eq!(
        (record.event.as_str(), record.original_event.as_str()),
        ("done", "")
    );
}
