//! A caller's answer format on the turns that may answer: which turn's
//! request asks the model server for it. The format arrives placed on the
//! server's wire ([`AnswerShape::fragment`], built by the bundle); this
//! file only decides where it goes. The answer itself is checked when the
//! run ends, by whoever asked for the format (the worker), on every path.

use serde_json::{Map, Value};

use super::shape::TurnShape;
use crate::model::ToolChoice;

/// The request keys that hold the model to a caller's answer format.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AnswerShape {
    /// The format on the server's wire (`response_format`, or the family's
    /// JSON Schema key).
    pub fragment: Map<String, Value>,
    /// Whether the server keeps offered tools apart from the format (OpenAI:
    /// a reply is tool calls or an answer of that shape). Elsewhere a
    /// format would hold the tool calls to the answer's schema too, so a
    /// turn that offers tools goes without it and the answer is checked
    /// only.
    pub beside_tools: bool,
}

impl AnswerShape {
    /// The keys to merge into a turn's request, or none when the turn
    /// cannot answer (its `tool_choice` asks for a call), when it offers
    /// tools to a server that does not keep them apart, or when the
    /// bundle's own grammar already constrains the reply (its fragment
    /// holds more than stop sequences): two grammars cannot both hold.
    pub(super) fn for_turn(
        &self,
        shape: &TurnShape,
        offers_tools: bool,
    ) -> Option<&Map<String, Value>> {
        let may_answer = matches!(shape.tool_choice, ToolChoice::Auto | ToolChoice::None);
        let tools_offered = offers_tools && shape.tool_choice != ToolChoice::None;
        let grammar = shape.fragment.keys().any(|key| key != "stop");
        let held = may_answer && !grammar && (!tools_offered || self.beside_tools);
        held.then_some(&self.fragment)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(beside_tools: bool) -> AnswerShape {
        AnswerShape {
            fragment: Map::from_iter([(
                "response_format".to_string(),
                json!({"type": "json_object"}),
            )]),
            beside_tools,
        }
    }

    fn shape(choice: ToolChoice, fragment: Value) -> TurnShape {
        TurnShape {
            tool_choice: choice,
            fragment: fragment.as_object().cloned().unwrap_or_default(),
            list_tools: true,
        }
    }

    #[test]
    fn a_turn_that_may_answer_asks_for_the_format() {
        let auto = shape(ToolChoice::Auto, json!({"stop": ["</s>"]}));
        assert!(answer(false).for_turn(&auto, false).is_some());
        assert!(answer(true).for_turn(&auto, true).is_some());
        let none = shape(ToolChoice::None, json!({}));
        assert!(answer(false).for_turn(&none, true).is_some());
    }

    #[test]
    fn a_turn_that_must_call_or_is_held_by_its_own_grammar_goes_without() {
        for choice in [ToolChoice::Required, ToolChoice::Tool("add".into())] {
            assert_eq!(answer(true).for_turn(&shape(choice, json!({})), true), None);
        }
        let grammar = shape(
            ToolChoice::Auto,
            json!({"structured_outputs": {"grammar": "root ::= x"}}),
        );
        assert_eq!(answer(true).for_turn(&grammar, false), None);
        // Tools offered to a server that would hold the calls to the schema.
        assert_eq!(
            answer(false).for_turn(&shape(ToolChoice::Auto, json!({})), true),
            None
        );
    }
}
