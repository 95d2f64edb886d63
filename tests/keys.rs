//! API keys on the real daemon: keys made with `structured-agents keys
//! new`; each key sees, follows, cancels and decides only on its own jobs
//! (another key's job answers exactly as an unknown one); a key with
//! `read_all` sees every job; idempotency keys are per API key; bundle
//! globs, scopes, rates, jobs in flight and daily budgets are enforced at
//! the one admission; `approval.by: others` refuses the submitter; a
//! revoked key is refused after a reload; and no reload can take the last
//! key off a daemon that listens on the network.

mod common;

use std::time::Duration;

use common::daemon::{Daemon, Site, client, eventually, new_key, wait_terminal};
use common::mock_server;
use serde_json::{Value, json};

const SCRIPT: &str = r#"
replies:
  - {match: pay, turn: 1, tool_calls: [{id: c1, name: charge, arguments: {amount: 500}}]}
  - {match: pay, turn: 2, content: charged}
  - {match: slow, content: slow done, delay_ms: 10000}
  - content: done
    usage: {prompt_tokens: 30, completion_tokens: 10, total_tokens: 40}
"#;

fn bundle(name: &str) -> String {
    format!(
        r#"
name: {name}
version: "1"
model: {{endpoint: mock, name: m, plugin: openai}}
prompts: {{user: "{{{{ input }}}}"}}
tools:
  - name: charge
    kind: process
    effect: unsafe
    parameters: {{type: object, properties: {{amount: {{type: integer}}}}, required: [amount]}}
    approval: {{always: true, by: others}}
    command: [python3, -c, "print('{{}}')"]
"#
    )
}

struct Keys {
    a: String,
    b: String,
    auditor: String,
    approver: String,
    admin: String,
}

fn site_with_keys(endpoint: &str) -> (Site, Keys) {
    let site = Site::new(endpoint, "[auth]\nkeys_file = \"keys.toml\"\n");
    let file = site.path().join("keys.toml");
    let own = "submit,read,operate,approve";
    let keys = Keys {
        a: new_key(&file, "team-a", &["--scopes", own, "--bundles", "alpha*"]),
        b: new_key(&file, "team-b", &["--scopes", own]),
        auditor: new_key(&file, "auditor", &["--scopes", "read_all"]),
        approver: new_key(&file, "approver", &["--scopes", "approve,operate_all"]),
        admin: new_key(&file, "ops", &["--scopes", "admin"]),
    };
    let text = std::fs::read_to_string(&file).unwrap();
    for token in [&keys.a, &keys.b, &keys.admin] {
        assert!(!text.contains(token.as_str()), "tokens are never stored");
    }
    site.put_bundle("alpha", &bundle("alpha"));
    site.put_bundle("beta", &bundle("beta"));
    (site, keys)
}

