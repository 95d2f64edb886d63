//! The real daemon: durability across SIGKILL, hot reload, SSE resume, auth
//! and sd_notify.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use common::daemon::{
    SHORT_LEASE, Site, client, eventually, get, job_events, read_sse, submit, submit_and_wait,
    wait_terminal,
};
use common::mock_server;
use serde_json::{Value, json};

fn bundle_yaml(name: &str, version: &str, reply_hint: &str) -> String {
    format!(
        r#"name: {name}
version: "{version}"
model:
  endpoint: mock
  name: mock-model
prompts:
  system: "bundle {name} v{version} {reply_hint}"
  user: "{{{{ input }}}}"
tools:
  - name: echo
    kind: process
    description: echo the arguments
    effect: read_only
    command: [python3, -c, "import json,sys; print(json.dumps(json.load(sys.stdin)))"]
"#
    )
}

const TWO_TURN_SCRIPT: &str = r#"
replies:
  - tool_calls: [{name: echo, arguments: {x: 1}}]
    delay_ms: 20
  - content: done
    delay_ms: 20
"#;

/// Every job ends succeeded exactly once, with a gap-free event log, although
/// the daemon is SIGKILLed in the middle of the work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_jobs_survive_sigkill() {
    let server = mock_server(TWO_TURN_SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("b", &bundle_yaml("b", "1", ""));
    let http = client();

    let daemon = site.start_with_env(&[SHORT_LEASE]);
    let mut ids = Vec::new();
    for i in 0..200 {
        let job = submit(&http, &daemon, "b", &format!("job {i}")).await;
        ids.push(job["id"].as_str().unwrap().to_string());
    }
    // Kill once some, but not all, jobs are done.
    eventually(Duration::from_secs(60), "some jobs to succeed", || async {
        let page = get(&http, &daemon, "/v1/jobs?state=succeeded&limit=1000").await;
        (page["jobs"].as_array().unwrap().len() >= 20).then_some(())
    })
    .await;
    daemon.kill9();

    let daemon = site.start();
    for id in &ids {
        let job = wait_terminal(&http, &daemon, id, Duration::from_secs(120)).await;
        assert_eq!(job["state"], "succeeded", "{job}");
    }
    for id in &ids {
        let events = read_sse(
            &http,
            &daemon.url(&format!("/v1/jobs/{id}/events")),
            None,
            None,
        )
        .await;
        let (end, body) = events.split_last().unwrap();
        assert_eq!(end.1, "end");
        let seqs: Vec<u64> = body.iter().map(|(seq, _, _)| seq.unwrap()).collect();
        assert_eq!(
            seqs,
            (1..=seqs.len() as u64).collect::<Vec<_>>(),
            "gaps in job {id}"
        );
        let succeeded = body
            .iter()
            .filter(|(_, _, data)| {
                let v: Value = serde_json::from_str(data).unwrap();
                v["type"] == "JobState" && v["state"] == "succeeded"
            })
            .count();
        assert_eq!(succeeded, 1, "job {id} succeeded {succeeded} times");
    }
    assert_eq!(daemon.stop(), Some(0));
}

/// Drop, edit, break and delete a bundle while the daemon runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_reload_lifecycle() {
    let slow = r#"
replies:
  - match: slow
    content: slow answer
    delay_ms: 1500
  - content: quick answer
