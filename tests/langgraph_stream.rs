//! LangGraph's streamed runs against the real daemon (issue 53), with the
//! real clients (tests/common/langgraph.rs): a run streamed in every
//! stream mode with LangGraph's event names and payloads, joined again
//! after an event id and whole, stateless; the same with the JS SDK; an
//! agent call's run streamed as a subgraph (`stream_subgraphs`); a run
//! cancelled when its client goes (`on_disconnect: cancel`); a stateless
//! stream that tells its end before its job is deleted; and a stream
//! the Python SDK joins again by itself across a daemon killed and
//! restarted mid-run, with nothing lost or sent twice.

mod common;

use std::time::Duration;

use common::daemon::{client_as, eventually, get, job_events, post_json, read_sse_response};
use common::langgraph::{
    ADDER, BOSS, BOSS_SCRIPT, PAY_SCRIPT, PAYER, RUN_SCRIPT, driver, js_client, keyed_site,
    message_types,
};
use common::{python_langgraph, repo};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

/// The parts of `parts` (`[event, data, id]`) with event `name`: their data.
fn of<'a>(parts: &'a [Value], name: &str) -> Vec<&'a Value> {
    parts
        .iter()
        .filter(|p| p[0] == name)
        .map(|p| &p[1])
        .collect()
}

/// The parts that carry an id of their own: the first of each id (an SDK
/// gives every later part the last id it saw, as SSE keeps it).
fn numbered_parts(parts: &[Value]) -> Vec<&Value> {
    let mut last = None;
    let mut own = Vec::new();
    for part in parts {
        let id = part[2].as_str();
        if id.is_some() && id != last {
            own.push(part);
            last = id;
        }
    }
    own
}

/// [`numbered_parts`] as `(event, id)`.
fn numbered(parts: &[Value]) -> Vec<(String, u64)> {
    numbered_parts(parts)
        .iter()
        .map(|p| {
            (
                p[0].as_str().unwrap().to_string(),
                p[2].as_str().unwrap().parse().unwrap(),
            )
        })
        .collect()
}

