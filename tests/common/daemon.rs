//! Starts the real `structured-agents serve` binary in a temp directory with
//! a config pointing at a mock model server, and talks to its API.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The lease of a daemon a test kills (SIGKILL) so that a restart or another
/// daemon takes its jobs over, which happens only once that lease has run
/// out: 2 s instead of the default 30 s. Only the daemon that dies needs it;
/// the daemons that take over keep the default, under which only a stall of
/// some 20 s (heartbeats go out every third of the lease) could hand a job
/// they run to a second worker.
pub const SHORT_LEASE: (&str, &str) = ("STRUCTURED_AGENTS_QUEUE__LEASE", "2s");

pub struct Daemon {
    pub child: Child,
    pub base: String,
    pub root: PathBuf,
    pub stderr_log: PathBuf,
}

/// A temp directory laid out like a deployment: config.toml, bundles/, models/, state/.
pub struct Site {
    pub dir: tempfile::TempDir,
}

impl Site {
    /// `endpoint_url` is the mock server's base URL (…/v1).
    pub fn new(endpoint_url: &str, extra_config: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["bundles", "models", "state", "plugins"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
        }
        let config = format!(
            r#"[server]
listen = "127.0.0.1:0"
sse_heartbeat = "1s"

[paths]
bundles_dir = "bundles"
models_dir = "models"
plugins_dir = "plugins"
state_dir = "state"

[queue]
workers = 8
lease = "30s"
max_attempts = 3
backoff_base = "50ms"
backoff_max = "200ms"
drain_timeout = "5s"
poll_interval = "50ms"

[endpoints.mock]
base_url = "{endpoint_url}"
request_timeout = "10s"
max_retries = 1
max_concurrent = 64

{extra_config}
"#
        );
        std::fs::write(dir.path().join("config.toml"), config).unwrap();
        Self { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes bundles/<dir>/bundle.yaml atomically (write + rename, like an operator's `mv`).
    pub fn put_bundle(&self, dir: &str, yaml: &str) {
        let staging = self.path().join(format!(".staging-{dir}"));
        let _ = std::fs::remove_dir_all(&staging);
        std::fs::create_dir_all(&staging).unwrap();
        std::fs::write(staging.join("bundle.yaml"), yaml).unwrap();
        let target = self.path().join("bundles").join(dir);
        if target.exists() {
            let tmp = target.join("bundle.yaml.tmp");
            std::fs::write(&tmp, yaml).unwrap();
            std::fs::rename(&tmp, target.join("bundle.yaml")).unwrap();
            std::fs::remove_dir_all(&staging).unwrap();
        } else {
            std::fs::rename(&staging, &target).unwrap();
        }
    }

    pub fn start(&self) -> Daemon {
        self.start_with_env::<&str>(&[])
    }

    /// Starts `command`, a `serve` of this site set up by the caller (a
    /// wrapper around the binary, say), and waits for its address.
    pub fn start_command(&self, command: Command) -> Daemon {
        launch(command, self.path())
    }

    /// Starts `serve` with `env` added to its environment (values as
    /// literals or as the `String`s `postgres::Schema::daemon_env` makes).
    pub fn start_with_env<V: AsRef<std::ffi::OsStr>>(&self, env: &[(&str, V)]) -> Daemon {
        let mut command = Command::new(env!("CARGO_BIN_EXE_structured-agents"));
        command
            .args(["serve", "--config"])
            .arg(self.path().join("config.toml"));
        for (k, v) in env {
            command.env(k, v);
        }
        launch(command, self.path())
    }
}

/// `structured-agents serve` as the README's quick start runs it: from the
/// repository, on the embedded defaults (config/bundles, each bundle's
/// scripted endpoint), except a random port and the state in `state_dir`.
pub fn serve_embedded_defaults(state_dir: &Path) -> Daemon {
    let mut command = Command::new(env!("CARGO_BIN_EXE_structured-agents"));
    command
        .arg("serve")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("STRUCTURED_AGENTS_CONFIG")
        .env("STRUCTURED_AGENTS_SERVER__LISTEN", "127.0.0.1:0")
        .env("STRUCTURED_AGENTS_PATHS__STATE_DIR", state_dir);
    launch(command, state_dir)
}

/// Spawns `command` (a `serve`), its log in `root`, and waits for its address.
fn launch(mut command: Command, root: &Path) -> Daemon {
    let stderr_log = root.join(format!(
        "daemon-{}.log",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    command
        .env("SA_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr_log).unwrap());
    let mut child = command.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(addr) = line.strip_prefix("listening on ") {
                let _ = tx.send(addr.to_string());
            }
        }
    });
    let base = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| {
            panic!(
                "daemon did not start; log:\n{}",
                std::fs::read_to_string(&stderr_log).unwrap_or_default()
            )
        });
    Daemon {
        child,
        base,
        root: root.to_path_buf(),
        stderr_log,
    }
}

impl Daemon {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr_log).unwrap_or_default()
    }

