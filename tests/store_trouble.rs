//! The queue store in trouble, through the real binary: the state directory
//! is private whatever the umask; a queue file deleted under a running
//! daemon fails `/readyz`; a start that finds the queue missing from a used
//! state directory refuses; a PostgreSQL outage answers submits 503 with
//! `Retry-After` (the connection to the server goes through a proxy the test
//! cuts, so the shared server keeps running).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::daemon::{Daemon, Site, client, eventually, metric, post_json, submit};
use common::mock_server;
use common::postgres::Schema;
use serde_json::json;
use structured_agents::mock::MockServer;

const BUNDLE: &str = r#"name: b
version: "1"
model:
  endpoint: mock
  name: mock-model
prompts:
  system: "s"
  user: "{{ input }}"
"#;

async fn site() -> (MockServer, Site) {
    let mock = mock_server("replies:\n  - content: done\n").await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle("b", BUNDLE);
    (mock, site)
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

async fn readyz(http: &reqwest::Client, daemon: &Daemon) -> u16 {
    http.get(daemon.url("/readyz"))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_directory_and_its_files_are_private_to_the_daemon_user() {
    let (_mock, site) = site().await;
    let state = site.path().join("state");
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
    let daemon = site.start();
    let http = client();
    submit(&http, &daemon, "b", "x").await;
    assert_eq!(mode(&state), 0o700);
    for name in ["queue.db", "queue.db-wal", "queue.db-shm", "control.json"] {
        assert_eq!(mode(&state.join(name)), 0o600, "{name}");
    }
    assert!(
        daemon.log().contains("tightened permissions"),
        "{}",
        daemon.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_file_deleted_under_the_daemon_fails_readyz_and_is_logged() {
    let (_mock, site) = site().await;
    let daemon = site.start();
    let http = client();
    submit(&http, &daemon, "b", "x").await;
    assert_eq!(readyz(&http, &daemon).await, 200);
    std::fs::remove_file(site.path().join("state/queue.db")).unwrap();
    assert_eq!(readyz(&http, &daemon).await, 503);
    // A lease already under way when the check failed may still report
    // success once; every write after it is refused.
    eventually(Duration::from_secs(30), "the queue is down in the metrics", || {
        let (http, daemon) = (&http, &daemon);
        async move {
            (metric(http, daemon, "structured_agents_queue_up").await == 0).then_some(())
        }
    })
    .await;
    let log = daemon.log();
    assert!(log.contains("was deleted while the daemon ran"), "{log}");
    assert!(log.contains("queue unreachable"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_over_a_lost_queue_refuses_unless_told_to_begin_a_new_one() {
    let (_mock, site) = site().await;
    let daemon = site.start();
    let http = client();
    submit(&http, &daemon, "b", "x").await;
    assert_eq!(daemon.stop(), Some(0));
    let queue = site.path().join("state/queue.db");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", queue.display()));
    }
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_structured-agents"))
        .args(["serve", "--config"])
        .arg(site.path().join("config.toml"))
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains(&queue.display().to_string()), "{stderr}");
    assert!(stderr.contains("--new-queue"), "{stderr}");
    assert!(!queue.exists());
    let daemon = site.start_with_env(&[("STRUCTURED_AGENTS_NEW_QUEUE", "true")]);
    assert_eq!(readyz(&http, &daemon).await, 200);
    assert!(queue.exists());
}

/// A full disk: the daemon runs in a mount namespace of its own (an
/// unprivileged user namespace: no root needed) with its state directory on
/// a 4 MiB tmpfs, which a helper in the same namespace fills when told to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_answers_submits_503_with_retry_after_and_fails_readyz() {
    let (_mock, site) = site().await;
    let state = site.path().join("state");
    let (fill, filled) = (site.path().join("fill-now"), site.path().join("filled"));
    let script = r#"mount -t tmpfs -o size=4m tmpfs "$STATE" || exit 97
( i=0
  while [ ! -e "$FILL" ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done
  dd if=/dev/zero of="$STATE/filler" bs=4k 2>/dev/null
  touch "$FILLED" ) &
exec "$BIN" serve --config "$CONFIG""#;
    let mut command = std::process::Command::new("unshare");
    command
        .args(["--user", "--map-root-user", "--mount", "sh", "-c", script])
        .env("STATE", &state)
        .env("FILL", &fill)
        .env("FILLED", &filled)
        .env("BIN", env!("CARGO_BIN_EXE_structured-agents"))
        .env("CONFIG", site.path().join("config.toml"));
    let daemon = site.start_command(command);
    let http = client();
    submit(&http, &daemon, "b", "before").await;
    assert_eq!(readyz(&http, &daemon).await, 200);

    std::fs::write(&fill, b"").unwrap();
    eventually(Duration::from_secs(60), "the tmpfs is full", || {
        let filled = filled.clone();
        async move { filled.exists().then_some(()) }
    })
    .await;
    let response = http
        .post(daemon.url("/v1/jobs"))
        .json(&json!({"bundle": "b", "input": "x".repeat(64 * 1024)}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503, "{}", daemon.log());
    assert_eq!(response.headers()["retry-after"], "2");
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unavailable", "{body}");
    assert_eq!(readyz(&http, &daemon).await, 503);
    let log = daemon.log();
    assert!(log.contains("full") || log.contains("No space"), "{log}");
}

/// A TCP proxy to the test PostgreSQL that the test can cut (every
/// connection closed, new ones closed at once) and restore.
struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Proxy {
    async fn start(upstream: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let open = Arc::new(Mutex::new(Vec::new()));
        let (is_cut, conns) = (cut.clone(), open.clone());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if is_cut.load(Ordering::SeqCst) {
                    continue;
                }
                let upstream = upstream.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                conns.lock().unwrap().push(task.abort_handle());
            }
        });
        Self { port, cut, open }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for task in self.open.lock().unwrap().drain(..) {
            task.abort();
        }
    }

    fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_outage_answers_submits_503_with_retry_after() {
    let url = common::postgres::postgres_url();
    let upstream = url
        .split('@')
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap()
        .to_string();
    let proxy = Proxy::start(upstream).await;
    let through_proxy = url.replace(
        url.split('@').nth(1).unwrap().split('/').next().unwrap(),
        &format!("127.0.0.1:{}", proxy.port),
    );
    let schema = Schema::fresh();
    let mut env = schema.daemon_env();
    env.retain(|(key, _)| *key != "STRUCTURED_AGENTS_QUEUE__URL");
    env.push(("STRUCTURED_AGENTS_QUEUE__URL", through_proxy));
    let (_mock, site) = site().await;
    let daemon = site.start_with_env(&env);
    let http = client();
    submit(&http, &daemon, "b", "before").await;

    proxy.cut();
    let response = http
        .post(daemon.url("/v1/jobs"))
        .json(&json!({"bundle": "b", "input": "during"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(
        response.headers()["retry-after"].to_str().unwrap(),
        "2",
        "{:?}",
        response.headers()
    );
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unavailable", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Retry-After"),
        "{body}"
    );
    assert_eq!(readyz(&http, &daemon).await, 503);
    // The OpenAI route too, in its own error shape.
    let response = http
        .post(daemon.url("/v1/chat/completions"))
        .json(&json!({"model": "bundle/b", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["retry-after"], "2");

    proxy.restore();
    eventually(Duration::from_secs(60), "submits work again", || {
        let (http, daemon) = (&http, &daemon);
        async move {
            let (status, _) = post_json(
                http,
                daemon,
                "/v1/jobs",
                json!({"bundle": "b", "input": "after"}),
            )
            .await;
            (200..300).contains(&status).then_some(())
        }
    })
    .await;
    assert_eq!(readyz(&http, &daemon).await, 200);
}
