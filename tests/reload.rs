//! The one reload pipeline, driven as an operator drives it (issue 20): the
//! daemon config reloads live (an endpoint on SIGHUP, the API token), a
//! restart-only key rejects the whole reload with file, line and key, plugins
//! come without a restart, observer plugins hear each daemon event once,
//! superseded MCP servers are stopped, names are stable, trust covers every
//! file, and a running job keeps the model config it started with.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use common::daemon::{Daemon, Site, client, eventually, get, submit, wait_terminal};
use common::{mock_server, python};
use serde_json::{Value, json};

/// One turn: the model answers at once.
const DONE: &str = "replies:\n  - content: done\n";

/// A bundle with no tools on the config's `mock` endpoint.
fn plain_bundle(name: &str) -> String {
    format!(
        "name: {name}\nversion: \"1\"\nmodel: {{endpoint: mock, name: m}}\nprompts: {{user: \"{{{{ input }}}}\"}}\n"
    )
}

/// `POST /v1/reload` (with `token`, if any) → (status, outcome).
async fn reload_as(http: &reqwest::Client, daemon: &Daemon, token: Option<&str>) -> (u16, Value) {
    let mut request = http
        .post(daemon.url("/v1/reload"))
        .json(&serde_json::json!({}));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

async fn reload(http: &reqwest::Client, daemon: &Daemon) -> Value {
    let (status, outcome) = reload_as(http, daemon, None).await;
    assert!(
        status == 200 || status == 422,
        "{status}: {outcome}\n{}",
        daemon.log()
    );
    outcome
}

/// The generation of the snapshot serving now.
async fn generation(http: &reqwest::Client, daemon: &Daemon) -> u64 {
    get(http, daemon, "/v1/bundles").await["generation"]
        .as_u64()
        .unwrap()
}

/// Submits a job and waits until it succeeded; returns it.
async fn run_ok(http: &reqwest::Client, daemon: &Daemon, bundle: &str, input: &str) -> Value {
    let job = submit(http, daemon, bundle, input).await;
    let done = wait_terminal(
        http,
        daemon,
        job["id"].as_str().unwrap(),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    done
}

/// Edits the site's config.toml: `from` (which must be there) becomes `to`.
fn edit_config(site: &Site, from: &str, to: &str) {
    let path = site.path().join("config.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(from), "{from:?} not in the config:\n{text}");
    std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
}

/// Moves a whole bundle directory into `bundles/<dir>` at once (built aside,
/// then renamed, as an operator's `mv`): `files` are (path, content, mode).
fn put_tree(site: &Site, dir: &str, files: &[(&str, &str, u32)]) {
    let staging = site.path().join(format!(".tree-{dir}"));
    let _ = std::fs::remove_dir_all(&staging);
    for (path, content, mode) in files {
        let file = staging.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, content).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(*mode)).unwrap();
    }
    std::fs::rename(&staging, site.path().join("bundles").join(dir)).unwrap();
}

/// A port nobody listens on right now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The example plugins (calculator, audit observer), built once per test
/// process into the plugin tests' own target directory (as tests/plugins.rs
/// does, so this never waits on the outer cargo's build lock). Returns the
/// directory holding the libraries.
fn plugin_libraries() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let target = root.join("target/plugin-tests");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .current_dir(root)
            .args([
                "build",
                "--quiet",
                "-p",
                "sa-plugin-calculator",
                "-p",
                "sa-plugin-audit-observer",
                "--target-dir",
            ])
            .arg(&target)
            .env_remove("SA_CALC_VARIANT")
            .status()
            .expect("cargo must be available to build the example plugins");
        assert!(status.success(), "building the example plugins failed");
        target.join("debug")
    })
}

/// Drops a plugin library into the site's plugins directory the way an
/// operator should: copied aside with mode 0755, then renamed in, so the
/// watcher never sees half a library.
fn drop_plugin(site: &Site, library: &str) {
    let aside = site.path().join(format!(".{library}"));
    std::fs::copy(plugin_libraries().join(library), &aside).unwrap();
    std::fs::set_permissions(&aside, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::rename(&aside, site.path().join("plugins").join(library)).unwrap();
}

/// The processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        // A process may end while we look: then it is not there.
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if String::from_utf8_lossy(&cmdline).contains(marker) {
            pids.push(pid);
        }
    }
    pids
}

