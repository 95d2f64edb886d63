//! The corpus of raw model outputs in `tests/data/model/corpus.toml`, each
//! with the calls (or `bad_args` details) and content a plugin must read
//! from it. Covers Hermes, Qwen3 XML, bare `<function=...>`, whole-content
//! JSON, FunctionGemma and native `tool_calls` with their fallback rules.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;
use structured_agents::model::ModelCatalog;
use structured_agents::types::{Message, ToolSchema};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Corpus {
    case: Vec<Case>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    /// A model name from `config/models` (or a built-in plugin).
    model: String,
    #[serde(default)]
    content: String,
    /// Native `tool_calls`, as the wire JSON array.
    native: Option<String>,
    /// Expected content; absent means none.
    expect_content: Option<String>,
    #[serde(default)]
    expect: Vec<Expected>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Expected {
    name: String,
    /// JSON text of the expected arguments (for well-formed calls).
    arguments: Option<String>,
    /// The exact argument text, when it must be kept verbatim.
    raw: Option<String>,
    id: Option<String>,
    /// The detail the kernel sends back as `bad_args:<detail>`.
    bad_args: Option<String>,
}

/// `call_` + a hyphen-less UUIDv4 (version nibble 4, variant bits 10).
fn is_generated_id(id: &str) -> bool {
    id.strip_prefix("call_")
        .and_then(|hex| uuid::Uuid::try_parse(hex).ok())
        .is_some_and(|u| u.get_version_num() == 4)
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn corpus_outputs_parse_to_the_expected_calls() {
    let text = std::fs::read_to_string(root().join("tests/data/model/corpus.toml")).unwrap();
    let corpus: Corpus = toml::from_str(&text).unwrap();
    assert!(
        corpus.case.len() >= 40,
        "corpus has only {} cases",
        corpus.case.len()
    );
    let tools: Vec<ToolSchema> = serde_json::from_str(
        &std::fs::read_to_string(root().join("tests/data/model/example_tools.json")).unwrap(),
    )
    .unwrap();
    let catalog = ModelCatalog::load(&root().join("config/models")).unwrap();
    let mut failures = Vec::new();
    let mut names = std::collections::HashSet::new();
    for case in &corpus.case {
        assert!(
            names.insert(case.name.clone()),
            "duplicate case name {}",
            case.name
        );
        let model = catalog.resolve(&case.model).unwrap();
        let mut wire = serde_json::json!({"role": "assistant", "content": case.content});
        if let Some(native) = &case.native {
            wire["tool_calls"] = serde_json::from_str(native).unwrap();
        }
        let reply = Message::from_wire(&wire).unwrap();
        let parsed = model.plugin.parse_reply(&reply, &tools);
        let mut problems = Vec::new();
        if parsed.content != case.expect_content {
            problems.push(format!(
                "content {:?}, expected {:?}",
                parsed.content, case.expect_content
            ));
        }
        if parsed.calls.len() != case.expect.len() {
            problems.push(format!(
                "{} calls, expected {}: {:?}",
                parsed.calls.len(),
                case.expect.len(),
                parsed.calls
            ));
        }
        for (i, (got, want)) in parsed.calls.iter().zip(&case.expect).enumerate() {
            if got.call.name != want.name {
                problems.push(format!(
                    "call {i}: name `{}`, expected `{}`",
                    got.call.name, want.name
                ));
            }
            if let Some(args) = &want.arguments {
                let args: Value = serde_json::from_str(args).unwrap();
                if got.call.arguments != args {
                    problems.push(format!(
                        "call {i}: arguments {}, expected {args}",
                        got.call.arguments
                    ));
                }
            }
            if let Some(raw) = &want.raw
                && got.call.arguments_text() != *raw
            {
                problems.push(format!(
                    "call {i}: argument text {:?}, expected {raw:?}",
                    got.call.arguments_text()
                ));
            }
            match &want.id {
                Some(id) if got.call.id != *id => {
                    problems.push(format!("call {i}: id {}, expected {id}", got.call.id))
                }
                Some(_) => {}
                // Generated: "call_" + a UUIDv4 in 32 hex digits (122 random bits).
                None if !is_generated_id(&got.call.id) => problems.push(format!(
                    "call {i}: id {} is not a generated UUIDv4 id",
                    got.call.id
                )),
                None => {}
            }
            if got.error != want.bad_args {
                problems.push(format!(
                    "call {i}: error {:?}, expected {:?}",
                    got.error, want.bad_args
                ));
            }
        }
        if !problems.is_empty() {
            failures.push(format!("[{}]\n  {}", case.name, problems.join("\n  ")));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} corpus cases failed:\n{}",
        failures.len(),
        corpus.case.len(),
        failures.join("\n")
    );
}
