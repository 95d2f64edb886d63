//! Every grammar the builders emit — for the example tool set and for
//! generated schemas, in every plugin style, mode and parallel setting —
//! compiles in the real XGrammar engine, accepts outputs written the way
//! the model writes them (which the plugin's parser then reads back to the
//! same calls) and rejects wrong ones (unknown tool, missing required
//! argument, wrong type, a second call when parallel calls are off).
//!
//! Needs `.venv` from `scripts/python-env` (or `$SA_PYTHON`); fails loudly
//! without it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

#[path = "support/model_gen.rs"]
mod model_gen;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;
use serde_json::{Value, json};
use structured_agents::model::{
    CallRules, FunctionGemmaPlugin, Grammar, GrammarMode, ModelPlugin, QwenCallStyle, QwenOptions,
    QwenPlugin, ServerKind, ToolChoice,
};
use structured_agents::types::{Message, ToolCall, ToolSchema};

fn python() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let py = std::env::var_os("SA_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(".venv/bin/python3"));
    assert!(
        py.exists(),
        "{} is missing: run `scripts/python-env` to create .venv with xgrammar",
        py.display()
    );
    py
}

fn run_checker(cases: &[Value]) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support/xgr_check.py");
    let mut child = Command::new(python())
        .arg(&script)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start xgr_check.py");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(Value::Array(cases.to_vec()).to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "xgrammar check failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("{} grammars checked", cases.len())),
        "{stdout}"
    );
}

struct Style {
    label: &'static str,
    plugin: Box<dyn ModelPlugin>,
    separator: &'static str,
}

fn styles() -> Vec<Style> {
    let qwen = |call_style| {
        Box::new(QwenPlugin::new(QwenOptions {
            call_style,
            ..Default::default()
        }))
    };
    vec![
        Style {
            label: "hermes",
            plugin: qwen(QwenCallStyle::Hermes),
            separator: "\n",
        },
        Style {
            label: "qwen_xml",
            plugin: qwen(QwenCallStyle::Xml),
            separator: "\n",
        },
        Style {
            label: "function_gemma",
            plugin: Box::new(FunctionGemmaPlugin::default()),
            separator: "",
        },
    ]
}

/// How an output looks in `mode`: tagged text, or bare JSON for json_schema.
fn write(style: &Style, mode: GrammarMode, calls: &[ToolCall], parallel: bool) -> String {
    if mode == GrammarMode::JsonSchema {
        let one = |c: &ToolCall| json!({"name": c.name, "arguments": c.arguments});
        return if parallel {
            Value::Array(calls.iter().map(one).collect()).to_string()
        } else {
            one(&calls[0]).to_string()
        };
    }
    calls
        .iter()
        .map(|c| style.plugin.render_call(c).unwrap())
        .collect::<Vec<_>>()
        .join(style.separator)
}

/// Wrong versions of `call`: unknown tool, missing required arg, wrong type.
fn wrong(call: &ToolCall, tool: &ToolSchema) -> Vec<ToolCall> {
    let mut out = vec![ToolCall {
        name: "zz_nosuch".into(),
        ..call.clone()
    }];
    let args = call.arguments.as_object().unwrap();
    let required: Vec<&str> = tool.parameters["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(key) = required.first() {
        let mut a = args.clone();
        a.remove(*key);
        out.push(ToolCall {
            arguments: Value::Object(a),
            ..call.clone()
        });
    }
    if let Some(props) = tool.parameters["properties"].as_object() {
        for (k, s) in props {
            if s["type"] == "integer" && args.contains_key(k) {
                let mut a = args.clone();
                a.insert(k.clone(), json!("abc"));
                out.push(ToolCall {
                    arguments: Value::Object(a),
                    ..call.clone()
                });
                break;
            }
        }
    }
    out
}

fn cases_for(label: &str, tools: &[ToolSchema], calls: &[ToolCall], out: &mut Vec<Value>) {
    for style in styles() {
        for &mode in style.plugin.grammar_modes() {
            if mode == GrammarMode::JsonSchema && style.label == "qwen_xml" {
                continue; // identical to hermes: json_schema ignores the call style
            }
            for (parallel, required) in [(false, false), (true, false), (false, true), (true, true)]
            {
                let rules = CallRules { parallel, required };
                let (kind, grammar) = match style.plugin.build_grammar(mode, tools, rules).unwrap()
                {
                    Grammar::Ebnf(text) => ("ebnf", json!(text)),
                    Grammar::StructuralTag(tag) => ("structural_tag", json!(tag.to_string())),
                    Grammar::JsonSchema(schema) => ("json_schema", json!(schema.to_string())),
                };
                let mut accept = vec![write(&style, mode, &calls[..1], parallel)];
                let mut reject = Vec::new();
                if mode != GrammarMode::JsonSchema {
                    // A required call leaves no room for text, with or
                    // without a call after it.
                    let plain = "Plain answer, no call.".to_string();
                    if required {
                        reject.push(plain);
                    } else {
                        accept.push(plain);
                    }
                    if required {
                        reject.push(format!("Let me check.\n{}", accept[0]));
                    } else {
                        accept.push(format!("Let me check.\n{}", accept[0]));
                    }
                }
                if calls.len() > 1 {
                    let many = write(&style, mode, calls, true);
                    if parallel {
                        accept.push(many)
                    } else {
                        reject.push(many)
                    }
                }
                for bad in wrong(&calls[0], &tools[0]) {
                    reject.push(write(&style, mode, &[bad], parallel));
                }
                for text in &accept {
                    check_parse(&style, tools, text, calls);
                }
                out.push(json!({
                    "name": format!("{label}/{}/{}/parallel={parallel}/required={required}", style.label, mode.as_str()),
                    "kind": kind, "grammar": grammar, "accept": accept, "reject": reject,
                }));
            }
        }
    }
}

