//! Token streaming over the daemon's SSE: while a job runs, its event
//! stream also carries the model's content as `token` events without `id:`
//! (never stored), and the durable events keep their exact order; `submit
//! --follow` prints the answer as it streams.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::time::Duration;

use common::daemon::{Site, client, read_sse, read_sse_response, submit, wait_terminal};
use common::{mock_server, peer};
use serde_json::Value;

const SCRIPT: &str = r#"
replies:
  - content: "The quick brown fox jumps over the lazy dog."
    delay_ms: 100
"#;

const BUNDLE: &str = "name: talker\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\n";

/// The answer comes in turn 2, after a tool that waits for the test.
const GATED_SCRIPT: &str = r#"
replies:
  - turn: 1
    tool_calls: [{id: w1, name: wait, arguments: {}}]
  - turn: 2
    content: "The quick brown fox jumps over the lazy dog."
"#;

/// `talker` with a `wait` tool that ends once `release` exists.
fn gated_bundle(release: &std::path::Path) -> String {
    format!(
        r#"name: talker
version: "1"
model: {{endpoint: mock, name: m}}
prompts: {{user: "{{{{ input }}}}"}}
tools:
  - {{name: wait, kind: process, timeout: 10m, command: [sh, -c, "while [ ! -e '{release}' ]; do sleep 0.02; done; echo '{{}}'"]}}
"#,
        release = release.display()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn sse_carries_tokens_without_ids_between_the_durable_events() {
    let mock = mock_server(GATED_SCRIPT).await;
    let site = Site::new(&mock.base_url(), "");
    let release = site.path().join("release");
    site.put_bundle("talker", &gated_bundle(&release));
    let daemon = site.start();
    let http = client();
    // The stream listens before the answer's model call, by order: the job's
    // first tool waits until the stream is open (the stream subscribes to
    // the job's tokens before it answers), and only then is released.
    let job = submit(&http, &daemon, "talker", "go").await;
    let id = job["id"].as_str().unwrap();
    let stream = http
        .get(daemon.url(&format!("/v1/jobs/{id}/events")))
        .send()
        .await
        .unwrap();
    std::fs::write(&release, "").unwrap();
    let events = read_sse_response(stream, None).await;
    // A token has no `id:` of its own (an SSE client keeps reporting the
    // last durable id, which is what `Last-Event-ID` resumption needs).
    let mut last_durable = None;
    let mut tokens = Vec::new();
    for (seq, kind, data) in &events {
        match kind.as_str() {
            "event" => last_durable = *seq,
            "token" => {
                assert_eq!(*seq, last_durable, "a token carried an id of its own");
                let token: Value = serde_json::from_str(data).unwrap();
                tokens.push(token["text"].as_str().unwrap().to_string());
            }
            _ => {}
        }
    }
    assert!(tokens.len() > 1, "{events:?}");
    assert_eq!(
        tokens.concat(),
        "The quick brown fox jumps over the lazy dog."
    );
    // The durable events are all there, in order, gap-free.
    let seqs: Vec<u64> = events
        .iter()
        .filter(|(_, kind, _)| kind == "event")
        .filter_map(|(seq, _, _)| *seq)
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    // Tokens arrive while the model answers, before its ModelResponse (the
    // answer's, turn 2's) is stored.
    let first_token = events.iter().position(|(_, k, _)| k == "token").unwrap();
    let response = events
        .iter()
        .rposition(|(_, _, d)| d.contains("\"ModelResponse\""))
        .unwrap();
    assert!(first_token < response, "{events:?}");
    // Resuming after the last durable event sends nothing again.
    let done = wait_terminal(&http, &daemon, id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded");
    let rest = read_sse(
        &http,
        &daemon.url(&format!("/v1/jobs/{id}/events")),
        Some(*seqs.last().unwrap()),
        None,
    )
    .await;
    assert_eq!(rest.len(), 1, "only `end`: {rest:?}");
    assert_eq!(rest[0].1, "end");
}

#[tokio::test(flavor = "multi_thread")]
async fn submit_follow_prints_the_answer_as_it_streams() {
    let mock = mock_server(SCRIPT).await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle("talker", BUNDLE);
    let daemon = site.start();
    let mut cli = std::process::Command::new(env!("CARGO_BIN_EXE_structured-agents"));
    cli.args([
        "--server",
        &daemon.base,
        "submit",
        "talker",
        "--input",
        "go",
        "--follow",
        "--json",
    ]);
    let stdout = peer::run(&daemon, cli).await;
    let lines: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let streamed: String = lines
        .iter()
        .filter(|l| l["type"] == "token")
        .map(|l| l["token"]["text"].as_str().unwrap().to_string())
        .collect();
    let end = lines.iter().position(|l| l["type"] == "end").unwrap();
    let last_token = lines.iter().rposition(|l| l["type"] == "token");
    // `--follow` may join after the model call began (then it streams
    // nothing): whatever streamed is a prefix of the answer, before the end.
    assert!(
        "The quick brown fox jumps over the lazy dog.".starts_with(&streamed),
        "{streamed:?}"
    );
    assert!(last_token.is_none_or(|t| t < end));
    assert_eq!(lines[end]["job"]["state"], "succeeded");
}
