//! Eval runs on the real daemon (issue 52 item 3): `structured-agents
//! eval` and `POST /v1/bundles/{name}/evals` queue an `eval` job whose
//! worker submits each case as a job of the caller, grades it (checks,
//! tool-call expectations, a judge bundle, a process grader) and stores
//! the report; `--against` compares two versions case by case; exit codes
//! 0 / 1 / 2; a daemon killed mid-eval resumes without running a finished
//! case again.

mod common;

use std::time::Duration;

use common::daemon::{
    Daemon, SHORT_LEASE, Site, client, client_as, eventually, get, new_key, run_cli, wait_terminal,
};
use common::mock_server;
use serde_json::{Value, json};

/// The calculator, version `VERSION`, its user prompt tagged `TAG` so the
/// mock can answer each version its own way.
const CALC: &str = r#"name: calc
version: "VERSION"
model: {endpoint: mock, name: m}
prompts: {user: "TAG: {{ input }}"}
tools:
  - name: add
    kind: process
    effect: read_only
    description: adds a and b
    parameters: {type: object, properties: {a: {type: integer}, b: {type: integer}}, required: [a, b]}
    command: [python3, -c, "import json,sys; a=json.load(sys.stdin); print(json.dumps({'sum': a['a'] + a['b']}))"]
"#;

/// Three cases: a tool call, a greeting, a capital (the last untagged).
const CASES: &str = r#"{"id": "sum", "input": "add 2 and 3", "expected": {"answer": "5"}, "tags": ["smoke"], "assert": [{"type": "tool_calls", "called": ["add"], "arguments": {"add": {"type": "object", "properties": {"a": {"const": 2}}}}}]}
{"id": "hello", "input": "say hello", "expected": {"answer": "hello"}, "tags": ["smoke"]}
{"id": "capital", "input": "capital of France", "expected": {"answer": "Paris"}}
"#;

const SUITE: &str = "graders:\n  - type: contains\n    expected: answer\n";

/// Version 1 (`Q1`) gets the capital wrong; version 2 (`Q2`) gets the
/// capital right and the other two wrong; version 3 (`Q3`) all right.
const SCRIPT: &str = r#"
replies:
  - {match: "Q1: add 2 and 3", turn: 1, tool_calls: [{name: add, arguments: {a: 2, b: 3}}]}
  - {match: "Q1: add 2 and 3", turn: 2, content: "The sum is 5."}
  - {match: "Q1: say hello", turn: 1, content: "hello there"}
  - {match: "Q1: capital of France", turn: 1, content: "Lyon"}
  - {match: "Q2: add 2 and 3", turn: 1, content: "It is 7."}
  - {match: "Q2: say hello", turn: 1, content: "goodbye"}
  - {match: "Q2: capital of France", turn: 1, content: "Paris"}
  - {match: "Q3: add 2 and 3", turn: 1, tool_calls: [{name: add, arguments: {a: 2, b: 3}}]}
  - {match: "Q3: add 2 and 3", turn: 2, content: "5"}
  - {match: "Q3: say hello", turn: 1, content: "hello"}
  - {match: "Q3: capital of France", turn: 1, content: "Paris"}
"#;

fn calc(version: u32) -> String {
    CALC.replace("VERSION", &version.to_string())
        .replace("TAG", &format!("Q{version}"))
}

