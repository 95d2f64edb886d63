//! The `function_gemma` plugin: Google's FunctionGemma, which writes
//! `<start_function_call>call:name{key:value,...}<end_function_call>` with
//! strings between `<escape>` tokens, wants its tool declarations in a
//! `developer` turn, an id on every assistant tool call and the tool's name
//! on every tool result. No IO.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value, json};

use super::reply::{TextParse, combine, snippet};
use super::schema_ebnf::{
    Dialect, ESCAPE, Ebnf, SchemaError, ebnf_literal, is_gemma_key, render_value,
};
use super::{CallRules, Grammar, GrammarError, GrammarMode, ModelPlugin, ParsedReply, SystemRole};
use crate::types::{Message, Role, ToolCall, ToolSchema};

const START: &str = "<start_function_call>";
const END: &str = "<end_function_call>";
/// Nesting past this is refused, so hostile input cannot exhaust the stack.
const MAX_DEPTH: usize = 64;

/// Options from `config/models/function_gemma.toml` `[parser]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FunctionGemmaOptions {
    /// The role system and developer messages are sent with.
    pub system_role: SystemRole,
}

impl Default for FunctionGemmaOptions {
    fn default() -> Self {
        Self {
            system_role: SystemRole::Developer,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct FunctionGemmaPlugin {
    pub options: FunctionGemmaOptions,
}

impl ModelPlugin for FunctionGemmaPlugin {
    fn name(&self) -> &str {
        "function_gemma"
    }

    fn grammar_modes(&self) -> &[GrammarMode] {
        &[GrammarMode::Ebnf, GrammarMode::StructuralTag]
    }

    /// Fills in what FunctionGemma's template requires: deterministic ids
    /// on id-less assistant calls (so transcripts replay byte for byte) and
    /// the tool name on tool results, taken from the call they answer.
    fn format_messages(&self, messages: &[Message]) -> Vec<Value> {
        let mut names: Vec<(String, String)> = Vec::new();
        let mut pending: Vec<String> = Vec::new();
        messages
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let mut m = self.options.system_role.apply(m);
                if m.role == Role::Assistant {
                    pending.clear();
                    for (j, call) in m.tool_calls.iter_mut().enumerate() {
                        if call.id.is_empty() {
                            call.id = format!("call_{i}_{j}");
                        }
                        names.push((call.id.clone(), call.name.clone()));
                        pending.push(call.id.clone());
                    }
                }
                if m.role == Role::Tool {
                    if m.tool_call_id.is_none() && !pending.is_empty() {
                        m.tool_call_id = Some(pending.remove(0));
                    } else if let Some(id) = &m.tool_call_id {
                        pending.retain(|p| p != id);
                    }
                    if m.name.is_none() {
                        m.name = m
                            .tool_call_id
                            .as_ref()
                            .and_then(|id| names.iter().rev().find(|(i, _)| i == id))
                            .map(|(_, n)| n.clone());
                    }
                }
                m.to_wire()
            })
            .collect()
    }

    fn parse_reply(&self, reply: &Message, tools: &[ToolSchema]) -> ParsedReply {
        let _ = tools;
        combine(
            reply,
            parse_text(reply.content.as_deref().unwrap_or_default()),
        )
    }

    fn call_start(&self, partial: &str) -> Option<usize> {
        crate::model::reply::marker_start(partial, &[START])
    }

    fn build_grammar(
        &self,
        mode: GrammarMode,
        tools: &[ToolSchema],
        rules: CallRules,
    ) -> Result<Grammar, GrammarError> {
        GrammarError::require_tools(mode, tools)?;
        match mode {
            GrammarMode::Ebnf => ebnf(tools, rules).map(Grammar::Ebnf),
            GrammarMode::StructuralTag => structural_tag(tools, rules).map(Grammar::StructuralTag),
            GrammarMode::JsonSchema => Err(self.unsupported(mode)),
        }
    }

    fn render_call(&self, call: &ToolCall) -> Option<String> {
        Some(format!(
            "{START}call:{}{}{END}",
            call.name,
            render_value(&call.arguments)?
        ))
    }
}

impl FunctionGemmaPlugin {
    pub fn new(options: FunctionGemmaOptions) -> Self {
        Self { options }
    }
}

pub(crate) fn parse_text(text: &str) -> TextParse {
    let mut out = TextParse::default();
    let mut rest = text;
    while let Some(at) = rest.find(START) {
        out.text(&rest[..at]);
        let body_all = &rest[at + START.len()..];
        let (body, used) = match body_all.find(END) {
            Some(e) => (&body_all[..e], at + START.len() + e + END.len()),
            // Cut by a stop sequence before the end token.
            None => (body_all, rest.len()),
        };
        call(body, &mut out);
        rest = &rest[used..];
    }
    out.text(rest);
    out
}

/// One call body: `call:name{...}`.
fn call(body: &str, out: &mut TextParse) {
    let text = body.trim();
    let text = text.strip_prefix("call:").unwrap_or(text);
    let Some(brace) = text.find('{') else {
        let name = text.trim();
        if is_gemma_key(name) {
            out.bad(
                name,
                "",
                format!("call to `{name}` has no `{{...}}` argument object"),
            );
        } else {
            out.bad(
                "",
                body,
                format!(
                    "function call is not `call:NAME{{...}}`: `{}`",
                    snippet(body)
                ),
            );
        }
        return;
    };
    let name = text[..brace].trim();
    if name.is_empty() {
        out.bad(
            "",
            body,
            format!("function call has no tool name: `{}`", snippet(body)),
        );
        return;
    }
    let args_text = &text[brace..];
    let mut p = Parser {
        text: args_text,
        at: 0,
    };
    let result = p.value(0).and_then(|v| {
        p.skip_ws();
        if p.at < args_text.len() {
            Err(SyntaxError::TrailingText(snippet(&args_text[p.at..])))
        } else {
            Ok(v)
        }
    });
    match result {
        Ok(args) => out.ok(name, args, None),
        Err(e) => out.bad(name, args_text, format!("arguments of `{name}`: {e}")),
    }
}

/// Why a call's arguments are not FunctionGemma's syntax: what was expected
/// and where (a quote of the text from there, and its byte). The caller
/// names the tool.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
enum SyntaxError {
    #[error("values nest deeper than {} levels", MAX_DEPTH)]
    TooDeep,
    #[error("string `{0}` is not closed with <escape>")]
    UnclosedString(String),
    #[error("expected `key:` at {0}")]
    NoKey(String),
    #[error("key `{0}` is given twice")]
    KeyTwice(String),
    #[error("expected `,` or `}}` after `{key}` at {at}")]
    NoCommaInObject { key: String, at: String },
    #[error("expected `,` or `]` at {0}")]
    NoCommaInList(String),
    #[error("expected a value at {0}")]
    NoValue(String),
    #[error("unexpected `{0}` after the argument object")]
    TrailingText(String),
}

struct Parser<'a> {
    text: &'a str,
    at: usize,
}

