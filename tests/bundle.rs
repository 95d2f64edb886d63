//! Bundle loading: every error names the file, the line and the key path.

use std::path::Path;

use structured_agents::bundle::{self, LoadContext};
use structured_agents::model::ModelCatalog;

const GOOD: &str = r#"name: triage
version: 1
model:
  endpoint: http://127.0.0.1:9/v1
  name: m
prompts:
  user: "{{ input }}"
tools:
  - name: a
    kind: process
    command: [python3, a.py]
  - name: b
    kind: process
    command: [python3, b.py]
    timeout: 2s
"#;

fn load(text: &str) -> Result<bundle::Bundle, Vec<String>> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bundle.yaml"), text).unwrap();
    let catalog = ModelCatalog::builtin();
    let result = bundle::load_dir(
        dir.path(),
        &LoadContext {
            endpoints: None,
            models: &catalog,
            histories: &structured_agents::bundle::HistoryPlugins::default(),
        },
    );
    result.map_err(|errors| {
        errors
            .0
            .iter()
            .map(|e| {
                // Make the messages independent of the temp dir.
                let file = e
                    .file
                    .strip_prefix(dir.path())
                    .unwrap_or(Path::new("?"))
                    .display()
                    .to_string();
                let line = e.line.map(|l| format!(":{l}")).unwrap_or_default();
                format!("{file}{line}: {}: {}", e.path, e.message)
            })
            .collect()
    })
}

fn one_error(text: &str) -> String {
    let errors = load(text).expect_err("expected an error");
    assert_eq!(errors.len(), 1, "{errors:#?}");
    errors[0].clone()
}

#[test]
fn a_good_bundle_loads_with_a_numeric_version() {
    let b = load(GOOD).unwrap();
    assert_eq!(b.name(), "triage");
    assert_eq!(b.version(), "1");
    assert_eq!(b.kernel_config().max_turns, 20);
}

/// A bundle that says nothing about sampling or limits gets the Python
/// kernel's defaults: temperature 0.1, max_tokens 4096, 20 turns, tools one
/// at a time.
#[test]
fn unset_sampling_and_limits_take_the_python_kernels_defaults() {
    let config = load(GOOD).unwrap().kernel_config();
    assert_eq!(config.sampling["temperature"], serde_json::json!(0.1));
    assert_eq!(config.sampling["max_tokens"], serde_json::json!(4096));
    assert_eq!(config.sampling.len(), 2, "{:?}", config.sampling);
    assert_eq!(config.max_turns, 20);
    assert_eq!(config.max_concurrency, 1);
}

#[test]
fn null_sampling_keys_are_left_to_the_server_and_set_ones_override() {
    let text = GOOD.replace(
        "  name: m\n",
        "  name: m\n  sampling: {temperature: null, max_tokens: 64, top_p: 0.5}\n",
    );
    let config = load(&text).unwrap().kernel_config();
    assert!(
        !config.sampling.contains_key("temperature"),
        "{:?}",
        config.sampling
    );
    assert_eq!(config.sampling["max_tokens"], serde_json::json!(64));
    assert_eq!(config.sampling["top_p"], serde_json::json!(0.5));
    let text = GOOD.replace("  name: m\n", "  name: m\n  sampling: {max_tokens: null}\n");
    let config = load(&text).unwrap().kernel_config();
    assert!(
        !config.sampling.contains_key("max_tokens"),
        "{:?}",
        config.sampling
    );
    assert_eq!(config.sampling["temperature"], serde_json::json!(0.1));
}

#[test]
fn bad_duration_names_file_line_and_key() {
    let text = GOOD.replace("timeout: 2s", "timeout: five seconds");
    let e = one_error(&text);
    assert!(
        e.starts_with("bundle.yaml:15: tools[1].timeout: invalid duration \"five seconds\" (expected e.g. \"5s\""),
        "{e}"
    );
}

#[test]
fn unknown_key_points_at_the_key() {
    let text = GOOD.replace(
        "    command: [python3, b.py]",
        "    command: [python3, b.py]\n    retires: 3",
    );
    let e = one_error(&text);
    assert!(
        e.starts_with("bundle.yaml:15: tools[1].retires: unknown field `retires`"),
        "{e}"
    );
}

