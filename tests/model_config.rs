//! The shipped model configurations (`config/models/*.toml`) load, resolve
//! by name, and shape request fragments as documented: the grammar under the
//! configured wire key, `stop` when configured, errors (never an
//! unconstrained request) for modes a model cannot send.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

use std::path::PathBuf;

use serde_json::{Value, json};
use structured_agents::model::{BUILTIN_PLUGINS, GrammarMode, ModelCatalog};
use structured_agents::types::ToolSchema;

fn catalog() -> ModelCatalog {
    ModelCatalog::load(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/models")).unwrap()
}

fn add_tool() -> Vec<ToolSchema> {
    vec![ToolSchema {
        name: "add".into(),
        description: "Add.".into(),
        parameters: json!({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}),
    }]
}

#[test]
fn shipped_configs_define_the_documented_names() {
    let catalog = catalog();
    let names: Vec<&str> = catalog.names().collect();
    for name in
        BUILTIN_PLUGINS
            .iter()
            .copied()
            .chain(["qwen3-xml", "qwen-guided", "function_gemma-tagged"])
    {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    let xml = catalog.resolve("qwen3-xml").unwrap();
    assert_eq!(xml.plugin.name(), "qwen");
    assert_eq!(xml.stop, vec!["<|im_end|>"]);
    let err = catalog.resolve("qwen4").unwrap_err().to_string();
    assert!(
        err.contains("unknown model `qwen4`") && err.contains("qwen3-xml"),
        "{err}"
    );
}

#[test]
fn default_grammar_goes_under_the_wire_key_with_stop() {
    let catalog = catalog();
    let qwen = catalog.resolve("qwen").unwrap();
    let fragment = qwen.request_fragment(None, &add_tool(), false).unwrap();
    let tag = fragment["structured_outputs"]["structural_tag"]
        .as_str()
        .expect("structural tag as a JSON string");
    let tag: Value = serde_json::from_str(tag).unwrap();
    assert_eq!(tag["format"]["stop_after_first"], json!(true));
    assert_eq!(fragment["stop"], json!(["<|im_end|>"]));

    let guided = catalog.resolve("qwen-guided").unwrap();
    let fragment = guided.request_fragment(None, &add_tool(), true).unwrap();
    assert!(
        fragment["guided_grammar"]
            .as_str()
            .unwrap()
            .starts_with("root ::= ")
    );
    assert!(!guided.supports(GrammarMode::StructuralTag));
    assert!(
        guided
            .request_fragment(Some(GrammarMode::StructuralTag), &add_tool(), true)
            .is_err()
    );

    let json_mode = qwen
        .request_fragment(Some(GrammarMode::JsonSchema), &add_tool(), true)
        .unwrap();
    assert_eq!(
        json_mode["structured_outputs"]["json"]["type"],
        json!("array")
    );
}

#[test]
fn unsupported_modes_are_errors_not_unconstrained_requests() {
    let catalog = catalog();
    let gemma = catalog.resolve("function_gemma").unwrap();
    assert!(gemma.supports(GrammarMode::Ebnf) && !gemma.supports(GrammarMode::JsonSchema));
    let err = gemma
        .request_fragment(Some(GrammarMode::JsonSchema), &add_tool(), false)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("does not support grammar mode `json_schema`")
            && err.contains("ebnf, structural_tag"),
        "{err}"
    );
    let openai = catalog.resolve("openai").unwrap();
    assert!(
        openai
            .request_fragment(Some(GrammarMode::Ebnf), &add_tool(), false)
            .is_err()
    );
    let err = gemma
        .request_fragment(Some(GrammarMode::Ebnf), &[], false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("at least one tool"), "{err}");
    // Without tools the default mode has nothing to constrain; stop still applies.
    let fragment = gemma.request_fragment(None, &[], false).unwrap();
    assert_eq!(Value::Object(fragment), json!({"stop": ["<end_of_turn>"]}));
}
