//! LangGraph's thread housekeeping against the real daemon (issue 53),
//! with the real Python client: threads pruned several at once, each as a
//! delete deletes one, and `keep_latest` refused by name; a thread copied
//! with its state and history, which then goes its own way.

mod common;

use common::langgraph::{ADDER, RUN_SCRIPT, driver, keyed_site, message_types};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread")]
async fn threads_are_pruned_as_deleted_one_by_one() {
    let (_server, site, key) = keyed_site("replies:\n  - content: hi\n", "submit,read").await;
    let daemon = site.start();

    let got = driver(&daemon, &key, "prune", &[]).await;
    assert_eq!(got["pruned"], json!({"pruned_count": 2}), "{got}");
    assert_eq!(got["one"], 404);
    assert_eq!(got["again"], json!({"pruned_count": 0}));
    assert_eq!(got["keep_latest"], 422);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thread_is_copied_with_its_state_and_history() {
    let (_server, site, key) = keyed_site(RUN_SCRIPT, "submit,read").await;
    site.put_bundle("adder", ADDER);
    let daemon = site.start();

    let got = driver(&daemon, &key, "copy", &[]).await;
    let copied = &got["copied"];
    assert_ne!(copied["thread_id"], got["thread"], "{got}");
    assert_eq!(copied["metadata"], json!({"team": "a"}));
    assert_eq!(copied["status"], "idle");
    // The copy's state and history are the thread's; its runs are the
    // thread's ended runs.
    let contents = |state: &Value| -> Vec<Value> {
        let messages = state["values"]["messages"].as_array().unwrap();
        messages
            .iter()
            .map(|m| json!([m["type"], m["content"]]))
            .collect()
    };
    assert_eq!(contents(&got["copy_state"]), contents(&got["state"]));
    assert_eq!(
        message_types(&got["state"]),
        ["human", "ai", "tool", "ai", "human", "ai"]
    );
    assert_eq!(got["copy_history"], got["history"]);
    assert_eq!(got["copy_runs"], json!(["success", "success"]));
    // Then it goes its own way: a run on the copy continues the copy only.
    assert_eq!(
        message_types(&json!({"values": got["after_copy"]})),
        ["human", "ai", "tool", "ai", "human", "ai", "human", "ai"]
    );
    assert_eq!(contents(&got["thread_after"]), contents(&got["state"]));
    assert_eq!(got["missing"], 404);
}
