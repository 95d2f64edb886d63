//! `structured-agents verify`, the real binary: the crash matrix of a bundle
//! with one `unsafe` and one `idempotent` tool whose side effect is a line
//! appended to a file.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn bin() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_structured-agents"));
    command.env(
        "SA_MODELS_DIR",
        format!("{}/config/models", env!("CARGO_MANIFEST_DIR")),
    );
    command
}

const BUNDLE: &str = r#"
name: ledger
version: "1.0.0"
model:
  endpoint: ENDPOINT
  name: m
  plugin: openai
prompts:
  system: "Keep the ledger."
  user: "{{ input }}"
limits:
  max_turns: 5
tools:
  - name: charge
    kind: process
    description: Charge a card.
    parameters: {type: object, properties: {amount: {type: number}}, required: [amount]}
    command: [python3, tools/effect.py, charge]
    effect: unsafe
  - name: record
    kind: process
    description: Record an entry.
    parameters: {type: object, properties: {entry: {type: string}}, required: [entry]}
    command: [python3, tools/effect.py, record]
    effect: idempotent
"#;

const SCRIPT: &str = r#"
replies:
  - tool_calls: [{name: charge, arguments: {amount: 5}, id: call_charge}]
  - tool_calls: [{name: record, arguments: {entry: "charged 5"}, id: call_record}]
  - content: "Charged 5 and recorded it."
"#;

/// Appends its name to effects.log in its working directory: the side effect.
const TOOL: &str = r#"
import json, sys
json.load(sys.stdin)
with open("effects.log", "a") as log:
    log.write(sys.argv[1] + "\n")
print(json.dumps({"done": sys.argv[1]}))
"#;

fn ledger(dir: &Path, endpoint: &str) {
    std::fs::create_dir_all(dir.join("tools")).unwrap();
    std::fs::write(
        dir.join("bundle.yaml"),
        BUNDLE.replace("ENDPOINT", endpoint),
    )
    .unwrap();
    std::fs::write(dir.join("script.yaml"), SCRIPT).unwrap();
    std::fs::write(dir.join("tools/effect.py"), TOOL).unwrap();
}

/// The verdict on `tool` at the crash `moment` of the write whose step
/// mentions `step`.
fn ran<'a>(report: &'a Value, moment: &str, step: &str, tool: &str) -> &'a Value {
    let point = report["crash_points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["moment"] == moment && p["step"].as_str().unwrap().contains(step))
        .unwrap_or_else(|| panic!("no crash point {moment} {step:?}: {report:#}"));
    point["calls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["tool"] == tool)
        .unwrap_or_else(|| panic!("no call of {tool} at {point:#}"))
}

#[test]
fn verify_reports_an_unsafe_and_an_idempotent_tool_at_every_crash_point() {
    let dir = tempfile::tempdir().unwrap();
    ledger(dir.path(), "scripted:script.yaml");
    let out = bin()
        .args(["verify", dir.path().to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();

    // reply, start of charge, result of charge, reply, result of record
    // (an idempotent call has no start marker), reply: 6 writes, 12 points.
    assert_eq!(report["writes"].as_array().unwrap().len(), 6, "{report:#}");
    assert_eq!(report["crash_points"].as_array().unwrap().len(), 12);
    assert_eq!(report["reference"], "no_tool_calls");
    assert_eq!(report["violations"], 0);

    // The unsafe call: cut after its start marker, it never runs again on
    // its own and the job parks; cut after it ran, it is not repeated.
    let cut = ran(&report, "after", "start of charge", "charge");
    assert_eq!(
        (&cut["ran"], &cut["parked"], &cut["runs"]),
        (&"never".into(), &true.into(), &0.into())
    );
    assert!(cut.get("violation").is_none(), "{cut:#}");
    let after_effect = ran(&report, "before", "result of charge", "charge");
    assert_eq!(
        (&after_effect["ran"], &after_effect["parked"]),
        (&"once".into(), &true.into())
    );
    assert_eq!(
        ran(&report, "after", "start of charge", "record")["ran"],
        "not_reached"
    );

    // The idempotent call: its result lost, it runs again (with the same
    // key), which its declaration allows.
    let repeated = ran(&report, "before", "result of record", "record");
    assert_eq!(
        (&repeated["ran"], &repeated["runs"]),
        (&"twice".into(), &2.into())
    );
    assert!(repeated.get("violation").is_none(), "{repeated:#}");

    let tools = report["tools"].as_array().unwrap();
    let charge = tools.iter().find(|t| t["tool"] == "charge").unwrap();
    assert_eq!(charge["effect"], "unsafe");
    assert_eq!(
        (&charge["twice"], &charge["never_parked"], &charge["once"]),
        (&0.into(), &1.into(), &11.into())
    );
    let record = tools.iter().find(|t| t["tool"] == "record").unwrap();
    assert_eq!(record["effect"], "idempotent");
    assert_eq!(
        (&record["twice"], &record["never"], &record["once"]),
        (&1.into(), &0.into(), &9.into())
    );

    // The tools ran in copies of the bundle, never in the bundle itself.
    assert!(!dir.path().join("effects.log").exists());

    // The table says the same for people.
    let out = bin()
        .args(["verify", dir.path().to_str().unwrap()])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{table}");
    assert!(table.contains("never, parks"), "{table}");
    assert!(table.contains("twice (2×)"), "{table}");
    assert!(
        table.contains("verdict: every call keeps its declared effect at all 12 crash points"),
        "{table}"
    );
}

#[test]
fn verify_never_calls_a_model_server_and_takes_the_replies_from_exchange() {
    let dir = tempfile::tempdir().unwrap();
    ledger(dir.path(), "http://127.0.0.1:9/v1");
    let bundle = dir.path().to_str().unwrap();
    let out = bin().args(["verify", bundle]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--exchange FILE") && stderr.contains("ledger"),
        "{stderr}"
    );

    let script = dir.path().join("script.yaml");
    let out = bin()
        .args([
            "verify",
            bundle,
            "--json",
            "--exchange",
            script.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["crash_points"].as_array().unwrap().len(), 12);
}
