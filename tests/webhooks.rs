//! Completion webhooks on the real daemon, against a local receiver: a
//! job's state changes (awaiting_approval, then succeeded) each reach the
//! receiver once it answers 2xx, after it refused the first attempts, in
//! the order they happened, signed as Standard Webhooks signs; a change
//! recorded just before a SIGKILL is still delivered by the restarted
//! daemon; a receiver that never answers 2xx dead-letters the delivery
//! (metrics); a webhook outside `egress.allow` is refused at submit.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use base64::Engine as _;
use common::daemon::{Daemon, Site, client, eventually, get, metric, run_cli, submit_body};
use common::mock_server;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// The receivers listen on loopback, which the egress rule denies unless
/// `egress.allow` names it.
const CONFIG: &str = "[webhooks]\nmax_attempts = 4\nbackoff_base = \"100ms\"\nbackoff_max = \"300ms\"\ntimeout = \"2s\"\n\n[egress]\nallow = [\"http://127.0.0.1:*\"]\n";

const SCRIPT: &str = r#"
replies:
  - {turn: 1, tool_calls: [{id: c1, name: note, arguments: {}}]}
  - {turn: 2, content: noted}
"#;

const BUNDLE: &str = r#"
name: noter
version: "1"
model: {endpoint: mock, name: m, plugin: openai}
prompts: {user: "{{ input }}"}
tools:
  - name: note
    kind: process
    effect: read_only
    approval: always
    command: [python3, -c, "print('{}')"]
"#;

const PLAIN: &str = r#"
name: plain
version: "1"
model: {endpoint: mock, name: m, plugin: openai}
prompts: {user: "{{ input }}"}
"#;

/// A receiver that answers 500 to the first `refuse` requests (or to all
/// while `down`), then 204; it keeps what it accepted.
#[derive(Default)]
struct Receiver {
    refuse: AtomicUsize,
    down: std::sync::atomic::AtomicBool,
    seen: AtomicUsize,
    accepted: Mutex<Vec<(HeaderMap, String)>>,
}

