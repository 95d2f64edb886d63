//! The real binary: `run`, `validate`, `schema`, `import`.

use std::process::Command;

use serde_json::Value;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_structured-agents"))
}

fn repo(path: &str) -> String {
    format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn run_prints_events_and_the_answer() {
    let out = bin()
        .args([
            "run",
            &repo("config/bundles/arithmetic"),
            "--input",
            "2+3 and 4*5?",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("ƒ(x) calling add..."), "{stdout}");
    assert!(
        stdout.contains("{\"result\": 5}") && stdout.contains("{\"result\": 20}"),
        "{stdout}"
    );
    assert!(
        stdout.trim_end().ends_with("so together they make 25."),
        "{stdout}"
    );
}

#[test]
fn run_json_prints_one_event_per_line() {
    let out = bin()
        .args([
            "run",
            &repo("config/bundles/arithmetic"),
            "--input",
            "x",
            "--json",
            "--var",
            "style=terse",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"KernelStart"));
    assert_eq!(kinds.last(), Some(&"KernelEnd"));
    for kind in [
        "ModelRequest",
        "ModelResponse",
        "ToolCall",
        "ToolResult",
        "TurnComplete",
    ] {
        assert!(kinds.contains(&kind), "{kinds:?}");
    }
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
}

#[test]
fn run_against_a_real_http_server_with_endpoint_override() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(async {
        let script = structured_agents::mock::Script::parse(
            "replies:\n  - content: from the mock server\n",
            "t",
        )
        .unwrap();
        structured_agents::mock::MockServer::start(script)
            .await
            .unwrap()
    });
    let out = bin()
        .args([
            "run",
            &repo("config/bundles/arithmetic"),
            "--input",
            "x",
            "--endpoint",
            &server.base_url(),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.trim_end().ends_with("from the mock server"));
    assert_eq!(server.requests().len(), 1);
    assert_eq!(server.requests()[0]["model"], "qwen2.5-7b-instruct");
}

#[test]
fn validate_reports_errors_with_file_and_line_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad");
    std::fs::create_dir(&bad).unwrap();
    std::fs::write(
        bad.join("bundle.yaml"),
        "name: bad\nversion: 1\nmodel: {endpoint: x, name: m}\nprompts: {user: hi}\nlimits:\n  timeout: soon\n",
    )
    .unwrap();
    let out = bin()
        .args([
            "validate",
            dir.path().to_str().unwrap(),
            &repo("config/bundles"),
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("bad/bundle.yaml:6: limits.timeout: invalid duration \"soon\""),
        "{stderr}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok   arithmetic"));
}

#[test]
fn schema_bundle_is_a_json_schema_that_rejects_unknown_keys() {
    let out = bin().args(["schema", "bundle"]).output().unwrap();
    assert!(out.status.success());
    let schema: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(schema["additionalProperties"], Value::Bool(false));
    assert!(schema["properties"]["tools"].is_object());
}

/// `run` against the mock server replaying Qwen-XML, Hermes and FunctionGemma
/// text (no native tool_calls) executes the right tool with the right arguments.
#[test]
fn run_replays_text_tool_calls_of_each_model_family() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    for (script, plugin) in [
        ("hermes.yaml", "qwen"),
        ("qwen_xml.yaml", "qwen3-xml"),
        ("function_gemma.yaml", "function_gemma"),
    ] {
        let server = rt.block_on(async {
            let script = structured_agents::mock::Script::load(std::path::Path::new(&repo(
                &format!("tests/data/model/replay/{script}"),
            )))
            .unwrap();
            structured_agents::mock::MockServer::start(script)
                .await
                .unwrap()
        });
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("bundle.yaml"),
            format!(
                r#"name: adder
version: "1"
model: {{endpoint: "http://127.0.0.1:9/v1", name: m, plugin: {plugin}}}
prompts: {{user: "{{{{ input }}}}"}}
tools:
  - name: add
    kind: process
    description: Add two integers.
    parameters:
      type: object
      properties: {{a: {{type: integer}}, b: {{type: integer}}}}
      required: [a, b]
    command: [python3, -c, "import json,sys; a=json.load(sys.stdin); print(json.dumps({{'sum': a['a'] + a['b']}}))"]
"#
            ),
        )
        .unwrap();
        let out = bin()
            .args([
                "run",
                dir.path().to_str().unwrap(),
                "--input",
                "3+4?",
                "--json",
                "--endpoint",
                &server.base_url(),
            ])
            .args(["--models-dir", &repo("config/models")])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{plugin}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let events: Vec<Value> = stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let call = events
            .iter()
            .find(|e| e["type"] == "ToolCall")
            .unwrap_or_else(|| panic!("{plugin}: no tool call in {stdout}"));
        assert_eq!(call["tool_name"], "add", "{plugin}");
        assert_eq!(
            call["arguments"],
            serde_json::json!({"a": 3, "b": 4}),
            "{plugin}"
        );
        let result = events.iter().find(|e| e["type"] == "ToolResult").unwrap();
        assert_eq!(result["is_error"], false, "{plugin}: {result}");
        assert_eq!(result["output_preview"], "{\"sum\": 7}", "{plugin}");
        let end = events.last().unwrap();
        assert_eq!(end["termination_reason"], "no_tool_calls", "{plugin}");
        // The second request carries the tool result back to the model.
        let requests = server.requests();
        assert_eq!(requests.len(), 2, "{plugin}");
        let messages = requests[1]["messages"].as_array().unwrap();
        assert!(
            messages
                .iter()
                .any(|m| m.to_string().contains("{\\\"sum\\\": 7}")),
            "{plugin}: {messages:?}"
        );
    }
}

