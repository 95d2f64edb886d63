//! No event is lost by a crash: the real daemon kills itself between a
//! journaled decision (a call asks for approval, a budget stops the run)
//! and the commit of the job's outcome, and the event that decision implies
//! is in the log once the next daemon has settled the job. A job that kills
//! its daemon every time parks as a poison pill with its `JobState` event,
//! naming the step it died in.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use common::daemon::{Daemon, SHORT_LEASE, Site, client, get, post_json, submit, wait_settled};
use common::mock_server;
use serde_json::{Value, json};

const SCRIPT: &str = r#"
replies:
  - {match: wire, turn: 1, tool_calls: [{id: w1, name: wire, arguments: {amount: 500}}]}
  - {match: hang, turn: 1, tool_calls: [{id: h1, name: hang, arguments: {}}]}
  - tool_calls: [{id: c, name: count, arguments: {}}]
"#;

/// `wire` needs approval over 100; `count` answers at once; `hang` runs
/// until its daemon is gone.
const BUNDLE: &str = r#"
name: crashy
version: "1"
model: {endpoint: mock, name: m, plugin: openai}
prompts: {user: "{{ input }}"}
limits: {max_turns: 10}
tools:
  - name: wire
    kind: process
    effect: idempotent
    parameters: {type: object, properties: {amount: {type: integer}}, required: [amount]}
    approval: {when: "args.amount > 100"}
    command: [sh, -c, "echo '{}'"]
  - {name: count, kind: process, effect: read_only, command: [sh, -c, "echo '{}'"]}
  - {name: hang, kind: process, effect: read_only, timeout: 10m, command: [sh, -c, "sleep 600"]}
"#;

fn site(server: &structured_agents::mock::MockServer) -> Site {
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("crashy", BUNDLE);
    site
}

/// Starts a daemon that dies as it is about to commit a job's outcome,
/// submits `body` to it, and waits for the death.
async fn submit_and_die_before_the_outcome(site: &Site, body: Value) -> String {
    let mut daemon =
        site.start_with_env(&[("SA_FAILPOINTS", "before_completion_commit"), SHORT_LEASE]);
    let (status, job) = post_json(&client(), &daemon, "/v1/jobs", body).await;
    assert_eq!(status, 201, "{job}");
    daemon.wait_killed_at("before_completion_commit");
    job["id"].as_str().unwrap().to_string()
}

/// The stored events of job `id` as its event stream sends them, up to the
/// first `JobState` event in `state` (a parked job's stream stays open).
async fn events_through(daemon: &Daemon, id: &str, state: &str) -> Vec<Value> {
    use eventsource_stream::Eventsource;
    use futures::StreamExt;
    let url = daemon.url(&format!("/v1/jobs/{id}/events"));
    let response = client().get(url).send().await.unwrap();
    let mut stream = response.bytes_stream().eventsource();
    let mut events = Vec::new();
    let read = async {
        while let Some(Ok(frame)) = stream.next().await {
            if frame.event != "event" {
                continue;
            }
            let event: Value = serde_json::from_str(&frame.data).unwrap();
            let last = event["type"] == "JobState" && event["state"] == state;
            events.push(event);
            if last {
                return;
            }
        }
    };
    let within = std::time::Duration::from_secs(60);
    if tokio::time::timeout(within, read).await.is_err() {
        panic!("no JobState {state} event in the stream of job {id}: {events:#?}");
    }
    events
}

fn count(events: &[Value], kind: &str) -> usize {
    events.iter().filter(|e| e["type"] == kind).count()
}

/// The daemon dies after the approval request is journaled, before the
/// park commits: the next daemon replays the request and parks the job, and
/// the log holds the `ApprovalRequested` event exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_request_is_in_the_log_after_a_crash_before_the_park_commits() {
    let server = mock_server(SCRIPT).await;
    let site = site(&server);
    let id = submit_and_die_before_the_outcome(&site, json!({"bundle": "crashy", "input": "wire"}))
        .await;
    let daemon = site.start_with_env(&[SHORT_LEASE]);
    let http = client();
    let parked = wait_settled(&http, &daemon, &id).await;
    assert_eq!(parked["state"], "awaiting_approval", "{parked}");
    let events = events_through(&daemon, &id, "awaiting_approval").await;
    assert_eq!(count(&events, "ApprovalRequested"), 1, "{events:#?}");
    let asked = events
        .iter()
        .find(|e| e["type"] == "ApprovalRequested")
        .unwrap();
    assert_eq!(
        (&asked["call_id"], &asked["tool_name"]),
        (&json!("w1"), &json!("wire"))
    );
    assert_eq!(
        server.requests().len(),
        1,
        "the reply was replayed, not asked again"
    );
}

/// The daemon dies after a budget stop is journaled, before the failure
/// commits: the next daemon replays the stop, and the log holds the
/// `BudgetExceeded` event exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_stop_is_in_the_log_after_a_crash_before_the_failure_commits() {
    let server = mock_server(SCRIPT).await;
    let site = site(&server);
    let body = json!({"bundle": "crashy", "input": "loop", "limits": {"tool_calls": 2}});
    let id = submit_and_die_before_the_outcome(&site, body).await;
    let daemon = site.start_with_env(&[SHORT_LEASE]);
    let http = client();
    let done = wait_settled(&http, &daemon, &id).await;
    assert_eq!(done["state"], "failed", "{done}");
    let events = events_through(&daemon, &id, "failed").await;
    assert_eq!(count(&events, "BudgetExceeded"), 1, "{events:#?}");
    let stop = events
        .iter()
        .find(|e| e["type"] == "BudgetExceeded")
        .unwrap();
    assert_eq!(stop["budget"], "tool_calls", "{stop}");
    let end = events.last().unwrap();
    assert_eq!(
        (&end["type"], &end["state"]),
        (&json!("JobState"), &json!("failed"))
    );
}

/// A job whose tool kills its daemon every time parks as a poison pill: its
/// error names the tool call it died in (not the last event stored before
/// it), and its log ends with the `JobState` event that parked it, which a
/// follower of its event stream sees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_pill_writes_its_parking_event_and_names_the_tool_it_died_in() {
    let server = mock_server(SCRIPT).await;
    let site = site(&server);
    let resumes = ("STRUCTURED_AGENTS_QUEUE__MAX_CRASH_RESUMES", "1");
    let http = client();
    let mut id = String::new();
    for _ in 0..2 {
        // Each daemon dies 300 ms into `hang`.
        let mut daemon: Daemon =
            site.start_with_env(&[("SA_FAILPOINTS", "tool_running"), SHORT_LEASE, resumes]);
        if id.is_empty() {
            let job = submit(&http, &daemon, "crashy", "hang").await;
            id = job["id"].as_str().unwrap().to_string();
        }
        daemon.wait_killed_at("tool_running");
    }
    let daemon = site.start_with_env(&[resumes]);
    let parked = wait_settled(&http, &daemon, &id).await;
    assert_eq!(parked["state"], "needs_attention", "{parked}");
    let error = parked["error"].as_str().unwrap();
    assert!(
        error.contains("2 times") && error.contains("last in tool `hang` (call h1 of turn 1)"),
        "{error}"
    );
    let events = events_through(&daemon, &id, "needs_attention").await;
    let last = events.last().unwrap();
    assert_eq!(
        (&last["type"], &last["state"]),
        (&json!("JobState"), &json!("needs_attention")),
        "{events:#?}"
    );
    assert_eq!(last["error"], parked["error"]);
    assert_eq!(
        get(&http, &daemon, &format!("/v1/jobs/{id}")).await["state"],
        "needs_attention"
    );
}
