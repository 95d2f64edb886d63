//! The converter's tests: every original key lands in its place, what has
//! no equivalent is reported, directories are written in place or as a copy.

use super::*;
use std::path::Path;

use serde_json::{Value, json};

use crate::bundle::original::original_keys;

const ORIGINAL: &str = r#"name: summariser
version: "2.0"
model:
  plugin: qwen
  adapter: Qwen/Qwen2.5-7B-Instruct
  grammar:
    mode: ebnf
    allow_parallel_calls: false
    args_format: escaped_strings
initial_context:
  system_prompt: "You summarise {{ topic }}."
  user_template: "Summarise: {{ input }}"
max_turns: 6
termination_tool: submit_result
tools:
  - name: count_words
    registry: grail
    description: Counts words
  - name: submit_result
    inputs_override: {type: object, properties: {summary: {type: string}}, required: [summary]}
    context_providers: [tools/ctx.pym]
  - name: lookup
    registry: python
registries: [grail, python]
"#;

fn bundle_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("tools")).unwrap();
    std::fs::write(
            dir.path().join("tools/count_words.pym"),
            "from grail import Input\ntext: str = Input(\"text\")\nlimit: int = Input(\"limit\", default=10)\n",
        )
        .unwrap();
    std::fs::write(
        dir.path().join("tools/submit_result.pym"),
        "summary: str = Input(\"summary\")\n",
    )
    .unwrap();
    dir
}

fn converted(text: &str, dir: &Path) -> (Value, Conversion) {
    let conversion = convert(
        text,
        dir,
        &dir.join("bundle.yaml"),
        &ImportOptions::default(),
    )
    .unwrap();
    let value: Value = serde_saphyr::from_str(&conversion.yaml).unwrap();
    (value, conversion)
}

