//! The `qwen` plugin: Qwen-family models that write tool calls as text.
//!
//! Parses every form these models emit — Hermes `<tool_call>{json}</tool_call>`,
//! Qwen3 XML `<tool_call><function=f><parameter=p>v</parameter></function></tool_call>`,
//! bare `<function=f>{json}</function>`, and whole-content JSON calls (what
//! the `json_schema` grammar produces) — and builds grammars for the style
//! configured in [`QwenOptions::call_style`]. No IO.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

mod parse;

use parse::{TOOL_CALL, parse_text};

use crate::model::reply::combine;
use crate::model::schema_ebnf::{Dialect, Ebnf, Member, SchemaError, ebnf_literal, required_set};
use crate::model::{
    CallRules, Grammar, GrammarError, GrammarMode, ModelPlugin, ParsedReply, SystemRole,
};
use crate::types::{Message, ToolCall, ToolSchema};

/// How the model writes calls (the parser reads both; this picks the
/// grammar and the rendering).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QwenCallStyle {
    /// `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>` (Qwen2.5, Qwen3).
    #[default]
    Hermes,
    /// `<tool_call>\n<function=f>\n<parameter=p>\nv\n</parameter>\n</function>\n</tool_call>` (Qwen3-Coder).
    Xml,
}

/// Options from `config/models/qwen.toml` `[parser]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QwenOptions {
    pub call_style: QwenCallStyle,
    /// The role system and developer messages are sent with; Qwen's chat
    /// template knows no `developer` role.
    pub system_role: SystemRole,
    /// Read a reply whose whole content is `{"name", "arguments"}` (or an
    /// array of them) as calls; that is what the `json_schema` grammar makes.
    pub json_content_calls: bool,
}

impl Default for QwenOptions {
    fn default() -> Self {
        Self {
            call_style: QwenCallStyle::Hermes,
            system_role: SystemRole::System,
            json_content_calls: true,
        }
    }
}

// The plugin struct and its `name` open as `function_gemma.rs`'s, as every
// family's must: each holds its own options and names itself.
#[derive(Debug, Clone, Default)]
pub struct QwenPlugin {
    pub options: QwenOptions,
}

impl ModelPlugin for QwenPlugin {
    fn name(&self) -> &str {
        "qwen"
    }

    fn grammar_modes(&self) -> &[GrammarMode] {
        &[
            GrammarMode::Ebnf,
            GrammarMode::StructuralTag,
            GrammarMode::JsonSchema,
        ]
    }

    fn format_messages(&self, messages: &[Message]) -> Vec<Value> {
        messages
            .iter()
            .map(|m| self.options.system_role.apply(m).to_wire())
            .collect()
    }

    fn parse_reply(&self, reply: &Message, tools: &[ToolSchema]) -> ParsedReply {
        combine(
            reply,
            parse_text(
                reply.content.as_deref().unwrap_or_default(),
                tools,
                self.options.json_content_calls,
            ),
        )
    }

    fn call_start(&self, partial: &str) -> Option<usize> {
        // A reply that is only JSON call objects is calls from its first
        // character.
        if self.options.json_content_calls && partial.trim_start().starts_with(['{', '[']) {
            return Some(partial.len() - partial.trim_start().len());
        }
        crate::model::reply::marker_start(partial, &[TOOL_CALL, parse::FUNCTION])
    }

    fn build_grammar(
        &self,
        mode: GrammarMode,
        tools: &[ToolSchema],
        rules: CallRules,
    ) -> Result<Grammar, GrammarError> {
        GrammarError::require_tools(mode, tools)?;
        match mode {
            GrammarMode::Ebnf => self.ebnf(tools, rules).map(Grammar::Ebnf),
            GrammarMode::StructuralTag => {
                Ok(Grammar::StructuralTag(self.structural_tag(tools, rules)))
            }
            GrammarMode::JsonSchema => Ok(Grammar::JsonSchema(json_schema(tools, rules.parallel))),
        }
    }