/// The node each `updates` part names.
fn updated_nodes(parts: &[Value]) -> Vec<String> {
    of(parts, "updates")
        .iter()
        .filter_map(|u| u.as_object()?.keys().next().cloned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_streams_in_every_mode_and_is_joined_again() {
    let (_server, site, key) = keyed_site(RUN_SCRIPT, "submit,read,operate").await;
    site.put_bundle("adder", ADDER);
    let daemon = site.start();

    let got = driver(&daemon, &key, "stream", &[]).await;
    let parts = got["parts"].as_array().unwrap();
    let run_id = got["run_id"].as_str().unwrap();
    // First the run, last its end; ids only grow.
    assert_eq!(parts[0][0], "metadata", "{parts:?}");
    assert_eq!(parts[0][1], json!({"run_id": run_id, "attempt": 1}));
    assert_eq!(parts.last().unwrap()[0], "end");
    let ids: Vec<u64> = numbered(parts).iter().map(|(_, id)| *id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");

    // values: the input, then each super-step; the last is the thread's state.
    let state = &got["state"];
    let values = of(parts, "values");
    assert_eq!(values.len(), 4, "{values:?}");
    assert_eq!(message_types(&json!({"values": values[0]})), ["human"]);
    assert_eq!(*values.last().unwrap(), &state["values"]);
    let messages = state["values"]["messages"].as_array().unwrap();
    assert_eq!(
        message_types(state),
        ["human", "ai", "tool", "ai"],
        "{state}"
    );
    // updates: what each node wrote.
    assert_eq!(updated_nodes(parts), ["model", "tools", "model"]);
    assert_eq!(of(parts, "updates")[1]["tools"]["messages"][0], messages[2]);

    // messages-tuple: the answer's chunks make its text; the tool call
    // comes as a chunk; the tool's message whole, from node `tools`.
    let tuples = of(parts, "messages");
    let answer_id = &messages[3]["id"];
    let text: String = tuples
        .iter()
        .filter(|t| &t[0]["id"] == answer_id)
        .map(|t| t[0]["content"].as_str().unwrap())
        .collect();
    assert_eq!(text, "2+3 is 5.");
    assert!(
        tuples
            .iter()
            .any(|t| t[0]["type"] == "AIMessageChunk"
                && t[0]["tool_call_chunks"][0]["name"] == "add"),
        "{tuples:?}"
    );
    let tool = tuples.iter().find(|t| t[0]["type"] == "tool").unwrap();
    assert_eq!(tool[0], messages[2]);
    assert_eq!(tool[1]["langgraph_node"], "tools");
    assert_eq!(tool[1]["run_id"], run_id);
    // messages: each message announced once, then whole.
    let complete: Vec<&Value> = of(parts, "messages/complete")
        .iter()
        .map(|c| &c[0])
        .collect();
    assert_eq!(complete, messages[1..].iter().collect::<Vec<_>>());
    let announced: Vec<&String> = of(parts, "messages/metadata")
        .iter()
        .flat_map(|m| m.as_object().unwrap().keys())
        .collect();
    assert_eq!(announced.len(), 3, "{announced:?}");
    // events: the chain around the model's and the tool's.
    let events: Vec<&str> = of(parts, "events")
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .filter(|e| *e != "on_chat_model_stream")
        .collect();
    assert_eq!(
        events,
        [
            "on_chain_start",
            "on_chat_model_start",
            "on_chat_model_end",
            "on_tool_start",
            "on_tool_end",
            "on_chat_model_start",
            "on_chat_model_end",
            "on_chain_end"
        ]
    );
    // custom: the daemon's progress as it happens.
    assert!(!of(parts, "custom").is_empty(), "{parts:?}");
    // debug, checkpoints and tasks: the thread's checkpoints, by their ids.
    let checkpoints: Vec<&Value> = of(parts, "checkpoints")
        .iter()
        .map(|c| &c["config"]["configurable"]["checkpoint_id"])
        .collect();
    assert_eq!(checkpoints.len(), 4);
    assert_eq!(*checkpoints[3], state["checkpoint"]["checkpoint_id"]);
    let debug: Vec<&str> = of(parts, "debug")
        .iter()
        .map(|d| d["type"].as_str().unwrap())
        .collect();
    assert_eq!(debug.iter().filter(|t| **t == "checkpoint").count(), 4);
    assert_eq!(debug.iter().filter(|t| **t == "task_result").count(), 4);
    let tasks: Vec<&Value> = of(parts, "tasks").iter().map(|t| &t["name"]).collect();
    assert_eq!(
        tasks,
        [
            &json!("__start__"),
            &json!("model"),
            &json!("tools"),
            &json!("model")
        ]
    );

    // Joined after an event: exactly what followed it, as it was sent —
    // but for what this stream had live (a reply's chunk whole instead of
    // its tail, a message's metadata sent with its first token).
    let middle: u64 = got["middle"].as_str().unwrap().parse().unwrap();
    let rest = got["rest"].as_array().unwrap();
    let stored = |part: &&Value| part[0] != "messages" && part[0] != "messages/metadata";
    let sent: Vec<&Value> = numbered_parts(parts)
        .into_iter()
        .filter(stored)
        .filter(|p| p[2].as_str().unwrap().parse::<u64>().unwrap() > middle)
        .collect();
    let resent: Vec<&Value> = numbered_parts(rest).into_iter().filter(stored).collect();
    assert_eq!(resent, sent);
    assert!(!resent.is_empty());
    assert_eq!(rest.last().unwrap()[0], "end");
    // Joined whole in `values` (the SDK's default): the same values at the
    // same numbers, as numbers do not depend on the modes asked.
    let again = got["again"].as_array().unwrap();
    let values_sent: Vec<(String, u64)> = numbered(parts)
        .into_iter()
        .filter(|(event, _)| event == "values")
        .collect();
    assert_eq!(numbered(again), values_sent);
    assert_eq!(of(again, "values"), of(parts, "values"));

    // No mode asked: values; a second run's values hold both.
    let plain = got["plain"].as_array().unwrap();
    assert!(
        plain
            .iter()
            .all(|p| ["metadata", "values", "end"].contains(&p[0].as_str().unwrap())),
        "{plain:?}"
    );
    let last = of(plain, "values").last().copied().unwrap().clone();
    assert_eq!(message_types(&json!({"values": last})).len(), 6);
    // Stateless: the model's update.
    let stateless = got["stateless"].as_array().unwrap();
    assert_eq!(
        of(stateless, "updates")[0]["model"]["messages"][0]["content"],
        "Hello there."
    );
    // A mode the daemon does not serve is refused by name.
    assert_eq!(got["bad_mode"], 422);

    // LangGraph's JS SDK reads the same stream.
    let js = js_client(&daemon, &key, "stream").await;
    let js_parts = js["parts"].as_array().unwrap();
    assert_eq!(js_parts[0][0], "metadata", "{js}");
    assert_eq!(updated_nodes(js_parts), ["model", "tools", "model"]);
    assert_eq!(
        *of(js_parts, "values").last().unwrap(),
        &js["state"]["values"]
    );
    let js_text: String = of(js_parts, "messages")
        .iter()
        .filter(|t| t[0]["id"] == js["state"]["values"]["messages"][3]["id"])
        .map(|t| t[0]["content"].as_str().unwrap())
        .collect();
    assert_eq!(js_text, "2+3 is 5.");
    let js_whole = js["whole"].as_array().unwrap();
    assert_eq!(
        updated_nodes(js_whole),
        ["model", "tools", "model"],
        "lastEventId -1 is the whole run: {js_whole:?}"
    );
    let js_rest = js["rest"].as_array().unwrap();
    assert!(js_rest.len() < js_parts.len(), "{js_rest:?}");
    assert_eq!(js_rest.last().unwrap()[0], "end");
}

/// The parts of `parts` whose event is `mode` in a subgraph's namespace:
/// `(namespace, data)`.
fn nested<'a>(parts: &'a [Value], mode: &str) -> Vec<(&'a str, &'a Value)> {
    parts
        .iter()
        .filter_map(|p| {
            let (event, namespace) = p[0].as_str()?.split_once('|')?;
            (event == mode).then_some((namespace, &p[1]))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_calls_run_streams_as_a_subgraph_when_asked() {
    let script = format!("{RUN_SCRIPT}{BOSS_SCRIPT}");
    let (_server, site, key) = keyed_site(&script, "submit,read").await;
    site.put_bundle("adder", ADDER);
    site.put_bundle("boss", BOSS);
    let daemon = site.start();

    let got = driver(&daemon, &key, "subgraphs", &[]).await;
    let parts = got["parts"].as_array().unwrap();
    assert_eq!(parts.last().unwrap()[0], "end", "{parts:?}");
    let ids: Vec<u64> = numbered(parts).iter().map(|(_, id)| *id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    // The job's own run, at the root: it asked its helper, then answered.
    let state = &got["state"];
    assert_eq!(
        message_types(state),
        ["human", "ai", "tool", "ai"],
        "{state}"
    );
    assert_eq!(*of(parts, "values").last().unwrap(), &state["values"]);
    assert_eq!(updated_nodes(parts), ["model", "tools", "model"]);
    // The helper's answer, as the model saw it (a tool's output is JSON).
    assert_eq!(state["values"]["messages"][2]["content"], "\"2+3 is 5.\"");

    // The helper's run, in the namespace of the agent call that ran it:
    // its input is what the call asked, then each of its super-steps.
    let values = nested(parts, "values");
    let namespace = values[0].0;
    assert!(namespace.starts_with("tools:"), "{namespace}");
    assert!(
        parts
            .iter()
            .filter_map(|p| p[0].as_str()?.split_once('|'))
            .all(|(_, ns)| ns == namespace),
        "one nested run, one namespace: {parts:?}"
    );
    let helper = |data: &Value| -> Vec<String> {
        let messages = data["messages"].as_array().unwrap();
        messages
            .iter()
            .map(|m| m["type"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(helper(values[0].1), ["human"]);
    assert_eq!(values[0].1["messages"][0]["content"], "2+3");
    let last = values.last().unwrap().1;
    assert_eq!(helper(last), ["human", "ai", "tool", "ai"]);
    assert_eq!(last["messages"][3]["content"], "2+3 is 5.");
    let nodes: Vec<&String> = nested(parts, "updates")
        .iter()
        .filter_map(|(_, u)| u.as_object()?.keys().next())
        .collect();
    assert_eq!(nodes, ["model", "tools", "model"]);
    // Its answer's chunks make its text; their metadata name its place.
    let answer_id = &last["messages"][3]["id"];
    let tuples = nested(parts, "messages");
    let text: String = tuples
        .iter()
        .filter(|(_, t)| &t[0]["id"] == answer_id)
        .map(|(_, t)| t[0]["content"].as_str().unwrap())
        .collect();
    assert_eq!(text, "2+3 is 5.", "{tuples:?}");
    let checkpoint_ns = tuples[0].1[1]["langgraph_checkpoint_ns"].as_str().unwrap();
    assert!(checkpoint_ns.starts_with(namespace), "{checkpoint_ns}");
    // Its progress is its own too.
    assert!(
        nested(parts, "custom")
            .iter()
            .any(|(_, c)| c["kind"] == "model_call_started"),
        "{parts:?}"
    );
    // The thread's state is the job's messages: the helper's are its own.
    assert_eq!(
        state["values"]["messages"].as_array().unwrap().len(),
        4,
        "{state}"
    );

    // Joined after one of the helper's events (in the run's own modes and
    // subgraphs): exactly what followed it.
    let middle: u64 = got["middle"].as_str().unwrap().parse().unwrap();
    let stored = |part: &&Value| {
        let event = part[0].as_str().unwrap();
        !event.starts_with("messages")
    };
    let sent: Vec<&Value> = numbered_parts(parts)
        .into_iter()
        .filter(stored)
        .filter(|p| p[2].as_str().unwrap().parse::<u64>().unwrap() > middle)
        .collect();
    let rest = got["rest"].as_array().unwrap();
    let resent: Vec<&Value> = numbered_parts(rest).into_iter().filter(stored).collect();
    assert_eq!(resent, sent);
    assert!(resent.iter().any(|p| p[0].as_str().unwrap().contains('|')));

    // Not asked: the job's own run alone; a value not true or false: 422.
    let without = got["without"].as_array().unwrap();
    assert!(
        without
            .iter()
            .all(|p| !p[0].as_str().unwrap().contains('|')),
        "{without:?}"
    );
    assert_eq!(updated_nodes(without), ["model", "tools", "model"]);
    assert_eq!(got["bad"], 422);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_whose_client_goes_is_cancelled_when_it_asked() {
    let (_server, site, key) = keyed_site(RUN_SCRIPT, "submit,read,operate").await;
    site.put_bundle("adder", ADDER);
    let daemon = site.start();
    let http = client_as(&key);
    let (status, thread) = post_json(&http, &daemon, "/threads", json!({})).await;
    assert_eq!(status, 200, "{thread}");
    let thread = thread["thread_id"].as_str().unwrap();

    let mut ids = Vec::new();
    for on_disconnect in ["cancel", "continue"] {
        let response = http
            .post(daemon.url(&format!("/threads/{thread}/runs/stream")))
            .json(&json!({
                "assistant_id": "adder",
                "input": {"messages": [{"role": "user", "content": "slow"}]},
                "on_disconnect": on_disconnect,
            }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let at = response.headers()["location"].to_str().unwrap().to_string();
        let run = at.split('/').nth(4).unwrap().to_string();
        assert_eq!(at, format!("/threads/{thread}/runs/{run}/stream"));
        let mut response = response;
        let first = response.chunk().await.unwrap().unwrap();
        assert!(String::from_utf8_lossy(&first).contains("metadata"));
        drop(response);
        if on_disconnect == "cancel" {
            let job = eventually(Duration::from_secs(20), "the run cancelled", || async {
                let job = get(&http, &daemon, &format!("/v1/jobs/{run}")).await;
                (job["state"] == "cancelled").then_some(job)
            })
            .await;
            assert_eq!(job["state"], "cancelled");
        }
        ids.push(run);
    }
    // Its client gone, a run that said `continue` goes on: leased (the
    // stream's first event comes before that), it runs — the model holds
    // its answer 30 s — and is not cancelled.
    let job = eventually(Duration::from_secs(20), "the run leased", || async {
        let job = get(&http, &daemon, &format!("/v1/jobs/{}", ids[1])).await;
        (job["state"] != "queued").then_some(job)
    })
    .await;
    assert_eq!(job["state"], "running", "{job}");
    let cancel = http
        .post(daemon.url(&format!("/threads/{thread}/runs/{}/cancel", ids[1])))
        .send()
        .await
        .unwrap();
    assert_eq!(cancel.status(), 202);
}

/// A stateless streamed run whose job goes once it ended (`on_completion:
/// delete`, the default) tells its last steps first: its stream reads them
/// from the job after its end — held there a second by `stream_end_read`
/// — and the job is deleted only once its stream is done.
#[tokio::test(flavor = "multi_thread")]
async fn a_stateless_stream_tells_its_end_before_its_job_goes() {
    let (_server, site, key) = keyed_site(RUN_SCRIPT, "submit,read,operate").await;
    site.put_bundle("adder", ADDER);
    let daemon = site.start_with_env(&[("SA_FAILPOINTS", "stream_end_read:pause")]);
    let http = client_as(&key);
    let response = http
        .post(daemon.url("/runs/stream"))
        .json(&json!({
            "assistant_id": "adder",
            "input": {"messages": [{"role": "user", "content": "2+3"}]},
            "stream_mode": ["values"],
        }))
        .send()
        .await
        .unwrap();
    let at = response.headers()["location"].to_str().unwrap().to_string();
    let run = at.split('/').nth(2).unwrap().to_string();
    let events = read_sse_response(response, None).await;
    assert!(
        daemon.log().contains("failpoint stream_end_read: pausing"),
        "the stream did not pause at its end: {}",
        daemon.log()
    );
    let last: Value = events
        .iter()
        .rev()
        .find(|(_, event, _)| event == "values")
        .map(|(_, _, data)| serde_json::from_str(data).unwrap())
        .unwrap();
    assert_eq!(
        message_types(&json!({"values": last})),
        ["human", "ai", "tool", "ai"],
        "{events:?}"
    );
    assert_eq!(last["messages"][3]["content"], "2+3 is 5.");
    assert_eq!(events.last().unwrap().1, "end", "{events:?}");
    // Then it goes, as the client asked.
    eventually(Duration::from_secs(20), "the run's job deleted", || async {
        let status = http
            .get(daemon.url(&format!("/v1/jobs/{run}")))
            .send()
            .await
            .unwrap()
            .status();
        (status == 404).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interrupt_is_a_parked_call_and_command_resume_decides_it() {
    let (_server, site, key) = keyed_site(PAY_SCRIPT, "submit,read,operate,approve").await;
    site.put_bundle("payer", PAYER);
    let daemon = site.start();
    let got = driver(&daemon, &key, "interrupt", &[]).await;

    // The stream ends at the park with the call's interrupt.
    let parked = got["parked"].as_array().unwrap();
    assert_eq!(parked.last().unwrap()[0], "end", "{parked:?}");
    let updates = of(parked, "updates");
    let interrupt = &updates.last().unwrap()["__interrupt__"][0];
    let request = &interrupt["value"]["action_requests"][0];
    assert_eq!(
        (&request["name"], &request["args"]),
        (&json!("pay"), &json!({"amount": 5})),
        "{interrupt}"
    );
    let id = interrupt["id"].as_str().unwrap();
    let job = interrupt["value"]["job_id"].as_str().unwrap();
    let call = interrupt["value"]["call_id"].as_str().unwrap();
    let digest = interrupt["value"]["digest"].as_str().unwrap();
    assert_eq!(id, format!("{job}/{digest}/{call}"));
    // The thread's state and the thread show it.
    let state = &got["state"];
    assert_eq!(state["interrupts"], json!([interrupt]));
    assert_eq!(state["next"], json!(["tools"]));
    assert_eq!(state["tasks"][0]["name"], "tools");
    assert_eq!(state["tasks"][0]["interrupts"], json!([interrupt]));
    assert_eq!(got["thread"]["status"], "interrupted");
    let by_task: Vec<&Value> = got["thread"]["interrupts"]
        .as_object()
        .unwrap()
        .values()
        .collect();
    assert_eq!(by_task, [&json!([interrupt])]);
    // A resume names the interrupt the thread waits on, and only resumes.
    assert_eq!(
        (&got["stale"], &got["no_resume"]),
        (&json!(422), &json!(422))
    );

    // Resumed with an edit: the same run goes on from the park and pays 7.
    let resumed = got["resumed"].as_array().unwrap();
    assert_eq!(resumed[0][1]["run_id"], job, "{resumed:?}");
    assert_eq!(updated_nodes(resumed), ["tools", "model"]);
    let paid = &of(resumed, "updates")[0]["tools"]["messages"][0];
    let content: Value = serde_json::from_str(paid["content"].as_str().unwrap()).unwrap();
    assert_eq!(content, json!({"paid": 7}), "{paid}");
    assert_eq!(resumed.last().unwrap()[0], "end");
    let after = &got["after"];
    assert_eq!(message_types(after), ["human", "ai", "tool", "ai"]);
    assert_eq!(after["values"]["messages"][3]["content"], "Paid.");
    assert_eq!(
        (&after["interrupts"], &after["next"]),
        (&json!([]), &json!([]))
    );
    assert_eq!(got["nothing_parked"], 409);
    // The decision went the one way every decision goes: recorded, by the key.
    let http = client_as(&key);
    let events = job_events(&http, &daemon, job).await;
    let decided = events
        .iter()
        .find(|e| e["type"] == "ApprovalDecided")
        .unwrap();
    assert_eq!(
        (&decided["decision"], &decided["by"]),
        (&json!("edit"), &json!("team")),
        "{decided}"
    );
    // Rejected with a message: the model reads it; the call never ran.
    let denied = &got["denied"]["messages"];
    assert_eq!(denied[2]["status"], "error", "{denied}");
    assert!(
        denied[2]["content"].as_str().unwrap().contains("too much"),
        "{denied}"
    );
    assert_eq!(denied[3]["content"], "Not paid.");

    // LangGraph's JS SDK: the same interrupt, approved with a Command.
    let js = js_client(&daemon, &key, "interrupt").await;
    let js_parked = js["parked"].as_array().unwrap();
    let js_interrupt = &of(js_parked, "updates").last().unwrap()["__interrupt__"][0];
    assert_eq!(
        js_interrupt["value"]["action_requests"][0]["name"], "pay",
        "{js}"
    );
    assert_eq!(js["state"]["interrupts"], json!([js_interrupt]));
    let resumed = &js["resumed"]["messages"];
    let content: Value = serde_json::from_str(resumed[2]["content"].as_str().unwrap()).unwrap();
    assert_eq!(content, json!({"paid": 5}), "{js}");
    assert_eq!(resumed[3]["content"], "Paid.");
}

/// `waiter`: its `wait` tool ends once `release` exists.
fn waiter(release: &std::path::Path) -> String {
    format!(
        r#"name: waiter
version: "1"
model: {{endpoint: mock, name: m}}
prompts: {{user: "{{{{ input }}}}"}}
tools:
  - {{name: wait, kind: process, effect: read_only, timeout: 10m, command: [sh, -c, "while [ ! -e '{release}' ]; do sleep 0.05; done; echo opened"]}}
"#,
        release = release.display()
    )
}

/// Creates its file when dropped: a `waiter` tool's release.
struct Release(std::path::PathBuf);

impl Drop for Release {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.0, "");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_wait_is_kept_alive_and_read_as_its_values() {
    let (_server, site, key) = keyed_site(WAIT_SCRIPT, "submit,read,operate").await;
    let release = site.path().join("release");
    site.put_bundle("waiter", &waiter(&release));
    let _release = Release(release.clone());
    let daemon = site.start();
    let http = client_as(&key);
    for thread in ["raw", "sdk"] {
        let (status, _) = post_json(&http, &daemon, "/threads", json!({"thread_id": thread})).await;
        assert_eq!(status, 200);
    }

    // On the wire: the headers at once, a newline each heartbeat (1 s
    // here) while the run waits on its tool, then the values.
    let mut response = http
        .post(daemon.url("/threads/raw/runs/wait"))
        .json(&json!({"assistant_id": "waiter", "input": {"messages": [{"role": "user", "content": "gate"}]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-location"]
            .to_str()
            .unwrap()
            .starts_with("/threads/raw/runs/")
    );
    let first = response.chunk().await.unwrap().unwrap();
    assert_eq!(&first[..], b"\n");
    std::fs::write(&release, "").unwrap();
    let mut body = first.to_vec();
    while let Some(chunk) = response.chunk().await.unwrap() {
        body.extend_from_slice(&chunk);
    }
    let values: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        message_types(&json!({"values": values})),
        ["human", "ai", "tool", "ai"]
    );
    std::fs::remove_file(&release).unwrap();

    // LangGraph's Python client reads such an answer as the values.
    let opener = release.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(3)).await;
        std::fs::write(&opener, "").unwrap();
    });
    let waited = driver(&daemon, &key, "long_wait", &["sdk"]).await;
    assert_eq!(waited["messages"][3]["content"], "Opened.", "{waited}");
}

const WAIT_SCRIPT: &str = r#"
replies:
  - match: "gate"
    turn: 1
    tool_calls: [{id: w1, name: wait, arguments: {}}]
  - match: "gate"
    turn: 2
    content: "Opened."
"#;

#[tokio::test(flavor = "multi_thread")]
async fn the_sdk_joins_a_stream_again_across_a_daemon_restart() {
    let (_server, site, key) = keyed_site(WAIT_SCRIPT, "submit,read,operate").await;
    let release = site.path().join("release");
    site.put_bundle("waiter", &waiter(&release));
    // The killed daemon's tool outlives it: it ends whatever the test does.
    let _release = Release(release.clone());
    // The daemon after the restart takes the run when the killed one's
    // lease expires: 4 s here.
    let config = site.path().join("config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("lease = \"30s\"", "lease = \"4s\"")).unwrap();
    let daemon = site.start();
    // It listens where this one does: the client joins the run again at
    // the address it was given.
    let base = daemon.url("");
    let port = base.rsplit(':').next().unwrap().trim_end_matches('/');
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace("127.0.0.1:0", &format!("127.0.0.1:{port}")),
    )
    .unwrap();
    let http = client_as(&key);
    let (status, _) = post_json(&http, &daemon, "/threads", json!({"thread_id": "gated"})).await;
    assert_eq!(status, 200);

    let mut sdk = tokio::process::Command::new(python_langgraph());
    sdk.arg(repo("tests/data/langgraph/driver.py"))
        .arg(daemon.url(""))
        .arg(&key)
        .arg("rejoin")
        .arg("gated")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut sdk = sdk.spawn().unwrap();
    let mut lines = tokio::io::BufReader::new(sdk.stdout.take().unwrap()).lines();
    let mut parts: Vec<Value> = Vec::new();
    // Read until the model asked for the tool: the run waits on it.
    while !parts
        .iter()
        .any(|p| p[0] == "updates" && p[1].get("model").is_some())
    {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("the SDK printed no part within a minute")
            .unwrap()
            .expect("the SDK's stream ended before the tool call");
        parts.push(serde_json::from_str(&line).unwrap());
    }
    daemon.kill9();
    let daemon = site.start();
    assert_eq!(daemon.url(""), base);
    std::fs::write(&release, "").unwrap();
    loop {
        let line = tokio::time::timeout(Duration::from_secs(120), lines.next_line())
            .await
            .expect("the SDK printed nothing for two minutes after the restart")
            .unwrap()
            .expect("the SDK ended without `done`");
        let part: Value = serde_json::from_str(&line).unwrap();
        if part[0] == "done" {
            break;
        }
        parts.push(part);
    }
    assert!(sdk.wait().await.unwrap().success());
    // Two connections (two `metadata`), one run: every step once, in order.
    assert_eq!(of(&parts, "metadata").len(), 2, "{parts:?}");
    assert_eq!(updated_nodes(&parts), ["model", "tools", "model"]);
    let ids: Vec<u64> = numbered(&parts).iter().map(|(_, id)| *id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    assert_eq!(parts.last().unwrap()[0], "end");
    let last = of(&parts, "values").last().copied().unwrap().clone();
    assert_eq!(
        message_types(&json!({"values": last})),
        ["human", "ai", "tool", "ai"]
    );
    assert_eq!(last["messages"][3]["content"], "Opened.");
    let state = get(&http, &daemon, "/threads/gated/state").await;
    assert_eq!(state["values"], last);
}
