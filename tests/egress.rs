//! The egress rule on the real daemon (issue 46, item 5): webhooks and a
//! bundle's own URLs may not reach this machine or its networks, in any
//! spelling, unless `egress.allow` names them; `user:pass@` URLs are
//! refused; the allow list compares parsed URLs (a userinfo prefix cannot
//! borrow an allowed port); a name that resolves to the machine is refused
//! where the connection is made; a redirect is not followed; a refusing
//! receiver's answer is kept to 256 bytes.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::IntoResponse;
use common::daemon::{Daemon, Site, client, eventually, get, submit_body};
use common::mock_server;
use serde_json::{Value, json};

const PLAIN: &str = "name: plain\nversion: \"1\"\nmodel: {endpoint: mock, name: m, plugin: openai}\nprompts: {user: \"{{ input }}\"}\n";

/// One attempt per delivery: each case ends in a dead letter at once.
const ONE_ATTEMPT: &str = "[webhooks]\nmax_attempts = 1\ntimeout = \"2s\"\n";

/// What a receiver does with every POST.
#[derive(Clone, Copy)]
enum Answer {
    Accept,
    /// 307 to this port on loopback.
    RedirectTo(u16),
    /// 500 with a 4 KiB page that ends in a secret.
    LeakyError,
}

/// A receiver on 127.0.0.1: its port and how many requests reached it.
async fn receiver(answer: Answer) -> (u16, Arc<AtomicUsize>) {
    let seen = Arc::new(AtomicUsize::new(0));
    let counted = seen.clone();
    let app = axum::Router::new().fallback(move || {
        let counted = counted.clone();
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            match answer {
                Answer::Accept => StatusCode::NO_CONTENT.into_response(),
                Answer::RedirectTo(port) => (
                    StatusCode::TEMPORARY_REDIRECT,
                    [("location", format!("http://127.0.0.1:{port}/hook"))],
                )
                    .into_response(),
                Answer::LeakyError => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("{}db_password=hunter2", "x".repeat(4000)),
                )
                    .into_response(),
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (port, seen)
}

async fn daemon(config: &str) -> (Site, Daemon, structured_agents::mock::MockServer) {
    let server = mock_server("replies:\n  - content: done\n").await;
    let site = Site::new(&server.base_url(), config);
    site.put_bundle("plain", PLAIN);
    let daemon = site.start();
    (site, daemon, server)
}

/// Submits a job with `webhook` → (status, body).
async fn submit_with(daemon: &Daemon, webhook: &str) -> (u16, Value) {
    let answer = client()
        .post(daemon.url("/v1/jobs"))
        .json(&json!({"bundle": "plain", "input": "x", "webhook": webhook}))
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap())
}

/// The job's one delivery once it is dead.
async fn dead_letter(daemon: &Daemon, job: &Value) -> Value {
    let http = client();
    let listing = format!(
        "/v1/deliveries?state=dead&job_id={}",
        job["id"].as_str().unwrap()
    );
    eventually(Duration::from_secs(30), "the dead letter", || async {
        let page = get(&http, daemon, &listing).await;
        page["deliveries"].as_array()?.first().cloned()
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn every_spelling_of_the_machine_and_userinfo_are_refused_at_submit() {
    let (_site, daemon, _server) = daemon(ONE_ATTEMPT).await;
    let (port, seen) = receiver(Answer::Accept).await;
    let own = daemon.base.trim_start_matches("http://").to_string();
    let cases = [
        format!("http://{own}/v1/jobs"),
        format!("http://127.0.0.1:{port}/hook"),
        format!("http://127.1:{port}/hook"),
        format!("http://2130706433:{port}/hook"),
        format!("http://0x7f000001:{port}/hook"),
        format!("http://0177.0.0.1:{port}/hook"),
        format!("http://0:{port}/hook"),
        format!("http://[::1]:{port}/hook"),
        format!("http://[::ffff:127.0.0.1]:{port}/hook"),
        format!("http://localhost:{port}/hook"),
        "http://127.0.0.1:5432/".to_string(),
        "http://127.0.0.1:6379/".to_string(),
        "http://10.0.0.1/steal".to_string(),
        "http://192.168.0.1/".to_string(),
        "http://169.254.169.254/latest/meta-data/".to_string(),
        "http://[fd00::1]/".to_string(),
    ];
    for url in &cases {
        let (status, body) = submit_with(&daemon, url).await;
        assert_eq!(status, 422, "{url}: {body}");
        assert_eq!(body["error"]["field"], "webhook", "{url}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("egress.allow"), "{url}: {message}");
    }
    let (status, body) = submit_with(&daemon, "http://user:pw@hooks.example.com/").await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("user name or password"),
        "{body}"
    );
    assert_eq!(seen.load(Ordering::SeqCst), 0);
}

/// `allow = ["http://127.0.0.1:P"]` admits port P and nothing else: the
/// text `http://127.0.0.1:P@127.0.0.1:Q/` starts the same, but its host
/// is 127.0.0.1:Q (and it carries userinfo).
#[tokio::test(flavor = "multi_thread")]
async fn an_allow_entry_admits_its_own_port_only() {
    let (allowed, allowed_seen) = receiver(Answer::Accept).await;
    let (other, other_seen) = receiver(Answer::Accept).await;
    let config = format!("{ONE_ATTEMPT}\n[egress]\nallow = [\"http://127.0.0.1:{allowed}\"]\n");
    let (_site, daemon, _server) = daemon(&config).await;
    for url in [
        format!("http://127.0.0.1:{allowed}@127.0.0.1:{other}/"),
        format!("http://127.0.0.1:{other}/hook"),
        format!("http://127.0.0.1:{allowed}.evil.example/"),
    ] {
        let (status, body) = submit_with(&daemon, &url).await;
        assert_eq!(status, 422, "{url}: {body}");
    }
    let job = submit_body(
        &client(),
        &daemon,
        json!({"bundle": "plain", "input": "x", "webhook": format!("http://127.1:{allowed}/hook")}),
    )
    .await;
    assert!(job["id"].is_string(), "{job}");
    eventually(Duration::from_secs(30), "the allowed delivery", || async {
        (allowed_seen.load(Ordering::SeqCst) > 0).then_some(())
    })
    .await;
    assert_eq!(other_seen.load(Ordering::SeqCst), 0);
}

/// A redirect is a second URL nobody checked: the delivery fails with the
/// 3xx; the loopback port it points at is never reached.
#[tokio::test(flavor = "multi_thread")]
async fn a_redirect_to_the_machine_is_not_followed() {
    let (target, target_seen) = receiver(Answer::Accept).await;
    let (redirector, redirector_seen) = receiver(Answer::RedirectTo(target)).await;
    let config = format!("{ONE_ATTEMPT}\n[egress]\nallow = [\"http://127.0.0.1:{redirector}\"]\n");
    let (_site, daemon, _server) = daemon(&config).await;
    let job = submit_body(
        &client(),
        &daemon,
        json!({"bundle": "plain", "input": "x", "webhook": format!("http://127.0.0.1:{redirector}/hook")}),
    )
    .await;
    let dead = dead_letter(&daemon, &job).await;
    assert!(
        dead["last_error"].as_str().unwrap().contains("307"),
        "{dead}"
    );
    assert!(redirector_seen.load(Ordering::SeqCst) > 0);
    assert_eq!(
        target_seen.load(Ordering::SeqCst),
        0,
        "the redirect was followed"
    );
}

/// What a refusing receiver answered is kept to 256 bytes: a 4 KiB page
/// (with a secret at its end) does not come back through the API.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_delivery_keeps_at_most_256_bytes_of_the_answer() {
    let (port, _) = receiver(Answer::LeakyError).await;
    let config = format!("{ONE_ATTEMPT}\n[egress]\nallow = [\"http://127.0.0.1:{port}\"]\n");
    let (_site, daemon, _server) = daemon(&config).await;
    let url = format!("http://127.0.0.1:{port}/hook");
    let job = submit_body(
        &client(),
        &daemon,
        json!({"bundle": "plain", "input": "x", "webhook": url}),
    )
    .await;
    let dead = dead_letter(&daemon, &job).await;
    let error = dead["last_error"].as_str().unwrap();
    assert!(error.contains("HTTP 500"), "{error}");
    assert!(!error.contains("hunter2"), "{error}");
    let answer = error
        .split_once("HTTP 500 Internal Server Error: ")
        .unwrap()
        .1;
    assert!(answer.len() <= 256, "{} bytes: {error}", answer.len());
}

/// A host name passes the check at submit (no lookup there); the
/// sender's resolver is where it is judged, on the address the connection
/// would use: this machine's own name resolves to it, so the delivery is
/// refused and the receiver never sees it.
#[tokio::test(flavor = "multi_thread")]
async fn a_name_that_resolves_to_the_machine_is_refused_where_it_connects() {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let addresses: Vec<std::net::IpAddr> = match host.as_str() {
        "" => Vec::new(),
        host => tokio::net::lookup_host((host, 0))
            .await
            .map(|found| found.map(|a| a.ip()).collect())
            .unwrap_or_default(),
    };
    if addresses.is_empty()
        || addresses
            .iter()
            .any(|ip| structured_agents::egress::class(*ip).is_none())
    {
        eprintln!("skipped: {host} does not resolve only to this machine ({addresses:?})");
        return;
    }
    let (port, seen) = receiver(Answer::Accept).await;
    let (_site, daemon, _server) = daemon(ONE_ATTEMPT).await;
    let job = submit_body(
        &client(),
        &daemon,
        json!({"bundle": "plain", "input": "x", "webhook": format!("http://{host}:{port}/hook")}),
    )
    .await;
    let dead = dead_letter(&daemon, &job).await;
    let error = dead["last_error"].as_str().unwrap();
    assert!(
        error.contains("resolves only to") && error.contains("egress.allow"),
        "{error}"
    );
    assert_eq!(seen.load(Ordering::SeqCst), 0);
}

/// A bundle's own remote agent and MCP server URLs on this machine are
/// refused at load, naming the key; the bundle's model endpoint is fenced
/// by the allow list only (a model server on loopback is the usual case).
#[tokio::test(flavor = "multi_thread")]
async fn a_bundles_own_urls_on_the_machine_are_refused_at_load() {
    let (port, seen) = receiver(Answer::Accept).await;
    let (site, daemon, _server) = daemon("").await;
    site.put_bundle(
        "reacher",
        &format!(
            "name: reacher\nversion: \"1\"\nmodel: {{endpoint: \"http://127.0.0.1:9/v1\", name: m}}\nprompts: {{user: \"{{{{ input }}}}\"}}\ntools:\n  - {{name: peer, kind: http_agent, url: \"http://2130706433:{port}/message\"}}\n  - {{name: remote, kind: mcp, server: {{url: \"http://[::ffff:127.0.0.1]:{port}/mcp\"}}}}\n"
        ),
    );
    let http = client();
    let bundle = eventually(Duration::from_secs(30), "the bundle refused", || async {
        let bundle = get(&http, &daemon, "/v1/bundles/reacher").await;
        (bundle["errors"].as_array().is_some_and(|e| !e.is_empty())).then_some(bundle)
    })
    .await;
    assert_ne!(bundle["status"], "ok", "{bundle}");
    let errors = bundle["errors"].to_string();
    assert!(
        errors.contains("tools[0].url")
            && errors.contains("tools[1].server.url")
            && !errors.contains("model.endpoint")
            && errors.contains("egress.allow"),
        "{bundle}"
    );
    assert_eq!(seen.load(Ordering::SeqCst), 0);
}
