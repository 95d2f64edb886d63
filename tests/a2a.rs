//! The daemon as an A2A 1.0 agent, driven by the protocol's own clients:
//! the Python SDK (`a2a-sdk`, ci/requirements.txt) and the JavaScript SDK
//! (`@a2a-js/sdk`, installed by scripts/test, `SA_TEST_A2A_JS`). Each reads
//! the cards, sends a message (blocking and streamed), gets, lists, cancels
//! and subscribes, answers an approval that parked the task as
//! INPUT_REQUIRED, and meets the errors (an unknown task, a wrong key). A
//! raw client checks what the SDKs cannot show: `SubscribeToTask` resumes
//! after `Last-Event-ID`, also after the daemon was killed (SIGKILL), and an answer is the decision the approvals API
//! would take (the tool runs once). Push notifications, set with the Python
//! SDK and with raw JSON-RPC, reach a local receiver once per state change,
//! in order, with the config's token — also when the daemon is killed
//! between a change and its push — and stop when their config is deleted.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::daemon::{Daemon, Site, client, eventually, file_lines, new_key, read_sse_response};
use common::{mock_server, python};
use serde_json::{Value, json};
use structured_agents::mock::MockServer;

const SCRIPT: &str = r#"
replies:
  - {match: big push, turn: 1, tool_calls: [{id: w1, name: wire_money, arguments: {amount: 500, to: alice}}], delay_ms: 1500}
  - {match: big, turn: 1, tool_calls: [{id: w1, name: wire_money, arguments: {amount: 500, to: alice}}]}
  - {match: big, turn: 2, content: wired}
  - {match: slow, content: never, delay_ms: 60000}
  - {content: "Hello from a bundle."}
"#;

/// A daemon with an API key (returned) and three bundles: `greeter`
/// answers, `sleeper` takes a minute, `bank` wires money over 100 only
/// once a person approves (appending `<amount> <to>` to `effects`).
async fn agent(effects: &Path) -> (MockServer, Site, String) {
    agent_with(effects, "").await
}

/// [`agent`] with more of the daemon's configuration.
async fn agent_with(effects: &Path, config: &str) -> (MockServer, Site, String) {
    let mock = mock_server(SCRIPT).await;
    let site = Site::new(
        &mock.base_url(),
        &format!("[auth]\nkeys_file = \"keys.toml\"\n{config}"),
    );
    let token = new_key(
        &site.path().join("keys.toml"),
        "team",
        &["--scopes", "submit,read,operate,approve"],
    );
    let bundle = |name: &str, description: &str| {
        format!(
            "name: {name}\nversion: \"1\"\ndescription: {description}\nmodel: {{endpoint: mock, name: m, plugin: openai}}\nprompts: {{user: \"{{{{ input }}}}\"}}\n"
        )
    };
    site.put_bundle("greeter", &bundle("greeter", "Greets."));
    site.put_bundle("sleeper", &bundle("sleeper", "Takes its time."));
    let effects = effects.display();
    let bank = format!(
        r#"{}tools:
  - name: wire_money
    kind: process
    effect: unsafe
    description: wire money
    parameters: {{type: object, properties: {{amount: {{type: integer}}, to: {{type: string}}}}, required: [amount, to]}}
    approval: {{when: "args.amount > 100"}}
    command: [python3, -c, "import json,sys; a=json.load(sys.stdin); f=open('{effects}','a'); f.write(str(a['amount']) + ' ' + a['to'] + chr(10)); f.close(); print(json.dumps({{'sent': a['amount']}}))"]
"#,
        bundle("bank", "Wires money.")
    );
    site.put_bundle("bank", &bank);
    (mock, site, token)
}

