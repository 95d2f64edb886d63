//! Conversations through the daemon: jobs sharing a `conversation_id` start
//! from the earlier turns, `GET /v1/conversations/{id}` shows the turns
//! (also after a restart), `DELETE` forgets them, and bad ids are refused.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::time::Duration;

use common::daemon::{Site, client, get, submit_and_wait};
use common::mock_server;
use serde_json::json;

const SCRIPT: &str = r#"
replies:
  - match: "My name is Ada"
    content: "Nice to meet you, Ada."
  - match: "What is my name"
    content: "Your name is Ada."
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_conversation_replays_its_turns_survives_a_restart_and_is_forgotten() {
    let mock = mock_server(SCRIPT).await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle(
        "friend",
        "name: friend\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {system: \"Be kind.\", user: \"{{ input }}\"}\n",
    );
    let daemon = site.start();
    let http = client();
    for input in ["My name is Ada.", "What is my name?"] {
        let done = submit_and_wait(
            &http,
            &daemon,
            json!({"bundle": "friend", "input": input, "conversation_id": "chat-42"}),
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(done["state"], "succeeded", "{done}");
    }
    // The second turn started from the first.
    let second = &mock.requests()[1]["messages"];
    assert_eq!(
        second,
        &json!([
            {"role": "system", "content": "Be kind."},
            {"role": "user", "content": "My name is Ada."},
            {"role": "assistant", "content": "Nice to meet you, Ada."},
            {"role": "user", "content": "What is my name?"},
        ])
    );
    let shown = get(&http, &daemon, "/v1/conversations/chat-42").await;
    let turns = shown["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 2, "{shown}");
    assert_eq!(turns[1]["input"], "What is my name?");
    assert_eq!(turns[1]["answer"], "Your name is Ada.");
    assert!(turns[0]["created_at"].is_string() && turns[0]["finished_at"].is_string());
    assert_eq!(turns[0]["agents_used"], json!([]));

    // Kept in the job store: a restart changes nothing.
    assert_eq!(daemon.stop(), Some(0));
    let daemon = site.start();
    let again = get(&http, &daemon, "/v1/conversations/chat-42").await;
    assert_eq!(again["turns"], shown["turns"]);

    let forgotten = http
        .delete(daemon.url("/v1/conversations/chat-42"))
        .send()
        .await
        .unwrap();
    assert_eq!(forgotten.status(), 200);
    let body: serde_json::Value = forgotten.json().await.unwrap();
    assert_eq!(body["forgotten_turns"], 2);
    let gone = http
        .get(daemon.url("/v1/conversations/chat-42"))
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 404);
    assert!(gone.text().await.unwrap().contains("chat-42"));

    let bad = http
        .post(daemon.url("/v1/jobs"))
        .json(&json!({"bundle": "friend", "input": "x", "conversation_id": "no spaces"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 422);
    let body: serde_json::Value = bad.json().await.unwrap();
    assert_eq!(body["error"]["field"], "conversation_id");
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_talks_to_the_daemon_one_job_per_line_in_one_conversation() {
    let mock = mock_server(SCRIPT).await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle(
        "friend",
        "name: friend\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\n",
    );
    let daemon = site.start();
    let out = tokio::task::spawn_blocking({
        let base = daemon.base.clone();
        move || {
            common::daemon::run_cli(
                &base,
                &["chat", "friend"],
                "My name is Ada.\nWhat is my name?\n\n",
            )
        }
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("you → "), "{stdout}");
    assert!(
        stdout.contains("runtime → Nice to meet you, Ada."),
        "{stdout}"
    );
    assert!(stdout.contains("runtime → Your name is Ada."), "{stdout}");
    // Both lines were jobs of one conversation, kept by the daemon.
    let conversation = stdout
        .split("(conversation ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap();
    let http = client();
    let shown = get(&http, &daemon, &format!("/v1/conversations/{conversation}")).await;
    assert_eq!(shown["turns"].as_array().unwrap().len(), 2, "{shown}");
}

/// The status and JSON body of a request.
async fn answer(request: reqwest::RequestBuilder) -> (u16, serde_json::Value) {
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or_default())
}

/// Two keys start the same new conversation id at the same moment, 20
/// rounds on fresh ids (both were once admitted into one conversation and
/// the second read the first's turns; then one got a 404 the other did not,
/// which told it the id was taken). Conversations are per key: every round
/// both are admitted, each into a conversation of its own, each reads and
/// continues only its own turns, and what one key is answered never
/// depends on whether the other has that id.
#[tokio::test(flavor = "multi_thread")]
async fn two_keys_starting_one_new_conversation_at_once_never_share_it() {
    use common::daemon::{client_as, new_key, wait_terminal};
    let mock = mock_server("replies:\n  - content: noted\n").await;
    let site = Site::new(&mock.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    let file = site.path().join("keys.toml");
    let keys = [
        (
            "alice",
            client_as(&new_key(&file, "alice", &["--scopes", "submit,read"])),
        ),
        (
            "bob",
            client_as(&new_key(&file, "bob", &["--scopes", "submit,read"])),
        ),
    ];
    site.put_bundle(
        "friend",
        "name: friend\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\n",
    );
    let daemon = site.start();
    let never = answer(keys[1].1.get(daemon.url("/v1/conversations/never-used"))).await;
    assert_eq!(never.0, 404, "{never:?}");
    for round in 0..20 {
        let id = format!("race-{round}");
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(2));
        let racers: Vec<_> = keys
            .iter()
            .map(|(name, http)| {
                let request = http.post(daemon.url("/v1/jobs")).json(&json!({
                    "bundle": "friend",
                    "input": format!("{name} secret {round}"),
                    "conversation_id": id,
                }));
                let barrier = barrier.clone();
                tokio::spawn(async move {
                    barrier.wait().await;
                    answer(request).await
                })
            })
            .collect();
        let mut answers = Vec::new();
        for racer in racers {
            answers.push(racer.await.unwrap());
        }
        for (n, (name, http)) in keys.iter().enumerate() {
            let (status, first) = &answers[n];
            assert_eq!(*status, 201, "round {round}: {name}: {first}");
            let first = first["id"].as_str().unwrap().to_string();
            wait_terminal(http, &daemon, &first, Duration::from_secs(30)).await;
            let (status, next) = answer(http.post(daemon.url("/v1/jobs")).json(&json!({
                "bundle": "friend", "input": format!("{name} more {round}"), "conversation_id": id,
            })))
            .await;
            assert_eq!(status, 201, "round {round}: {next}");
            let next = next["id"].as_str().unwrap().to_string();
            wait_terminal(http, &daemon, &next, Duration::from_secs(30)).await;
            let path = format!("/v1/conversations/{id}");
            let (status, shown) = answer(http.get(daemon.url(&path))).await;
            assert_eq!(status, 200, "{shown}");
            let inputs: Vec<&str> = shown["turns"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["input"].as_str().unwrap())
                .collect();
            assert_eq!(
                inputs,
                [
                    format!("{name} secret {round}"),
                    format!("{name} more {round}")
                ],
                "round {round}: {name} reads only its own turns"
            );
        }
        // Another key's conversation by name reads as one never used.
        let path = format!("/v1/conversations/{id}?owner=alice");
        let read = answer(keys[1].1.get(daemon.url(&path))).await;
        assert_eq!(read.0, never.0, "round {round}: {read:?}");
        assert_eq!(read.1["error"]["code"], never.1["error"]["code"]);
        let forgot = answer(keys[1].1.delete(daemon.url(&path))).await;
        assert_eq!(forgot.0, 404, "round {round}: {forgot:?}");
    }
    // The model never saw one key's words in a job of the other.
    for request in mock.requests() {
        let text = request["messages"].to_string();
        assert!(
            !(text.contains("alice") && text.contains("bob")),
            "a job mixed both keys' turns: {text}"
        );
    }
}
