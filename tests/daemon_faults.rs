//! Faults at the API edge, through the real daemon binary: blank and reused
//! idempotency keys, and clients that go away mid-request.

mod common;

use common::daemon::{Daemon, Site, client, get, metric_samples, wait_terminal};
use common::mock_server;
use serde_json::{Value, json};
use structured_agents::mock::MockServer;

fn bundle_yaml(name: &str) -> String {
    format!(
        r#"name: {name}
version: "1"
model:
  endpoint: mock
  name: mock-model
prompts:
  system: "bundle {name}"
  user: "{{{{ input }}}}"
"#
    )
}

async fn start(bundles: &[&str]) -> (MockServer, Site, Daemon) {
    let mock = mock_server("replies:\n  - content: done\n").await;
    let site = Site::new(&mock.base_url(), "");
    for name in bundles {
        site.put_bundle(name, &bundle_yaml(name));
    }
    let daemon = site.start();
    (mock, site, daemon)
}

/// POSTs a job body (with an optional `Idempotency-Key` header) → (status, body).
async fn post(
    http: &reqwest::Client,
    daemon: &Daemon,
    body: Value,
    header_key: Option<&str>,
) -> (u16, Value) {
    let mut request = http.post(daemon.url("/v1/jobs")).json(&body);
    if let Some(key) = header_key {
        request = request.header("Idempotency-Key", key);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blank_idempotency_keys_are_refused_naming_the_field() {
    let (_mock, _site, daemon) = start(&["b"]).await;
    let http = client();
    for key in ["", "   "] {
        let (status, body) = post(
            &http,
            &daemon,
            json!({"bundle": "b", "input": "x", "idempotency_key": key}),
            None,
        )
        .await;
        assert_eq!(status, 422, "{key:?}: {body}");
        assert_eq!(body["error"]["field"], "idempotency_key", "{body}");
        assert!(
            body["error"]["message"].as_str().unwrap().contains("empty"),
            "{body}"
        );
    }
    let (status, body) = post(
        &http,
        &daemon,
        json!({"bundle": "b", "input": "x"}),
        Some(""),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["field"], "Idempotency-Key", "{body}");

    // Nothing was queued by the refused submissions.
    let jobs = get(&http, &daemon, "/v1/jobs").await;
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 0, "{jobs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_reused_for_a_different_job_is_a_conflict_naming_the_job() {
    let (_mock, _site, daemon) = start(&["b", "c"]).await;
    let http = client();
    let original = json!({"bundle": "b", "input": "one", "variables": {"v": 1, "w": 2}, "idempotency_key": "k-1"});
    let (status, first) = post(&http, &daemon, original.clone(), None).await;
    assert_eq!(status, 201, "{first}");
    let id = first["id"].as_str().unwrap().to_string();

    // The same job again (variables in another order) is the idempotent repeat.
    let reordered = json!({"bundle": "b", "input": "one", "variables": {"w": 2, "v": 1}, "idempotency_key": "k-1"});
    let (status, again) = post(&http, &daemon, reordered, None).await;
    assert_eq!((status, again["id"].as_str()), (200, Some(id.as_str())));

    let changed = [
        (
            "bundle",
            json!({"bundle": "c", "input": "one", "variables": {"v": 1, "w": 2}, "idempotency_key": "k-1"}),
        ),
        (
            "input",
            json!({"bundle": "b", "input": "two", "variables": {"v": 1, "w": 2}, "idempotency_key": "k-1"}),
        ),
        (
            "variables",
            json!({"bundle": "b", "input": "one", "variables": {"v": 1}, "idempotency_key": "k-1"}),
        ),
    ];
    for (what, body) in changed {
        let (status, error) = post(&http, &daemon, body, None).await;
        assert_eq!(status, 409, "{what}: {error}");
        assert_eq!(error["error"]["code"], "idempotency_conflict", "{error}");
        assert_eq!(error["error"]["field"], "idempotency_key", "{error}");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&id) && message.contains(what),
            "{what}: {message}"
        );
    }

    // The header form is checked the same way.
    let (status, error) = post(
        &http,
        &daemon,
        json!({"bundle": "b", "input": "three", "variables": {"v": 1}}),
        Some("k-1"),
    )
    .await;
    assert_eq!(status, 409, "{error}");
    assert!(
        error["error"]["message"].as_str().unwrap().contains(&id),
        "{error}"
    );
    assert_eq!(daemon.stop(), Some(0));
}

/// Sum of `structured_agents_jobs_submitted_total` over its labels.
async fn submitted_counter(http: &reqwest::Client, daemon: &Daemon) -> u64 {
    metric_samples(http, daemon, "structured_agents_jobs_submitted_total")
        .await
        .values()
        .sum()
}

async fn jobs_in_table(http: &reqwest::Client, daemon: &Daemon) -> usize {
    let page = get(http, daemon, "/v1/jobs?limit=1000").await;
    page["jobs"].as_array().unwrap().len()
}

