//! The runtime API (`/api`, docs/api.md): the agent directory, a local
//! bundle messaged as a remote agent, queries answered by the router bundle
//! calling local (`agent`) and remote (`http_agent`) agents — as an envelope
//! or as SSE frames in the runtime's exact order —, the `max_agents` cap,
//! group chats with each termination strategy, conversations that survive a
//! restart, field-naming 4xx errors, the token and missing runtime bundles,
//! a stream client that hangs up, and the CLI commands that talk to it all.
//!
//! Every agent bundle answers from a mock model server of its own (its
//! `model.endpoint` is that server's URL), so each script only has to tell
//! apart one agent's requests; the router and the group-chat host use the
//! config's `mock` endpoint. Remote agents are a tiny axum server.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::time::Duration;

use common::daemon::{Daemon, SHORT_LEASE, Site, client, eventually, get, wait_terminal};
use common::fake_agent::FakeAgent;
use common::mock_server;
use futures::StreamExt;
use serde_json::{Value, json};
use structured_agents::mock::MockServer;

/// The router asks the arithmetic agent, then the weather agent, then answers.
const TWO_AGENTS_SCRIPT: &str = r#"
replies:
  - tool_calls:
      - {name: ask_arithmetic, arguments: {input: "What is 2+3?"}}
  - tool_calls:
      - {name: ask_weather, arguments: {content: "Will it rain in Paris?"}}
  - content: "2+3 is 5, and it will be sunny."
"#;

const TWO_AGENTS_QUESTION: &str = "What is 2+3 and will it rain in Paris?";

