//! The API under a fuzzer: Schemathesis (from `.venv`, see
//! `scripts/python-env`) reads the real daemon's `/v1/openapi.json` and
//! sends every operation a bounded number of generated requests, valid and
//! invalid, with a fixed seed, under every check Schemathesis has
//! (`--checks all`): no answer is a 5xx; every 4xx carries the JSON error
//! shape (`tests/data/fuzz_api/checks.py`); answers match what the document
//! says (status codes, content types, schemas, `Allow` on a 405); a request
//! the document calls valid is accepted and one it calls invalid refused.
//! Where an operation refuses a valid-looking request for a reason no
//! schema can state (an unknown bundle, a cron expression), the exception
//! is written per operation, with its reason, in
//! `tests/data/fuzz_api/schemathesis.toml`. A missing Schemathesis is a
//! failure, never a skip.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use common::daemon::Site;
use common::schemathesis::{self, counts, operations, seed, tail};
use common::{mock_server, repo};

#[tokio::test(flavor = "multi_thread")]
async fn schemathesis_finds_no_5xx_and_only_shaped_errors() {
    let mock = mock_server("replies:\n  - content: fuzzed\n").await;
    // With API keys, as a deployment has them: Schemathesis holds one with
    // every scope.
    let site = Site::new(&mock.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    let token = common::daemon::new_key(
        &site.path().join("keys.toml"),
        "fuzzer",
        &["--scopes", "admin"],
    );
    // A deployment as configured: the runtime API's router and group-chat
    // host are loaded (without them `/api/query` and `/api/group-chat`
    // answer 503 by design), and one plain bundle.
    let bundle = |name: &str, extra: &str| {
        format!(
            "name: {name}\nversion: \"1\"\nmodel: {{endpoint: mock, name: m}}\nprompts: {{system: \"You answer.\", user: \"{{{{ input }}}}\"}}\n{extra}"
        )
    };
    site.put_bundle("echo", &bundle("echo", ""));
    site.put_bundle("router", &bundle("router", ""));
    site.put_bundle(
        "group-chat",
        &bundle(
            "group-chat",
            "group_chat: {max_rounds: 2, stop_word: DONE}\n",
        ),
    );
    let daemon = site.start();
    let output = schemathesis::run(
        &daemon,
        &token,
        schemathesis::Run {
            schema: daemon.url("/v1/openapi.json"),
            config: repo("tests/data/fuzz_api/schemathesis.toml"),
            hooks: repo("tests/data/fuzz_api/checks.py"),
            phases: "examples,coverage,fuzzing,stateful",
            excluded: &[],
            excluded_checks: &[],
            dir: site.path(),
        },
    )
    .await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "Schemathesis found problems (seed {}):\n{stdout}\n{}\n== daemon log (tail)\n{}",
        seed(),
        String::from_utf8_lossy(&output.stderr),
        tail(&daemon.log(), 80),
    );
    // It really tested every operation of the document (one it could not
    // read, or a filter that matched nothing, would pass vacuously).
    let document =
        common::daemon::get(&common::daemon::client(), &daemon, "/v1/openapi.json").await;
    let operations = operations(&document);
    let (selected, total, tested) = counts(&stdout);
    // Schemathesis leaves out the document's own route.
    assert!(
        selected == total && tested == total && total + 1 >= operations,
        "Schemathesis tested {tested} of {total} operations ({selected} selected), the document has {operations}:\n{stdout}"
    );
    assert_eq!(daemon.stop(), Some(0));
}

/// What Schemathesis found, pinned: each answer is the JSON error shape
/// with the status the document gives.
#[tokio::test(flavor = "multi_thread")]
async fn found_by_schemathesis_answers_are_shaped() {
    let mock = mock_server("replies:\n  - content: fuzzed\n").await;
    // With API keys, as a deployment has them: Schemathesis holds one with
    // every scope.
    let site = Site::new(&mock.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    let token = common::daemon::new_key(
        &site.path().join("keys.toml"),
        "fuzzer",
        &["--scopes", "admin"],
    );
    let daemon = site.start();
    let http = common::daemon::client();
    let cases: [(reqwest::Method, &str, Option<&str>, u16, &str); 6] = [
        // axum's default 405 has an empty body.
        (
            reqwest::Method::TRACE,
            "/v1/jobs",
            None,
            405,
            "method_not_allowed",
        ),
        // axum's query rejection is text/plain.
        (
            reqwest::Method::GET,
            "/v1/jobs?limit=abc",
            None,
            422,
            "invalid_request",
        ),
        (
            reqwest::Method::GET,
            "/v1/jobs?x-unknown=1",
            None,
            422,
            "invalid_request",
        ),
        // axum's path rejection (not UTF-8) is text/plain.
        (reqwest::Method::GET, "/v1/jobs/%FF", None, 404, "not_found"),
        // rmcp's refusal of an Accept it cannot answer is text/plain (the
        // loop sends `Accept: text/html` to /mcp).
        (
            reqwest::Method::POST,
            "/mcp",
            Some("{}"),
            406,
            "not_acceptable",
        ),
        // OpenAI's shape had `code: null`.
        (
            reqwest::Method::POST,
            "/v1/chat/completions",
            Some(""),
            400,
            "invalid_request",
        ),
    ];
    for (method, path, body, status, code) in cases {
        let mut request = http
            .request(method.clone(), daemon.url(path))
            .bearer_auth(&token);
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        if path == "/mcp" {
            request = request.header("accept", "text/html");
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), status, "{method} {path}");
        let answer: serde_json::Value = response.json().await.unwrap();
        assert_eq!(answer["error"]["code"], code, "{method} {path}: {answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{method} {path}: {answer}"
        );
    }
    let bad_limit: serde_json::Value = http
        .get(daemon.url("/v1/jobs?limit=abc"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(bad_limit["error"]["field"], "limit", "{bad_limit}");
    assert_eq!(daemon.stop(), Some(0));
}