/// Writes `files` (path → text) under the site's `bundles/DIR/` (its
/// `evals/` files before its bundle.yaml, so a version drops whole).
fn put_files(site: &Site, dir: &str, files: &[(&str, &str)]) {
    let root = site.path().join("bundles").join(dir);
    for (path, text) in files {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

fn put_calc(site: &Site, version: u32) {
    put_files(
        site,
        "calc",
        &[("evals/cases.jsonl", CASES), ("evals/suite.yaml", SUITE)],
    );
    site.put_bundle("calc", &calc(version));
}

async fn serving(daemon: &Daemon, bundle: &str, version: &str) {
    let http = client();
    eventually(Duration::from_secs(20), "the new version to load", || {
        let http = http.clone();
        async move {
            let b = get(&http, daemon, &format!("/v1/bundles/{bundle}")).await;
            (b["version"] == version).then_some(())
        }
    })
    .await;
}

/// `structured-agents eval ARGS…` against `daemon`: its exit code, its
/// stdout, and its stdout as JSON (with `--json`; else Null).
fn eval_cli(daemon: &Daemon, args: &[&str]) -> (i32, String, Value) {
    let mut all = vec!["eval"];
    all.extend_from_slice(args);
    let out = run_cli(&daemon.url(""), &all, "");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let code = out.status.code().unwrap_or(-1);
    assert_ne!(
        code,
        2,
        "eval {args:?} could not run: {stdout}\n{stderr}\nlog:\n{}",
        daemon.log()
    );
    (
        code,
        stdout.clone(),
        serde_json::from_str(&stdout).unwrap_or(Value::Null),
    )
}

fn case<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["cases"]
        .as_array()
        .and_then(|cases| cases.iter().find(|c| c["case"] == id))
        .unwrap_or_else(|| panic!("no case {id} in {report}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn an_eval_runs_each_case_as_a_job_and_exits_by_the_verdict() {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    put_calc(&site, 1);
    let daemon = site.start();
    let http = client();

    let (code, stdout, _) = eval_cli(&daemon, &["calc"]);
    assert_eq!(code, 1, "one case fails: {stdout}");
    assert!(stdout.contains("FAIL  capital"), "{stdout}");
    assert!(stdout.contains("pass  sum"), "{stdout}");
    assert!(stdout.contains("1 of 3 case(s) failed"), "{stdout}");
    assert!(
        stdout.contains("Lyon"),
        "the failing grader says what it saw: {stdout}"
    );

    let (code, _, report) = eval_cli(&daemon, &["calc", "--cases", "smoke", "--json"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["cases"].as_array().unwrap().len(), 2, "{report}");
    let sum = case(&report, "sum");
    assert_eq!(sum["tool_calls"], json!(["add"]), "{sum}");
    assert_eq!(sum["turns"], 2, "{sum}");
    assert_eq!(sum["answer"], "The sum is 5.");
    // Each case is a job of its own, pinned to the version under test.
    let job = get(
        &http,
        &daemon,
        &format!("/v1/jobs/{}", sum["job_id"].as_str().unwrap()),
    )
    .await;
    assert_eq!(
        (&job["bundle"], &job["bundle_version"], &job["state"]),
        (&json!("calc"), &json!("1"), &json!("succeeded")),
        "{job}"
    );

    // The pass rule: a minimum score instead of every case.
    let (code, _, report) = eval_cli(&daemon, &["calc", "--min-score", "0.6", "--json"]);
    assert_eq!(code, 0, "{report}");
    assert!(
        (report["score"].as_f64().unwrap() - 2.0 / 3.0).abs() < 1e-9,
        "{report}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_suite_that_cannot_run_is_refused_before_a_job_and_exits_2() {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("bare", &calc(1).replace("name: calc", "name: bare"));
    put_files(
        &site,
        "broken",
        &[("evals/cases.jsonl", "{\"id\": \"x\", \"input\": \"hi\"}\n")],
    );
    site.put_bundle("broken", &calc(1).replace("name: calc", "name: broken"));
    let daemon = site.start();
    let http = client();

    let url = |name: &str| daemon.url(&format!("/v1/bundles/{name}/evals"));
    let refused = |name: &'static str, body: Value| {
        let (http, url) = (http.clone(), url(name));
        async move {
            let response = http.post(url).json(&body).send().await.unwrap();
            (
                response.status().as_u16(),
                response.json::<Value>().await.unwrap(),
            )
        }
    };
    let (status, body) = refused("bare", json!({})).await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("evals/"),
        "{body}"
    );
    let (status, body) = refused("broken", json!({})).await;
    assert_eq!(status, 422, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("cases.jsonl:1") && message.contains("grader"),
        "{message}"
    );
    let (status, body) = refused("bare", json!({"against": "9"})).await;
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (422, Some("against")),
        "{body}"
    );
    let (status, body) = refused("bare", json!({"concurrency": 0})).await;
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (422, Some("concurrency")),
        "{body}"
    );
    let jobs = get(&http, &daemon, "/v1/jobs").await;
    assert_eq!(
        jobs["jobs"].as_array().map(Vec::len),
        Some(0),
        "nothing was queued: {jobs}"
    );

    let out = run_cli(&daemon.url(""), &["eval", "bare"], "");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("evals/"));
}

