//! Dynamic plugins: the example plugins built from the workspace, loaded from
//! a temporary directory, called through the tool engine, reloaded after a
//! rebuild, refused when unsafe or ABI-mismatched; observer plugins that are
//! slow or panic.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use common::Recorder;
use serde_json::{Value, json};
use structured_agents::events::{Event, EventEnvelope, EventSink, Observer, RunContext};
use structured_agents::plugins::{PluginLoadError, PluginObserver, PluginRegistry};
use structured_agents::tools::ToolEngine;
use structured_agents::tools::ToolPolicy;
use structured_agents::tools::plugin::PluginTool;
use structured_agents::types::ToolCall;
use tokio_util::sync::CancellationToken;

/// Builds the example plugins (once per test run) into their own target
/// directory, so this never waits on the build lock of the outer cargo.
/// Returns (dir with the normal builds, path of the `times10` calculator variant).
fn built() -> &'static (PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BUILT.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let target = root.join("target/plugin-tests");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let build = |variant: Option<&str>| {
            let mut cmd = Command::new(&cargo);
            cmd.current_dir(root)
                .args([
                    "build",
                    "--quiet",
                    "-p",
                    "sa-plugin-calculator",
                    "-p",
                    "sa-plugin-text-tools",
                    "-p",
                    "sa-plugin-audit-observer",
                    "--target-dir",
                ])
                .arg(&target)
                .env_remove("SA_CALC_VARIANT");
            if let Some(v) = variant {
                cmd.env("SA_CALC_VARIANT", v);
            }
            let status = cmd
                .status()
                .expect("cargo must be available to build the example plugins");
            assert!(status.success(), "building the example plugins failed");
        };
        build(Some("times10"));
        let variant = target.join("calculator-times10.so");
        std::fs::copy(target.join("debug/libsa_plugin_calculator.so"), &variant).unwrap();
        build(None);
        (target.join("debug"), variant)
    })
}