/// Runs a client script; its one line of JSON.
fn run_client(mut command: Command, daemon: &Daemon) -> Value {
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{:?} failed: {}\n{stdout}\ndaemon log:\n{}",
        command,
        String::from_utf8_lossy(&output.stderr),
        daemon.log()
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// What both SDKs must have seen of the approval: the streamed send ends
/// at INPUT_REQUIRED carrying the parked call, a subscription replays up to
/// it, and the answer `approve` completes the task with the tool's effect.
fn approval_round_trip(seen: &Value, effects: &Path) {
    let parked = seen["parked"].as_array().unwrap();
    assert_eq!(parked[0][0], "task", "{parked:?}");
    let last = parked.last().unwrap();
    assert_eq!(last[0], "status", "{parked:?}");
    assert!(
        last[1].as_str().unwrap().ends_with("INPUT_REQUIRED"),
        "{parked:?}"
    );
    let subscribed = seen["subscribed"].as_array().unwrap();
    assert_eq!(subscribed[0][0], "task", "{subscribed:?}");
    assert!(
        subscribed[0][1]
            .as_str()
            .unwrap()
            .ends_with("INPUT_REQUIRED")
    );
    assert!(
        subscribed.last().unwrap()[1]
            .as_str()
            .unwrap()
            .ends_with("INPUT_REQUIRED"),
        "{subscribed:?}"
    );
    assert!(
        seen["approved"]["state"]
            .as_str()
            .unwrap()
            .ends_with("COMPLETED"),
        "{seen}"
    );
    assert_eq!(seen["approved"]["answer"], "wired");
    assert_eq!(file_lines(effects), vec!["500 alice"]);
}

/// The answer a stream's artifact updates (`["artifact", text, lastChunk,
/// append]`) leave, read as the specification says: an update that does
/// not append replaces the artifact. The last one must be the whole answer
/// (what ADK keeps), and nothing may follow it but the final status.
fn streamed_answer(stream: &[Value]) -> String {
    let mut text = String::new();
    for event in stream.iter().filter(|e| e[0] == "artifact") {
        if event[3] != true {
            text.clear();
        }
        text.push_str(event[1].as_str().unwrap());
    }
    let last = stream.iter().rposition(|e| e[0] == "artifact").unwrap();
    assert_eq!(stream[last][2], true, "the last chunk: {stream:?}");
    assert_eq!(stream[last][3], false, "the whole answer: {stream:?}");
    assert_eq!(last + 2, stream.len(), "then the final status: {stream:?}");
    text
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_sends_streams_gets_lists_cancels_subscribes_and_approves() {
    let effects = tempfile::NamedTempFile::new().unwrap();
    let (_mock, site, token) = agent(effects.path()).await;
    let daemon = site.start();
    let mut command = Command::new(python());
    command
        .arg(common::repo("tests/data/a2a/client.py"))
        .args([&daemon.base, &token]);
    let seen = run_client(command, &daemon);

    // Without a key the card says how to authenticate and names no bundle
    // (its one skill, as A2A requires one, says how to see them); with a
    // key, a skill per bundle.
    assert_eq!(seen["public_card"]["skills"], json!(["bundles"]), "{seen}");
    assert_eq!(seen["public_card"]["schemes"], json!(["bearer"]));
    assert_eq!(seen["public_card"]["url"], daemon.url("/a2a"));
    assert_eq!(seen["card_skills"], json!(["bank", "greeter", "sleeper"]));

    assert_eq!(seen["send"]["state"], "TASK_STATE_COMPLETED", "{seen}");
    assert_eq!(seen["send"]["answer"], "Hello from a bundle.");
    assert_eq!(seen["same_context"], true);
    let stream = seen["stream"].as_array().unwrap();
    assert_eq!(stream[0][0], "task", "{stream:?}");
    assert!(
        stream.contains(&json!(["status", "TASK_STATE_WORKING", []])),
        "{stream:?}"
    );
    assert_eq!(
        streamed_answer(stream),
        "Hello from a bundle.",
        "{stream:?}"
    );
    assert_eq!(
        stream.last().unwrap()[1],
        "TASK_STATE_COMPLETED",
        "{stream:?}"
    );
    assert_eq!(seen["get"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(seen["get"]["answer"], "Hello from a bundle.");
    assert_eq!(
        seen["get"]["history"], 1,
        "the input (the answer is the artifact)"
    );
    assert_eq!(seen["list_context"], true, "{seen}");
    assert!(seen["list_all"].as_u64().unwrap() >= 3, "{seen}");

    assert!(
        ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"]
            .contains(&seen["immediate"].as_str().unwrap()),
        "{seen}"
    );
    assert_eq!(seen["cancelled"], "TASK_STATE_CANCELED");
    assert_eq!(seen["cancel_again"], "TaskNotCancelableError", "{seen}");

    approval_round_trip(&seen, effects.path());
    let data = &seen["parked"].as_array().unwrap().last().unwrap()[2][0];
    assert_eq!(data["tool"], "wire_money", "{seen}");
    // (protobuf's Struct holds numbers as doubles)
    assert_eq!(data["arguments"], json!({"amount": 500.0, "to": "alice"}));

    assert_eq!(seen["unknown_task"], "TaskNotFoundError", "{seen}");
    let wrong = seen["wrong_key"].as_str().unwrap();
    assert!(wrong.contains("401"), "{wrong}");
}

/// Where scripts/test installed `@a2a-js/sdk`; fails loudly without it.
fn a2a_js() -> String {
    let dir = std::env::var("SA_TEST_A2A_JS").unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_default();
        format!("{home}/.cache/structured-agents/a2a-js/node_modules")
    });
    assert!(
        Path::new(&dir).join("@a2a-js/sdk/package.json").exists(),
        "@a2a-js/sdk is missing at {dir}: run scripts/test (it installs it), or set SA_TEST_A2A_JS"
    );
    dir
}

#[tokio::test(flavor = "multi_thread")]
async fn the_javascript_sdk_sends_streams_gets_lists_cancels_subscribes_and_approves() {
    let effects = tempfile::NamedTempFile::new().unwrap();
    let (_mock, site, token) = agent(effects.path()).await;
    let daemon = site.start();
    let mut command = Command::new("node");
    command
        .env("SA_TEST_A2A_JS", a2a_js())
        .arg(common::repo("tests/data/a2a/client.mjs"))
        .args([&daemon.base, &token]);
    let seen = run_client(command, &daemon);

    assert_eq!(seen["send"]["state"], "COMPLETED", "{seen}");
    assert_eq!(seen["send"]["answer"], "Hello from a bundle.");
    let stream = seen["stream"].as_array().unwrap();
    assert_eq!(stream[0][0], "task", "{stream:?}");
    assert_eq!(
        streamed_answer(stream),
        "Hello from a bundle.",
        "{stream:?}"
    );
    assert_eq!(stream.last().unwrap()[1], "COMPLETED", "{stream:?}");
    assert_eq!(seen["get"]["answer"], "Hello from a bundle.");
    assert_eq!(seen["list"], json!([seen["task_id"]]), "{seen}");
    assert_eq!(seen["cancelled"], "CANCELED");
    approval_round_trip(&seen, effects.path());
    assert!(
        seen["unknown_task"]
            .as_str()
            .unwrap()
            .contains("no job with id no-such-task"),
        "{seen}"
    );
    assert!(
        seen["wrong_key"].as_str().unwrap().contains("401"),
        "{seen}"
    );
}

/// One JSON-RPC call to the bank's interface.
fn rpc(
    http: &reqwest::Client,
    daemon: &Daemon,
    token: &str,
    method: &str,
    params: Value,
) -> reqwest::RequestBuilder {
    http.post(daemon.url("/a2a/bank"))
        .bearer_auth(token)
        .json(&json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}))
}

