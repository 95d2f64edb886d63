//! Budgets on the real daemon: each kind ends a looping job at the step it
//! runs out, with `budget_exceeded` naming the budget, its limit and the
//! spend; a resumed job stops where the uninterrupted one stops; a
//! submitter can lower a limit but not raise it; a bundle's daily budget
//! refuses new jobs with 429.

mod common;

use std::time::Duration;

use common::daemon::{Daemon, SHORT_LEASE, Site, client, job_events, wait_terminal};
use common::mock_server;
use serde_json::{Value, json};
use structured_agents::mock::MockServer;

/// Every turn calls `count` once; every reply costs 100 prompt and 10
/// completion tokens.
const LOOP: &str = r#"
replies:
  - {match: alpha, turn: 1, tool_calls: [{id: a, name: helper, arguments: {input: bravo}}]}
  - {match: alpha, turn: 2, content: parent done}
  - {match: bravo, turn: 1, tool_calls: [{id: b, name: deeper, arguments: {input: charlie}}]}
  - {match: bravo, turn: 2, content: child done}
  - {match: charlie, content: bottom}
  - {match: delegate, turn: 1, tool_calls: [{id: d1, name: ask, arguments: {input: delta}}]}
  - {match: delegate, turn: 2, content: boss done}
  - match: small talk
    content: hi
    usage: {prompt_tokens: 30, completion_tokens: 10, total_tokens: 40}
  - tool_calls: [{id: c, name: count, arguments: {}}]
    usage: {prompt_tokens: 100, completion_tokens: 10, total_tokens: 110}
"#;

const PRICES: &str = "[prices.m]\nprompt_per_million = 1000.0\ncompletion_per_million = 0.0\n";

fn looper(extra_limits: &str, tool_sleep: f64) -> String {
    format!(
        r#"
name: looper
version: "1"
model: {{endpoint: mock, name: m, plugin: openai}}
prompts: {{user: "{{{{ input }}}}"}}
limits: {{max_turns: 40{extra_limits}}}
tools:
  - name: count
    kind: process
    effect: read_only
    command: [python3, -c, "import time; time.sleep({tool_sleep}); print('{{}}')"]
"#
    )
}

struct Setup {
    site: Site,
    server: MockServer,
}

async fn setup(extra_limits: &str) -> Setup {
    let server = mock_server(LOOP).await;
    let site = Site::new(&server.base_url(), PRICES);
    site.put_bundle("looper", &looper(extra_limits, 0.0));
    Setup { site, server }
}

async fn post_job(http: &reqwest::Client, daemon: &Daemon, body: Value) -> (u16, Value) {
    common::daemon::post_json(http, daemon, "/v1/jobs", body).await
}

/// Runs a looper job with `limits` until it ends; returns (job, events).
async fn run_with(
    http: &reqwest::Client,
    daemon: &Daemon,
    bundle: &str,
    input: &str,
    limits: Value,
) -> (Value, Vec<Value>) {
    let (status, job) = post_job(
        http,
        daemon,
        json!({"bundle": bundle, "input": input, "limits": limits}),
    )
    .await;
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_str().unwrap();
    let done = wait_terminal(http, daemon, id, Duration::from_secs(60)).await;
    (done, job_events(http, daemon, id).await)
}

fn count(events: &[Value], kind: &str) -> usize {
    events.iter().filter(|e| e["type"] == kind).count()
}

fn stop_of(events: &[Value]) -> &Value {
    events
        .iter()
        .find(|e| e["type"] == "BudgetExceeded")
        .unwrap_or_else(|| panic!("no BudgetExceeded in {events:#?}"))
}

