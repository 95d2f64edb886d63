//! Model plugins as libraries (issue 38, item 6): the sample `mistral`
//! plugin (plugins/mistral) parses its family's `[TOOL_CALLS]` replies from
//! the mock model server, and the job runs the calls it found; its library
//! swapped for a visibly different build and reloaded while a job waits in a
//! tool call, that job finishes with the library it started with and a new
//! job uses the new one; a library answering garbage fails the turn with a
//! message naming it, and the daemon serves on.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use common::daemon::{Daemon, Site, client, eventually, get, submit, wait_terminal};
use common::mock_server;
use common::sample_plugins::SamplePlugin;
use serde_json::{Value, json};
use structured_agents::model::ModelPlugin;
use structured_agents::plugins::PluginRegistry;
use structured_agents::registry::model_plugin::DynamicModelPlugin;
use structured_agents::types::{Message, ToolSchema};

const MISTRAL: SamplePlugin = SamplePlugin {
    package: "sa-plugin-mistral",
    variant_env: "SA_MISTRAL_VARIANT",
    library: "libsa_plugin_mistral.so",
};

/// The builds of the sample plugin: (normal, `shout`, `garbage`), once per
/// test process.
fn libraries() -> &'static (PathBuf, PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf, PathBuf)> = OnceLock::new();
    BUILT.get_or_init(|| {
        let [shout, garbage, normal]: [PathBuf; 3] = MISTRAL
            .build(&[Some("shout"), Some("garbage"), None])
            .try_into()
            .unwrap();
        (normal, shout, garbage)
    })
}

fn drop_library(dir: &Path, library: &Path) {
    MISTRAL.drop_into(dir, library);
}

/// A bundle on the mock endpoint whose model plugin is the library
/// `mistral`, with one tool that (first writing `started`) waits for the
/// file `gate` and answers with its own arguments.
fn bundle(name: &str, site: &Path) -> String {
    let started = site.join("started");
    let gate = site.join("gate");
    format!(
        "name: {name}\nversion: \"1\"\nmodel: {{endpoint: mock, name: m, plugin: mistral}}\nprompts: {{user: \"{{{{ input }}}}\"}}\ntools:\n  - name: add\n    kind: process\n    effect: read_only\n    timeout: 60s\n    parameters: {{type: object, properties: {{a: {{type: number}}, b: {{type: number}}}}}}\n    command: [sh, -c, \"touch '{}'; while [ ! -f '{}' ]; do sleep 0.05; done; cat\"]\n",
        started.display(),
        gate.display()
    )
}

/// Turn 1: a call in the Mistral format (no native `tool_calls`); turn 2:
/// the answer.
const SCRIPT: &str = r#"replies:
  - turn: 1
    content: 'Adding.[TOOL_CALLS] [{"name": "add", "arguments": {"a": 2, "b": 40}}]'
  - turn: 2
    content: done
"#;

/// Loads the library from a private directory for the unit-level checks.
fn load(library: &Path) -> (Arc<DynamicModelPlugin>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    drop_library(dir.path(), library);
    let (registry, errors) = PluginRegistry::load_dir(
        dir.path(),
        &dir.path().join("cache"),
        &PluginRegistry::default(),
    );
    assert!(errors.is_empty(), "{errors:?}");
    let plugin = registry.get("mistral").unwrap().clone();
    assert_eq!(plugin.info.kind, "model");
    (Arc::new(DynamicModelPlugin::new(plugin).unwrap()), dir)
}

fn add_tool() -> Vec<ToolSchema> {
    vec![ToolSchema {
        name: "add".into(),
        description: "Add.".into(),
        parameters: json!({"type": "object"}),
    }]
}

/// The library answers through the `ModelPlugin` seam the kernel uses:
/// parsing both Mistral call forms, declaring the tools its own way,
/// holding back streamed text at its call marker, and naming its content
/// hash for the bundle identity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_library_answers_through_the_model_plugin_seam() {
    let (normal, _, _) = tokio::task::spawn_blocking(libraries).await.unwrap();
    let (plugin, _dir) = load(normal);
    assert_eq!(plugin.name(), "mistral");
    assert!(plugin.grammar_modes().is_empty());
    assert_eq!(plugin.library_digest().map(str::len), Some(64));

    let tools = add_tool();
    let reply = Message::assistant(
        Some("Sure.[TOOL_CALLS]add[CALL_ID]abc123def[ARGS]{\"a\": 1, \"b\": 2}".into()),
        vec![],
    );
    let parsed = plugin.read_reply(&reply, &tools).await.unwrap();
    assert_eq!(parsed.content.as_deref(), Some("Sure."));
    assert_eq!(parsed.calls.len(), 1);
    assert_eq!(parsed.calls[0].call.id, "abc123def");
    assert_eq!(parsed.calls[0].call.arguments, json!({"a": 1, "b": 2}));
    assert_eq!(parsed.calls[0].error, None);

    // A malformed call is reported for the model, not dropped.
    let bad = Message::assistant(Some("[TOOL_CALLS]add[ARGS]{\"a\": ".into()), vec![]);
    let parsed = plugin.read_reply(&bad, &tools).await.unwrap();
    assert!(
        parsed.calls[0]
            .error
            .as_deref()
            .unwrap()
            .contains("not valid JSON")
    );
    assert!(
        parsed.calls[0].call.id.starts_with("call_"),
        "minted by the daemon"
    );

    // The library declares tools its family's way (asked once, in prepare).
    plugin.prepare(&tools).await.unwrap();
    let mut messages = vec![json!({"role": "system", "content": "Be brief."})];
    plugin.declare_tools(&mut messages, &tools);
    let system = messages[0]["content"].as_str().unwrap();
    assert!(
        system.starts_with("Be brief.\n\n[AVAILABLE_TOOLS]"),
        "{system}"
    );
    assert!(system.contains("\"name\":\"add\""), "{system}");
    assert!(plugin.format_tools(&tools).unwrap().is_array());

    assert_eq!(plugin.call_start("Hello"), None);
    assert_eq!(plugin.call_start("Hello [TOOL_"), Some(6));
}