#[test]
fn every_original_key_lands_in_its_place_here() {
    let dir = bundle_dir();
    let (value, _) = converted(ORIGINAL, dir.path());
    assert_eq!(value["model"]["endpoint"], DEFAULT_ENDPOINT);
    assert_eq!(value["model"]["name"], "Qwen/Qwen2.5-7B-Instruct");
    assert_eq!(value["model"]["plugin"], "qwen");
    assert_eq!(
        value["model"]["grammar"],
        json!({"mode": "ebnf", "allow_parallel_calls": false})
    );
    assert_eq!(
        value["prompts"],
        json!({"system": "You summarise {{ topic }}.", "user": "Summarise: {{ input }}"})
    );
    assert_eq!(
        value["limits"],
        json!({"max_turns": 6, "on_max_turns": "succeed"})
    );
    assert_eq!(value["termination"], json!({"tool": "submit_result"}));
    assert_eq!(value["version"], "2.0");
    let tools = value["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 2, "the python tool is left out: {tools:?}");
    assert_eq!(tools[0]["kind"], "grail");
    assert_eq!(tools[0]["script"], "tools/count_words.pym");
    assert_eq!(tools[0]["description"], "Counts words");
    assert_eq!(
        tools[0]["parameters"],
        json!({"type": "object", "properties": {"text": {"type": "string"}, "limit": {"type": "integer"}}, "required": ["text"]})
    );
    assert_eq!(tools[1]["parameters"]["required"], json!(["summary"]));
}

#[test]
fn what_has_no_equivalent_is_reported_with_its_original_key_and_line() {
    let dir = bundle_dir();
    let (_, conversion) = converted(ORIGINAL, dir.path());
    let keys: Vec<_> = conversion
        .not_converted
        .iter()
        .map(|i| (i.key.as_str(), i.line))
        .collect();
    assert_eq!(
        keys,
        [
            ("model.grammar.args_format", Some(9)),
            ("tools[1].context_providers", Some(21)),
            ("tools[2]", Some(22)),
            ("registries[1]", Some(24)),
        ]
    );
    let changed: Vec<_> = conversion.changed.iter().map(|i| i.key.as_str()).collect();
    for key in [
        "initial_context.system_prompt",
        "initial_context.user_template",
        "max_turns",
        "termination_tool",
        "tools[0].registry",
        "tools[1].inputs_override",
        "model.adapter",
        "registries[0]",
    ] {
        assert!(changed.contains(&key), "{key} in {changed:?}");
    }
}

#[test]
fn the_originals_defaults_are_written_out() {
    let dir = bundle_dir();
    let text =
        "name: my agent\ninitial_context: {system_prompt: hi}\ntools: [{name: submit_result}]\n";
    let options = ImportOptions {
        endpoint: "http://gpu:8000/v1".into(),
        model: Some("m".into()),
    };
    let conversion = convert(text, dir.path(), &dir.path().join("bundle.yaml"), &options).unwrap();
    let value: Value = serde_saphyr::from_str(&conversion.yaml).unwrap();
    assert_eq!(value["name"], "my_agent");
    assert_eq!(value["version"], "1.0");
    assert_eq!(
        value["model"],
        json!({"endpoint": "http://gpu:8000/v1", "name": "m", "plugin": "function_gemma", "grammar": {"mode": "ebnf", "allow_parallel_calls": true}})
    );
    assert_eq!(value["prompts"]["user"], "{{ input }}");
    assert_eq!(
        value["termination"],
        json!({"tool": "submit_result"}),
        "the default termination tool exists"
    );
    assert!(
        conversion.not_converted.is_empty(),
        "{:?}",
        conversion.not_converted
    );
}

#[test]
fn a_bundle_without_a_model_name_or_original_keys_is_refused_with_what_to_do() {
    let dir = bundle_dir();
    let file = dir.path().join("bundle.yaml");
    let no_model = convert(
        "name: a\ninitial_context: {system_prompt: hi}\n",
        dir.path(),
        &file,
        &ImportOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        no_model.contains("model.adapter") && no_model.contains("--model NAME"),
        "{no_model}"
    );
    let ours = convert(
        "name: a\nversion: 1\nmodel: {endpoint: x, name: m}\nprompts: {user: hi}\n",
        dir.path(),
        &file,
        &ImportOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(ours.contains("not an original bundle"), "{ours}");
}

#[test]
fn import_dir_writes_a_copy_or_in_place_and_never_into_itself() {
    let dir = bundle_dir();
    std::fs::write(dir.path().join("bundle.yaml"), ORIGINAL).unwrap();
    let options = ImportOptions::default();
    let inside = import_dir(dir.path(), Some(&dir.path().join("new")), false, &options)
        .unwrap_err()
        .to_string();
    assert!(
        inside.contains("is inside the bundle being converted"),
        "{inside}"
    );
    assert!(!dir.path().join("new").exists());

    let out = tempfile::tempdir().unwrap();
    let copy = out.path().join("copy");
    let imported = import_dir(dir.path(), Some(&copy), false, &options).unwrap();
    assert_eq!(imported.source, dir.path().join("bundle.yaml"));
    assert!(copy.join("tools/count_words.pym").is_file());
    assert_eq!(
        std::fs::read_to_string(copy.join("bundle.yaml")).unwrap(),
        imported.conversion.yaml
    );
    let again = import_dir(dir.path(), Some(&copy), false, &options)
        .unwrap_err()
        .to_string();
    assert!(again.contains("is not empty"), "{again}");

    let imported = import_dir(dir.path(), None, false, &options).unwrap();
    assert_eq!(imported.source, dir.path().join(ORIGINAL_BACKUP));
    assert_eq!(std::fs::read_to_string(&imported.source).unwrap(), ORIGINAL);
    let twice = import_dir(dir.path(), None, false, &options)
        .unwrap_err()
        .to_string();
    assert!(twice.contains("not an original bundle"), "{twice}");
}

#[test]
fn original_keys_are_found_with_their_paths() {
    let value: Value = serde_saphyr::from_str(ORIGINAL).unwrap();
    let paths: Vec<_> = original_keys(&value).into_iter().map(|k| k.path).collect();
    assert_eq!(
        paths,
        [
            "initial_context",
            "max_turns",
            "termination_tool",
            "registries",
            "model.adapter",
            "model.grammar.args_format",
            "tools[0].registry",
            "tools[2].registry",
            "tools[1].inputs_override",
            "tools[1].context_providers",
        ]
    );
}