/// The loader (`validate`, the daemon's bundle status) meets a key of the
/// Python agent kernel's format in a bundle otherwise of this one: it names
/// the key, where it goes, and the command for whole original bundles.
/// (`tests/cli.rs` `validate_names_the_original_keys_and_the_import_command`
/// has a whole original bundle.)
#[test]
fn an_original_key_names_itself_where_it_goes_and_the_import_command() {
    let text = format!("{GOOD}max_turns: 5\n");
    let e = one_error(&text);
    assert!(
        e.starts_with("bundle.yaml:16: max_turns: unknown key: `max_turns` belongs to the Python agent kernel's bundle format (here: `limits.max_turns`); the rest of this bundle is of this format: move it to `limits.max_turns` (a whole original bundle converts with `structured-agents import "),
        "{e}"
    );
    assert!(e.ends_with("`)"), "{e}");
}

#[test]
fn yaml_syntax_errors_have_a_line() {
    let text = GOOD.replace("  name: m", "  name: [m");
    let e = one_error(&text);
    assert!(e.starts_with("bundle.yaml:"), "{e}");
    let line: usize = e["bundle.yaml:".len()..]
        .split(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!((5..=7).contains(&line), "{e}");
}

#[test]
fn missing_required_key_names_the_section() {
    let text = GOOD.replace("  name: m\n", "");
    let e = one_error(&text);
    assert!(
        e.starts_with("bundle.yaml:3: model: missing field `name`"),
        "{e}"
    );
}

#[test]
fn semantic_errors_are_all_reported_with_lines() {
    let text = r#"name: "bad name"
version: "1"
model:
  endpoint: scripted:nope.yaml
  name: m
  plugin: mystery
prompts:
  user: "{{ input "
termination:
  tool: finish
tools:
  - name: a
    kind: process
  - name: a
    kind: plugin
    command: [x]
"#;
    let errors = load(text).unwrap_err();
    let expect = [
        "bundle.yaml:1: name: invalid bundle name",
        "bundle.yaml:4: model.endpoint: script file",
        "bundle.yaml:8: prompts.user:",
        "bundle.yaml:12: tools[0].command: a process tool needs `command`",
        "bundle.yaml:14: tools[1].name: duplicate tool name \"a\"",
        "bundle.yaml:16: tools[1].command: `command` only applies to kind process",
        "bundle.yaml:14: tools[1].plugin: a plugin tool needs `plugin`",
        "bundle.yaml:10: termination.tool: no tool named \"finish\"",
        "bundle.yaml:6: model.plugin: unknown model `mystery` (valid: function_gemma, openai, qwen)",
    ];
    for prefix in expect {
        assert!(
            errors.iter().any(|e| e.starts_with(prefix)),
            "missing {prefix:?} in {errors:#?}"
        );
    }
}

#[test]
fn example_bundles_validate() {
    let catalog =
        ModelCatalog::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("config/models")).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut count = 0;
    let dirs = ["config/bundles", "config/examples"]
        .iter()
        .flat_map(|d| std::fs::read_dir(root.join(d)).unwrap());
    for entry in dirs {
        let dir = entry.unwrap().path();
        if bundle::bundle_file(&dir).is_some() {
            bundle::load_dir(
                &dir,
                &LoadContext {
                    endpoints: None,
                    models: &catalog,
                    histories: &structured_agents::bundle::HistoryPlugins::default(),
                },
            )
            .unwrap_or_else(|e| panic!("{e}"));
            count += 1;
        }
    }
    assert!(count >= 5, "{count} example bundles");
}