/// Each kind, lowered per job by the submitter, stops the loop at its step:
/// (budget, limit, model calls made, tool calls made).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_budget_stops_the_run_at_its_step() {
    let setup = setup("").await;
    let daemon = setup.site.start();
    let http = client();
    let cases = [
        ("model_calls", json!(2), 2, 2),
        ("prompt_tokens", json!(250), 3, 3),
        ("completion_tokens", json!(25), 3, 3),
        // 100 prompt tokens at 1000 per million: 0.1 a call.
        ("cost", json!(0.25), 3, 3),
        ("tool_calls", json!(3), 4, 3),
    ];
    for (budget, limit, model_calls, tool_calls) in cases {
        let (job, events) =
            run_with(&http, &daemon, "looper", "loop", json!({budget: limit})).await;
        assert_eq!(job["state"], "failed", "{budget}: {job}");
        let error = job["error"].as_str().unwrap();
        assert!(
            error.contains(&format!("budget exceeded: {budget} is limited to")),
            "{budget}: {error}"
        );
        assert_eq!(
            count(&events, "ModelResponse"),
            model_calls,
            "{budget}: model calls"
        );
        assert_eq!(
            count(&events, "ToolResult"),
            tool_calls,
            "{budget}: tool calls"
        );
        let stop = stop_of(&events);
        assert_eq!(stop["budget"], budget);
        let end = events.iter().find(|e| e["type"] == "KernelEnd").unwrap();
        assert_eq!(end["termination_reason"], "budget_exceeded", "{end}");
    }
    let stops = common::daemon::metric(
        &http,
        &daemon,
        "structured_agents_budget_stops_total{budget=\"cost\",bundle=\"looper\"}",
    )
    .await;
    assert_eq!(stops, 1);
    let spent =
        common::daemon::metric_samples(&http, &daemon, "structured_agents_cost_spent_total").await;
    assert!(!spent.is_empty(), "cost is counted by bundle and model");
    assert!(setup.server.requests().len() >= 13);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wall_time_and_depth_stop_the_whole_job() {
    let server = mock_server(LOOP).await;
    let site = Site::new(&server.base_url(), PRICES);
    site.put_bundle("looper", &looper(", wall_time: 1s", 0.3));
    let agent = |name: &str, tool: &str, target: &str| {
        format!(
            "name: {name}\nversion: \"1\"\nmodel: {{endpoint: mock, name: m, plugin: openai}}\nprompts: {{user: \"{{{{ input }}}}\"}}\nlimits: {{depth: 1}}\ntools:\n  - {{name: {tool}, kind: agent, bundle: {target}}}\n"
        )
    };
    site.put_bundle("parent", &agent("parent", "helper", "child"));
    site.put_bundle("child", &agent("child", "deeper", "grandchild"));
    site.put_bundle("grandchild", &agent("grandchild", "unused", "child"));
    let daemon = site.start();
    let http = client();

    let (job, events) = run_with(&http, &daemon, "looper", "loop", json!({})).await;
    assert_eq!(job["state"], "failed", "{job}");
    assert_eq!(stop_of(&events)["budget"], "wall_time", "{events:#?}");

    let (job, events) = run_with(&http, &daemon, "parent", "alpha", json!({})).await;
    assert_eq!(job["state"], "failed", "{job}\n{}", daemon.log());
    let error = job["error"].as_str().unwrap();
    assert!(error.contains("depth is limited to 1"), "{error}");
    let end = events
        .iter()
        .find(|e| e["type"] == "KernelEnd" && e["parent"].is_null())
        .unwrap();
    assert_eq!(end["termination_reason"], "budget_exceeded", "{end}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submitter_lowers_a_limit_but_cannot_raise_it() {
    let setup = setup(", model_calls: 3").await;
    let daemon = setup.site.start();
    let http = client();
    let (status, refused) = post_job(
        &http,
        &daemon,
        json!({"bundle": "looper", "input": "loop", "limits": {"model_calls": 4}}),
    )
    .await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"]["field"], "limits");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("only lower"),
        "{refused}"
    );
    let (job, events) = run_with(&http, &daemon, "looper", "loop", json!({"model_calls": 1})).await;
    assert_eq!(job["state"], "failed");
    assert_eq!(count(&events, "ModelResponse"), 1);
    let (_, events) = run_with(&http, &daemon, "looper", "loop", json!({})).await;
    assert_eq!(count(&events, "ModelResponse"), 3, "the bundle's own limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daily_budget_refuses_new_jobs_with_429() {
    let setup = setup(", model_calls: 2, per_day: {tokens: 200}").await;
    let daemon = setup.site.start();
    let http = client();
    let (job, _) = run_with(&http, &daemon, "looper", "loop", json!({})).await;
    assert_eq!(job["tokens_spent"], 220, "{job}");
    let (status, refused) = post_job(
        &http,
        &daemon,
        json!({"bundle": "looper", "input": "again"}),
    )
    .await;
    assert_eq!(status, 429, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("looper") && message.contains("limits.per_day.tokens is 200"),
        "{message}"
    );
    // Every way in refuses it the same way: the batch, and the OpenAI route
    // with a 429 its SDKs retry (after `Retry-After`), not a 400.
    let (status, refused) = common::daemon::post_json(
        &http,
        &daemon,
        "/v1/jobs/batch",
        json!({"jobs": [{"bundle": "looper", "input": "again"}]}),
    )
    .await;
    assert_eq!(status, 429, "{refused}");
    let chat = http
        .post(daemon.url("/v1/chat/completions"))
        .json(
            &json!({"model": "bundle/looper", "messages": [{"role": "user", "content": "again"}]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(chat.status(), 429);
    assert!(chat.headers().contains_key("retry-after"));
    let body: Value = chat.json().await.unwrap();
    assert_eq!(body["error"]["type"], "rate_limit_error", "{body}");
}

/// A batch holds its jobs to the same limits as one job: a submitter's
/// limit above the bundle's is refused, naming the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_cannot_raise_a_bundle_limit() {
    let setup = setup(", model_calls: 3").await;
    let daemon = setup.site.start();
    let http = client();
    let (status, refused) = common::daemon::post_json(
        &http,
        &daemon,
        "/v1/jobs/batch",
        json!({"jobs": [
            {"bundle": "looper", "input": "ok"},
            {"bundle": "looper", "input": "raise", "limits": {"model_calls": 40}}
        ]}),
    )
    .await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"]["field"], "jobs[1].limits", "{refused}");
    let jobs = common::daemon::get(&http, &daemon, "/v1/jobs").await;
    assert_eq!(
        jobs["jobs"].as_array().unwrap().len(),
        0,
        "all or none: {jobs}"
    );
}

/// The daily budget counts every job's tokens, on a bundle with no per-job
/// limit and a daemon with no `[prices]`: five jobs of 40 tokens against a
/// day of 20 tokens — the first runs, the rest are refused with 429.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daily_budget_counts_jobs_without_limits_or_prices() {
    let server = mock_server(LOOP).await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("looper", &looper(", per_day: {tokens: 20}", 0.0));
    let daemon = site.start();
    let http = client();
    let mut statuses = Vec::new();
    for _ in 0..5 {
        let (status, job) = post_job(
            &http,
            &daemon,
            json!({"bundle": "looper", "input": "small talk"}),
        )
        .await;
        statuses.push(status);
        if status == 201 {
            let id = job["id"].as_str().unwrap();
            let done = wait_terminal(&http, &daemon, id, Duration::from_secs(60)).await;
            assert_eq!(done["state"], "succeeded", "{done}");
            assert_eq!(done["tokens_spent"], 40, "{done}");
        } else {
            let message = job["error"]["message"].as_str().unwrap();
            assert!(
                message.contains("limits.per_day.tokens is 20") && message.contains("spent 40"),
                "{message}"
            );
        }
    }
    assert_eq!(statuses, [201, 429, 429, 429, 429]);
    assert_eq!(server.requests().len(), 1, "only the first job ran");
}

/// Fifty parallel submits, then a batch of 200, against a bundle's day of
/// 100 tokens; each job is limited to 30 tokens and spends 40 in its one
/// model call. Each job reserves its share in the write that queues it, so
/// the day gives out at most 100 tokens of reservations (30, 30, 30 and
/// the last 10, fewer when a job ends first and its real 40 counts), the
/// batch finds nothing left and queues nothing, and what the jobs spend is
/// at most their reservations plus the one model call each that crosses
/// them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_submits_cannot_overrun_a_daily_budget() {
    let server = mock_server(LOOP).await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("looper", &looper(", per_day: {tokens: 100}", 0.0));
    let daemon = site.start();
    let http = client();
    let body = json!({"bundle": "looper", "input": "small talk", "limits": {"tokens": 30}});
    let submits = (0..50).map(|_| post_job(&http, &daemon, body.clone()));
    let answers = futures::future::join_all(submits).await;
    let mut accepted = Vec::new();
    for (status, answer) in answers {
        match status {
            201 => accepted.push(answer["id"].as_str().unwrap().to_string()),
            429 => assert!(
                answer["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("limits.per_day.tokens is 100"),
                "{answer}"
            ),
            _ => panic!("{status}: {answer}"),
        }
    }
    assert!(
        (1..=4).contains(&accepted.len()),
        "100 tokens hold at most four jobs of 30: {} accepted",
        accepted.len()
    );
    let batch: Vec<Value> = (0..200).map(|_| body.clone()).collect();
    let (status, refused) =
        common::daemon::post_json(&http, &daemon, "/v1/jobs/batch", json!({ "jobs": batch })).await;
    assert_eq!(status, 429, "{refused}");
    assert_eq!(refused["error"]["field"], "jobs[0]", "{refused}");
    let mut reserved = 0;
    let mut spent = 0;
    for id in &accepted {
        let done = wait_terminal(&http, &daemon, id, Duration::from_secs(60)).await;
        let limit = done["limits"]["tokens"].as_u64().unwrap();
        let used = done["tokens_spent"].as_u64().unwrap();
        assert!(
            used <= limit + 40,
            "one model call past its reservation at most: {done}"
        );
        reserved += limit;
        spent += used;
    }
    assert!(reserved <= 100, "reservations {reserved} within the day");
    assert!(
        spent <= 100 + 40 * accepted.len() as u64,
        "spent {spent}: the day plus one model call per job at most"
    );
    let jobs = common::daemon::get(&http, &daemon, "/v1/jobs").await;
    assert_eq!(
        jobs["jobs"].as_array().unwrap().len(),
        accepted.len(),
        "the batch queued nothing: {jobs}"
    );
}

/// The result the model got for the job's first call (turn 1, position 0).
async fn first_result(http: &reqwest::Client, daemon: &Daemon, id: &str) -> Value {
    let journal = common::daemon::get(http, daemon, &format!("/v1/jobs/{id}/journal")).await;
    journal["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["scope"] == "" && s["turn"] == 1 && s["step"] == "result@0")
        .map(|s| s["body"]["result"].clone())
        .unwrap_or_else(|| panic!("no result@0 in {journal}"))
}

/// A nested `agent` run is held to its own bundle's `limits` (here one model
/// call) as well as the job's: past them its call is a tool error naming the
/// bundle and the limit, and the job goes on. Its spend counts toward its
/// own bundle's day: once that is used up, a new nested run of it is refused
/// (a tool error) and so is a job of it (429).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_agent_keeps_its_own_bundles_limits_and_daily_budget() {
    let server = mock_server(LOOP).await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle(
        "helper",
        &looper(", model_calls: 1, per_day: {tokens: 100}", 0.0)
            .replace("name: looper", "name: helper"),
    );
    site.put_bundle(
        "boss",
        "name: boss\nversion: \"1\"\nmodel: {endpoint: mock, name: m, plugin: openai}\nprompts: {user: \"{{ input }}\"}\ntools:\n  - {name: ask, kind: agent, bundle: helper}\n",
    );
    let daemon = site.start();
    let http = client();

    let (job, events) = run_with(&http, &daemon, "boss", "delegate", json!({})).await;
    assert_eq!(job["state"], "succeeded", "{job}\n{}", daemon.log());
    assert_eq!(job["result"]["output"], "boss done", "{job}");
    // The boss's two replies (15 tokens each by default) and the helper's.
    assert_eq!(
        job["tokens_spent"], 140,
        "the job counts its nested run: {job}"
    );
    let id = job["id"].as_str().unwrap();
    let result = first_result(&http, &daemon, id).await;
    assert_eq!(result["is_error"], true, "{result}");
    let output = result["output"].as_str().unwrap();
    assert!(
        output.contains("bundle \"helper\"")
            && output.contains("limits.model_calls")
            && output.contains("limited to 1"),
        "{output}"
    );
    assert_eq!(
        count(&events, "ModelResponse"),
        3,
        "boss twice, helper once"
    );

    // The helper's 110 tokens in the boss's job count for the helper's day.
    let (status, refused) = post_job(
        &http,
        &daemon,
        json!({"bundle": "helper", "input": "direct"}),
    )
    .await;
    assert_eq!(status, 429, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("limits.per_day.tokens is 100") && message.contains("spent 110"),
        "{message}"
    );

    let calls_before = server.requests().len();
    let (job, _) = run_with(&http, &daemon, "boss", "delegate", json!({})).await;
    assert_eq!(job["state"], "succeeded", "{job}");
    let id = job["id"].as_str().unwrap();
    let result = first_result(&http, &daemon, id).await;
    let output = result["output"].as_str().unwrap();
    assert!(
        output.contains("agent bundle \"helper\" did not run")
            && output.contains("limits.per_day.tokens is 100"),
        "{output}"
    );
    assert_eq!(
        server.requests().len(),
        calls_before + 2,
        "only the boss's two model calls: the helper never ran"
    );
}

/// A daemon killed mid-run resumes the job, which stops at the same step
/// as an uninterrupted run: no model call repeated, one stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_job_stops_where_an_uninterrupted_one_does() {
    let setup = setup(", model_calls: 4").await;
    let http = client();
    let mut daemon = setup.site.start_with_env(&[
        SHORT_LEASE,
        ("SA_FAILPOINTS", "after_tool_result_recorded@2"),
    ]);
    let (status, job) =
        post_job(&http, &daemon, json!({"bundle": "looper", "input": "loop"})).await;
    assert_eq!(status, 201);
    let id = job["id"].as_str().unwrap().to_string();
    daemon.wait_killed_at("after_tool_result_recorded");
    assert_eq!(setup.server.requests().len(), 2);

    let daemon = setup.site.start();
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "failed", "{done}");
    let events = job_events(&http, &daemon, &id).await;
    assert_eq!(count(&events, "BudgetExceeded"), 1);
    assert_eq!(stop_of(&events)["budget"], "model_calls");
    assert_eq!(stop_of(&events)["turn"], 5, "before the fifth model call");
    assert_eq!(setup.server.requests().len(), 4, "no model call made twice");
}
