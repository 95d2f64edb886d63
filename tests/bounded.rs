//! The daemon's bounds at the API edge, through the real binary: thousands
//! of idle connections and event streams leave room for everyone else;
//! caps answer 503 with `Retry-After`; slow headers and bodies are cut off;
//! a `Last-Event-ID` past i64 is refused.

mod common;

use std::time::Duration;

use common::daemon::{Daemon, Site, client, read_sse, submit, submit_body, wait_terminal};
use common::mock_server;
use serde_json::json;
use structured_agents::mock::MockServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const BUNDLE: &str = r#"name: b
version: "1"
model:
  endpoint: mock
  name: mock-model
prompts:
  system: "s"
  user: "{{ input }}"
"#;

async fn start(env: &[(&str, &str)]) -> (MockServer, Site, Daemon) {
    let mock = mock_server("replies:\n  - content: done\n").await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle("b", BUNDLE);
    let daemon = site.start_with_env(env);
    (mock, site, daemon)
}

fn address(daemon: &Daemon) -> String {
    daemon.base.trim_start_matches("http://").to_string()
}

/// Sends `request` on a new connection and reads the answer's head (up to
/// the blank line), keeping the connection open.
async fn open_with(daemon: &Daemon, request: &str) -> (TcpStream, String) {
    let mut stream = TcpStream::connect(address(daemon)).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    (stream, String::from_utf8_lossy(&head).into_owned())
}

fn get_request(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
}