/// Waits until exactly one process carries `marker` (stopped MCP servers
/// end asynchronously) and returns its pid; fails listing them otherwise.
async fn one_process_with(marker: &str, daemon: &Daemon) -> i32 {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let pids = processes_with(marker);
        if pids.len() == 1 {
            return pids[0];
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} MCP server processes still run (pids {pids:?}), not one\n{}",
            pids.len(),
            daemon.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The directory's file name of a bundle entry of `GET /v1/bundles`.
fn dir_of(entry: &Value) -> String {
    Path::new(entry["dir"].as_str().unwrap())
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// Change an endpoint's URL in the daemon config and send SIGHUP: the
/// bundle naming it is bound again and the next job goes to the new server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_url_changed_in_the_config_applies_on_sighup() {
    let a = mock_server(DONE).await;
    let b = mock_server(DONE).await;
    let site = Site::new(&a.base_url(), "");
    site.put_bundle("b", &plain_bundle("b"));
    let daemon = site.start();
    let http = client();

    run_ok(&http, &daemon, "b", "to a").await;
    let at_a = a.requests().len();
    assert!(at_a > 0, "the first job never reached server A");
    assert!(b.requests().is_empty());

    let before = get(&http, &daemon, "/v1/bundles/b").await;
    let generation_before = generation(&http, &daemon).await;
    edit_config(
        &site,
        &format!("base_url = \"{}\"", a.base_url()),
        &format!("base_url = \"{}\"", b.base_url()),
    );
    daemon.signal(nix::sys::signal::Signal::SIGHUP);
    // The config file is not in a watched directory: only SIGHUP reloads it.
    // The bundle's identity covers the endpoint it names, so it is bound again.
    eventually(
        Duration::from_secs(30),
        "SIGHUP reloads the config and rebinds the bundle",
        || async {
            let now = get(&http, &daemon, "/v1/bundles/b").await;
            (now["loaded_at"] != before["loaded_at"]).then_some(())
        },
    )
    .await;
    assert!(generation(&http, &daemon).await > generation_before);

    run_ok(&http, &daemon, "b", "to b").await;
    assert!(
        !b.requests().is_empty(),
        "the job after SIGHUP did not reach server B\n{}",
        daemon.log()
    );
    assert_eq!(
        a.requests().len(),
        at_a,
        "server A was asked again after its URL was replaced"
    );
    assert!(
        b.requests()
            .iter()
            .all(|r| r["messages"].to_string().contains("to b")),
        "{:?}",
        b.requests()
    );
}

/// `server.listen` cannot change live: the reload is rejected naming the
/// config file, the line and the key — by `POST /v1/reload` and by the CLI
/// systemd's `ExecReload` runs (exit 2) — and nothing of it applies, not even
/// a live key changed in the same edit (the endpoint's URL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_only_key_rejects_the_whole_reload_with_file_line_and_key() {
    let a = mock_server(DONE).await;
    let b = mock_server(DONE).await;
    let site = Site::new(&a.base_url(), "");
    // A fixed address: the CLI finds the daemon from the config's listen.
    let listen = format!("127.0.0.1:{}", free_port());
    edit_config(
        &site,
        "listen = \"127.0.0.1:0\"",
        &format!("listen = \"{listen}\""),
    );
    site.put_bundle("b", &plain_bundle("b"));
    let daemon = site.start();
    assert_eq!(daemon.base, format!("http://{listen}"));
    let http = client();
    run_ok(&http, &daemon, "b", "before").await;
    let at_a = a.requests().len();
    let generation_before = generation(&http, &daemon).await;

    // One edit: a restart-only key and a live one.
    let moved = format!("127.0.0.1:{}", free_port());
    edit_config(
        &site,
        &format!("listen = \"{listen}\""),
        &format!("listen = \"{moved}\""),
    );
    edit_config(
        &site,
        &format!("base_url = \"{}\"", a.base_url()),
        &format!("base_url = \"{}\"", b.base_url()),
    );
    let config = site.path().join("config.toml");
    let config_name = config.display().to_string();

    let (status, outcome) = reload_as(&http, &daemon, None).await;
    assert_eq!(status, 422, "{outcome}");
    assert_eq!(outcome["result"], "rejected", "{outcome}");
    assert_eq!(outcome["generation"], generation_before, "{outcome}");
    let errors = outcome["errors"].to_string();
    assert!(
        errors.contains(&format!("{config_name}:2")) && errors.contains("server.listen"),
        "{errors}"
    );
    assert!(
        !errors.contains("endpoints"),
        "the live key is not an error: {errors}"
    );

    // Still serving on the old address, on the old snapshot, with the old endpoint.
    assert_eq!(generation(&http, &daemon).await, generation_before);
    run_ok(&http, &daemon, "b", "after the rejected reload").await;
    assert!(
        a.requests().len() > at_a,
        "the job did not go to the running endpoint"
    );
    assert!(
        b.requests().is_empty(),
        "the endpoint change of a rejected reload was applied: {:?}",
        b.requests()
    );

    // The command systemd's ExecReload runs.
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_structured-agents"))
            .args(["reload", "--config"])
            .arg(&config)
            .env_remove("STRUCTURED_AGENTS_SERVER")
            .env_remove("STRUCTURED_AGENTS_TOKEN")
            .env_remove("STRUCTURED_AGENTS_CONFIG")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("{config_name}:2")) && stderr.contains("server.listen"),
        "the CLI must name the file, line and key; stderr:\n{stderr}"
    );
    assert_eq!(generation(&http, &daemon).await, generation_before);
    assert!(b.requests().is_empty(), "{:?}", b.requests());
}

