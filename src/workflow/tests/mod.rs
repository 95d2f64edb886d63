//! Tests of the workflow module: spec validation here, the engine loop with
//! a fake host in `engine`, command gates against real git in `gates`, the
//! commit-report step in `commit`, the `ci` gate in `ci`, the events'
//! original names in `names`, one-stage runs in `one_stage`, checkpoints
//! of the format before the git kinds' section in `checkpoint`.

mod checkpoint;
mod ci;
mod commit;
mod engine;
mod gates;
mod host;
mod names;
mod one_stage;

use serde_json::Value;

use super::compile::{SpecProblem, Workflow};
use super::spec::WorkflowSpec;

pub(super) const EXAMPLE: &str = include_str!("implement_review.yaml");

/// Parses YAML the way the bundle loader does (YAML → JSON value → type).
pub(super) fn spec(yaml: &str) -> WorkflowSpec {
    let value: Value = serde_saphyr::from_str(yaml).unwrap();
    serde_json::from_value(value).unwrap()
}

pub(super) fn compile(yaml: &str) -> Workflow {
    Workflow::compile(spec(yaml), "v1").unwrap_or_else(|e| panic!("{e}"))
}

fn problems(yaml: &str) -> Vec<SpecProblem> {
    match Workflow::compile(spec(yaml), "v1") {
        Ok(_) => panic!("expected problems"),
        Err(e) => e.0,
    }
}

fn has(problems: &[SpecProblem], path: &str, text: &str) -> bool {
    problems
        .iter()
        .any(|p| p.path == path && p.message.contains(text))
}

#[test]
fn the_example_compiles_with_the_documented_events() {
    let w = compile(EXAMPLE);
    let events =
        |s: &str| -> Vec<String> { w.stage_info(s).unwrap().events.iter().cloned().collect() };
    assert_eq!(events("implement"), ["done", "not_done", "parse_fail"]);
    assert_eq!(events("review"), ["fail", "pass"]);
    assert_eq!(events("simplify"), ["fail", "pass"]);
    assert_eq!(events("pr"), ["fail_fixable", "fail_need_rebase", "pass"]);
    assert_eq!(events("rebase"), ["conflict", "ok"]);
    assert_eq!(
        w.stage_info("implement").unwrap().gate.as_deref(),
        Some("parse")
    );
    assert_eq!(w.next("pr", "fail_need_rebase"), Some("rebase"));
    assert_eq!(w.spec.limits.max_steps, 200);
    assert_eq!(w.spec.limits.max_iterations, 10);
    assert!(super::validate(&spec(EXAMPLE)).is_empty());
}

#[test]
fn a_missing_pair_is_named() {
    let yaml = EXAMPLE.replace(
        "review: {pass: simplify, fail: implement}",
        "review: {pass: simplify}",
    );
    let p = problems(&yaml);
    assert_eq!(
        p,
        vec![SpecProblem {
            path: "workflow.transitions.review".into(),
            message: "missing transition: review + fail".into()
        }]
    );
    let yaml = EXAMPLE.replace("  rebase: {ok: implement, conflict: fatal}\n", "");
    let p = problems(&yaml);
    assert!(
        has(
            &p,
            "workflow.transitions.rebase",
            "missing transition: rebase + ok"
        ),
        "{p:?}"
    );
    assert!(
        has(
            &p,
            "workflow.transitions.rebase",
            "missing transition: rebase + conflict"
        ),
        "{p:?}"
    );
}