    fn render_call(&self, call: &ToolCall) -> Option<String> {
        Some(match self.options.call_style {
            QwenCallStyle::Hermes => format!(
                "<tool_call>\n{{\"name\": {}, \"arguments\": {}}}\n</tool_call>",
                Value::String(call.name.clone()),
                call.arguments_text()
            ),
            QwenCallStyle::Xml => {
                let mut out = format!("<tool_call>\n<function={}>\n", call.name);
                if let Value::Object(args) = &call.arguments {
                    for (key, value) in args {
                        let text = match value {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        out.push_str(&format!("<parameter={key}>\n{text}\n</parameter>\n"));
                    }
                }
                out.push_str("</function>\n</tool_call>");
                out
            }
        })
    }
}

impl QwenPlugin {
    pub fn new(options: QwenOptions) -> Self {
        Self { options }
    }

    fn ebnf(&self, tools: &[ToolSchema], rules: CallRules) -> Result<String, GrammarError> {
        let mut g = Ebnf::default();
        let mut alts = Vec::new();
        for tool in tools {
            let schema_err = |detail| GrammarError::Schema {
                tool: tool.name.clone(),
                detail,
            };
            let hint = format!("t_{}", tool.name);
            let body = match self.options.call_style {
                QwenCallStyle::Hermes => {
                    let args = g
                        .value(&tool.parameters, Dialect::Json, &hint)
                        .map_err(schema_err)?;
                    let head = format!(
                        "{{\"name\": {}, \"arguments\": ",
                        Value::String(tool.name.clone())
                    );
                    format!("{} {args} \"}}\"", ebnf_literal(&head))
                }
                QwenCallStyle::Xml => {
                    let params = xml_params(&mut g, &tool.parameters, &hint).map_err(schema_err)?;
                    let head = format!("<function={}>\n", tool.name);
                    format!("{} {params} \"</function>\"", ebnf_literal(&head))
                }
            };
            alts.push(g.add(&format!("call_{}", tool.name), body));
        }
        let call = g.add(
            "tool_call",
            format!(
                "\"<tool_call>\\n\" ({}) \"\\n</tool_call>\"",
                alts.join(" | ")
            ),
        );
        Ok(g.render_calls(&call, "\"\\n\"", rules))
    }

    fn structural_tag(&self, tools: &[ToolSchema], rules: CallRules) -> Value {
        let tags: Vec<Value> = tools
            .iter()
            .map(|tool| match self.options.call_style {
                QwenCallStyle::Hermes => json!({
                    "type": "tag",
                    "begin": format!("<tool_call>\n{{\"name\": {}, \"arguments\": ", Value::String(tool.name.clone())),
                    "content": {"type": "json_schema", "json_schema": tool.parameters},
                    "end": "}\n</tool_call>",
                }),
                QwenCallStyle::Xml => json!({
                    "type": "tag",
                    // The newlines around the parameters are the content's
                    // whitespace, so a call without parameters fits too.
                    "begin": format!("<tool_call>\n<function={}>", tool.name),
                    "content": {"type": "qwen_xml_parameter", "json_schema": tool.parameters},
                    "end": "</function>\n</tool_call>",
                }),
            })
            .collect();
        json!({"type": "structural_tag", "format": {
            "type": "triggered_tags",
            "triggers": [TOOL_CALL],
            "tags": tags,
            "at_least_one": rules.required,
            "stop_after_first": !rules.parallel,
        }})
    }
}

/// `{"name": .., "arguments": ..}` per tool; an array of them when parallel.
fn json_schema(tools: &[ToolSchema], parallel: bool) -> Value {
    let one: Vec<Value> = tools
        .iter()
        .map(|t| {
            json!({
                "type": "object",
                "properties": {"name": {"const": t.name}, "arguments": t.parameters},
                "required": ["name", "arguments"],
                "additionalProperties": false,
            })
        })
        .collect();
    let call = if one.len() == 1 {
        one[0].clone()
    } else {
        json!({"anyOf": one})
    };
    if parallel {
        json!({"type": "array", "items": call, "minItems": 1})
    } else {
        call
    }
}

/// Qwen XML parameters: `<parameter=p>\nvalue\n</parameter>\n` in declared
/// order, strings as raw text, other types as JSON.
fn xml_params(g: &mut Ebnf, schema: &Value, hint: &str) -> Result<String, SchemaError> {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Ok("\"\"".into());
    };
    let required = schema.as_object().map(required_set).unwrap_or_default();
    let mut members = Vec::new();
    for (key, sub) in props {
        let is_string =
            sub.get("type").and_then(Value::as_str) == Some("string") && sub.get("enum").is_none();
        let value = if is_string {
            g.use_xml_text().to_string()
        } else if let Some(options) = sub
            .get("enum")
            .and_then(Value::as_array)
            .filter(|o| o.iter().all(Value::is_string))
        {
            let alts: Vec<String> = options
                .iter()
                .filter_map(Value::as_str)
                .map(ebnf_literal)
                .collect();
            format!("({})", alts.join(" | "))
        } else {
            g.value(sub, Dialect::Json, &format!("{hint}_{key}"))?
        };
        let pair = format!(
            "{} {value} \"\\n</parameter>\\n\"",
            ebnf_literal(&format!("<parameter={key}>\n"))
        );
        members.push(Member {
            pair,
            required: required.contains(&key.as_str()),
        });
    }
    Ok(g.members(&members, "", hint))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn tools() -> Vec<ToolSchema> {
        vec![ToolSchema {
            name: "add".into(),
            description: String::new(),
            parameters: json!({"type": "object", "properties": {"a": {"type": "integer"}, "note": {"type": "string"}}}),
        }]
    }