/// Writes `token` as the site's token file and points the config at it.
fn use_token_file(site: &Site, token: &str) -> PathBuf {
    let file = site.path().join("token");
    std::fs::write(&file, format!("{token}\n")).unwrap();
    edit_config(site, "[server]\n", "[server]\ntoken_file = \"token\"\n");
    file
}

async fn status_with(http: &reqwest::Client, daemon: &Daemon, token: &str) -> u16 {
    http.get(daemon.url("/v1/jobs"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// A new token in `server.token_file` applies at the next reload: the old
/// token is refused from then on, the new one works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_token_applies_at_the_next_reload() {
    let server = mock_server(DONE).await;
    let site = Site::new(&server.base_url(), "");
    let token_file = use_token_file(&site, "old-secret");
    let daemon = site.start();
    let http = client();
    assert_eq!(status_with(&http, &daemon, "old-secret").await, 200);
    assert_eq!(status_with(&http, &daemon, "new-secret").await, 401);

    std::fs::write(&token_file, "new-secret\n").unwrap();
    // Nothing watches the token file: the old token holds until a reload.
    assert_eq!(status_with(&http, &daemon, "old-secret").await, 200);
    let (status, outcome) = reload_as(&http, &daemon, Some("old-secret")).await;
    assert_eq!(status, 200, "{outcome}");
    assert_eq!(outcome["result"], "applied", "{outcome}");
    let auth = outcome["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "auth")
        .cloned();
    assert_eq!(
        auth,
        Some(json!({"kind": "auth", "changed": ["token"]})),
        "{outcome}"
    );

    assert_eq!(status_with(&http, &daemon, "old-secret").await, 401);
    assert_eq!(status_with(&http, &daemon, "new-secret").await, 200);
    assert_eq!(
        http.post(daemon.url("/v1/reload"))
            .json(&serde_json::json!({}))
            .send()
            .await
            .unwrap()
            .status(),
        401,
        "a reload needs the token too"
    );
}

/// `systemctl reload` after a token change: the unit's `ExecReload` runs
/// `structured-agents reload --config`, which must reach the daemon (still
/// holding the old token) and apply the new one, exiting 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_token_applies_through_the_reload_command_systemd_runs() {
    let server = mock_server(DONE).await;
    let site = Site::new(&server.base_url(), "");
    let listen = format!("127.0.0.1:{}", free_port());
    edit_config(
        &site,
        "listen = \"127.0.0.1:0\"",
        &format!("listen = \"{listen}\""),
    );
    let token_file = use_token_file(&site, "old-secret");
    let daemon = site.start();
    let http = client();
    std::fs::write(&token_file, "new-secret\n").unwrap();

    let config = site.path().join("config.toml");
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_structured-agents"))
            .args(["reload", "--config"])
            .arg(&config)
            .env_remove("STRUCTURED_AGENTS_SERVER")
            .env_remove("STRUCTURED_AGENTS_TOKEN")
            .env_remove("STRUCTURED_AGENTS_CONFIG")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(status_with(&http, &daemon, "old-secret").await, 401);
    assert_eq!(status_with(&http, &daemon, "new-secret").await, 200);
}

/// A bundle whose plugin tool names a library that is not there is invalid;
/// once the library is dropped into the plugins directory the bundle loads,
/// without a restart, and a job calls the tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_plugin_dropped_in_loads_its_bundle_without_a_restart() {
    let libraries = tokio::task::spawn_blocking(plugin_libraries).await.unwrap();
    assert!(libraries.join("libsa_plugin_calculator.so").exists());
    let script = "replies:\n  - turn: 1\n    tool_calls: [{name: add, arguments: {a: 2, b: 40}}]\n  - turn: 2\n    content: done\n";
    let server = mock_server(script).await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle(
        "calc",
        "name: calc\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\ntools:\n  - {name: add, kind: plugin, plugin: calculator, effect: read_only}\n",
    );
    let daemon = site.start();
    let http = client();

    let before = get(&http, &daemon, "/v1/bundles/calc").await;
    assert_eq!(before["status"], "invalid", "{before}");
    assert!(
        before["last_error"].to_string().contains("calculator"),
        "{before}"
    );
    let refused = http
        .post(daemon.url("/v1/jobs"))
        .json(&json!({"bundle": "calc", "input": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 422);

    drop_plugin(&site, "libsa_plugin_calculator.so");
    // The watcher watches the plugins directory.
    let loaded = eventually(
        Duration::from_secs(30),
        "the watcher loads the plugin and the bundle",
        || async {
            let now = get(&http, &daemon, "/v1/bundles/calc").await;
            (now["status"] == "ok").then_some(now)
        },
    )
    .await;
    assert_eq!(loaded["tools"][0]["name"], "add", "{loaded}");
    assert_eq!(loaded["tools"][0]["kind"], "plugin", "{loaded}");

    run_ok(&http, &daemon, "calc", "add them").await;
    let requests = server.requests();
    let last = requests.last().unwrap()["messages"].to_string();
    assert!(last.contains("42"), "the tool's result: {last}");
}

/// The daemon events an observer plugin's file holds (`{"daemon_event":
/// {...}}` lines) and the kernel events (every other line).
fn audit_lines(path: &Path) -> (Vec<Value>, Vec<Value>) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    // The observer may be writing a line (in pieces): only finished ones.
    let finished = text.rfind('\n').map_or("", |end| &text[..end]);
    let (daemon, kernel): (Vec<Value>, Vec<Value>) = finished
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .partition(|v| v.get("daemon_event").is_some());
    (
        daemon
            .into_iter()
            .map(|v| v["daemon_event"].clone())
            .collect(),
        kernel,
    )
}

fn count_of(events: &[Value], kind: &str) -> usize {
    events.iter().filter(|e| e["type"] == kind).count()
}

/// Waits until the audit file holds the final `JobState` event of `job`:
/// the plugin's queue is first in, first out, so everything published before
/// that job ended is in the file too.
async fn audited_until_end_of(audit: &Path, job: &str) -> (Vec<Value>, Vec<Value>) {
    eventually(
        Duration::from_secs(30),
        "the audit file receives the job's final event",
        || async {
            let (daemon, kernel) = audit_lines(audit);
            kernel
                .iter()
                .any(|e| e["run_id"] == job && e["type"] == "JobState" && e["state"] == "succeeded")
                .then_some((daemon, kernel))
        },
    )
    .await
}

/// An observer plugin dropped into the plugins directory receives the next
/// job's events, and every daemon event exactly once per occurrence: one
/// reload is one `reload_started` and one `reload`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_plugin_dropped_in_hears_the_next_job_and_each_daemon_event_once() {
    tokio::task::spawn_blocking(plugin_libraries).await.unwrap();
    let server = mock_server(DONE).await;
    let scratch = tempfile::tempdir().unwrap();
    let audit = scratch.path().join("audit.jsonl");
    let site = Site::new(
        &server.base_url(),
        &format!(
            "[observers]\nenabled = [\"audit\"]\n\n[observers.config.audit]\npath = \"{}\"\n",
            audit.display()
        ),
    );
    site.put_bundle("b", &plain_bundle("b"));
    let daemon = site.start();
    let http = client();
    run_ok(&http, &daemon, "b", "before the plugin").await;
    assert!(!audit.exists(), "no observer plugin is loaded yet");

    drop_plugin(&site, "libsa_plugin_audit_observer.so");
    // The observer opens its file when it starts, inside the reload and so
    // before the reload's snapshot serves it: a job leased in between is
    // not heard. `plugin_loaded` is published once that snapshot serves,
    // and the observer hears it: the next job is heard.
    eventually(
        Duration::from_secs(30),
        "the watcher loads the observer plugin and serves it",
        || async {
            let loaded = audit.exists()
                && audit_lines(&audit)
                    .0
                    .iter()
                    .any(|e| e["type"] == "plugin_loaded" && e["name"] == "audit");
            loaded.then_some(())
        },
    )
    .await;

    let first = run_ok(&http, &daemon, "b", "after the plugin").await;
    let first_id = first["id"].as_str().unwrap();
    let (daemon_events, kernel) = audited_until_end_of(&audit, first_id).await;
    let kinds: Vec<&str> = kernel
        .iter()
        .filter(|e| e["run_id"] == first_id)
        .filter_map(|e| e["type"].as_str())
        .collect();
    for kind in ["KernelStart", "ModelRequest", "ModelResponse", "KernelEnd"] {
        assert!(kinds.contains(&kind), "{kind} missing: {kinds:?}");
    }
    assert_eq!(
        daemon_events
            .iter()
            .filter(|e| e["type"] == "plugin_loaded" && e["name"] == "audit")
            .count(),
        1,
        "{daemon_events:?}"
    );

    // One reload: each of its daemon events exactly once.
    let generation_before = generation(&http, &daemon).await;
    let (status, outcome) = reload_as(&http, &daemon, None).await;
    assert_eq!(status, 200, "{outcome}");
    assert_eq!(outcome["generation"], generation_before + 1, "{outcome}");
    let second = run_ok(&http, &daemon, "b", "after the reload").await;
    let (after, _) = audited_until_end_of(&audit, second["id"].as_str().unwrap()).await;
    assert_eq!(
        generation(&http, &daemon).await,
        generation_before + 1,
        "another reload ran meanwhile; the counts below would not be one reload's"
    );
    let new = &after[daemon_events.len()..];
    assert_eq!(count_of(new, "reload_started"), 1, "{new:?}");
    assert_eq!(count_of(new, "reload"), 1, "{new:?}");
    let reload = new.iter().find(|e| e["type"] == "reload").unwrap();
    assert_eq!(reload["trigger"], "api", "{reload}");
    assert_eq!(reload["generation"], generation_before + 1, "{reload}");
    assert_eq!(reload["result"], "applied", "{reload}");
    assert_eq!(count_of(new, "plugin_loaded"), 0, "{new:?}");
    assert_eq!(count_of(new, "job_submitted"), 1, "{new:?}");
    assert!(
        new.iter().all(|e| e["type"] != "queue_operation"),
        "{new:?}"
    );
}

/// A bundle whose MCP stdio server is started with `marker` on its command line.
fn mcp_bundle(marker: &str, description: &str) -> String {
    let server = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/mcp/server.py");
    format!(
        "name: mcp\nversion: \"1\"\ndescription: {description:?}\nmodel: {{endpoint: mock, name: m}}\nprompts: {{user: \"{{{{ input }}}}\"}}\ntools:\n  - name: py\n    kind: mcp\n    server: {{command: [{:?}, {:?}, --marker, {:?}], connect_timeout: 30s}}\n    allow: [add]\n    prefix: py_\n",
        python().display().to_string(),
        server.display().to_string(),
        marker
    )
}

/// Five edits of a bundle with an MCP stdio server, each reloaded: the
/// superseded versions' servers are stopped (no job runs them), one remains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_edits_of_an_mcp_bundle_leave_one_server_process() {
    let server = mock_server(DONE).await;
    let site = Site::new(&server.base_url(), "");
    // Unique to this test: its server processes carry it in their argv.
    let marker = site.path().join("mcp-marker").display().to_string();
    site.put_bundle("mcp", &mcp_bundle(&marker, "edit 0"));
    let daemon = site.start();
    let http = client();
    let first = get(&http, &daemon, "/v1/bundles/mcp").await;
    assert_eq!(first["status"], "ok", "{first}\n{}", daemon.log());
    one_process_with(&marker, &daemon).await;

    for edit in 1..=5 {
        site.put_bundle("mcp", &mcp_bundle(&marker, &format!("edit {edit}")));
        let outcome = reload(&http, &daemon).await;
        assert_ne!(outcome["result"], "rejected", "{outcome}");
        // The served content itself is checked in
        // `a_reload_serves_the_files_on_disk_when_an_edit_races_a_reload`.
    }
    run_ok(&http, &daemon, "mcp", "after five edits").await;

    one_process_with(&marker, &daemon).await;
}