/// A job whose bundle names the library as its model plugin: the calls the
/// library reads from the text run. The library is swapped for the `shout`
/// build (it upper-cases the reply's text) while that job waits in its tool
/// call: the reload binds a new version, the waiting job ends with the
/// library it started with ("done"), and a new job reads its replies with
/// the new one ("DONE").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_keeps_its_library_across_a_reload() {
    let (normal, shout, _) = tokio::task::spawn_blocking(libraries).await.unwrap();
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    drop_library(&site.path().join("plugins"), normal);
    site.put_bundle("calc", &bundle("calc", site.path()));
    let daemon = site.start();
    let http = client();
    let before = get(&http, &daemon, "/v1/bundles/calc").await;
    assert_eq!(before["status"], "ok", "{before}\n{}", daemon.log());

    let first = submit(&http, &daemon, "calc", "add 2 and 40").await;
    let first_id = first["id"].as_str().unwrap().to_string();
    // The call the library parsed is running: the tool has started.
    let started = site.path().join("started");
    eventually(
        Duration::from_secs(60),
        "the first job's tool call starts",
        || async { started.exists().then_some(()) },
    )
    .await;

    drop_library(&site.path().join("plugins"), shout);
    let reloaded = http
        .post(daemon.url("/v1/reload"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(reloaded.status(), 200, "{}", daemon.log());
    let after = eventually(
        Duration::from_secs(30),
        "a new version of the bundle",
        || async {
            let now = get(&http, &daemon, "/v1/bundles/calc").await;
            (now["digest"] != before["digest"] && now["status"] == "ok").then_some(now)
        },
    )
    .await;
    assert_ne!(after["digest"], before["digest"]);

    std::fs::write(site.path().join("gate"), "").unwrap();
    let old = wait(&http, &daemon, &first_id).await;
    assert_eq!(
        old["result"]["output"], "done",
        "the pinned library read it: {old}"
    );

    let second = submit(&http, &daemon, "calc", "add again").await;
    let new = wait(&http, &daemon, second["id"].as_str().unwrap()).await;
    assert_eq!(
        new["result"]["output"], "DONE",
        "the new library read it: {new}"
    );

    // Both jobs ran the call the library found in the text, with its
    // arguments: the tool echoed them back to the model.
    let requests = server.requests();
    let turn_two: Vec<&Value> = requests
        .iter()
        .filter(|r| r["messages"].as_array().is_some_and(|m| m.len() > 2))
        .collect();
    assert_eq!(turn_two.len(), 2, "{requests:?}");
    for request in turn_two {
        let messages = request["messages"].as_array().unwrap();
        let tool = messages.iter().find(|m| m["role"] == "tool").unwrap();
        let echoed: Value = serde_json::from_str(tool["content"].as_str().unwrap()).unwrap();
        assert_eq!(echoed, json!({"a": 2, "b": 40}), "{request}");
        let call = messages.iter().find(|m| m["role"] == "assistant").unwrap();
        assert_eq!(
            call["tool_calls"][0]["function"]["name"], "add",
            "{request}"
        );
    }
}

/// A library whose `parse_reply` answers a value of the wrong shape: the
/// job fails with an error naming the plugin and what was wrong, and the
/// daemon goes on serving (a job on a built-in plugin succeeds after it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_library_answering_garbage_fails_the_turn_not_the_daemon() {
    let (_, _, garbage) = tokio::task::spawn_blocking(libraries).await.unwrap();
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    drop_library(&site.path().join("plugins"), garbage);
    std::fs::write(site.path().join("gate"), "").unwrap();
    site.put_bundle("calc", &bundle("calc", site.path()));
    site.put_bundle(
        "plain",
        "name: plain\nversion: \"1\"\nmodel: {endpoint: mock, name: m, plugin: openai}\nprompts: {user: \"{{ input }}\"}\n",
    );
    let daemon = site.start();
    let http = client();

    let job = submit(&http, &daemon, "calc", "add").await;
    let failed = wait(&http, &daemon, job["id"].as_str().unwrap()).await;
    assert_eq!(failed["state"], "failed", "{failed}");
    let error = failed["error"].to_string();
    assert!(
        error.contains("model plugin `mistral")
            && error.contains("parse_reply")
            && error.contains("wrong shape"),
        "{error}"
    );

    let plain = submit(&http, &daemon, "plain", "hello").await;
    let ok = wait(&http, &daemon, plain["id"].as_str().unwrap()).await;
    assert_eq!(ok["state"], "succeeded", "{ok}\n{}", daemon.log());
}

async fn wait(http: &reqwest::Client, daemon: &Daemon, id: &str) -> Value {
    wait_terminal(http, daemon, id, Duration::from_secs(60)).await
}