#[tokio::test(flavor = "multi_thread")]
async fn against_an_older_version_names_regressions_and_improvements() {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    put_calc(&site, 1);
    let daemon = site.start();
    put_calc(&site, 2);
    serving(&daemon, "calc", "2").await;

    let (code, _, report) = eval_cli(
        &daemon,
        &[
            "calc",
            "--against",
            "1",
            "--min-score",
            "0.1",
            "--no-regressions",
            "--json",
        ],
    );
    assert_eq!(code, 1, "{report}");
    assert_eq!(report["version"], "2");
    assert_eq!(report["against"], "1");
    assert_eq!(report["regressions"], json!(["sum", "hello"]), "{report}");
    assert_eq!(report["improvements"], json!(["capital"]), "{report}");
    assert!(
        report["verdict"].as_str().unwrap().contains("regressed"),
        "{report}"
    );
    let sum = case(&report, "sum");
    assert_eq!(
        (&sum["change"], &sum["against"]["pass"]),
        (&json!("regressed"), &json!(true)),
        "{sum}"
    );
    assert_eq!(
        sum["against"]["answer"], "The sum is 5.",
        "the older version ran: {sum}"
    );

    put_calc(&site, 3);
    serving(&daemon, "calc", "3").await;
    let (code, stdout, _) = eval_cli(&daemon, &["calc", "--against", "2", "--no-regressions"]);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("improvements: sum, hello"), "{stdout}");

    // After a restart the daemon has served only version 3; version 1's
    // copy in the bundle store still answers for it.
    assert_eq!(daemon.stop(), Some(0));
    let daemon = site.start();
    serving(&daemon, "calc", "3").await;
    let (code, _, report) = eval_cli(&daemon, &["calc", "--against", "1", "--json"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["improvements"], json!(["capital"]), "{report}");
    assert_eq!(
        case(&report, "capital")["against"]["answer"],
        "Lyon",
        "version 1 ran, from its copy: {report}"
    );
}

