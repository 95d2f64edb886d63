//! Where a grammar goes in the request body. Servers disagree: current vLLM
//! reads `structured_outputs.{grammar,structural_tag,json}`, older vLLM reads
//! `guided_grammar` / `guided_json`. This module owns only that mapping; it
//! does not know how grammars are built.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::{GrammarError, GrammarMode};

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

/// The request key family a server reads grammars from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireKey {
    /// `structured_outputs: {grammar | structural_tag (a JSON string) | json}` (vLLM >= 0.10).
    #[default]
    StructuredOutputs,
    /// `guided_grammar` / `guided_json` (vLLM < 0.10); has no structural tags.
    Guided,
}

impl WireKey {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::StructuredOutputs => "structured_outputs",
            Self::Guided => "guided",
        }
    }

    /// Whether this wire can carry `mode` at all.
    pub fn carries(self, mode: GrammarMode) -> bool {
        !(self == Self::Guided && mode == GrammarMode::StructuralTag)
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
            (Self::Guided, Grammar::StructuralTag(_)) => {
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

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
}
