//! The front door: no web page the operator opens can drive or read the
//! default daemon (loopback, no token). Proven with a real browser (Debian's
//! headless Chromium) and with hand-made requests for each rule.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::time::Duration;

use common::daemon::{Daemon, Site, client, eventually, get, submit_and_wait};
use common::mock_server;
use serde_json::{Value, json};

const DONE: &str = "replies:\n  - content: done\n";

fn plain_bundle(name: &str) -> String {
    format!(
        "name: {name}\nversion: \"1\"\nmodel: {{endpoint: mock, name: m}}\nprompts: {{user: \"{{{{ input }}}}\"}}\n"
    )
}

/// The sum of a counter's samples with `reason`, from `/metrics`.
async fn refused(http: &reqwest::Client, daemon: &Daemon, reason: &str) -> f64 {
    let text = http
        .get(daemon.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| {
            l.starts_with("structured_agents_http_requests_refused_total")
                && l.contains(&format!("reason=\"{reason}\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn job_count(http: &reqwest::Client, daemon: &Daemon) -> usize {
    get(http, daemon, "/v1/jobs").await["jobs"]
        .as_array()
        .unwrap()
        .len()
}

async fn generation(http: &reqwest::Client, daemon: &Daemon) -> Value {
    get(http, daemon, "/readyz").await["generation"].clone()
}

/// Serves `page` to every request on a loopback port of its own (the
/// attacker's site) until the test ends → the port.
fn serve_page(page: String) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buffer = [0u8; 4096];
            let _ = stream.read(&mut buffer);
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{page}",
                page.len()
            );
            let _ = stream.write_all(response.as_bytes());
        }
    });
    port
}

/// A page on another loopback port, and one reached through a name that
/// resolves to loopback (DNS rebinding), try what a hostile page would:
/// a `text/plain` job submission (a "simple" request browsers send
/// cross-origin without asking), an empty reload, a cancel, and reading the
/// job list. Nothing is created, nothing reloads, nothing is read — and the
/// daemon's refusal counters prove the browser's requests did arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_web_page_in_a_real_browser_cannot_drive_or_read_the_daemon() {
    let server = mock_server(DONE).await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("calc", &plain_bundle("calc"));
    let daemon = site.start();
    let http = client();
    let port = daemon
        .base
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .to_string();
    let before = generation(&http, &daemon).await;
    let (host_before, origin_before, media_before) = (
        refused(&http, &daemon, "host").await,
        refused(&http, &daemon, "origin").await,
        refused(&http, &daemon, "media_type").await,
    );

    let page = format!(
        r#"<!doctype html><html><body><pre id="out">running</pre><script>
const targets = ["http://127.0.0.1:{port}", "http://rebound.test:{port}"];
const job = JSON.stringify({{bundle: "calc", input: "from a web page"}});
(async () => {{
  const out = [];
  for (const d of targets) {{
    for (const [what, url, init] of [
      ["submit", d + "/v1/jobs", {{method: "POST", mode: "no-cors", headers: {{"content-type": "text/plain"}}, body: job}}],
      ["form", d + "/v1/jobs", {{method: "POST", mode: "no-cors", headers: {{"content-type": "application/x-www-form-urlencoded"}}, body: "x=" + job}}],
      ["reload", d + "/v1/reload", {{method: "POST", mode: "no-cors"}}],
      ["read", d + "/v1/jobs", {{}}],
    ]) {{
      try {{
        const r = await fetch(url, init);
        out.push(what + " " + d + " " + r.type + " " + r.status + " " + (r.type === "basic" || r.type === "cors" ? await r.text() : ""));
      }} catch (e) {{
        out.push(what + " " + d + " error " + e);
      }}
    }}
  }}
  document.getElementById("out").textContent = "finished\n" + out.join("\n");
}})();
</script></body></html>"#
    );
    let page_port = serve_page(page);
    let profile = tempfile::tempdir().unwrap();
    let output = tokio::task::spawn_blocking(move || {
        Command::new("chromium")
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--host-resolver-rules=MAP rebound.test 127.0.0.1,MAP attacker.test 127.0.0.1",
                "--virtual-time-budget=15000",
                "--dump-dom",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(format!("http://attacker.test:{page_port}/"))
            .output()
            .expect("Debian's chromium is needed (./scripts/test installs it)")
    })
    .await
    .unwrap();
    let dom = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        dom.contains("finished"),
        "the page's script did not finish:\n{dom}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !dom.contains("\"jobs\""),
        "the page read the job list:\n{dom}"
    );

    assert_eq!(
        job_count(&http, &daemon).await,
        0,
        "a page created a job:\n{dom}"
    );
    assert_eq!(
        generation(&http, &daemon).await,
        before,
        "a page reloaded the daemon"
    );
    // The requests did arrive, and were refused for the right reasons: the
    // rebinding name by Host, the other port's page by its origin.
    assert!(
        refused(&http, &daemon, "host").await >= host_before + 4.0,
        "the rebinding requests were not refused by Host:\n{dom}"
    );
    assert!(
        refused(&http, &daemon, "origin").await >= origin_before + 4.0,
        "the page's requests were not refused by Origin:\n{dom}"
    );
    assert_eq!(refused(&http, &daemon, "media_type").await, media_before);

    // The same daemon still serves a real client.
    let done = submit_and_wait(
        &http,
        &daemon,
        json!({"bundle": "calc", "input": "from the CLI"}),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(done["state"], "succeeded", "{done}");
}