/// A bundle rebound by a change outside its directory (its endpoint's URL,
/// on SIGHUP; no file watcher fires): the superseded version's MCP server
/// is stopped without waiting for another reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_rebound_by_a_config_change_stops_its_old_mcp_server() {
    let a = mock_server(DONE).await;
    let b = mock_server(DONE).await;
    let site = Site::new(&a.base_url(), "");
    let marker = site.path().join("mcp-marker").display().to_string();
    site.put_bundle("mcp", &mcp_bundle(&marker, "only"));
    let daemon = site.start();
    let http = client();
    let first = one_process_with(&marker, &daemon).await;

    let before = get(&http, &daemon, "/v1/bundles/mcp").await;
    edit_config(
        &site,
        &format!("base_url = \"{}\"", a.base_url()),
        &format!("base_url = \"{}\"", b.base_url()),
    );
    daemon.signal(nix::sys::signal::Signal::SIGHUP);
    eventually(Duration::from_secs(30), "the bundle is rebound", || async {
        let now = get(&http, &daemon, "/v1/bundles/mcp").await;
        (now["loaded_at"] != before["loaded_at"]).then_some(())
    })
    .await;
    run_ok(&http, &daemon, "mcp", "on b").await;
    assert!(!b.requests().is_empty());

    let left = one_process_with(&marker, &daemon).await;
    assert_ne!(left, first, "the rebound bundle runs a server of its own");
}

