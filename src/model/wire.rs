//! Where a grammar goes in the request body, and a caller's answer format
//! (a JSON Schema, [`WireKey::answer`]). Servers disagree: current vLLM
//! reads `structured_outputs.{grammar,structural_tag,json}`, older vLLM reads
//! `guided_grammar` / `guided_json`, llama.cpp reads GBNF in `grammar`, and
//! most servers read a JSON Schema in OpenAI's `response_format`. An
//! endpoint's [`ServerKind`] picks the default [`WireKey`]; a model config
//! may override it. This module owns only that mapping; it does not know how
//! grammars are built.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::{GrammarError, GrammarMode, gbnf};
use crate::types::AnswerFormat;

/// A grammar built by a plugin, not yet placed on the wire.
#[derive(Debug, Clone, PartialEq)]
pub enum Grammar {
    /// XGrammar EBNF text.
    Ebnf(String),
    /// An XGrammar structural tag (`{"type": "structural_tag", "format": ...}`).
    StructuralTag(Value),
    /// A JSON Schema the whole output must match.
    JsonSchema(Value),
}

impl Grammar {
    pub fn mode(&self) -> GrammarMode {
        match self {
            Self::Ebnf(_) => GrammarMode::Ebnf,
            Self::StructuralTag(_) => GrammarMode::StructuralTag,
            Self::JsonSchema(_) => GrammarMode::JsonSchema,
        }
    }
}

// Its derive list begins as `access::Scope`'s by coincidence: each lists
// the traits its own uses need.
/// The family of model server an endpoint is; it picks the default wire.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Default,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
    clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum ServerKind {
    #[default]
    Vllm,
    LlamaCpp,
    Ollama,
    Sglang,
    Openai,
}

impl ServerKind {
    pub const ALL: [ServerKind; 5] = [
        Self::Vllm,
        Self::LlamaCpp,
        Self::Ollama,
        Self::Sglang,
        Self::Openai,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Vllm => "vllm",
            Self::LlamaCpp => "llama_cpp",
            Self::Ollama => "ollama",
            Self::Sglang => "sglang",
            Self::Openai => "openai",
        }
    }

    /// Where this family reads grammars when the model config does not say.
    pub fn default_wire(self) -> WireKey {
        match self {
            Self::Vllm => WireKey::StructuredOutputs,
            Self::LlamaCpp => WireKey::Gbnf,
            Self::Ollama | Self::Sglang | Self::Openai => WireKey::ResponseFormat,
        }
    }
}

/// The request key family a server reads grammars from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireKey {
    /// `structured_outputs: {grammar | structural_tag (a JSON string) | json}` (vLLM >= 0.10).
    StructuredOutputs,
    /// `guided_grammar` / `guided_json` (vLLM < 0.10); has no structural tags.
    Guided,
    /// OpenAI's `response_format: {type: "json_schema", ...}` (vLLM, llama.cpp,
    /// Ollama, LM Studio, SGLang, OpenAI); JSON Schemas only.
    ResponseFormat,
    /// llama.cpp: GBNF text in `grammar`; a JSON Schema in `response_format`.
    Gbnf,
    /// Ollama's native `format` key holding a JSON Schema.
    OllamaFormat,
}

