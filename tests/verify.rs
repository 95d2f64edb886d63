//! `structured-agents verify`, the real binary: the crash matrix of a bundle
//! with one `unsafe` and one `idempotent` tool whose side effect is a line
//! appended to a file.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

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

mod common;

use common::daemon::{Daemon, Site, client, client_as, get, new_key};

/// POSTs `body` to `path` with `token`: the status and the answer.
async fn post_as(daemon: &Daemon, token: &str, path: &str, body: Value) -> (u16, Value) {
    let response = client()
        .post(daemon.url(path))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// `POST /v1/bundles/{name}/verify` on the real daemon: the loaded bundle's
/// crash matrix is the CLI's, to the verdict; it needs the `operate` scope;
/// a bundle on a model server needs the replies in the body.
#[tokio::test(flavor = "multi_thread")]
async fn the_api_verifies_a_loaded_bundle_as_the_cli_does() {
    let site = Site::new(
        "http://127.0.0.1:9/v1",
        "[auth]\nkeys_file = \"keys.toml\"\n",
    );
    let keys = site.path().join("keys.toml");
    let operator = new_key(&keys, "ops", &["--scopes", "read,operate"]);
    let submitter = new_key(&keys, "app", &["--scopes", "submit,read"]);
    let ledger_dir = site.path().join("bundles/ledger");
    ledger(&ledger_dir, "scripted:script.yaml");
    let remote_dir = site.path().join("bundles/remote");
    ledger(&remote_dir, "mock");
    std::fs::write(
        remote_dir.join("bundle.yaml"),
        BUNDLE
            .replace("ENDPOINT", "mock")
            .replace("name: ledger", "name: remote"),
    )
    .unwrap();
    // A bundle whose prompt needs a variable: only the worker's verify
    // renders it, so only the worker can refuse it.
    let cities_dir = site.path().join("bundles/cities");
    ledger(&cities_dir, "scripted:script.yaml");
    std::fs::write(
        cities_dir.join("bundle.yaml"),
        BUNDLE
            .replace("ENDPOINT", "scripted:script.yaml")
            .replace("name: ledger", "name: cities")
            .replace("{{ input }}", "{{ input }} in {{ city }}"),
    )
    .unwrap();
    let daemon = site.start();

    let (status, report) =
        post_as(&daemon, &operator, "/v1/bundles/ledger/verify", json!({})).await;
    assert_eq!(status, 200, "{report}\n{}", daemon.log());
    let out = bin()
        .args(["verify", ledger_dir.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let cli: Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in [
        "bundle",
        "version",
        "reference",
        "writes",
        "calls",
        "crash_points",
        "tools",
        "violations",
    ] {
        assert_eq!(
            report[key], cli[key],
            "{key}: the API's {report:#}\nthe CLI's {cli:#}"
        );
    }
    assert_eq!(report["crash_points"].as_array().unwrap().len(), 12);
    // The API ran none of it: a worker ran it as a `verify` job, the key's.
    let id = report["job_id"].as_str().expect("the verify job's id");
    let job = get(&client_as(&operator), &daemon, &format!("/v1/jobs/{id}")).await;
    assert_eq!(
        (&job["state"], &job["kind"]["type"], &job["owner"]),
        (&json!("succeeded"), &json!("verify"), &json!("ops")),
        "{job:#}"
    );
    let cut = ran(&report, "after", "start of charge", "charge");
    assert_eq!(
        (&cut["ran"], &cut["parked"]),
        (&"never".into(), &true.into())
    );
    let repeated = ran(&report, "before", "result of record", "record");
    assert_eq!(repeated["ran"], "twice", "{repeated:#}");
    // The tools ran in copies under the state directory, which are gone.
    assert!(!ledger_dir.join("effects.log").exists());
    let work = site.path().join("state/verify");
    let left: Vec<_> = std::fs::read_dir(&work)
        .map(|d| d.collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "verify's copies are removed: {left:?}");

    // Verifying runs a bundle's tools: `operate`, not `submit`.
    let (status, refused) =
        post_as(&daemon, &submitter, "/v1/bundles/ledger/verify", json!({})).await;
    assert_eq!(status, 403, "{refused}");

    // A bundle bound to a model server: never called; the replies must come
    // in the body, then it verifies.
    let (status, refused) =
        post_as(&daemon, &operator, "/v1/bundles/remote/verify", json!({})).await;
    assert_eq!(status, 422, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("remote") && message.contains("`exchange`"),
        "{refused}"
    );
    assert_eq!(refused["error"]["field"], "exchange", "{refused}");
    let (status, report) = post_as(
        &daemon,
        &operator,
        "/v1/bundles/remote/verify",
        json!({"exchange": SCRIPT, "input": "charge 5"}),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["violations"], 0, "{report:#}");
    assert_eq!(report["crash_points"].as_array().unwrap().len(), 12);

    let (status, refused) = post_as(
        &daemon,
        &operator,
        "/v1/bundles/remote/verify",
        json!({"exchange": {"replies": []}}),
    )
    .await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"]["field"], "exchange", "{refused}");

    // A prompt the variables sent cannot render: the worker's verify
    // refuses it, the refusal it journaled is the route's 422, and the job
    // it names failed saying why; with the variable it verifies.
    let (status, refused) =
        post_as(&daemon, &operator, "/v1/bundles/cities/verify", json!({})).await;
    assert_eq!(status, 422, "{refused}\n{}", daemon.log());
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("cities"), "{refused}");
    let id = message
        .rsplit_once("(verify job ")
        .and_then(|(_, rest)| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("the refusal names its job: {refused}"));
    let job = get(&client_as(&operator), &daemon, &format!("/v1/jobs/{id}")).await;
    assert_eq!(job["state"], "failed", "{job:#}");
    assert!(job["error"].as_str().unwrap().contains("city"), "{job:#}");
    let (status, report) = post_as(
        &daemon,
        &operator,
        "/v1/bundles/cities/verify",
        json!({"variables": {"city": "Oslo"}}),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["violations"], 0, "{report:#}");
    assert_eq!(daemon.stop(), Some(0));
}

/// Verify never causes a real side effect unless asked (issue 46): by
/// default every tool whose effect is not `read_only` is answered by a
/// stand-in — the matrix judges it just the same — and nothing of it runs;
/// `--real-tools` runs them, many times each, with idempotency keys of this
/// verify's own.
#[test]
fn stand_ins_answer_the_tools_with_side_effects_unless_the_real_tools_are_asked() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("bundle");
    ledger(&bundle, "scripted:script.yaml");
    // The side effect lands outside the bundle's copies, where it stays.
    let outside = dir.path().join("paid.log");
    std::fs::write(
        bundle.join("tools/effect.py"),
        TOOL.replace(
            "open(\"effects.log\", \"a\")",
            &format!("open({:?}, \"a\")", outside.display().to_string()),
        ),
    )
    .unwrap();
    let verify = |extra: &[&str]| {
        let out = bin()
            .args(["verify", bundle.to_str().unwrap(), "--json"])
            .args(extra)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_str::<Value>(&stdout).unwrap()
    };

    let stood_in = verify(&[]);
    assert_eq!(stood_in["real_tools"], false);
    assert_eq!(stood_in["stand_ins"], json!(["charge", "record"]));
    assert!(
        !outside.exists(),
        "no tool with a side effect ran: {:?}",
        std::fs::read_to_string(&outside)
    );
    let results = dir.path().join("results.json");
    std::fs::write(&results, r#"{"charge": {"charged": 5}}"#).unwrap();
    let scripted = verify(&["--tool-results", results.to_str().unwrap()]);
    assert!(!outside.exists());

    let real = verify(&["--real-tools"]);
    assert_eq!(real["real_tools"], true);
    assert_eq!(real["stand_ins"], json!([]));
    let lines = std::fs::read_to_string(&outside).unwrap();
    assert!(
        lines.lines().filter(|l| *l == "charge").count() > 1,
        "the real tools ran at the crash points: {lines}"
    );
    // The same verdicts either way: a stand-in is judged as its tool is.
    for report in [&stood_in, &scripted] {
        assert_eq!(report["tools"], real["tools"], "{report:#}\n{real:#}");
        assert_eq!(report["violations"], real["violations"]);
    }
}

/// Over the API: stand-ins by default, `real_tools` on request, both with
/// `tool_results` a 422; a verify is in flight for the key's cap.
#[tokio::test(flavor = "multi_thread")]
async fn the_api_verifies_with_stand_ins_unless_real_tools_is_asked() {
    let site = Site::new(
        "http://127.0.0.1:9/v1",
        "[auth]\nkeys_file = \"keys.toml\"\n",
    );
    let keys = site.path().join("keys.toml");
    let operator = new_key(&keys, "ops", &["--scopes", "read,operate"]);
    let bundle = site.path().join("bundles/ledger");
    ledger(&bundle, "scripted:script.yaml");
    let outside = site.path().join("paid.log");
    std::fs::write(
        bundle.join("tools/effect.py"),
        TOOL.replace(
            "open(\"effects.log\", \"a\")",
            &format!("open({:?}, \"a\")", outside.display().to_string()),
        ),
    )
    .unwrap();
    let daemon = site.start();
    let (status, report) =
        post_as(&daemon, &operator, "/v1/bundles/ledger/verify", json!({})).await;
    assert_eq!(status, 200, "{report}\n{}", daemon.log());
    assert_eq!(
        report["stand_ins"],
        json!(["charge", "record"]),
        "{report:#}"
    );
    assert!(
        !outside.exists(),
        "a default verify ran a tool with a side effect"
    );
    let (status, refused) = post_as(
        &daemon,
        &operator,
        "/v1/bundles/ledger/verify",
        json!({"real_tools": true, "tool_results": {}}),
    )
    .await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"]["field"], "tool_results");
    let (status, report) = post_as(
        &daemon,
        &operator,
        "/v1/bundles/ledger/verify",
        json!({"real_tools": true}),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["real_tools"], true);
    assert!(outside.exists(), "asked for, the real tools ran");
    assert_eq!(daemon.stop(), Some(0));
}