/// A FIFO inside a bundle (reading it would hang the reload, or feed it
/// text that is not the bundle's) is refused by name; the bundle's other
/// files never matter. (The race of an edit landing between a reload's
/// parse and its digest is closed by construction: the bundle that serves
/// is parsed from, and digested over, its daemon-owned copy.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_inside_a_bundle_is_refused_not_read() {
    let server = mock_server(DONE).await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("racy", &plain_bundle("racy"));
    let made = Command::new("mkfifo")
        .args(["-m", "644"])
        .arg(site.path().join("bundles/racy/a-data.fifo"))
        .status()
        .unwrap();
    assert!(made.success());
    let daemon = site.start();
    let http = client();
    let outcome = reload(&http, &daemon).await;
    let failed = outcome["errors"].to_string();
    assert!(
        failed.contains("a-data.fifo") && failed.contains("not a regular file"),
        "{outcome}"
    );
    let served = get(&http, &daemon, "/v1/bundles").await;
    assert!(
        served["bundles"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["name"] != "racy" || b["status"] != "ok"),
        "{served}"
    );
}

/// `cp -r bundles/foo bundles/backup-foo`: at the first load the directory
/// named like the bundle serves it, the copy is rejected naming the
/// conflict; a copy made while the daemon runs (sorting first) never takes
/// the name from the directory serving it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_beside_a_bundle_never_takes_its_name() {
    let server = mock_server(DONE).await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("foo", &plain_bundle("foo"));
    let copied = Command::new("cp")
        .arg("-r")
        .arg(site.path().join("bundles/foo"))
        .arg(site.path().join("bundles/backup-foo"))
        .status()
        .unwrap();
    assert!(copied.success());
    let daemon = site.start();
    let http = client();

    let check = |list: Value, copy: &'static str| {
        let live = list["bundles"].as_array().unwrap();
        assert_eq!(live.len(), 1, "{list}");
        assert_eq!(live[0]["name"], "foo", "{list}");
        assert_eq!(live[0]["status"], "ok", "{list}");
        assert_eq!(dir_of(&live[0]), "foo", "{list}");
        let rejected = list["rejected"].as_array().unwrap();
        let entry = rejected
            .iter()
            .find(|r| dir_of(r) == copy)
            .unwrap_or_else(|| panic!("{copy}/ is not rejected: {list}"));
        let error = entry["last_error"].as_str().unwrap();
        assert!(
            error.contains("already served by") && error.contains(copy),
            "{error}"
        );
    };
    // (a) Both there at the first load: backup-foo/ sorts first, foo/ wins.
    check(get(&http, &daemon, "/v1/bundles").await, "backup-foo");
    run_ok(&http, &daemon, "foo", "first").await;

    // (b) A copy that sorts first, made while foo/ serves.
    let copied = Command::new("cp")
        .arg("-r")
        .arg(site.path().join("bundles/foo"))
        .arg(site.path().join("bundles/aaa-foo"))
        .status()
        .unwrap();
    assert!(copied.success());
    let outcome = reload(&http, &daemon).await;
    assert_eq!(outcome["result"], "partial", "{outcome}");
    assert!(
        outcome["failed"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f == "foo"),
        "{outcome}"
    );
    let list = get(&http, &daemon, "/v1/bundles").await;
    check(list.clone(), "aaa-foo");
    check(list, "backup-foo");
    assert_eq!(dir_of(&get(&http, &daemon, "/v1/bundles/foo").await), "foo");
    run_ok(&http, &daemon, "foo", "second").await;
}