/// Clients that send `POST /v1/jobs` and hang up before reading the answer:
/// every job that made it into the table is counted in
/// `structured_agents_jobs_submitted_total`, although the server drops the
/// request handler when it sees the client gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_mid_submit_still_has_its_job_counted() {
    use tokio::io::AsyncWriteExt;
    let (_mock, _site, daemon) = start(&["b"]).await;
    let http = client();
    let addr = daemon.base.trim_start_matches("http://").to_string();
    for i in 0..60 {
        let body = json!({"bundle": "b", "input": format!("hang up {i}")}).to_string();
        let request = format!(
            "POST /v1/jobs HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        // Hang up without reading the response.
        drop(stream);
    }
    // Wait until the submissions have settled: the table stops growing.
    let mut last = usize::MAX;
    let mut unchanged = 0;
    while unchanged < 10 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let now = jobs_in_table(&http, &daemon).await;
        unchanged = if now == last { unchanged + 1 } else { 0 };
        last = now;
    }
    assert!(
        last > 0,
        "no submission reached the queue; the test proves nothing"
    );
    assert_eq!(
        submitted_counter(&http, &daemon).await,
        last as u64,
        "jobs in the table but not counted\nlog:\n{}",
        daemon.log()
    );
    assert_eq!(daemon.stop(), Some(0));
}

async fn post_batch(http: &reqwest::Client, daemon: &Daemon, jobs: Value) -> (u16, Value) {
    let response = http
        .post(daemon.url("/v1/jobs/batch"))
        .json(&json!({"jobs": jobs}))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// `POST /v1/jobs/batch`: all jobs or none. A bad job is a 422 naming its
/// index; a key reused for other content a 409 naming its index; keys are
/// honoured within the batch and across batches; every created job is
/// counted and runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_submit_is_all_or_nothing_and_honours_each_key() {
    let (_mock, _site, daemon) = start(&["b"]).await;
    let http = client();
    let bad = [
        (
            json!({"bundle": "nope", "input": "x"}),
            "jobs[2].bundle",
            422,
        ),
        (
            json!({"bundle": "b", "input": "x", "run_at": "soon"}),
            "jobs[2].run_at",
            422,
        ),
        (
            json!({"bundle": "b", "input": "x", "idempotency_key": " "}),
            "jobs[2].idempotency_key",
            422,
        ),
    ];
    for (job, field, status) in bad {
        let jobs = json!([{"bundle": "b", "input": "a"}, {"bundle": "b", "input": "b"}, job]);
        let (got, body) = post_batch(&http, &daemon, jobs).await;
        assert_eq!(got, status, "{body}");
        assert_eq!(body["error"]["field"], field, "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("job 2 of the batch"),
            "{body}"
        );
    }
    let (status, body) = post_batch(&http, &daemon, json!([])).await;
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (422, Some("jobs"))
    );
    assert_eq!(
        jobs_in_table(&http, &daemon).await,
        0,
        "refused batches queue nothing"
    );

    let jobs = json!([
        {"bundle": "b", "input": "one", "idempotency_key": "k1"},
        {"bundle": "b", "input": "two"},
        {"bundle": "b", "input": "one", "idempotency_key": "k1"},
    ]);
    let (status, first) = post_batch(&http, &daemon, jobs.clone()).await;
    assert_eq!(status, 201, "{first}");
    assert_eq!(first["created"], json!([true, true, false]), "{first}");
    let ids: Vec<&str> = first["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids[0], ids[2],
        "a key repeated in the batch names the first job"
    );
    assert_eq!(first["jobs"][1]["input"], "two");

    // A repeat of a keyed job is answered with it; nothing new → 200.
    let (status, again) = post_batch(
        &http,
        &daemon,
        json!([{"bundle": "b", "input": "one", "idempotency_key": "k1"}]),
    )
    .await;
    assert_eq!(
        (status, again["jobs"][0]["id"].as_str()),
        (200, Some(ids[0])),
        "{again}"
    );

    // A key reused for other content refuses the whole batch, naming the index.
    let jobs = json!([{"bundle": "b", "input": "three"}, {"bundle": "b", "input": "other", "idempotency_key": "k1"}]);
    let (status, conflict) = post_batch(&http, &daemon, jobs).await;
    assert_eq!(status, 409, "{conflict}");
    assert_eq!(
        conflict["error"]["field"], "jobs[1].idempotency_key",
        "{conflict}"
    );
    assert!(
        conflict["error"]["message"]
            .as_str()
            .unwrap()
            .contains(ids[0]),
        "{conflict}"
    );
    assert_eq!(
        jobs_in_table(&http, &daemon).await,
        2,
        "the refused batch queued nothing"
    );

    assert_eq!(submitted_counter(&http, &daemon).await, 2);
    for id in [ids[0], ids[1]] {
        let job = wait_terminal(&http, &daemon, id, std::time::Duration::from_secs(60)).await;
        assert_eq!(job["state"], "succeeded", "{job}");
    }
    assert_eq!(daemon.stop(), Some(0));
}