#[test]
fn unknown_stages_events_and_targets_are_all_reported() {
    let yaml = EXAMPLE
        .replace(
            "start: implement",
            "start: implemnt\nrun_alone: [simplify, tidy]",
        )
        .replace(
            "review: {pass: simplify, fail: implement}",
            "review: {pass: simplfy, fail: implement, maybe: pr}",
        )
        .replace("limits:\n", "limits:\n  max_steps: 0\n")
        .replace("    parse: 3", "    parse: 3\n    lint: 2")
        .replace("    review: 4", "    review: 4\n    pr: 2")
        + "  ghost: {done: finish}\n";
    let yaml = yaml
        .replace("  ghost: {done: finish}\n", "")
        .replace("transitions:\n", "transitions:\n  ghost: {done: finish}\n");
    let p = problems(&yaml);
    assert!(
        has(&p, "workflow.start", "unknown stage \"implemnt\""),
        "{p:?}"
    );
    assert!(
        has(&p, "workflow.run_alone[1]", "unknown stage \"tidy\""),
        "{p:?}"
    );
    assert!(
        !p.iter().any(|p| p.path == "workflow.run_alone[0]"),
        "{p:?}"
    );
    assert!(
        has(
            &p,
            "workflow.transitions.review.pass",
            "unknown target stage \"simplfy\""
        ),
        "{p:?}"
    );
    assert!(
        has(
            &p,
            "workflow.transitions.review.maybe",
            "unknown event \"maybe\" for stage \"review\" (it emits: fail, pass)"
        ),
        "{p:?}"
    );
    assert!(
        has(&p, "workflow.transitions.ghost", "unknown stage \"ghost\""),
        "{p:?}"
    );
    assert!(has(&p, "workflow.limits.max_steps", "at least 1"), "{p:?}");
    assert!(
        has(
            &p,
            "workflow.limits.failure_streak.lint",
            "unknown gate \"lint\""
        ),
        "{p:?}"
    );
    assert!(
        has(
            &p,
            "workflow.limits.no_improvement_streak.pr",
            "not a `score` stage"
        ),
        "{p:?}"
    );
    assert_eq!(p.len(), 8, "{p:#?}");
}

#[test]
fn stage_problems_name_their_key_paths() {
    let yaml = EXAMPLE
        .replace(
            "Review the change for issue {{ issue }}.",
            "Review {{ issue ",
        )
        .replace(r"(?m)^RESULT: (?P<event>\w+)$", "RESULT: (")
        .replace(
            "    builtin: rebase\n",
            "    builtin: rebase\n    argv: [git, rebase]\n",
        )
        .replace(
            "  simplify:\n    kind: agent",
            "  finish:\n    kind: agent\n    prompt: x\n  simplify:\n    kind: agent",
        );
    let p = problems(&yaml);
    assert!(
        has(&p, "workflow.stages.review.prompt", "invalid template"),
        "{p:?}"
    );
    assert!(
        has(&p, "workflow.stages.simplify.result.regex", "invalid regex"),
        "{p:?}"
    );
    assert!(
        has(
            &p,
            "workflow.stages.rebase.argv",
            "either `argv` or `builtin`"
        ),
        "{p:?}"
    );
    assert!(has(&p, "workflow.stages.finish", "reserved"), "{p:?}");
}

#[test]
fn attempt_caps_need_a_stage_and_a_pass_event() {
    let yaml = EXAMPLE
        .replace("    simplify: {max: 3, on_exceed: pass}", "    simplify: {max: 3, on_exceed: pass, pass_event: done}\n    nope: {max: 1, on_exceed: fatal}");
    let p = problems(&yaml);
    assert!(
        has(
            &p,
            "workflow.limits.attempts.simplify.pass_event",
            "\"done\" is not an event"
        ),
        "{p:?}"
    );
    assert!(
        has(&p, "workflow.limits.attempts.nope", "unknown stage"),
        "{p:?}"
    );
}

#[test]
fn unknown_keys_are_rejected_by_serde() {
    let yaml = EXAMPLE.replace("    kind: score\n", "    kind: score\n    treshold: 3\n");
    let value: Value = serde_saphyr::from_str(&yaml).unwrap();
    let err = serde_json::from_value::<WorkflowSpec>(value)
        .unwrap_err()
        .to_string();
    assert!(err.contains("treshold"), "{err}");
}

#[test]
fn the_schema_is_generated() {
    let schema = schemars::schema_for!(WorkflowSpec);
    let text = serde_json::to_string(&schema).unwrap();
    assert!(text.contains("no_improvement_streak") && text.contains("py_compile"));
}