#[test]
fn grammar_prints_the_request_fragment() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bundle.yaml"),
        "name: g\nversion: \"1\"\nmodel: {endpoint: \"http://127.0.0.1:9/v1\", name: m, plugin: qwen3-xml, grammar: {mode: structural_tag, allow_parallel_calls: false}}\nprompts: {user: x}\ntools:\n  - {name: add, kind: process, command: [x], parameters: {type: object, properties: {a: {type: integer}}}}\n",
    )
    .unwrap();
    let grammar = |server: Option<&str>| {
        let mut cmd = bin();
        cmd.args([
            "grammar",
            dir.path().to_str().unwrap(),
            "--models-dir",
            &repo("config/models"),
        ]);
        if let Some(server) = server {
            cmd.args(["--family", server]);
        }
        cmd.output().unwrap()
    };
    let out = grammar(Some("vllm"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fragment: Value = serde_json::from_slice(&out.stdout).unwrap();
    let tag = fragment
        .pointer("/structured_outputs/structural_tag")
        .unwrap_or_else(|| panic!("{fragment}"));
    assert!(
        tag.is_string(),
        "structural_tag goes on the wire as a JSON string: {fragment}"
    );
    assert_eq!(fragment["tool_choice"], "auto");

    // Every server family at once: llama.cpp cannot take structural tags.
    let out = grammar(None);
    assert!(out.status.success());
    let all: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(all["server"], "vllm");
    assert_eq!(all["servers"]["vllm"]["wire"], "structured_outputs");
    let refused = all["servers"]["llama_cpp"]["error"].as_str().unwrap();
    assert!(
        refused.contains("bundle `g`")
            && refused.contains("structural_tag")
            && refused.contains("wire `gbnf`"),
        "{refused}"
    );
    let out = grammar(Some("llama_cpp"));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("model.grammar.mode"));
}

#[test]
fn validate_config_checks_the_plugins_directory_too() {
    let dir = tempfile::tempdir().unwrap();
    for sub in ["bundles", "models", "plugins"] {
        std::fs::create_dir(dir.path().join(sub)).unwrap();
    }
    std::fs::write(dir.path().join("plugins/libbroken.so"), b"not a library").unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[paths]\nbundles_dir = \"bundles\"\nmodels_dir = \"models\"\nplugins_dir = \"plugins\"\nstate_dir = \"state\"\n").unwrap();
    let out = bin()
        .args(["validate", "--config", config.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("libbroken.so") && stderr.contains("dlopen failed"),
        "{stderr}"
    );
}