/// Reads until the daemon closes the connection; the bytes it sent.
async fn until_closed(stream: &mut TcpStream) -> String {
    let mut out = Vec::new();
    // A guard against a daemon that never closes: the test fails, not hangs.
    let read = tokio::time::timeout(Duration::from_secs(60), stream.read_to_end(&mut out)).await;
    assert!(read.is_ok(), "the daemon kept the connection open");
    String::from_utf8_lossy(&out).into_owned()
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Idle sockets and open event streams held by other clients.
const IDLE: usize = 2000;
const STREAMS: usize = 2000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_idle_connections_and_streams_leave_room_for_a_job() {
    let (_mock, _site, daemon) = start(&[
        ("STRUCTURED_AGENTS_SERVER__MAX_CONNECTIONS", "4100"),
        // Room for the follower's stream beside the others.
        (
            "STRUCTURED_AGENTS_SERVER__MAX_EVENT_STREAMS",
            &(STREAMS + 1).to_string(),
        ),
        // One caller (no keys) holds them all: its share is the whole cap.
        (
            "STRUCTURED_AGENTS_SERVER__MAX_EVENT_STREAMS_PER_CALLER",
            &(STREAMS + 1).to_string(),
        ),
        // Long enough that nothing here is cut by a timeout.
        ("STRUCTURED_AGENTS_SERVER__HEADER_TIMEOUT", "10m"),
        ("STRUCTURED_AGENTS_SERVER__IDLE_TIMEOUT", "10m"),
    ])
    .await;
    let http = client();
    let pid = daemon.child.id();
    let before = rss_kib(pid);
    // A job that waits (run_at far ahead): its streams stay open.
    let waiting = submit_body(
        &http,
        &daemon,
        json!({"bundle": "b", "input": "later", "run_at": "2099-01-01T00:00:00Z"}),
    )
    .await;
    let events = format!("/v1/jobs/{}/events", waiting["id"].as_str().unwrap());

    let mut idle = Vec::with_capacity(IDLE);
    for _ in 0..IDLE {
        idle.push(TcpStream::connect(address(&daemon)).await.unwrap());
    }
    let mut streams = Vec::with_capacity(STREAMS);
    for n in 0..STREAMS {
        let (stream, head) = open_with(&daemon, &get_request(&events)).await;
        assert!(head.starts_with("HTTP/1.1 200"), "stream {n}: {head}");
        streams.push(stream);
    }

    // Everyone else: health, a submit, and following its job to the end.
    let health = http.get(daemon.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let job = submit(&http, &daemon, "b", "now").await;
    let id = job["id"].as_str().unwrap();
    let followed = read_sse(
        &http,
        &daemon.url(&format!("/v1/jobs/{id}/events")),
        None,
        None,
    )
    .await;
    let (_, last, data) = followed.last().unwrap();
    assert_eq!(last, "end", "{followed:?}");
    assert!(data.contains("succeeded"), "{data}");
    let finished = wait_terminal(&http, &daemon, id, Duration::from_secs(60)).await;
    assert_eq!(finished["state"], "succeeded");

    let during = rss_kib(pid);
    eprintln!(
        "daemon RSS: {before} KiB before, {during} KiB with {IDLE} idle connections and {STREAMS} event streams open"
    );
    // Generous: the 5,000 streams of the issue took 406 MB.
    assert!(
        during < 200 * 1024,
        "RSS {during} KiB with {IDLE} idle connections and {STREAMS} streams"
    );
    drop(streams);
    drop(idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_connection_cap_a_503_and_others_are_served_again_once_room_frees() {
    let (_mock, _site, daemon) = start(&[
        ("STRUCTURED_AGENTS_SERVER__MAX_CONNECTIONS", "20"),
        ("STRUCTURED_AGENTS_SERVER__HEADER_TIMEOUT", "10m"),
    ])
    .await;
    let mut idle = Vec::new();
    for _ in 0..20 {
        idle.push(TcpStream::connect(address(&daemon)).await.unwrap());
    }
    // The daemon takes the 20 before the next one is refused: wait until
    // a probe is refused (each probe is a new connection).
    let (mut refused, head) = open_with(&daemon, &get_request("/healthz")).await;
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    let lower = head.to_ascii_lowercase();
    assert!(lower.contains("retry-after: 2"), "{head}");
    assert!(lower.contains("connection: close"), "{head}");
    let body = until_closed(&mut refused).await;
    assert!(body.contains("server.max_connections"), "{body}");
    drop(idle);
    let http = client();
    common::daemon::eventually(Duration::from_secs(30), "a connection slot frees", || {
        let http = http.clone();
        let url = daemon.url("/healthz");
        async move {
            let response = http.get(url).send().await.ok()?;
            (response.status() == 200).then_some(())
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_stream_cap_a_503_and_a_stream_again_once_one_ends() {
    let (_mock, _site, daemon) = start(&[
        ("STRUCTURED_AGENTS_SERVER__MAX_EVENT_STREAMS", "2"),
        // One caller (no keys): its share is the whole cap here.
        (
            "STRUCTURED_AGENTS_SERVER__MAX_EVENT_STREAMS_PER_CALLER",
            "2",
        ),
    ])
    .await;
    let http = client();
    let waiting = submit_body(
        &http,
        &daemon,
        json!({"bundle": "b", "input": "later", "run_at": "2099-01-01T00:00:00Z"}),
    )
    .await;
    let events = format!("/v1/jobs/{}/events", waiting["id"].as_str().unwrap());
    let (first, head) = open_with(&daemon, &get_request(&events)).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let (_second, head) = open_with(&daemon, &get_request(&events)).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let (_refused, head) = open_with(&daemon, &get_request(&events)).await;
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("retry-after: 2"),
        "{head}"
    );
    // Other requests are not streams: served.
    assert_eq!(
        http.get(daemon.url("/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    drop(first);
    common::daemon::eventually(Duration::from_secs(30), "a stream slot frees", || {
        let events = events.clone();
        let daemon = &daemon;
        async move {
            let (_stream, head) = open_with(daemon, &get_request(&events)).await;
            head.starts_with("HTTP/1.1 200").then_some(())
        }
    })
    .await;
}

/// Fair shares: unset, one caller's streams are capped at a quarter of the
/// daemon's (one key opened 2,048 and starved every other key's streams).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_caller_gets_a_fair_share_of_the_stream_cap_by_default() {
    let (_mock, _site, daemon) =
        start(&[("STRUCTURED_AGENTS_SERVER__MAX_EVENT_STREAMS", "8")]).await;
    let http = client();
    let waiting = submit_body(
        &http,
        &daemon,
        json!({"bundle": "b", "input": "later", "run_at": "2099-01-01T00:00:00Z"}),
    )
    .await;
    let events = format!("/v1/jobs/{}/events", waiting["id"].as_str().unwrap());
    let mut open = Vec::new();
    for _ in 0..2 {
        let (stream, head) = open_with(&daemon, &get_request(&events)).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        open.push(stream);
    }
    let (mut refused, head) = open_with(&daemon, &get_request(&events)).await;
    assert!(
        head.starts_with("HTTP/1.1 503"),
        "the third of 8 is past a quarter: {head}"
    );
    let length: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap();
    let mut body = vec![0u8; length];
    refused.read_exact(&mut body).await.unwrap();
    let body = String::from_utf8_lossy(&body);
    assert!(body.contains("max_event_streams_per_caller"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_and_bodies_are_cut_off() {
    let (_mock, _site, daemon) = start(&[
        ("STRUCTURED_AGENTS_SERVER__HEADER_TIMEOUT", "1s"),
        ("STRUCTURED_AGENTS_SERVER__BODY_TIMEOUT", "1s"),
    ])
    .await;
    // Half a request head, then nothing: closed (hyper answers 408 first).
    let mut slow = TcpStream::connect(address(&daemon)).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    until_closed(&mut slow).await;
    // A socket that never sends a byte: closed too.
    let mut silent = TcpStream::connect(address(&daemon)).await.unwrap();
    until_closed(&mut silent).await;
    // Part of a body: 408 naming the setting, then closed.
    let mut partial = TcpStream::connect(address(&daemon)).await.unwrap();
    partial
        .write_all(
            b"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"bundle\":",
        )
        .await
        .unwrap();
    let answer = until_closed(&mut partial).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("server.body_timeout"), "{answer}");
    // Nothing was submitted, and the daemon serves on.
    let http = client();
    let jobs: serde_json::Value = http
        .get(daemon.url("/v1/jobs"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(jobs["jobs"].as_array().map(Vec::len), Some(0), "{jobs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_last_event_id_past_i64_is_a_400_naming_the_header() {
    let (_mock, _site, daemon) = start(&[]).await;
    let http = client();
    let job = submit(&http, &daemon, "b", "x").await;
    let id = job["id"].as_str().unwrap();
    wait_terminal(&http, &daemon, id, Duration::from_secs(30)).await;
    let response = http
        .get(daemon.url(&format!("/v1/jobs/{id}/events")))
        .header("Last-Event-ID", "9223372036854775808")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["field"], "Last-Event-ID", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Last-Event-ID"),
        "{body}"
    );
}