fn plugin_dir(files: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for f in files {
        let to = dir.path().join(f);
        std::fs::copy(built().0.join(f), &to).unwrap();
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

fn engine_for(registry: &PluginRegistry, plugin: &str, tools: &[&str]) -> ToolEngine {
    let p = registry.get(plugin).unwrap();
    let instance = Arc::new(p.instantiate(&Value::Null).unwrap());
    let mut engine = ToolEngine::new();
    for tool in tools {
        let schema = p
            .manifest
            .tools
            .iter()
            .find(|t| t.name == *tool)
            .unwrap()
            .clone();
        engine.add(
            Arc::new(PluginTool::new(
                schema,
                p.clone(),
                instance.clone(),
                tool.to_string(),
            )),
            ToolPolicy::default(),
        );
    }
    engine
}

async fn call(
    engine: &ToolEngine,
    tool: &str,
    args: Value,
) -> structured_agents::tools::ToolOutcome {
    let sink = EventSink::new(RunContext::default(), 1, Arc::new(Recorder::default()));
    engine
        .execute(
            &ToolCall::new("c", tool, args),
            1,
            &CancellationToken::new(),
            &sink,
        )
        .await
}

#[tokio::test]
async fn example_plugins_load_and_answer_through_the_engine() {
    let dir = plugin_dir(&["libsa_plugin_calculator.so", "libsa_plugin_text_tools.so"]);
    let cache = tempfile::tempdir().unwrap();
    let (registry, errors) =
        PluginRegistry::load_dir(dir.path(), cache.path(), &Default::default());
    assert!(errors.is_empty(), "{errors:?}");
    let info = registry.list();
    assert_eq!(
        info.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        ["calculator", "text-tools"]
    );
    assert!(
        info.iter()
            .all(|p| p.abi == structured_agents_plugin_sdk::ABI_VERSION && p.sha256.len() == 64)
    );
    // Loaded from a content-addressed copy.
    assert!(cache.path().join(format!("{}.so", info[0].sha256)).exists());

    let calc = engine_for(&registry, "calculator", &["add", "divide", "explode"]);
    assert_eq!(
        call(&calc, "add", json!({"a": 2, "b": 3}))
            .await
            .result
            .output,
        r#"{"result":5.0}"#
    );
    let zero = call(&calc, "divide", json!({"a": 1, "b": 0})).await;
    assert_eq!(zero.result.output, "user_error:division by zero");
    let boom = call(&calc, "explode", json!({})).await;
    assert_eq!(boom.error_code, Some("tool_error"));
    assert!(
        boom.result
            .output
            .contains("plugin calculator panicked: the explode tool always panics"),
        "{}",
        boom.result.output
    );
    // The process is fine and the plugin still answers.
    assert_eq!(
        call(&calc, "add", json!({"a": 1, "b": 1}))
            .await
            .result
            .output,
        r#"{"result":2.0}"#
    );

    let text = engine_for(&registry, "text-tools", &["word_count", "reverse"]);
    assert_eq!(
        call(&text, "word_count", json!({"text": "one two three"}))
            .await
            .result
            .output,
        r#"{"words":3}"#
    );
    assert_eq!(
        call(&text, "reverse", json!({"text": "abc"}))
            .await
            .result
            .output,
        r#"{"text":"cba"}"#
    );
}

#[tokio::test]
async fn a_rebuilt_library_is_really_loaded() {
    let dir = plugin_dir(&["libsa_plugin_calculator.so"]);
    let cache = tempfile::tempdir().unwrap();
    let (first, _) = PluginRegistry::load_dir(dir.path(), cache.path(), &Default::default());
    let before = call(
        &engine_for(&first, "calculator", &["multiply"]),
        "multiply",
        json!({"a": 2, "b": 3}),
    )
    .await;
    assert_eq!(before.result.output, r#"{"result":6.0}"#);

    // Replace the file in place with the rebuilt variant (same path).
    let path = dir.path().join("libsa_plugin_calculator.so");
    std::fs::copy(&built().1, &path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (second, errors) = PluginRegistry::load_dir(dir.path(), cache.path(), &first);
    assert!(errors.is_empty(), "{errors:?}");
    assert_ne!(first.list()[0].sha256, second.list()[0].sha256);
    let after = call(
        &engine_for(&second, "calculator", &["multiply"]),
        "multiply",
        json!({"a": 2, "b": 3}),
    )
    .await;
    assert_eq!(
        after.result.output, r#"{"result":60.0}"#,
        "the rebuilt library's behaviour"
    );
    // The old instance keeps working (the old library is never unloaded).
    let old = call(
        &engine_for(&first, "calculator", &["multiply"]),
        "multiply",
        json!({"a": 2, "b": 3}),
    )
    .await;
    assert_eq!(old.result.output, r#"{"result":6.0}"#);
}

#[test]
fn world_writable_and_abi_mismatched_libraries_are_refused() {
    let dir = plugin_dir(&["libsa_plugin_calculator.so"]);
    let path = dir.path().join("libsa_plugin_calculator.so");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let (registry, errors) =
        PluginRegistry::load_dir(dir.path(), cache.path(), &Default::default());
    assert!(registry.list().is_empty());
    assert!(matches!(errors[0], PluginLoadError::Writable { .. }));
    let message = errors[0].to_string();
    assert!(
        message.contains("group- or world-writable") && message.contains("chmod go-w"),
        "{message}"
    );

    // A library speaking another ABI version.
    let other = tempfile::tempdir().unwrap();
    std::fs::set_permissions(other.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let source = other.path().join("old.c");
    std::fs::write(
        &source,
        "unsigned sa_plugin_abi_version(void) { return 999; }\n",
    )
    .unwrap();
    let lib = other.path().join("libold.so");
    let status = Command::new("gcc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&source)
        .status()
        .expect("gcc is needed for this test");
    assert!(status.success());
    std::fs::remove_file(&source).unwrap();
    let (registry, errors) =
        PluginRegistry::load_dir(other.path(), cache.path(), &Default::default());
    assert!(registry.list().is_empty());
    let message = errors[0].to_string();
    assert!(
        message.contains("ABI version 999")
            && message.contains("speaks ABI 1")
            && message.contains("rebuild"),
        "{message}"
    );
}

fn envelope(seq: u64, event: Event) -> EventEnvelope {
    EventEnvelope {
        run_id: "r".into(),
        bundle: "b".into(),
        bundle_version: "1".into(),
        parent: None,
        seq,
        timestamp: "t".into(),
        event,
    }
}

fn observer(config: Value, capacity: usize) -> (Arc<PluginObserver>, tempfile::TempDir) {
    let dir = plugin_dir(&["libsa_plugin_audit_observer.so"]);
    let cache = tempfile::tempdir().unwrap();
    let (registry, errors) =
        PluginRegistry::load_dir(dir.path(), cache.path(), &Default::default());
    assert!(errors.is_empty(), "{errors:?}");
    let plugin = registry.get("audit").unwrap().clone();
    assert_eq!(plugin.info.kind, "observer");
    (
        PluginObserver::start(plugin, &config, capacity, 3).unwrap(),
        dir,
    )
}

#[tokio::test]
async fn audit_observer_writes_events_and_a_slow_one_drops_without_blocking() {
    let out = tempfile::tempdir().unwrap();
    let audit = out.path().join("audit.jsonl");
    let (fast, _d1) = observer(json!({"path": audit}), 1024);
    for seq in 1..=20 {
        fast.on_event(&envelope(
            seq,
            Event::TurnComplete {
                turn: 1,
                tool_calls_count: 0,
                tool_results_count: 0,
                errors_count: 0,
            },
        ))
        .await
        .unwrap();
    }
    common::daemon::eventually(Duration::from_secs(10), "audit lines", || async {
        let text = std::fs::read_to_string(&audit).unwrap_or_default();
        (text.lines().count() == 20).then_some(())
    })
    .await;
    let first: Value = serde_json::from_str(
        std::fs::read_to_string(&audit)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        (first["type"].as_str(), first["seq"].as_u64()),
        (Some("TurnComplete"), Some(1))
    );

    // A slow plugin (50 ms per event) with a queue of 4: the producer emits
    // 500 events without waiting; the overflow is dropped and counted.
    let (slow, _d2) = observer(
        json!({"path": out.path().join("slow.jsonl"), "delay_ms": 50}),
        4,
    );
    for seq in 1..=500 {
        slow.on_event(&envelope(
            seq,
            Event::ParseError {
                turn: 1,
                detail: String::new(),
            },
        ))
        .await
        .unwrap();
    }
    assert!(slow.dropped() >= 400, "dropped {}", slow.dropped());
    assert!(slow.delivered() + slow.dropped() <= 500);
}

#[tokio::test]
async fn a_panicking_observer_is_isolated_then_disabled() {
    let out = tempfile::tempdir().unwrap();
    let (panicky, _d) = observer(
        json!({"path": out.path().join("p.jsonl"), "panic_on": "ParseError"}),
        64,
    );
    for seq in 1..=5 {
        // on_event never fails for the caller: the plugin's thread absorbs it.
        panicky
            .on_event(&envelope(
                seq,
                Event::ParseError {
                    turn: 1,
                    detail: String::new(),
                },
            ))
            .await
            .unwrap();
    }
    common::daemon::eventually(Duration::from_secs(10), "observer disabled", || async {
        panicky.is_disabled().then_some(())
    })
    .await;
    // Disabled: further events are ignored, still without error.
    panicky
        .on_event(&envelope(
            6,
            Event::ParseError {
                turn: 1,
                detail: String::new(),
            },
        ))
        .await
        .unwrap();
}
