//! The Qwen text parser: finds Hermes `<tool_call>{json}</tool_call>`,
//! Qwen3 XML `<function=f><parameter=p>v</parameter></function>` (inside
//! `<tool_call>` or bare), bare `<function=f>{json}</function>` and
//! whole-content JSON calls, and keeps the text around them. Malformed calls
//! become calls with a precise error; nothing here panics on any input.

use serde_json::{Map, Value};

use crate::model::reply::{TextParse, param_schema, snippet, typed_value};
use crate::types::ToolSchema;

pub(super) const TOOL_CALL: &str = "<tool_call>";
const TOOL_CALL_END: &str = "</tool_call>";
pub(super) const FUNCTION: &str = "<function=";
const FUNCTION_END: &str = "</function>";
const PARAMETER: &str = "<parameter=";
const PARAMETER_END: &str = "</parameter>";

/// Finds every call in `text`; the rest is content. With `json_content`,
/// a reply that is only JSON call objects is read as calls.
pub(super) fn parse_text(text: &str, tools: &[ToolSchema], json_content: bool) -> TextParse {
    let mut out = TextParse::default();
    if json_content && json_content_calls(text, &mut out) {
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

/// Why the JSON at the start of a tool call's text does not read: what, and
/// where within the text (line and column, a byte, or the key it was in).
/// The caller quotes the text and names the tool.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
enum JsonTextError {
    #[error("{message} at line {line} column {column}")]
    Invalid {
        message: String,
        line: usize,
        column: usize,
    },
    #[error("no JSON value")]
    NoValue,
    #[error("object key at byte {at} is not a string")]
    KeyNotString { at: usize },
    #[error("expected `:` after key `{key}`")]
    NoColon { key: String },
    #[error("value of `{key}`: {inner}")]
    InValue {
        key: String,
        inner: Box<JsonTextError>,
    },
    #[error("expected `,` or `}}` after the value of `{key}`")]
    NoComma { key: String },
    #[error("the JSON object is not closed")]
    NotClosed,
}

/// Reads one JSON value at byte `at` of `text`; returns it with its byte
/// length. Errors give the line and column within `text`.
fn json_prefix(text: &str, at: usize) -> Result<(Value, usize), JsonTextError> {
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
            Err(JsonTextError::Invalid {
                message: message.to_string(),
                line: base_line + e.line().max(1),
                column,
            })
        }
        None => Err(JsonTextError::NoValue),
    }
}

/// A JSON object member: key, value, and the value's exact source text.
type JsonMember<'a> = (String, Value, &'a str);

