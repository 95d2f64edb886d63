//! What a turn's request says about tools besides their schemas
//! ([`TurnShape`]): the `tool_choice`, the model plugin's request keys
//! (a grammar, stop sequences) and whether the tools are listed at all.

use serde_json::Map;
use serde_json::Value;

use crate::model::ToolChoice;

/// What a turn's request says about tools besides their schemas.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnShape {
    pub tool_choice: ToolChoice,
    /// Merged into the request body: the grammar on its server's wire, stop
    /// sequences.
    pub fragment: Map<String, Value>,
    /// Whether the request lists `tools` (and `tool_choice`). When the
    /// server refuses tools beside the grammar, the model plugin declares
    /// them in the prompt instead.
    pub list_tools: bool,
}

impl Default for TurnShape {
    fn default() -> Self {
        Self {
            tool_choice: ToolChoice::Auto,
            fragment: Map::new(),
            list_tools: true,
        }
    }
}