#[test]
fn a_group_chat_section_needs_rounds_and_a_stop_word() {
    let text = format!("{GOOD}group_chat:\n  max_rounds: 0\n  stop_word: \"\"\n");
    let errors = load(&text).expect_err("expected errors");
    assert_eq!(
        errors,
        [
            "bundle.yaml:17: group_chat.max_rounds: must be at least 1",
            "bundle.yaml:18: group_chat.stop_word: must not be empty: it is the word a selector answers to end a chat",
        ]
    );
    let good = format!("{GOOD}agent:\n  name: Triage\ngroup_chat: {{}}\n");
    let chat = load(&good).unwrap().raw.group_chat.unwrap();
    assert_eq!((chat.max_rounds, chat.stop_word.as_str()), (20, "DONE"));
}

/// A bundle naming endpoint `local`, a llama.cpp server, with `model` lines.
fn on_llama(model: &str) -> Result<bundle::Bundle, String> {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "name: calc\nversion: \"1\"\nmodel:\n  endpoint: local\n  name: m\n  plugin: qwen\n{model}prompts: {{user: x}}\ntools:\n  - {{name: add, kind: process, command: [x], parameters: {{type: object, properties: {{a: {{type: integer}}}}}}}}\n  - {{name: done, kind: process, command: [x]}}\n"
    );
    std::fs::write(dir.path().join("bundle.yaml"), text).unwrap();
    let catalog =
        ModelCatalog::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("config/models")).unwrap();
    let endpoints = [(
        "local".to_string(),
        structured_agents::model::ServerKind::LlamaCpp,
    )]
    .into_iter()
    .collect();
    bundle::load_dir(
        dir.path(),
        &LoadContext {
            endpoints: Some(&endpoints),
            models: &catalog,
            histories: &structured_agents::bundle::HistoryPlugins::default(),
        },
    )
    .map_err(|e| e.to_string())
}

#[test]
fn a_grammar_mode_the_server_cannot_carry_is_a_load_error() {
    let err = on_llama("  grammar: {mode: structural_tag}\n").unwrap_err();
    assert!(
        err.contains("bundle.yaml:7: model.grammar.mode")
            && err.contains("bundle `calc`")
            && err.contains("endpoint `local`")
            && err.contains("server `llama_cpp`")
            && err.contains("`structural_tag`"),
        "{err}"
    );
    // The model config's default (structural_tag for qwen) is judged too.
    let err = on_llama("").unwrap_err();
    assert!(
        err.contains("model.plugin") && err.contains("the default of model `qwen`"),
        "{err}"
    );
    // The same bundle with a mode llama.cpp reads loads, on its wire.
    let ok = on_llama("  grammar: {mode: ebnf}\n").unwrap();
    assert_eq!(ok.target.wire, structured_agents::model::WireKey::Gbnf);
    assert!(ok.shapes.default.fragment["grammar"].is_string());
}

#[test]
fn tool_choice_shapes_each_turn_and_must_name_a_tool() {
    let ok = on_llama(
        "  grammar: {mode: json_schema, allow_parallel_calls: false}\n  tool_choice: required\n  turn_tool_choice: {1: add}\n",
    )
    .unwrap();
    let config = ok.kernel_config();
    assert_eq!(
        config.shape.tool_choice,
        structured_agents::model::ToolChoice::Required
    );
    let turn1 = &config.turn_shapes[&1];
    let schema = &turn1.fragment["response_format"]["json_schema"]["schema"];
    assert_eq!(
        schema["properties"]["name"],
        serde_json::json!({"const": "add"})
    );
    let default_schema = &config.shape.fragment["response_format"]["json_schema"]["schema"];
    assert_eq!(default_schema["anyOf"].as_array().unwrap().len(), 2);

    let err = on_llama("  grammar: {mode: ebnf}\n  turn_tool_choice: {2: nosuch}\n").unwrap_err();
    assert!(
        err.contains("model.turn_tool_choice.2") && err.contains("no tool named \"nosuch\""),
        "{err}"
    );
}

