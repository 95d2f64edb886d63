//! History strategies as libraries (issue 38, item 6): the sample
//! `last_user_turn` plugin (plugins/last-user-turn) chooses what each
//! request of a conversation sends, and the mock model server receives
//! exactly those messages; a name that is neither built-in nor loaded is a
//! validation error naming the key and the loaded plugins; the library
//! swapped for a visibly different build and reloaded while a job waits in a
//! tool call, that job finishes with the library it started with and a new
//! job uses the new one; a library choosing an index past the end fails the
//! turn with a message naming it, and the daemon serves on.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use common::daemon::{
    Daemon, Site, client, eventually, get, submit, submit_and_wait, wait_terminal,
};
use common::mock_server;
use common::sample_plugins::SamplePlugin;
use serde_json::{Value, json};

const LAST_USER_TURN: SamplePlugin = SamplePlugin {
    package: "sa-plugin-last-user-turn",
    variant_env: "SA_HISTORY_VARIANT",
    library: "libsa_plugin_last_user_turn.so",
};

/// The builds of the sample plugin: (normal, `no_first`, `bad`), once per
/// test process.
fn libraries() -> &'static (PathBuf, PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf, PathBuf)> = OnceLock::new();
    BUILT.get_or_init(|| {
        let [no_first, bad, normal]: [PathBuf; 3] = LAST_USER_TURN
            .build(&[Some("no_first"), Some("bad"), None])
            .try_into()
            .unwrap();
        (normal, no_first, bad)
    })
}

fn drop_library(dir: &Path, library: &Path) {
    LAST_USER_TURN.drop_into(dir, library);
}

/// A chat bundle on the mock endpoint with `history` as its strategy.
fn chat_bundle(name: &str, history: &str) -> String {
    format!(
        "name: {name}\nversion: \"1\"\nmodel: {{endpoint: mock, name: m}}\nprompts: {{system: \"Be kind.\", user: \"{{{{ input }}}}\"}}\nlimits: {{history: {history}}}\n"
    )
}

const CHAT: &str = r#"
replies:
  - match: "My name is Ada"
    content: "Nice to meet you, Ada."
  - match: "What is my name"
    content: "I do not know."
"#;

/// The second turn of a conversation: the plugin sends the first message
/// and the last user turn, not the earlier turn the daemon loaded (the
/// built-in sliding window would send all four; tests/conversations.rs).
/// Both spellings of the setting load; an unknown name is refused naming
/// the key and the loaded history plugins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plugin_chooses_exactly_what_each_request_sends() {
    let (normal, _, _) = tokio::task::spawn_blocking(libraries).await.unwrap();
    let server = mock_server(CHAT).await;
    let site = Site::new(&server.base_url(), "");
    drop_library(&site.path().join("plugins"), normal);
    site.put_bundle("friend", &chat_bundle("friend", "last_user_turn"));
    site.put_bundle(
        "spelled",
        &chat_bundle("spelled", "{plugin: last_user_turn}"),
    );
    site.put_bundle("typo", &chat_bundle("typo", "recent_turns"));
    let daemon = site.start();
    let http = client();

    let spelled = get(&http, &daemon, "/v1/bundles/spelled").await;
    assert_eq!(spelled["status"], "ok", "{spelled}\n{}", daemon.log());
    let typo = get(&http, &daemon, "/v1/bundles/typo").await;
    assert_eq!(typo["status"], "invalid", "{typo}");
    let error = typo["last_error"].to_string();
    assert!(
        error.contains("limits.history")
            && error.contains("recent_turns")
            && error.contains("history plugins loaded: last_user_turn"),
        "{error}"
    );

    for input in ["My name is Ada.", "What is my name?"] {
        let done = submit_and_wait(
            &http,
            &daemon,
            json!({"bundle": "friend", "input": input, "conversation_id": "chat-7"}),
            Duration::from_secs(30),
        )
        .await;
        assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    }
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert_eq!(
        requests[1]["messages"],
        json!([
            {"role": "system", "content": "Be kind."},
            {"role": "user", "content": "What is my name?"},
        ])
    );
}

/// A bundle whose tool (first writing `started`) waits for the file `gate`
/// and answers with its own arguments; history by the plugin.
fn tool_bundle(name: &str, site: &Path) -> String {
    let started = site.join("started");
    let gate = site.join("gate");
    format!(
        "name: {name}\nversion: \"1\"\nmodel: {{endpoint: mock, name: m}}\nprompts: {{system: \"Be brief.\", user: \"{{{{ input }}}}\"}}\nlimits: {{history: last_user_turn}}\ntools:\n  - name: add\n    kind: process\n    effect: read_only\n    timeout: 60s\n    parameters: {{type: object, properties: {{a: {{type: number}}, b: {{type: number}}}}}}\n    command: [sh, -c, \"touch '{}'; while [ ! -f '{}' ]; do sleep 0.05; done; cat\"]\n",
        started.display(),
        gate.display()
    )
}

