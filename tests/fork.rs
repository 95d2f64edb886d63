//! Forks on the real daemon: `POST /v1/jobs/{id}/fork` and `structured-agents
//! fork` make a new job that replays the source's journal before the turn
//! asked for — no model call (counted at the mock server) and no tool call
//! (counted in the tool's side-effect file) — and runs live from there; it
//! records its origin. With `bundle_version: current` the replayed turns
//! must replay on the bundle's current version: a removed tool refuses the
//! fork with the reason, a compatible edit runs it.

mod common;

use std::path::Path;
use std::time::Duration;

use common::daemon::{Daemon, Site, client, file_lines, get, post_json, run_cli, wait_terminal};
use common::mock_server;
use serde_json::{Value, json};

/// Three turns: a `note` call, another, then the answer.
const SCRIPT: &str = r#"
replies:
  - {turn: 1, tool_calls: [{id: a, name: note, arguments: {text: one}}]}
  - {turn: 2, tool_calls: [{id: b, name: note, arguments: {text: two}}]}
  - {turn: 3, content: done}
"#;

/// The bundle at `version`; `note` (appending its text to `effects`) when
/// `with_note`, and a `lookup` tool either way (so the tool list is never
/// empty).
fn bundle(version: &str, effects: &Path, with_note: bool, system: &str) -> String {
    let effects = effects.display();
    let note = if with_note {
        format!(
            "  - name: note\n    kind: process\n    effect: idempotent\n    parameters: {{type: object, properties: {{text: {{type: string}}}}, required: [text]}}\n    command: [python3, -c, \"import json,sys; a=json.load(sys.stdin); open('{effects}','a').write(a['text'] + chr(10)); print('{{}}')\"]\n"
        )
    } else {
        String::new()
    };
    format!(
        "name: notes\nversion: \"{version}\"\nmodel: {{endpoint: mock, name: m, plugin: openai}}\nprompts: {{system: \"{system}\", user: \"{{{{ input }}}}\"}}\ntools:\n{note}  - name: lookup\n    kind: process\n    effect: read_only\n    command: [python3, -c, \"print('{{}}')\"]\n"
    )
}

async fn fork(http: &reqwest::Client, daemon: &Daemon, id: &str, body: Value) -> (u16, Value) {
    post_json(http, daemon, &format!("/v1/jobs/{id}/fork"), body).await
}

