//! LangGraph's clients against the real daemon (issue 53): the real
//! `langgraph-sdk` (ci/requirements-langgraph.txt, `.venv-langgraph`) runs
//! each scenario of tests/data/langgraph/driver.py against the binary and
//! its answers are checked here, and LangGraph's JS SDK
//! (`@langchain/langgraph-sdk`, tests/data/langgraph/client.cjs) sees the
//! same. Assistants are bundles: found by name or
//! by LangGraph's UUID of it, searched, counted, paged, drawn as a graph,
//! described by schemas; a bundle outside the key's globs is not one.
//! Threads are the key's conversations: made, merged, searched, counted and
//! deleted, their status and messages read from their jobs; another key's
//! thread is not one.

mod common;

use std::time::Duration;

use common::daemon::{
    Site, client_as, eventually, get, new_key, post_json, submit_body, wait_terminal,
};
use common::langgraph::{ADDER, RUN_SCRIPT, driver, js_client, message_types};
use common::mock_server;
use serde_json::{Value, json};

const SCRIPT: &str = "replies:\n  - content: done\n";

fn bundle(name: &str, version: &str, extra: &str) -> String {
    format!(
        "name: {name}\nversion: \"{version}\"\ndescription: the {name} bundle\nmodel: {{endpoint: mock, name: m}}\nprompts: {{user: \"{{{{ input }}}} in {{{{ lang }}}}\"}}\n{extra}"
    )
}

const TOOLS: &str = "tools:\n  - name: add\n    kind: process\n    effect: read_only\n    parameters: {type: object, properties: {a: {type: number}}}\n    command: [python3, -c, \"print(1)\"]\n";