/// A bundle whose every answer takes a while: an eval of it is under way
/// long enough to kill.
const SLOW: &str = r#"name: slow
version: "1"
model: {endpoint: mock, name: m}
prompts: {user: "{{ input }}"}
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_daemon_killed_mid_eval_resumes_without_running_a_finished_case_again() {
    let server = mock_server("replies:\n  - {content: \"ok\", delay_ms: 600}\n").await;
    let site = Site::new(&server.base_url(), "");
    let cases: String = (1..=6)
        .map(|n| format!("{{\"id\": \"c{n}\", \"input\": \"case {n}\", \"expected\": {{\"answer\": \"ok\"}}}}\n"))
        .collect();
    put_files(
        &site,
        "slow",
        &[("evals/cases.jsonl", &cases), ("evals/suite.yaml", SUITE)],
    );
    site.put_bundle("slow", SLOW);
    let daemon = site.start_with_env(&[SHORT_LEASE]);
    let http = client();
    let started = http
        .post(daemon.url("/v1/bundles/slow/evals"))
        .json(&json!({"concurrency": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 201);
    let eval_id = started.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let finished = |http: reqwest::Client, daemon: &Daemon| {
        let url = daemon.url("/v1/jobs?bundle=slow&state=succeeded");
        async move {
            let page: Value = http.get(url).send().await.ok()?.json().await.ok()?;
            let ids: Vec<String> = page["jobs"]
                .as_array()?
                .iter()
                .filter_map(|j| j["id"].as_str().map(String::from))
                .collect();
            Some(ids)
        }
    };
    let before = eventually(Duration::from_secs(30), "two cases to finish", || {
        let (http, daemon) = (http.clone(), &daemon);
        async move { finished(http, daemon).await.filter(|ids| ids.len() >= 2) }
    })
    .await;
    daemon.kill9();

    let daemon = site.start_with_env(&[SHORT_LEASE]);
    let eval = wait_terminal(&http, &daemon, &eval_id, Duration::from_secs(90)).await;
    assert_eq!(eval["state"], "succeeded", "{eval}");
    let report = &eval["result"];
    assert_eq!(
        (report["passed"].as_u64(), report["pass"].as_bool()),
        (Some(6), Some(true)),
        "{report}"
    );
    // The cases that had finished are the same jobs, and their model ran
    // once: each case's prompt reached the model at most once, and those
    // finished before the kill exactly once.
    let asked = |n: usize| {
        server
            .requests()
            .iter()
            .filter(|r| r["messages"].to_string().contains(&format!("case {n}\"")))
            .count()
    };
    for id in &before {
        let job = get(&http, &daemon, &format!("/v1/jobs/{id}")).await;
        let n: usize = job["input"]
            .as_str()
            .unwrap()
            .trim_start_matches("case ")
            .parse()
            .unwrap();
        assert_eq!(
            case(report, &format!("c{n}"))["job_id"],
            json!(id),
            "{report}"
        );
        assert_eq!(
            asked(n),
            1,
            "case {n} finished before the kill and ran once"
        );
    }
    let total: usize = (1..=6).map(asked).sum();
    assert!(
        total <= 7,
        "at most the case in flight at the kill asked twice: {total}"
    );
}

/// A judge that scores politeness, and a process grader that counts words.
const JUDGE: &str = r#"name: judge
version: "1"
model: {endpoint: mock, name: m}
prompts: {user: "{{ input }}"}
"#;

const GRADER: &str = r#"import json, sys
seen = json.load(sys.stdin)
words = len((seen["observed"]["answer"] or "").split())
print(json.dumps({"score": 1.0 if words <= 3 else 0.0, "reason": f"{words} words for case {seen['case']['id']}"}))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_judge_bundle_and_a_process_grade_as_the_callers_key_may() {
    let server = mock_server(
        r#"
replies:
  - {match: "Grade the answer", turn: 1, content: "```json\n{\"score\": 0.8, \"reason\": \"polite enough\"}\n```", usage: {prompt_tokens: 100, completion_tokens: 20}}
  - {match: "Q1: say hello", turn: 1, content: "hello there"}
"#,
    )
    .await;
    let site = Site::new(
        &server.base_url(),
        "[auth]\nkeys_file = \"keys.toml\"\n\n[prices.m]\nprompt_per_million = 1000.0\ncompletion_per_million = 1000.0\n",
    );
    let keys = site.path().join("keys.toml");
    let admin = new_key(&keys, "admin", &["--scopes", "admin"]);
    let team = new_key(
        &keys,
        "team",
        &["--scopes", "submit,read", "--bundles", "calc"],
    );
    let promptfoo = "prompts: ['{{q}}']\ntests:\n  - vars: {q: say hello}\n    assert:\n      - type: llm-rubric\n        value: is polite\n      - type: icontains\n        value: HELLO\n";
    put_files(
        &site,
        "calc",
        &[
            ("evals/promptfooconfig.yaml", promptfoo),
            (
                "evals/suite.yaml",
                "judge: judge\ngraders:\n  - type: process\n    command: [python3, ./words.py]\n    timeout: 10s\n",
            ),
            ("evals/words.py", GRADER),
        ],
    );
    site.put_bundle("calc", &calc(1));
    site.put_bundle("judge", JUDGE);
    let daemon = site.start();

    let run = |token: &str| {
        let (http, url) = (client_as(token), daemon.url("/v1/bundles/calc/evals"));
        async move {
            let job: Value = http
                .post(url)
                .json(&json!({}))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            job["id"]
                .as_str()
                .unwrap_or_else(|| panic!("{job}"))
                .to_string()
        }
    };
    let http = client_as(&admin);
    let id = run(&admin).await;
    let eval = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    let case = &eval["result"]["cases"][0];
    let grade = |name: &str| {
        case["grades"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["grader"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} in {case}"))
    };
    assert_eq!(
        (
            grade("llm-rubric")["score"].as_f64(),
            grade("llm-rubric")["pass"].as_bool()
        ),
        (Some(0.8), Some(true)),
        "{case}"
    );
    assert_eq!(grade("llm-rubric")["reason"], "polite enough");
    assert_eq!(
        grade("process")["reason"],
        format!("2 words for case {}", case["case"].as_str().unwrap()),
        "{case}"
    );
    assert_eq!(grade("icontains")["pass"], true, "{case}");
    assert!(
        case["judge_cost_usd"].as_f64().unwrap() > 0.0,
        "the judge's cost is counted: {case}"
    );
    assert_eq!(eval["result"]["pass"], true, "{eval}");

    // A key that may not use the judge bundle: its case runs, its judge
    // is not admitted, and the case says so.
    let id = run(&team).await;
    let eval = wait_terminal(&client_as(&team), &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(eval["owner"], "team", "{eval}");
    let case = &eval["result"]["cases"][0];
    let job = get(
        &client_as(&team),
        &daemon,
        &format!("/v1/jobs/{}", case["job_id"].as_str().unwrap()),
    )
    .await;
    assert_eq!(job["owner"], "team", "the case ran as the caller: {job}");
    let rubric = case["grades"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["grader"] == "llm-rubric")
        .unwrap();
    assert_eq!(rubric["pass"], false, "{case}");
    assert!(
        rubric["reason"].as_str().unwrap().contains("not admitted"),
        "{rubric}"
    );
    assert_eq!(eval["result"]["pass"], false);

    // A bundle outside the key's globs cannot be evaluated at all.
    let response = client_as(&team)
        .post(daemon.url("/v1/bundles/judge/evals"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert!(
        matches!(response.status().as_u16(), 403 | 404 | 422),
        "{}",
        response.status()
    );
}

/// promptfoo's own runner and `structured-agents eval` on one
/// `promptfooconfig.yaml`: promptfoo calls the bundle as a model through
/// `/v1/chat/completions`; the daemon runs each test as a case job. Both
/// must pass and fail the same tests.
const CROSS_CONFIG: &str = r#"description: the calculator, cross-checked
prompts: ['{{q}}']
providers: ['openai:chat:bundle/plain']
tests:
  - description: hello
    vars: {q: say hello}
    assert:
      - {type: icontains, value: HELLO}
      - {type: not-contains, value: goodbye}
  - description: capital
    vars: {q: capital of France}
    assert:
      - {type: equals, value: Paris}
  - description: json
    vars: {q: give json}
    assert:
      - {type: is-json}
      - {type: contains-json, value: {type: object, required: [a]}}
  - description: sum
    vars: {q: add 2 and 3}
    assert:
      - {type: regex, value: '\b5\b'}
      - {type: not-icontains, value: seven}
"#;

const CROSS_SCRIPT: &str = r#"
replies:
  - {match: "say hello", content: "Hello there"}
  - {match: "capital of France", content: "Lyon"}
  - {match: "give json", content: "{\"a\": 1}"}
  - {match: "add 2 and 3", content: "It is 5."}
"#;

/// Where `scripts/test` installed promptfoo (with a Node it runs on).
fn promptfoo() -> std::path::PathBuf {
    let dir = std::env::var_os("SA_TEST_PROMPTFOO")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|home| {
                std::path::PathBuf::from(home).join(".cache/structured-agents/promptfoo")
            })
        })
        .unwrap();
    assert!(
        dir.join("node_modules/promptfoo/package.json").exists()
            && dir.join("node_modules/node/bin/node").exists(),
        "promptfoo is not installed in {} (run scripts/test, which installs it)",
        dir.display()
    );
    dir
}

#[tokio::test(flavor = "multi_thread")]
async fn promptfoo_itself_and_eval_pass_and_fail_the_same_tests() {
    let tool = promptfoo();
    let server = mock_server(CROSS_SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    put_files(
        &site,
        "plain",
        &[("evals/promptfooconfig.yaml", CROSS_CONFIG)],
    );
    site.put_bundle(
        "plain",
        "name: plain\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\n",
    );
    let daemon = site.start();

    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("results.json");
    let config = site.path().join("bundles/plain/evals/promptfooconfig.yaml");
    let ran = std::process::Command::new(tool.join("node_modules/node/bin/node"))
        .arg(tool.join("node_modules/promptfoo/dist/src/entrypoint.js"))
        .args([
            "eval",
            "--no-cache",
            "--no-progress-bar",
            "--no-table",
            "-c",
        ])
        .arg(&config)
        .arg("-o")
        .arg(&out)
        .env("OPENAI_BASE_URL", daemon.url("/v1"))
        .env("OPENAI_API_KEY", "unused")
        .env("HOME", work.path())
        .env("PROMPTFOO_CONFIG_DIR", work.path().join(".promptfoo"))
        .env("PROMPTFOO_DISABLE_TELEMETRY", "1")
        .env("PROMPTFOO_DISABLE_UPDATE", "1")
        .output()
        .unwrap();
    // promptfoo's own exit code for a suite with a failed test.
    assert_eq!(
        ran.status.code(),
        Some(100),
        "{}\n{}",
        String::from_utf8_lossy(&ran.stdout),
        String::from_utf8_lossy(&ran.stderr)
    );
    let results: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let theirs: std::collections::BTreeMap<String, bool> = results["results"]["results"]
        .as_array()
        .unwrap_or_else(|| panic!("{results}"))
        .iter()
        .map(|r| {
            (
                r["testCase"]["description"].as_str().unwrap().to_string(),
                r["success"].as_bool().unwrap(),
            )
        })
        .collect();

    let (code, _, report) = eval_cli(&daemon, &["plain", "--json"]);
    assert_eq!(code, 1, "{report}");
    let ours: std::collections::BTreeMap<String, bool> = report["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["case"].as_str().unwrap().to_string(),
                c["pass"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(ours, theirs, "eval's verdicts against promptfoo's");
    assert_eq!(ours.values().filter(|pass| !**pass).count(), 1, "{ours:?}");
}

/// A payer whose `pay` tool has a side effect (`unsafe`): it appends
/// `paid AMOUNT` to the file `EFFECTS`.
const PAYER: &str = r#"name: payer
version: "1"
model: {endpoint: mock, name: m}
prompts: {user: "P: {{ input }}"}
tools:
  - name: pay
    kind: process
    effect: unsafe
    description: pays an amount
    parameters: {type: object, properties: {amount: {type: integer}}, required: [amount]}
    command: [python3, -c, 'import json,sys; a=json.load(sys.stdin); f=open(r"EFFECTS","a"); f.write("paid "+str(a["amount"])+chr(10)); f.close(); print(json.dumps({"receipt": "real"}))']
"#;

/// Two payments: the first scripts what the stand-in answers, the second
/// leaves it to the placeholder.
const PAYER_CASES: &str = r#"{"id": "five", "input": "pay 5", "expected": {"answer": "paid 5"}, "tool_results": {"pay": {"receipt": "stand-in r5"}}, "assert": [{"type": "tool_calls", "called": ["pay"]}]}
{"id": "seven", "input": "pay 7", "expected": {"answer": "paid 7"}}
"#;

const PAYER_SCRIPT: &str = r#"
replies:
  - {match: "P: pay 5", turn: 1, tool_calls: [{name: pay, arguments: {amount: 5}}]}
  - {match: "P: pay 5", turn: 2, content: "paid 5"}
  - {match: "P: pay 7", turn: 1, tool_calls: [{name: pay, arguments: {amount: 7}}]}
  - {match: "P: pay 7", turn: 2, content: "paid 7"}
"#;

/// What case `id`'s job's `pay` call answered (its `ToolResult` preview).
async fn paid_with(daemon: &Daemon, report: &Value, id: &str) -> String {
    let job = case(report, id)["job_id"].as_str().unwrap().to_string();
    let events = common::daemon::job_events(&client(), daemon, &job).await;
    events
        .iter()
        .find(|e| e["type"] == "ToolResult" && e["tool_name"] == "pay")
        .and_then(|e| e["output_preview"].as_str())
        .unwrap_or_else(|| panic!("case {id}'s job {job} called no pay: {events:?}"))
        .to_string()
}

/// An eval never pays for real unless asked: the case jobs' tools with a
/// side effect are answered by stand-ins (the case's `tool_results`, else
/// a placeholder saying nothing ran), graded as usual; `--real-tools` runs
/// them. A workflow that runs commands, which no stand-in answers, is
/// refused unless the real tools are asked for.
#[tokio::test(flavor = "multi_thread")]
async fn eval_cases_pay_only_with_the_real_tools() {
    let server = mock_server(PAYER_SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    let effects = site.path().join("effects.txt");
    put_files(
        &site,
        "payer",
        &[
            ("evals/cases.jsonl", PAYER_CASES),
            ("evals/suite.yaml", SUITE),
        ],
    );
    site.put_bundle(
        "payer",
        &PAYER.replace("EFFECTS", &effects.display().to_string()),
    );
    put_files(
        &site,
        "flow",
        &[("evals/cases.jsonl", CASES), ("evals/suite.yaml", SUITE)],
    );
    site.put_bundle(
        "flow",
        &format!(
            "{}workflow:\n  start: check\n  stages:\n    check: {{kind: command, argv: [\"true\"]}}\n  transitions:\n    check: {{pass: finish, fail: fatal}}\n",
            calc(1).replace("name: calc", "name: flow")
        ),
    );
    let daemon = site.start();

    let (code, stdout, report) = eval_cli(&daemon, &["payer", "--json"]);
    assert_eq!(code, 0, "both cases pass on stand-ins: {stdout}");
    assert_eq!(
        (&report["real_tools"], &report["stand_ins"]),
        (&json!(false), &json!(["pay"])),
        "{report}"
    );
    assert!(
        !effects.exists(),
        "nothing was paid: {:?}",
        std::fs::read_to_string(&effects)
    );
    let five = paid_with(&daemon, &report, "five").await;
    assert!(
        five.contains("stand-in r5"),
        "the case's scripted result: {five}"
    );
    let seven = paid_with(&daemon, &report, "seven").await;
    assert!(
        seven.contains("did not really run") && !seven.contains("real\""),
        "the placeholder: {seven}"
    );
    let (_, text, _) = eval_cli(&daemon, &["payer"]);
    assert!(
        text.contains("Stand-ins answered pay: nothing of theirs really ran."),
        "{text}"
    );

    let (code, stdout, report) = eval_cli(&daemon, &["payer", "--real-tools", "--json"]);
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(
        (&report["real_tools"], &report["stand_ins"]),
        (&json!(true), &json!([])),
        "{report}"
    );
    let mut paid: Vec<String> = std::fs::read_to_string(&effects)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    paid.sort();
    assert_eq!(paid, ["paid 5", "paid 7"], "each case paid once, for real");
    assert!(paid_with(&daemon, &report, "five").await.contains("real"));

    let http = client();
    let url = daemon.url("/v1/bundles/flow/evals");
    let response = http.post(&url).json(&json!({})).send().await.unwrap();
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (422, Some("real_tools")),
        "{body}"
    );
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("stages check"), "{message}");

    // A release gate would run such a workflow's cases: the bundle says
    // `real_tools: true`, or it does not load.
    let gated = site.path().join("bundles/flow/bundle.yaml");
    let yaml = std::fs::read_to_string(&gated).unwrap();
    std::fs::write(&gated, format!("{yaml}release: {{gate: evals}}\n")).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_structured-agents"))
        .args(["validate", gated.parent().unwrap().to_str().unwrap()])
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("release.real_tools"),
        "{said}"
    );
}

/// `eval BUNDLE --dir PATH` runs a directory's suite in a daemon of the
/// command's own — no daemon running, the operator's state untouched, its
/// temporary directory gone afterwards — with the endpoints of `--config`.
#[tokio::test(flavor = "multi_thread")]
async fn eval_dir_runs_a_directory_in_its_own_daemon() {
    let server = mock_server(SCRIPT).await;
    // A deployment's config, never started: its endpoint is what --config
    // lends; its state directory must stay empty.
    let site = Site::new(&server.base_url(), "");
    let work = tempfile::tempdir().unwrap();
    let write = |dir: &std::path::Path, version: u32| {
        for (path, text) in [
            ("evals/cases.jsonl", CASES.to_string()),
            ("evals/suite.yaml", SUITE.to_string()),
            ("bundle.yaml", calc(version)),
        ] {
            std::fs::create_dir_all(dir.join(path).parent().unwrap()).unwrap();
            std::fs::write(dir.join(path), text).unwrap();
        }
    };
    let (good, bad) = (work.path().join("calc-pr"), work.path().join("calc-old"));
    write(&good, 3);
    write(&bad, 1);
    let eval_dir = |dir: &std::path::Path| {
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_structured-agents"))
            .current_dir(site.path())
            .args(["eval", "calc", "--json", "--config", "config.toml", "--dir"])
            .arg(dir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        let left: Vec<_> = std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with(&format!("structured-agents-eval-{pid}-")))
            .collect();
        assert!(left.is_empty(), "its directory is removed: {left:?}");
        (out.status.code(), stdout, stderr)
    };

    let (code, stdout, stderr) = eval_dir(&good);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (&report["version"], &report["passed"]),
        (&json!("3"), &json!(3)),
        "{report}"
    );

    let (code, stdout, stderr) = eval_dir(&bad);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(case(&report, "capital")["answer"], "Lyon", "{report}");

    let state: Vec<_> = std::fs::read_dir(site.path().join("state"))
        .unwrap()
        .collect();
    assert!(
        state.is_empty(),
        "the deployment's state is untouched: {state:?}"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_structured-agents"))
        .args(["eval", "calc", "--dir"])
        .arg(&good)
        .args(["--against", "1"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "--against needs a daemon that served it"
    );
}