/// Runs the three-turn job to its end → its id.
async fn source_job(http: &reqwest::Client, daemon: &Daemon) -> String {
    let (status, job) = post_json(
        http,
        daemon,
        "/v1/jobs",
        json!({"bundle": "notes", "input": "take notes"}),
    )
    .await;
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_str().unwrap().to_string();
    let done = wait_terminal(http, daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    id
}

async fn reload(http: &reqwest::Client, daemon: &Daemon, version: &str) {
    let (status, outcome) = post_json(http, daemon, "/v1/reload", json!({})).await;
    assert_eq!(status, 200, "{outcome}");
    let bundle = get(http, daemon, "/v1/bundles/notes").await;
    assert_eq!(bundle["version"], version, "{bundle}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fork_calls_the_model_and_the_tools_only_from_its_turn_on() {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    let effects = site.path().join("notes.txt");
    site.put_bundle("notes", &bundle("1", &effects, true, "You take notes."));
    let daemon = site.start();
    let http = client();
    let id = source_job(&http, &daemon).await;
    assert_eq!(server.requests().len(), 3);
    assert_eq!(file_lines(&effects), ["one", "two"]);

    for at_turn in 1..=3u32 {
        let (requests, notes) = (server.requests().len(), file_lines(&effects).len());
        let (status, forked) = fork(&http, &daemon, &id, json!({"at_turn": at_turn})).await;
        assert_eq!(status, 201, "{forked}");
        let fork_id = forked["id"].as_str().unwrap();
        let done = wait_terminal(&http, &daemon, fork_id, Duration::from_secs(60)).await;
        assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
        assert_eq!(done["result"]["output"], "done", "{done}");
        assert_eq!(
            done["forked_from"],
            json!({"job_id": id, "at_turn": at_turn}),
            "{done}"
        );
        let live_turns = (4 - at_turn) as usize;
        assert_eq!(
            server.requests().len() - requests,
            live_turns,
            "a fork at turn {at_turn} asks the model for turns {at_turn} to 3 only"
        );
        let new_notes = &file_lines(&effects)[notes..];
        let expected: Vec<&str> = ["one", "two"][(at_turn as usize - 1).min(2)..].to_vec();
        assert_eq!(
            new_notes, expected,
            "a fork at turn {at_turn} runs only the calls from its turn on"
        );
        // The first live request carries the replayed turns (each an
        // assistant message with its tool result).
        let first_live = &server.requests()[requests];
        let messages = first_live["messages"].as_array().unwrap();
        let replayed_calls = messages.iter().filter(|m| m["role"] == "tool").count();
        assert_eq!(replayed_calls, (at_turn - 1) as usize, "{first_live}");
    }

    // Past the first turn the source did not finish: refused, naming the range.
    let (status, refused) = fork(&http, &daemon, &id, json!({"at_turn": 9})).await;
    assert_eq!(status, 422, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("turns 1 to 4"), "{refused}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_forks_with_an_edited_input() {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    let effects = site.path().join("notes.txt");
    site.put_bundle("notes", &bundle("1", &effects, true, "You take notes."));
    let daemon = site.start();
    let http = client();
    let id = source_job(&http, &daemon).await;
    let before = server.requests().len();

    let args = [
        "fork",
        id.as_str(),
        "--at",
        "3",
        "--edit-input",
        "take other notes",
        "--follow",
    ];
    let out = run_cli(&daemon.url(""), &args, "");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fork_id = stdout
        .lines()
        .next()
        .and_then(|line| line.strip_prefix("job "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no new job id in {stdout}"))
        .to_string();
    let forked = get(&http, &daemon, &format!("/v1/jobs/{fork_id}")).await;
    assert_eq!(forked["input"], "take other notes", "{forked}");
    assert_eq!(forked["forked_from"]["at_turn"], 3, "{forked}");
    // One live turn, which sees the edited input after the replayed turns.
    let requests = server.requests();
    assert_eq!(requests.len() - before, 1);
    let sent = requests[before]["messages"].to_string();
    assert!(
        sent.contains("take other notes") && !sent.contains("\"take notes\""),
        "{sent}"
    );
    assert_eq!(
        file_lines(&effects),
        ["one", "two"],
        "no tool call repeated"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fork_on_the_current_version_needs_its_replayed_turns_to_replay_there() {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    let effects = site.path().join("notes.txt");
    site.put_bundle("notes", &bundle("1", &effects, true, "You take notes."));
    let daemon = site.start();
    let http = client();
    let id = source_job(&http, &daemon).await;

    // Version 2 removed `note`, which the replayed turns called.
    site.put_bundle("notes", &bundle("2", &effects, false, "You take notes."));
    reload(&http, &daemon, "2").await;
    let (status, refused) = fork(
        &http,
        &daemon,
        &id,
        json!({"at_turn": 3, "bundle_version": "current"}),
    )
    .await;
    assert_eq!(status, 422, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("turn 1 calls tool `note`")
            && message.contains("version 2")
            && message.contains("does not have"),
        "{refused}"
    );
    // On its pinned content the same fork runs.
    let (status, pinned) = fork(&http, &daemon, &id, json!({"at_turn": 3})).await;
    assert_eq!(status, 201, "{pinned}");
    assert_eq!(pinned["bundle_version"], "1", "{pinned}");
    let done = wait_terminal(
        &http,
        &daemon,
        pinned["id"].as_str().unwrap(),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());

    // Version 3 has `note` again (a new prompt): compatible, and it runs.
    site.put_bundle(
        "notes",
        &bundle("3", &effects, true, "You take careful notes."),
    );
    reload(&http, &daemon, "3").await;
    let before = server.requests().len();
    let (status, current) = fork(
        &http,
        &daemon,
        &id,
        json!({"at_turn": 3, "bundle_version": "current"}),
    )
    .await;
    assert_eq!(status, 201, "{current}");
    let done = wait_terminal(
        &http,
        &daemon,
        current["id"].as_str().unwrap(),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(done["bundle_version"], "3", "{done}");
    let requests = server.requests();
    assert_eq!(requests.len() - before, 1, "only turn 3 is live");
    assert!(
        requests[before]["messages"].to_string().contains("careful"),
        "the new version renders its own prompts"
    );
    assert_eq!(
        file_lines(&effects),
        ["one", "two"],
        "no tool call repeated"
    );
}