/// A world-writable script deep inside a bundle: the reload lists the
/// bundle as failed with an error naming the file and the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_world_writable_script_inside_a_bundle_is_refused() {
    let server = mock_server(DONE).await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("fine", &plain_bundle("fine"));
    let daemon = site.start();
    let http = client();

    let yaml = "name: lax\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\ntools:\n  - {name: x, kind: process, effect: read_only, command: [python3, tools/x.py]}\n";
    put_tree(
        &site,
        "lax",
        &[
            ("bundle.yaml", yaml, 0o644),
            ("tools/x.py", "print('\"x\"')\n", 0o666),
        ],
    );
    let mode = std::fs::metadata(site.path().join("bundles/lax/tools/x.py"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o666);

    let outcome = reload(&http, &daemon).await;
    assert_eq!(outcome["result"], "partial", "{outcome}");
    assert_eq!(outcome["failed"], json!(["lax"]), "{outcome}");
    let errors: Vec<&str> = outcome["errors"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        errors
            .iter()
            .any(|e| e.contains("x.py") && e.contains("chmod go-w")),
        "{errors:?}"
    );
    let lax = get(&http, &daemon, "/v1/bundles/lax").await;
    assert_eq!(lax["status"], "invalid", "{lax}");
    let refused = http
        .post(daemon.url("/v1/jobs"))
        .json(&json!({"bundle": "lax", "input": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 422);
    run_ok(&http, &daemon, "fine", "undisturbed").await;
}

/// A job running when its model config's stop sequences change finishes
/// with the old ones; the job submitted after the reload gets the new ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_finishes_with_the_model_config_it_started_with() {
    // Job 1's first model call is slow, and its tool waits for `go`: its
    // second model call comes only once the test has reloaded and run job 2.
    let script = r#"
replies:
  - match: first-job
    turn: 1
    delay_ms: 1500
    tool_calls: [{name: gate, arguments: {}}]
  - match: first-job
    turn: 2
    content: first done
  - match: second-job
    content: second done
"#;
    let server = mock_server(script).await;
    let site = Site::new(&server.base_url(), "");
    let model = site.path().join("models/qwen.toml");
    std::fs::write(
        &model,
        "plugin = \"qwen\"\ndefault_grammar = \"none\"\nstop = [\"<old>\"]\n",
    )
    .unwrap();
    let started = site.path().join("gate-started");
    let go = site.path().join("gate-go");
    let gate = format!(
        "import os, time\nopen({:?}, 'w').close()\nwhile not os.path.exists({:?}):\n    time.sleep(0.05)\nprint('\"open\"')\n",
        started.display().to_string(),
        go.display().to_string()
    );
    put_tree(
        &site,
        "b",
        &[
            (
                "bundle.yaml",
                "name: b\nversion: \"1\"\nmodel: {endpoint: mock, name: m, plugin: qwen}\nprompts: {user: \"{{ input }}\"}\ntools:\n  - {name: gate, kind: process, effect: read_only, timeout: 5m, command: [python3, tools/gate.py]}\n",
                0o644,
            ),
            ("tools/gate.py", &gate, 0o644),
        ],
    );
    let daemon = site.start();
    let http = client();
    let of = |input: &str| -> Vec<Value> {
        server
            .requests()
            .into_iter()
            .filter(|r| r["messages"].to_string().contains(input))
            .collect()
    };

    let job1 = submit(&http, &daemon, "b", "first-job").await;
    let job1 = job1["id"].as_str().unwrap().to_string();
    eventually(
        Duration::from_secs(30),
        "job 1's first model call reaches the mock",
        || async { (!of("first-job").is_empty()).then_some(()) },
    )
    .await;

    // While that call is in flight: new stop sequences, reloaded.
    let before = get(&http, &daemon, "/v1/bundles/b").await;
    std::fs::write(
        &model,
        "plugin = \"qwen\"\ndefault_grammar = \"none\"\nstop = [\"<new>\"]\n",
    )
    .unwrap();
    let outcome = reload(&http, &daemon).await;
    assert_ne!(outcome["result"], "rejected", "{outcome}");
    eventually(Duration::from_secs(30), "the bundle is rebound", || async {
        let now = get(&http, &daemon, "/v1/bundles/b").await;
        (now["loaded_at"] != before["loaded_at"]).then_some(())
    })
    .await;

    run_ok(&http, &daemon, "b", "second-job").await;
    let second = of("second-job");
    assert!(!second.is_empty());
    for request in &second {
        assert_eq!(request["stop"], json!(["<new>"]), "job 2: {request}");
    }

    // Job 1 is still at its gate: its second model call comes after all this.
    let job1_now = get(&http, &daemon, &format!("/v1/jobs/{job1}")).await;
    assert_eq!(job1_now["state"], "running", "{job1_now}");
    eventually(Duration::from_secs(30), "job 1's tool runs", || async {
        started.exists().then_some(())
    })
    .await;
    std::fs::write(&go, "").unwrap();
    let done = wait_terminal(&http, &daemon, &job1, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    let first = of("first-job");
    assert_eq!(first.len(), 2, "job 1's two model calls: {first:?}");
    for request in &first {
        assert_eq!(request["stop"], json!(["<old>"]), "job 1: {request}");
    }
}

/// `[egress] allow` fences the URLs a bundle names itself: an `http_agent`
/// tool's `url` outside it is refused naming the key and the setting; the
/// fence is a live setting, so widening it and reloading binds the bundle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_url_outside_egress_allow_is_refused_until_the_config_allows_it() {
    let server = mock_server(DONE).await;
    let site = Site::new(
        &server.base_url(),
        "[egress]\nallow = [\"https://agents.allowed.example/\"]\n",
    );
    site.put_bundle(
        "caller",
        "name: caller\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\ntools:\n  - {name: peer, kind: http_agent, url: \"http://127.0.0.1:9/api/agents/x/message\"}\n",
    );
    site.put_bundle("plain", &plain_bundle("plain"));
    let daemon = site.start();
    let http = client();
    let outcome = reload(&http, &daemon).await;
    let errors = outcome["errors"].to_string();
    assert!(
        errors.contains("tools[0].url") && errors.contains("egress.allow"),
        "{outcome}"
    );
    // The named endpoint of the config is always reachable.
    run_ok(&http, &daemon, "plain", "still fine").await;

    edit_config(
        &site,
        "allow = [\"https://agents.allowed.example/\"]",
        "allow = [\"https://agents.allowed.example/\", \"http://127.0.0.1:9/\"]",
    );
    let outcome = reload(&http, &daemon).await;
    assert_eq!(outcome["result"], "applied", "{outcome}");
    assert!(
        outcome["changes"].to_string().contains("caller"),
        "{outcome}"
    );
    let caller = get(&http, &daemon, "/v1/bundles/caller").await;
    assert_eq!(caller["status"], "ok", "{caller}");
}

/// An MCP server reached over HTTP is a URL the bundle names too: outside
/// `egress.allow` the bundle is refused at load naming its file and key,
/// and the daemon never connects to the server (no `initialize` is sent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_server_url_outside_egress_allow_is_refused_before_any_connection() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = connections.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            if stream.is_ok() {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
    });
    let server = mock_server(DONE).await;
    let site = Site::new(
        &server.base_url(),
        "[egress]\nallow = [\"https://agents.allowed.example/\"]\n",
    );
    site.put_bundle(
        "mcp_caller",
        &format!(
            "name: mcp_caller\nversion: \"1\"\nmodel: {{endpoint: mock, name: m}}\nprompts: {{user: \"{{{{ input }}}}\"}}\ntools:\n  - {{name: remote, kind: mcp, server: {{url: \"http://127.0.0.1:{port}/mcp\"}}}}\n"
        ),
    );
    site.put_bundle("plain", &plain_bundle("plain"));
    let daemon = site.start();
    let http = client();
    let outcome = reload(&http, &daemon).await;
    let errors = outcome["errors"].to_string();
    assert!(
        errors.contains("tools[0].server.url")
            && errors.contains("egress.allow")
            && errors.contains(&format!("127.0.0.1:{port}"))
            && errors.contains("bundle.yaml"),
        "{outcome}"
    );
    let caller = get(&http, &daemon, "/v1/bundles/mcp_caller").await;
    assert_ne!(caller["status"], "ok", "{caller}");
    run_ok(&http, &daemon, "plain", "still fine").await;
    assert_eq!(
        connections.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the daemon connected to the refused MCP server\n{}",
        daemon.log()
    );
}