#[test]
fn approval_rules_and_budgets_are_checked_when_the_bundle_loads() {
    let text = GOOD.replace(
        "    timeout: 2s\n",
        "    timeout: 2s\n    approval: {when: \"args.amount >\"}\n",
    ) + "approval: {always: true, when: \"true\"}\nlimits: {model_calls: 3, per_day: {tokens: 10}}\n";
    let errors = load(&text).expect_err("expected errors");
    assert!(
        errors[0].starts_with(
            "bundle.yaml:16: tools[1].approval: when \"args.amount >\" is not a valid expression"
        ),
        "{errors:#?}"
    );
    assert!(
        errors[1].starts_with("bundle.yaml:17: approval: give exactly one of"),
        "{errors:#?}"
    );
    let good = GOOD.replace(
        "    timeout: 2s\n",
        "    timeout: 2s\n    approval: always\n",
    ) + "limits: {model_calls: 3, wall_time: 5m}\n";
    let bundle = load(&good).unwrap();
    assert_eq!(bundle.raw.limits.budget().model_calls, Some(3));
    let unknown = GOOD.to_string() + "limits: {total_tokens: 3}\n";
    assert!(
        load(&unknown).unwrap_err()[0].contains("limits"),
        "unknown budget key"
    );
}

/// `max_output_bytes` caps an MCP tool's results too, within the MCP
/// transport's bound on one message; it still does not apply to other kinds.
#[test]
fn an_mcp_tools_byte_cap_is_checked_when_the_bundle_loads() {
    let bundle = |tool: &str| {
        format!(
            "name: b\nversion: \"1\"\nmodel: {{endpoint: scripted:s.yaml, name: m}}\nprompts: {{user: \"{{{{ input }}}}\"}}\ntools:\n  - {tool}\n"
        )
    };
    let too_big = structured_agents::tools::mcp::MAX_OUTPUT_BYTES + 1;
    let errors = load(&bundle(&format!(
        "{{name: m, kind: mcp, server: {{url: \"http://127.0.0.1:9/mcp\"}}, max_output_bytes: {too_big}}}"
    )))
    .unwrap_err();
    assert!(
        errors
            .iter()
            .any(|e| e.contains("tools[0].max_output_bytes")
                && e.contains(&format!("{too_big} is outside 1..="))),
        "{errors:#?}"
    );
    let errors = load(&bundle(
        "{name: m, kind: mcp, server: {url: \"http://127.0.0.1:9/mcp\"}, max_output_bytes: 0}",
    ))
    .unwrap_err();
    assert!(
        errors
            .iter()
            .any(|e| e.contains("tools[0].max_output_bytes")),
        "{errors:#?}"
    );
    let errors = load(&bundle(
        "{name: m, kind: mcp, server: {url: \"http://127.0.0.1:9/mcp\"}, max_output_bytes: 2048}",
    ))
    .err()
    .unwrap_or_default();
    assert!(
        !errors.iter().any(|e| e.contains("max_output_bytes")),
        "an mcp tool takes a cap: {errors:#?}"
    );
    let errors = load(&bundle(
        "{name: m, kind: agent, bundle: other, max_output_bytes: 2048}",
    ))
    .unwrap_err();
    assert!(
        errors
            .iter()
            .any(|e| e.contains("`max_output_bytes` only applies to kind process, grail and mcp")),
        "{errors:#?}"
    );
}

/// `limits.history` names a built-in strategy or a loaded history plugin:
/// an unknown name is located at its key and lists what is loaded (none
/// here), and a value of another shape says what the key takes.
#[test]
fn an_unknown_history_strategy_is_located_and_lists_the_loaded_plugins() {
    let keep_all = load(&(GOOD.to_string() + "limits: {history: keep_all}\n")).unwrap();
    assert_eq!(format!("{:?}", keep_all.kernel_config().history), "KeepAll");
    let unknown = one_error(&(GOOD.to_string() + "limits:\n  history: recent\n"));
    assert_eq!(
        unknown,
        "bundle.yaml:17: limits.history: unknown history strategy \"recent\" (built-in: sliding_window, keep_all; history plugins loaded: none (put a `kind: history` library in paths.plugins_dir))"
    );
    let shape = one_error(&(GOOD.to_string() + "limits:\n  history: {plugun: x}\n"));
    assert!(
        shape.contains("limits.history")
            && shape.contains("a history plugin's name or `{plugin: NAME}`"),
        "{shape}"
    );
}