impl Parser<'_> {
    fn rest(&self) -> &str {
        &self.text[self.at..]
    }

    fn skip_ws(&mut self) {
        self.at += self.rest().len() - self.rest().trim_start().len();
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip_ws();
        if self.rest().starts_with(token) {
            self.at += token.len();
            true
        } else {
            false
        }
    }

    fn here(&self) -> String {
        if self.at >= self.text.len() {
            "the end".into()
        } else {
            format!("`{}` (byte {})", snippet(self.rest()), self.at)
        }
    }

    /// The value here: an `<escape>`d string, an object, a list or a bare
    /// scalar.
    fn value(&mut self, depth: usize) -> Result<Value, SyntaxError> {
        if depth > MAX_DEPTH {
            return Err(SyntaxError::TooDeep);
        }
        self.skip_ws();
        if self.eat(ESCAPE) {
            let Some(end) = self.rest().find(ESCAPE) else {
                return Err(SyntaxError::UnclosedString(snippet(self.rest())));
            };
            let s = self.rest()[..end].to_string();
            self.at += end + ESCAPE.len();
            return Ok(Value::String(s));
        }
        if self.eat("{") {
            return self.object(depth);
        }
        if self.eat("[") {
            return self.list(depth);
        }
        self.scalar()
    }

    /// An object's `key:value` members after its `{`, through its `}`.
    fn object(&mut self, depth: usize) -> Result<Value, SyntaxError> {
        let mut map = Map::new();
        if self.eat("}") {
            return Ok(Value::Object(map));
        }
        loop {
            self.skip_ws();
            let Some(colon) = self.rest().find(':') else {
                return Err(SyntaxError::NoKey(self.here()));
            };
            let key = self.rest()[..colon].trim().to_string();
            if !is_gemma_key(&key) {
                return Err(SyntaxError::NoKey(self.here()));
            }
            self.at += colon + 1;
            let v = self.value(depth + 1)?;
            if map.insert(key.clone(), v).is_some() {
                return Err(SyntaxError::KeyTwice(key));
            }
            if self.eat(",") {
                continue;
            }
            if self.eat("}") {
                return Ok(Value::Object(map));
            }
            return Err(SyntaxError::NoCommaInObject {
                key,
                at: self.here(),
            });
        }
    }

    /// A list's items after its `[`, through its `]`.
    fn list(&mut self, depth: usize) -> Result<Value, SyntaxError> {
        let mut items = Vec::new();
        if self.eat("]") {
            return Ok(Value::Array(items));
        }
        loop {
            items.push(self.value(depth + 1)?);
            if self.eat(",") {
                continue;
            }
            if self.eat("]") {
                return Ok(Value::Array(items));
            }
            return Err(SyntaxError::NoCommaInList(self.here()));
        }
    }

    /// A bare scalar: up to the next delimiter.
    fn scalar(&mut self) -> Result<Value, SyntaxError> {
        let end = self
            .rest()
            .find([',', '}', ']'])
            .unwrap_or(self.rest().len());
        let token = self.rest()[..end].trim().to_string();
        if token.is_empty() || token.contains('<') {
            return Err(SyntaxError::NoValue(self.here()));
        }
        self.at += end;
        Ok(match token.as_str() {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            "null" => Value::Null,
            _ => match serde_json::from_str::<Number>(&token) {
                Ok(n) => Value::Number(n),
                // Models sometimes drop the <escape>s around simple words.
                Err(_) => Value::String(token),
            },
        })
    }
}

