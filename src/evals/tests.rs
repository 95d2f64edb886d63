#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

use std::path::Path;
use std::time::Duration;

use serde_json::json;

use super::case::parse_cases;
use super::promptfoo;
use super::*;

fn spec(value: serde_json::Value) -> GraderSpec {
    serde_json::from_value(value).unwrap()
}

fn case(expected: serde_json::Value) -> EvalCase {
    EvalCase {
        id: "c".into(),
        input: "hi".into(),
        variables: Default::default(),
        messages: None,
        expected: expected.as_object().cloned().unwrap_or_default(),
        tags: vec![],
        graders: vec![],
        threshold: None,
        tool_results: Default::default(),
    }
}

fn answered(text: &str) -> Observed {
    Observed {
        answer: Some(text.into()),
        ..Observed::default()
    }
}

fn grade(spec: &GraderSpec, case: &EvalCase, observed: &Observed) -> Grade {
    match spec.grade(&case.expected, observed) {
        Verdict::Done(grade) => grade,
        other => panic!("expected a grade, got {other:?}"),
    }
}

#[test]
fn text_checks_pass_and_fail_with_reasons() {
    let c = case(json!({}));
    let seen = answered("Refunded 90 EUR to Ada");
    for (check, pass) in [
        (json!({"type": "contains", "value": "90 EUR"}), true),
        (json!({"type": "contains", "value": "250"}), false),
        (
            json!({"type": "icontains", "value": "refunded 90 eur"}),
            true,
        ),
        (
            json!({"type": "regex", "value": "^Refunded \\d+ EUR"}),
            true,
        ),
        (json!({"type": "regex", "value": "^\\d+$"}), false),
        (
            json!({"type": "equals", "value": "Refunded 90 EUR to Ada"}),
            true,
        ),
        (json!({"type": "equals", "value": "Refunded 90 EUR"}), false),
        (
            json!({"type": "contains", "value": "250", "not": true}),
            true,
        ),
        (json!({"type": "is_json"}), false),
    ] {
        let g = grade(&spec(check.clone()), &c, &seen);
        assert_eq!(g.pass, pass, "{check}: {}", g.reason);
        assert_eq!(g.score, if pass { 1.0 } else { 0.0 }, "{check}");
        assert!(!g.reason.is_empty());
    }
}