    fn parse(text: &str) -> ParsedReply {
        QwenPlugin::default().parse_reply(&Message::assistant(Some(text.into()), vec![]), &tools())
    }

    #[test]
    fn hermes_keeps_exact_argument_text_and_content() {
        let r = parse(
            "Sure.\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>",
        );
        assert_eq!(r.content.as_deref(), Some("Sure."));
        assert_eq!(r.calls[0].call.arguments, json!({"a": 1}));
        assert_eq!(r.calls[0].call.arguments_text(), "{\"a\": 1}");
        assert!(r.calls[0].call.id.len() >= 29);
    }

    #[test]
    fn xml_values_are_typed_by_schema() {
        let r = parse(
            "<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n<parameter=note>\n1 < 2\nok</parameter>\n</function>\n</tool_call>",
        );
        assert_eq!(
            r.calls[0].call.arguments,
            json!({"a": 1, "note": "1 < 2\nok"})
        );
        assert_eq!(r.content, None);
    }

    #[test]
    fn formatting_keeps_bytes_and_maps_developer_to_system() {
        use crate::types::ToolResult;
        let parsed =
            parse("<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\":  1}}\n</tool_call>");
        let call = parsed.calls[0].call.clone();
        let history = vec![
            Message::developer("be brief"),
            Message::assistant(None, vec![call.clone()]),
            Message::tool(&ToolResult::ok(&call, "{\"sum\": 7}")),
        ];
        let wire = QwenPlugin::default().format_messages(&history);
        assert_eq!(wire[0]["role"], "system");
        assert_eq!(
            wire[1]["tool_calls"][0]["function"]["arguments"],
            "{\"a\":  1}"
        );
        assert_eq!(wire[2]["content"], "{\"sum\": 7}");
        assert_eq!(wire[2]["tool_call_id"], json!(call.id));
    }

    #[test]
    fn xml_rendering_round_trips() {
        let plugin = QwenPlugin::new(QwenOptions {
            call_style: QwenCallStyle::Xml,
            ..Default::default()
        });
        let call = ToolCall::new("x", "add", json!({"a": 3, "note": "</parameter> inside"}));
        let text = plugin.render_call(&call).unwrap();
        let r = plugin.parse_reply(&Message::assistant(Some(text), vec![]), &tools());
        assert_eq!(r.calls[0].call.arguments, call.arguments);
    }
}
