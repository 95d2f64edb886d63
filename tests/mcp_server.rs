//! The daemon's bundles as MCP tools at `/mcp`, driven by the Python `mcp`
//! client over Streamable HTTP: listing with input schemas, calls that run
//! jobs (and an error result when the job fails), the bearer token, and
//! `tools/list_changed` when a reload adds a bundle.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use common::{mock_server, python};

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::daemon::{Site, get};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread")]
async fn the_mcp_client_lists_and_calls_bundles_and_hears_of_reloads() {
    let mock = mock_server("replies:\n  - content: \"Hello from a bundle.\"\n").await;
    let site = Site::new(
        &mock.base_url(),
        "[endpoints.down]\nbase_url = \"http://127.0.0.1:9/v1\"\nmax_retries = 0\n",
    );
    site.put_bundle(
        "greeter",
        "name: greeter\nversion: \"1\"\ndescription: Greets.\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\n",
    );
    site.put_bundle(
        "broken",
        "name: broken\nversion: \"1\"\nmodel: {endpoint: down, name: m}\nprompts: {user: \"{{ input }}\"}\n",
    );
    let daemon = site.start_with_env(&[
        ("STRUCTURED_AGENTS_SERVER__TOKEN_ENV", "SA_TEST_TOKEN"),
        ("SA_TEST_TOKEN", "s3cret"),
    ]);
    let mut child = Command::new(python())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/mcp/bundle_client.py"
        ))
        .args([&daemon.url("/mcp"), "s3cret"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let site_path = site.path().to_path_buf();
    let lines = tokio::task::spawn_blocking(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            if line == "LISTED" {
                // A new bundle while the client is connected: a reload.
                let dir = site_path.join("bundles/.new");
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(
                    dir.join("bundle.yaml"),
                    "name: latecomer\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\n",
                )
                .unwrap();
                std::fs::rename(&dir, site_path.join("bundles/latecomer")).unwrap();
            }
            lines.push(line);
        }
        lines
    })
    .await
    .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&output.stderr),
        daemon.log()
    );
    let seen: Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    assert_eq!(seen["tools"], serde_json::json!(["broken", "greeter"]));
    assert_eq!(seen["schema"]["required"], serde_json::json!(["input"]));
    assert_eq!(seen["ok"]["error"], false);
    assert_eq!(seen["ok"]["text"], "Hello from a bundle.");
    assert_eq!(seen["bad"]["error"], true);
    assert!(
        seen["bad"]["text"].as_str().unwrap().contains("ended"),
        "{}",
        seen["bad"]
    );
    assert_eq!(seen["missing_input"]["error"], true);
    assert_eq!(
        seen["tools_after"],
        serde_json::json!(["broken", "greeter", "latecomer"])
    );
    assert_eq!(seen["without_token"], 401);

    // Each call was a job.
    let jobs = get(&client_with_token(), &daemon, "/v1/jobs?bundle=greeter").await;
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 1, "{jobs}");
}

fn client_with_token() -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        "Bearer s3cret".parse().unwrap(),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap()
}