/// The members of the JSON object at the start of `text`, each with its
/// exact source text, and the object's byte length.
fn json_object_members(text: &str) -> Result<(Vec<JsonMember<'_>>, usize), JsonTextError> {
    let bytes = text.as_bytes();
    let skip_ws = |mut i: usize| {
        // JSON whitespace only: a form feed here would make the object text
        // something serde_json itself rejects.
        while i < bytes.len() && matches!(bytes[i], b' ' | b'\t' | b'\n' | b'\r') {
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
            return Err(JsonTextError::KeyNotString { at: i });
        };
        i = skip_ws(i + used);
        if bytes.get(i) != Some(&b':') {
            return Err(JsonTextError::NoColon { key });
        }
        i = skip_ws(i + 1);
        let (value, used) = json_prefix(text, i).map_err(|e| JsonTextError::InValue {
            key: key.clone(),
            inner: Box::new(e),
        })?;
        members.push((key, value, &text[i..i + used]));
        i = skip_ws(i + used);
        match bytes.get(i) {
            Some(b',') => i = skip_ws(i + 1),
            Some(b'}') => return Ok((members, i + 1)),
            Some(_) => {
                return Err(JsonTextError::NoComma {
                    key: members.last().map(|m| m.0.clone()).unwrap_or_default(),
                });
            }
            None => return Err(JsonTextError::NotClosed),
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
        Some((_, args @ Value::Object(_), raw)) => {
            out.ok(name, args.clone(), Some(raw.to_string()))
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
    let after_key = body.find("\"name\"").map(|i| &body[i + 6..]);
    after_key
        .and_then(|s| s.split('"').nth(1))
        .filter(|n| !n.is_empty() && n.len() < 128)
        .unwrap_or_default()
        .to_string()
}

/// `<function=name>...</function>` at the start of `tail`; returns bytes used.
/// Its body is a JSON object ([`json_arguments`]) or `<parameter=…>` tags
/// ([`tagged_arguments`]).
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
    if body[ws_len(body)..].starts_with('{') {
        body_at + json_arguments(name, body, out)
    } else {
        body_at + tagged_arguments(name, body, tools, out)
    }
}

/// The call `name` whose `body` is a JSON object (after whitespace), with
/// its `</function>` when one follows; returns bytes of `body` used.
fn json_arguments(name: &str, body: &str, out: &mut TextParse) -> usize {
    let ws = ws_len(body);
    match json_object_members(&body[ws..]) {
        Ok((members, used)) => {
            let raw = &body[ws..ws + used];
            // Later duplicates win, as in serde_json.
            let args: Map<String, Value> = members.into_iter().map(|(k, v, _)| (k, v)).collect();
            out.ok(name, Value::Object(args), Some(raw.to_string()));
            let rest = &body[ws + used..];
            let rws = ws_len(rest);
            if rest[rws..].starts_with(FUNCTION_END) {
                ws + used + rws + FUNCTION_END.len()
            } else {
                ws + used
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
            through(body, FUNCTION_END)
        }
    }
}

/// The call `name` whose `body` is `<parameter=NAME>value</parameter>`
/// tags up to `</function>` (or a closing tag cut off), each value typed
/// by the tool's schema; returns bytes of `body` used.
fn tagged_arguments(name: &str, body: &str, tools: &[ToolSchema], out: &mut TextParse) -> usize {
    let mut args = Map::new();
    let mut i = 0;
    loop {
        i += ws_len(&body[i..]);
        let rest = &body[i..];
        if rest.starts_with(FUNCTION_END) {
            out.ok(name, Value::Object(args), None);
            return i + FUNCTION_END.len();
        }
        if rest.is_empty() || rest.starts_with(TOOL_CALL_END) {
            // Closing tag cut off by a stop sequence.
            out.ok(name, Value::Object(args), None);
            return i;
        }
        if !rest.starts_with(PARAMETER) {
            let inner = &rest[..rest.find(FUNCTION_END).unwrap_or(rest.len())];
            out.bad(
                name,
                inner.trim(),
                format!(
                    "unexpected text inside <function={name}>: `{}` (expected <parameter=NAME> or </function>)",
                    snippet(inner.trim())
                ),
            );
            return i + through(rest, FUNCTION_END);
        }
        let p = &rest[PARAMETER.len()..];
        let Some(gt) = p.find('>').filter(|&g| !p[..g].contains('\n')) else {
            out.bad(
                name,
                rest,
                format!("`<parameter=` tag in `{name}` is not closed with `>`"),
            );
            return i + through(rest, FUNCTION_END);
        };
        let param = p[..gt].trim().to_string();
        let value_text = &p[gt + 1..];
        let Some(end) = parameter_end(value_text) else {
            out.bad(
                name,
                rest,
                format!("parameter `{param}` of `{name}` has no </parameter>"),
            );
            return i + through(rest, FUNCTION_END);
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
            return i + through(rest, FUNCTION_END);
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
mod tests {
    use super::*;

    /// Found by cargo-fuzz: a form feed between key and colon is not JSON
    /// whitespace, so the call must be an error, not `null` arguments.
    #[test]
    fn form_feed_is_not_json_whitespace() {
        let out = parse_text("<function=f>\n{\"a\"\u{c}: 1}", &[], true);
        assert_eq!(out.calls.len(), 1);
        assert!(
            out.calls[0]
                .error
                .as_deref()
                .unwrap_or_default()
                .contains("expected `:`"),
            "{:?}",
            out.calls[0]
        );
    }
}