/// `POST` with `body`, `content_type` and extra headers → (status, body).
async fn post(
    http: &reqwest::Client,
    daemon: &Daemon,
    path: &str,
    content_type: Option<&str>,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Value) {
    let mut request = http.post(daemon.url(path)).body(body.to_string());
    if let Some(ct) = content_type {
        request = request.header("content-type", ct);
    }
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_rule_of_the_front_door_answers_with_its_status_and_the_error_shape() {
    let server = mock_server(DONE).await;
    let site = Site::new(&server.base_url(), "");
    // Listed names and origins (restart-only settings, so written first).
    let config = std::fs::read_to_string(site.path().join("config.toml"))
        .unwrap()
        .replace(
            "sse_heartbeat = \"1s\"",
            "sse_heartbeat = \"1s\"\npublic_hosts = [\"agents.example.test\"]\nallowed_origins = [\"http://console.example.test:3000\"]",
        );
    std::fs::write(site.path().join("config.toml"), config).unwrap();
    site.put_bundle("calc", &plain_bundle("calc"));
    let daemon = site.start();
    let http = client();
    let job = r#"{"bundle": "calc", "input": "x"}"#;

    // 415: a body that is not JSON, or that says no type at all. No body
    // at all is an empty body (an empty reload).
    for (ct, body) in [
        (Some("text/plain"), job),
        (Some("application/x-www-form-urlencoded"), "a=b"),
        (None, job),
    ] {
        let (status, error) = post(&http, &daemon, "/v1/jobs", ct, &[], body).await;
        assert_eq!(status, 415, "{ct:?}: {error}");
        assert_eq!(error["error"]["code"], "unsupported_media_type", "{error}");
    }
    let (status, error) = post(&http, &daemon, "/v1/jobs", None, &[], "").await;
    assert_eq!(status, 422, "no body: the missing field is named: {error}");
    assert_eq!(error["error"]["field"], "bundle", "{error}");
    let (status, _) = post(&http, &daemon, "/v1/reload", None, &[], "").await;
    assert_eq!(status, 200);

    // 421: a Host that is not served (DNS rebinding); listed names and IP
    // literals are.
    let (status, error) = post(
        &http,
        &daemon,
        "/v1/jobs",
        Some("application/json"),
        &[("host", "rebound.test")],
        job,
    )
    .await;
    assert_eq!(status, 421, "{error}");
    assert_eq!(error["error"]["code"], "misdirected_host");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("server.public_hosts")
    );
    let (status, error) = post(
        &http,
        &daemon,
        "/v1/jobs",
        Some("application/json"),
        &[("host", "agents.example.test:7860")],
        job,
    )
    .await;
    assert_eq!(status, 201, "{error}");

    // 403: a page of another origin, or one that says it is cross-site.
    for headers in [
        vec![("origin", "http://127.0.0.1:9")],
        vec![("origin", "null")],
        vec![("sec-fetch-site", "cross-site")],
    ] {
        let (status, error) = post(
            &http,
            &daemon,
            "/v1/jobs",
            Some("application/json"),
            &headers,
            job,
        )
        .await;
        assert_eq!(status, 403, "{headers:?}: {error}");
        assert_eq!(error["error"]["code"], "forbidden_origin");
    }
    let refused_read = http
        .get(daemon.url("/v1/jobs"))
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(refused_read.status(), 403, "reading is refused too");
    // A listed origin, and the daemon's own, may call.
    let own = daemon.base.trim_end_matches('/').to_string();
    for origin in ["http://console.example.test:3000", own.as_str()] {
        let (status, error) = post(
            &http,
            &daemon,
            "/v1/jobs",
            Some("application/json"),
            &[("origin", origin), ("sec-fetch-site", "same-site")],
            job,
        )
        .await;
        assert_eq!(status, 201, "{origin}: {error}");
    }
    // Health and the API description stay open to all.
    let health = http
        .get(daemon.url("/healthz"))
        .header("host", "rebound.test")
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);

    // /mcp: the MCP SDK's own host check is on again behind the door: an IP
    // literal the door lets through but the daemon does not listen on.
    let (status, _) = post(
        &http,
        &daemon,
        "/mcp",
        Some("application/json"),
        &[("host", "10.1.2.3:7860"), ("accept", "application/json, text/event-stream")],
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
    )
    .await;
    assert!(
        status == 403 || status == 421,
        "the MCP host check is off: {status}"
    );

    eventually(
        Duration::from_secs(10),
        "the refusals are counted",
        || async {
            (refused(&http, &daemon, "media_type").await >= 3.0
                && refused(&http, &daemon, "host").await >= 1.0
                && refused(&http, &daemon, "origin").await >= 4.0)
                .then_some(())
        },
    )
    .await;
}

