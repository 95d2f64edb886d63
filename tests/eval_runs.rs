//! A bundle's eval runs and suite over the API (issue 52 item 5, what the
//! console's Evals panel reads): `GET /v1/bundles/{name}/evals` lists the
//! bundle's `eval` jobs the caller may see — its own; every key's with
//! `read_all`; none of a bundle outside its globs — newest first, bounded
//! by `limit`, each with its report's summary, and the versions an eval
//! may name; `GET /v1/bundles/{name}/evals/suite` lists the loaded
//! version's cases, and an empty list with a sentence for a bundle
//! without a suite.

mod common;

use std::time::Duration;

use common::daemon::{Daemon, Site, client_as, eventually, new_key, wait_terminal};
use common::mock_server;
use serde_json::{Value, json};

/// The calculator, version `VERSION`, its prompt tagged so the mock
/// answers each version its own way.
const CALC: &str = r#"name: calc
version: "VERSION"
model: {endpoint: mock, name: m}
prompts: {user: "QVERSION: {{ input }}"}
"#;

const CASES: &str = r#"{"id": "sum", "input": "add 2 and 3", "expected": {"answer": "5"}, "tags": ["smoke"], "assert": [{"type": "tool_calls", "never": ["rm"]}]}
{"id": "hello", "input": "say hello", "expected": {"answer": "hello"}, "tags": ["smoke"]}
{"id": "capital", "input": "capital of France"}
"#;

const SUITE: &str =
    "graders:\n  - type: contains\n    expected: answer\n  - type: limits\n    max_turns: 3\n";

/// Version 1 answers every case right; version 2 regresses on `hello`.
const SCRIPT: &str = r#"
replies:
  - {match: "Q1: add 2 and 3", content: "5"}
  - {match: "Q1: say hello", content: "hello"}
  - {match: "Q1: capital of France", content: "Paris"}
  - {match: "Q2: add 2 and 3", content: "5"}
  - {match: "Q2: say hello", content: "bye"}
  - {match: "Q2: capital of France", content: "Paris"}
"#;

fn put_calc(site: &Site, version: u32) {
    let evals = site.path().join("bundles/calc/evals");
    std::fs::create_dir_all(&evals).unwrap();
    std::fs::write(evals.join("cases.jsonl"), CASES).unwrap();
    std::fs::write(evals.join("suite.yaml"), SUITE).unwrap();
    site.put_bundle("calc", &CALC.replace("VERSION", &version.to_string()));
}