    /// Waits until the daemon has killed itself at `failpoint` (armed with
    /// `SA_FAILPOINTS`); fails if it exited otherwise or never got there.
    pub fn wait_killed_at(&mut self, failpoint: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(
                    self.log().contains(&format!("failpoint {failpoint}")),
                    "the daemon exited ({status}) without reaching failpoint {failpoint}; log:\n{}",
                    self.log()
                );
                return;
            }
            assert!(
                Instant::now() < deadline,
                "failpoint {failpoint} never fired; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), signal).unwrap();
    }

    /// SIGTERM and wait; returns the exit code.
    pub fn stop(mut self) -> Option<i32> {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "daemon did not stop; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the CLI against the daemon at `base` (`--server`) with `stdin` as
/// its input, to its end (blocking: call it from `spawn_blocking`).
pub fn run_cli(base: &str, args: &[&str], stdin: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_structured-agents"))
        .args(["--server", base])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// `structured-agents keys new NAME ARGS… --file FILE`, as an operator runs
/// it: the token it prints (once).
pub fn new_key(file: &Path, name: &str, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_structured-agents"))
        .args(["keys", "new", name, "--file"])
        .arg(file)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(token.starts_with("sa_"), "{token}");
    token
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// A client that presents API key `token` on every request.
pub fn client_as(token: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        reqwest::header::HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

pub async fn submit(http: &reqwest::Client, daemon: &Daemon, bundle: &str, input: &str) -> Value {
    submit_body(http, daemon, json!({"bundle": bundle, "input": input})).await
}

/// POSTs `body` as JSON to `path`: the status and the answer, whatever
/// they are.
pub async fn post_json(
    http: &reqwest::Client,
    daemon: &Daemon,
    path: &str,
    body: Value,
) -> (u16, Value) {
    let response = http
        .post(daemon.url(path))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// Submits a job body (any of the API's fields) and returns the job.
pub async fn submit_body(http: &reqwest::Client, daemon: &Daemon, body: Value) -> Value {
    let (status, job) = post_json(http, daemon, "/v1/jobs", body).await;
    assert!((200..300).contains(&status), "{status}: {job}");
    job
}

/// Submits a job body and waits until the job reaches a terminal state.
pub async fn submit_and_wait(
    http: &reqwest::Client,
    daemon: &Daemon,
    body: Value,
    within: Duration,
) -> Value {
    let job = submit_body(http, daemon, body).await;
    wait_terminal(http, daemon, job["id"].as_str().unwrap(), within).await
}

pub async fn get(http: &reqwest::Client, daemon: &Daemon, path: &str) -> Value {
    http.get(daemon.url(path))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The lines of a file a test's tools write their side effects to (none
/// when it does not exist yet).
pub fn file_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The samples of the daemon's `/metrics` whose series starts with
/// `prefix`: the whole series (name and labels) → its value.
pub async fn metric_samples(
    http: &reqwest::Client,
    daemon: &Daemon,
    prefix: &str,
) -> std::collections::BTreeMap<String, u64> {
    let text = http
        .get(daemon.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_string(), value.parse::<f64>().ok()? as u64))
        })
        .collect()
}

/// One sample's value in the daemon's `/metrics` (0 when absent).
pub async fn metric(http: &reqwest::Client, daemon: &Daemon, series: &str) -> u64 {
    metric_samples(http, daemon, series)
        .await
        .get(series)
        .copied()
        .unwrap_or(0)
}

/// Polls until the job reaches a terminal state.
pub async fn wait_terminal(
    http: &reqwest::Client,
    daemon: &Daemon,
    id: &str,
    within: Duration,
) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let job = get(http, daemon, &format!("/v1/jobs/{id}")).await;
        if matches!(
            job["state"].as_str(),
            Some("succeeded" | "failed" | "cancelled" | "dead")
        ) {
            return job;
        }
        assert!(
            Instant::now() < deadline,
            "job {id} did not finish: {job}\nlog:\n{}",
            daemon.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `check` until it returns Some, or panics after `within`.
pub async fn eventually<T, F, Fut>(within: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reads a whole SSE stream (until `end` or `stop_after` events) → (id, event, data) triples.
pub async fn read_sse(
    http: &reqwest::Client,
    url: &str,
    last_event_id: Option<u64>,
    stop_after: Option<usize>,
) -> Vec<(Option<u64>, String, String)> {
    let mut request = http.get(url);
    if let Some(id) = last_event_id {
        request = request.header("Last-Event-ID", id.to_string());
    }
    read_sse_response(request.send().await.unwrap(), stop_after).await
}

/// Reads an SSE response like [`read_sse`]; for a test that acts once the
/// stream is open (its response has arrived) and before reading it.
pub async fn read_sse_response(
    response: reqwest::Response,
    stop_after: Option<usize>,
) -> Vec<(Option<u64>, String, String)> {
    use eventsource_stream::Eventsource;
    use futures::StreamExt;
    assert!(response.status().is_success(), "{}", response.status());
    let mut stream = response.bytes_stream().eventsource();
    let mut out = Vec::new();
    while let Some(Ok(event)) = stream.next().await {
        let done = event.event == "end";
        out.push((event.id.parse().ok(), event.event, event.data));
        if done || stop_after.is_some_and(|n| out.len() >= n) {
            break;
        }
    }
    out
}

/// The stored events of a finished job (its `event` entries' data, in order).
pub async fn job_events(http: &reqwest::Client, daemon: &Daemon, id: &str) -> Vec<Value> {
    read_sse(
        http,
        &daemon.url(&format!("/v1/jobs/{id}/events")),
        None,
        None,
    )
    .await
    .into_iter()
    .filter(|(_, kind, _)| kind == "event")
    .map(|(_, _, data)| serde_json::from_str(&data).unwrap())
    .collect()
}

/// A `tools:` section with one `charge` tool of `effect` that appends
/// `charged <idempotency key>` to `effects` and then runs until its daemon
/// is gone — for tests that kill the daemon while a side effect is under
/// way. Like a well-behaved backend it honours its key: a repeated call
/// (a resumed `idempotent` or `read_only` one) finds its line and answers
/// at once without charging again.
pub fn charge_tools(effects: &Path, effect: &str) -> String {
    let effects = effects.display();
    format!(
        "tools:\n  - name: charge\n    kind: process\n    effect: {effect}\n    timeout: 10m\n    command: [python3, -c, \"import os,time; k='charged ' + os.environ['SA_IDEMPOTENCY_KEY'] + chr(10); seen=os.path.exists('{effects}') and k in open('{effects}').read()\\nif not seen:\\n  f=open('{effects}','a'); f.write(k); f.close(); p=os.getppid()\\n  while os.getppid() == p: time.sleep(0.05)\\nprint('{{}}')\"]\n"
    )
}

/// Kills the daemon (SIGKILL) once a `charge` tool (see [`charge_tools`])
/// has written its line to `effects`: while the side effect is under way.
pub async fn kill_while_charging(daemon: Daemon, effects: &Path) {
    eventually(Duration::from_secs(60), "the charge is written", || async {
        (!file_lines(effects).is_empty()).then_some(())
    })
    .await;
    daemon.kill9();
}

/// Polls until the job has left `queued` and `running` (it finished, or
/// parked in `needs_attention`) and returns it.
pub async fn wait_settled(http: &reqwest::Client, daemon: &Daemon, id: &str) -> Value {
    eventually(Duration::from_secs(60), "the job settles", || async {
        let job = get(http, daemon, &format!("/v1/jobs/{id}")).await;
        (job["state"] != "queued" && job["state"] != "running").then_some(job)
    })
    .await
}

/// Waits until the job parks in `needs_attention` on a call of the `charge`
/// tool (see [`charge_tools`]) and returns its pending call.
pub async fn parked_on_charge(http: &reqwest::Client, daemon: &Daemon, id: &str) -> Value {
    let parked = wait_settled(http, daemon, id).await;
    assert_eq!(
        parked["state"],
        "needs_attention",
        "{parked}\n{}",
        daemon.log()
    );
    assert_eq!(parked["pending_call"]["tool"], "charge", "{parked}");
    parked["pending_call"].clone()
}

/// Resolves a job parked on a `charge` call by skipping it with a result:
/// the operator says the charge happened.
pub async fn skip_charge(http: &reqwest::Client, daemon: &Daemon, id: &str) {
    let skip = json!({"action": "skip", "output": "{\"charged\": true}"});
    resolve(http, daemon, id, skip).await;
}

/// `POST /v1/jobs/{id}/resolve` with `body`, which must be accepted.
pub async fn resolve(http: &reqwest::Client, daemon: &Daemon, id: &str, body: Value) -> Value {
    let response = http
        .post(daemon.url(&format!("/v1/jobs/{id}/resolve")))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let job: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{job}");
    job
}