#[test]
fn json_checks_read_the_answer_and_its_schema() {
    let c = case(json!({}));
    let schema = json!({"type": "object", "required": ["amount"], "properties": {"amount": {"type": "integer"}}});
    let is_json = spec(json!({"type": "is_json", "schema": schema}));
    assert!(grade(&is_json, &c, &answered(r#"{"amount": 90}"#)).pass);
    let wrong = grade(&is_json, &c, &answered(r#"{"amount": "90"}"#));
    assert!(
        !wrong.pass && wrong.reason.contains("/amount"),
        "{}",
        wrong.reason
    );
    let contains = spec(json!({"type": "contains_json", "schema": schema}));
    assert!(
        grade(
            &contains,
            &c,
            &answered(r#"Done: {"note": 1} then {"amount": 90}."#)
        )
        .pass
    );
    assert!(!grade(&contains, &c, &answered("no json [here")).pass);
    let equals = spec(json!({"type": "equals", "value": {"amount": 90}}));
    assert!(grade(&equals, &c, &answered(r#"{ "amount": 90 }"#)).pass);
}

#[test]
fn expected_values_come_from_the_case_and_a_case_without_one_is_skipped() {
    let g = spec(json!({"type": "contains", "expected": "amount"}));
    let with = case(json!({"amount": 90}));
    assert!(grade(&g, &with, &answered("refunded 90")).pass);
    assert!(!grade(&g, &with, &answered("refunded 250")).pass);
    assert_eq!(
        g.grade(&case(json!({})).expected, &answered("x")),
        Verdict::Skip
    );
}

#[test]
fn tool_calls_check_called_never_order_and_arguments_with_partial_credit() {
    let seen = Observed {
        answer: Some("ok".into()),
        tool_calls: vec![
            ObservedCall {
                name: "lookup".into(),
                arguments: json!({"id": 7}),
            },
            ObservedCall {
                name: "refund".into(),
                arguments: json!({"amount": 90}),
            },
        ],
        ..Observed::default()
    };
    let c = case(json!({}));
    let good = spec(json!({
        "type": "tool_calls", "called": ["refund"], "never": ["delete"], "order": ["lookup", "refund"],
        "arguments": {"refund": {"properties": {"amount": {"maximum": 100}}}}
    }));
    assert!(grade(&good, &c, &seen).pass);
    let bad = spec(json!({
        "type": "tool_calls", "called": ["refund", "email"], "never": ["lookup"], "order": ["refund", "lookup"],
        "arguments": {"refund": {"properties": {"amount": {"maximum": 50}}}}
    }));
    let g = grade(&bad, &c, &seen);
    assert!(!g.pass);
    assert_eq!(g.score, 0.2, "1 of 5 parts passed: {}", g.reason);
    for part in [
        "`email` was never called",
        "`lookup` was called",
        "in that order",
        "`refund` was called with",
    ] {
        assert!(g.reason.contains(part), "{part} in {}", g.reason);
    }
}

#[test]
fn limits_and_a_job_that_gave_no_answer() {
    let seen = Observed {
        answer: None,
        error: Some("max_turns reached".into()),
        turns: 5,
        tokens: 900,
        cost_usd: 0.02,
        duration: Duration::from_millis(1500),
        ..Observed::default()
    };
    let c = case(json!({}));
    let limits = spec(
        json!({"type": "limits", "max_turns": 4, "max_tokens": 1000, "max_cost_usd": 0.01, "max_duration": "1s"}),
    );
    let g = grade(&limits, &c, &seen);
    assert!(!g.pass && g.score == 0.25, "{g:?}");
    let contains = grade(&spec(json!({"type": "contains", "value": "x"})), &c, &seen);
    assert!(
        !contains.pass && contains.reason.contains("max_turns reached"),
        "{}",
        contains.reason
    );
}

#[test]
fn a_case_scores_by_weight_and_passes_at_its_threshold() {
    let g = |name: &str, weight: f64, score: f64| Grade {
        grader: name.into(),
        weight,
        score,
        pass: score == 1.0,
        reason: String::new(),
    };
    let all = CaseResult::new(
        "c".into(),
        vec![g("a", 3.0, 1.0), g("b", 1.0, 0.0), g("info", 0.0, 0.0)],
        None,
    );
    assert_eq!(all.score, 0.75);
    assert!(
        !all.pass,
        "without a threshold every counted grader must pass"
    );
    let at = CaseResult::new(
        "c".into(),
        vec![g("a", 3.0, 1.0), g("b", 1.0, 0.0)],
        Some(0.7),
    );
    assert!(at.pass);
    let runs =
        [all, at].map(|r| CaseReport::new(r.case.clone(), CaseRun::default().scored(r), None));
    let report = RunReport::new(
        "b".into(),
        "1".into(),
        None,
        runs.into(),
        PassRule::default(),
    );
    assert_eq!((report.passed, report.failed, report.score), (1, 1, 0.75));
    assert!(!report.pass, "{}", report.verdict);
    let at_least = PassRule {
        min_score: Some(0.7),
        no_regressions: false,
    };
    let runs = report.cases.clone();
    assert!(RunReport::new("b".into(), "1".into(), None, runs, at_least).pass);
}

#[test]
fn a_comparison_names_regressions_and_improvements_and_can_fail_on_them() {
    let run = |pass: bool| CaseRun {
        pass,
        score: f64::from(u8::from(pass)),
        ..CaseRun::default()
    };
    let cases = vec![
        CaseReport::new("kept".into(), run(true), Some(run(true))),
        CaseReport::new("broke".into(), run(false), Some(run(true))),
        CaseReport::new("fixed".into(), run(true), Some(run(false))),
    ];
    let rule = PassRule {
        min_score: Some(0.5),
        no_regressions: true,
    };
    let report = RunReport::new("b".into(), "2".into(), Some("1".into()), cases, rule);
    assert_eq!(report.regressions, ["broke"]);
    assert_eq!(report.improvements, ["fixed"]);
    assert_eq!(report.against_score, Some(2.0 / 3.0));
    assert!(!report.pass);
    assert!(report.verdict.contains("broke"), "{}", report.verdict);
}

#[test]
fn external_graders_are_the_callers_and_pass_at_their_score() {
    let judge =
        spec(json!({"type": "judge", "bundle": "judge", "rubric": "polite", "pass_score": 0.7}));
    let c = case(json!({}));
    assert_eq!(
        judge.grade(&c.expected, &answered("x")),
        Verdict::External(External::Judge {
            bundle: "judge".into(),
            rubric: "polite".into()
        })
    );
    assert!(judge.external_grade(0.8, "fine".into()).pass);
    assert!(!judge.external_grade(f64::NAN, "?".into()).pass);
}

#[test]
fn graders_that_could_never_grade_are_refused_with_the_reason() {
    for (bad, says) in [
        (json!({"type": "contains"}), "needs `value` or `expected`"),
        (json!({"type": "regex", "value": "("}), "does not compile"),
        (
            json!({"type": "is_json", "schema": {"type": 7}}),
            "not usable",
        ),
        (json!({"type": "limits", "expected": "x"}), "does not take"),
        (
            json!({"type": "judge", "bundle": "j", "rubric": "r", "pass_score": 2}),
            "from 0 to 1",
        ),
        (
            json!({"type": "contains", "value": "x", "weight": -1}),
            "0 or more",
        ),
        (
            json!({"type": "contains", "value": "x", "colour": "red"}),
            "colour",
        ),
        (json!({"type": "similar", "value": "x"}), "similar"),
    ] {
        let e = serde_json::from_value::<GraderSpec>(bad.clone())
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{bad}: {e}");
    }
}

#[test]
fn jsonl_cases_take_the_suite_graders_and_name_their_line_when_wrong() {
    let file: SuiteFile = serde_saphyr::from_str(
        "threshold: 0.5\ngraders:\n  - type: contains\n    expected: answer\n",
    )
    .unwrap();
    let text = "{\"id\": \"a\", \"input\": \"2+2\", \"expected\": {\"answer\": \"4\"}, \"tags\": [\"math\"]}\n\n\
                {\"input\": \"hi\", \"assert\": [{\"type\": \"icontains\", \"value\": \"hello\"}]}\n";
    let cases = parse_cases(Path::new("evals/basic.jsonl"), text, &file).unwrap();
    assert_eq!(cases.len(), 2);
    assert_eq!(
        (cases[0].id.as_str(), cases[1].id.as_str()),
        ("a", "basic:3")
    );
    assert_eq!(cases[1].graders.len(), 2);
    assert_eq!(cases[0].threshold, Some(0.5));
    for (bad, says) in [
        ("{\"input\": \"x\"}", "no grader grades"),
        (
            "{\"expected\": {\"answer\": 1}}",
            "neither `input` nor `messages`",
        ),
        (
            "{\"input\": \"x\", \"expected\": {\"answer\": 1}, \"extra\": 1}",
            "extra",
        ),
        ("not json", "expected"),
    ] {
        let e = parse_cases(Path::new("evals/bad.jsonl"), &format!("\n{bad}"), &file)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("evals/bad.jsonl:2") && e.contains(says),
            "{bad}: {e}"
        );
    }
}

#[test]
fn a_suite_directory_reads_jsonl_suite_yaml_and_promptfoo_and_filters_by_tag() {
    let dir = std::env::temp_dir().join(format!("sa-evals-{}", std::process::id()));
    let evals = dir.join("evals");
    std::fs::create_dir_all(&evals).unwrap();
    std::fs::write(
        evals.join("suite.yaml"),
        "graders:\n  - type: equals\n    expected: answer\n",
    )
    .unwrap();
    std::fs::write(evals.join("a.jsonl"), "{\"id\": \"one\", \"input\": \"1\", \"expected\": {\"answer\": \"1\"}, \"tags\": [\"smoke\"]}\n").unwrap();
    std::fs::write(
        evals.join("promptfooconfig.yaml"),
        "prompts: ['Say {{word}}']\ntests:\n  - vars: {word: hi}\n    assert:\n      - type: icontains\n        value: '{{word}}'\n",
    )
    .unwrap();
    let suite = Suite::load(&evals).unwrap().unwrap();
    assert_eq!(suite.cases.len(), 2);
    assert_eq!(suite.cases[1].input, "Say hi");
    assert_eq!(suite.clone().tagged(&["smoke".into()]).cases.len(), 1);
    assert_eq!(Suite::load(&dir.join("none")).unwrap(), None);
    std::fs::write(
        evals.join("b.jsonl"),
        "{\"id\": \"one\", \"input\": \"2\", \"expected\": {\"answer\": \"2\"}}\n",
    )
    .unwrap();
    let twice = Suite::load(&evals).unwrap_err().to_string();
    assert!(twice.contains("`one` is used twice"), "{twice}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn promptfoo_subset_maps_assertions_and_refuses_the_rest_by_name() {
    let file = SuiteFile {
        judge: Some("judge".into()),
        ..SuiteFile::default()
    };
    let config = r#"
description: refunds
providers: [openai:chat:anything]
prompts:
  - "Refund {{amount}} to {{who}}"
defaultTest:
  vars: {who: Ada}
  assert:
    - type: cost
      threshold: 0.01
tests:
  - description: small refund
    vars: {amount: 90}
    threshold: 0.5
    assert:
      - type: contains
        value: "{{amount}}"
        weight: 2
      - type: not-icontains
        value: error
      - type: latency
        threshold: 2500
      - type: llm-rubric
        value: polite
      - type: contains-json
      - type: is-json
        value: {type: object}
      - type: equals
        value: done
      - type: regex
        value: "^R"
"#;
    let cases = promptfoo::cases(Path::new("promptfooconfig.yaml"), config, &file).unwrap();
    let c = &cases[0];
    assert_eq!(
        (c.id.as_str(), c.input.as_str(), c.threshold),
        ("small refund", "Refund 90 to Ada", Some(0.5))
    );
    let kinds: Vec<&str> = c.graders.iter().map(|g| g.check.kind()).collect();
    assert_eq!(
        kinds,
        [
            "limits",
            "contains",
            "icontains",
            "limits",
            "judge",
            "contains_json",
            "is_json",
            "equals",
            "regex"
        ]
    );
    assert_eq!(c.graders[1].weight, 2.0);
    assert!(c.graders[2].not);
    assert_eq!(
        c.graders[1].check,
        Check::Contains {
            value: Some("90".into())
        }
    );
}

#[test]
fn promptfoo_keys_that_change_what_runs_are_refused_by_name() {
    let file = SuiteFile {
        judge: Some("judge".into()),
        ..SuiteFile::default()
    };
    for (bad, says) in [
        (
            "prompts: [a]\ntests:\n  - assert: [{type: similar, value: x}]\n",
            "`similar`",
        ),
        ("prompts: [a, b]\ntests: []\n", "2 prompts"),
        (
            "prompts: [a]\nscenarios: []\ntests: []\n",
            "top-level `scenarios`",
        ),
        ("prompts: [a]\ntests: file://tests.csv\n", "from a file"),
        (
            "prompts: [a]\ntests:\n  - vars: {x: [1, 2]}\n    assert: [{type: contains, value: a}]\n",
            "one test per item",
        ),
        (
            "prompts: [a]\ntests:\n  - assert: [{type: contains, value: a, transform: x}]\n",
            "`transform`",
        ),
        ("prompts: [a]\ntests:\n  - options: {}\n", "`options`"),
        (
            "prompts: [a]\ntests:\n  - assert: [{type: cost}]\n",
            "needs `threshold`",
        ),
    ] {
        let e = promptfoo::cases(Path::new("p.yaml"), bad, &file)
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{bad}: {e}");
    }
    let no_judge = "prompts: [a]\ntests:\n  - assert: [{type: llm-rubric, value: x}]\n";
    let e = promptfoo::cases(Path::new("p.yaml"), no_judge, &SuiteFile::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("judge: BUNDLE"), "{e}");
}

#[test]
fn json_is_looked_for_at_the_first_brackets_only() {
    let c = case(json!({}));
    let contains = spec(json!({"type": "contains_json"}));
    let near = format!("{}{{\"a\": 1}}", "[".repeat(10));
    assert!(grade(&contains, &c, &answered(&near)).pass);
    let far = format!("{}{{\"a\": 1}}", "[".repeat(100_000));
    assert!(
        !grade(&contains, &c, &answered(&far)).pass,
        "past the first 64 brackets"
    );
}

#[test]
fn a_judgement_is_read_from_a_score_a_pass_or_an_object_in_prose() {
    let plain = read_judgement(r#"{"score": 0.8, "reason": "polite"}"#).unwrap();
    assert_eq!((plain.score, plain.reason.as_str()), (0.8, "polite"));
    let fenced =
        read_judgement("Sure.\n```json\n{\"pass\": true, \"reason\": \"ok\"}\n```").unwrap();
    assert_eq!(fenced.score, 1.0);
    assert_eq!(
        read_judgement(r#"{"reason": "no score"}"#),
        Err(JudgementProblem::NoScore)
    );
    assert!(matches!(
        read_judgement("eight out of ten"),
        Err(JudgementProblem::NotJson(_))
    ));
    let (input, variables) = judge_input("be polite", "hi?", "hello");
    assert!(
        input.contains("be polite") && input.contains("hello"),
        "{input}"
    );
    assert_eq!(variables["answer"], "hello");
}