fn ebnf(tools: &[ToolSchema], rules: CallRules) -> Result<String, GrammarError> {
    let mut g = Ebnf::default();
    let mut alts = Vec::new();
    for tool in tools {
        let obj = args_rule(&mut g, tool)?;
        alts.push(g.add(
            &format!("call_{}", tool.name),
            format!("{} {obj}", ebnf_literal(&format!("call:{}", tool.name))),
        ));
    }
    let call = g.add(
        "function_call",
        format!("\"{START}\" ({}) \"{END}\"", alts.join(" | ")),
    );
    Ok(g.render_calls(&call, "", rules))
}

fn args_rule(g: &mut Ebnf, tool: &ToolSchema) -> Result<String, GrammarError> {
    if !is_gemma_key(&tool.name) {
        return Err(GrammarError::Schema {
            tool: tool.name.clone(),
            detail: SchemaError::NotGemmaToolName,
        });
    }
    let obj = g
        .value(
            &tool.parameters,
            Dialect::Gemma,
            &format!("t_{}", tool.name),
        )
        .map_err(|detail| GrammarError::Schema {
            tool: tool.name.clone(),
            detail,
        })?;
    Ok(obj)
}

fn structural_tag(tools: &[ToolSchema], rules: CallRules) -> Result<Value, GrammarError> {
    let mut tags = Vec::new();
    for tool in tools {
        let mut g = Ebnf::default();
        let obj = args_rule(&mut g, tool)?;
        tags.push(json!({
            "type": "tag",
            "begin": format!("{START}call:{}", tool.name),
            "content": {"type": "grammar", "grammar": g.render(&obj)},
            "end": END,
        }));
    }
    Ok(json!({"type": "structural_tag", "format": {
        "type": "triggered_tags",
        "triggers": [START],
        "tags": tags,
        "at_least_one": rules.required,
        "stop_after_first": !rules.parallel,
    }}))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn parse(text: &str) -> ParsedReply {
        FunctionGemmaPlugin::default()
            .parse_reply(&Message::assistant(Some(text.into()), vec![]), &[])
    }

    #[test]
    fn escaped_strings_may_hold_commas_and_braces() {
        let r = parse(
            "ok <start_function_call>call:add{a:1,note:<escape>x, y {z}<escape>,l:[1,{b:true}]}<end_function_call>",
        );
        assert_eq!(r.content.as_deref(), Some("ok"));
        assert_eq!(
            r.calls[0].call.arguments,
            json!({"a": 1, "note": "x, y {z}", "l": [1, {"b": true}]})
        );
    }

    #[test]
    fn missing_escape_end_is_a_precise_error() {
        let r = parse("<start_function_call>call:add{note:<escape>oops}<end_function_call>");
        let err = r.calls[0].error.as_deref().unwrap();
        assert!(err.contains("not closed with <escape>"), "{err}");
        assert_eq!(r.calls[0].call.name, "add");
    }

    #[test]
    fn formatting_adds_ids_names_and_developer_role() {
        let history = vec![
            Message::system("tools here"),
            Message::assistant(None, vec![ToolCall::new("", "add", json!({"a": 1}))]),
            Message {
                role: Role::Tool,
                content: Some("{\"sum\": 7}".into()),
                tool_calls: vec![],
                tool_call_id: None,
                name: None,
            },
        ];
        let wire = FunctionGemmaPlugin::default().format_messages(&history);
        assert_eq!(wire[0]["role"], "developer");
        assert_eq!(wire[1]["tool_calls"][0]["id"], "call_1_0");
        assert_eq!(wire[2]["tool_call_id"], "call_1_0");
        assert_eq!(wire[2]["name"], "add");
        assert_eq!(wire[2]["content"], "{\"sum\": 7}");
    }
}
