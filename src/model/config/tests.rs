//! Tests of `model::config`.

use super::*;

fn load(files: &[(&str, &str)]) -> Result<ModelCatalog, ModelConfigError> {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    ModelCatalog::load(dir.path())
}

#[test]
fn variants_inherit_and_override() {
    let catalog = load(&[(
            "qwen.toml",
            "default_grammar = \"ebnf\"\nstop = [\"<|im_end|>\"]\n[variants.qwen3-xml.parser]\ncall_style = \"xml\"\n",
        )])
        .unwrap();
    let xml = catalog.resolve("qwen3-xml").unwrap();
    assert_eq!(xml.default_grammar, Some(GrammarMode::Ebnf));
    assert_eq!(xml.stop, vec!["<|im_end|>"]);
    assert_eq!(xml.plugin.name(), "qwen");
    assert!(catalog.resolve("openai").is_ok());
    let err = catalog.resolve("nope").unwrap_err().to_string();
    assert!(
        err.contains("qwen3-xml") && err.contains("function_gemma"),
        "{err}"
    );
}

#[test]
fn errors_name_file_line_and_key() {
    let err = load(&[(
        "qwen.toml",
        "stop = []\n\n[parser]\ncall_style = \"yaml\"\n",
    )])
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("qwen.toml:3: key `parser`") && err.contains("yaml"),
        "{err}"
    );
    let err = load(&[(
        "function_gemma.toml",
        "stop = []\ndefault_grammar = \"json_schema\"\n",
    )])
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("function_gemma.toml:2: key `default_grammar`")
            && err.contains("supported: ebnf, structural_tag"),
        "{err}"
    );
    let err = load(&[("qwen.toml", "stops = []\n")])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("qwen.toml:1: key `stops`") && err.contains("unknown field"),
        "{err}"
    );
    let err = load(&[("mine.toml", "plugin = \"llama\"\n")])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("mine.toml:1: key `plugin`") && err.contains("llama"),
        "{err}"
    );
}

#[test]
fn missing_dir_means_builtins_and_unsupported_modes_fail() {
    let catalog = ModelCatalog::load(Path::new("/nonexistent/models")).unwrap();
    let openai = catalog.resolve("openai").unwrap();
    let wire = WireKey::StructuredOutputs;
    assert!(!openai.supports(GrammarMode::Ebnf, wire));
    assert!(
        openai
            .request_fragment(wire, Some(GrammarMode::Ebnf), &[], &ToolChoice::Auto, false)
            .is_err()
    );
    assert!(
        openai
            .request_fragment(wire, None, &[], &ToolChoice::Auto, false)
            .unwrap()
            .is_empty()
    );
}

/// A plugin library handed in by the registry, for the tests.
struct Library;

impl ModelPlugin for Library {
    fn name(&self) -> &str {
        "mine"
    }
    fn grammar_modes(&self) -> &[GrammarMode] {
        &[]
    }
    fn parse_reply(
        &self,
        _reply: &crate::types::Message,
        _tools: &[ToolSchema],
    ) -> super::super::ParsedReply {
        super::super::ParsedReply::default()
    }
}

#[test]
fn plugin_libraries_are_models_and_configurable_plugins() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("tuned.toml"),
        "plugin = \"mine\"\nstop = [\"</s>\"]\n",
    )
    .unwrap();
    let libraries: Vec<Arc<dyn ModelPlugin>> = vec![Arc::new(Library)];
    let catalog = ModelCatalog::load_with(dir.path(), &libraries).unwrap();
    assert_eq!(catalog.resolve("mine").unwrap().plugin.name(), "mine");
    let tuned = catalog.resolve("tuned").unwrap();
    assert_eq!(tuned.plugin.name(), "mine");
    assert_eq!(tuned.stop, vec!["</s>"]);
    // Without the library the same file names an unknown plugin.
    let err = ModelCatalog::load(dir.path()).unwrap_err().to_string();
    assert!(err.contains("unknown plugin `mine`"), "{err}");
    // A library has no parser options.
    std::fs::write(
        dir.path().join("tuned.toml"),
        "plugin = \"mine\"\n[parser]\nx = 1\n",
    )
    .unwrap();
    let err = ModelCatalog::load_with(dir.path(), &libraries)
        .unwrap_err()
        .to_string();
    assert!(err.contains("has no parser options"), "{err}");
}