impl WireKey {
    pub const ALL: [WireKey; 5] = [
        Self::StructuredOutputs,
        Self::Guided,
        Self::ResponseFormat,
        Self::Gbnf,
        Self::OllamaFormat,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::StructuredOutputs => "structured_outputs",
            Self::Guided => "guided",
            Self::ResponseFormat => "response_format",
            Self::Gbnf => "gbnf",
            Self::OllamaFormat => "ollama_format",
        }
    }

    /// The grammar modes this wire can carry.
    pub fn modes(self) -> &'static [GrammarMode] {
        use GrammarMode::*;
        match self {
            Self::StructuredOutputs => &[Ebnf, StructuralTag, JsonSchema],
            Self::Guided | Self::Gbnf => &[Ebnf, JsonSchema],
            Self::ResponseFormat | Self::OllamaFormat => &[JsonSchema],
        }
    }

    /// Whether the request may list `tools` beside a grammar of `mode`.
    /// llama.cpp refuses both at once ("Cannot use custom grammar
    /// constraints with tools"), so its GBNF requests declare the tools in
    /// the prompt instead (the grammar itself spells every call).
    pub fn lists_tools_with(self, mode: GrammarMode) -> bool {
        !(self == Self::Gbnf && mode == GrammarMode::Ebnf)
    }

    /// Whether this wire can carry `mode` at all.
    pub fn carries(self, mode: GrammarMode) -> bool {
        self.modes().contains(&mode)
    }

    /// The request keys for `grammar`.
    pub fn place(
        self,
        plugin: &str,
        grammar: &Grammar,
    ) -> Result<Map<String, Value>, GrammarError> {
        let mut out = Map::new();
        match (self, grammar) {
            (Self::StructuredOutputs, Grammar::Ebnf(text)) => {
                out.insert("structured_outputs".into(), json!({"grammar": text}));
            }
            // vLLM parses this field as a string, not as an object.
            (Self::StructuredOutputs, Grammar::StructuralTag(tag)) => {
                out.insert(
                    "structured_outputs".into(),
                    json!({"structural_tag": tag.to_string()}),
                );
            }
            (Self::StructuredOutputs, Grammar::JsonSchema(schema)) => {
                out.insert("structured_outputs".into(), json!({"json": schema}));
            }
            (Self::Guided, Grammar::Ebnf(text)) => {
                out.insert("guided_grammar".into(), json!(text));
            }
            (Self::Guided, Grammar::JsonSchema(schema)) => {
                out.insert("guided_json".into(), schema.clone());
            }
            (Self::Gbnf, Grammar::Ebnf(text)) => {
                out.insert("grammar".into(), json!(gbnf::from_xgrammar(text)));
            }
            (Self::ResponseFormat | Self::Gbnf, Grammar::JsonSchema(schema)) => {
                out.insert(
                    "response_format".into(),
                    json!({
                        "type": "json_schema",
                        "json_schema": {"name": "tool_calls", "strict": true, "schema": schema},
                    }),
                );
            }
            (Self::OllamaFormat, Grammar::JsonSchema(schema)) => {
                out.insert("format".into(), schema.clone());
            }
            _ => {
                return Err(GrammarError::NoWirePlacement {
                    plugin: plugin.to_string(),
                    mode: grammar.mode().as_str(),
                    wire: self.as_str(),
                });
            }
        }
        Ok(out)
    }
}