/// Turn 1: a tool call; turn 2: the answer.
const TOOL_SCRIPT: &str = r#"replies:
  - turn: 1
    tool_calls: [{name: add, arguments: {a: 2, b: 40}}]
  - turn: 2
    content: done
"#;

/// The library is swapped for the `no_first` build (it leaves the first
/// message out) while a job waits in its tool call: the reload binds a new
/// version of the bundle, the waiting job's next request still starts with
/// the system prompt (the library it started with), and a new job's
/// requests leave it out (the new one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_keeps_its_history_plugin_across_a_reload() {
    let (normal, no_first, _) = tokio::task::spawn_blocking(libraries).await.unwrap();
    let server = mock_server(TOOL_SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    drop_library(&site.path().join("plugins"), normal);
    site.put_bundle("calc", &tool_bundle("calc", site.path()));
    let daemon = site.start();
    let http = client();
    let before = get(&http, &daemon, "/v1/bundles/calc").await;
    assert_eq!(before["status"], "ok", "{before}\n{}", daemon.log());

    let first = submit(&http, &daemon, "calc", "add 2 and 40").await;
    let first_id = first["id"].as_str().unwrap().to_string();
    let started = site.path().join("started");
    eventually(
        Duration::from_secs(60),
        "the first job's tool call starts",
        || async { started.exists().then_some(()) },
    )
    .await;

    drop_library(&site.path().join("plugins"), no_first);
    let reloaded = http
        .post(daemon.url("/v1/reload"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(reloaded.status(), 200, "{}", daemon.log());
    eventually(
        Duration::from_secs(30),
        "a new version of the bundle",
        || async {
            let now = get(&http, &daemon, "/v1/bundles/calc").await;
            (now["digest"] != before["digest"] && now["status"] == "ok").then_some(())
        },
    )
    .await;

    std::fs::write(site.path().join("gate"), "").unwrap();
    let old = wait(&http, &daemon, &first_id).await;
    assert_eq!(old["state"], "succeeded", "{old}\n{}", daemon.log());
    let second = submit(&http, &daemon, "calc", "add again").await;
    let new = wait(&http, &daemon, second["id"].as_str().unwrap()).await;
    assert_eq!(new["state"], "succeeded", "{new}\n{}", daemon.log());

    let roles = |request: &Value| -> Vec<String> {
        request["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap().to_string())
            .collect()
    };
    let requests = server.requests();
    let sent: Vec<Vec<String>> = requests.iter().map(roles).collect();
    assert_eq!(
        sent,
        [
            vec!["system", "user"],
            vec!["system", "user", "assistant", "tool"],
            vec!["user"],
            vec!["user", "assistant", "tool"],
        ],
        "the old library for the first job, the new one for the second"
    );
}

/// A library that chooses an index past the end: the job fails with an
/// error naming the plugin and what it chose, and the daemon goes on
/// serving (a job on the built-in strategy succeeds after it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_choosing_a_bad_index_fails_the_turn_not_the_daemon() {
    let (_, _, bad) = tokio::task::spawn_blocking(libraries).await.unwrap();
    let server = mock_server(CHAT).await;
    let site = Site::new(&server.base_url(), "");
    drop_library(&site.path().join("plugins"), bad);
    site.put_bundle("friend", &chat_bundle("friend", "last_user_turn"));
    site.put_bundle("plain", &chat_bundle("plain", "sliding_window"));
    let daemon = site.start();
    let http = client();

    let job = submit(&http, &daemon, "friend", "My name is Ada.").await;
    let failed = wait(&http, &daemon, job["id"].as_str().unwrap()).await;
    assert_eq!(failed["state"], "failed", "{failed}");
    let error = failed["error"].to_string();
    assert!(
        error.contains("history plugin `last_user_turn")
            && error.contains("it chose message 2, but the conversation has 2 messages"),
        "{error}"
    );
    assert!(server.requests().is_empty(), "nothing was sent");

    let plain = submit(&http, &daemon, "plain", "My name is Ada.").await;
    let ok = wait(&http, &daemon, plain["id"].as_str().unwrap()).await;
    assert_eq!(ok["state"], "succeeded", "{ok}\n{}", daemon.log());
}

async fn wait(http: &reqwest::Client, daemon: &Daemon, id: &str) -> Value {
    wait_terminal(http, daemon, id, Duration::from_secs(60)).await
}
