//! The shipped model configurations (`config/models/*.toml`) load, resolve
//! by name, and shape request fragments as documented: the grammar under the
//! configured wire key, `stop` when configured, errors (never an
//! unconstrained request) for modes a model cannot send.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

use std::path::PathBuf;

use serde_json::Map;
use serde_json::{Value, json};
use structured_agents::model::{
    BUILTIN_PLUGINS, GrammarError, GrammarMode, ModelCatalog, ResolvedModel, ServerKind,
    ToolChoice, WireKey,
};
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

/// The fragment a vLLM endpoint gets when the model may call any tool.
fn vllm(
    model: &ResolvedModel,
    mode: Option<GrammarMode>,
    tools: &[ToolSchema],
    parallel: bool,
) -> Result<Map<String, Value>, GrammarError> {
    model.request_fragment(
        model.wire_for(ServerKind::Vllm),
        mode,
        tools,
        &ToolChoice::Auto,
        parallel,
    )
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
    let fragment = vllm(&qwen, None, &add_tool(), false).unwrap();
    let tag = fragment["structured_outputs"]["structural_tag"]
        .as_str()
        .expect("structural tag as a JSON string");
    let tag: Value = serde_json::from_str(tag).unwrap();
    assert_eq!(tag["format"]["stop_after_first"], json!(true));
    assert_eq!(fragment["stop"], json!(["<|im_end|>"]));

    let guided = catalog.resolve("qwen-guided").unwrap();
    let fragment = vllm(&guided, None, &add_tool(), true).unwrap();
    assert!(
        fragment["guided_grammar"]
            .as_str()
            .unwrap()
            .starts_with("root ::= ")
    );
    assert!(!guided.supports(
        GrammarMode::StructuralTag,
        guided.wire_for(ServerKind::Vllm)
    ));
    assert!(vllm(&guided, Some(GrammarMode::StructuralTag), &add_tool(), true).is_err());

    let json_mode = vllm(&qwen, Some(GrammarMode::JsonSchema), &add_tool(), true).unwrap();
    assert_eq!(
        json_mode["structured_outputs"]["json"]["type"],
        json!("array")
    );
}

#[test]
fn unsupported_modes_are_errors_not_unconstrained_requests() {
    let catalog = catalog();
    let gemma = catalog.resolve("function_gemma").unwrap();
    assert!(
        gemma.supports(GrammarMode::Ebnf, gemma.wire_for(ServerKind::Vllm))
            && !gemma.supports(GrammarMode::JsonSchema, gemma.wire_for(ServerKind::Vllm))
    );
    let err = vllm(&gemma, Some(GrammarMode::JsonSchema), &add_tool(), false)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("does not support grammar mode `json_schema`")
            && err.contains("ebnf, structural_tag"),
        "{err}"
    );
    let openai = catalog.resolve("openai").unwrap();
    assert!(vllm(&openai, Some(GrammarMode::Ebnf), &add_tool(), false).is_err());
    let err = vllm(&gemma, Some(GrammarMode::Ebnf), &[], false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("at least one tool"), "{err}");
    // Without tools the default mode has nothing to constrain; stop still applies.
    let fragment = vllm(&gemma, None, &[], false).unwrap();
    assert_eq!(Value::Object(fragment), json!({"stop": ["<end_of_turn>"]}));
}

#[test]
fn each_server_family_gets_its_own_wire() {
    let catalog = catalog();
    let qwen = catalog.resolve("qwen").unwrap();
    let at = |server: ServerKind, mode| {
        qwen.request_fragment(
            qwen.wire_for(server),
            Some(mode),
            &add_tool(),
            &ToolChoice::Auto,
            false,
        )
    };
    let gbnf = at(ServerKind::LlamaCpp, GrammarMode::Ebnf).unwrap();
    let text = gbnf["grammar"].as_str().unwrap();
    assert!(
        text.contains("call-add ::=") && !text.contains("call_add"),
        "{text}"
    );
    let schema = at(ServerKind::LlamaCpp, GrammarMode::JsonSchema).unwrap();
    assert_eq!(schema["response_format"]["type"], json!("json_schema"));
    assert_eq!(
        schema["response_format"]["json_schema"]["schema"]["properties"]["name"],
        json!({"const": "add"})
    );
    for server in [ServerKind::Ollama, ServerKind::Sglang, ServerKind::Openai] {
        let fragment = at(server, GrammarMode::JsonSchema).unwrap();
        assert!(fragment.contains_key("response_format"), "{server:?}");
        let err = at(server, GrammarMode::Ebnf).unwrap_err().to_string();
        assert!(err.contains("wire `response_format`"), "{err}");
    }
    let err = at(ServerKind::LlamaCpp, GrammarMode::StructuralTag)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("structural_tag") && err.contains("gbnf"),
        "{err}"
    );
    // A model config's wire wins over the server family's.
    let guided = catalog.resolve("qwen-guided").unwrap();
    assert_eq!(guided.wire_for(ServerKind::LlamaCpp), WireKey::Guided);
    let ollama = qwen
        .request_fragment(
            WireKey::OllamaFormat,
            Some(GrammarMode::JsonSchema),
            &add_tool(),
            &ToolChoice::Auto,
            false,
        )
        .unwrap();
    assert_eq!(
        ollama["format"]["properties"]["name"],
        json!({"const": "add"})
    );
}

#[test]
fn tool_choice_narrows_the_grammar() {
    let catalog = catalog();
    let qwen = catalog.resolve("qwen").unwrap();
    let mut tools = add_tool();
    tools.push(ToolSchema {
        name: "done".into(),
        description: "Finish.".into(),
        parameters: json!({"type": "object", "properties": {"answer": {"type": "string"}}}),
    });
    let ebnf = |choice: ToolChoice| {
        qwen.request_fragment(
            WireKey::StructuredOutputs,
            Some(GrammarMode::Ebnf),
            &tools,
            &choice,
            false,
        )
        .unwrap()
        .get("structured_outputs")
        .map(|s| s["grammar"].as_str().unwrap().to_string())
    };
    let auto = ebnf(ToolChoice::Auto).unwrap();
    assert!(
        auto.contains("text ::=") && auto.contains("call_done"),
        "{auto}"
    );
    let required = ebnf(ToolChoice::Required).unwrap();
    assert!(!required.contains("text ::="), "{required}");
    let named = ebnf(ToolChoice::Tool("done".into())).unwrap();
    assert!(
        named.contains("call_done") && !named.contains("call_add") && !named.contains("text ::="),
        "{named}"
    );
    assert_eq!(ebnf(ToolChoice::None), None);
    assert_eq!(
        ToolChoice::from("add".to_string()),
        ToolChoice::Tool("add".into())
    );
    assert_eq!(
        ToolChoice::Tool("add".into()).to_wire(),
        json!({"type": "function", "function": {"name": "add"}})
    );
}
