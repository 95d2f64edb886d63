//! `kind: grail` as the original tool engine ran it: the daemon's grail
//! host loads the `.pym` with Grail's API and runs it with the call's
//! arguments as inputs, Grail's limits and the bundle's externals, in a
//! pool of host processes. Grail itself is not installed here: the tests
//! put a stand-in `grail` package (tests/data/grail/grail, Grail's API
//! surface running scripts with CPython) on the host's `PYTHONPATH`.

mod common;

use std::time::Duration;

use common::daemon::{Site, client, job_events, submit_and_wait};
use common::{mock_server, repo};
use serde_json::{Value, json};

/// The bundle: a process tool answering `scale.pym`'s external `lookup`,
/// and one grail tool per script with its limits.
fn bundle(pythonpath: &str) -> String {
    let grail_tool = |name: &str, section: &str, parameters: &str| {
        format!(
            r#"  - name: {name}
    kind: grail
    script: {name}.pym
    effect: read_only
    env: {{PYTHONPATH: "{pythonpath}"}}
    grail: {section}
    parameters: {parameters}
"#
        )
    };
    let mut yaml = String::from(
        r#"name: grail
version: "1"
model: {endpoint: mock, name: mock-model}
prompts: {user: "{{ input }}"}
tools:
  - name: rates
    kind: process
    effect: read_only
    command: [python3, -c, "import json,sys; a=json.load(sys.stdin); print(json.dumps({'rate': 3 if a['key'] == 'rate' else 0}))"]
    parameters: {type: object, properties: {key: {type: string}}, required: [key]}
"#,
    );
    yaml += &grail_tool(
        "scale",
        "{externals: {lookup: rates}}",
        "{type: object, properties: {value: {type: integer}, unit: {type: string}}, required: [value]}",
    );
    yaml += &grail_tool(
        "hog",
        "{limits: {max_memory: 1mb}}",
        "{type: object, properties: {size: {type: integer}}}",
    );
    yaml += &grail_tool(
        "spin",
        "{limits: {max_duration: 300ms}}",
        "{type: object, properties: {rounds: {type: integer}}}",
    );
    yaml += &grail_tool(
        "host_pid",
        "{pool_size: 1}",
        "{type: object, properties: {crash: {type: boolean}}}",
    );
    yaml
}

/// One reply per tool call, in order, then the answer.
const REPLIES: &str = r#"mode: sequential
replies:
  - tool_calls: [{name: scale, arguments: {value: 7}}]
  - tool_calls: [{name: scale, arguments: {value: 7, colour: red}}]
  - tool_calls: [{name: hog, arguments: {size: 5000000}}]
  - tool_calls: [{name: spin, arguments: {rounds: 1000000000}}]
  - tool_calls: [{name: host_pid, arguments: {}}]
  - tool_calls: [{name: host_pid, arguments: {}}]
  - tool_calls: [{name: host_pid, arguments: {crash: true}}]
  - tool_calls: [{name: host_pid, arguments: {}}]
  - content: done
"#;

/// A site with the bundle and its scripts.
fn site(server_url: &str) -> Site {
    let site = Site::new(server_url, "");
    let dir = site.path().join("bundles/grail");
    std::fs::create_dir_all(&dir).unwrap();
    let scripts = repo("tests/data/grail/bundle");
    for name in ["scale", "hog", "spin", "host_pid"] {
        let file = format!("{name}.pym");
        std::fs::copy(scripts.join(&file), dir.join(&file)).unwrap();
    }
    let pythonpath = repo("tests/data/grail");
    site.put_bundle("grail", &bundle(&pythonpath.display().to_string()));
    site
}

/// Inputs and an external round trip, an `InputError` as `user_error`,
/// the memory and duration limits as `tool_error`s naming them, the pool
/// reusing its host, and a host killed mid-call replaced by a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grail_scripts_run_with_inputs_limits_and_externals_in_a_pool() {
    let server = mock_server(REPLIES).await;
    let site = site(&server.base_url());
    let daemon = site.start();
    let http = client();
    let job = submit_and_wait(
        &http,
        &daemon,
        json!({"bundle": "grail", "input": "go"}),
        Duration::from_secs(120),
    )
    .await;
    assert_eq!(job["state"], "succeeded", "{job}\n{}", daemon.log());
    let id = job["id"].as_str().unwrap();
    let results: Vec<Value> = job_events(&http, &daemon, id)
        .await
        .into_iter()
        .filter(|e| e["type"] == "ToolResult")
        .collect();
    assert_eq!(results.len(), 8, "{results:#?}");
    let preview = |i: usize| {
        results[i]["output_preview"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let code = |i: usize| results[i]["error_type"].as_str().map(str::to_string);

    // Inputs (with the script's default for `unit`) and the external
    // `lookup` answered by the `rates` tool.
    let scaled: Value = serde_json::from_str(&preview(0)).expect("JSON result");
    assert_eq!(
        scaled,
        json!({"scaled": 21, "unit": "m"}),
        "{:#?}",
        results[0]
    );

    // An argument the script declares no `Input()` for: Grail's InputError.
    assert_eq!(code(1).as_deref(), Some("user_error"), "{:#?}", results[1]);
    assert!(
        preview(1).contains("Extra input 'colour'"),
        "{}",
        preview(1)
    );

    // Grail's LimitError, by limit.
    assert_eq!(code(2).as_deref(), Some("tool_error"), "{:#?}", results[2]);
    assert!(
        preview(2).contains("grail memory limit exceeded"),
        "{}",
        preview(2)
    );
    assert_eq!(code(3).as_deref(), Some("tool_error"), "{:#?}", results[3]);
    assert!(
        preview(3).contains("grail duration limit exceeded"),
        "{}",
        preview(3)
    );

    // One host serves consecutive calls; killed mid-call, it is replaced.
    let (first, again) = (preview(4), preview(5));
    assert!(first.parse::<u32>().is_ok(), "{first}");
    assert_eq!(first, again, "the pool reuses its host");
    assert_eq!(code(6).as_deref(), Some("tool_error"), "{:#?}", results[6]);
    assert!(
        preview(6).contains("the grail host") && preview(6).contains("killed by signal 9"),
        "{}",
        preview(6)
    );
    let after = preview(7);
    assert!(after.parse::<u32>().is_ok(), "{:#?}", results[7]);
    assert_ne!(after, first, "a new host after the crash");
}

/// `validate` names what keeps a grail tool from running: limits in a
/// spelling Grail refuses, an external wired to no tool, a Python that is
/// not there.
#[test]
fn validate_names_bad_limits_unwired_externals_and_a_missing_python() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("scale.pym"), "1\n").unwrap();
    let yaml = r#"name: bad
version: "1"
model: {endpoint: "scripted:script.yaml", name: m}
prompts: {user: "{{ input }}"}
tools:
  - name: scale
    kind: grail
    script: scale.pym
    grail:
      python: no-such-python3
      limits: {max_memory: 16 megs, max_duration: 5m}
      externals: {lookup: nowhere}
"#;
    std::fs::write(dir.path().join("bundle.yaml"), yaml).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_structured-agents"))
        .arg("validate")
        .arg(dir.path())
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}");
    for expected in [
        "tools[0].grail.limits.max_memory",
        "tools[0].grail.limits.max_duration",
        "tools[0].grail.externals",
        "\"nowhere\", which is not a tool of this bundle",
        "tools[0].grail.python",
        "`no-such-python3`, which is not on the daemon's PATH",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
}