#[tokio::test(flavor = "multi_thread")]
async fn agents_lists_local_bundles_and_remote_agents() {
    let arithmetic = mock_server(ARITHMETIC_SCRIPT).await;
    let broken = mock_server("replies:\n  - status: 400\n    error: \"no such model\"\n").await;
    let site = Site::new(
        &arithmetic.base_url(),
        &format!(
            "{RUNTIME}{}{}",
            weather_toml("http://127.0.0.1:9/weather"),
            remote_agent_toml("atlas", "Atlas", "http://127.0.0.1:9/atlas", "")
        ),
    );
    site.put_bundle("router", &router_bundle(""));
    site.put_bundle("group-chat", GROUP_CHAT);
    site.put_bundle(
        "arithmetic",
        &agent_bundle("arithmetic", &arithmetic.base_url(), ARITHMETIC_AGENT),
    );
    // No `agent:` section: its name and tools stand in.
    site.put_bundle(
        "echo",
        &agent_bundle(
            "echo",
            &arithmetic.base_url(),
            "tools:\n  - {name: shout, kind: process, command: [cat]}\n",
        ),
    );
    site.put_bundle(
        "broken",
        &agent_bundle(
            "broken",
            &broken.base_url(),
            "description: Its model refuses every request.\n",
        ),
    );
    let daemon = site.start();
    let http = client();

    let listed = get(&http, &daemon, "/api/agents").await;
    assert_eq!(
        listed["agents"],
        json!([
            {"id": "arithmetic", "name": "Arithmetic", "description": "Adds and multiplies.",
             "capabilities": ["add", "multiply"], "conversation_starters": ["What is 2+3?"],
             "endpoint": "/api/agents/arithmetic/message", "kind": "local"},
            {"id": "broken", "name": "broken", "description": "Its model refuses every request.",
             "capabilities": [], "conversation_starters": [],
             "endpoint": "/api/agents/broken/message", "kind": "local"},
            {"id": "echo", "name": "echo", "description": "",
             "capabilities": ["shout"], "conversation_starters": [],
             "endpoint": "/api/agents/echo/message", "kind": "local"},
            {"id": "weather", "name": "Weather", "description": "Forecasts the weather.",
             "capabilities": ["forecast"], "conversation_starters": ["Will it rain?"],
             "endpoint": "http://127.0.0.1:9/weather", "kind": "remote"},
            {"id": "atlas", "name": "Atlas", "description": "",
             "capabilities": [], "conversation_starters": [],
             "endpoint": "http://127.0.0.1:9/atlas", "kind": "remote"},
        ]),
        "local bundles by name (not the router nor the group-chat host), then remote agents in config order"
    );

    // A local bundle answers a message envelope as a job.
    let reply = post_ok(
        &http,
        &daemon,
        "/api/agents/arithmetic/message",
        json!({"content": "What is 2+3?", "senderId": "ada", "conversationId": "dm-1", "type": "Text"}),
    )
    .await;
    assert_eq!(reply["senderId"], "arithmetic", "{reply}");
    assert_eq!(reply["recipientId"], "ada");
    assert_eq!(reply["conversationId"], "dm-1");
    assert_eq!(reply["content"], "2+3 = 5");
    assert_eq!(reply["type"], "Text");
    assert_timestamp(&reply["timestamp"]);
    assert!(
        reply["messageId"].as_str().is_some_and(|id| !id.is_empty()),
        "{reply}"
    );
    let job = job_of(&http, &daemon, &reply).await;
    assert_eq!(job["bundle"], "arithmetic", "{job}");
    assert_eq!(job["state"], "succeeded");
    assert_eq!(job["conversation_id"], "dm-1");
    assert_eq!(job["input"], "What is 2+3?");

    // Without a sender the reply goes to "user".
    let anonymous = post_ok(
        &http,
        &daemon,
        "/api/agents/arithmetic/message",
        json!({"content": "What is 2+3?"}),
    )
    .await;
    assert_eq!(anonymous["recipientId"], "user", "{anonymous}");

    let unknown = post(
        &http,
        &daemon,
        "/api/agents/nobody/message",
        json!({"content": "hi"}),
    )
    .await;
    assert_error(&unknown, 404, "not_found", None);
    assert!(message_of(&unknown).contains("nobody"), "{}", unknown.1);

    let remote = post(
        &http,
        &daemon,
        "/api/agents/weather/message",
        json!({"content": "hi"}),
    )
    .await;
    assert_error(&remote, 422, "invalid_request", Some("id"));

    // A job that fails is a 500 naming the job.
    let failed = post(
        &http,
        &daemon,
        "/api/agents/broken/message",
        json!({"content": "Anyone there?"}),
    )
    .await;
    assert_error(&failed, 500, "job_failed", None);
    let broken_job = first_job_id(&http, &daemon, "broken").await.unwrap();
    assert!(
        message_of(&failed).contains(&broken_job),
        "{} does not name job {broken_job}",
        failed.1
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn query_answers_with_the_envelope_and_agents_used() {
    let world = world(TWO_AGENTS_SCRIPT).await;
    let daemon = world.site.start();
    let http = client();

    let answer = post_ok(
        &http,
        &daemon,
        "/api/query",
        json!({"query": TWO_AGENTS_QUESTION, "user_id": "ada"}),
    )
    .await;
    assert_eq!(answer["senderId"], "runtime", "{answer}");
    assert_eq!(answer["recipientId"], "ada");
    assert_eq!(answer["type"], "Text");
    assert_eq!(answer["content"], "2+3 is 5, and it will be sunny.");
    assert!(
        answer["messageId"]
            .as_str()
            .is_some_and(|id| !id.is_empty()),
        "{answer}"
    );
    assert_timestamp(&answer["timestamp"]);
    let conversation = answer["conversationId"].as_str().unwrap().to_string();
    assert!(conversation.starts_with("conv-"), "{answer}");
    // Agent ids, not tool names: the `agent` tool's bundle, the `http_agent` tool's agent.
    assert_eq!(answer["agents_used"], json!(["arithmetic", "weather"]));
    assert_eq!(
        answer["execution_trace"],
        json!([
            {"type": "agent_call", "agent_id": "arithmetic", "tool": "ask_arithmetic",
             "query": "What is 2+3?", "response": "2+3 = 5", "is_error": false, "refused": false},
            {"type": "agent_call", "agent_id": "weather", "tool": "ask_weather",
             "query": "Will it rain in Paris?", "response": "Sunny tomorrow.", "is_error": false, "refused": false},
        ])
    );

    // The agents were really asked.
    assert!(
        world
            .arithmetic
            .requests()
            .iter()
            .any(|r| user_text(r) == "What is 2+3?"),
        "{:?}",
        world.arithmetic.requests()
    );
    let sent = world.weather.seen();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["content"], "Will it rain in Paris?");
    assert_eq!(sent[0]["recipientId"], "weather");
    assert_eq!(sent[0]["type"], "Text", "the runtime's message type");

    // The query was a job of the router bundle.
    let jobs = get(&http, &daemon, "/v1/jobs?bundle=router").await;
    let jobs = jobs["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0]["id"], answer["job_id"]);
    assert_eq!(jobs[0]["state"], "succeeded");
    assert_eq!(jobs[0]["conversation_id"], conversation.as_str());
    assert_eq!(jobs[0]["input"], TWO_AGENTS_QUESTION);
    assert_eq!(jobs[0]["variables"]["user_id"], "ada");

    // A given conversation id is echoed; verbose adds the model's turns.
    let verbose = post_ok(
        &http,
        &daemon,
        "/api/query",
        json!({"query": TWO_AGENTS_QUESTION, "conversation_id": "trip-7", "verbose": true}),
    )
    .await;
    assert_eq!(verbose["conversationId"], "trip-7", "{verbose}");
    assert_eq!(verbose["recipientId"], "user");
    assert_eq!(verbose["agents_used"], json!(["arithmetic", "weather"]));
    let trace = verbose["execution_trace"].as_array().unwrap();
    assert_eq!(
        trace.iter().filter(|t| t["type"] == "agent_call").count(),
        2,
        "{trace:#?}"
    );
    let turns: Vec<&Value> = trace.iter().filter(|t| t["type"] == "model_turn").collect();
    assert_eq!(
        turns.iter().map(|t| t["turn"].clone()).collect::<Vec<_>>(),
        [json!(1), json!(2), json!(3)],
        "{trace:#?}"
    );
    assert_eq!(turns[2]["content"], "2+3 is 5, and it will be sunny.");

    // The conversation as the runtime answered it — `id`, each message's
    // role, content and timestamp, the answer's agents_used and
    // execution_trace as the query answered them — beside the envelopes.
    let shown = get(&http, &daemon, "/api/conversations/trip-7").await;
    assert_eq!(
        (&shown["id"], &shown["conversation_id"]),
        (&json!("trip-7"), &json!("trip-7")),
        "{shown}"
    );
    let messages = shown["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{shown}");
    let (asked, answered) = (&messages[0], &messages[1]);
    assert_eq!(
        (&asked["role"], &asked["content"]),
        (&json!("user"), &json!(TWO_AGENTS_QUESTION))
    );
    assert_eq!(
        (&answered["role"], &answered["content"]),
        (
            &json!("assistant"),
            &json!("2+3 is 5, and it will be sunny.")
        )
    );
    assert_timestamp(&asked["timestamp"]);
    assert_timestamp(&answered["timestamp"]);
    assert_eq!(answered["agents_used"], verbose["agents_used"]);
    assert_eq!(answered["execution_trace"], verbose["execution_trace"]);
    assert_eq!(answered["senderId"], "runtime", "{answered}");
}

#[tokio::test(flavor = "multi_thread")]
async fn query_streams_frames_in_order_and_ends_with_done() {
    let world = world(TWO_AGENTS_SCRIPT).await;
    let daemon = world.site.start();
    let http = client();

    let frames = stream_frames(
        &http,
        &daemon,
        "/api/query",
        json!({"query": TWO_AGENTS_QUESTION, "stream": true}),
    )
    .await;
    let n = frames.len();
    assert!(n >= 8, "{frames:#?}");
    assert_eq!(
        frames[0],
        json!({"chunk": "Starting streaming response...", "complete": false}),
        "{frames:#?}"
    );
    assert_eq!(frames[n - 1], json!("[DONE]"), "{frames:#?}");
    assert_eq!(
        frames[n - 2],
        json!({"chunk": "Streaming complete", "complete": true}),
        "{frames:#?}"
    );
    let complete = &frames[n - 3];
    assert_eq!(complete.get("chunk"), Some(&Value::Null), "{complete}");
    assert_eq!(complete["complete"], true, "{complete}");
    assert_eq!(complete["response"], "2+3 is 5, and it will be sunny.");
    assert_eq!(complete["agents_used"], json!(["arithmetic", "weather"]));
    let conversation = complete["conversation_id"].as_str().unwrap();
    assert!(conversation.starts_with("conv-"), "{complete}");
    assert!(
        complete["processing_time"]
            .as_f64()
            .is_some_and(|secs| secs >= 0.0),
        "{complete}"
    );

    // In between: only content tokens and agent call / response pairs.
    let middle = &frames[1..n - 3];
    for frame in middle {
        let mut keys: Vec<&str> = frame
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert!(
            matches!(
                keys.as_slice(),
                ["content"] | ["agent_call", "agent_query"] | ["agent_id", "agent_response"]
            ),
            "unexpected frame {frame} in {frames:#?}"
        );
    }
    let agent_frames: Vec<Value> = middle
        .iter()
        .filter(|f| f.get("content").is_none())
        .cloned()
        .collect();
    assert_eq!(
        agent_frames,
        [
            json!({"agent_call": "arithmetic", "agent_query": "What is 2+3?"}),
            json!({"agent_id": "arithmetic", "agent_response": "2+3 = 5"}),
            json!({"agent_call": "weather", "agent_query": "Will it rain in Paris?"}),
            json!({"agent_id": "weather", "agent_response": "Sunny tomorrow."}),
        ]
    );
    // The router's own answer streams (not the nested agent's), after the calls.
    let tokens: Vec<&str> = middle
        .iter()
        .filter_map(|f| f.get("content"))
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(!tokens.is_empty(), "no content frames: {frames:#?}");
    assert_eq!(tokens.concat(), "2+3 is 5, and it will be sunny.");
    let last_response = middle
        .iter()
        .rposition(|f| f.get("agent_response").is_some())
        .unwrap();
    let first_token = middle
        .iter()
        .position(|f| f.get("content").is_some())
        .unwrap();
    assert!(last_response < first_token, "{frames:#?}");

    // A job like any other.
    let jobs = get(&http, &daemon, "/v1/jobs?bundle=router").await;
    assert_eq!(jobs["jobs"][0]["state"], "succeeded", "{jobs}");
    assert_eq!(jobs["jobs"][0]["conversation_id"], conversation);
}

#[tokio::test(flavor = "multi_thread")]
async fn query_stream_error_ends_with_error_then_done() {
    let mock =
        mock_server("replies:\n  - status: 400\n    error: \"the prompt is too long\"\n").await;
    let site = Site::new(&mock.base_url(), RUNTIME);
    site.put_bundle("router", &router_bundle(""));
    let daemon = site.start();
    let http = client();

    let frames = stream_frames(
        &http,
        &daemon,
        "/api/query",
        json!({"query": "Hello?", "stream": true}),
    )
    .await;
    let id = first_job_id(&http, &daemon, "router").await.unwrap();
    let job = wait_terminal(&http, &daemon, &id, Duration::from_secs(20)).await;
    assert!(
        matches!(job["state"].as_str(), Some("failed" | "dead")),
        "{job}"
    );

    let n = frames.len();
    assert!(n >= 3, "{frames:#?}");
    assert_eq!(
        frames[0],
        json!({"chunk": "Starting streaming response...", "complete": false})
    );
    assert_eq!(frames[n - 1], json!("[DONE]"), "{frames:#?}");
    let error = frames[n - 2]["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error frame before [DONE]: {frames:#?}"));
    assert!(error.contains(&id), "{error:?} does not name job {id}");
    assert!(
        frames.iter().all(|f| f["complete"] != true),
        "a failed job reported completion: {frames:#?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_remote_agent_that_is_down_is_an_error_string_in_the_conversation() {
    let mock = mock_server(
        r#"
replies:
  - tool_calls:
      - {name: ask_ghost, arguments: {content: "Are you there?"}}
  - content: "The ghost agent did not answer."
"#,
    )
    .await;
    let site = Site::new(
        &mock.base_url(),
        &format!(
            "{RUNTIME}{}",
            remote_agent_toml("ghost", "Ghost", &closed_port_url(), "")
        ),
    );
    site.put_bundle(
        "router",
        &router_bundle("tools:\n  - {name: ask_ghost, kind: http_agent, agent: ghost}\n"),
    );
    let daemon = site.start();
    let http = client();

    let answer = post_ok(
        &http,
        &daemon,
        "/api/query",
        json!({"query": "Is the ghost there?"}),
    )
    .await;
    assert_eq!(
        answer["content"], "The ghost agent did not answer.",
        "{answer}"
    );
    assert_eq!(answer["agents_used"], json!(["ghost"]));
    let call = &answer["execution_trace"][0];
    assert_eq!(call["agent_id"], "ghost", "{answer}");
    assert_eq!(call["is_error"], true, "{call}");
    let response = call["response"].as_str().unwrap();
    assert!(response.contains("ghost"), "{response:?}");

    // The same in a stream.
    let frames = stream_frames(
        &http,
        &daemon,
        "/api/query",
        json!({"query": "Is the ghost there?", "stream": true}),
    )
    .await;
    let response = frames
        .iter()
        .find(|f| f["agent_id"] == "ghost")
        .and_then(|f| f["agent_response"].as_str())
        .unwrap_or_else(|| panic!("no agent_response of ghost: {frames:#?}"));
    assert!(response.contains("ghost"), "{response:?}");
    let complete = frames.iter().find(|f| f["complete"] == true).unwrap();
    assert_eq!(complete["response"], "The ghost agent did not answer.");
    assert_eq!(frames.last(), Some(&json!("[DONE]")));

    let health = http.get(daemon.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn max_agents_caps_agent_calls() {
    let world = world(
        r#"
replies:
  - tool_calls:
      - {name: ask_arithmetic, arguments: {input: "What is 2+3?"}}
      - {name: ask_weather, arguments: {content: "Will it rain?"}}
  - content: "2+3 is 5; the weather will have to wait."
"#,
    )
    .await;
    let daemon = world.site.start();
    let http = client();

    let answer = post_ok(
        &http,
        &daemon,
        "/api/query",
        json!({"query": "Sum and forecast, please.", "max_agents": 1}),
    )
    .await;
    assert_eq!(
        answer["content"], "2+3 is 5; the weather will have to wait.",
        "{answer}"
    );
    assert_eq!(
        answer["agents_used"],
        json!(["arithmetic"]),
        "a refused call is not a use of the agent: {answer}"
    );
    assert!(
        world.weather.seen().is_empty(),
        "the refused agent was asked"
    );
    for entry in answer["execution_trace"].as_array().unwrap() {
        if entry["agent_id"] == "weather" {
            assert_eq!(entry["is_error"], true, "{entry}");
        }
    }

    // The model got the refusal as the second call's tool result.
    let requests = world.mock.requests();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    let results: Vec<String> = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results[0].contains("2+3 = 5"), "{results:?}");
    assert!(results[1].contains("max_agents (1) reached"), "{results:?}");

    // The cap is the job's typed control, not one of its variables.
    let job = job_of(&http, &daemon, &answer).await;
    assert_eq!(job["controls"]["max_agents"], 1, "{job}");
    assert_eq!(job["kind"], json!({"type": "bundle"}), "{job}");
    assert_eq!(job["variables"], json!({"user_id": "user"}), "{job}");
}

#[tokio::test(flavor = "multi_thread")]
async fn group_chat_each_termination_strategy() {
    // The host's own model is the default selector: it ends the chat once
    // round 2 is in the transcript.
    let host = mock_server(
        "replies:\n  - match: \"Alice again\"\n    content: \"DONE\"\n  - content: \"CONTINUE\"\n",
    )
    .await;
    // Each agent says something else once round 1 ("Carol agrees.") is in its transcript.
    let alice = mock_server(
        "replies:\n  - match: \"Carol agrees\"\n    content: \"Alice again.\"\n  - content: \"Alice here.\"\n",
    )
    .await;
    let bob = mock_server(
        "replies:\n  - match: \"Review the plan\"\n    content: \"Looks good, approved.\"\n  - match: \"Carol agrees\"\n    content: \"Bob again.\"\n  - content: \"Bob here.\"\n",
    )
    .await;
    let carol = mock_server(
        "replies:\n  - match: \"Carol agrees\"\n    content: \"Carol again.\"\n  - content: \"Carol agrees.\"\n",
    )
    .await;
    // A selector agent; "Done" ends the chat too (the stop word in any case).
    let judge = mock_server(
        "replies:\n  - match: \"Alice again\"\n    content: \"Done, that is enough.\"\n  - content: \"Keep going.\"\n",
    )
    .await;
    let site = Site::new(&host.base_url(), RUNTIME);
    site.put_bundle("group-chat", GROUP_CHAT);
    for (id, name, mock) in [
        ("alice", "Alice", &alice),
        ("bob", "Bob", &bob),
        ("carol", "Carol", &carol),
        ("judge", "Judge", &judge),
    ] {
        site.put_bundle(
            id,
            &agent_bundle(id, &mock.base_url(), &format!("agent: {{name: {name}}}\n")),
        );
    }
    let daemon = site.start();
    let http = client();
    let trio = json!(["alice", "bob", "carol"]);

    // (a) max_iterations: every agent answers in every round.
    let chat = post_ok(
        &http,
        &daemon,
        "/api/group-chat",
        json!({"query": "Plan the trip.", "user_id": "ada", "agent_ids": trio, "max_iterations": 2}),
    )
    .await;
    assert_eq!(chat["senderId"], "agent-runtime", "{chat}");
    assert_eq!(chat["recipientId"], "ada");
    assert_eq!(chat["type"], "Text");
    assert!(
        chat["conversationId"]
            .as_str()
            .is_some_and(|c| c.starts_with("conv-")),
        "{chat}"
    );
    assert_eq!(chat["rounds"], 2, "{chat}");
    assert_eq!(chat["terminated_by"], "max_iterations");
    assert_eq!(chat["agents_used"], trio);
    assert_eq!(
        chat["content"],
        "Alice here. Bob here. Carol agrees. Alice again. Bob again. Carol again."
    );
    assert_eq!(
        responses(&chat),
        json!([
            {"agent_id": "alice", "agent_name": "Alice", "response": "Alice here."},
            {"agent_id": "bob", "agent_name": "Bob", "response": "Bob here."},
            {"agent_id": "carol", "agent_name": "Carol", "response": "Carol agrees."},
            {"agent_id": "alice", "agent_name": "Alice", "response": "Alice again."},
            {"agent_id": "bob", "agent_name": "Bob", "response": "Bob again."},
            {"agent_id": "carol", "agent_name": "Carol", "response": "Carol again."},
        ])
    );
    // Round 2's speakers read the transcript: the query and `<name>: <reply>` lines.
    let round_two = user_text(&alice.requests()[1]);
    for line in [
        "Plan the trip.",
        "Alice: Alice here.",
        "Bob: Bob here.",
        "Carol: Carol agrees.",
    ] {
        assert!(round_two.contains(line), "{line:?} not in {round_two:?}");
    }
    let job = job_of(&http, &daemon, &chat).await;
    assert_eq!(job["bundle"], "group-chat", "{job}");
    assert_eq!(job["state"], "succeeded");
    // A group chat is the job's kind, its plan inside it; the variables
    // keep only what templates render.
    assert_eq!(job["kind"]["type"], "group_chat", "{job}");
    assert_eq!(job["kind"]["plan"]["agents"][0]["id"], "alice", "{job}");
    assert_eq!(job["variables"], json!({"user_id": "ada"}), "{job}");
    assert!(
        host.requests().is_empty(),
        "no selector without the selector strategy"
    );

    // (b) stop_phrase: the chat ends right after the reply that has it (any case).
    let carol_asked = carol.requests().len();
    let chat = post_ok(
        &http,
        &daemon,
        "/api/group-chat",
        json!({"query": "Review the plan.", "agent_ids": trio, "max_iterations": 3,
               "termination": {"type": "stop_phrase", "phrase": "APPROVED"}}),
    )
    .await;
    assert_eq!(chat["terminated_by"], "stop_phrase", "{chat}");
    assert_eq!(chat["rounds"], 1);
    assert_eq!(chat["content"], "Alice here. Looks good, approved.");
    assert_eq!(chat["agents_used"], json!(["alice", "bob"]));
    assert_eq!(chat["agent_responses"].as_array().unwrap().len(), 2);
    assert_eq!(carol.requests().len(), carol_asked, "Carol was asked");

    // (c) selector, by default the host bundle: "CONTINUE" after round 1, "DONE" after round 2.
    let chat = post_ok(
        &http,
        &daemon,
        "/api/group-chat",
        json!({"query": "Pick a date.", "agent_ids": trio, "max_iterations": 5,
               "termination": {"type": "selector"}}),
    )
    .await;
    assert_eq!(chat["terminated_by"], "selector", "{chat}");
    assert_eq!(chat["rounds"], 2);
    assert_eq!(chat["agents_used"], trio);
    let said = chat["agent_responses"].as_array().unwrap();
    assert_eq!(
        said.len(),
        6,
        "the selector's verdicts are not replies: {chat}"
    );
    assert_eq!(said[5]["response"], "Carol again.");
    assert_eq!(host.requests().len(), 2, "one verdict per round");

    // ... or any known agent.
    let chat = post_ok(
        &http,
        &daemon,
        "/api/group-chat",
        json!({"query": "Pick a date.", "agent_ids": trio, "max_iterations": 5,
               "termination": {"type": "selector", "agent_id": "judge"}}),
    )
    .await;
    assert_eq!(chat["terminated_by"], "selector", "{chat}");
    assert_eq!(chat["rounds"], 2);
    assert_eq!(chat["agent_responses"].as_array().unwrap().len(), 6);
    assert_eq!(judge.requests().len(), 2);
    assert_eq!(host.requests().len(), 2, "the host was not asked this time");

    // (d) unknown agents are dropped; bad requests name the field.
    let chat = post_ok(
        &http,
        &daemon,
        "/api/group-chat",
        json!({"query": "Plan the trip.", "agent_ids": ["alice", "nobody"], "max_iterations": 1}),
    )
    .await;
    assert_eq!(chat["agents_used"], json!(["alice"]), "{chat}");
    assert_eq!(chat["content"], "Alice here.");
    assert_eq!(chat["rounds"], 1);

    let none_known = post(
        &http,
        &daemon,
        "/api/group-chat",
        json!({"query": "Plan the trip.", "agent_ids": ["nobody", "ghost"]}),
    )
    .await;
    assert_error(&none_known, 422, "invalid_request", Some("agent_ids"));
    assert!(
        message_of(&none_known).contains("alice"),
        "the known ids are named: {}",
        none_known.1
    );
    for (body, field) in [
        (
            json!({"query": "Plan the trip.", "agent_ids": trio, "termination": {"type": "vote"}}),
            "termination.type",
        ),
        (
            json!({"query": "Plan the trip.", "agent_ids": trio, "termination": {"type": "stop_phrase", "phrase": ""}}),
            "termination.phrase",
        ),
        (
            json!({"query": "Plan the trip.", "agent_ids": trio, "max_iterations": 0}),
            "max_iterations",
        ),
        (
            json!({"query": "Plan the trip.", "agent_ids": trio, "max_iterations": 6}),
            "max_iterations",
        ),
    ] {
        let refused = post(&http, &daemon, "/api/group-chat", body.clone()).await;
        assert_eq!(refused.0, 422, "{body} → {}", refused.1);
        assert_eq!(refused.1["error"]["field"], field, "{body} → {}", refused.1);
    }
    let unknown_selector = post(
        &http,
        &daemon,
        "/api/group-chat",
        json!({"query": "Plan the trip.", "agent_ids": trio,
               "termination": {"type": "selector", "agent_id": "nobody"}}),
    )
    .await;
    assert_error(&unknown_selector, 404, "not_found", None);
    assert!(
        message_of(&unknown_selector).contains("nobody"),
        "{}",
        unknown_selector.1
    );

    // (e) streamed: a call / response pair per reply; the answer, which no
    // token carried, arrives whole before the complete frame.
    let frames = stream_frames(
        &http,
        &daemon,
        "/api/group-chat",
        json!({"query": "Plan the trip.", "agent_ids": ["alice", "bob"], "max_iterations": 1, "stream": true}),
    )
    .await;
    let n = frames.len();
    assert_eq!(n, 9, "{frames:#?}");
    assert_eq!(
        frames[0],
        json!({"chunk": "Starting streaming response...", "complete": false})
    );
    assert_eq!(frames[1]["agent_call"], "alice", "{frames:#?}");
    assert!(
        frames[1]["agent_query"]
            .as_str()
            .is_some_and(|q| q.contains("Plan the trip.")),
        "{frames:#?}"
    );
    assert_eq!(
        frames[2],
        json!({"agent_id": "alice", "agent_response": "Alice here."})
    );
    assert_eq!(frames[3]["agent_call"], "bob", "{frames:#?}");
    assert_eq!(
        frames[4],
        json!({"agent_id": "bob", "agent_response": "Bob here."})
    );
    assert_eq!(frames[5], json!({"content": "Alice here. Bob here."}));
    let complete = &frames[6];
    assert_eq!(complete["complete"], true, "{complete}");
    assert_eq!(complete["response"], "Alice here. Bob here.");
    assert_eq!(complete["agents_used"], json!(["alice", "bob"]));
    assert_eq!(
        responses(complete),
        json!([
            {"agent_id": "alice", "agent_name": "Alice", "response": "Alice here."},
            {"agent_id": "bob", "agent_name": "Bob", "response": "Bob here."},
        ])
    );
    assert_eq!(
        frames[7],
        json!({"chunk": "Streaming complete", "complete": true})
    );
    assert_eq!(frames[8], json!("[DONE]"));
}

#[tokio::test(flavor = "multi_thread")]
async fn conversation_history_is_replayed_and_survives_a_restart() {
    let mock = mock_server(
        r#"
replies:
  - match: "My name is Ada"
    content: "Nice to meet you, Ada."
  - match: "What is my name"
    content: "Your name is Ada."
"#,
    )
    .await;
    let site = Site::new(&mock.base_url(), RUNTIME);
    site.put_bundle("router", &router_bundle(""));
    let daemon = site.start();
    let http = client();

    let mut job_ids = Vec::new();
    for (question, expected) in [
        ("My name is Ada.", "Nice to meet you, Ada."),
        ("What is my name?", "Your name is Ada."),
    ] {
        let answer = post_ok(
            &http,
            &daemon,
            "/api/query",
            json!({"query": question, "user_id": "ada", "conversation_id": "talk-1"}),
        )
        .await;
        assert_eq!(answer["conversationId"], "talk-1", "{answer}");
        assert_eq!(answer["content"], expected, "{answer}");
        job_ids.push(answer["job_id"].clone());
    }
    // The second turn started from the first.
    let requests = mock.requests();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    let messages = requests[1]["messages"].as_array().unwrap().clone();
    let position = |role: &str, content: &str| {
        messages
            .iter()
            .position(|m| m["role"] == role && m["content"] == content)
            .unwrap_or_else(|| panic!("no {role} message {content:?} in {messages:#?}"))
    };
    let asked = position("user", "My name is Ada.");
    let answered = position("assistant", "Nice to meet you, Ada.");
    let asked_again = position("user", "What is my name?");
    assert!(asked < answered && answered < asked_again, "{messages:#?}");

    let shown = get(&http, &daemon, "/api/conversations/talk-1").await;
    assert_eq!(shown["conversation_id"], "talk-1", "{shown}");
    assert_eq!(shown["id"], "talk-1", "{shown}");
    let listed = shown["messages"].as_array().unwrap();
    let summary: Vec<(&str, &str, &str)> = listed
        .iter()
        .map(|m| {
            (
                m["senderId"].as_str().unwrap(),
                m["recipientId"].as_str().unwrap(),
                m["content"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("ada", "runtime", "My name is Ada."),
            ("runtime", "ada", "Nice to meet you, Ada."),
            ("ada", "runtime", "What is my name?"),
            ("runtime", "ada", "Your name is Ada."),
        ]
    );
    let roles: Vec<&Value> = listed.iter().map(|m| &m["role"]).collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant"]);
    for message in listed {
        assert_eq!(message["conversationId"], "talk-1", "{message}");
        assert_eq!(message["type"], "Text", "{message}");
        assert_timestamp(&message["timestamp"]);
    }
    assert_eq!(listed[1]["job_id"], job_ids[0]);
    assert_eq!(listed[3]["job_id"], job_ids[1]);
    assert_eq!(listed[3]["agents_used"], json!([]));
    assert_eq!(listed[3]["execution_trace"], json!([]));

    // The history is the job store: a restart changes nothing.
    assert_eq!(daemon.stop(), Some(0));
    let daemon = site.start();
    let again = get(&http, &daemon, "/api/conversations/talk-1").await;
    assert_eq!(again, shown);

    let unknown = get_status(&http, &daemon, "/api/conversations/never-was").await;
    assert_error(&unknown, 404, "not_found", None);
    assert!(message_of(&unknown).contains("never-was"), "{}", unknown.1);
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_bodies_are_422_naming_the_field() {
    let site = Site::new("http://127.0.0.1:9/v1", RUNTIME);
    site.put_bundle("router", &router_bundle(""));
    site.put_bundle("group-chat", GROUP_CHAT);
    site.put_bundle("echo", &agent_bundle("echo", "http://127.0.0.1:9/v1", ""));
    let daemon = site.start();
    let http = client();

    for (path, body, field) in [
        ("/api/query", json!({}), "query"),
        ("/api/query", json!({"query": ""}), "query"),
        ("/api/query", json!({"query": 42}), "query"),
        (
            "/api/query",
            json!({"query": "hi", "colour": "blue"}),
            "colour",
        ),
        (
            "/api/query",
            json!({"query": "hi", "max_agents": "two"}),
            "max_agents",
        ),
        (
            "/api/query",
            json!({"query": "hi", "max_agents": 0}),
            "max_agents",
        ),
        (
            "/api/query",
            json!({"query": "hi", "stream": "yes"}),
            "stream",
        ),
        ("/api/group-chat", json!({"max_iterations": 1}), "query"),
        (
            "/api/group-chat",
            json!({"query": "hi", "rounds": 2}),
            "rounds",
        ),
        (
            "/api/group-chat",
            json!({"query": "hi", "max_iterations": "many"}),
            "max_iterations",
        ),
        (
            "/api/agents/echo/message",
            json!({"messageId": "m-1"}),
            "content",
        ),
        ("/api/agents/echo/message", json!({"content": 7}), "content"),
        // A plan comes only from /api/group-chat, which checks it: never
        // smuggled to the host bundle as a job variable.
        (
            "/v1/jobs",
            json!({"bundle": "group-chat", "input": "hi", "variables": {"group_chat": {"agents": [{"id": "x", "name": "x", "place": {"remote": {"endpoint": "http://10.0.0.1/"}}}], "max_iterations": 1000}}}),
            "variables.group_chat",
        ),
    ] {
        let refused = post(&http, &daemon, path, body.clone()).await;
        assert_eq!(refused.0, 422, "{path} {body} → {}", refused.1);
        assert_eq!(
            refused.1["error"]["code"], "invalid_request",
            "{path} {body} → {}",
            refused.1
        );
        assert_eq!(
            refused.1["error"]["field"], field,
            "{path} {body} → {}",
            refused.1
        );
        assert!(
            message_of(&refused).len() > 10,
            "{path} {body} → {}",
            refused.1
        );
    }
    // Refused requests are not jobs.
    let jobs = get(&http, &daemon, "/v1/jobs").await;
    assert_eq!(jobs["jobs"], json!([]), "{jobs}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_api_needs_the_token_and_names_missing_runtime_bundles() {
    let site = Site::new(
        "http://127.0.0.1:9/v1",
        "[runtime]\nrouter = \"switchboard\"\ngroup_chat = \"roundtable\"\n",
    );
    site.put_bundle("echo", &agent_bundle("echo", "http://127.0.0.1:9/v1", ""));
    std::fs::write(site.path().join("token"), "s3cret\n").unwrap();
    let config = std::fs::read_to_string(site.path().join("config.toml")).unwrap();
    std::fs::write(
        site.path().join("config.toml"),
        config.replace("[server]\n", "[server]\ntoken_file = \"token\"\n"),
    )
    .unwrap();
    let daemon = site.start();
    let http = client();

    let denied = http.get(daemon.url("/api/agents")).send().await.unwrap();
    assert_eq!(denied.status(), 401);
    let denied = http
        .post(daemon.url("/api/query"))
        .json(&json!({"query": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(denied.status(), 401);

    let listed: Value = http
        .get(daemon.url("/api/agents"))
        .bearer_auth("s3cret")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = listed["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["echo"], "{listed}");

    for (path, bundle) in [
        ("/api/query", "switchboard"),
        ("/api/group-chat", "roundtable"),
    ] {
        let response = http
            .post(daemon.url(path))
            .bearer_auth("s3cret")
            .json(&json!({"query": "hi"}))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap();
        assert_error(&(status, body.clone()), 503, "unavailable", None);
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(bundle) && message.contains("[runtime]"),
            "{path}: {message:?} names neither the bundle {bundle:?} nor its [runtime] key"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn client_disconnect_leaves_the_job_running() {
    let mock = mock_server("replies:\n  - content: \"A slow answer.\"\n    delay_ms: 500\n").await;
    let site = Site::new(&mock.base_url(), RUNTIME);
    site.put_bundle("router", &router_bundle(""));
    let daemon = site.start();
    let http = client();

    let response = http
        .post(daemon.url("/api/query"))
        .json(&json!({"query": "Take your time.", "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = Box::pin(response.bytes_stream());
    let mut received: Vec<u8> = Vec::new();
    let first = loop {
        let chunk = body
            .next()
            .await
            .expect("the stream ended before its first frame")
            .unwrap();
        received.extend_from_slice(&chunk);
        let text = String::from_utf8_lossy(&received).into_owned();
        let complete_part = text.rfind("\n\n").map_or("", |end| &text[..end]);
        if let Some(frame) = parse_frames(complete_part).into_iter().next() {
            break frame;
        }
    };
    assert_eq!(
        first,
        json!({"chunk": "Starting streaming response...", "complete": false})
    );
    // Hang up while the model is still thinking.
    drop(body);

    let id = eventually(Duration::from_secs(10), "the router job", || {
        first_job_id(&http, &daemon, "router")
    })
    .await;
    let job = wait_terminal(&http, &daemon, &id, Duration::from_secs(20)).await;
    assert_eq!(job["state"], "succeeded", "{job}");
    assert_eq!(job["cancel_requested"], false, "{job}");
    assert!(!mock.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn cli_commands_print_the_runtime_format() {
    let world = world(
        r#"
replies:
  - tool_calls:
      - {name: ask_arithmetic, arguments: {input: "What is 2+3?"}}
  - content: "The answer is 5."
"#,
    )
    .await;
    let daemon = world.site.start();
    let base = daemon.base.clone();

    // agents: one block per agent.
    let (ok, out, err) = run_cli(&base, &["agents"], None).await;
    assert!(ok, "{out}\n{err}");
    let weather_endpoint = format!("  endpoint: {}", world.weather.url);
    for line in [
        "arithmetic — Arithmetic (local)",
        "  Adds and multiplies.",
        "  capabilities: add, multiply",
        "  endpoint: /api/agents/arithmetic/message",
        "weather — Weather (remote)",
        "  Forecasts the weather.",
        "  capabilities: forecast",
        weather_endpoint.as_str(),
    ] {
        assert!(has_line(&out, line), "no line {line:?} in:\n{out}");
    }
    assert!(
        out.find("arithmetic — ").unwrap() < out.find("weather — ").unwrap(),
        "{out}"
    );

    // query: the agent call, its query and response, the streamed answer, a summary.
    let (ok, out, err) = run_cli(&base, &["query", "What is 2+3?"], None).await;
    assert!(ok, "{out}\n{err}");
    assert!(has_line(&out, "you → What is 2+3?"), "{out}");
    assert!(
        out.contains(
            "talking with the agent(s):\n ↪ runtime to arithmetic → What is 2+3?\n ↪ arithmetic to runtime → 2+3 = 5\n"
        ),
        "{out}"
    );
    assert!(has_line(&out, "runtime → The answer is 5."), "{out}");
    assert!(
        out.find("talking with").unwrap() < out.find("runtime → ").unwrap(),
        "{out}"
    );
    assert!(!err.contains("DEBUG chunk"), "{err}");
    // The runtime's DEBUG switch prints the raw chunks.
    let (ok, out, err) = run_cli_with_env(
        &base,
        &["query", "What is 2+3?"],
        None,
        &[("DEBUG", "True")],
    )
    .await;
    assert!(ok, "{out}\n{err}");
    assert!(
        err.contains("DEBUG chunk: {\"agent_call\":\"arithmetic\""),
        "{err}"
    );
    let last = out.trim_end().lines().last().unwrap_or_default();
    assert!(
        last.starts_with("(conversation conv-")
            && last.contains(", agents used: arithmetic, ")
            && last.ends_with("s)"),
        "{last:?}"
    );

    // group: every reply under its agent's name, then how it ended.
    let (ok, out, err) = run_cli(
        &base,
        &["group", "Say hi to everyone.", "--max-iterations", "1"],
        None,
    )
    .await;
    assert!(ok, "{out}\n{err}");
    assert!(has_line(&out, "you → Say hi to everyone."), "{out}");
    assert!(has_line(&out, "Arithmetic → 2+3 = 5"), "{out}");
    assert!(has_line(&out, "Weather → Sunny tomorrow."), "{out}");
    let last = out.trim_end().lines().last().unwrap_or_default();
    assert!(
        last.starts_with("(conversation conv-")
            && last.ends_with(", rounds 1, ended by max_iterations)"),
        "{last:?}"
    );

    // direct: the envelope to the agent's endpoint, "Hello" by default.
    let (ok, out, err) = run_cli(&base, &["direct", "arithmetic"], None).await;
    assert!(ok, "{out}\n{err}");
    assert!(has_line(&out, "you → Hello"), "{out}");
    assert!(
        has_line(&out, "arithmetic → Hi, I add and multiply numbers."),
        "{out}"
    );
    assert!(
        world
            .arithmetic
            .requests()
            .iter()
            .any(|r| user_text(r) == "Hello"),
        "the agent's model never got \"Hello\": {:?}",
        world.arithmetic.requests()
    );

    // interactive: a prompt; `agents`, queries, `exit`.
    let (ok, out, err) = run_cli(
        &base,
        &["interactive"],
        Some("agents\nWhat is 2+3?\ngroup weather Say hi to everyone.\nexit\n"),
    )
    .await;
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("you → "), "{out}");
    assert!(out.contains("arithmetic — Arithmetic (local)"), "{out}");
    assert!(
        out.contains(" ↪ runtime to arithmetic → What is 2+3?"),
        "{out}"
    );
    assert!(out.contains("runtime → The answer is 5."), "{out}");
    // `group AGENTS TEXT` asks only those agents.
    assert!(out.contains("Weather → Sunny tomorrow."), "{out}");
    let group_part = &out[out.find("Weather → ").unwrap_or(0)..];
    assert!(!group_part.contains("Arithmetic → "), "{out}");
}

/// An agent of the directory takes its entry's `message_type` (the
/// runtime's .NET agent read `0`) and `timeout` (how long the router waits
/// for it), from `[[agents]]` as from `agents.json`.
#[tokio::test(flavor = "multi_thread")]
async fn a_directory_agent_is_sent_its_message_type_and_waited_for_its_timeout() {
    let router_script = r#"
replies:
  - tool_calls:
      - {name: goodbye, arguments: {content: "Say goodbye in French"}}
      - {name: sleepy, arguments: {content: "Are you there?"}}
  - content: "Au revoir; sleepy did not answer."
"#;
    let mock = mock_server(router_script).await;
    let goodbye = FakeAgent::start("Au revoir !").await;
    let sleepy = SlowAgent::start(Duration::from_secs(5)).await;
    let site = Site::new(
        &mock.base_url(),
        &format!(
            "{RUNTIME}agents_file = \"agents.json\"\n{}",
            remote_agent_toml("goodbye", "Goodbye", &goodbye.url, "message_type = 0\n")
        ),
    );
    // Answering takes longer than its timeout, and far less than the default.
    std::fs::write(
        site.path().join("agents.json"),
        json!({"agents": [{"id": "sleepy", "name": "Sleepy", "endpoint": sleepy.url,
                           "timeout": "300ms", "message_type": "Chat"}]})
        .to_string(),
    )
    .unwrap();
    site.put_bundle("router", &router_bundle(""));
    let daemon = site.start();
    let http = client();

    let answer = post_ok(
        &http,
        &daemon,
        "/api/query",
        json!({"query": "Goodbye, and is sleepy there?"}),
    )
    .await;
    assert_eq!(answer["content"], "Au revoir; sleepy did not answer.");
    let sent = goodbye.seen();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["type"], json!(0), "a number, not \"0\": {sent:?}");
    let trace = answer["execution_trace"].as_array().unwrap();
    let call = |agent: &str| {
        trace
            .iter()
            .find(|t| t["agent_id"] == agent)
            .unwrap_or_else(|| panic!("no call of {agent} in {trace:#?}"))
    };
    assert_eq!(call("goodbye")["response"], "Au revoir !");
    let timed_out = call("sleepy");
    assert_eq!(timed_out["is_error"], true, "{timed_out}");
    assert!(
        timed_out["response"]
            .as_str()
            .is_some_and(|r| r.contains("timeout")),
        "{timed_out}"
    );
    assert_eq!(sleepy.seen(), [json!("Chat")], "its own message type");
}

/// A group chat sends a remote agent the `message_type` of its entry too,
/// and waits for it as long as its `timeout`.
#[tokio::test(flavor = "multi_thread")]
async fn a_group_chat_sends_a_remote_agent_its_message_type() {
    // Answering takes longer than its timeout, and far less than the
    // group-chat bundle's (the 120 s default).
    let sleepy = SlowAgent::start(Duration::from_secs(5)).await;
    // Appended to the config right after the weather agent's entry: one of
    // its keys, then the sleepy agent.
    let extra = format!(
        "message_type = 0\n{}",
        remote_agent_toml("sleepy", "Sleepy", &sleepy.url, "timeout = \"300ms\"\n")
    );
    let w = world_with("replies:\n  - content: CONTINUE\n", &extra).await;
    let daemon = w.site.start();
    let reply = post_ok(
        &client(),
        &daemon,
        "/api/group-chat",
        json!({"query": "Plan a picnic", "agent_ids": ["weather"], "max_iterations": 1}),
    )
    .await;
    assert_eq!(reply["rounds"], 1, "{reply}");
    let sent = w.weather.seen();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(
        (&sent[0]["type"], &sent[0]["senderId"]),
        (&json!(0), &json!("agent-runtime")),
        "{sent:?}"
    );

    let reply = post_ok(
        &client(),
        &daemon,
        "/api/group-chat",
        json!({"query": "Still there?", "agent_ids": ["sleepy"], "max_iterations": 1}),
    )
    .await;
    let answered = &reply["agent_responses"][0];
    assert_eq!(answered["agent_id"], "sleepy", "{reply}");
    assert_eq!(
        answered["response"], "Error: agent sleepy failed: timeout",
        "its own timeout, not the bundle's: {reply}"
    );
    assert_eq!(reply["execution_trace"][0]["is_error"], true, "{reply}");
    assert_eq!(sleepy.seen().len(), 1, "one message");
}

// ---------------------------------------------------------------------------
// Helpers

/// A remote agent that answers each message only after `delay`; it keeps
/// the `type` of every message it was sent.
struct SlowAgent {
    url: String,
    types: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
}

impl SlowAgent {
    async fn start(delay: Duration) -> Self {
        let types: std::sync::Arc<std::sync::Mutex<Vec<Value>>> = Default::default();
        let seen = types.clone();
        let app = axum::Router::new().route(
            "/message",
            axum::routing::post(move |axum::Json(message): axum::Json<Value>| {
                seen.lock().unwrap().push(message["type"].clone());
                async move {
                    tokio::time::sleep(delay).await;
                    axum::Json(json!({"content": "Still here."}))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/message", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { url, types }
    }

    fn seen(&self) -> Vec<Value> {
        self.types.lock().unwrap().clone()
    }
}

/// Names the router and the group-chat host (the defaults, spelled out).
const RUNTIME: &str = "[runtime]\nrouter = \"router\"\ngroup_chat = \"group-chat\"\n";

/// The arithmetic agent's model: a greeting for "Hello", a sum for anything else.
const ARITHMETIC_SCRIPT: &str = r#"
replies:
  - match: "Hello"
    content: "Hi, I add and multiply numbers."
  - content: "2+3 = 5"
"#;

/// The arithmetic bundle's description and `agent:` section.
const ARITHMETIC_AGENT: &str = "description: Adds and multiplies.\nagent:\n  name: Arithmetic\n  capabilities: [add, multiply]\n  conversation_starters: [\"What is 2+3?\"]\n";

/// The router's agents: the local `arithmetic` bundle and the remote `weather` agent,
/// under tool names that differ from the agent ids.
const TWO_AGENT_TOOLS: &str = "tools:\n  - {name: ask_arithmetic, kind: agent, bundle: arithmetic, description: Adds and multiplies.}\n  - {name: ask_weather, kind: http_agent, agent: weather, description: Forecasts the weather.}\n";

/// The group-chat host: its model (the `mock` endpoint) is the default selector.
const GROUP_CHAT: &str = "name: group-chat\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {system: \"You moderate a group chat.\", user: \"{{ input }}\"}\ngroup_chat: {max_rounds: 5, stop_word: DONE}\n";

/// The router bundle on the `mock` endpoint; `tools` is its `tools:` section
/// (or nothing). One call at a time, so calls run in the order the model made them.
fn router_bundle(tools: &str) -> String {
    format!(
        "name: router\nversion: \"1\"\ndescription: Routes questions to agents.\nmodel: {{endpoint: mock, name: m}}\nprompts: {{system: \"You route questions to agents.\", user: \"{{{{ input }}}}\"}}\nlimits: {{max_concurrency: 1}}\n{tools}"
    )
}

/// A local agent bundle answering from the model server at `model_url`;
/// `extra` adds top-level sections (`description:`, `agent:`, `tools:`).
fn agent_bundle(name: &str, model_url: &str, extra: &str) -> String {
    format!(
        "name: {name}\nversion: \"1\"\nmodel: {{endpoint: \"{model_url}\", name: m}}\nprompts: {{user: \"{{{{ input }}}}\"}}\n{extra}"
    )
}

/// A remote agent of the daemon config; `more` adds keys.
fn remote_agent_toml(id: &str, name: &str, endpoint: &str, more: &str) -> String {
    format!("\n[[agents]]\nid = \"{id}\"\nname = \"{name}\"\nendpoint = \"{endpoint}\"\n{more}")
}

/// The remote `weather` agent at `endpoint`.
fn weather_toml(endpoint: &str) -> String {
    remote_agent_toml(
        "weather",
        "Weather",
        endpoint,
        "description = \"Forecasts the weather.\"\ncapabilities = [\"forecast\"]\nconversation_starters = [\"Will it rain?\"]\n",
    )
}

/// A site with the router (scripted by `router_script`), the group-chat
/// host, the local `arithmetic` agent and the remote `weather` agent.
struct World {
    /// The router's and the group-chat host's model.
    mock: MockServer,
    /// The arithmetic agent's model.
    arithmetic: MockServer,
    weather: FakeAgent,
    site: Site,
}

async fn world(router_script: &str) -> World {
    world_with(router_script, "").await
}

/// The same, with `extra_toml` appended to the daemon config.
async fn world_with(router_script: &str, extra_toml: &str) -> World {
    let mock = mock_server(router_script).await;
    let arithmetic = mock_server(ARITHMETIC_SCRIPT).await;
    let weather = FakeAgent::start("Sunny tomorrow.").await;
    let site = Site::new(
        &mock.base_url(),
        &format!("{RUNTIME}{}{extra_toml}", weather_toml(&weather.url)),
    );
    site.put_bundle("router", &router_bundle(TWO_AGENT_TOOLS));
    site.put_bundle("group-chat", GROUP_CHAT);
    site.put_bundle(
        "arithmetic",
        &agent_bundle("arithmetic", &arithmetic.base_url(), ARITHMETIC_AGENT),
    );
    World {
        mock,
        arithmetic,
        weather,
        site,
    }
}

/// A URL on 127.0.0.1 where nothing listens (a port bound, then freed).
fn closed_port_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}/message")
}

/// POSTs `body` to `path` → (status, JSON body).
async fn post(http: &reqwest::Client, daemon: &Daemon, path: &str, body: Value) -> (u16, Value) {
    let response = http
        .post(daemon.url(path))
        .json(&body)
        .send()
        .await
        .unwrap();
    status_and_json(path, response).await
}

/// GETs `path` → (status, JSON body).
async fn get_status(http: &reqwest::Client, daemon: &Daemon, path: &str) -> (u16, Value) {
    let response = http.get(daemon.url(path)).send().await.unwrap();
    status_and_json(path, response).await
}

async fn status_and_json(path: &str, response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!("{path} answered {status} with a body that is not JSON ({e}): {text:?}")
    });
    (status, body)
}

/// POSTs `body` to `path`, which must answer 200; returns the JSON body.
async fn post_ok(http: &reqwest::Client, daemon: &Daemon, path: &str, body: Value) -> Value {
    let (status, answer) = post(http, daemon, path, body.clone()).await;
    assert_eq!(
        status,
        200,
        "{path} {body} → {answer}\nlog:\n{}",
        daemon.log()
    );
    answer
}

/// The job behind a runtime reply (its `job_id`).
async fn job_of(http: &reqwest::Client, daemon: &Daemon, reply: &Value) -> Value {
    get(
        http,
        daemon,
        &format!("/v1/jobs/{}", reply["job_id"].as_str().unwrap()),
    )
    .await
}

/// The id of the first job `/v1/jobs?bundle=…` lists, if any.
async fn first_job_id(http: &reqwest::Client, daemon: &Daemon, bundle: &str) -> Option<String> {
    let jobs = get(http, daemon, &format!("/v1/jobs?bundle={bundle}")).await;
    jobs["jobs"][0]["id"].as_str().map(str::to_string)
}

/// Asserts an error answer: its status, `code` and, when given, `field`.
fn assert_error(answer: &(u16, Value), status: u16, code: &str, field: Option<&str>) {
    let (got, body) = answer;
    assert_eq!(*got, status, "{body}");
    assert_eq!(body["error"]["code"], code, "{body}");
    if let Some(field) = field {
        assert_eq!(body["error"]["field"], field, "{body}");
    }
}

fn message_of(answer: &(u16, Value)) -> String {
    answer.1["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// An RFC 3339 timestamp such as `2026-11-23T04:20:01.410Z`.
fn assert_timestamp(value: &Value) {
    let ts = value
        .as_str()
        .unwrap_or_else(|| panic!("timestamp {value} is not a string"));
    assert!(
        ts.len() >= 20 && ts.as_bytes()[4] == b'-' && ts.as_bytes()[10] == b'T',
        "not RFC 3339: {ts:?}"
    );
}

/// The user messages of a recorded model request, joined by newlines.
fn user_text(request: &Value) -> String {
    request["messages"]
        .as_array()
        .map(|messages| {
            messages
                .iter()
                .filter(|m| m["role"] == "user")
                .filter_map(|m| m["content"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// A group chat's `agent_responses` with only the documented keys.
fn responses(value: &Value) -> Value {
    Value::Array(
        value["agent_responses"]
            .as_array()
            .unwrap_or_else(|| panic!("no agent_responses in {value}"))
            .iter()
            .map(|r| {
                json!({"agent_id": r["agent_id"], "agent_name": r["agent_name"], "response": r["response"]})
            })
            .collect(),
    )
}

/// POSTs a streaming request and reads the whole SSE body (it must end by
/// itself after `[DONE]`) → its `data:` frames.
async fn stream_frames(
    http: &reqwest::Client,
    daemon: &Daemon,
    path: &str,
    body: Value,
) -> Vec<Value> {
    let response = http
        .post(daemon.url(path))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{path} {body}");
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type:?}"
    );
    let raw = response.bytes().await.unwrap();
    parse_frames(std::str::from_utf8(&raw).unwrap())
}

/// The `data:` payloads of an SSE body in order: JSON values, and `[DONE]`
/// as the string "[DONE]". Comments (keep-alives) and other fields are skipped.
fn parse_frames(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|data| {
            let data = data.trim();
            if data == "[DONE]" {
                Value::String("[DONE]".into())
            } else {
                serde_json::from_str(data)
                    .unwrap_or_else(|e| panic!("frame {data:?} is not JSON: {e}"))
            }
        })
        .collect()
}

fn has_line(out: &str, line: &str) -> bool {
    out.lines().any(|l| l == line)
}

/// Runs the CLI against the daemon at `base` (with `stdin` fed when given)
/// → (success, stdout, stderr).
async fn run_cli(base: &str, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    run_cli_with_env(base, args, stdin, &[]).await
}

async fn run_cli_with_env(
    base: &str,
    args: &[&str],
    stdin: Option<&str>,
    env: &[(&str, &str)],
) -> (bool, String, String) {
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let base = base.to_string();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let stdin = stdin.map(str::to_string);
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        use std::process::{Command, Stdio};
        let mut child = Command::new(env!("CARGO_BIN_EXE_structured-agents"))
            .arg("--server")
            .arg(&base)
            .args(&args)
            .envs(env)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if let Some(text) = stdin {
            // Dropped after writing: the CLI sees the end of its input.
            child
                .stdin
                .take()
                .unwrap()
                .write_all(text.as_bytes())
                .unwrap();
        }
        let out = child.wait_with_output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .unwrap()
}

/// A group chat killed with SIGKILL after its second reply resumes on the
/// next start without asking any agent again: each agent answered once per
/// round, and the chat ends with all four replies.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_group_chat_resumes_without_asking_an_agent_again() {
    let w = world("replies:\n  - content: CONTINUE\n").await;
    let mut daemon = w.site.start_with_env(&[
        ("SA_FAILPOINTS", "after_group_reply_recorded@2"),
        SHORT_LEASE,
    ]);
    let http = client();
    let body = json!({"query": "Plan a picnic", "agent_ids": ["arithmetic", "weather"], "max_iterations": 2});
    // The answer dies with the daemon; the job is found in the queue.
    let request = tokio::spawn({
        let (http, url) = (http.clone(), daemon.url("/api/group-chat"));
        async move { http.post(url).json(&body).send().await }
    });
    daemon.wait_killed_at("after_group_reply_recorded");
    let _ = request.await;
    let daemon = w.site.start();
    let id = first_job_id(&http, &daemon, "group-chat").await.unwrap();
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(30)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(done["attempts"], 2, "{done}");
    let responses = &done["result"]["agent_responses"];
    assert_eq!(
        responses
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["agent_id"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["arithmetic", "weather", "arithmetic", "weather"],
        "{done}"
    );
    // Round 1's replies were replayed from the journal, not asked again.
    assert_eq!(w.arithmetic.requests().len(), 2, "arithmetic model calls");
    assert_eq!(w.weather.seen().len(), 2, "weather agent messages");
}

/// A group chat is traced like any run: an `invoke_agent` span of the host
/// bundle with an `execute_tool <agent>` span per reply, and each local
/// agent's own `invoke_agent` span under its reply's span, all in one trace.
#[tokio::test(flavor = "multi_thread")]
async fn a_group_chat_is_one_trace_with_a_span_per_reply() {
    let (otlp, spans, _) = common::otlp::collector().await;
    let w = world_with(
        "replies:\n  - content: CONTINUE\n",
        &format!("\n[telemetry]\notlp_endpoint = \"{otlp}\"\n"),
    )
    .await;
    let daemon = w.site.start();
    let http = client();
    let reply = post_ok(
        &http,
        &daemon,
        "/api/group-chat",
        json!({"query": "Plan a picnic", "agent_ids": ["arithmetic", "weather"], "max_iterations": 1}),
    )
    .await;
    assert_eq!(reply["rounds"], 1, "{reply}");
    assert_eq!(daemon.stop(), Some(0));
    let spans = spans.lock().unwrap().clone();
    let named = |name: &str| {
        spans
            .iter()
            .filter(|s| s.name == name)
            .cloned()
            .collect::<Vec<_>>()
    };
    let host = named("invoke_agent group-chat");
    assert_eq!(
        host.len(),
        1,
        "{:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let host = &host[0];
    let reply = named("execute_tool arithmetic");
    for (name, parent) in [
        ("execute_tool arithmetic", host),
        ("execute_tool weather", host),
        ("invoke_agent arithmetic", &reply[0]),
    ] {
        let found = named(name);
        assert_eq!(found.len(), 1, "one {name} span");
        assert_eq!(
            found[0].parent_span_id, parent.span_id,
            "{name} under {}",
            parent.name
        );
        assert_eq!(
            found[0].trace_id, host.trace_id,
            "{name} in the chat's trace"
        );
    }
}

/// A message repeated with the same `Idempotency-Key` (as a resumed job's
/// `http_agent` call repeats it) is answered by the first job, without a
/// second run; a new key is a new job; the same key with other content is
/// a 409 naming the first job.
#[tokio::test(flavor = "multi_thread")]
async fn a_repeated_agent_message_is_answered_once_per_idempotency_key() {
    let w = world("replies:\n  - content: unused\n").await;
    let daemon = w.site.start();
    let http = client();
    let send = |key: &'static str| {
        let (http, url) = (http.clone(), daemon.url("/api/agents/arithmetic/message"));
        async move {
            let response = http
                .post(url)
                .header("Idempotency-Key", key)
                .json(&json!({"content": "What is 2+3?", "senderId": "peer"}))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
            response.json::<Value>().await.unwrap()
        }
    };
    let first = send("job-1:1:call-1").await;
    let again = send("job-1:1:call-1").await;
    assert_eq!(first["job_id"], again["job_id"], "{first} {again}");
    assert_eq!(again["content"], "2+3 = 5");
    assert_eq!(
        w.arithmetic.requests().len(),
        1,
        "one model call for one key"
    );
    let other = send("job-1:1:call-2").await;
    assert_ne!(other["job_id"], first["job_id"]);
    assert_eq!(w.arithmetic.requests().len(), 2);

    // The same key with different content is a conflict naming the job,
    // never the old answer passed off as the new one's.
    let conflict = http
        .post(daemon.url("/api/agents/arithmetic/message"))
        .header("Idempotency-Key", "job-1:1:call-1")
        .json(&json!({"content": "What is 7*6?", "senderId": "peer"}))
        .send()
        .await
        .unwrap();
    assert_eq!(conflict.status(), 409);
    let error: Value = conflict.json().await.unwrap();
    assert_eq!(error["error"]["code"], "idempotency_conflict", "{error}");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(first["job_id"].as_str().unwrap()) && message.contains("input"),
        "{message}"
    );
    assert_eq!(w.arithmetic.requests().len(), 2, "nothing ran for it");
}

/// The local group-chat agent `charger`: its `charge` tool (unsafe) writes a
/// line, then runs until its daemon is gone.
fn charger_bundle(model_url: &str, effects: &std::path::Path, effect: &str) -> String {
    let tools = common::daemon::charge_tools(effects, effect);
    agent_bundle(
        "charger",
        model_url,
        &format!("description: Charges cards.\n{tools}"),
    )
}

/// An unsafe call of unknown outcome inside a group chat's local agent parks
/// the whole job in `needs_attention` (never an "Error: agent … failed"
/// reply the chat goes on with); `resolve --skip` hands the result to that
/// call and the chat finishes with the agent's real answer, the charge made
/// once and no completed model call asked again.
#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_outcome_in_a_group_chat_agent_parks_the_whole_job() {
    a_group_chat_survives_a_kill_during_a_charge("unsafe").await;
}

/// An `idempotent` call cut short there runs again (with its key): the chat
/// finishes without parking, the charge made once.
#[tokio::test(flavor = "multi_thread")]
async fn an_idempotent_call_in_a_group_chat_agent_runs_again() {
    a_group_chat_survives_a_kill_during_a_charge("idempotent").await;
}

async fn a_group_chat_survives_a_kill_during_a_charge(effect: &str) {
    let w = world("replies:\n  - content: CONTINUE\n").await;
    let charger = mock_server(
        "replies:\n  - {turn: 1, tool_calls: [{id: c, name: charge, arguments: {}}]}\n  - {turn: 2, content: card charged}\n",
    )
    .await;
    let effects = w.site.path().join("effects.txt");
    w.site.put_bundle(
        "charger",
        &charger_bundle(&charger.base_url(), &effects, effect),
    );
    let daemon = w.site.start_with_env(&[SHORT_LEASE]);
    let http = client();
    let body = json!({"query": "Charge my card", "agent_ids": ["charger"], "max_iterations": 1});
    let request = tokio::spawn({
        let (http, url) = (http.clone(), daemon.url("/api/group-chat"));
        async move { http.post(url).json(&body).send().await }
    });
    common::daemon::kill_while_charging(daemon, &effects).await;
    let _ = request.await;

    let daemon = w.site.start();
    let id = first_job_id(&http, &daemon, "group-chat").await.unwrap();
    if effect == "unsafe" {
        let pending = common::daemon::parked_on_charge(&http, &daemon, &id).await;
        assert_eq!(pending["scope"], "1:reply-0/", "{pending}");
        common::daemon::skip_charge(&http, &daemon, &id).await;
    }
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(
        done["result"]["agent_responses"][0]["response"], "card charged",
        "{done}"
    );
    let lines = std::fs::read_to_string(&effects).unwrap();
    assert_eq!(lines.lines().count(), 1, "charged once: {lines}");
    assert_eq!(charger.requests().len(), 2, "no completed model call again");
}

/// As in the multi-agent runtime, where every configured agent is a tool of
/// the router: a router that declares no agent tools reaches every agent
/// of the directory — a local bundle, a `[[agents]]` entry and an agent of
/// the runtime's own `agents.json` — each a tool named after its id, except
/// the ones `router_deny` names; the envelopes it sends come from
/// `runtime`.
#[tokio::test(flavor = "multi_thread")]
async fn the_router_reaches_every_agent_of_the_directory_by_default() {
    let router_script = r#"
replies:
  - tool_calls:
      - {name: arithmetic, arguments: {input: "What is 2+3?"}}
      - {name: weather, arguments: {content: "Will it rain?"}}
      - {name: news, arguments: {content: "Any headlines?"}}
  - content: "5, sunny, and nothing new."
"#;
    let mock = mock_server(router_script).await;
    let arithmetic = mock_server(ARITHMETIC_SCRIPT).await;
    let weather = FakeAgent::start("Sunny tomorrow.").await;
    let news = FakeAgent::start("Nothing new.").await;
    let site = Site::new(
        &mock.base_url(),
        &format!(
            "[runtime]\nrouter = \"router\"\ngroup_chat = \"group-chat\"\nagents_file = \"agents.json\"\nrouter_deny = [\"hidden\"]\n{}",
            weather_toml(&weather.url)
        ),
    );
    std::fs::write(
        site.path().join("agents.json"),
        json!({"agents": [{"id": "news", "name": "News", "description": "Reads the news.",
                           "capabilities": ["headlines"], "endpoint": news.url, "port": 5001}]})
        .to_string(),
    )
    .unwrap();
    site.put_bundle("router", &router_bundle(""));
    site.put_bundle("group-chat", GROUP_CHAT);
    site.put_bundle(
        "arithmetic",
        &agent_bundle("arithmetic", &arithmetic.base_url(), ARITHMETIC_AGENT),
    );
    site.put_bundle(
        "hidden",
        &agent_bundle("hidden", &arithmetic.base_url(), ""),
    );
    let daemon = site.start();
    let http = client();

    let listed = get(&http, &daemon, "/api/agents").await;
    let ids: Vec<&str> = listed["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["arithmetic", "hidden", "weather", "news"], "{listed}");

    let answer = post_ok(
        &http,
        &daemon,
        "/api/query",
        json!({"query": "Sum, rain, news?"}),
    )
    .await;
    assert_eq!(answer["content"], "5, sunny, and nothing new.", "{answer}");
    assert_eq!(
        answer["agents_used"],
        json!(["arithmetic", "weather", "news"])
    );
    let offered: Vec<String> = mock.requests()[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        offered,
        ["arithmetic", "weather", "news"],
        "denied `hidden` is not offered"
    );
    for agent in [&weather, &news] {
        let sent = agent.seen();
        assert_eq!(sent.len(), 1, "{sent:?}");
        assert_eq!(sent[0]["senderId"], "runtime", "{sent:?}");
    }
}

/// A local agent whose job parks for an approval answers as chat
/// completions does: 503 `job_awaiting_approval` (with `Retry-After`),
/// not 500 `job_failed` — the job has not failed; it waits for a decision
/// (issue 49).
#[tokio::test(flavor = "multi_thread")]
async fn a_message_whose_job_parks_for_an_approval_is_a_503_awaiting_approval() {
    let mock = mock_server(
        "replies:\n  - tool_calls: [{id: p1, name: pay, arguments: {amount: 250, to: Bob}}]\n  - content: \"Paid.\"\n",
    )
    .await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle(
        "bank",
        r#"name: bank
version: "1"
model: {endpoint: mock, name: m, plugin: openai}
prompts: {user: "{{ input }}"}
tools:
  - name: pay
    kind: process
    effect: unsafe
    description: pay someone
    parameters: {type: object, properties: {amount: {type: integer}, to: {type: string}}, required: [amount, to]}
    approval: always
    command: [python3, -c, "print('{}')"]
"#,
    );
    let daemon = site.start();
    let http = client();
    let response = http
        .post(daemon.url("/api/agents/bank/message"))
        .json(&json!({"content": "pay Bob 250"}))
        .send()
        .await
        .unwrap();
    assert!(response.headers().contains_key("retry-after"));
    let answer = status_and_json("/api/agents/bank/message", response).await;
    assert_error(&answer, 503, "job_awaiting_approval", None);
    assert!(message_of(&answer).contains("approv"), "{answer:?}");
}
