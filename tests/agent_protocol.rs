//! The Agent Protocol (LangChain's, 0.1.6: `tests/data/agent_protocol/`,
//! vendored with its MIT licence) checked against the real daemon by
//! Schemathesis, under every check it has: each operation of the
//! protocol's own document is served, answers what the document says
//! (statuses, content types, schemas), takes the requests it calls valid
//! and refuses those it calls invalid, never with a 5xx. Where the document
//! and LangGraph's clients disagree, the clients win; each such exception
//! is named, with its reason, in `tests/data/agent_protocol/schemathesis.toml`
//! (docs/langgraph.md#the-agent-protocol). Then a run through the
//! protocol's own routes: an agent, a run on a thread named in the body,
//! waited for by id, found by a search, deleted.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use common::daemon::{Site, client_as, get, new_key, post_json};
use common::langgraph::{ADDER, RUN_SCRIPT, keyed_site, message_types};
use common::schemathesis::{self, counts, operations, seed, tail};
use common::{mock_server, repo};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread")]
async fn schemathesis_finds_the_daemon_as_the_agent_protocol_says() {
    let mock = mock_server("replies:\n  - content: fuzzed\n").await;
    let site = Site::new(&mock.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    let token = common::daemon::new_key(
        &site.path().join("keys.toml"),
        "fuzzer",
        &["--scopes", "admin"],
    );
    site.put_bundle(
        "echo",
        "name: echo\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\n",
    );
    let daemon = site.start();
    let document = repo("tests/data/agent_protocol/openapi.json");
    let output = schemathesis::run(
        &daemon,
        &token,
        schemathesis::Run {
            schema: document.display().to_string(),
            config: repo("tests/data/agent_protocol/schemathesis.toml"),
            hooks: repo("tests/data/agent_protocol/checks.py"),
            phases: "examples,coverage,fuzzing",
            excluded: &[],
            // Run by checks.py in their place, each with its exceptions.
            excluded_checks: &[
                "allow_header_conformance",
                "negative_data_rejection",
                "response_schema_conformance",
                "unsupported_method",
            ],
            dir: site.path(),
        },
    )
    .await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "Schemathesis found the daemon differing from the Agent Protocol (seed {}):\n{stdout}\n{}\n== daemon log (tail)\n{}",
        seed(),
        String::from_utf8_lossy(&output.stderr),
        tail(&daemon.log(), 80),
    );
    // Every operation but those not served was tested.
    let document: Value =
        serde_json::from_str(&std::fs::read_to_string(&document).unwrap()).unwrap();
    let all = operations(&document);
    assert_eq!(all, 27, "the vendored document is the protocol's 0.1.6");
    let (selected, total, tested) = counts(&stdout);
    assert!(
        selected == all && tested == selected && total == all,
        "Schemathesis tested {tested} of {total} operations ({selected} selected), the protocol has {all}:\n{stdout}"
    );
    assert_eq!(daemon.stop(), Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_goes_through_the_protocols_own_routes() {
    let (_server, site, key) = keyed_site(RUN_SCRIPT, "submit,read,operate").await;
    let other = new_key(
        &site.path().join("keys.toml"),
        "other",
        &["--scopes", "submit,read,operate"],
    );
    site.put_bundle("adder", ADDER);
    let daemon = site.start();
    let http = client_as(&key);

    // The agent is the assistant.
    let (status, agents) =
        post_json(&http, &daemon, "/agents/search", json!({"name": "ADD"})).await;
    assert_eq!(status, 200, "{agents}");
    let agent = &agents[0];
    assert_eq!(
        (agent["name"].as_str(), agents.as_array().unwrap().len()),
        (Some("adder"), 1)
    );
    assert_eq!(
        agent["capabilities"],
        json!({"ap.io.messages": true, "ap.io.streaming": true})
    );
    let agent_id = agent["agent_id"].as_str().unwrap();
    let assistant = get(&http, &daemon, "/assistants/adder").await;
    assert_eq!(agent_id, assistant["assistant_id"]);
    assert_eq!(
        get(&http, &daemon, &format!("/agents/{agent_id}")).await,
        *agent
    );
    let schemas = get(&http, &daemon, "/agents/adder/schemas").await;
    assert_eq!(schemas["agent_id"], agent_id);
    assert_eq!(schemas["input_schema"]["required"], json!(["messages"]));

    // A run on a thread the body names, its input as `messages`, waited
    // for by its id alone.
    let (status, thread) = post_json(&http, &daemon, "/threads", json!({})).await;
    assert_eq!(status, 200, "{thread}");
    let thread = thread["thread_id"].as_str().unwrap();
    let (status, run) = post_json(
        &http,
        &daemon,
        "/runs",
        json!({
            "agent_id": agent_id,
            "thread_id": thread,
            "messages": [{"role": "user", "content": "2+3"}],
            "metadata": {"case": "ap"},
        }),
    )
    .await;
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["thread_id"], thread);
    let run_id = run["run_id"].as_str().unwrap();
    let waited = get(&http, &daemon, &format!("/runs/{run_id}/wait")).await;
    assert_eq!(waited["run"]["status"], "success", "{waited}");
    assert_eq!(waited["run"]["run_id"], run_id);
    assert_eq!(
        message_types(&json!({"values": waited["values"]})),
        ["human", "ai", "tool", "ai"]
    );
    assert_eq!(waited["values"]["messages"][3]["content"], "2+3 is 5.");
    // It is the thread's: its state says so.
    let state = get(&http, &daemon, &format!("/threads/{thread}/state")).await;
    assert_eq!(state["values"], waited["values"]);

    // Found by a search, by its thread, its agent, its status and its
    // metadata; not by another status or another key.
    let found = |body: Value, http: reqwest::Client| {
        let daemon = &daemon;
        async move {
            let (status, runs) = post_json(&http, daemon, "/runs/search", body).await;
            assert_eq!(status, 200, "{runs}");
            runs.as_array()
                .unwrap()
                .iter()
                .map(|r| r["run_id"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        }
    };
    for body in [
        json!({"thread_id": thread}),
        json!({"agent_id": "adder", "status": "success", "metadata": {"case": "ap"}}),
    ] {
        assert_eq!(found(body, http.clone()).await, [run_id]);
    }
    assert!(
        found(json!({"status": "pending"}), http.clone())
            .await
            .is_empty()
    );
    assert!(
        found(json!({"metadata": {"case": "b"}}), http.clone())
            .await
            .is_empty()
    );
    let others = client_as(&other);
    assert!(found(json!({}), others.clone()).await.is_empty());
    let theirs = others
        .get(daemon.url(&format!("/runs/{run_id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(theirs.status(), 404);

    // Its thread's history by `GET`, newest first, paged by `before`.
    let history = get(
        &http,
        &daemon,
        &format!("/threads/{thread}/history?limit=2"),
    )
    .await;
    let newest = history.as_array().unwrap();
    assert_eq!(newest.len(), 2, "{history}");
    assert_eq!(newest[0]["values"], waited["values"]);
    let before = newest[1]["checkpoint"]["checkpoint_id"].as_str().unwrap();
    let older = get(
        &http,
        &daemon,
        &format!("/threads/{thread}/history?limit=10&before={before}"),
    )
    .await;
    assert_eq!(
        older.as_array().unwrap().len(),
        2,
        "input and the call: {older}"
    );

    // A run cancelled by its id, waited for until it stopped.
    // On a thread of its own: on the first one, the mock model answers
    // the conversation's second turn at once (its "2+3" script), and the
    // run could end before the cancel came.
    let slow_thread = uuid::Uuid::new_v4().to_string();
    let (status, slow) = post_json(
        &http,
        &daemon,
        "/runs",
        json!({
            "agent_id": "adder",
            "thread_id": slow_thread,
            "if_not_exists": "create",
            "messages": [{"role": "user", "content": "slow"}],
        }),
    )
    .await;
    assert_eq!(status, 200, "{slow}");
    let slow_id = slow["run_id"].as_str().unwrap();
    let cancel = http
        .post(daemon.url(&format!("/runs/{slow_id}/cancel?wait=true")))
        .send()
        .await
        .unwrap();
    assert_eq!(cancel.status(), 204);
    let slow = get(&http, &daemon, &format!("/runs/{slow_id}")).await;
    assert_eq!(slow["status"], "interrupted", "{slow}");

    // Deleted by its id: gone.
    for id in [run_id, slow_id] {
        let deleted = http
            .delete(daemon.url(&format!("/runs/{id}")))
            .send()
            .await
            .unwrap();
        assert_eq!(deleted.status(), 204);
        let gone = http
            .get(daemon.url(&format!("/runs/{id}")))
            .send()
            .await
            .unwrap();
        assert_eq!(gone.status(), 404);
    }
}