/// LangGraph's default assistant id of graph `name`.
fn assistant_id(name: &str) -> String {
    let namespace = uuid::Uuid::parse_str("6ba7b821-9dad-11d1-80b4-00c04fd430c8").unwrap();
    uuid::Uuid::new_v5(&namespace, name.as_bytes()).to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn assistants_are_the_bundles_a_key_may_read() {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    let key = new_key(
        &site.path().join("keys.toml"),
        "team",
        &["--scopes", "submit,read", "--bundles", "calc,plain,other"],
    );
    site.put_bundle("calc", &bundle("calc", "1", TOOLS));
    site.put_bundle("plain", &bundle("plain", "1", ""));
    site.put_bundle("other", &bundle("other", "1", ""));
    site.put_bundle("secret", &bundle("secret", "1", ""));
    let daemon = site.start();
    // A second version of calc: its first is one the daemon served.
    site.put_bundle("calc", &bundle("calc", "2", TOOLS));
    let http = client_as(&key);
    eventually(Duration::from_secs(30), "calc version 2 loaded", || async {
        let b = get(&http, &daemon, "/v1/bundles/calc").await;
        (b["version"] == "2").then_some(())
    })
    .await;

    let got = driver(&daemon, &key, "assistants", &["secret"]).await;
    let names = |list: &Value| -> Vec<String> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|a| a["graph_id"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let mut all = names(&got["search"]);
    all.sort();
    assert_eq!(all, ["calc", "other", "plain"], "{}", got["search"]);
    let calc = got["search"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["graph_id"] == "calc")
        .unwrap();
    assert_eq!(calc["assistant_id"], assistant_id("calc"));
    assert_eq!(calc["name"], "calc");
    assert_eq!(calc["description"], "the calc bundle");
    assert_eq!(calc["config"], json!({}));
    assert_eq!(calc["metadata"]["created_by"], "system");
    assert_eq!(calc["metadata"]["bundle_version"], "2");
    assert_eq!(calc["metadata"]["status"], "ok");
    assert_eq!(calc["version"], 2, "the second version calc served");
    assert_eq!(names(&got["search_graph_id"]), ["calc"]);
    assert_eq!(names(&got["search_name"]), ["calc"]);
    assert_eq!(names(&got["search_metadata"]), ["calc"]);
    assert_eq!(names(&got["search_sorted"]), ["calc", "other", "plain"]);
    for selected in got["search_select"].as_array().unwrap() {
        let mut keys: Vec<&String> = selected.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, ["assistant_id", "name"], "{selected}");
    }
    // Paged one at a time: the SDK reads the next offset from the header.
    assert_eq!(got["page"]["assistants"].as_array().unwrap().len(), 1);
    assert_eq!(got["page"]["next"], "1");
    assert_eq!(got["page_two"].as_array().unwrap().len(), 1);
    assert_ne!(
        got["page_two"][0]["graph_id"],
        got["page"]["assistants"][0]["graph_id"]
    );
    assert_eq!(
        (&got["count"], &got["count_graph_id"]),
        (&json!(3), &json!(1))
    );
    // By name and by LangGraph's id: the same assistant.
    assert_eq!(got["get_by_name"], got["get_by_id"]);

    // Its schemas: messages in and out; the prompts' variable as context.
    let schemas = &got["schemas"];
    assert_eq!(schemas["graph_id"], "calc");
    assert_eq!(
        schemas["input_schema"]["properties"]["messages"]["type"],
        "array"
    );
    assert_eq!(
        schemas["context_schema"]["properties"],
        json!({"lang": {"type": "string"}})
    );
    assert_eq!(
        schemas["config_schema"]["properties"],
        json!({"lang": {"type": "string"}})
    );
    // Its graph: the agent loop, the tools named; without tools, one node.
    let graph = &got["graph"];
    let ids: Vec<&str> = graph["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["__start__", "model", "tools", "__end__"]);
    assert_eq!(graph["nodes"][2]["data"]["tools"], json!(["add"]));
    assert!(
        graph["edges"]
            .as_array()
            .unwrap()
            .contains(&json!({"source": "model", "target": "tools", "conditional": true}))
    );
    assert_eq!(got["graph_xray"], got["graph"]);
    assert_eq!(got["graph_plain"]["nodes"].as_array().unwrap().len(), 3);
    assert_eq!(got["subgraphs"], json!({}));
    // Its versions, the newest first: 2 serving, 1 served before.
    let versions: Vec<(Value, Value, Value)> = got["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["version"].clone(),
                v["metadata"]["bundle_version"].clone(),
                v["metadata"]["status"].clone(),
            )
        })
        .collect();
    assert_eq!(
        versions,
        [
            (json!(2), json!("2"), json!("serving")),
            (json!(1), json!("1"), json!("served"))
        ]
    );
    // A bundle outside the key's globs is no assistant, as an unknown one.
    assert_eq!(got["hidden_get"], 404);
    assert_eq!(got["hidden_search"], json!([]));
    assert_eq!(got["unknown_get"], 404);

    // LangGraph's JS SDK sees the same.
    let js = js_client(&daemon, &key, "assistants").await;
    assert_eq!(js["names"], json!(["calc", "other", "plain"]), "{js}");
    assert_eq!(js["paged"], json!({"length": 1, "next": "1"}));
    assert_eq!(js["calc"], got["get_by_name"]);
    assert_eq!(
        js["nodes"],
        json!(["__start__", "model", "tools", "__end__"])
    );
    assert_eq!(
        js["context"]["properties"],
        json!({"lang": {"type": "string"}})
    );
    assert_eq!(
        (&js["count"], &js["versions"]),
        (&json!(1), &json!(["2", "1"]))
    );
    assert_eq!(js["hidden"], 404);
}

const THREAD_SCRIPT: &str = r#"
replies:
  - match: "2+3"
    turn: 1
    tool_calls: [{id: call-1, name: add, arguments: {a: 2, b: 3}}]
  - match: "2+3"
    turn: 2
    content: "2+3 is 5."
  - match: "pay"
    tool_calls: [{id: p1, name: pay, arguments: {amount: 5}}]
  - content: done
"#;

const BANK: &str = r#"name: bank
version: "1"
model: {endpoint: mock, name: m}
prompts: {user: "{{ input }}"}
tools:
  - name: pay
    kind: process
    effect: read_only
    approval: always
    parameters: {type: object, properties: {amount: {type: integer}}}
    command: [python3, -c, "print(1)"]