/// One request layer for every route (issue 49): a POST without a body (no
/// body, no Content-Type — `client.responses.cancel(id)` of the `openai`
/// package) is an empty body wherever a route takes none; a caller without
/// a key hears 401 before anything about the body (415); a method a route
/// does not serve is 405 with `Allow`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_less_posts_are_empty_bodies_401_comes_before_415_and_wrong_methods_are_405() {
    let server = mock_server(DONE).await;
    let site = Site::new(&server.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    site.put_bundle("calc", &plain_bundle("calc"));
    let token = common::daemon::new_key(
        &site.path().join("keys.toml"),
        "ops",
        &["--scopes", "admin"],
    );
    let daemon = site.start();
    let http = common::daemon::client_as(&token);
    let anonymous = client();
    let done = submit_and_wait(
        &http,
        &daemon,
        json!({"bundle": "calc", "input": "x"}),
        Duration::from_secs(30),
    )
    .await;
    let id = done["id"].as_str().unwrap();

    let body_less = [
        format!("/v1/jobs/{id}/cancel"),
        format!("/v1/jobs/{id}/rerun"),
        format!("/v1/responses/resp_{id}/cancel"),
        "/v1/reload".to_string(),
        "/v1/bundles/calc/tools/nothing/run".to_string(),
        "/v1/bundles/calc/tools/nothing:run".to_string(),
        "/v1/schedules/nightly/pause".to_string(),
        "/v1/schedules/nightly/resume".to_string(),
        "/v1/schedules/nightly/run".to_string(),
        "/v1/deliveries/1/redrive".to_string(),
        "/mcp".to_string(),
    ];
    for path in &body_less {
        let answer = http.post(daemon.url(path)).send().await.unwrap();
        let status = answer.status().as_u16();
        let body = answer.text().await.unwrap();
        assert_ne!(
            status, 415,
            "{path}: a body-less POST is an empty body: {body}"
        );
        assert!(
            !body.contains("invalid JSON body"),
            "{path}: no body is no JSON error: {body}"
        );
        let (status, error) = post(&anonymous, &daemon, path, Some("text/plain"), &[], "x").await;
        assert_eq!(status, 401, "{path}: the key is asked first: {error}");
    }
    // With a key, a body is still JSON or refused.
    let (status, error) = post(&http, &daemon, "/v1/reload", Some("text/plain"), &[], "x").await;
    assert_eq!(status, 415, "{error}");
    // Those the body-less POSTs reached answered as their routes do.
    let (status, reloaded) = post(&http, &daemon, "/v1/reload", None, &[], "").await;
    assert_eq!(status, 200, "{reloaded}");
    let (status, rerun) = post(
        &http,
        &daemon,
        &format!("/v1/jobs/{id}/rerun"),
        None,
        &[],
        "",
    )
    .await;
    assert!(status == 200 || status == 201, "{status}: {rerun}");

    // A method the route does not serve: 405 naming the ones it does.
    for (path, allowed) in [
        (format!("/v1/jobs/{id}"), "GET"),
        ("/v1/bundles".to_string(), "GET"),
        ("/v1/models".to_string(), "GET"),
        (format!("/v1/jobs/{id}/cancel"), "POST"),
        ("/api/agents".to_string(), "GET"),
        ("/healthz".to_string(), "GET"),
    ] {
        for client in [&http, &anonymous] {
            let answer = client
                .put(daemon.url(&path))
                .header("content-type", "application/json")
                .body("{}")
                .send()
                .await
                .unwrap();
            assert_eq!(answer.status(), 405, "PUT {path}");
            let allow = answer.headers()["allow"].to_str().unwrap().to_string();
            assert!(allow.contains(allowed), "PUT {path}: Allow: {allow}");
            let error: Value = answer.json().await.unwrap();
            assert_eq!(error["error"]["code"], "method_not_allowed", "{error}");
        }
    }
}
