//! The official MCP conformance suite (`@modelcontextprotocol/conformance`,
//! npm; Node 22) against `/mcp` of the daemon on its shipped bundles (the
//! README's quick start: `arithmetic` and the others): every server
//! scenario that applies passes — logging, resources and prompts included —
//! and each one that does not apply is listed with the reason. A scenario
//! outside both lists (a new suite version) fails the test until it is
//! sorted into one. `scripts/test` installs the suite and Node 22 into
//! `~/.cache/structured-agents/mcp-conformance` and exports
//! `SA_TEST_MCP_CONFORMANCE`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The scenarios that apply to a job daemon: each must pass.
const APPLY: &[&str] = &[
    "server-initialize",
    "ping",
    "logging-set-level",
    "completion-complete",
    "tools-list",
    "server-sse-multiple-streams",
    "resources-list",
    "prompts-list",
    "dns-rebinding-protection",
];

/// The reason a scenario does not apply, by scenario: they call the
/// suite's own reference fixtures, which only its reference server has.
const NOT_APPLY: &[(&str, &str)] = &[
    (
        "tools-call-simple-text",
        "calls the reference tool test_simple_text",
    ),
    (
        "tools-call-image",
        "calls the reference tool test_image_content",
    ),
    (
        "tools-call-audio",
        "calls the reference tool test_audio_content",
    ),
    (
        "tools-call-embedded-resource",
        "calls the reference tool test_embedded_resource",
    ),
    (
        "tools-call-mixed-content",
        "calls the reference tool test_multiple_content_types",
    ),
    (
        "tools-call-with-logging",
        "calls the reference tool test_tool_with_logging",
    ),
    (
        "tools-call-error",
        "calls the reference tool test_error_handling",
    ),
    (
        "tools-call-with-progress",
        "calls the reference tool test_tool_with_progress",
    ),
    (
        "tools-call-sampling",
        "calls the reference tool test_sampling",
    ),
    (
        "tools-call-elicitation",
        "calls the reference tool test_elicitation",
    ),
    (
        "elicitation-sep1034-defaults",
        "calls the reference tool test_elicitation_sep1034_defaults",
    ),
    (
        "elicitation-sep1330-enums",
        "calls the reference tool test_elicitation_sep1330_enums",
    ),
    (
        "resources-read-text",
        "reads the reference resource test://static-text",
    ),
    (
        "resources-read-binary",
        "reads the reference resource test://static-binary",
    ),
    (
        "resources-templates-read",
        "reads the reference template test://template/{id}/data",
    ),
    (
        "resources-subscribe",
        "subscribes to the reference resource test://watched-resource",
    ),
    (
        "resources-unsubscribe",
        "unsubscribes from the reference resource test://watched-resource",
    ),
    (
        "prompts-get-simple",
        "gets the reference prompt test_simple_prompt",
    ),
    (
        "prompts-get-with-args",
        "gets the reference prompt test_prompt_with_arguments",
    ),
    (
        "prompts-get-embedded-resource",
        "gets the reference prompt test_prompt_with_embedded_resource",
    ),
    (
        "prompts-get-with-image",
        "gets the reference prompt test_prompt_with_image",
    ),
];

/// The suite's directory (node_modules with `conformance` and Node 22);
/// fails loudly when it is missing.
fn suite_dir() -> PathBuf {
    let dir = std::env::var_os("SA_TEST_MCP_CONFORMANCE")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|home| PathBuf::from(home).join(".cache/structured-agents/mcp-conformance"))
        })
        .unwrap();
    assert!(
        dir.join("node_modules/.bin/conformance").exists()
            && dir.join("node_modules/node/bin/node").exists(),
        "the MCP conformance suite is not installed in {} (run scripts/test, which installs it)",
        dir.display()
    );
    dir
}

/// Each scenario's checks: passed (all `SUCCESS`) or the failures.
fn outcomes(results: &Path) -> BTreeMap<String, Result<(), String>> {
    let mut outcomes = BTreeMap::new();
    for entry in std::fs::read_dir(results).unwrap() {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        // `server-<scenario>-<timestamp>`: the timestamp starts with the year.
        let scenario = name
            .strip_prefix("server-")
            .and_then(|rest| rest.split_once("-20").map(|(scenario, _)| scenario))
            .unwrap_or(&name)
            .to_string();
        let checks: Vec<Value> =
            serde_json::from_str(&std::fs::read_to_string(dir.join("checks.json")).unwrap())
                .unwrap();
        let failures: Vec<String> = checks
            .iter()
            .filter(|c| c["status"] != "SUCCESS" && c["status"] != "INFO")
            .map(|c| format!("{}: {}: {}", c["name"], c["status"], c["errorMessage"]))
            .collect();
        let outcome = if failures.is_empty() && !checks.is_empty() {
            Ok(())
        } else {
            Err(failures.join("; "))
        };
        outcomes.insert(scenario, outcome);
    }
    outcomes
}

#[test]
fn the_conformance_suite_passes_every_scenario_that_applies() {
    let suite = suite_dir();
    let state = tempfile::tempdir().unwrap();
    let daemon = common::daemon::serve_embedded_defaults(state.path());
    let results = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(suite.join("node_modules/node/bin/node"))
        .arg(suite.join("node_modules/.bin/conformance"))
        .args(["server", "--url", &daemon.url("/mcp"), "-o"])
        .arg(results.path())
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    let outcomes = outcomes(results.path());
    let mut wrong = Vec::new();
    for (scenario, outcome) in &outcomes {
        let applies = APPLY.contains(&scenario.as_str());
        let excused = NOT_APPLY.iter().any(|(name, _)| name == scenario);
        match (applies, excused, outcome) {
            (true, _, Ok(())) | (false, true, _) => {}
            (true, _, Err(why)) => wrong.push(format!("{scenario} applies and fails: {why}")),
            (false, false, _) => wrong.push(format!(
                "{scenario} is new: sort it into APPLY or NOT_APPLY ({outcome:?})"
            )),
        }
    }
    for scenario in APPLY {
        if !outcomes.contains_key(*scenario) {
            wrong.push(format!("{scenario} did not run"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{}\n{report}\n{}",
        wrong.join("\n"),
        daemon.log()
    );
    assert_eq!(daemon.stop(), Some(0));
}
