//! A tool plugin whose call never returns: its calls time out naming the
//! plugin, and it cannot take the runtime's blocking pool from the rest of
//! the daemon. The plugin is built here from a few lines against the SDK.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::Recorder;
use serde_json::{Value, json};
use structured_agents::events::{EventSink, RunContext};
use structured_agents::plugins::pool::{PLUGIN_CALL_THREADS, PoolError};
use structured_agents::plugins::{Plugin, PluginRegistry};
use structured_agents::tools::ToolEngine;
use structured_agents::tools::ToolPolicy;
use structured_agents::tools::plugin::PluginTool;
use structured_agents::types::ToolCall;
use tokio_util::sync::CancellationToken;

const PLUGIN_SOURCE: &str = r#"
use structured_agents_plugin_sdk::{ToolDef, ToolFailure, ToolPlugin, Value, export_tool_plugin, json};

fn hang(_args: &Value, _config: &Value) -> Result<Value, ToolFailure> {
    loop {
        std::thread::park();
    }
}

fn plugin() -> ToolPlugin {
    ToolPlugin {
        name: "stuck",
        version: "0.1.0",
        tools: vec![ToolDef {
            name: "hang",
            description: "Never returns.",
            parameters: || json!({"type": "object"}),
            run: hang,
        }],
    }
}

export_tool_plugin!(plugin);
"#;

/// Builds the plugin (in the plugin tests' target directory, so the SDK is
/// compiled once) and returns a directory holding only it.
fn build_plugin() -> tempfile::TempDir {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = root.join("target/plugin-tests");
    let krate = target.join("stuck-plugin");
    std::fs::create_dir_all(krate.join("src")).unwrap();
    let sdk = root.join("plugins/sdk");
    std::fs::write(
        krate.join("Cargo.toml"),
        format!(
            "[package]\nname = \"sa-test-stuck\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n\
             [lib]\ncrate-type = [\"cdylib\"]\n\n\
             [dependencies]\nstructured-agents-plugin-sdk = {{ path = {:?} }}\n\n\
             # Not part of the outer workspace.\n[workspace]\n",
            sdk.display().to_string()
        ),
    )
    .unwrap();
    std::fs::write(krate.join("src/lib.rs"), PLUGIN_SOURCE).unwrap();
    // The workspace's lock pins the SDK's dependencies to the versions
    // already built.
    std::fs::copy(root.join("Cargo.lock"), krate.join("Cargo.lock")).unwrap();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(&krate)
        .args(["build", "--quiet", "--target-dir"])
        .arg(&target)
        .status()
        .expect("cargo must be available to build the test plugin");
    assert!(status.success(), "building the stuck test plugin failed");
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let to: PathBuf = dir.path().join("libsa_test_stuck.so");
    std::fs::copy(target.join("debug/libsa_test_stuck.so"), &to).unwrap();
    std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// Far more calls than the plugin has threads, none of which ever returns:
/// each times out (those that found no free thread say so, naming the
/// plugin), and the runtime's blocking pool — two threads here, as small
/// as it can be made — still runs other work. Calls on tokio's blocking
/// pool (the old design) took both threads for good.
#[test]
fn a_plugin_call_that_never_returns_times_out_and_leaves_the_blocking_pool_free() {
    let dir = build_plugin();
    let cache = tempfile::tempdir().unwrap();
    let (registry, errors) =
        PluginRegistry::load_dir(dir.path(), cache.path(), &Default::default());
    assert!(errors.is_empty(), "{errors:?}");
    let plugin = registry.get("stuck").unwrap().clone();
    let instance = Arc::new(plugin.instantiate(&Value::Null).unwrap());
    let mut engine = ToolEngine::new();
    engine.add(
        Arc::new(PluginTool::new(
            plugin.manifest.tools[0].clone(),
            plugin.clone(),
            instance.clone(),
            "hang".into(),
        )),
        ToolPolicy {
            timeout: Duration::from_millis(300),
            ..ToolPolicy::default()
        },
    );

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(async {
            let sink = EventSink::new(RunContext::default(), 1, Arc::new(Recorder::default()));
            let cancel = CancellationToken::new();
            let calls: Vec<ToolCall> = (0..PLUGIN_CALL_THREADS * 4)
                .map(|i| ToolCall::new(format!("c{i}"), "hang", json!({})))
                .collect();
            let outcomes = futures::future::join_all(
                calls.iter().map(|c| engine.execute(c, 1, &cancel, &sink)),
            )
            .await;
            for outcome in &outcomes {
                assert!(
                    outcome.result.is_error
                        && outcome.result.output.starts_with("tool_error:timeout"),
                    "{:?}",
                    outcome.result
                );
            }

            // The runtime's blocking pool runs more work than it has threads.
            // The bound only keeps a regression from hanging the suite.
            let blocking = futures::future::join_all(
                (0..4).map(|i| tokio::task::spawn_blocking(move || i + 1)),
            );
            let done = tokio::time::timeout(Duration::from_secs(60), blocking)
                .await
                .expect("the blocking pool is exhausted by stuck plugin calls");
            let done: Vec<i32> = done.into_iter().map(Result::unwrap).collect();
            assert_eq!(done, [1, 2, 3, 4]);

            // Every plugin thread is stuck now: a further call waits for a slot
            // within its timeout and then fails naming the plugin.
            let refused = plugin
                .pooled(
                    Plugin::invoke,
                    instance.clone(),
                    json!({"name": "hang", "arguments": {}}),
                    Duration::from_millis(100),
                )
                .await;
            assert!(
                matches!(&refused, Err(PoolError::NoSlot { plugin, .. }) if plugin == "stuck"),
                "{refused:?}"
            );
            assert!(refused.unwrap_err().to_string().contains("plugin stuck"));
        })
    }));
    // Stuck calls never end: do not wait for them (a runtime dropped with a
    // stuck blocking task would hang the test instead of failing it).
    runtime.shutdown_background();
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// The daemon with more stuck plugin calls in flight than the plugin has
/// threads: SIGTERM still ends it after the drain timeout (the stuck calls
/// are on the plugin's own threads, which nothing waits for), with exit 0.
/// Calls on tokio's blocking pool kept the runtime from shutting down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_exits_after_the_drain_timeout_with_stuck_plugin_threads() {
    let plugins = build_plugin();
    let server =
        common::mock_server("replies:\n  - tool_calls: [{name: hang, arguments: {}}]\n").await;
    let site = common::daemon::Site::new(&server.base_url(), "");
    let so = site.path().join("plugins/libsa_test_stuck.so");
    std::fs::copy(plugins.path().join("libsa_test_stuck.so"), &so).unwrap();
    std::fs::set_permissions(&so, std::fs::Permissions::from_mode(0o755)).unwrap();
    site.put_bundle(
        "b",
        "name: b\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\ntools:\n  - {name: hang, kind: plugin, plugin: stuck, effect: read_only, timeout: 10m}\n",
    );
    let daemon = site.start();
    let http = common::daemon::client();
    for i in 0..PLUGIN_CALL_THREADS + 2 {
        common::daemon::submit(&http, &daemon, "b", &format!("job {i}")).await;
    }
    common::daemon::eventually(Duration::from_secs(20), "plugin calls stuck", || async {
        let running = common::daemon::get(&http, &daemon, "/v1/jobs?state=running").await;
        (running["jobs"].as_array().unwrap().len() > PLUGIN_CALL_THREADS).then_some(())
    })
    .await;
    // `stop` sends SIGTERM and fails the test if the daemon is not gone
    // within 30 s (the drain timeout here is 5 s).
    assert_eq!(daemon.stop(), Some(0));
}