/// `SubscribeToTask` of `task`, after `last` when given.
async fn subscribe(
    daemon: &Daemon,
    token: &str,
    task: &str,
    last: Option<u64>,
) -> reqwest::Response {
    let mut request = rpc(
        &client(),
        daemon,
        token,
        "SubscribeToTask",
        json!({"id": task}),
    );
    if let Some(last) = last {
        request = request.header("Last-Event-ID", last.to_string());
    }
    request.send().await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_subscription_resumes_after_last_event_id_across_a_restart_and_a_message_decides_the_parked_call()
 {
    let effects = tempfile::NamedTempFile::new().unwrap();
    let (_mock, site, token) = agent(effects.path()).await;
    let daemon = site.start();
    let http = client();
    let send = json!({"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "a big transfer"}]},
                      "configuration": {"returnImmediately": true}});
    let sent: Value = rpc(&http, &daemon, &token, "SendMessage", send.clone())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let task = sent["result"]["task"]["id"].as_str().unwrap().to_string();
    // The message id is the idempotency key: sent again, the same task.
    let again: Value = rpc(&http, &daemon, &token, "SendMessage", send)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(again["result"]["task"]["id"], task.as_str(), "{again}");
    eventually(
        Duration::from_secs(30),
        "the task awaits approval",
        || async {
            let got: Value = rpc(&http, &daemon, &token, "GetTask", json!({"id": task}))
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            (got["result"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED").then_some(())
        },
    )
    .await;

    let all = read_sse_response(subscribe(&daemon, &token, &task, None).await, None).await;
    let ids: Vec<u64> = all.iter().filter_map(|(id, _, _)| *id).collect();
    assert!(ids.len() >= 2, "{all:?}");
    // The daemon dies (the task stays parked in the store) and comes back:
    // the subscription resumes with the task, then only what came after
    // the given event, the last update.
    daemon.kill9();
    let daemon = site.start();
    let resumed = read_sse_response(
        subscribe(&daemon, &token, &task, Some(ids[ids.len() - 2])).await,
        None,
    )
    .await;
    assert_eq!(resumed.len(), 2, "{resumed:?}");
    assert_eq!(resumed[1], all[all.len() - 1]);
    let last: Value = serde_json::from_str(&resumed[1].2).unwrap();
    assert_eq!(last["id"], 7);
    assert_eq!(
        last["result"]["statusUpdate"]["status"]["state"],
        "TASK_STATE_INPUT_REQUIRED"
    );

    // A message that is no decision is refused naming the call; a denial
    // with a reason is taken, and the tool never runs.
    let answer = |text: &str| json!({"message": {"messageId": format!("m-{text}"), "taskId": task, "role": "ROLE_USER", "parts": [{"text": text}]}});
    let vague: Value = rpc(&http, &daemon, &token, "SendMessage", answer("maybe"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(vague["error"]["code"], -32602, "{vague}");
    assert!(
        vague["error"]["message"]
            .as_str()
            .unwrap()
            .contains("wire_money"),
        "{vague}"
    );
    let denied: Value = rpc(
        &http,
        &daemon,
        &token,
        "SendMessage",
        answer("deny: not today"),
    )
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(
        denied["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{denied}"
    );
    assert!(file_lines(effects.path()).is_empty());
    // The task has ended: another message to it, or a subscription, is refused.
    let late: Value = rpc(&http, &daemon, &token, "SendMessage", answer("approve"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(late["error"]["code"], -32004, "{late}");
    let ended: Value = subscribe(&daemon, &token, &task, None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(ended["error"]["code"], -32004, "{ended}");
    // An ended task takes no push config: no change of it is left.
    let push: Value = rpc(
        &http,
        &daemon,
        &token,
        "CreateTaskPushNotificationConfig",
        json!({"taskId": task, "url": "http://127.0.0.1:9/hook"}),
    )
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(push["error"]["code"], -32004, "{push}");
}

/// Fast retries, short attempts (a claimed push's lease is the timeout
/// and 5 s).
const PUSH_CONFIG: &str = "[webhooks]\nmax_attempts = 100\nbackoff_base = \"100ms\"\nbackoff_max = \"300ms\"\ntimeout = \"2s\"\n\n[egress]\nallow = [\"http://127.0.0.1:*\"]\n";

/// A push notification as a receiver got it: the path it was sent to, its
/// headers and body.
type Push = (String, axum::http::HeaderMap, Value);

/// A receiver of push notifications at `/hook/{name}` that keeps them
/// (answering 500 to the first `refuse`); `GET /hook/{name}` lists the
/// task states pushed to `name` so far.
async fn push_receiver(refuse: usize) -> (Arc<Mutex<Vec<Push>>>, String) {
    use axum::extract::{Path as UrlPath, State};
    use axum::http::{HeaderMap, StatusCode};
    type Got = Arc<Mutex<Vec<Push>>>;
    let got: Got = Arc::default();
    let refused = Arc::new(AtomicUsize::new(refuse));
    let app = axum::Router::new()
        .route(
            "/hook/{name}",
            axum::routing::post(
                move |State(got): State<Got>,
                      UrlPath(name): UrlPath<String>,
                      headers: HeaderMap,
                      body: String| {
                    let refused = refused.clone();
                    async move {
                        if refused
                            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                            .is_ok()
                        {
                            return StatusCode::INTERNAL_SERVER_ERROR;
                        }
                        let body = serde_json::from_str(&body).unwrap_or(Value::String(body));
                        got.lock().unwrap().push((name, headers, body));
                        StatusCode::OK
                    }
                },
            )
            .get(
                |State(got): State<Got>, UrlPath(name): UrlPath<String>| async move {
                    axum::Json(states(&pushed_to(&got, &name)))
                },
            ),
        )
        .with_state(got.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (got, url)
}

/// The pushes to `name`, in the order they came.
fn pushed_to(got: &Mutex<Vec<Push>>, name: &str) -> Vec<Push> {
    got.lock()
        .unwrap()
        .iter()
        .filter(|(to, _, _)| to == name)
        .cloned()
        .collect()
}

/// The task states of pushes, each checked to be a `StreamResponse` with
/// a `statusUpdate` (as the a2a-lf crate reads one).
fn states(pushes: &[Push]) -> Vec<String> {
    pushes
        .iter()
        .map(|(_, _, body)| {
            let parsed: a2a::StreamResponse = serde_json::from_value(body.clone())
                .unwrap_or_else(|e| panic!("not a StreamResponse ({e}): {body}"));
            assert!(
                matches!(parsed, a2a::StreamResponse::StatusUpdate(_)),
                "{body}"
            );
            body["statusUpdate"]["status"]["state"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

fn header<'a>(push: &'a Push, name: &str) -> Option<&'a str> {
    push.1.get(name).map(|v| v.to_str().unwrap())
}

/// The pushes' delivery ids are all different: no change came twice.
fn distinct_deliveries(pushes: &[Push]) {
    let mut ids: Vec<&str> = pushes
        .iter()
        .map(|(_, _, body)| {
            body["statusUpdate"]["metadata"]["delivery_id"]
                .as_str()
                .unwrap()
        })
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(
        ids.len(),
        pushes.len(),
        "a change was pushed twice: {pushes:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_sets_push_configs_and_each_state_change_is_pushed_once_in_order() {
    let effects = tempfile::NamedTempFile::new().unwrap();
    let (_mock, site, token) = agent_with(effects.path(), PUSH_CONFIG).await;
    // The first push is refused twice: retried, it still comes once.
    let (got, hook) = push_receiver(2).await;
    let daemon = site.start();
    let mut command = Command::new(python());
    command
        .arg(common::repo("tests/data/a2a/push.py"))
        .args([&daemon.base, &token, &hook]);
    let seen = run_client(command, &daemon);
    assert_eq!(seen["done"], "TASK_STATE_COMPLETED", "{seen}");
    assert_eq!(seen["listed"], json!(["extra", "send"]), "{seen}");
    assert_eq!(seen["left"], json!(["send"]), "{seen}");
    assert_eq!(seen["created"]["id"], "extra", "{seen}");
    assert_eq!(seen["created"]["task"], seen["task"], "{seen}");
    assert_eq!(
        seen["got"],
        json!({"token": "tok-send", "scheme": "Bearer"})
    );

    // The task's last change comes last (each job's pushes go in order):
    // once it is here, every push is.
    let pushed = eventually(Duration::from_secs(30), "the COMPLETED push", || async {
        let pushed = pushed_to(&got, "send");
        let last = states(&pushed).last().cloned();
        (last.as_deref() == Some("TASK_STATE_COMPLETED")).then_some(pushed)
    })
    .await;
    assert_eq!(
        states(&pushed),
        [
            "TASK_STATE_SUBMITTED",
            "TASK_STATE_WORKING",
            "TASK_STATE_INPUT_REQUIRED",
            "TASK_STATE_SUBMITTED",
            "TASK_STATE_WORKING",
            "TASK_STATE_COMPLETED"
        ],
        "{pushed:?}"
    );
    distinct_deliveries(&pushed);
    for push in &pushed {
        assert_eq!(push.2["statusUpdate"]["taskId"], seen["task"], "{push:?}");
        assert_eq!(header(push, "x-a2a-notification-token"), Some("tok-send"));
        assert_eq!(header(push, "authorization"), Some("Bearer hook-secret"));
    }
    // The parked call rides in the INPUT_REQUIRED push; the answer in the last.
    let parked = &pushed[2].2["statusUpdate"]["status"]["message"]["parts"][1]["data"];
    assert_eq!(parked["tool"], "wire_money", "{:?}", pushed[2]);
    let answer = &pushed[5].2["statusUpdate"]["status"]["message"]["parts"][0]["text"];
    assert_eq!(answer, "wired", "{:?}", pushed[5]);

    // The config added later heard of what followed, up to its deletion.
    // A change recorded before the config existed is not its to hear: the
    // model's first reply is slow so that the task parks after the config
    // comes, but a loaded machine may still be slower (the script says).
    let extra = pushed_to(&got, "extra");
    let extra_states = states(&extra);
    if seen["parked_before_extra"] == json!(true) {
        assert!(extra_states.is_empty(), "{extra:?}");
    } else {
        assert_eq!(
            extra_states.last().map(String::as_str),
            Some("TASK_STATE_INPUT_REQUIRED"),
            "{extra:?}"
        );
        assert!(extra_states.len() <= 2, "{extra:?}");
    }
    distinct_deliveries(&extra);
    for push in &extra {
        assert_eq!(header(push, "x-a2a-notification-token"), Some("tok-extra"));
        assert_eq!(header(push, "authorization"), None);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_push_config_over_raw_json_rpc_survives_a_sigkill_between_the_change_and_its_push() {
    let effects = tempfile::NamedTempFile::new().unwrap();
    let (_mock, site, token) = agent_with(effects.path(), PUSH_CONFIG).await;
    let (got, hook) = push_receiver(0).await;
    // The daemon kills itself as it is about to send the second push.
    let mut daemon = site.start_with_env(&[("SA_FAILPOINTS", "before_delivery_send@2")]);
    let http = client();
    let send = json!({"message": {"messageId": "m-push", "role": "ROLE_USER", "parts": [{"text": "hello"}]},
                      "configuration": {"returnImmediately": true,
                                        "taskPushNotificationConfig": {"url": format!("{hook}/raw"), "token": "tok-raw"}}});
    let sent: Value = http
        .post(daemon.url("/a2a/greeter"))
        .bearer_auth(&token)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": send}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let task = sent["result"]["task"]["id"].as_str().unwrap().to_string();
    tokio::task::block_in_place(|| daemon.wait_killed_at("before_delivery_send"));
    drop(daemon);
    let daemon = site.start();
    let pushed = eventually(Duration::from_secs(60), "the COMPLETED push", || async {
        let pushed = pushed_to(&got, "raw");
        let last = states(&pushed).last().cloned();
        (last.as_deref() == Some("TASK_STATE_COMPLETED")).then_some(pushed)
    })
    .await;
    assert_eq!(
        states(&pushed),
        [
            "TASK_STATE_SUBMITTED",
            "TASK_STATE_WORKING",
            "TASK_STATE_COMPLETED"
        ],
        "{pushed:?}\n{}",
        daemon.log()
    );
    distinct_deliveries(&pushed);
    for push in &pushed {
        assert_eq!(push.2["statusUpdate"]["taskId"], task.as_str());
        assert_eq!(header(push, "x-a2a-notification-token"), Some("tok-raw"));
    }

    // Raw: list, get, then a config outside egress.allow is refused (the
    // daemon's allow-list here is the default, so a non-http URL stands in).
    let listed: Value = rpc(
        &http,
        &daemon,
        &token,
        "ListTaskPushNotificationConfigs",
        json!({"taskId": task}),
    )
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let configs = listed["result"]["configs"].as_array().unwrap();
    assert_eq!(configs.len(), 1, "{listed}");
    assert_eq!(configs[0]["token"], "tok-raw");
    let id = configs[0]["id"].as_str().unwrap();
    let got_one: Value = rpc(
        &http,
        &daemon,
        &token,
        "GetTaskPushNotificationConfig",
        json!({"taskId": task, "id": id}),
    )
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(got_one["result"]["url"], format!("{hook}/raw"), "{got_one}");
    let unknown: Value = rpc(
        &http,
        &daemon,
        &token,
        "GetTaskPushNotificationConfig",
        json!({"taskId": task, "id": "nope"}),
    )
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(unknown["error"]["code"], -32001, "{unknown}");
    let card: Value = http
        .get(daemon.url("/.well-known/agent-card.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(card["capabilities"]["pushNotifications"], true, "{card}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_push_url_outside_egress_allow_is_refused() {
    let effects = tempfile::NamedTempFile::new().unwrap();
    let (_mock, site, token) = agent_with(
        effects.path(),
        "[egress]\nallow = [\"https://hooks.example/\"]\n",
    )
    .await;
    let daemon = site.start();
    let send = json!({"message": {"messageId": "m-egress", "role": "ROLE_USER", "parts": [{"text": "hello"}]},
                      "configuration": {"taskPushNotificationConfig": {"url": "http://10.0.0.1/steal"}}});
    let refused: Value = client()
        .post(daemon.url("/a2a/greeter"))
        .bearer_auth(&token)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": send}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("egress.allow"), "{message}");
}

/// Without `egress.allow`, a push URL on this machine or a private network
/// is refused in every spelling, and a URL with `user:pass@` always
/// (issue 46): the push sender would otherwise POST the job's changes
/// there and keep what answered.
#[tokio::test(flavor = "multi_thread")]
async fn a_push_url_on_the_machine_or_with_userinfo_is_refused_by_default() {
    let effects = tempfile::NamedTempFile::new().unwrap();
    let (_mock, site, token) = agent(effects.path()).await;
    let daemon = site.start();
    for (i, (url, says)) in [
        ("http://127.1:6379/", "egress.allow"),
        ("http://2130706433:5432/", "egress.allow"),
        ("http://0/", "egress.allow"),
        ("http://[::ffff:127.0.0.1]/", "egress.allow"),
        ("http://169.254.169.254/latest/meta-data/", "egress.allow"),
        ("http://user:pw@hooks.example.com/", "user name or password"),
    ]
    .into_iter()
    .enumerate()
    {
        let send = json!({"message": {"messageId": format!("m-machine-{i}"), "role": "ROLE_USER", "parts": [{"text": "hello"}]},
                          "configuration": {"taskPushNotificationConfig": {"url": url}}});
        let refused: Value = client()
            .post(daemon.url("/a2a/greeter"))
            .bearer_auth(&token)
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": send}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(refused["error"]["code"], -32602, "{url}: {refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{url}: {message}");
    }
}

/// One key's JSON-RPC calls (`None`: no key) to one interface path of a
/// daemon; each answers the response body, whatever the status.
struct Interface<'a> {
    http: reqwest::Client,
    daemon: &'a Daemon,
    token: Option<&'a str>,
    path: &'a str,
}

impl<'a> Interface<'a> {
    fn new(daemon: &'a Daemon, token: Option<&'a str>, path: &'a str) -> Self {
        Self {
            http: client(),
            daemon,
            token,
            path,
        }
    }

    /// The same key at another path.
    fn at(&self, path: &'a str) -> Self {
        Self {
            http: self.http.clone(),
            path,
            ..*self
        }
    }

    async fn call(&self, method: &str, params: Value) -> Value {
        let mut request = self
            .http
            .post(self.daemon.url(self.path))
            .json(&json!({"jsonrpc": "2.0", "id": 9, "method": method, "params": params}));
        if let Some(token) = self.token {
            request = request.bearer_auth(token);
        }
        let answer = request.send().await.unwrap();
        let text = answer.text().await.unwrap();
        let path = self.path;
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path} {method}: {e}: {text}"))
    }

    async fn list(&self, params: Value) -> Value {
        self.call("ListTasks", params).await
    }

    /// `SendMessage` of `message` (see [`said`]) with the request's other
    /// fields (`configuration`) from `more`.
    async fn send(&self, message: Value, more: Value) -> Value {
        let mut params = json!({"message": message});
        for (field, value) in more.as_object().into_iter().flatten() {
            params[field] = value.clone();
        }
        self.call("SendMessage", params).await
    }
}

/// A user's message `id` saying `text`.
fn said(id: &str, text: &str) -> Value {
    json!({"messageId": id, "role": "ROLE_USER", "parts": [{"text": text}]})
}

/// The ids of the tasks a `ListTasks` answer lists, in its order.
fn listed_ids(listed: &Value) -> Vec<String> {
    listed["result"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect()
}

/// A2A 1.0 as the official TCK checks it (issue 49): the interface URL
/// with a trailing slash is served; `ListTasks`' `totalSize` is the total
/// of every page; proto field names (`page_size`, `task_id`) are read as
/// their JSON names; a body that is not JSON is a JSON-RPC error, not a
/// REST 415; and `GetExtendedAgentCard` is unsupported where the card says
/// `extendedAgentCard: false` (a daemon without keys).
#[tokio::test(flavor = "multi_thread")]
async fn trailing_slashes_total_size_proto_names_and_transport_errors_are_as_the_tck_checks() {
    let effects = tempfile::NamedTempFile::new().unwrap();
    let (_mock, site, token) = agent(effects.path()).await;
    let daemon = site.start();
    let http = client();
    let greeter = Interface::new(&daemon, Some(&token), "/a2a/greeter");
    let hello = |n: usize| said(&format!("m-total-{n}"), "hello");
    for (n, path) in ["/a2a/greeter/", "/a2a/greeter", "/a2a/greeter/"]
        .iter()
        .enumerate()
    {
        let sent = greeter.at(path).send(hello(n), json!({})).await;
        assert_eq!(
            sent["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
            "{path}: {sent}"
        );
    }
    // `/a2a/` names the bundle in the message's metadata, as `/a2a` does.
    let mut routed = hello(3);
    routed["metadata"] = json!({"bundle": "greeter"});
    let sent = greeter.at("/a2a/").send(routed, json!({})).await;
    assert_eq!(
        sent["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{sent}"
    );

    // Two tasks a page, four in all; `page_size` as the proto names it.
    let listed = greeter.list(json!({"page_size": 2})).await;
    let result = &listed["result"];
    assert_eq!(result["tasks"].as_array().unwrap().len(), 2, "{listed}");
    assert_eq!(result["pageSize"], 2, "{listed}");
    assert_eq!(
        result["totalSize"], 4,
        "the total, not the page's count: {listed}"
    );
    let next = result["nextPageToken"].as_str().unwrap();
    let second = greeter
        .list(json!({"pageSize": 2, "page_token": next}))
        .await;
    assert_eq!(second["result"]["totalSize"], 4, "{second}");
    let task = result["tasks"][0]["id"].as_str().unwrap();
    let got = greeter
        .call("GetTask", json!({"id": task, "history_length": 0}))
        .await;
    assert_eq!(got["result"]["id"], task, "{got}");
    let configs = greeter
        .call("ListTaskPushNotificationConfigs", json!({"task_id": task}))
        .await;
    assert!(
        configs["result"]["configs"].is_array() || configs["result"].is_object(),
        "{configs}"
    );
    assert!(
        configs.get("error").is_none(),
        "task_id is taskId: {configs}"
    );

    // A wrong Content-Type: a JSON-RPC error (a key is still asked first).
    let wrong = http
        .post(daemon.url("/a2a/"))
        .bearer_auth(&token)
        .header("content-type", "text/plain")
        .body(r#"{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 200);
    let wrong: Value = wrong.json().await.unwrap();
    assert_eq!(wrong["jsonrpc"], "2.0", "{wrong}");
    assert_eq!(wrong["error"]["code"], -32600, "{wrong}");
    let anonymous = http
        .post(daemon.url("/a2a/"))
        .header("content-type", "text/plain")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);

    // With keys the card offers an extended card, and it is given.
    let extended = greeter
        .at("/a2a")
        .call("GetExtendedAgentCard", json!({}))
        .await;
    assert!(extended["result"]["skills"].is_array(), "{extended}");
    drop(daemon);

    // Without keys the card says `extendedAgentCard: false`: unsupported.
    let mock = mock_server(SCRIPT).await;
    let open = Site::new(&mock.base_url(), "");
    open.put_bundle(
        "greeter",
        "name: greeter\nversion: \"1\"\nmodel: {endpoint: mock, name: m, plugin: openai}\nprompts: {user: \"{{ input }}\"}\n",
    );
    let daemon = open.start();
    let card: Value = http
        .get(daemon.url("/.well-known/agent-card.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(card["capabilities"]["extendedAgentCard"], false, "{card}");
    for path in ["/a2a", "/a2a/"] {
        let refused = Interface::new(&daemon, None, path)
            .call("GetExtendedAgentCard", json!({}))
            .await;
        assert_eq!(
            refused["error"]["code"], -32004,
            "UnsupportedOperationError: {refused}"
        );
    }
}

/// What the official TCK's MUST level found (`tests/a2a_tck.rs` runs it):
/// an id that is not a string, a number or null makes the call an invalid
/// request (`-32600`, answered under null); a page token the agent never
/// gave and a negative `historyLength` are invalid params (`-32602`), a
/// file part an unsupported content type (`-32005`); the
/// daemon's card is also beside its interface
/// (`/a2a/.well-known/agent-card.json`, where the TCK looks), and a card
/// that may name no bundle still holds a skill (A2A 1.0 §5.7: "Arrays
/// marked as required MUST contain at least one element").
#[tokio::test(flavor = "multi_thread")]
async fn odd_ids_page_tokens_and_history_lengths_are_refused_and_a_card_always_has_a_skill() {
    let effects = tempfile::NamedTempFile::new().unwrap();
    let (_mock, site, token) = agent(effects.path()).await;
    let daemon = site.start();
    let http = client();
    let greeter = Interface::new(&daemon, Some(&token), "/a2a/greeter");
    let odd = http
        .post(daemon.url("/a2a/greeter"))
        .bearer_auth(&token)
        .json(&json!({"jsonrpc": "2.0", "id": {"bad": "type"}, "method": "GetTask", "params": {"id": "x"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(odd.status(), 200);
    let odd: Value = odd.json().await.unwrap();
    assert_eq!(odd["error"]["code"], -32600, "{odd}");
    assert_eq!(odd["id"], Value::Null, "{odd}");

    let hello = said("m-history", "hello");
    for (method, params) in [
        ("ListTasks", json!({"pageToken": "invalid-token-xyz"})),
        ("ListTasks", json!({"historyLength": -1})),
        ("GetTask", json!({"id": "x", "historyLength": -1})),
        (
            "SendMessage",
            json!({"message": hello, "configuration": {"historyLength": -1}}),
        ),
        (
            "SendStreamingMessage",
            json!({"message": hello, "configuration": {"historyLength": -1}}),
        ),
    ] {
        let refused = greeter.call(method, params.clone()).await;
        assert_eq!(
            refused["error"]["code"], -32602,
            "{method} {params}: {refused}"
        );
    }
    // A file part of A2A 1.0 (`url`, `raw`) is a content type this agent
    // does not take; v0.3's `file` part is not a part at all.
    for (part, code) in [
        (
            json!({"url": "https://example.com/a.txt", "mediaType": "text/plain"}),
            -32005,
        ),
        (
            json!({"file": {"name": "a.txt", "fileWithBytes": "aGk="}}),
            -32602,
        ),
    ] {
        let mut message = said("m-file", "hi");
        message["parts"].as_array_mut().unwrap().push(part.clone());
        let refused = greeter.send(message, json!({})).await;
        assert_eq!(refused["error"]["code"], code, "{part}: {refused}");
    }

    // A token a page gave is taken; a task's id alone is no token.
    let mut ids = Vec::new();
    for n in 0..2 {
        let sent = greeter
            .send(said(&format!("m-page-{n}"), "hello"), json!({}))
            .await;
        ids.push(sent["result"]["task"]["id"].as_str().unwrap().to_string());
    }
    let first = greeter.list(json!({"pageSize": 1})).await;
    let next = first["result"]["nextPageToken"].as_str().unwrap();
    let page = greeter
        .list(json!({"pageSize": 1, "pageToken": next}))
        .await;
    assert_eq!(page["result"]["tasks"][0]["id"], ids[0].as_str(), "{page}");
    let refused = greeter.list(json!({"pageToken": ids[0]})).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");

    // The card beside the interface is the daemon's; without a key it
    // names no bundle, yet holds a skill.
    let card = |path: &'static str| {
        let http = http.clone();
        let url = daemon.url(path);
        async move {
            let answer = http.get(url).send().await.unwrap();
            assert_eq!(answer.status(), 200, "{path}");
            answer.json::<Value>().await.unwrap()
        }
    };
    let beside = card("/a2a/.well-known/agent-card.json").await;
    assert_eq!(beside, card("/.well-known/agent-card.json").await);
    assert_eq!(beside["skills"].as_array().unwrap().len(), 1, "{beside}");
    assert_eq!(beside["skills"][0]["id"], "bundles", "{beside}");
    for bundle in ["greeter", "sleeper", "bank"] {
        assert!(!beside.to_string().contains(bundle), "{beside}");
    }
}

/// What the TCK's `ListTasks` tests check past the helper they cannot
/// get by (it wants a task still WORKING after a `SendMessage` that waits
/// for the end; docs/api.md, The A2A TCK): filtered by context and by
/// state, without artifacts unless asked, the history cut to
/// `historyLength`, only tasks changed since `statusTimestampAfter`,
/// paged with `totalSize` the whole count, the last updated first, and a task
/// sent with `returnImmediately` cancelled while it runs.
#[tokio::test(flavor = "multi_thread")]
async fn list_tasks_filters_cuts_pages_and_a_running_task_is_cancelled() {
    let effects = tempfile::NamedTempFile::new().unwrap();
    let (_mock, site, token) = agent(effects.path()).await;
    let daemon = site.start();
    let greeter = Interface::new(&daemon, Some(&token), "/a2a/greeter");
    let message = |n: usize, text: &str, context: Option<&str>| {
        let mut m = said(&format!("m-list-{n}"), text);
        if let Some(context) = context {
            m["contextId"] = json!(context);
        }
        m
    };
    let first = greeter.send(message(0, "hello", None), json!({})).await;
    let context = first["result"]["task"]["contextId"]
        .as_str()
        .unwrap()
        .to_string();
    for n in 1..3 {
        let done = greeter
            .send(message(n, "hello", Some(&context)), json!({}))
            .await;
        assert_eq!(
            done["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
            "{done}"
        );
    }
    let slow = greeter
        .send(
            message(3, "slow", None),
            json!({"configuration": {"returnImmediately": true}}),
        )
        .await;
    let slow = slow["result"]["task"]["id"].as_str().unwrap().to_string();
    // A fresh daemon: the greeter's tasks are these four (the slow one in
    // a context of its own: in the others' it would be their fourth turn).
    let list = |params: Value| greeter.list(params);
    let working = eventually(Duration::from_secs(10), "the slow task runs", || async {
        let listed = list(json!({"status": "TASK_STATE_WORKING"})).await;
        (listed["result"]["totalSize"] == 1).then_some(listed)
    })
    .await;
    assert_eq!(
        working["result"]["tasks"][0]["id"],
        slow.as_str(),
        "{working}"
    );

    let all = list(json!({})).await["result"].clone();
    let tasks = all["tasks"].as_array().unwrap();
    assert_eq!(
        (tasks.len(), &all["totalSize"], &all["nextPageToken"]),
        (4, &json!(4), &json!("")),
        "{all}"
    );
    assert_eq!(tasks[0]["id"], slow.as_str(), "the newest first: {all}");
    let stamps: Vec<chrono::DateTime<chrono::FixedOffset>> = tasks
        .iter()
        .map(|t| {
            chrono::DateTime::parse_from_rfc3339(t["status"]["timestamp"].as_str().unwrap())
                .unwrap()
        })
        .collect();
    assert!(
        stamps.windows(2).all(|w| w[0] >= w[1]),
        "the last changed first: {stamps:?}"
    );
    assert!(tasks.iter().all(|t| t.get("artifacts").is_none()), "{all}");
    assert_eq!(tasks[3]["history"].as_array().unwrap().len(), 1, "{all}");

    let in_context = list(json!({"contextId": context})).await;
    assert_eq!(in_context["result"]["totalSize"], 3, "{in_context}");
    let completed = list(json!({"status": "TASK_STATE_COMPLETED", "includeArtifacts": true})).await;
    let completed = completed["result"]["tasks"].as_array().unwrap().clone();
    assert_eq!(completed.len(), 3, "{completed:?}");
    assert!(
        completed
            .iter()
            .all(|t| t["artifacts"][0]["parts"][0]["text"] == "Hello from a bundle."),
        "{completed:?}"
    );
    for (asked, kept) in [(0, 0), (1, 1), (5, 1)] {
        let cut = list(json!({"historyLength": asked})).await;
        for task in cut["result"]["tasks"].as_array().unwrap() {
            let held = task
                .get("history")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            assert_eq!(held, kept, "historyLength {asked}: {task}");
        }
    }
    let later = list(json!({"statusTimestampAfter": "2999-01-01T00:00:00Z"})).await;
    assert_eq!(later["result"]["tasks"], json!([]), "{later}");
    let earlier = list(json!({"statusTimestampAfter": "2000-01-01T00:00:00Z"})).await;
    assert_eq!(earlier["result"]["totalSize"], 4, "{earlier}");

    let page = list(json!({"pageSize": 3})).await["result"].clone();
    assert_eq!(
        (page["tasks"].as_array().unwrap().len(), &page["totalSize"]),
        (3, &json!(4)),
        "{page}"
    );
    let token = page["nextPageToken"].as_str().unwrap();
    let last = list(json!({"pageSize": 3, "pageToken": token})).await["result"].clone();
    assert_eq!(last["tasks"].as_array().unwrap().len(), 1, "{last}");
    assert_eq!(
        (&last["totalSize"], &last["nextPageToken"]),
        (&json!(4), &json!("")),
        "{last}"
    );
    assert_eq!(last["tasks"][0]["id"], tasks[3]["id"], "{last}");

    let cancelled = greeter.call("CancelTask", json!({"id": slow})).await;
    assert_eq!(cancelled["result"]["id"], slow.as_str(), "{cancelled}");
    assert_eq!(
        cancelled["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{cancelled}"
    );
}

/// `ListTasks` lists the task updated last first (A2A 1.0 §3.1.4), not
/// the one created last: a task parked for an approval, then a newer one
/// completed, then the parked one cancelled — it comes first. A page token
/// stays where its page ended: the cancelled task moved ahead of it, so the
/// walk begun before the cancel does not show it, nor again the task it
/// showed (docs/api.md, A2A).
#[tokio::test(flavor = "multi_thread")]
async fn list_tasks_puts_the_task_updated_last_first_and_a_page_token_stays_put() {
    let effects = tempfile::NamedTempFile::new().unwrap();
    let (_mock, site, token) = agent(effects.path()).await;
    let daemon = site.start();
    let bank = Interface::new(&daemon, Some(&token), "/a2a/bank");
    let parked = bank
        .send(said("m-order-0", "a big transfer"), json!({}))
        .await;
    assert_eq!(
        parked["result"]["task"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{parked}"
    );
    let older = parked["result"]["task"]["id"].as_str().unwrap().to_string();
    let done = bank.send(said("m-order-1", "hello"), json!({})).await;
    assert_eq!(
        done["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{done}"
    );
    let newer = done["result"]["task"]["id"].as_str().unwrap().to_string();

    let first = bank.list(json!({"pageSize": 1})).await;
    assert_eq!(listed_ids(&first), [newer.as_str()], "{first}");
    assert_eq!(first["result"]["totalSize"], 2, "{first}");
    let next = first["result"]["nextPageToken"]
        .as_str()
        .unwrap()
        .to_string();

    let cancelled = bank.call("CancelTask", json!({"id": older})).await;
    assert_eq!(
        cancelled["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{cancelled}"
    );
    let rest = bank.list(json!({"pageSize": 1, "pageToken": next})).await;
    assert_eq!(listed_ids(&rest), Vec::<String>::new(), "{rest}");
    assert_eq!(
        (
            &rest["result"]["totalSize"],
            &rest["result"]["nextPageToken"]
        ),
        (&json!(2), &json!("")),
        "{rest}"
    );

    let all = bank.list(json!({})).await;
    assert_eq!(
        listed_ids(&all),
        [older, newer],
        "the last updated first: {all}"
    );
    let stamp = |n: usize| {
        let text = all["result"]["tasks"][n]["status"]["timestamp"]
            .as_str()
            .unwrap();
        chrono::DateTime::parse_from_rfc3339(text).unwrap()
    };
    assert!(stamp(0) > stamp(1), "{all}");
}