/// Starts an eval of calc as `token` with `body`; waits for its end.
async fn evaluate(daemon: &Daemon, token: &str, body: Value) -> Value {
    let http = client_as(token);
    let started = http
        .post(daemon.url("/v1/bundles/calc/evals"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 201);
    let job: Value = started.json().await.unwrap();
    let id = job["id"].as_str().unwrap();
    let ended = wait_terminal(&http, daemon, id, Duration::from_secs(60)).await;
    assert_eq!(ended["state"], "succeeded", "{ended}");
    ended
}

/// `GET path` as `token`: the status and the answer.
async fn read(daemon: &Daemon, token: &str, path: &str) -> (u16, Value) {
    let response = client_as(token).get(daemon.url(path)).send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

fn run_ids(answer: &Value) -> Vec<&str> {
    answer["runs"]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"))
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect()
}

/// The runs listed are bounded: 1 to 100 (`newest` is the newest run).
async fn bounded(daemon: &Daemon, admin: &str, newest: &str) {
    let (_, one) = read(daemon, admin, "/v1/bundles/calc/evals?limit=1").await;
    assert_eq!(run_ids(&one), [newest]);
    for limit in ["0", "101"] {
        let (status, body) = read(
            daemon,
            admin,
            &format!("/v1/bundles/calc/evals?limit={limit}"),
        )
        .await;
        assert_eq!(
            (status, body["error"]["field"].as_str()),
            (422, Some("limit")),
            "{body}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bundles_runs_are_listed_as_the_policy_lets_each_key_see_them() {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    let keys = site.path().join("keys.toml");
    let admin = new_key(&keys, "ops", &["--scopes", "admin"]);
    let team = new_key(
        &keys,
        "team",
        &["--scopes", "submit,read", "--bundles", "calc"],
    );
    let other = new_key(
        &keys,
        "other",
        &["--scopes", "submit,read", "--bundles", "calc"],
    );
    let outsider = new_key(
        &keys,
        "outsider",
        &["--scopes", "read_all", "--bundles", "judge"],
    );
    put_calc(&site, 1);
    let daemon = site.start();
    let theirs = evaluate(&daemon, &other, json!({})).await;
    put_calc(&site, 2);
    eventually(Duration::from_secs(20), "version 2 to load", || async {
        let (_, b) = read(&daemon, &admin, "/v1/bundles/calc").await;
        (b["version"] == "2").then_some(())
    })
    .await;
    let ours = evaluate(&daemon, &team, json!({"against": "1"})).await;

    // The team's key sees its own run, with the report's summary.
    let (status, mine) = read(&daemon, &team, "/v1/bundles/calc/evals").await;
    assert_eq!(status, 200, "{mine}");
    assert_eq!(run_ids(&mine), [ours["id"].as_str().unwrap()], "{mine}");
    let run = &mine["runs"][0];
    assert_eq!(
        (
            &run["state"],
            &run["version"],
            &run["against"],
            &run["owner"]
        ),
        (
            &json!("succeeded"),
            &json!("2"),
            &json!("1"),
            &json!("team")
        ),
        "{run}"
    );
    assert_eq!(
        (&run["passed"], &run["failed"], &run["pass"]),
        (&json!(2), &json!(1), &json!(false)),
        "{run}"
    );
    assert_eq!(run["regressions"], json!(["hello"]), "{run}");
    // `hello` fails its `contains` and passes its `limits`: half a case.
    assert!(
        (run["score"].as_f64().unwrap() - 2.5 / 3.0).abs() < 1e-9,
        "{run}"
    );
    assert_eq!(run["against_score"], json!(1.0), "{run}");
    assert!(run["verdict"].as_str().unwrap().contains("failed"), "{run}");
    assert_eq!(mine["versions"], json!(["2", "1"]), "{mine}");

    // Another team's key sees its own only; `read_all` sees both, newest
    // first, and none of their case jobs.
    let (_, others) = read(&daemon, &other, "/v1/bundles/calc/evals").await;
    assert_eq!(run_ids(&others), [theirs["id"].as_str().unwrap()]);
    let (_, all) = read(&daemon, &admin, "/v1/bundles/calc/evals").await;
    assert_eq!(
        run_ids(&all),
        [ours["id"].as_str().unwrap(), theirs["id"].as_str().unwrap()]
    );
    // A key whose globs leave the bundle out learns nothing of it.
    let (status, body) = read(&daemon, &outsider, "/v1/bundles/calc/evals").await;
    assert_eq!(status, 404, "{body}");
    let (status, _) = read(&daemon, &outsider, "/v1/bundles/calc/evals/suite").await;
    assert_eq!(status, 404);

    bounded(&daemon, &admin, ours["id"].as_str().unwrap()).await;
    let (status, _) = read(&daemon, &admin, "/v1/bundles/nothing/evals").await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_suite_lists_each_case_with_its_graders_or_says_there_is_none() {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    let reader = new_key(
        &site.path().join("keys.toml"),
        "reader",
        &["--scopes", "read"],
    );
    put_calc(&site, 1);
    site.put_bundle(
        "bare",
        "name: bare\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\n",
    );
    let daemon = site.start();

    let (status, suite) = read(&daemon, &reader, "/v1/bundles/calc/evals/suite").await;
    assert_eq!(status, 200, "{suite}");
    assert_eq!(
        (&suite["version"], &suite["note"]),
        (&json!("1"), &Value::Null)
    );
    let case = |id: &str| {
        suite["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no case {id}: {suite}"))
    };
    let sum = case("sum");
    assert_eq!(
        sum["graders"],
        json!(["contains", "limits", "tool_calls"]),
        "{sum}"
    );
    assert_eq!(
        (&sum["tags"], &sum["input"]),
        (&json!(["smoke"]), &json!("add 2 and 3"))
    );
    // A case without the `answer` its grader reads is not graded by it.
    assert_eq!(case("capital")["graders"], json!(["limits"]));

    let (status, bare) = read(&daemon, &reader, "/v1/bundles/bare/evals/suite").await;
    assert_eq!(status, 200, "{bare}");
    assert_eq!(bare["cases"], json!([]), "{bare}");
    assert!(
        bare["note"].as_str().unwrap().contains("no eval suite"),
        "{bare}"
    );
    let (status, runs) = read(&daemon, &reader, "/v1/bundles/bare/evals").await;
    assert_eq!((status, &runs["runs"]), (200, &json!([])), "{runs}");

    // Version 2 adds a case: the serving version's suite has it, version
    // 1's (one the daemon served) does not; a version it never knew is a
    // 404 naming where the versions are listed.
    // (The version first, then its cases: version 1 never holds the new
    // case, whichever reload sees what.)
    site.put_bundle("calc", &CALC.replace("VERSION", "2"));
    let extra = r#"{"id": "extra", "input": "one more", "expected": {"answer": "1"}}"#;
    let cases = site.path().join("bundles/calc/evals/cases.jsonl");
    std::fs::write(&cases, format!("{CASES}{extra}\n")).unwrap();
    let ids = |suite: &Value| -> Vec<String> {
        suite["cases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap().to_string())
            .collect()
    };
    let serving = eventually(Duration::from_secs(30), "version 2's suite", || async {
        let (_, suite) = read(&daemon, &reader, "/v1/bundles/calc/evals/suite").await;
        (suite["version"] == "2" && ids(&suite).contains(&"extra".to_string())).then_some(suite)
    })
    .await;
    let (status, first) = read(&daemon, &reader, "/v1/bundles/calc/evals/suite?version=1").await;
    assert_eq!((status, &first["version"]), (200, &json!("1")), "{first}");
    assert!(!ids(&first).contains(&"extra".to_string()), "{first}");
    assert_eq!(ids(&first).len() + 1, ids(&serving).len());
    let (status, never) = read(&daemon, &reader, "/v1/bundles/calc/evals/suite?version=9").await;
    assert_eq!(status, 404, "{never}");
    assert!(
        never["error"]["message"]
            .as_str()
            .unwrap()
            .contains("versions"),
        "{never}"
    );
}