async fn receiver(refuse: usize) -> (Arc<Receiver>, String) {
    let state = Arc::new(Receiver {
        refuse: AtomicUsize::new(refuse),
        ..Default::default()
    });
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post({
            let state = state.clone();
            move |headers: HeaderMap, body: String| {
                let state = state.clone();
                async move {
                    state.seen.fetch_add(1, Ordering::SeqCst);
                    let refused = state.down.load(Ordering::SeqCst)
                        || state
                            .refuse
                            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                            .is_ok();
                    if refused {
                        return StatusCode::INTERNAL_SERVER_ERROR;
                    }
                    state.accepted.lock().unwrap().push((headers, body));
                    StatusCode::NO_CONTENT
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (state, url)
}

fn start(site: &Site) -> Daemon {
    site.start_with_env(&[("STRUCTURED_AGENTS_WEBHOOK_SECRET", SECRET)])
}

/// The body's signature as a receiver checks it.
fn verify(headers: &HeaderMap, body: &str) {
    let id = headers["webhook-id"].to_str().unwrap();
    let timestamp = headers["webhook-timestamp"].to_str().unwrap();
    let key = base64::engine::general_purpose::STANDARD
        .decode(SECRET.strip_prefix("whsec_").unwrap())
        .unwrap();
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{timestamp}.{body}").as_bytes());
    let expected = format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    );
    assert_eq!(headers["webhook-signature"].to_str().unwrap(), expected);
}

fn accepted(receiver: &Receiver) -> Vec<(HeaderMap, Value)> {
    receiver
        .accepted
        .lock()
        .unwrap()
        .iter()
        .map(|(headers, body)| {
            verify(headers, body);
            (headers.clone(), serde_json::from_str(body).unwrap())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn each_state_change_is_delivered_once_in_order_and_signed_after_refusals() {
    let (hook, url) = receiver(3).await;
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), CONFIG);
    site.put_bundle("noter", BUNDLE);
    let daemon = start(&site);
    let http = client();
    let job = submit_body(
        &http,
        &daemon,
        json!({"bundle": "noter", "input": "note it", "webhook": url}),
    )
    .await;
    let id = job["id"].as_str().unwrap().to_string();
    eventually(
        Duration::from_secs(30),
        "the job to await approval",
        || async {
            let job = get(&http, &daemon, &format!("/v1/jobs/{id}")).await;
            (job["state"] == "awaiting_approval").then_some(())
        },
    )
    .await;
    let out = run_cli(&daemon.url(""), &["approve", &id], "");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let got = eventually(Duration::from_secs(30), "two deliveries", || async {
        let got = accepted(&hook);
        (got.len() >= 2).then_some(got)
    })
    .await;
    // Wait out any further retry round: nothing more comes.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let got_now = accepted(&hook);
    assert_eq!(
        got_now.len(),
        2,
        "a change was delivered twice: {got_now:?}"
    );
    let types: Vec<&str> = got
        .iter()
        .map(|(_, b)| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["job.awaiting_approval", "job.succeeded"]);
    for (_, body) in &got {
        assert_eq!(body["data"]["job_id"], id.as_str());
    }
    assert_eq!(
        got[1].1["data"]["result"]["output"], "noted",
        "{:?}",
        got[1].1
    );
    let ids: Vec<&str> = got
        .iter()
        .map(|(h, _)| h["webhook-id"].to_str().unwrap())
        .collect();
    assert_ne!(ids[0], ids[1]);
    // Three refusals, then two deliveries.
    assert_eq!(hook.seen.load(Ordering::SeqCst), 5);
    assert_eq!(
        metric(
            &http,
            &daemon,
            "structured_agents_webhook_deliveries_total{outcome=\"delivered\"}"
        )
        .await,
        2
    );
    assert_eq!(
        metric(
            &http,
            &daemon,
            "structured_agents_webhook_deliveries_total{outcome=\"retry\"}"
        )
        .await,
        3
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_change_recorded_before_a_sigkill_is_delivered_after_the_restart() {
    let (hook, url) = receiver(0).await;
    hook.down.store(true, Ordering::SeqCst);
    let server = mock_server("replies:\n  - content: done\n").await;
    let site = Site::new(
        &server.base_url(),
        CONFIG
            .replace("max_attempts = 4", "max_attempts = 1000")
            .as_str(),
    );
    site.put_bundle(
        "plain",
        &PLAIN.replace("prompts:", &format!("webhook: \"{url}\"\nprompts:")),
    );
    let daemon = start(&site);
    let http = client();
    let job = submit_body(&http, &daemon, json!({"bundle": "plain", "input": "x"})).await;
    let id = job["id"].as_str().unwrap().to_string();
    eventually(Duration::from_secs(30), "a refused attempt", || async {
        (hook.seen.load(Ordering::SeqCst) > 0).then_some(())
    })
    .await;
    daemon.kill9();
    hook.down.store(false, Ordering::SeqCst);
    let daemon = start(&site);
    let got = eventually(Duration::from_secs(30), "the delivery", || async {
        let got = accepted(&hook);
        (!got.is_empty()).then_some(got)
    })
    .await;
    assert_eq!(got[0].1["type"], "job.succeeded");
    assert_eq!(got[0].1["data"]["job_id"], id.as_str());
    drop(daemon);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_receiver_that_always_fails_dead_letters_the_delivery() {
    let (hook, url) = receiver(usize::MAX).await;
    let server = mock_server("replies:\n  - content: done\n").await;
    let site = Site::new(&server.base_url(), CONFIG);
    site.put_bundle("plain", PLAIN);
    let daemon = start(&site);
    let http = client();
    submit_body(
        &http,
        &daemon,
        json!({"bundle": "plain", "input": "x", "webhook": url}),
    )
    .await;
    eventually(Duration::from_secs(30), "the dead letter", || async {
        let dead = metric(&http, &daemon, "structured_agents_webhooks_dead").await;
        (dead == 1).then_some(())
    })
    .await;
    assert_eq!(hook.seen.load(Ordering::SeqCst), 4, "max_attempts = 4");
    assert_eq!(
        metric(
            &http,
            &daemon,
            "structured_agents_webhook_deliveries_total{outcome=\"dead\"}"
        )
        .await,
        1
    );
}

/// The outbox on PostgreSQL: the same lifecycle writes it, the sender
/// claims with `SKIP LOCKED`; refusals, then one delivery.
#[tokio::test(flavor = "multi_thread")]
async fn on_postgres_a_state_change_is_delivered_once_after_refusals() {
    let (hook, url) = receiver(2).await;
    let server = mock_server("replies:\n  - content: done\n").await;
    let site = Site::new(&server.base_url(), CONFIG);
    site.put_bundle("plain", PLAIN);
    let schema = common::postgres::Schema::fresh();
    let mut env = schema.daemon_env();
    env.push(("STRUCTURED_AGENTS_WEBHOOK_SECRET", SECRET.to_string()));
    let daemon = site.start_with_env(&env);
    let http = client();
    let job = submit_body(
        &http,
        &daemon,
        json!({"bundle": "plain", "input": "x", "webhook": url}),
    )
    .await;
    let got = eventually(Duration::from_secs(30), "the delivery", || async {
        let got = accepted(&hook);
        (!got.is_empty()).then_some(got)
    })
    .await;
    assert_eq!(got[0].1["type"], "job.succeeded");
    assert_eq!(got[0].1["data"]["job_id"], job["id"]);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(accepted(&hook).len(), 1);
    assert_eq!(hook.seen.load(Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_keys_webhook_serves_its_jobs_that_name_none() {
    let (hook, url) = receiver(0).await;
    let server = mock_server("replies:\n  - content: done\n").await;
    let site = Site::new(
        &server.base_url(),
        &format!("{CONFIG}\n[auth]\nkeys_file = \"keys.toml\"\n"),
    );
    let file = site.path().join("keys.toml");
    let token = common::daemon::new_key(
        &file,
        "team-a",
        &["--scopes", "submit,read", "--webhook", &url],
    );
    assert!(
        std::fs::read_to_string(&file)
            .unwrap()
            .contains(&format!("webhook = \"{url}\"")),
        "`keys new --webhook` writes the key's webhook"
    );
    site.put_bundle("plain", PLAIN);
    let daemon = start(&site);
    let http = client();
    let job: Value = http
        .post(daemon.url("/v1/jobs"))
        .bearer_auth(&token)
        .json(&json!({"bundle": "plain", "input": "x"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let got = eventually(Duration::from_secs(30), "the key's delivery", || async {
        let got = accepted(&hook);
        (!got.is_empty()).then_some(got)
    })
    .await;
    assert_eq!(got[0].1["data"]["job_id"], job["id"], "{job}");
    assert_eq!(got[0].1["data"]["owner"], "team-a");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_outside_egress_allow_is_refused_at_submit() {
    let server = mock_server("replies:\n  - content: done\n").await;
    let site = Site::new(
        &server.base_url(),
        "[egress]\nallow = [\"https://hooks.example/\"]\n",
    );
    site.put_bundle("plain", PLAIN);
    let daemon = start(&site);
    let http = client();
    let refused = http
        .post(daemon.url("/v1/jobs"))
        .json(&json!({"bundle": "plain", "input": "x", "webhook": "http://10.0.0.1/steal"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 422);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["field"], "webhook", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("egress.allow"),
        "{body}"
    );
}

/// A dead letter is listed by `GET /v1/deliveries?state=dead`, redriven
/// once the receiver works again, and delivered once; the gauge drops.
#[tokio::test(flavor = "multi_thread")]
async fn a_dead_letter_is_listed_redriven_and_delivered_once() {
    let (hook, url) = receiver(0).await;
    hook.down.store(true, Ordering::SeqCst);
    let server = mock_server("replies:\n  - content: done\n").await;
    let site = Site::new(&server.base_url(), CONFIG);
    site.put_bundle("plain", PLAIN);
    let daemon = start(&site);
    let http = client();
    let job = submit_body(
        &http,
        &daemon,
        json!({"bundle": "plain", "input": "x", "webhook": url}),
    )
    .await;
    let job_id = job["id"].as_str().unwrap().to_string();
    let listing = format!("/v1/deliveries?state=dead&job_id={job_id}");
    let dead = eventually(Duration::from_secs(30), "the dead letter", || async {
        let page = get(&http, &daemon, &listing).await;
        let deliveries = page["deliveries"].as_array().cloned().unwrap_or_default();
        (!deliveries.is_empty()).then_some(deliveries)
    })
    .await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    let delivery = &dead[0];
    assert_eq!(delivery["attempts"], 4, "max_attempts = 4: {delivery}");
    assert_eq!(delivery["target"], url.as_str());
    assert_eq!(delivery["event"], "job.succeeded");
    assert!(
        delivery["last_error"]
            .as_str()
            .unwrap()
            .contains("HTTP 500"),
        "{delivery}"
    );
    assert_eq!(
        metric(&http, &daemon, "structured_agents_webhooks_dead").await,
        1
    );
    let id = delivery["id"].as_str().unwrap().to_string();
    let out = run_cli(
        &daemon.url(""),
        &["deliveries", "list", "--state", "dead"],
        "",
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&id),
        "{out:?}"
    );
    // Fixed: the receiver takes deliveries again; nothing comes by itself.
    hook.down.store(false, Ordering::SeqCst);
    let redrive = |id: String| {
        let http = http.clone();
        let url = daemon.url(&format!("/v1/deliveries/{id}/redrive"));
        async move { http.post(url).json(&json!({})).send().await.unwrap() }
    };
    let redriven = redrive(id.clone()).await;
    assert_eq!(redriven.status(), 200);
    let redriven: Value = redriven.json().await.unwrap();
    assert_eq!(
        (&redriven["state"], &redriven["attempts"]),
        (&json!("pending"), &json!(0))
    );
    let got = eventually(Duration::from_secs(30), "the redriven delivery", || async {
        let got = accepted(&hook);
        (!got.is_empty()).then_some(got)
    })
    .await;
    assert_eq!(got[0].0["webhook-id"].to_str().unwrap(), id);
    assert_eq!(got[0].1["data"]["job_id"], job_id.as_str());
    eventually(Duration::from_secs(30), "the gauge to drop", || async {
        let dead = metric(&http, &daemon, "structured_agents_webhooks_dead").await;
        (dead == 0).then_some(())
    })
    .await;
    // The receiver answered before the sender recorded it: poll.
    let by_job = format!("/v1/deliveries?job_id={job_id}");
    eventually(Duration::from_secs(30), "the delivery recorded", || async {
        let page = get(&http, &daemon, &by_job).await;
        (page["deliveries"][0]["state"] == "delivered").then_some(())
    })
    .await;
    // Delivered once; a second redrive is refused.
    let again = redrive(id).await;
    assert_eq!(again.status(), 409);
    let missing = redrive("msg_none".into()).await;
    assert_eq!(missing.status(), 404);
    for path in ["/v1/deliveries?limit=0", "/v1/jobs?limit=1001"] {
        let out = http.get(daemon.url(path)).send().await.unwrap();
        assert_eq!(out.status(), 422, "{path}");
        let body: Value = out.json().await.unwrap();
        assert_eq!(body["error"]["field"], "limit", "{path}: {body}");
    }
    assert_eq!(accepted(&hook).len(), 1);
}
