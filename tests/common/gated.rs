//! The calculator gated on its evals (`release: {gate: evals,
//! no_regressions: true}`), as the release gate's tests and the console's
//! Evals panel drop it: three cases, and a prompt whose `VARIANT` (`right`,
//! `wrong`, …) picks which of a test's scripted answers it gets.

use super::daemon::Site;

/// The bundle, `VERSION` and `VARIANT` to fill in.
pub const CALC: &str = r#"name: calc
version: "VERSION"
description: Answers three questions.
model: {endpoint: mock, name: m}
prompts: {user: "QVARIANT: {{ input }}"}
release: {gate: evals, no_regressions: true}
"#;

/// Its cases: each expects an answer, two tagged `smoke`.
pub const CASES: &str = r#"{"id": "sum", "input": "add 2 and 3", "expected": {"answer": "5"}, "tags": ["smoke"]}
{"id": "hello", "input": "say hello", "expected": {"answer": "hello"}, "tags": ["smoke"]}
{"id": "capital", "input": "capital of France", "expected": {"answer": "Paris"}}
"#;

/// Drops version `version` answering as `variant` into `site` — its suite
/// first, then its bundle.yaml, as an operator's copy would.
pub fn drop_version(site: &Site, version: u32, variant: &str) {
    let evals = site.path().join("bundles/calc/evals");
    std::fs::create_dir_all(&evals).unwrap();
    std::fs::write(
        evals.join("suite.yaml"),
        "graders:\n  - type: contains\n    expected: answer\n",
    )
    .unwrap();
    std::fs::write(evals.join("cases.jsonl"), CASES).unwrap();
    site.put_bundle(
        "calc",
        &CALC
            .replace("VERSION", &version.to_string())
            .replace("VARIANT", variant),
    );
}