/// A tool script edited while a job runs: the job's later calls still run
/// the script it started with (its bundle runs from its content-addressed
/// copy), while the next job runs the edit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_keeps_running_the_tool_script_it_started_with() {
    let script = "replies:\n  - {turn: 1, tool_calls: [{id: a, name: which, arguments: {}}]}\n  - {turn: 2, tool_calls: [{id: b, name: which, arguments: {}}]}\n  - {turn: 3, content: done}\n";
    let server = mock_server(script).await;
    let site = Site::new(&server.base_url(), "");
    let go = site.path().join("go");
    site.put_bundle(
        "b",
        "name: b\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\ntools:\n  - {name: which, kind: process, effect: read_only, command: [python3, tools/which.py]}\n",
    );
    let tools = site.path().join("bundles/b/tools");
    std::fs::create_dir_all(&tools).unwrap();
    // The first version's first call waits for `go`, so the edit lands
    // between the job's two calls.
    std::fs::write(
        tools.join("which.py"),
        format!(
            "import os, time\nwhile not os.path.exists({:?}): time.sleep(0.05)\nprint('\"script one\"')\n",
            go.display().to_string()
        ),
    )
    .unwrap();
    let daemon = site.start();
    let http = client();
    reload(&http, &daemon).await;
    let job = submit(&http, &daemon, "b", "first").await;
    let id = job["id"].as_str().unwrap().to_string();
    eventually(
        Duration::from_secs(30),
        "the job's first call runs",
        || async { (!server.requests().is_empty()).then_some(()) },
    )
    .await;

    std::fs::write(tools.join("which.py"), "print('\"script two\"')\n").unwrap();
    eventually(Duration::from_secs(30), "the edit is loaded", || async {
        let outcome = reload(&http, &daemon).await;
        let bundle = get(&http, &daemon, "/v1/bundles/b").await;
        (outcome["result"] == "applied" && bundle["status"] == "ok").then_some(())
    })
    .await;
    std::fs::write(&go, "").unwrap();
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    let last = server.requests().last().unwrap()["messages"].to_string();
    assert_eq!(last.matches("script one").count(), 2, "{last}");
    assert!(!last.contains("script two"), "{last}");

    run_ok(&http, &daemon, "b", "second").await;
    let last = server.requests().last().unwrap()["messages"].to_string();
    assert!(
        last.contains("script two"),
        "the next job runs the edit: {last}"
    );
}
