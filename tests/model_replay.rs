//! The mock-server replay scripts in `tests/data/model/replay/` (Qwen
//! Hermes, Qwen3 XML and FunctionGemma text, no native tool_calls) are
//! valid scripts, and their model's plugin reads the first reply as the
//! call `add{a:3,b:4}` and the second as a plain answer. The end-to-end
//! `structured-agents run` against the mock server uses these scripts.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

use std::path::PathBuf;

use serde_json::json;
use structured_agents::mock::Script;
use structured_agents::model::ModelCatalog;
use structured_agents::types::{Message, ToolSchema};

#[test]
fn replay_scripts_parse_to_the_add_call() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let catalog = ModelCatalog::load(&root.join("config/models")).unwrap();
    let tools = vec![ToolSchema {
        name: "add".into(),
        description: "Add two integers.".into(),
        parameters: json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}),
    }];
    for (file, model) in [
        ("hermes.yaml", "qwen"),
        ("qwen_xml.yaml", "qwen3-xml"),
        ("function_gemma.yaml", "function_gemma"),
    ] {
        let script = Script::load(&root.join("tests/data/model/replay").join(file)).unwrap();
        let plugin = catalog.resolve(model).unwrap().plugin;
        let first = Message::assistant(script.replies[0].content.clone(), vec![]);
        let parsed = plugin.parse_reply(&first, &tools);
        assert_eq!(parsed.calls.len(), 1, "{file}: {parsed:?}");
        assert_eq!(parsed.calls[0].error, None, "{file}");
        assert_eq!(parsed.calls[0].call.name, "add", "{file}");
        assert_eq!(
            parsed.calls[0].call.arguments,
            json!({"a": 3, "b": 4}),
            "{file}"
        );
        let last = Message::assistant(script.replies[1].content.clone(), vec![]);
        let parsed = plugin.parse_reply(&last, &tools);
        assert!(parsed.calls.is_empty(), "{file}");
        assert_eq!(parsed.content.as_deref(), Some("The sum is 7."), "{file}");
    }
}