async fn call(
    daemon: &Daemon,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let http = client();
    let mut request = http.request(method.parse().unwrap(), daemon.url(path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    } else if method == "POST" {
        request = request.header("content-type", "application/json");
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn each_key_sees_and_touches_only_its_own_jobs_and_a_reader_of_all_sees_both() {
    let server = mock_server(SCRIPT).await;
    let (site, keys) = site_with_keys(&server.base_url());
    let daemon = site.start();
    let submit = |token: &str, body: Value| {
        let token = token.to_string();
        let daemon = &daemon;
        async move { call(daemon, "POST", "/v1/jobs", Some(&token), Some(body)).await }
    };

    let (status, body) = call(&daemon, "GET", "/v1/jobs", None, None).await;
    assert_eq!(status, 401, "{body}");
    let (status, _) = call(&daemon, "GET", "/v1/jobs", Some("sa_nope"), None).await;
    assert_eq!(status, 401);

    let (status, job_a) = submit(&keys.a, json!({"bundle": "alpha", "input": "slow one"})).await;
    assert_eq!(status, 201, "{job_a}");
    assert_eq!(job_a["owner"], "team-a");
    let id = job_a["id"].as_str().unwrap().to_string();

    // Another key's job answers as an unknown one, on every route.
    let unknown = "0190aaaa-0000-7000-8000-000000000000";
    for route in ["", "/events", "/journal", "/approvals", "/artifacts"] {
        let (theirs, theirs_body) = call(
            &daemon,
            "GET",
            &format!("/v1/jobs/{id}{route}"),
            Some(&keys.b),
            None,
        )
        .await;
        let (missing, missing_body) = call(
            &daemon,
            "GET",
            &format!("/v1/jobs/{unknown}{route}"),
            Some(&keys.b),
            None,
        )
        .await;
        assert_eq!(
            (theirs, missing),
            (404, 404),
            "{route}: {theirs_body} / {missing_body}"
        );
        assert_eq!(theirs_body["error"]["code"], missing_body["error"]["code"]);
        assert_eq!(
            theirs_body["error"]["message"]
                .as_str()
                .unwrap()
                .replace(&id, "ID"),
            missing_body["error"]["message"]
                .as_str()
                .unwrap()
                .replace(unknown, "ID"),
            "{route}"
        );
    }
    let (status, _) = call(
        &daemon,
        "POST",
        &format!("/v1/jobs/{id}/cancel"),
        Some(&keys.b),
        None,
    )
    .await;
    assert_eq!(status, 404, "another key cannot cancel");

    // Idempotency keys are per API key: the same key makes two jobs.
    let body = json!({"bundle": "alpha", "input": "hello", "idempotency_key": "k1"});
    let (s1, first) = submit(&keys.a, body.clone()).await;
    let (s2, other) = submit(&keys.b, body.clone()).await;
    let (s3, again) = submit(&keys.a, body.clone()).await;
    assert_eq!((s1, s2, s3), (201, 201, 200), "{first} {other} {again}");
    assert_ne!(first["id"], other["id"]);
    assert_eq!(first["id"], again["id"]);
    assert_eq!(other["idempotency_key"], "k1", "shown as sent");
    // b's conflicting reuse says nothing of a's job.
    let (status, conflict) = submit(
        &keys.b,
        json!({"bundle": "alpha", "input": "other", "idempotency_key": "k1"}),
    )
    .await;
    assert_eq!(status, 409);
    assert!(
        !conflict.to_string().contains(first["id"].as_str().unwrap()),
        "{conflict}"
    );

    // A conversation is its key's: another key naming the same id has a
    // conversation of its own, and can neither read nor forget the first.
    let (status, body) = submit(
        &keys.a,
        json!({"bundle": "alpha", "input": "hi", "conversation_id": "conv-a"}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = submit(
        &keys.b,
        json!({"bundle": "alpha", "input": "me too", "conversation_id": "conv-a"}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    for (key, own) in [(&keys.a, "hi"), (&keys.b, "me too")] {
        let (status, body) =
            call(&daemon, "GET", "/v1/conversations/conv-a", Some(key), None).await;
        assert_eq!(status, 200, "{body}");
        let inputs: Vec<&str> = body["turns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["input"].as_str().unwrap())
            .collect();
        assert_eq!(inputs, [own], "each key reads only its own turns");
    }
    for method in ["GET", "DELETE"] {
        let (status, _) = call(
            &daemon,
            method,
            "/v1/conversations/conv-a?owner=team-a",
            Some(&keys.b),
            None,
        )
        .await;
        assert_eq!(status, 404, "{method}");
    }

    // Listing: own jobs only; the auditor sees both keys' jobs.
    let (_, mine) = call(&daemon, "GET", "/v1/jobs", Some(&keys.b), None).await;
    let owners: Vec<&str> = mine["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["owner"].as_str().unwrap())
        .collect();
    assert!(
        !owners.is_empty() && owners.iter().all(|o| *o == "team-b"),
        "{owners:?}"
    );
    let (_, all) = call(&daemon, "GET", "/v1/jobs", Some(&keys.auditor), None).await;
    let owners: Vec<&str> = all["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["owner"].as_str().unwrap())
        .collect();
    assert!(
        owners.contains(&"team-a") && owners.contains(&"team-b"),
        "{owners:?}"
    );
    let events = client()
        .get(daemon.url(&format!("/v1/jobs/{id}/events")))
        .bearer_auth(&keys.auditor)
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200, "read_all follows any job");
    drop(events);

    // Scopes and bundle globs.
    let (status, body) = submit(&keys.auditor, json!({"bundle": "alpha", "input": "x"})).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("submit"),
        "{body}"
    );
    let (status, body) = submit(&keys.a, json!({"bundle": "beta", "input": "x"})).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["field"], "bundle");
    let (_, bundles) = call(&daemon, "GET", "/v1/bundles", Some(&keys.a), None).await;
    let names: Vec<&str> = bundles["bundles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha"]);

    // The owner cancels its own job.
    let (status, body) = call(
        &daemon,
        "POST",
        &format!("/v1/jobs/{id}/cancel"),
        Some(&keys.a),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    drop(daemon);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_by_others_refuses_the_submitter_and_records_the_approver() {
    let server = mock_server(SCRIPT).await;
    let (site, keys) = site_with_keys(&server.base_url());
    let daemon = site.start();
    let (status, job) = call(
        &daemon,
        "POST",
        "/v1/jobs",
        Some(&keys.b),
        Some(json!({"bundle": "beta", "input": "pay it"})),
    )
    .await;
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_str().unwrap().to_string();
    let pending = eventually(Duration::from_secs(20), "the job parks", || async {
        let (_, body) = call(
            &daemon,
            "GET",
            &format!("/v1/jobs/{id}/approvals"),
            Some(&keys.b),
            None,
        )
        .await;
        body["approvals"]
            .as_array()
            .and_then(|a| a.first().cloned())
    })
    .await;
    assert_eq!(pending["approver"], "others");
    let decide = format!(
        "/v1/jobs/{id}/approvals/{}",
        pending["call_id"].as_str().unwrap()
    );
    let decision = json!({"decision": "approve", "digest": pending["digest"]});
    let (status, body) = call(
        &daemon,
        "POST",
        &decide,
        Some(&keys.b),
        Some(decision.clone()),
    )
    .await;
    assert_eq!(status, 403, "the submitter may not approve: {body}");
    let (status, body) = call(
        &daemon,
        "POST",
        &decide,
        Some(&keys.a),
        Some(decision.clone()),
    )
    .await;
    assert_eq!(status, 404, "team-a cannot see team-b's job: {body}");
    let (status, body) = call(
        &daemon,
        "POST",
        &decide,
        Some(&keys.approver),
        Some(decision),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["by"], "approver");
    let http = reqwest::Client::builder()
        .default_headers(
            [(
                reqwest::header::AUTHORIZATION,
                format!("Bearer {}", keys.admin).parse().unwrap(),
            )]
            .into_iter()
            .collect(),
        )
        .build()
        .unwrap();
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(20)).await;
    assert_eq!(done["state"], "succeeded", "{done}");
}

#[tokio::test(flavor = "multi_thread")]
async fn quotas_are_per_key_and_a_revoked_key_is_refused_after_a_reload() {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    let file = site.path().join("keys.toml");
    let flood = new_key(
        &file,
        "flood",
        &["--scopes", "submit,read", "--rate-per-minute", "5"],
    );
    let steady = new_key(&file, "steady", &["--scopes", "submit,read"]);
    let capped = new_key(
        &file,
        "capped",
        &["--scopes", "submit", "--max-in-flight", "1"],
    );
    let thrifty = new_key(
        &file,
        "thrifty",
        &["--scopes", "submit,read", "--tokens-per-day", "60"],
    );
    let admin = new_key(&file, "ops", &["--scopes", "admin"]);
    site.put_bundle("alpha", &bundle("alpha"));
    let daemon = site.start();
    let job = |input: &str| json!({"bundle": "alpha", "input": input});

    // One key floods; its sixth job in the minute is a 429 with
    // Retry-After, while the other key's jobs are admitted and run.
    let started = std::time::Instant::now();
    let mut refused = 0;
    for i in 0..20 {
        let (status, body) = call(
            &daemon,
            "POST",
            "/v1/jobs",
            Some(&flood),
            Some(job(&format!("f{i}"))),
        )
        .await;
        match status {
            201 => {}
            429 => {
                refused += 1;
                assert_eq!(body["error"]["code"], "quota_exceeded", "{body}");
            }
            other => panic!("{other}: {body}"),
        }
        if i % 5 == 0 {
            let (status, body) =
                call(&daemon, "POST", "/v1/jobs", Some(&steady), Some(job("s"))).await;
            assert_eq!(status, 201, "the steady key is not starved: {body}");
        }
    }
    // A burst of 5, then one more every 12 s the loop took.
    let refilled = (started.elapsed().as_secs() / 12) as usize;
    assert!(
        20 - refused <= 5 + refilled,
        "admitted {} of 20",
        20 - refused
    );
    assert!(refused >= 10, "refused {refused} of 20");
    let response = client()
        .post(daemon.url("/v1/jobs"))
        .bearer_auth(&flood)
        .json(&job("again"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    assert!(response.headers().contains_key("retry-after"));

    // At most one job in flight.
    let (status, _) = call(
        &daemon,
        "POST",
        "/v1/jobs",
        Some(&capped),
        Some(job("slow")),
    )
    .await;
    assert_eq!(status, 201);
    let (status, body) = call(
        &daemon,
        "POST",
        "/v1/jobs",
        Some(&capped),
        Some(job("slow 2")),
    )
    .await;
    assert_eq!(status, 429, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_in_flight"),
        "{body}"
    );

    // A key's own daily budget: 40 tokens a job, 60 a day → the third is refused.
    let http = client();
    for i in 0..2 {
        let (status, body) = call(
            &daemon,
            "POST",
            "/v1/jobs",
            Some(&thrifty),
            Some(job(&format!("t{i}"))),
        )
        .await;
        assert_eq!(status, 201, "{body}");
        let id = body["id"].as_str().unwrap().to_string();
        eventually(Duration::from_secs(20), "the job ends", || {
            let (http, daemon, thrifty, id) = (&http, &daemon, &thrifty, id.clone());
            async move {
                let response = http
                    .get(daemon.url(&format!("/v1/jobs/{id}")))
                    .bearer_auth(thrifty)
                    .send()
                    .await
                    .ok()?;
                let job: Value = response.json().await.ok()?;
                (job["state"] == "succeeded").then_some(())
            }
        })
        .await;
    }
    let (status, body) = call(&daemon, "POST", "/v1/jobs", Some(&thrifty), Some(job("t3"))).await;
    assert_eq!(status, 429, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("per_day.tokens"),
        "{body}"
    );

    // Revoked: refused after the reload that reads the file again.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_structured-agents"))
        .args(["keys", "revoke", "steady", "--file"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (status, body) = call(&daemon, "POST", "/v1/reload", Some(&admin), None).await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = call(&daemon, "GET", "/v1/jobs", Some(&steady), None).await;
    assert_eq!(status, 401);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reload_cannot_take_the_last_key_off_a_daemon_on_the_network() {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    let config = site.path().join("config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(site.path().join("token"), "s3cret\n").unwrap();
    let with_token = text.replace(
        "listen = \"127.0.0.1:0\"",
        "listen = \"0.0.0.0:0\"\ntoken_file = \"token\"",
    );
    std::fs::write(&config, &with_token).unwrap();
    site.put_bundle("alpha", &bundle("alpha"));
    let daemon = site.start();
    let base = daemon.url("").replace("0.0.0.0", "127.0.0.1");
    let get = |token: Option<&'static str>| {
        let base = base.clone();
        async move {
            let mut request = client().get(format!("{base}/v1/jobs"));
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            request.send().await.unwrap().status().as_u16()
        }
    };
    assert_eq!(get(None).await, 401);
    assert_eq!(get(Some("s3cret")).await, 200);

    // The token goes from the config; the reload is refused by name.
    std::fs::write(&config, with_token.replace("token_file = \"token\"", "")).unwrap();
    let reload = client()
        .post(format!("{base}/v1/reload"))
        .bearer_auth("s3cret")
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(reload.status(), 422);
    let body: Value = reload.json().await.unwrap();
    assert!(
        body.to_string().contains("not a loopback address"),
        "{body}"
    );
    assert_eq!(get(None).await, 401, "still closed");

    // `validate` says the same about the file.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_structured-agents"))
        .args(["validate", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a loopback address"));
    drop(daemon);
}

#[tokio::test(flavor = "multi_thread")]
async fn event_streams_are_capped_per_key_on_every_streaming_route() {
    let server = mock_server(SCRIPT).await;
    let (site, keys) = site_with_keys(&server.base_url());
    let daemon = site.start_with_env(&[(
        "STRUCTURED_AGENTS_SERVER__MAX_EVENT_STREAMS_PER_CALLER",
        "1",
    )]);
    let (status, job) = call(
        &daemon,
        "POST",
        "/v1/jobs",
        Some(&keys.a),
        Some(json!({"bundle": "alpha", "input": "later", "run_at": "2099-01-01T00:00:00Z"})),
    )
    .await;
    assert_eq!(status, 201, "{job}");
    let events = daemon.url(&format!("/v1/jobs/{}/events", job["id"].as_str().unwrap()));
    let open = |token: &str| client().get(&events).bearer_auth(token).send();
    let held = open(&keys.a).await.unwrap();
    assert_eq!(held.status(), 200);
    let refused = open(&keys.a).await.unwrap();
    assert_eq!(refused.status(), 503, "the key's one stream is open");
    assert!(refused.headers().contains_key("retry-after"));
    // A streamed chat completion is a stream too.
    let chat = client()
        .post(daemon.url("/v1/chat/completions"))
        .bearer_auth(&keys.a)
        .json(&json!({"model": "bundle/alpha", "stream": true, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(chat.status(), 503);
    // Another key's streams are its own.
    let other = open(&keys.auditor).await.unwrap();
    assert_eq!(other.status(), 200, "another key is not held back");
    drop(held);
    eventually(
        Duration::from_secs(30),
        "the key's stream slot frees",
        || async {
            let again = open(&keys.a).await.ok()?;
            (again.status() == 200).then_some(())
        },
    )
    .await;
}

/// A key may come in `X-Api-Key` (what LangGraph's SDKs send) as well as
/// as a bearer token: the same key, the same owner; an unknown one is a
/// 401; when both headers come, the bearer token is the one read.
#[tokio::test(flavor = "multi_thread")]
async fn an_api_key_in_x_api_key_is_the_same_key() {
    let server = mock_server(SCRIPT).await;
    let (site, keys) = site_with_keys(&server.base_url());
    let daemon = site.start();
    let http = client();
    let list = |headers: Vec<(&'static str, String)>| {
        let mut request = http.get(daemon.url("/v1/jobs?limit=5"));
        for (name, value) in headers {
            request = request.header(name, value);
        }
        async move {
            let response = request.send().await.unwrap();
            (
                response.status().as_u16(),
                response.json::<Value>().await.unwrap_or_default(),
            )
        }
    };
    let submitted = http
        .post(daemon.url("/v1/jobs"))
        .header("x-api-key", &keys.a)
        .json(&json!({"bundle": "alpha", "input": "hello"}))
        .send()
        .await
        .unwrap();
    assert_eq!(submitted.status().as_u16(), 201);
    let job: Value = submitted.json().await.unwrap();
    assert_eq!(job["owner"], "team-a", "{job}");

    let (status, page) = list(vec![("x-api-key", keys.a.clone())]).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["jobs"][0]["id"], job["id"]);
    let (status, _) = list(vec![("x-api-key", "sa_nope".into())]).await;
    assert_eq!(status, 401);
    // Both: the bearer token (team-b) is read, not the header (team-a).
    let (status, page) = list(vec![
        ("authorization", format!("Bearer {}", keys.b)),
        ("x-api-key", keys.a.clone()),
    ])
    .await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["jobs"], json!([]), "team-b sees none of team-a's jobs");
}
