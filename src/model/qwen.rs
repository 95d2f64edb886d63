//! The `qwen` plugin: Qwen-family models that write tool calls as text.
//!
//! Parses every form these models emit — Hermes `<tool_call>{json}</tool_call>`,
//! Qwen3 XML `<tool_call><function=f><parameter=p>v</parameter></function></tool_call>`,
//! bare `<function=f>{json}</function>`, and whole-content JSON calls (what
//! the `json_schema` grammar produces) — and builds grammars for the style
//! configured in [`QwenOptions::call_style`]. No IO.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::reply::{TextParse, combine, param_schema, snippet, typed_value};
use super::schema_ebnf::{Dialect, Ebnf, Member, ebnf_literal, required_set};
use super::{Grammar, GrammarError, GrammarMode, ModelPlugin, ParsedReply, SystemRole};
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

#[derive(Debug, Clone, Default)]
pub struct QwenPlugin {
    pub options: QwenOptions,
}

const TOOL_CALL: &str = "<tool_call>";
const TOOL_CALL_END: &str = "</tool_call>";
const FUNCTION: &str = "<function=";
const FUNCTION_END: &str = "</function>";
const PARAMETER: &str = "<parameter=";
const PARAMETER_END: &str = "</parameter>";

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
            self.parse_text(reply.content.as_deref().unwrap_or_default(), tools),
        )
    }

    fn build_grammar(
        &self,
        mode: GrammarMode,
        tools: &[ToolSchema],
        parallel: bool,
    ) -> Result<Grammar, GrammarError> {
        if tools.is_empty() {
            return Err(GrammarError::NoTools {
                mode: mode.as_str(),
            });
        }
        match mode {
            GrammarMode::Ebnf => self.ebnf(tools, parallel).map(Grammar::Ebnf),
            GrammarMode::StructuralTag => {
                Ok(Grammar::StructuralTag(self.structural_tag(tools, parallel)))
            }
            GrammarMode::JsonSchema => Ok(Grammar::JsonSchema(json_schema(tools, parallel))),
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

    /// Finds every call in `text`; the rest is content.
    pub(crate) fn parse_text(&self, text: &str, tools: &[ToolSchema]) -> TextParse {
        let mut out = TextParse::default();
        if self.options.json_content_calls && json_content_calls(text, &mut out) {
            return out;
        }
        let mut rest = text;
        loop {
            let next = [rest.find(TOOL_CALL), rest.find(FUNCTION)]
                .into_iter()
                .flatten()
                .min();
            let Some(at) = next else {
                out.text(rest);
                return out;
            };
            out.text(&rest[..at]);
            let tail = &rest[at..];
            let used = if tail.starts_with(TOOL_CALL) {
                tool_call_block(tail, tools, &mut out)
            } else {
                function_block(tail, tools, &mut out)
            };
            rest = &tail[used..];
        }
    }

    fn ebnf(&self, tools: &[ToolSchema], parallel: bool) -> Result<String, GrammarError> {
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
        let calls = if parallel {
            format!("({call} (\"\\n\" {call})*)?")
        } else {
            format!("{call}?")
        };
        // Free text first (no `<`, so it cannot open a tag), then the calls.
        let text = g.add("text", "[^<]*".into());
        Ok(g.render(&format!("{text} {calls}")))
    }

    fn structural_tag(&self, tools: &[ToolSchema], parallel: bool) -> Value {
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
            "at_least_one": false,
            "stop_after_first": !parallel,
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
fn xml_params(g: &mut Ebnf, schema: &Value, hint: &str) -> Result<String, String> {
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

/// Whole-content JSON calls. Returns false (and records nothing) when the
/// content is not exactly that.
fn json_content_calls(text: &str, out: &mut TextParse) -> bool {
    let trimmed = text.trim();
    if !(trimmed.starts_with('{') || trimmed.starts_with('[')) {
        return false;
    }
    let Ok(value) = serde_json::from_str::<Value>(trimmed) else {
        return false;
    };
    let items = match &value {
        Value::Array(items) if !items.is_empty() => items.clone(),
        Value::Object(_) => vec![value.clone()],
        _ => return false,
    };
    let shaped = |v: &Value| {
        v.as_object().is_some_and(|o| {
            o.len() == 2
                && o.get("name").is_some_and(Value::is_string)
                && o.get("arguments").is_some_and(Value::is_object)
        })
    };
    if !items.iter().all(shaped) {
        return false;
    }
    for item in items {
        out.ok(
            item["name"].as_str().unwrap_or_default(),
            item["arguments"].clone(),
            None,
        );
    }
    true
}

/// Reads one JSON value at byte `at` of `text`; returns it with its byte
/// length. Errors give the line and column within `text`.
fn json_prefix(text: &str, at: usize) -> Result<(Value, usize), String> {
    let mut stream = serde_json::Deserializer::from_str(&text[at..]).into_iter::<Value>();
    match stream.next() {
        Some(Ok(v)) => Ok((v, stream.byte_offset())),
        Some(Err(e)) => {
            let before = &text[..at];
            let base_line = before.matches('\n').count();
            let base_col = before.len() - before.rfind('\n').map_or(0, |i| i + 1);
            let column = if e.line() <= 1 {
                base_col + e.column()
            } else {
                e.column()
            };
            let message = e.to_string();
            let message = message.split(" at line ").next().unwrap_or_default();
            Err(format!(
                "{message} at line {} column {column}",
                base_line + e.line().max(1)
            ))
        }
        None => Err("no JSON value".into()),
    }
}

/// A JSON object member: key, value, and the value's exact source text.
type JsonMember<'a> = (String, Value, &'a str);

/// The members of the JSON object at the start of `text`, each with its
/// exact source text, and the object's byte length.
fn json_object_members(text: &str) -> Result<(Vec<JsonMember<'_>>, usize), String> {
    let bytes = text.as_bytes();
    let skip_ws = |mut i: usize| {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    let mut members = Vec::new();
    let mut i = skip_ws(1);
    if bytes.get(i) == Some(&b'}') {
        return Ok((members, i + 1));
    }
    loop {
        let (key, used) = json_prefix(text, i)?;
        let Value::String(key) = key else {
            return Err(format!("object key at byte {i} is not a string"));
        };
        i = skip_ws(i + used);
        if bytes.get(i) != Some(&b':') {
            return Err(format!("expected `:` after key `{key}`"));
        }
        i = skip_ws(i + 1);
        let (value, used) = json_prefix(text, i).map_err(|e| format!("value of `{key}`: {e}"))?;
        members.push((key, value, &text[i..i + used]));
        i = skip_ws(i + used);
        match bytes.get(i) {
            Some(b',') => i = skip_ws(i + 1),
            Some(b'}') => return Ok((members, i + 1)),
            Some(_) => {
                return Err(format!(
                    "expected `,` or `}}` after the value of `{}`",
                    members.last().map(|m| m.0.as_str()).unwrap_or_default()
                ));
            }
            None => return Err("the JSON object is not closed".into()),
        }
    }
}

/// The length of `text` up to and including `close`, or all of it.
fn through(text: &str, close: &str) -> usize {
    text.find(close).map_or(text.len(), |j| j + close.len())
}

fn ws_len(text: &str) -> usize {
    text.len() - text.trim_start().len()
}

/// `<tool_call>...</tool_call>` at the start of `tail`; returns bytes used.
fn tool_call_block(tail: &str, tools: &[ToolSchema], out: &mut TextParse) -> usize {
    let start = TOOL_CALL.len() + ws_len(&tail[TOOL_CALL.len()..]);
    let inner = &tail[start..];
    let used = if inner.starts_with('{') {
        hermes_call(inner, out)
    } else if inner.starts_with(FUNCTION) {
        function_block(inner, tools, out)
    } else {
        let body = &inner[..inner.find(TOOL_CALL_END).unwrap_or(inner.len())];
        let detail = if body.trim().is_empty() {
            "empty <tool_call>".to_string()
        } else {
            format!(
                "<tool_call> holds neither a JSON object nor <function=...>: `{}`",
                snippet(body.trim())
            )
        };
        out.bad("", body, detail);
        return start + through(inner, TOOL_CALL_END);
    };
    let after = &inner[used..];
    let ws = ws_len(after);
    if after[ws..].starts_with(TOOL_CALL_END) {
        return start + used + ws + TOOL_CALL_END.len();
    }
    if after.trim().is_empty() {
        // Cut by a stop sequence before the closing tag: the call is whole.
        return tail.len();
    }
    // Text between the call and its closing tag belongs to neither; keep it
    // visible as content rather than dropping it.
    let end = after.find(TOOL_CALL_END).unwrap_or(after.len());
    out.text(&after[..end]);
    start + used + through(after, TOOL_CALL_END)
}

/// A Hermes JSON call at the start of `text`; returns bytes used.
fn hermes_call(text: &str, out: &mut TextParse) -> usize {
    let (members, used) = match json_object_members(text) {
        Ok(m) => m,
        Err(e) => {
            let body = &text[..text.find(TOOL_CALL_END).unwrap_or(text.len())];
            let name = guess_name(body);
            out.bad(
                &name,
                body.trim(),
                format!(
                    "tool call is not valid JSON ({e}): `{}`",
                    snippet(body.trim())
                ),
            );
            return body.len();
        }
    };
    let get = |k: &str| members.iter().find(|m| m.0 == k);
    let Some(name) = get("name").and_then(|m| m.1.as_str()) else {
        out.bad(
            "",
            &text[..used],
            format!(
                "tool call has no string `name`: `{}`",
                snippet(&text[..used])
            ),
        );
        return used;
    };
    match get("arguments").or_else(|| get("parameters")) {
        None => out.ok(name, Value::Object(Map::new()), None),
        Some((_, Value::Object(_), raw)) => {
            let args = serde_json::from_str(raw).unwrap_or(Value::Null);
            out.ok(name, args, Some(raw.to_string()));
        }
        // Some models encode the arguments a second time, as a string.
        Some((_, Value::String(inner), _)) => match serde_json::from_str::<Value>(inner) {
            Ok(args @ Value::Object(_)) => out.ok(name, args, Some(inner.clone())),
            _ => out.bad(
                name,
                inner,
                format!(
                    "`arguments` of `{name}` is a string that is not a JSON object: `{}`",
                    snippet(inner)
                ),
            ),
        },
        Some((_, other, raw)) => out.bad(
            name,
            raw,
            format!(
                "`arguments` of `{name}` must be a JSON object, found `{}`",
                snippet(&other.to_string())
            ),
        ),
    }
    used
}

/// The tool name in a broken JSON call, for the error result.
fn guess_name(body: &str) -> String {
    let re_start = body.find("\"name\"").map(|i| &body[i + 6..]);
    re_start
        .and_then(|s| s.split('"').nth(1))
        .filter(|n| !n.is_empty() && n.len() < 128)
        .unwrap_or_default()
        .to_string()
}

/// `<function=name>...</function>` at the start of `tail`; returns bytes used.
fn function_block(tail: &str, tools: &[ToolSchema], out: &mut TextParse) -> usize {
    let after_eq = &tail[FUNCTION.len()..];
    let Some(gt) = after_eq
        .find('>')
        .filter(|&g| !after_eq[..g].contains('\n'))
    else {
        let line = &after_eq[..after_eq.find('\n').unwrap_or(after_eq.len())];
        out.bad(
            "",
            line,
            format!(
                "`<function=` tag is not closed with `>`: `{}`",
                snippet(line)
            ),
        );
        return FUNCTION.len() + line.len();
    };
    let name = after_eq[..gt].trim();
    let body_at = FUNCTION.len() + gt + 1;
    let body = &tail[body_at..];
    if name.is_empty() {
        out.bad("", "", "`<function=>` has no tool name".into());
        return body_at + through(body, FUNCTION_END);
    }
    let ws = ws_len(body);
    if body[ws..].starts_with('{') {
        return match json_object_members(&body[ws..]) {
            Ok((_, used)) => {
                let raw = &body[ws..ws + used];
                out.ok(
                    name,
                    serde_json::from_str(raw).unwrap_or(Value::Null),
                    Some(raw.to_string()),
                );
                let rest = &body[ws + used..];
                let rws = ws_len(rest);
                if rest[rws..].starts_with(FUNCTION_END) {
                    body_at + ws + used + rws + FUNCTION_END.len()
                } else {
                    body_at + ws + used
                }
            }
            Err(e) => {
                let inner = &body[..body.find(FUNCTION_END).unwrap_or(body.len())];
                out.bad(
                    name,
                    inner.trim(),
                    format!(
                        "arguments of `{name}` are not valid JSON ({e}): `{}`",
                        snippet(inner.trim())
                    ),
                );
                body_at + through(body, FUNCTION_END)
            }
        };
    }
    let mut args = Map::new();
    let mut i = 0;
    loop {
        i += ws_len(&body[i..]);
        let rest = &body[i..];
        if rest.starts_with(FUNCTION_END) {
            out.ok(name, Value::Object(args), None);
            return body_at + i + FUNCTION_END.len();
        }
        if rest.is_empty() || rest.starts_with(TOOL_CALL_END) {
            // Closing tag cut off by a stop sequence.
            out.ok(name, Value::Object(args), None);
            return body_at + i;
        }
        if !rest.starts_with(PARAMETER) {
            let inner = &rest[..rest.find(FUNCTION_END).unwrap_or(rest.len())];
            out.bad(name, inner.trim(), format!("unexpected text inside <function={name}>: `{}` (expected <parameter=NAME> or </function>)", snippet(inner.trim())));
            return body_at + i + through(rest, FUNCTION_END);
        }
        let p = &rest[PARAMETER.len()..];
        let Some(gt) = p.find('>').filter(|&g| !p[..g].contains('\n')) else {
            out.bad(
                name,
                rest,
                format!("`<parameter=` tag in `{name}` is not closed with `>`"),
            );
            return body_at + i + through(rest, FUNCTION_END);
        };
        let param = p[..gt].trim().to_string();
        let value_text = &p[gt + 1..];
        let Some(end) = parameter_end(value_text) else {
            out.bad(
                name,
                rest,
                format!("parameter `{param}` of `{name}` has no </parameter>"),
            );
            return body_at + i + through(rest, FUNCTION_END);
        };
        let raw = &value_text[..end];
        let raw = raw.strip_prefix('\n').unwrap_or(raw);
        let raw = raw.strip_suffix('\n').unwrap_or(raw);
        if args.contains_key(&param) {
            out.bad(
                name,
                rest,
                format!("parameter `{param}` of `{name}` is given twice"),
            );
            return body_at + i + through(rest, FUNCTION_END);
        }
        args.insert(
            param.clone(),
            typed_value(raw, param_schema(tools, name, &param)),
        );
        i += PARAMETER.len() + gt + 1 + end + PARAMETER_END.len();
    }
}

/// Where the value's `</parameter>` is: the first one followed by another
/// parameter or a closing tag, so values may contain `</parameter>` text.
fn parameter_end(value: &str) -> Option<usize> {
    let mut from = 0;
    let mut first = None;
    while let Some(j) = value[from..].find(PARAMETER_END) {
        let at = from + j;
        first.get_or_insert(at);
        let next = value[at + PARAMETER_END.len()..].trim_start();
        if next.is_empty()
            || [PARAMETER, FUNCTION_END, TOOL_CALL_END]
                .iter()
                .any(|t| next.starts_with(t))
        {
            return Some(at);
        }
        from = at + PARAMETER_END.len();
    }
    first
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