impl WireKey {
    /// The request keys that ask for a caller's answer format: OpenAI's
    /// `response_format` as the caller sent it (its schema's name and
    /// `strict` kept), or the family's own JSON Schema key. Every wire
    /// carries a JSON Schema, so every format has a place.
    pub fn answer(self, format: &AnswerFormat) -> Map<String, Value> {
        let mut out = Map::new();
        match (self, format) {
            (Self::ResponseFormat | Self::Gbnf, AnswerFormat::JsonObject) => {
                out.insert("response_format".into(), json!({"type": "json_object"}));
            }
            (
                Self::ResponseFormat | Self::Gbnf,
                AnswerFormat::JsonSchema {
                    name,
                    schema,
                    strict,
                },
            ) => {
                let mut spec = json!({"name": name, "schema": schema});
                if let Some(strict) = strict {
                    spec["strict"] = json!(strict);
                }
                out.insert(
                    "response_format".into(),
                    json!({"type": "json_schema", "json_schema": spec}),
                );
            }
            (Self::StructuredOutputs, format) => {
                out.insert(
                    "structured_outputs".into(),
                    json!({"json": format.schema()}),
                );
            }
            (Self::Guided, format) => {
                out.insert("guided_json".into(), format.schema());
            }
            (Self::OllamaFormat, format) => {
                out.insert("format".into(), format.schema());
            }
        }
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn all_grammars() -> [Grammar; 3] {
        [
            Grammar::Ebnf("root ::= call_add\ncall_add ::= \"a\"\n".into()),
            Grammar::StructuralTag(
                json!({"type": "structural_tag", "format": {"type": "any_text"}}),
            ),
            Grammar::JsonSchema(json!({"type": "object"})),
        ]
    }

    #[test]
    fn structural_tag_is_sent_as_a_string() {
        let tag = json!({"type": "structural_tag", "format": {"type": "any_text"}});
        let out = WireKey::StructuredOutputs
            .place("qwen", &Grammar::StructuralTag(tag.clone()))
            .unwrap();
        assert_eq!(
            out["structured_outputs"]["structural_tag"],
            json!(tag.to_string())
        );
    }

    #[test]
    fn guided_wire_uses_old_keys_and_refuses_structural_tags() {
        let out = WireKey::Guided
            .place("qwen", &Grammar::Ebnf("root ::= \"a\"".into()))
            .unwrap();
        assert_eq!(out["guided_grammar"], json!("root ::= \"a\""));
        let out = WireKey::Guided
            .place("qwen", &Grammar::JsonSchema(json!({"type": "object"})))
            .unwrap();
        assert_eq!(out["guided_json"], json!({"type": "object"}));
        let err = WireKey::Guided
            .place("qwen", &Grammar::StructuralTag(json!({})))
            .unwrap_err();
        assert!(err.to_string().contains("guided"), "{err}");
        assert!(!WireKey::Guided.carries(GrammarMode::StructuralTag));
    }

    #[test]
    fn llama_cpp_gets_gbnf_in_grammar_and_schemas_in_response_format() {
        let [ebnf, tag, schema] = all_grammars();
        let out = WireKey::Gbnf.place("qwen", &ebnf).unwrap();
        assert_eq!(
            out["grammar"],
            json!("root ::= call-add\ncall-add ::= \"a\"\n")
        );
        let out = WireKey::Gbnf.place("qwen", &schema).unwrap();
        assert_eq!(out["response_format"]["type"], "json_schema");
        assert_eq!(
            out["response_format"]["json_schema"]["schema"],
            json!({"type": "object"})
        );
        assert!(WireKey::Gbnf.place("qwen", &tag).is_err());
    }

    #[test]
    fn json_schema_wires_carry_only_schemas() {
        let [ebnf, tag, schema] = all_grammars();
        for wire in [WireKey::ResponseFormat, WireKey::OllamaFormat] {
            assert!(wire.place("qwen", &ebnf).is_err());
            assert!(wire.place("qwen", &tag).is_err());
        }
        let out = WireKey::ResponseFormat.place("qwen", &schema).unwrap();
        assert_eq!(out.keys().collect::<Vec<_>>(), ["response_format"]);
        let out = WireKey::OllamaFormat.place("qwen", &schema).unwrap();
        assert_eq!(out["format"], json!({"type": "object"}));
    }

    #[test]
    fn every_mode_a_wire_claims_is_placed_and_no_other() {
        for wire in WireKey::ALL {
            for grammar in all_grammars() {
                assert_eq!(
                    wire.place("qwen", &grammar).is_ok(),
                    wire.carries(grammar.mode()),
                    "{} {}",
                    wire.as_str(),
                    grammar.mode().as_str()
                );
            }
        }
    }

    #[test]
    fn an_answer_format_has_a_place_on_every_wire() {
        let format = AnswerFormat::JsonSchema {
            name: "person".into(),
            schema: json!({"type": "object"}),
            strict: Some(true),
        };
        let out = WireKey::ResponseFormat.answer(&format);
        assert_eq!(
            out["response_format"],
            json!({"type": "json_schema", "json_schema": {"name": "person", "strict": true, "schema": {"type": "object"}}})
        );
        assert_eq!(
            WireKey::StructuredOutputs.answer(&format)["structured_outputs"],
            json!({"json": {"type": "object"}})
        );
        assert_eq!(
            WireKey::Gbnf.answer(&AnswerFormat::JsonObject)["response_format"],
            json!({"type": "json_object"})
        );
        for wire in WireKey::ALL {
            assert_eq!(wire.answer(&format).len(), 1, "{}", wire.as_str());
        }
    }

    #[test]
    fn each_server_family_has_a_default_wire() {
        assert_eq!(ServerKind::Vllm.default_wire(), WireKey::StructuredOutputs);
        assert_eq!(ServerKind::LlamaCpp.default_wire(), WireKey::Gbnf);
        assert_eq!(ServerKind::Ollama.default_wire(), WireKey::ResponseFormat);
        assert_eq!(ServerKind::Sglang.default_wire(), WireKey::ResponseFormat);
        assert_eq!(ServerKind::Openai.default_wire(), WireKey::ResponseFormat);
    }
}