"#;

#[tokio::test(flavor = "multi_thread")]
async fn threads_are_the_keys_conversations() {
    let server = mock_server(THREAD_SCRIPT).await;
    let site = Site::new(&server.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    let keys = site.path().join("keys.toml");
    let key = new_key(&keys, "team", &["--scopes", "submit,read"]);
    let other = new_key(&keys, "other", &["--scopes", "submit,read"]);
    let reader = new_key(&keys, "reader", &["--scopes", "read"]);
    site.put_bundle("adder", ADDER);
    site.put_bundle("bank", BANK);
    let daemon = site.start();
    let http = client_as(&key);
    // A conversation made by a job is a thread: one that called a tool and
    // answered, one parked on an approval; another key's is not the key's.
    let chat = submit_body(
        &http,
        &daemon,
        json!({"bundle": "adder", "input": "2+3", "conversation_id": "chat-1"}),
    )
    .await;
    let chat_id = chat["id"].as_str().unwrap().to_string();
    let done = wait_terminal(&http, &daemon, &chat_id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    let parked = submit_body(
        &http,
        &daemon,
        json!({"bundle": "bank", "input": "pay", "conversation_id": "parked"}),
    )
    .await;
    let parked_id = parked["id"].as_str().unwrap().to_string();
    eventually(Duration::from_secs(60), "the payment parked", || async {
        let job = get(&http, &daemon, &format!("/v1/jobs/{parked_id}")).await;
        (job["state"] == "awaiting_approval").then_some(())
    })
    .await;
    submit_body(
        &client_as(&other),
        &daemon,
        json!({"bundle": "adder", "input": "hi", "conversation_id": "secret-thread"}),
    )
    .await;

    let got = driver(&daemon, &key, "threads", &["secret-thread"]).await;
    let made = &got["made"];
    assert_eq!(made["thread_id"], "t-one");
    assert_eq!(made["metadata"], json!({"team": "a", "n": 1}));
    assert_eq!(
        (&made["status"], &made["values"], &made["interrupts"]),
        (&json!("idle"), &json!({}), &json!({}))
    );
    assert_eq!(got["again"], got["made"], "if_exists: do_nothing");
    assert_eq!(got["raised"], 409);
    assert!(
        uuid::Uuid::parse_str(got["fresh"]["thread_id"].as_str().unwrap()).is_ok(),
        "{}",
        got["fresh"]
    );
    assert_eq!(
        (&got["bad_id"], &got["supersteps"]),
        (&json!(422), &json!(422))
    );
    assert_eq!(got["patched"]["metadata"], json!({"n": 2}));
    assert_eq!(got["got"]["metadata"], json!({"n": 2}));

    // Its messages, from the journal: the input, the call, its result, the
    // answer — ids the same on every read.
    let thread = &got["chat"];
    assert_eq!(thread["status"], "idle");
    assert_eq!(
        message_types(thread),
        ["human", "ai", "tool", "ai"],
        "{thread}"
    );
    let messages = &thread["values"]["messages"];
    assert_eq!(messages[0]["content"], "2+3");
    assert_eq!(messages[0]["id"], format!("{chat_id}:in"));
    assert_eq!(
        messages[1]["tool_calls"],
        json!([{"name": "add", "args": {"a": 2, "b": 3}, "id": "call-1", "type": "tool_call"}])
    );
    assert_eq!(messages[1]["id"], format!("{chat_id}:t1"));
    assert_eq!(
        (
            &messages[2]["content"],
            &messages[2]["tool_call_id"],
            &messages[2]["status"]
        ),
        (&json!("5"), &json!("call-1"), &json!("success"))
    );
    assert_eq!(messages[3]["content"], "2+3 is 5.");
    assert_eq!(got["parked"]["status"], "interrupted");
    assert_eq!(message_types(&got["parked"]), ["human", "ai"]);

    // Searched and counted: the key's own threads only.
    let ids = |list: &Value| -> Vec<String> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|t| t["thread_id"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let mut all = ids(&got["search_all"]);
    all.sort();
    let fresh = got["fresh"]["thread_id"].as_str().unwrap().to_string();
    let mut expected = vec!["chat-1".to_string(), "parked".into(), "t-one".into(), fresh];
    expected.sort();
    assert_eq!(all, expected);
    assert_eq!(ids(&got["search_metadata"]), ["t-one"]);
    assert_eq!(ids(&got["search_status"]), ["parked"]);
    assert_eq!(ids(&got["search_ids"]), ["chat-1", "t-one"]);
    for selected in got["search_select"].as_array().unwrap() {
        let mut keys: Vec<&String> = selected.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, ["status", "thread_id"], "{selected}");
    }
    assert_eq!(ids(&got["page"]), [expected[1].clone()]);
    assert_eq!((&got["count"], &got["count_idle"]), (&json!(4), &json!(3)));
    assert_eq!(got["other_get"], 404);
    assert_eq!(got["values_search"], 422);

    // Deleted with its runs, never while one has not ended.
    assert_eq!(got["delete_parked"], 409);
    assert_eq!(got["delete_unknown"], 404);
    assert_eq!(got["deleted_get"], 404);
    let job = get(&http, &daemon, &format!("/v1/jobs/{parked_id}")).await;
    assert_eq!(job["state"], "awaiting_approval");

    // Its state and history: a checkpoint per durable step, newest first.
    let history = got["history"].as_array().unwrap();
    let step = |s: &Value| {
        (
            s["checkpoint"]["checkpoint_id"]
                .as_str()
                .unwrap()
                .to_string(),
            s["next"].clone(),
            s["metadata"]["source"].clone(),
            s["values"]["messages"].as_array().map_or(0, Vec::len),
        )
    };
    let steps: Vec<_> = history.iter().map(step).collect();
    assert_eq!(
        steps,
        [
            (format!("{chat_id}:3"), json!([]), json!("loop"), 4),
            (format!("{chat_id}:2"), json!(["model"]), json!("loop"), 3),
            (format!("{chat_id}:1"), json!(["tools"]), json!("loop"), 2),
            (format!("{chat_id}:0"), json!(["model"]), json!("input"), 1),
        ]
    );
    assert_eq!(
        history[0]["parent_checkpoint"]["checkpoint_id"],
        format!("{chat_id}:2")
    );
    assert_eq!(history[3]["parent_checkpoint"], Value::Null);
    assert_eq!(
        history[2]["metadata"]["writes"]["model"]["messages"][0]["id"],
        format!("{chat_id}:t1")
    );
    assert_eq!(history[0]["metadata"]["run_id"], chat_id);
    assert_eq!(history[0]["metadata"]["graph_id"], "adder");
    assert_eq!(history[0]["values"], got["chat"]["values"]);
    assert_eq!(
        got["state"],
        history[0].clone(),
        "the state is the newest checkpoint"
    );
    assert_eq!(got["history_before"], json!(history[2..]));
    assert_eq!(got["history_limit"], json!(history[..1]));
    assert_eq!(got["history_metadata"], json!(history[3..]));
    assert_eq!(got["state_by_id"], history[2]);
    assert_eq!(got["state_by_checkpoint"], history[2]);
    let empty = &got["empty_state"];
    assert_eq!(
        (
            &empty["values"],
            &empty["next"],
            &empty["checkpoint"]["checkpoint_id"]
        ),
        (&json!({}), &json!([]), &Value::Null)
    );
    assert_eq!(got["unknown_checkpoint"], 404);
    assert_eq!(got["update_state"], 422);
    assert_eq!(got["other_state"], 404);

    // LangGraph's JS SDK sees the same.
    let js = js_client(&daemon, &key, "threads").await;
    assert_eq!(js["state"], got["state"]);
    let ids: Vec<&Value> = history
        .iter()
        .map(|s| &s["checkpoint"]["checkpoint_id"])
        .collect();
    assert_eq!(js["history"], json!(ids));
    assert_eq!(js["made"]["metadata"], json!({"ui": "js"}), "{js}");
    assert_eq!(js["updated"]["metadata"], json!({"ui": "js", "seen": true}));
    assert_eq!(js["chat"], got["chat"]);
    assert_eq!(js["found"], json!(["js-one"]));
    assert_eq!(js["count"], 1);
    assert_eq!((&js["again"], &js["gone"]), (&json!(409), &json!(404)));

    // A key that may only read makes no thread.
    let (status, refusal) = post_json(
        &client_as(&reader),
        &daemon,
        "/threads",
        json!({"thread_id": "mine"}),
    )
    .await;
    assert_eq!(status, 403, "{refusal}");
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_are_jobs_on_threads_or_stateless() {
    let server = mock_server(RUN_SCRIPT).await;
    let site = Site::new(&server.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    let keys = site.path().join("keys.toml");
    let key = new_key(&keys, "team", &["--scopes", "submit,read,operate"]);
    site.put_bundle("adder", ADDER);
    let daemon = site.start();
    let http = client_as(&key);

    let got = driver(&daemon, &key, "runs", &[]).await;
    let thread = got["thread"].as_str().unwrap();
    let created = &got["created"];
    let run_id = created["run_id"].as_str().unwrap();
    assert_eq!(created["thread_id"], thread);
    assert_eq!(created["assistant_id"], assistant_id("adder"));
    assert_eq!(created["status"], "pending", "{created}");
    assert_eq!(created["metadata"], json!({"from": "sdk"}));
    assert_eq!(created["multitask_strategy"], "reject");
    // The SDK found the run's address in Content-Location.
    assert_eq!(
        got["seen"],
        json!([{"run_id": run_id, "thread_id": thread}])
    );
    // A run is a job of the key, continuing the thread's conversation.
    let job = get(&http, &daemon, &format!("/v1/jobs/{run_id}")).await;
    assert_eq!(
        (
            &job["bundle"],
            &job["conversation_id"],
            &job["input"],
            &job["owner"]
        ),
        (
            &json!("adder"),
            &json!(thread),
            &json!("2+3"),
            &json!("team")
        )
    );
    assert_eq!(
        message_types(&json!({"values": got["joined"]})),
        ["human", "ai", "tool", "ai"]
    );
    assert_eq!(got["got"]["status"], "success");
    // A second run continues the thread: its values hold both runs; the
    // configurable values (LangGraph's own aside) are the job's variables.
    assert_eq!(
        message_types(&json!({"values": got["waited"]})),
        ["human", "ai", "tool", "ai", "human", "ai"]
    );
    assert_eq!(got["waited"]["messages"][5]["content"], "Again.");
    let listed = got["listed"].as_array().unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[1]["run_id"], run_id, "newest first");
    let second = listed[0]["run_id"].as_str().unwrap();
    let second_job = get(&http, &daemon, &format!("/v1/jobs/{second}")).await;
    assert_eq!(second_job["variables"], json!({"lang": "en"}));
    assert_eq!(got["listed_success"].as_array().unwrap().len(), 1);
    // A stateless run answers its own messages; its job is gone after.
    assert_eq!(
        message_types(&json!({"values": got["stateless"]})),
        ["human", "ai"]
    );
    assert_eq!(got["stateless"]["messages"][1]["content"], "Hello there.");
    // What the daemon does not do is refused by name.
    // A batch starts stateless runs in order, each admitted as one; one
    // run the key may not start refuses the whole batch before any starts.
    let batch = got["batch"].as_array().unwrap();
    assert_eq!(batch.len(), 2, "{batch:?}");
    assert_eq!(
        (
            &batch[0]["metadata"],
            &batch[1]["metadata"],
            &batch[0]["thread_id"]
        ),
        (&json!({"n": 1}), &json!({"n": 2}), &Value::Null)
    );
    let kept = batch[0]["run_id"].as_str().unwrap();
    let kept = wait_terminal(&http, &daemon, kept, Duration::from_secs(60)).await;
    assert_eq!(kept["state"], "succeeded", "{kept}");
    assert_eq!(
        (&got["batch_bad"], &got["batch_bad_body"]),
        (&json!(404), &json!(422))
    );
    // A resume needs a parked run; a run needs a human message.
    assert_eq!(
        (&got["command"], &got["no_input"]),
        (&json!(409), &json!(422))
    );
    assert_eq!(
        (&got["unknown_assistant"], &got["no_thread"]),
        (&json!(404), &json!(404))
    );
    assert_eq!(
        message_types(&json!({"values": got["made_by_run"]})),
        ["human", "ai", "tool", "ai"]
    );
    // A busy thread refuses a second run; cancelled, the run reads
    // interrupted; deleted, it is gone.
    assert_eq!(got["busy"], 409);
    assert_eq!(got["cancelled"]["status"], "interrupted");
    assert_eq!(
        message_types(&json!({"values": got["cancelled_values"]})),
        ["human"]
    );
    assert_eq!(
        (&got["deleted"], &got["other_thread_run"]),
        (&json!(404), &json!(404))
    );

    // Double texting: `enqueue` waits for the runs before it (pending, the
    // thread busy, no `after_seconds`), each starting once the one before
    // ended and from what it left; `interrupt` cancels the busy run (its
    // input stays the thread's), `rollback` deletes it too.
    assert_eq!(got["enqueued"], json!(["pending", "pending"]));
    assert_eq!(got["queueing_status"], "busy");
    assert_eq!(got["enqueue_timed"], 422);
    assert_eq!(
        got["queue_statuses"],
        json!(["interrupted", "success", "success"])
    );
    assert_eq!(
        message_types(&json!({"values": got["after_queue"]})),
        ["human", "human", "ai", "human", "ai"]
    );
    let times: Vec<Value> = {
        let mut times = Vec::new();
        for run in got["queue_runs"].as_array().unwrap() {
            let job = get(
                &http,
                &daemon,
                &format!("/v1/jobs/{}", run.as_str().unwrap()),
            )
            .await;
            times.push(json!([job["started_at"], job["finished_at"]]));
        }
        times
    };
    for pair in times.windows(2) {
        let (ended, started) = (pair[0][1].as_str(), pair[1][0].as_str());
        assert!(
            started.is_some() && ended.is_some() && started >= ended,
            "a queued run started before the run ahead of it ended: {times:?}"
        );
    }
    // A run that would be refused stops nothing.
    assert_eq!(got["bad_interrupt"], 422);
    assert!(
        ["pending", "running"].contains(&got["still_running"].as_str().unwrap()),
        "{}",
        got["still_running"]
    );
    assert_eq!(got["interrupting"]["multitask_strategy"], "interrupt");
    assert_eq!(got["interrupted"]["status"], "interrupted");
    assert_eq!(
        message_types(&json!({"values": got["after_interrupt"]})),
        ["human", "human", "ai"]
    );
    assert_eq!(
        got["after_interrupt"]["messages"][2]["content"],
        "Hello there."
    );
    assert_eq!(got["rolled_back"], 404);
    assert_eq!(
        message_types(&json!({"values": got["after_rollback"]})),
        ["human", "human", "ai", "human", "ai"]
    );
    assert_eq!(
        got["texting_runs"],
        json!(["success", "success", "interrupted"])
    );

    // LangGraph's JS SDK sees the same.
    let js = js_client(&daemon, &key, "runs").await;
    assert_eq!(js["created"]["assistant_id"], assistant_id("adder"), "{js}");
    assert_eq!(
        message_types(&json!({"values": js["joined"]})),
        ["human", "ai", "tool", "ai"]
    );
    assert_eq!(
        message_types(&json!({"values": js["waited"]})),
        ["human", "ai", "tool", "ai", "human", "ai"]
    );
    assert_eq!(js["listed"], json!(["success", "success"]));
    assert_eq!(js["stateless"]["messages"][1]["content"], "Hello there.");
    assert_eq!(js["enqueued"]["pending"], "pending");
    assert_eq!(
        message_types(&json!({"values": js["enqueued"]["joined"]})),
        ["human", "human", "ai"]
    );
}