"#;
    let server = mock_server(slow).await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("keep", &bundle_yaml("keep", "1", ""));
    let daemon = site.start();
    let http = client();

    // 1. A new bundle dropped into the directory becomes usable.
    site.put_bundle("fresh", &bundle_yaml("fresh", "1", ""));
    eventually(Duration::from_secs(5), "new bundle", || async {
        let b = get(&http, &daemon, "/v1/bundles/fresh").await;
        (b["version"] == "1").then_some(())
    })
    .await;
    // A slow job starts on version 1 and must finish on it.
    let running = submit(&http, &daemon, "fresh", "slow please").await;
    eventually(Duration::from_secs(5), "slow job running", || async {
        let j = get(
            &http,
            &daemon,
            &format!("/v1/jobs/{}", running["id"].as_str().unwrap()),
        )
        .await;
        (j["state"] == "running").then_some(())
    })
    .await;

    // 2. An edit: new jobs get version 2, the running job keeps version 1.
    site.put_bundle("fresh", &bundle_yaml("fresh", "2", ""));
    eventually(Duration::from_secs(5), "version 2", || async {
        (get(&http, &daemon, "/v1/bundles/fresh").await["version"] == "2").then_some(())
    })
    .await;
    let newer = submit_and_wait(
        &http,
        &daemon,
        json!({"bundle": "fresh", "input": "quick"}),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(newer["result"]["bundle_version"], "2", "{newer}");
    let older = wait_terminal(
        &http,
        &daemon,
        running["id"].as_str().unwrap(),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(older["result"]["bundle_version"], "1", "{older}");
    assert_eq!(older["bundle_version"], "1");
    let requests = server.requests();
    let systems: HashSet<String> = requests
        .iter()
        .map(|r| r["messages"][0]["content"].as_str().unwrap().to_string())
        .collect();
    assert!(
        systems.contains("bundle fresh v1 ") && systems.contains("bundle fresh v2 "),
        "{systems:?}"
    );

    // 3. A broken edit keeps version 2 serving, reports file and line.
    site.put_bundle(
        "fresh",
        &bundle_yaml("fresh", "3", "")
            .replace("    kind: process", "    kind: process\n    timeout: soon"),
    );
    let broken = eventually(Duration::from_secs(5), "degraded status", || async {
        let b = get(&http, &daemon, "/v1/bundles/fresh").await;
        (b["status"] == "degraded").then_some(b)
    })
    .await;
    assert_eq!(broken["version"], "2");
    let error = broken["last_error"].as_str().unwrap();
    assert!(
        error.contains("fresh/bundle.yaml:12: tools[0].timeout: invalid duration \"soon\""),
        "{error}"
    );
    let still = submit_and_wait(
        &http,
        &daemon,
        json!({"bundle": "fresh", "input": "quick"}),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(still["result"]["bundle_version"], "2");
    // The other bundle was not disturbed.
    assert_eq!(
        get(&http, &daemon, "/v1/bundles/keep").await["status"],
        "ok"
    );

    // 4. Deleting the bundle removes it; new jobs are refused with a clear error.
    std::fs::remove_dir_all(site.path().join("bundles/fresh")).unwrap();
    eventually(Duration::from_secs(5), "bundle removed", || async {
        let list = get(&http, &daemon, "/v1/bundles").await;
        (!list["bundles"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["name"] == "fresh"))
        .then_some(())
    })
    .await;
    let refused = http
        .post(daemon.url("/v1/jobs"))
        .json(&json!({"bundle": "fresh", "input": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 422);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["field"], "bundle");
    assert_eq!(daemon.stop(), Some(0));
}

/// A client reads part of a job's stream, the daemon restarts, and the client
/// resumes with Last-Event-ID: every event exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_resumes_across_restart_without_gaps_or_duplicates() {
    let server = mock_server(TWO_TURN_SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("b", &bundle_yaml("b", "1", ""));
    let http = client();
    let daemon = site.start();
    let job = submit(&http, &daemon, "b", "hello").await;
    let id = job["id"].as_str().unwrap().to_string();
    wait_terminal(&http, &daemon, &id, Duration::from_secs(20)).await;
    let url = format!("/v1/jobs/{id}/events");

    let first = read_sse(&http, &daemon.url(&url), None, Some(3)).await;
    assert_eq!(first.len(), 3);
    let last_seen = first.last().unwrap().0.unwrap();
    daemon.kill9();

    let daemon = site.start();
    let rest = read_sse(&http, &daemon.url(&url), Some(last_seen), None).await;
    let full = read_sse(&http, &daemon.url(&url), None, None).await;
    let mut seen: Vec<(Option<u64>, String, String)> = first.clone();
    seen.extend(rest);
    assert_eq!(seen, full);
    // (The `end` event has no id of its own; SSE clients report the last one.)
    let seqs: Vec<u64> = seen
        .iter()
        .filter(|e| e.1 == "event")
        .filter_map(|e| e.0)
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    assert_eq!(seen.last().unwrap().1, "end");
    // `?after=` works the same.
    let after = read_sse(
        &http,
        &daemon.url(&format!("{url}?after={last_seen}")),
        None,
        None,
    )
    .await;
    assert_eq!(after, seen[3..]);
    assert_eq!(daemon.stop(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_errors_name_fields_and_tokens_are_required_when_set() {
    let server = mock_server(TWO_TURN_SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("b", &bundle_yaml("b", "1", ""));
    std::fs::write(site.path().join("token"), "s3cret\n").unwrap();
    let config = std::fs::read_to_string(site.path().join("config.toml")).unwrap();
    std::fs::write(
        site.path().join("config.toml"),
        config.replace("[server]\n", "[server]\ntoken_file = \"token\"\n"),
    )
    .unwrap();
    let daemon = site.start();
    let http = client();

    let denied = http.get(daemon.url("/v1/jobs")).send().await.unwrap();
    assert_eq!(denied.status(), 401);
    let wrong = http
        .get(daemon.url("/v1/jobs"))
        .bearer_auth("nope")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    assert_eq!(
        http.get(daemon.url("/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        http.get(daemon.url("/readyz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );

    let bad = http
        .post(daemon.url("/v1/jobs"))
        .bearer_auth("s3cret")
        .json(&json!({"bundle": "b", "input": 42}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 422);
    let body: Value = bad.json().await.unwrap();
    assert_eq!(body["error"]["field"], "input", "{body}");

    let big = "x".repeat(2 * 1024 * 1024);
    // Its own client: the server answers 413 before reading the whole body
    // and drops the connection, which must not poison the shared pool.
    let too_big = client()
        .post(daemon.url("/v1/jobs"))
        .bearer_auth("s3cret")
        .json(&json!({"bundle": "b", "input": big}))
        .send()
        .await
        .unwrap();
    assert_eq!(too_big.status(), 413);

    // Idempotency: the second submit returns the first job.
    let body = json!({"bundle": "b", "input": "once", "idempotency_key": "k-1"});
    let first: Value = http
        .post(daemon.url("/v1/jobs"))
        .bearer_auth("s3cret")
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let again = http
        .post(daemon.url("/v1/jobs"))
        .bearer_auth("s3cret")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    let again: Value = again.json().await.unwrap();
    assert_eq!(first["id"], again["id"]);

    let openapi = get(&http, &daemon, "/v1/openapi.json").await;
    for path in [
        "/v1/jobs",
        "/v1/jobs/{id}",
        "/v1/jobs/{id}/cancel",
        "/v1/jobs/{id}/events",
        "/v1/bundles",
        "/v1/bundles/{name}",
        "/v1/reload",
        "/v1/jobs/{id}/journal",
        "/v1/jobs/{id}/resolve",
        "/v1/jobs/{id}/artifacts",
        "/v1/jobs/{id}/artifacts/{name}",
        "/v1/chat/completions",
        "/v1/models",
        "/mcp",
        "/api/agents",
        "/api/agents/{id}/message",
        "/api/query",
        "/api/group-chat",
        "/api/conversations/{id}",
        "/v1/schedules",
        "/v1/schedules/{id}",
        "/v1/schedules/{id}/pause",
        "/v1/schedules/{id}/resume",
        "/v1/schedules/{id}/run",
        "/v1/deliveries",
        "/v1/deliveries/{id}/redrive",
    ] {
        assert!(
            openapi["paths"][path].is_object(),
            "{path} missing from the OpenAPI document"
        );
    }
    assert_eq!(daemon.stop(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_queued_and_running_jobs() {
    // The model answers only after ten minutes, within a longer request
    // timeout: however late the cancel comes, the job is still in its first
    // model call, which only the cancel can end (the run learns of it at its
    // next heartbeat, within a third of the lease).
    let script = "replies:\n  - tool_calls: [{name: echo, arguments: {}}]\n    delay_ms: 600000\n  - content: done\n";
    let server = mock_server(script).await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("b", &bundle_yaml("b", "1", ""));
    let daemon =
        site.start_with_env(&[("STRUCTURED_AGENTS_ENDPOINTS__MOCK__REQUEST_TIMEOUT", "900s")]);
    let http = client();
    let running = submit(&http, &daemon, "b", "x").await;
    let id = running["id"].as_str().unwrap().to_string();
    eventually(Duration::from_secs(60), "running", || async {
        (get(&http, &daemon, &format!("/v1/jobs/{id}")).await["state"] == "running").then_some(())
    })
    .await;
    // A running job cannot be deleted: cancel it first.
    let job_url = daemon.url(&format!("/v1/jobs/{id}"));
    let refused = http.delete(&job_url).send().await.unwrap();
    assert_eq!(refused.status(), 409);
    let refused: Value = refused.json().await.unwrap();
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cancel it first"),
        "{refused}"
    );
    http.post(daemon.url(&format!("/v1/jobs/{id}/cancel")))
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "cancelled", "{done}");
    // Ended, it is deleted with its events and journal.
    let deleted = http.delete(&job_url).send().await.unwrap();
    assert_eq!(deleted.status(), 204);
    for gone in [
        job_url.clone(),
        format!("{job_url}/journal"),
        format!("{job_url}/events"),
    ] {
        let status = http.get(&gone).send().await.unwrap().status();
        assert_eq!(status, 404, "{gone}");
    }
    let again = http.delete(&job_url).send().await.unwrap();
    assert_eq!(again.status(), 404);

    let later = http
        .post(daemon.url("/v1/jobs"))
        .json(&json!({"bundle": "b", "input": "later", "run_at": "2099-01-01T00:00:00Z"}))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    let cancelled: Value = http
        .post(daemon.url(&format!(
            "/v1/jobs/{}/cancel",
            later["id"].as_str().unwrap()
        )))
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(cancelled["state"], "cancelled");
    assert_eq!(daemon.stop(), Some(0));
}

/// A cancel sent while a tool runs stops the run at once: the tool is cut
/// short and the next model call never happens. The lease is long (its
/// heartbeat comes only after the tool would have ended and the next turn
/// begun), so only the queue's announcement of the cancel can stop it in
/// time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_during_a_tool_call_stops_the_run_before_the_next_model_call() {
    let script = "replies:\n  - tool_calls: [{id: s1, name: slow, arguments: {}}]\n  - tool_calls: [{id: s2, name: slow, arguments: {}}]\n  - content: done\n";
    let server = mock_server(script).await;
    let site = Site::new(&server.base_url(), "");
    let started = site.path().join("slow-started");
    site.put_bundle(
        "slow",
        &format!(
            r#"
name: slow
version: "1"
model: {{endpoint: mock, name: m, plugin: openai}}
prompts: {{user: "{{{{ input }}}}"}}
tools:
  - name: slow
    kind: process
    effect: read_only
    timeout: 120s
    command: [python3, -c, "import time; open('{}', 'w').close(); time.sleep(8); print('{{}}')"]
"#,
            started.display()
        ),
    );
    let daemon = site.start_with_env(&[("STRUCTURED_AGENTS_QUEUE__LEASE", "600s")]);
    let http = client();
    let job = submit(&http, &daemon, "slow", "x").await;
    let id = job["id"].as_str().unwrap().to_string();
    eventually(Duration::from_secs(60), "the tool runs", || async {
        started.exists().then_some(())
    })
    .await;
    let cancelled = http
        .post(daemon.url(&format!("/v1/jobs/{id}/cancel")))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(cancelled.status(), 200);
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "cancelled", "{done}");
    assert_eq!(
        server.requests().len(),
        1,
        "no model call after the cancel\n{}",
        daemon.log()
    );
    // The cut call did not fail: the job stopped. It is no tool error.
    assert_eq!(done["tool_errors"], 0, "{done}");
    let events = job_events(&http, &daemon, &id).await;
    let result = events
        .iter()
        .find(|e| e["type"] == "ToolResult")
        .cloned()
        .unwrap_or_else(|| panic!("no ToolResult: {events:?}"));
    assert_eq!(result["error_type"], "interrupted", "{result}");
    let calls = common::daemon::metric_samples(
        &http,
        &daemon,
        "structured_agents_tool_calls_total{bundle=\"slow\",outcome=\"interrupted\",tool=\"slow\"}",
    )
    .await;
    assert_eq!(calls.values().copied().sum::<u64>(), 1, "{calls:?}");
}

/// READY, RELOADING (with MONOTONIC_USEC) then READY around SIGHUP, STOPPING.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sd_notify_messages() {
    let server = mock_server(TWO_TURN_SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("b", &bundle_yaml("b", "1", ""));
    let socket_path = site.path().join("notify.sock");
    let socket = std::os::unix::net::UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let daemon = site.start_with_env(&[("NOTIFY_SOCKET", socket_path.to_str().unwrap())]);
    let mut buf = [0u8; 4096];
    let mut recv = || {
        let n = socket.recv(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).to_string()
    };
    let ready = recv();
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready}");
    assert!(ready.contains("STATUS="), "{ready}");

    daemon.signal(nix::sys::signal::Signal::SIGHUP);
    let reloading = recv();
    let fields: BTreeMap<&str, &str> = reloading
        .lines()
        .filter_map(|l| l.split_once('='))
        .collect();
    assert_eq!(fields.get("RELOADING"), Some(&"1"), "{reloading}");
    assert!(
        fields
            .get("MONOTONIC_USEC")
            .is_some_and(|v| v.parse::<u64>().is_ok()),
        "{reloading}"
    );
    let after = recv();
    assert!(
        after.lines().any(|l| l == "READY=1") && after.contains("STATUS=reload"),
        "{after}"
    );

    daemon.signal(nix::sys::signal::Signal::SIGTERM);
    let stopping = recv();
    assert!(stopping.lines().any(|l| l == "STOPPING=1"), "{stopping}");
    assert_eq!(daemon.stop(), Some(0));
}

/// A bundle calls another bundle as a tool; the child's events are nested in
/// the parent's log (child run id, parent call id) and the log stays gap-free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bundles_call_bundles_as_agent_tools() {
    let script = r#"
replies:
  - match: parent question
    turn: 1
    tool_calls: [{id: call-7, name: ask_child, arguments: {input: "child question"}}]
  - match: parent question
    turn: 2
    content: parent done
  - match: child question
    content: child answer
"#;
    let server = mock_server(script).await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("child", &bundle_yaml("child", "1", ""));
    site.put_bundle(
        "parent",
        "name: parent\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\ntools:\n  - name: ask_child\n    kind: agent\n    bundle: child\n    description: ask the child agent\n",
    );
    let daemon = site.start();
    let http = client();
    let job = submit(&http, &daemon, "parent", "parent question").await;
    let id = job["id"].as_str().unwrap().to_string();
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(20)).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["result"]["output"], "parent done");
    let body = job_events(&http, &daemon, &id).await;
    let seqs: Vec<u64> = body.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    let nested: Vec<&Value> = body.iter().filter(|e| e["parent"].is_object()).collect();
    assert!(!nested.is_empty(), "no nested events");
    for e in &nested {
        assert_eq!(e["parent"]["call_id"], "call-7");
        assert_eq!(e["parent"]["run_id"], id.as_str());
        // The daemon's own key for the call (turn 1, first call of its
        // reply), whatever id the model gave it.
        assert_eq!(e["run_id"], format!("{id}/1:0"));
        assert_eq!(e["bundle"], "child");
    }
    assert!(nested.iter().any(|e| e["type"] == "KernelEnd"));
    let tool_result = body
        .iter()
        .find(|e| e["type"] == "ToolResult" && e["parent"].is_null())
        .unwrap();
    assert_eq!(tool_result["output_preview"], "\"child answer\"");
    assert_eq!(daemon.stop(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_inside_a_run_fails_that_attempt_and_the_daemon_goes_on() {
    let server = mock_server(TWO_TURN_SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("b", &bundle_yaml("b", "1", ""));
    // The first model call of the daemon's life panics inside the run.
    let daemon = site.start_with_env(&[("SA_FAILPOINTS", "before_model_call:panic")]);
    let http = client();
    let job = submit(&http, &daemon, "b", "x").await;
    let id = job["id"].as_str().unwrap();
    let done = wait_terminal(&http, &daemon, id, Duration::from_secs(20)).await;
    assert_eq!(done["state"], "failed", "{done}");
    let error = done["error"].as_str().unwrap();
    assert!(
        error.contains("panicked") && error.contains("injected panic") && error.contains(id),
        "{error}"
    );
    // Its heartbeat stopped with it: no lease is left behind.
    assert!(done["lease_expires_at"].is_null(), "{done}");
    let next = submit_and_wait(
        &http,
        &daemon,
        json!({"bundle": "b", "input": "y"}),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(next["state"], "succeeded", "the daemon goes on: {next}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_or_duplicate_directory_never_displaces_a_healthy_bundle() {
    let server = mock_server(TWO_TURN_SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("alpha", &bundle_yaml("zeta", "1", ""));
    let daemon = site.start();
    let http = client();
    // A directory named like the bundle, holding invalid YAML, and another
    // healthy directory claiming the same name.
    site.put_bundle("zeta", "name: zeta\nversion: [unclosed\n");
    site.put_bundle("beta", &bundle_yaml("zeta", "2", ""));
    let report: Value = http
        .post(daemon.url("/v1/reload"))
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(report["result"], "partial", "{report}");

    let bundles = get(&http, &daemon, "/v1/bundles").await;
    let live: Vec<&Value> = bundles["bundles"].as_array().unwrap().iter().collect();
    assert_eq!(live.len(), 1, "{bundles}");
    assert_eq!(live[0]["name"], "zeta");
    assert_eq!(live[0]["status"], "ok");
    assert_eq!(
        live[0]["version"], "1",
        "the first healthy directory keeps the name"
    );
    let rejected = bundles["rejected"].as_array().unwrap();
    assert_eq!(rejected.len(), 2, "{bundles}");
    let dirs: HashSet<String> = rejected
        .iter()
        .map(|r| {
            std::path::Path::new(r["dir"].as_str().unwrap())
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(
        dirs,
        HashSet::from(["zeta".to_string(), "beta".to_string()])
    );
    assert!(
        rejected.iter().any(|r| r["last_error"]
            .as_str()
            .unwrap()
            .contains("already served by")),
        "{bundles}"
    );
    let done = submit_and_wait(
        &http,
        &daemon,
        json!({"bundle": "zeta", "input": "still served"}),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["bundle_version"], "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edits_to_a_model_config_or_a_tool_script_rebind_the_bundle() {
    let script = "replies:\n  - turn: 1\n    tool_calls: [{name: which, arguments: {}}]\n  - turn: 2\n    content: done\n";
    let server = mock_server(script).await;
    let site = Site::new(&server.base_url(), "");
    std::fs::write(
        site.path().join("models/qwen.toml"),
        "plugin = \"qwen\"\ndefault_grammar = \"none\"\nstop = [\"<first>\"]\n",
    )
    .unwrap();
    site.put_bundle(
        "b",
        "name: b\nversion: \"1\"\nmodel: {endpoint: mock, name: m, plugin: qwen}\nprompts: {user: \"{{ input }}\"}\ntools:\n  - {name: which, kind: process, effect: read_only, command: [python3, tools/which.py]}\n",
    );
    let tools = site.path().join("bundles/b/tools");
    std::fs::create_dir_all(&tools).unwrap();
    std::fs::write(tools.join("which.py"), "print('\"script one\"')\n").unwrap();
    let daemon = site.start();
    let http = client();
    let reload = || async {
        let report: Value = http
            .post(daemon.url("/v1/reload"))
            .json(&serde_json::json!({}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        report
    };
    // When the bundle was bound; the watcher may reload before or after an
    // explicit reload, so the test follows this rather than one report.
    let loaded_at = || async { get(&http, &daemon, "/v1/bundles/b").await["loaded_at"].clone() };
    let rebound = |before: Value| async move {
        reload().await;
        eventually(Duration::from_secs(10), "the bundle is rebound", || async {
            let now = loaded_at().await;
            (now != before).then_some(())
        })
        .await;
    };
    reload().await;
    let run = |input: &'static str| {
        let (http, daemon) = (&http, &daemon);
        async move {
            let done = submit_and_wait(
                http,
                daemon,
                json!({"bundle": "b", "input": input}),
                Duration::from_secs(20),
            )
            .await;
            assert_eq!(done["state"], "succeeded", "{done}");
        }
    };
    // The request of the last turn shows the stop sequences sent and the tool
    // output the model was given.
    let last_request = || {
        let requests = server.requests();
        let body = requests.last().unwrap().clone();
        (body["stop"].clone(), body["messages"].to_string())
    };

    run("first").await;
    let (stop, messages) = last_request();
    assert_eq!(stop, json!(["<first>"]));
    assert!(messages.contains("script one"), "{messages}");

    // Only the model config changes: the bundle is rebound.
    let before = loaded_at().await;
    std::fs::write(
        site.path().join("models/qwen.toml"),
        "plugin = \"qwen\"\ndefault_grammar = \"none\"\nstop = [\"<second>\"]\n",
    )
    .unwrap();
    rebound(before).await;
    run("second").await;
    assert_eq!(last_request().0, json!(["<second>"]));

    // Only a tool script changes: the bundle is rebound again.
    let before = loaded_at().await;
    std::fs::write(tools.join("which.py"), "print('\"script two\"')\n").unwrap();
    rebound(before).await;
    run("third").await;
    assert!(last_request().1.contains("script two"));

    // Nothing changes: nothing is rebound.
    let before = loaded_at().await;
    let report = reload().await;
    assert_eq!(report["changed"], json!([]), "{report}");
    assert_eq!(loaded_at().await, before);
}

/// A bundle in the Python agent kernel's format dropped into the bundles
/// directory: its status names each original key with its line and the
/// command that converts it (the same loader as `validate`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_original_bundle_s_status_names_its_keys_and_the_import_command() {
    let server = mock_server("replies:\n  - content: hi\n").await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle(
        "legacy",
        "name: legacy\nmodel: {plugin: qwen, adapter: m}\ninitial_context:\n  system_prompt: hi\nmax_turns: 3\ntools: []\n",
    );
    let daemon = site.start();
    let http = client();
    let errors = eventually(
        Duration::from_secs(10),
        "the legacy bundle's status",
        || async {
            let listed = get(&http, &daemon, "/v1/bundles").await;
            let all = listed["bundles"]
                .as_array()
                .into_iter()
                .chain(listed["rejected"].as_array())
                .flatten()
                .cloned()
                .collect::<Vec<_>>();
            all.into_iter()
                .find(|b| b["dir"].as_str().is_some_and(|d| d.ends_with("legacy")))
                .map(|b| b["errors"].to_string())
        },
    )
    .await;
    for (line, key) in [
        (2, "model.adapter"),
        (3, "initial_context"),
        (5, "max_turns"),
    ] {
        assert!(
            errors.contains(&format!("legacy/bundle.yaml:{line}: {key}: unknown key: `{key}` belongs to the Python agent kernel's bundle format")),
            "{key}: {errors}"
        );
    }
    assert!(
        errors.contains("run `structured-agents import "),
        "{errors}"
    );
    assert_eq!(daemon.stop(), Some(0));
}
