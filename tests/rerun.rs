//! Running a job again, on the real daemon: `structured-agents rerun ID`
//! and `POST /v1/jobs/{id}/rerun` make a new job with the source's bundle,
//! input, variables and limits, admitted for the caller like any submit; a
//! job another key owns cannot be rerun (it answers as an unknown one).

mod common;

use std::time::Duration;

use common::daemon::{Site, client, get, new_key, run_cli, submit_body, wait_terminal};
use common::mock_server;
use serde_json::{Value, json};

const SCRIPT: &str = r#"
replies:
  - content: done
"#;

const BUNDLE: &str = r#"
name: echo
version: "1"
model: {endpoint: mock, name: m, plugin: openai}
prompts: {user: "{{ input }} for {{ who }}"}
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_rerun_is_a_new_job_with_the_same_input_variables_and_limits() {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("echo", BUNDLE);
    let daemon = site.start();
    let http = client();
    let source = submit_body(
        &http,
        &daemon,
        json!({"bundle": "echo", "input": "greet", "variables": {"who": "Ada"},
               "limits": {"model_calls": 3}, "priority": 2}),
    )
    .await;
    let id = source["id"].as_str().unwrap().to_string();
    wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;

    let out = run_cli(&daemon.url(""), &["rerun", &id, "--follow"], "");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fresh = stdout
        .lines()
        .next()
        .and_then(|line| line.strip_prefix("job "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no new job id in {stdout}"))
        .to_string();
    assert_ne!(fresh, id);
    let again = get(&http, &daemon, &format!("/v1/jobs/{fresh}")).await;
    assert_eq!(again["state"], "succeeded", "{again}");
    for field in ["bundle", "input", "variables", "limits", "priority"] {
        assert_eq!(again[field], source[field], "{field}: {again}");
    }
    // The model saw the same rendered prompt both times.
    let prompts: Vec<Value> = server
        .requests()
        .iter()
        .map(|request| request["messages"].clone())
        .collect();
    assert_eq!(prompts.len(), 2, "{prompts:?}");
    assert_eq!(prompts[0], prompts[1]);
    assert!(
        prompts[0].to_string().contains("greet for Ada"),
        "{prompts:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn only_a_key_that_sees_the_job_can_rerun_it_and_the_rerun_is_its_own() {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    let file = site.path().join("keys.toml");
    let own = "submit,read,operate";
    let a = new_key(&file, "team-a", &["--scopes", own]);
    let b = new_key(&file, "team-b", &["--scopes", own]);
    let reader = new_key(&file, "auditor", &["--scopes", "read_all"]);
    site.put_bundle("echo", BUNDLE);
    let daemon = site.start();
    let http = client();
    let post = |token: &str, path: &str, body: Value| {
        http.post(daemon.url(path))
            .bearer_auth(token)
            .json(&body)
            .send()
    };
    let source: Value = post(
        &a,
        "/v1/jobs",
        json!({"bundle": "echo", "input": "greet", "variables": {"who": "Ada"}}),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let id = source["id"].as_str().unwrap();
    let rerun = format!("/v1/jobs/{id}/rerun");

    let theirs = post(&b, &rerun, json!({})).await.unwrap();
    assert_eq!(
        theirs.status().as_u16(),
        404,
        "another key's job is unknown to it"
    );
    // Seeing every job is not leave to submit.
    let auditor = post(&reader, &rerun, json!({})).await.unwrap();
    assert_eq!(auditor.status().as_u16(), 403);

    let mine = post(&a, &rerun, json!({})).await.unwrap();
    assert_eq!(mine.status().as_u16(), 201);
    let mine: Value = mine.json().await.unwrap();
    assert_eq!(mine["owner"], "team-a");
    assert_ne!(mine["id"], source["id"]);
    assert_eq!(mine["input"], "greet");
}