/// Whatever the grammar accepts, the parser must read back to the calls.
fn check_parse(style: &Style, tools: &[ToolSchema], text: &str, calls: &[ToolCall]) {
    let parsed = style
        .plugin
        .parse_reply(&Message::assistant(Some(text.into()), vec![]), tools);
    for (got, want) in parsed.calls.iter().zip(calls) {
        assert_eq!(got.error, None, "{}: {text}", style.label);
        assert_eq!(
            (&got.call.name, &got.call.arguments),
            (&want.name, &want.arguments),
            "{}: {text}",
            style.label
        );
    }
}

#[test]
fn example_tool_grammars_compile_accept_and_reject_in_xgrammar() {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/model/example_tools.json");
    let tools: Vec<ToolSchema> =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let call_sets = [
        vec![
            ToolCall::new("1", "add", json!({"a": 2, "b": -40})),
            ToolCall::new(
                "2",
                "search",
                json!({"query": "say \"hi\", {x}\nline 2", "tags": ["a", "b c"]}),
            ),
        ],
        vec![
            ToolCall::new(
                "1",
                "set_mode",
                json!({"mode": "slow", "options": {"verbose": true, "depth": 2.5}, "note": null}),
            ),
            ToolCall::new("2", "finish", json!({})),
        ],
        vec![ToolCall::new(
            "1",
            "search",
            json!({"query": "", "limit": 3}),
        )],
    ];
    let mut cases = Vec::new();
    for (i, calls) in call_sets.iter().enumerate() {
        // The tool called first leads the set so `wrong()` can use its schema.
        let mut ordered = tools.clone();
        let first = ordered
            .iter()
            .position(|t| t.name == calls[0].name)
            .unwrap();
        ordered.swap(0, first);
        cases_for(&format!("example{i}"), &ordered, calls, &mut cases);
    }
    run_checker(&cases);
}

#[test]
fn generated_schema_grammars_compile_accept_and_reject_in_xgrammar() {
    let mut runner = TestRunner::deterministic();
    let strategy = proptest::collection::vec(model_gen::tool_and_call(), 1..4);
    let mut cases = Vec::new();
    for i in 0..30 {
        let mut pairs = strategy.new_tree(&mut runner).unwrap().current();
        // One tool per name: a later duplicate would shadow the schema.
        let mut seen = std::collections::HashSet::new();
        pairs.retain(|(t, _)| seen.insert(t.name.clone()));
        let tools: Vec<ToolSchema> = pairs.iter().map(|(t, _)| t.clone()).collect();
        let calls: Vec<ToolCall> = pairs.iter().map(|(_, c)| c.clone()).collect();
        cases_for(&format!("generated{i}"), &tools, &calls, &mut cases);
    }
    run_checker(&cases);
}

#[test]
fn shipped_model_config_grammars_compile_in_xgrammar() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let catalog =
        structured_agents::model::ModelCatalog::load(&root.join("config/models")).unwrap();
    let tools: Vec<ToolSchema> = serde_json::from_str(
        &std::fs::read_to_string(root.join("tests/data/model/example_tools.json")).unwrap(),
    )
    .unwrap();
    let call = ToolCall::new("1", "add", json!({"a": 1, "b": 2}));
    let mut cases = Vec::new();
    for name in catalog.names() {
        let model = catalog.resolve(name).unwrap();
        let wire = model.wire_for(ServerKind::Vllm);
        for mode in GrammarMode::ALL
            .into_iter()
            .filter(|m| model.supports(*m, wire))
        {
            for parallel in [false, true] {
                let fragment = model
                    .request_fragment(wire, Some(mode), &tools, &ToolChoice::Auto, parallel)
                    .unwrap();
                let (kind, grammar) = match (&fragment.get("structured_outputs"), mode) {
                    (Some(so), GrammarMode::Ebnf) => ("ebnf", so["grammar"].clone()),
                    (Some(so), GrammarMode::StructuralTag) => {
                        ("structural_tag", so["structural_tag"].clone())
                    }
                    (Some(so), GrammarMode::JsonSchema) => {
                        ("json_schema", json!(so["json"].to_string()))
                    }
                    (None, GrammarMode::Ebnf) => ("ebnf", fragment["guided_grammar"].clone()),
                    (None, _) => ("json_schema", json!(fragment["guided_json"].to_string())),
                };
                let bad = ToolCall {
                    name: "zz_nosuch".into(),
                    ..call.clone()
                };
                let (accept, reject) = if mode == GrammarMode::JsonSchema {
                    let one = |c: &ToolCall| json!({"name": c.name, "arguments": c.arguments});
                    let wrap = |v: Value| if parallel { json!([v]) } else { v }.to_string();
                    (wrap(one(&call)), wrap(one(&bad)))
                } else {
                    (
                        model.plugin.render_call(&call).unwrap(),
                        model.plugin.render_call(&bad).unwrap(),
                    )
                };
                cases.push(json!({
                    "name": format!("config/{name}/{}/parallel={parallel}", mode.as_str()),
                    "kind": kind, "grammar": grammar, "accept": [accept], "reject": [reject],
                }));
            }
        }
    }
    assert!(cases.len() >= 20, "only {} config grammars", cases.len());
    run_checker(&cases);
}
