//! The Agent Protocol's thread streaming against the real daemon (issue
//! 53): LangGraph's Python SDK (`client.threads.stream`, through
//! tests/data/langgraph/thread_stream.py) starts a run on a thread it
//! names, reads every channel and the run's output, and answers an
//! interrupt with `thread.run.respond`; and over plain HTTP, a thread's
//! stream that stays open across runs, resumes `since` an event after the
//! daemon was killed and started again with exactly what follows, and
//! commands that answer what they cannot do by the protocol's codes; a
//! subscription that keeps an agent call's nested run by its namespace;
//! and LangGraph's JS SDK doing the same.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::time::Duration;

use common::daemon::{Daemon, client_as, eventually, get, job_events, new_key, post_json};
use common::langgraph::{
    ADDER, BOSS, BOSS_SCRIPT, PAY_SCRIPT, PAYER, RUN_SCRIPT, js_client, keyed_site, thread_driver,
};
use serde_json::{Value, json};

/// The events of `events` (the SDK's, as it read them) of `method`.
fn of<'a>(events: &'a [Value], method: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["method"] == method).collect()
}

/// Each event's `params.data.event` (lifecycle, messages, tools).
fn kinds(events: &[&Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            e["params"]["data"]["event"]
                .as_str()
                .unwrap_or("?")
                .to_string()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_streams_a_run_on_a_thread_it_names() {
    let (_server, site, key) = keyed_site(RUN_SCRIPT, "submit,read").await;
    site.put_bundle("adder", ADDER);
    let daemon = site.start();
    let got = thread_driver(&daemon, &key, "run").await;

    let run_id = got["started"]["run_id"].as_str().unwrap();
    let events = got["events"].as_array().unwrap();
    // The run from its start to its end, on the root namespace, numbered
    // in order with an id each.
    let lifecycle = of(events, "lifecycle");
    assert_eq!(kinds(&lifecycle), ["running", "completed"], "{events:?}");
    assert!(
        events
            .iter()
            .all(|e| e["type"] == "event" && e["params"]["namespace"] == json!([]))
    );
    let seqs: Vec<u64> = events.iter().filter_map(|e| e["seq"].as_u64()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert!(
        events
            .iter()
            .filter(|e| e.get("seq").is_some())
            .all(|e| e["event_id"] == json!(e["seq"].to_string()))
    );
    // Its tool call, started and finished by its id.
    let tools = of(events, "tools");
    assert_eq!(kinds(&tools), ["tool-started", "tool-finished"]);
    assert_eq!(tools[0]["params"]["data"]["tool_call_id"], "call-1");
    assert_eq!(tools[0]["params"]["data"]["tool_name"], "add");
    assert_eq!(tools[0]["params"]["data"]["input"], json!({"a": 2, "b": 3}));
    assert_eq!(tools[1]["params"]["data"]["output"], "5");
    // Each message started, its text, finished; the reply's tool call a
    // block of its own.
    let messages = of(events, "messages");
    let message_kinds = kinds(&messages);
    assert_eq!(
        message_kinds
            .iter()
            .filter(|k| *k == "message-start")
            .count(),
        3,
        "{message_kinds:?}"
    );
    assert_eq!(
        message_kinds
            .iter()
            .filter(|k| *k == "message-finish")
            .count(),
        3
    );
    let call = messages
        .iter()
        .find(|m| m["params"]["data"]["content"]["type"] == "tool_call")
        .unwrap();
    assert_eq!(call["params"]["data"]["content"]["name"], "add");
    // The reply's text, in its deltas (a reply's tokens may come before
    // the tool result told at its step: each message's events name it).
    let reply = &got["output"]["messages"][3]["id"];
    let answer: String = messages
        .iter()
        .map(|m| &m["params"]["data"])
        .filter(|m| m["event"] == "content-block-delta" && &m["message_id"] == reply)
        .map(|m| m["delta"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(answer, "2+3 is 5.", "{messages:?}");
    // The nodes' updates, the values after each step, its checkpoints.
    let nodes: Vec<&Value> = of(events, "updates")
        .iter()
        .map(|u| &u["params"]["data"]["node"])
        .collect();
    assert_eq!(nodes, [&json!("model"), &json!("tools"), &json!("model")]);
    let last_values = of(events, "values").last().unwrap()["params"]["data"].clone();
    assert_eq!(last_values["messages"].as_array().unwrap().len(), 4);
    assert!(of(events, "checkpoints").len() >= 4);
    assert!(
        of(events, "checkpoints")
            .iter()
            .all(|c| c["params"]["data"]["metadata"]["run_id"] == run_id)
    );
    // The output is the thread's state after the run, as the SDK reads it.
    assert_eq!(got["output"], got["state"]["values"]);
    assert_eq!(got["output"]["messages"][3]["content"], "2+3 is 5.");
    // A second client on the same thread, joined later, reads the messages
    // again, whole.
    let replayed = got["replayed_texts"].as_array().unwrap();
    assert_eq!(replayed.last().unwrap(), "2+3 is 5.", "{replayed:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_answers_an_interrupt_the_stream_requests() {
    let (_server, site, key) = keyed_site(PAY_SCRIPT, "submit,read,approve").await;
    site.put_bundle("payer", PAYER);
    let daemon = site.start();
    let got = thread_driver(&daemon, &key, "interrupt").await;

    assert_eq!(got["interrupted"], true, "{got}");
    let interrupt = &got["interrupts"][0];
    assert_eq!(interrupt["namespace"], json!([]));
    let request = &interrupt["value"]["action_requests"][0];
    assert_eq!(
        (&request["name"], &request["args"]),
        (&json!("pay"), &json!({"amount": 5})),
        "{interrupt}"
    );
    let job = interrupt["value"]["job_id"].as_str().unwrap();
    assert_eq!(got["answered"]["run_id"], job);
    // The same run went on, paid what the edit said, and answered.
    let messages = got["output"]["messages"].as_array().unwrap();
    let paid: Value = serde_json::from_str(messages[2]["content"].as_str().unwrap()).unwrap();
    assert_eq!(paid, json!({"paid": 7}));
    assert_eq!(messages[3]["content"], "Paid.");
    assert_eq!(got["output"], got["state"]["values"]);
    // Decided the one way every decision goes: recorded, by the key.
    let events = job_events(&client_as(&key), &daemon, job).await;
    let decided = events
        .iter()
        .find(|e| e["type"] == "ApprovalDecided")
        .unwrap();
    assert_eq!(
        (&decided["by"], &decided["decision"], &decided["arguments"]),
        (&json!("team"), &json!("edit"), &json!({"amount": 7})),
        "{decided}"
    );
}

/// Reads a thread's event stream (`body`) until `done` says so of an
/// event (or 60 s pass): every event's data.
async fn read_events(
    http: &reqwest::Client,
    daemon: &str,
    thread: &str,
    body: Value,
    done: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    use eventsource_stream::Eventsource;
    use futures::StreamExt;
    let response = http
        .post(format!("{daemon}/threads/{thread}/stream/events"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream().eventsource();
    let mut out = Vec::new();
    let read = async {
        while let Some(Ok(event)) = stream.next().await {
            let data: Value = serde_json::from_str(&event.data).unwrap();
            assert_eq!(event.event, data["method"].as_str().unwrap_or("error"));
            // An event without a seq (a live one) sends no id: SSE keeps
            // the last one it had.
            if let Some(seq) = data["seq"].as_u64() {
                assert_eq!(event.id, seq.to_string());
            }
            let stop = done(&data);
            out.push(data);
            if stop {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .unwrap_or_else(|_| panic!("the stream did not say what the test waits for: {out:?}"));
    out
}

fn completed(n: usize) -> impl Fn(&Value) -> bool {
    let seen = std::sync::atomic::AtomicUsize::new(0);
    move |event| {
        // A run's own end (a nested run's is in its namespace).
        let ended = event["method"] == "lifecycle"
            && event["params"]["data"]["event"] == "completed"
            && event["params"]["namespace"] == json!([]);
        ended && seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 == n
    }
}

async fn command(
    http: &reqwest::Client,
    daemon: &Daemon,
    thread: &str,
    body: Value,
) -> (u16, Value) {
    post_json(http, daemon, &format!("/threads/{thread}/commands"), body).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_threads_stream_stays_open_across_runs_and_resumes_after_since_across_a_restart() {
    let (_server, site, key) = keyed_site(RUN_SCRIPT, "submit,read").await;
    site.put_bundle("adder", ADDER);
    let other = new_key(
        &site.path().join("keys.toml"),
        "other",
        &["--scopes", "submit,read"],
    );
    let daemon = site.start();
    let http = client_as(&key);
    let thread = uuid::Uuid::new_v4().to_string();
    let (status, _) = post_json(&http, &daemon, "/threads", json!({"thread_id": thread})).await;
    assert_eq!(status, 200);

    // A stream opened before the thread's first run tells that run and
    // the next one.
    let lifecycle = json!({"channels": ["lifecycle", "values"]});
    let reading = {
        let (http, base, thread) = (http.clone(), daemon.base.clone(), thread.clone());
        let body = lifecycle.clone();
        tokio::spawn(async move { read_events(&http, &base, &thread, body, completed(2)).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let start = |text: &str, id: u64| {
        json!({"id": id, "method": "run.start", "params": {
            "assistant_id": "adder", "input": {"messages": [{"role": "user", "content": text}]},
            "multitask_strategy": "enqueue",
        }})
    };
    let (status, first) = command(&http, &daemon, &thread, start("hello", 1)).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(
        (&first["type"], &first["id"]),
        (&json!("success"), &json!(1))
    );
    let (_, second) = command(&http, &daemon, &thread, start("again", 2)).await;
    let live = reading.await.unwrap();
    let runs: Vec<&Value> = live
        .iter()
        .filter(|e| e["params"]["data"]["event"] == "running")
        .collect();
    assert_eq!(runs.len(), 2, "{live:?}");
    // Each run's events start after the seq its start answered.
    let applied = |answer: &Value| answer["meta"]["applied_through_seq"].as_u64().unwrap();
    assert!(applied(&first) < runs[0]["seq"].as_u64().unwrap());
    assert!(applied(&second) < runs[1]["seq"].as_u64().unwrap());
    assert!(applied(&second) > live[0]["seq"].as_u64().unwrap());
    let values = live.iter().rfind(|e| e["method"] == "values").unwrap();
    assert_eq!(values["params"]["data"]["messages"][3]["content"], "Again.");

    // Read whole, the thread is the same events; `since` one of them, what
    // follows it, also from a daemon killed and started again.
    let whole = read_events(
        &http,
        &daemon.base,
        &thread,
        lifecycle.clone(),
        completed(2),
    )
    .await;
    let numbered = |events: &[Value]| -> Vec<(u64, String)> {
        events
            .iter()
            .filter_map(|e| Some((e["seq"].as_u64()?, e["method"].as_str()?.to_string())))
            .collect()
    };
    assert_eq!(numbered(&whole), numbered(&live));
    let middle = numbered(&whole)[numbered(&whole).len() / 2].0;
    daemon.kill9();
    let daemon = site.start();
    let mut since = lifecycle.clone();
    since["since"] = json!(middle);
    let after = read_events(&http, &daemon.base, &thread, since, completed(1)).await;
    let expected: Vec<(u64, String)> = numbered(&whole)
        .into_iter()
        .filter(|(seq, _)| *seq > middle)
        .collect();
    assert_eq!(numbered(&after), expected);

    // The commands: what they cannot do is the protocol's error, named.
    let ask = |method: &str, params: Value| json!({"id": 7, "method": method, "params": params});
    let (status, unknown) = command(&http, &daemon, &thread, ask("run.pause", json!({}))).await;
    assert_eq!(
        (status, &unknown["type"], &unknown["error"]),
        (200, &json!("error"), &json!("unknown_command")),
        "{unknown}"
    );
    assert_eq!(unknown["id"], 7);
    let (_, nothing) = command(
        &http,
        &daemon,
        &thread,
        ask(
            "input.respond",
            json!({"interrupt_id": "x", "response": true}),
        ),
    )
    .await;
    assert_eq!(nothing["error"], "no_such_interrupt", "{nothing}");
    let (_, fork) = command(
        &http,
        &daemon,
        &thread,
        ask("state.fork", json!({"checkpoint_id": "x"})),
    )
    .await;
    assert_eq!(fork["error"], "not_supported");
    let (_, nameless) = command(
        &http,
        &daemon,
        &thread,
        ask("run.start", json!({"input": {}})),
    )
    .await;
    assert_eq!(nameless["error"], "invalid_argument", "{nameless}");
    let (_, state) = command(
        &http,
        &daemon,
        &thread,
        ask("state.get", json!({"namespace": []})),
    )
    .await;
    assert_eq!(state["result"]["values"], values["params"]["data"]);
    let (_, listed) = command(
        &http,
        &daemon,
        &thread,
        ask("state.listCheckpoints", json!({"limit": 2})),
    )
    .await;
    let checkpoints = listed["result"]["checkpoints"].as_array().unwrap();
    assert_eq!(checkpoints.len(), 2, "{listed}");
    assert_eq!(checkpoints[0]["id"], state["result"]["checkpoint"]["id"]);
    assert_eq!(checkpoints[0]["node_name"], "model");
    assert!(checkpoints[0]["step"].as_i64() > checkpoints[1]["step"].as_i64());

    // Another key's thread is the 404 of an unknown one, streamed or
    // commanded; a channel not served is named.
    let other = client_as(&other);
    let stream = format!("/threads/{thread}/stream");
    let (status, _) = post_json(&other, &daemon, &stream, json!({"channels": ["values"]})).await;
    assert_eq!(status, 404);
    let (status, _) = command(&other, &daemon, &thread, ask("state.get", json!({}))).await;
    assert_eq!(status, 404);
    let (status, body) = post_json(
        &http,
        &daemon,
        &stream,
        json!({"channels": ["values", "gossip"]}),
    )
    .await;
    assert_eq!(status, 422);
    assert!(body.to_string().contains("gossip"), "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_subscription_gets_an_agent_calls_run_by_its_namespace() {
    let (_server, site, key) =
        keyed_site(&format!("{RUN_SCRIPT}{BOSS_SCRIPT}"), "submit,read").await;
    site.put_bundle("adder", ADDER);
    site.put_bundle("boss", BOSS);
    let daemon = site.start();
    let http = client_as(&key);
    let thread = uuid::Uuid::new_v4().to_string();
    let start = json!({"id": 1, "method": "run.start", "params": {
        "assistant_id": "boss", "if_not_exists": "create",
        "input": {"messages": [{"role": "user", "content": "ask the helper"}]},
    }});
    let (status, started) = command(&http, &daemon, &thread, start).await;
    assert_eq!(
        (status, &started["type"]),
        (200, &json!("success")),
        "{started}"
    );

    let namespace = |e: &Value| -> Vec<String> {
        let parts = e["params"]["namespace"].as_array().unwrap().iter();
        parts.map(|p| p.as_str().unwrap().to_string()).collect()
    };
    // Every namespace: the job's run at the root, its helper's below the
    // agent call's `tools:<id>`, its values and its messages.
    let read =
        async |body: Value| read_events(&http, &daemon.base, &thread, body, completed(1)).await;
    let every = read(json!({"channels": ["lifecycle", "values", "messages"]})).await;
    let below: Vec<&Value> = every.iter().filter(|e| !namespace(e).is_empty()).collect();
    assert!(!below.is_empty(), "{every:?}");
    let helper = namespace(below[0]);
    assert_eq!(helper.len(), 1);
    assert!(helper[0].starts_with("tools:"), "{helper:?}");
    assert!(below.iter().all(|e| namespace(e) == helper));
    let last_values = below.iter().rfind(|e| e["method"] == "values").unwrap();
    assert_eq!(
        last_values["params"]["data"]["messages"][3]["content"],
        "2+3 is 5."
    );
    assert!(
        below
            .iter()
            .any(|e| e["params"]["data"]["event"] == "message-finish"),
        "{below:?}"
    );
    // Its lifecycle: started by the agent call, completed.
    let lifecycle =
        read(json!({"channels": ["lifecycle"], "namespaces": [helper.clone(), []]})).await;
    let nested_lifecycle: Vec<&Value> = lifecycle
        .iter()
        .filter(|e| namespace(e) == helper)
        .map(|e| &e["params"]["data"])
        .collect();
    assert_eq!(
        nested_lifecycle,
        [
            &json!({"event": "started", "graph_name": "adder", "cause": {"type": "toolCall", "tool_call_id": "h1"}}),
            &json!({"event": "completed", "graph_name": "adder"}),
        ]
    );
    // A prefix by the node's name keeps the helper's alone; the root at
    // depth 0 the job's alone (and its end, by which the reading stops,
    // is the root's).
    let tools = read(
        json!({"channels": ["values", "lifecycle"], "namespaces": [["tools"], []], "depth": 0}),
    )
    .await;
    let kept: Vec<Vec<String>> = tools.iter().map(namespace).collect();
    assert!(
        kept.contains(&helper) && kept.contains(&Vec::new()),
        "{kept:?}"
    );
    let root =
        read(json!({"channels": ["values", "lifecycle"], "namespaces": [[]], "depth": 0})).await;
    assert!(root.iter().all(|e| namespace(e).is_empty()), "{root:?}");
    let root_values = every
        .iter()
        .filter(|e| e["method"] == "values" && namespace(e).is_empty())
        .count();
    assert_eq!(of(&root, "values").len(), root_values);
    // By the task's own id: the helper's alone (the root's end not among
    // them, so read up to the helper's last values).
    let by_id = read_events(
        &http,
        &daemon.base,
        &thread,
        json!({"channels": ["values"], "namespaces": [helper.clone()]}),
        |e| {
            e["params"]["data"]["messages"]
                .as_array()
                .is_some_and(|m| m.len() == 4)
        },
    )
    .await;
    assert!(by_id.iter().all(|e| namespace(e) == helper), "{by_id:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_run_ends_failed_on_the_lifecycle_channel() {
    let (_server, site, key) = keyed_site(RUN_SCRIPT, "submit,read,operate").await;
    site.put_bundle("adder", ADDER);
    let daemon = site.start();
    let http = client_as(&key);
    let thread = uuid::Uuid::new_v4().to_string();
    let start = json!({"id": 1, "method": "run.start", "params": {
        "assistant_id": "adder", "if_not_exists": "create",
        "input": {"messages": [{"role": "user", "content": "slowly"}]},
    }});
    let (_, started) = command(&http, &daemon, &thread, start).await;
    let run = started["result"]["run_id"].as_str().unwrap().to_string();
    let reading = {
        let (http, base, thread) = (http.clone(), daemon.base.clone(), thread.clone());
        let body = json!({"channels": ["lifecycle"]});
        let ended = |e: &Value| e["params"]["data"]["event"] == "failed";
        tokio::spawn(async move { read_events(&http, &base, &thread, body, ended).await })
    };
    // Cancelled once the run is running (the stream told it started).
    eventually(Duration::from_secs(30), "the run running", || async {
        let run = get(&http, &daemon, &format!("/threads/{thread}/runs/{run}")).await;
        (run["status"] == "running").then_some(())
    })
    .await;
    let cancel = http
        .post(daemon.url(&format!("/threads/{thread}/runs/{run}/cancel?wait=true")))
        .send()
        .await
        .unwrap();
    assert!(cancel.status().is_success(), "{}", cancel.status());
    let told = reading.await.unwrap();
    let events: Vec<&Value> = told.iter().map(|e| &e["params"]["data"]).collect();
    assert_eq!(events[0]["event"], "running", "{told:?}");
    let last = events.last().unwrap();
    assert_eq!(last["event"], "failed");
    assert!(
        last["error"].as_str().unwrap().starts_with("cancelled"),
        "{last}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_js_sdk_streams_a_run_and_answers_its_interrupt() {
    let pay = PAY_SCRIPT.trim_start().trim_start_matches("replies:\n");
    let (_server, site, key) =
        keyed_site(&format!("{RUN_SCRIPT}{pay}"), "submit,read,approve").await;
    site.put_bundle("adder", ADDER);
    site.put_bundle("payer", PAYER);
    let daemon = site.start();

    let got = js_client(&daemon, &key, "threadStream").await;
    assert!(got["started"]["run_id"].is_string(), "{got}");
    assert_eq!(texts(&got["output"]).last().unwrap(), "2+3 is 5.", "{got}");
    assert_eq!(texts(&got["state"]["values"]), texts(&got["output"]));
    assert_eq!(
        got["checkpoints"]["checkpoints"].as_array().unwrap().len(),
        2
    );

    // Over a WebSocket whose factory sends the key; a wrong key is refused.
    let got = js_client(&daemon, &key, "threadSocket").await;
    assert!(got["started"]["run_id"].is_string(), "{got}");
    assert_eq!(texts(&got["output"]).last().unwrap(), "2+3 is 5.", "{got}");
    assert_ne!(got["denied"], 200, "{got}");

    let got = js_client(&daemon, &key, "threadInterrupt").await;
    assert_eq!(got["interrupted"], true, "{got}");
    let interrupt = &got["interrupts"][0];
    assert_eq!(interrupt["namespace"], json!([]));
    assert_eq!(
        interrupt["payload"]["action_requests"][0]["args"],
        json!({"amount": 5})
    );
    assert_eq!(texts(&got["parked"]).len(), 2, "{got}");
    let messages = texts(&got["output"]);
    let paid: Value = serde_json::from_str(&messages[2]).unwrap();
    assert_eq!(paid, json!({"paid": 7}), "{got}");
    assert_eq!(messages[3], "Paid.");
}

/// The text of each message of `values`: as sent, or as the JS SDK makes
/// it a LangChain message (serialized with its fields in `kwargs`).
fn texts(values: &Value) -> Vec<String> {
    values["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            let fields = if m["lc"].is_number() { &m["kwargs"] } else { m };
            fields["content"].as_str().unwrap_or_default().to_string()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_reads_a_threads_events_over_a_websocket() {
    let (_server, site, key) = keyed_site(RUN_SCRIPT, "submit,read").await;
    site.put_bundle("adder", ADDER);
    let daemon = site.start();
    let got = thread_driver(&daemon, &key, "websocket").await;

    let events = got["events"].as_array().unwrap();
    assert_eq!(
        kinds(&of(events, "lifecycle")),
        ["running", "completed"],
        "{events:?}"
    );
    assert_eq!(
        kinds(&of(events, "tools")),
        ["tool-started", "tool-finished"]
    );
    assert_eq!(got["output"], got["state"]["values"]);
    assert_eq!(got["output"]["messages"][3]["content"], "2+3 is 5.");
}

/// A WebSocket to `path` with `key`, as a client opens it.
async fn socket(
    daemon: &Daemon,
    path: &str,
    key: &str,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let url = format!("{}{path}", daemon.base.replacen("http", "ws", 1));
    let mut request = url.into_client_request().unwrap();
    request
        .headers_mut()
        .insert("x-api-key", key.parse().unwrap());
    tokio_tungstenite::connect_async(request).await.unwrap().0
}

/// The next frame of `socket` that `pick` says is the one (60 s at most):
/// the frames before it, and it.
async fn frames_until(
    socket: &mut tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    pick: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    use futures::StreamExt;
    let mut seen = Vec::new();
    let read = async {
        while let Some(Ok(message)) = socket.next().await {
            let Ok(text) = message.to_text() else {
                continue;
            };
            let frame: Value = serde_json::from_str(text).unwrap();
            let found = pick(&frame);
            seen.push(frame);
            if found {
                return;
            }
        }
        panic!("the socket closed: {seen:?}");
    };
    tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .unwrap_or_else(|_| panic!("no frame came that the test waits for: {seen:?}"));
    seen
}

#[tokio::test(flavor = "multi_thread")]
async fn a_websocket_takes_commands_and_subscriptions_for_a_thread_not_made_yet() {
    use futures::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let (_server, site, key) = keyed_site(RUN_SCRIPT, "submit,read").await;
    site.put_bundle("adder", ADDER);
    let daemon = site.start();
    let thread = uuid::Uuid::new_v4().to_string();
    let mut ws = socket(&daemon, &format!("/threads/{thread}/stream"), &key).await;
    let send = |frame: Value| Message::Text(frame.to_string().into());
    let answer_to = |id: u64| {
        move |frame: &Value| frame["id"] == id && frame.get("type").is_some_and(|t| t != "event")
    };

    // Subscribed before the thread exists; the run that makes it comes on
    // the same socket, its events after its start's answer.
    ws.send(send(json!({"id": 1, "method": "subscription.subscribe", "params": {"channels": ["lifecycle", "values"]}})))
        .await
        .unwrap();
    let subscribed = frames_until(&mut ws, answer_to(1)).await;
    let subscription = subscribed.last().unwrap()["result"]["subscription_id"]
        .as_str()
        .unwrap()
        .to_string();
    ws.send(send(json!({"id": 2, "method": "run.start", "params": {
        "assistant_id": "adder", "input": {"messages": [{"role": "user", "content": "hello"}]},
    }})))
    .await
    .unwrap();
    let run = frames_until(&mut ws, |f| f["params"]["data"]["event"] == "completed").await;
    let started = run.iter().find(|f| f["id"] == 2).unwrap();
    assert_eq!(started["type"], "success", "{run:?}");
    let values = run.iter().rfind(|f| f["method"] == "values").unwrap();
    assert_eq!(
        values["params"]["data"]["messages"][1]["content"],
        "Hello there."
    );

    // A frame that is no command, an unknown subscription, an unknown
    // command: the protocol's errors, by the command's id.
    ws.send(Message::Text("not json".into())).await.unwrap();
    let bad = frames_until(&mut ws, |f| f["type"] == "error").await;
    assert_eq!(bad.last().unwrap()["error"], "invalid_argument");
    ws.send(send(json!({"id": 3, "method": "subscription.unsubscribe", "params": {"subscription_id": "nope"}})))
        .await
        .unwrap();
    let none = frames_until(&mut ws, answer_to(3)).await;
    assert_eq!(none.last().unwrap()["error"], "no_such_subscription");
    ws.send(send(json!({"id": 4, "method": "state.get", "params": {}})))
        .await
        .unwrap();
    let state = frames_until(&mut ws, answer_to(4)).await;
    assert_eq!(
        state.last().unwrap()["result"]["values"],
        values["params"]["data"]
    );

    // Unsubscribed, the next run's events do not come; its start's answer
    // does.
    ws.send(send(json!({"id": 5, "method": "subscription.unsubscribe", "params": {"subscription_id": subscription}})))
        .await
        .unwrap();
    frames_until(&mut ws, answer_to(5)).await;
    ws.send(send(json!({"id": 6, "method": "run.start", "params": {
        "assistant_id": "adder", "input": {"messages": [{"role": "user", "content": "again"}]},
    }})))
    .await
    .unwrap();
    let started = frames_until(&mut ws, answer_to(6)).await;
    let run = started.last().unwrap()["result"]["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let http = client_as(&key);
    let joined = http
        .get(daemon.url(&format!("/threads/{thread}/runs/{run}/join")))
        .send()
        .await
        .unwrap();
    assert_eq!(joined.status(), 200);
    ws.send(send(json!({"id": 7, "method": "state.get", "params": {}})))
        .await
        .unwrap();
    let quiet = frames_until(&mut ws, answer_to(7)).await;
    assert!(quiet.iter().all(|f| f["type"] != "event"), "{quiet:?}");
    assert_eq!(
        quiet.last().unwrap()["result"]["values"]["messages"][3]["content"],
        "Again."
    );
    ws.close(None).await.unwrap();

    // A plain GET of the SDKs' path is not a socket: named (of
    // `/threads/{id}/stream`, it joins the thread).
    let plain = http
        .get(daemon.url(&format!("/threads/{thread}/stream/events")))
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status(), 422);
    let body: Value = plain.json().await.unwrap();
    assert_eq!(body["error"]["field"], "upgrade", "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_joins_a_thread_and_again_after_an_event() {
    let (_server, site, key) = keyed_site(RUN_SCRIPT, "submit,read,operate").await;
    site.put_bundle("adder", ADDER);
    let daemon = site.start();
    let got = thread_driver(&daemon, &key, "join").await;
    let (slow, again) = (&got["slow"], &got["again"]);
    let parts = got["parts"].as_array().unwrap();
    let metadata = |p: &&Value| p["event"] == "metadata";
    let runs: Vec<&Value> = parts.iter().filter(metadata).map(|p| &p["data"]).collect();
    // The run going on, then the next, each from its start to its end;
    // not the run that had ended.
    assert_eq!(
        runs,
        [
            &json!({"run_id": slow, "attempt": 1}),
            &json!({"status": "run_done", "run_id": slow}),
            &json!({"run_id": again, "attempt": 1}),
            &json!({"status": "run_done", "run_id": again}),
        ],
        "{parts:?}"
    );
    let values = parts.iter().rfind(|p| p["event"] == "values").unwrap();
    let messages = values["data"]["messages"].as_array().unwrap();
    assert_eq!(messages.last().unwrap()["content"], "Again.", "{values}");
    let ids: Vec<u64> = parts
        .iter()
        .filter_map(|p| p["id"].as_str()?.parse().ok())
        .collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    // Joined again after the first run's end: the second run, the same
    // events with the same ids.
    let done = parts
        .iter()
        .position(|p| p["data"] == json!({"status": "run_done", "run_id": slow}))
        .unwrap();
    assert_eq!(got["after"].as_array().unwrap(), &parts[done + 1..]);
    // Its lifecycle: the start and the end.
    let lifecycle: Vec<&Value> = got["lifecycle"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["data"])
        .collect();
    assert_eq!(
        lifecycle,
        [
            &json!({"run_id": again, "attempt": 1}),
            &json!({"status": "run_done", "run_id": again}),
        ]
    );
}