#[test]
fn init_scaffolds_a_bundle_that_validate_accepts_and_run_answers() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("word-counter");
    let bundle_arg = bundle.to_str().unwrap();
    let out = bin().args(["init", bundle_arg]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let yaml = std::fs::read_to_string(bundle.join("bundle.yaml")).unwrap();
    assert!(yaml.contains("\nname: word-counter "), "{yaml}");
    for key in ["guardrails:", "turn_models:", "termination:", "observers:"] {
        assert!(
            yaml.contains(key),
            "bundle.yaml shows {key} commented: {yaml}"
        );
    }

    let out = bin().args(["validate", bundle_arg]).output().unwrap();
    assert!(
        out.status.success(),
        "validate: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // Run from elsewhere than the repository, as a newcomer would.
    let out = bin()
        .current_dir(dir.path())
        .args([
            "run",
            "word-counter",
            "--input",
            "How many words are in: the quick brown fox?",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "run: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("✓ count_words"), "the tool ran: {stdout}");
    assert!(stdout.contains("{\"words\": 4}"), "{stdout}");
    assert!(
        stdout.trim_end().ends_with("The text has 4 words."),
        "{stdout}"
    );

    // A second init into the same directory refuses to overwrite it.
    let out = bin().args(["init", bundle_arg]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "a usage error: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not empty"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `init` suggests a command that runs where it was run: the name when the
/// name on `PATH` is this binary, else this binary's own path (relative
/// under the current directory, as `./target/debug/…` in a clone).
#[test]
fn init_suggests_a_command_that_runs_from_here() {
    let exe = std::fs::canonicalize(env!("CARGO_BIN_EXE_structured-agents")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let suggested = |path: &std::path::Path, from: &std::path::Path, name: &str| {
        let out = bin()
            .current_dir(from)
            .env("PATH", path)
            .args(["init", dir.path().join(name).to_str().unwrap()])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let validate = stdout.lines().nth(1).unwrap_or_default().trim().to_string();
        let command = validate
            .split(" validate ")
            .next()
            .unwrap_or_default()
            .to_string();
        assert!(
            stdout.contains(&format!("{command} run ")),
            "both lines name one command: {stdout}"
        );
        command
    };
    // Not on PATH, run from elsewhere: its absolute path.
    let empty = dir.path().join("empty-path");
    std::fs::create_dir(&empty).unwrap();
    assert_eq!(
        suggested(&empty, dir.path(), "a"),
        exe.display().to_string()
    );
    // Not on PATH, run from a directory above it: its path from there.
    let above = exe.parent().unwrap().parent().unwrap();
    let relative = exe.strip_prefix(above).unwrap();
    assert_eq!(
        suggested(&empty, above, "b"),
        format!("./{}", relative.display())
    );
    // On PATH (as an installed package puts it): the name.
    let bin_dir = dir.path().join("bin");
    std::fs::create_dir(&bin_dir).unwrap();
    std::os::unix::fs::symlink(&exe, bin_dir.join("structured-agents")).unwrap();
    assert_eq!(suggested(&bin_dir, dir.path(), "c"), "structured-agents");
}

/// The systemd unit sets STRUCTURED_AGENTS_CONFIG, and a token may come
/// from STRUCTURED_AGENTS_TOKEN: the command line's own variables share the
/// settings' prefix but are not settings.
#[test]
fn the_command_lines_own_variables_are_not_settings() {
    let dir = tempfile::tempdir().unwrap();
    for sub in ["bundles", "models"] {
        std::fs::create_dir(dir.path().join(sub)).unwrap();
    }
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        "[paths]\nbundles_dir = \"bundles\"\nmodels_dir = \"models\"\nplugins_dir = \"plugins\"\nstate_dir = \"state\"\n",
    )
    .unwrap();
    let out = bin()
        .args(["validate", "--config"])
        .arg(&config)
        .env("STRUCTURED_AGENTS_CONFIG", &config)
        .env("STRUCTURED_AGENTS_TOKEN", "s3cret")
        .env("STRUCTURED_AGENTS_SERVER", "http://127.0.0.1:9")
        .env("STRUCTURED_AGENTS_LOG_FORMAT", "json")
        .env("STRUCTURED_AGENTS_QUEUE__WORKERS", "0")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("unknown key"), "{stderr}");
    // A real setting from the environment still applies (and is checked).
    assert!(stderr.contains("queue.workers"), "{stderr}");
    assert!(!out.status.success());
}

/// A bundle in the Python agent kernel's format, as its `BundleManifest`
/// documents it: prompts under `initial_context`, top-level `max_turns` and
/// `termination_tool`, tools found in a registry, and the registries used.
const ORIGINAL_BUNDLE: &str = r#"name: doubler
version: "1.0"
model:
  plugin: qwen
  adapter: Qwen/Qwen2.5-7B-Instruct
initial_context:
  system_prompt: "You double numbers with the tool, then submit."
  user_template: "Double {{ input }}"
max_turns: 5
termination_tool: submit_result
tools:
  - name: double
    registry: grail
    description: Doubles a number.
  - name: submit_result
    description: Submits the answer.
  - name: lookup
    registry: python
registries: [grail, python]
"#;

fn original_bundle(dir: &std::path::Path) {
    std::fs::create_dir_all(dir.join("tools")).unwrap();
    std::fs::write(dir.join("bundle.yaml"), ORIGINAL_BUNDLE).unwrap();
    std::fs::write(
        dir.join("tools/double.pym"),
        "from grail import Input\n\nvalue: int = Input(\"value\")\n{\"doubled\": value * 2}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("tools/submit_result.pym"),
        "from grail import Input\n\nanswer: str = Input(\"answer\")\n{\"answer\": answer}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("script.yaml"),
        "replies:\n  - tool_calls: [{name: double, arguments: {value: 21}}]\n  - tool_calls: [{name: submit_result, arguments: {answer: \"42\"}}]\n",
    )
    .unwrap();
}

/// `PATH` whose `python3` has the stand-in Grail package
/// (tests/data/grail/grail) importable, as an operator's Python with Grail.
fn grail_path(bin_dir: &std::path::Path) -> String {
    use std::os::unix::fs::PermissionsExt;
    let system = "/usr/local/bin:/usr/bin:/bin";
    let python = bin_dir.join("python3");
    let standin = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/grail");
    std::fs::write(
        &python,
        format!(
            "#!/bin/sh\nPATH={system} PYTHONPATH={} exec python3 \"$@\"\n",
            standin.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!("{}:{system}", bin_dir.display())
}

fn text(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn validate_names_the_original_keys_and_the_import_command() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("doubler");
    original_bundle(&bundle);
    let out = bin().arg("validate").arg(&bundle).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let command = format!("run `structured-agents import {}`", bundle.display());
    for (line, key) in [
        (6, "initial_context"),
        (9, "max_turns"),
        (10, "termination_tool"),
        (19, "registries"),
        (5, "model.adapter"),
        (13, "tools[0].registry"),
        (18, "tools[2].registry"),
    ] {
        let expected = format!(
            "doubler/bundle.yaml:{line}: {key}: unknown key: `{key}` belongs to the Python agent kernel's bundle format"
        );
        assert!(
            stderr.lines().any(|l| l.contains(&expected)
                && l.ends_with(&format!("{command} to convert this bundle"))),
            "{expected}\n{stderr}"
        );
    }
}

#[test]
fn import_converts_an_original_bundle_that_then_validates_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    let original = dir.path().join("doubler");
    original_bundle(&original);
    let bin_dir = tempfile::tempdir().unwrap();
    let path = grail_path(bin_dir.path());

    // A dry run reports and prints, and writes nothing.
    let dry = bin()
        .arg("import")
        .arg(&original)
        .args(["--dry-run", "--endpoint", "scripted:script.yaml"])
        .env("PATH", &path)
        .output()
        .unwrap();
    let report = text(&dry);
    assert_eq!(dry.status.code(), Some(1), "a tool was left out: {report}");
    assert!(report.contains("dry run: nothing written"), "{report}");
    assert!(report.contains("prompts:"), "the converted file: {report}");
    assert_eq!(
        std::fs::read_to_string(original.join("bundle.yaml")).unwrap(),
        ORIGINAL_BUNDLE
    );

    let converted = dir.path().join("converted");
    let out = bin()
        .arg("import")
        .arg(&original)
        .arg("--out")
        .arg(&converted)
        .args(["--endpoint", "scripted:script.yaml"])
        .env("PATH", &path)
        .output()
        .unwrap();
    let report = text(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    let file = original.join("bundle.yaml");
    let file = file.display();
    for expected in [
        format!("{file}:7: initial_context.system_prompt: became `prompts.system`"),
        format!("{file}:8: initial_context.user_template: became `prompts.user`"),
        format!("{file}:9: max_turns: became `limits.max_turns`"),
        format!("{file}:10: termination_tool: became `termination.tool`"),
        format!(
            "{file}:13: tools[0].registry: tool \"double\": `registry: grail` became `kind: grail`"
        ),
        format!("{file}:5: model.adapter: became `model.name`"),
    ] {
        assert!(report.contains(&expected), "{expected}\n{report}");
    }
    let (_, left_out) = report
        .split_once("not converted (left out):")
        .unwrap_or_else(|| panic!("{report}"));
    assert!(
        left_out.contains(&format!(
            "{file}:17: tools[2]: tool \"lookup\": a `python` registry tool"
        )) && left_out.contains(&format!("{file}:19: registries[1]:")),
        "{report}"
    );
    assert!(
        report.contains("check: the converted bundle loads"),
        "{report}"
    );

    let out = bin()
        .arg("validate")
        .arg(&converted)
        .env("PATH", &path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));

    let run = bin()
        .arg("run")
        .arg(&converted)
        .args(["--input", "21", "--json"])
        .env("PATH", &path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{}", text(&run));
    let events: Vec<Value> = stdout
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    let results: Vec<_> = events
        .iter()
        .filter(|e| e["type"] == "ToolResult")
        .map(|e| e["output_preview"].as_str().unwrap_or_default())
        .collect();
    assert!(
        results.len() == 2 && results[0].contains("\"doubled\":42"),
        "{stdout}"
    );
    let request = events
        .iter()
        .find(|e| e["type"] == "ModelRequest")
        .unwrap_or_else(|| panic!("{stdout}"));
    assert_eq!(request["model"], "Qwen/Qwen2.5-7B-Instruct", "{request}");

    // In place: the original file is kept beside the converted one.
    let out = bin()
        .arg("import")
        .arg(&original)
        .args(["--model", "other-model"])
        .env("PATH", &path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(original.join("bundle.original.yaml")).unwrap(),
        ORIGINAL_BUNDLE
    );
    let yaml = std::fs::read_to_string(original.join("bundle.yaml")).unwrap();
    assert!(
        yaml.contains("other-model") && !yaml.contains("initial_context"),
        "{yaml}"
    );
}

/// `run` binds a bundle under the same egress rule as the daemon: its own
/// remote agent URL on this machine is refused (naming the URL and the
/// setting) unless `--egress-allow` names it.
#[test]
fn run_refuses_a_bundles_agent_on_this_machine_unless_egress_allow_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("arithmetic");
    let copy = Command::new("cp")
        .args(["-r", &repo("config/bundles/arithmetic")])
        .arg(&bundle)
        .status()
        .unwrap();
    assert!(copy.success());
    let yaml = std::fs::read_to_string(bundle.join("bundle.yaml")).unwrap();
    let yaml = yaml.replace(
        "tools:\n",
        "tools:\n  - {name: peer, kind: http_agent, url: \"http://2130706433:9/message\"}\n",
    );
    std::fs::write(bundle.join("bundle.yaml"), yaml).unwrap();
    let run = |extra: &[&str]| {
        let out = bin()
            .arg("run")
            .arg(&bundle)
            .args(["--input", "2+3 and 4*5?"])
            .args(extra)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env_remove("SA_EGRESS_ALLOW")
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (ok, stderr) = run(&[]);
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains("2130706433:9") && stderr.contains("egress.allow"),
        "{stderr}"
    );
    let (ok, stderr) = run(&["--egress-allow", "http://127.0.0.1:9"]);
    assert!(ok, "{stderr}");
}
