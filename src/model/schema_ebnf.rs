//! JSON Schema → XGrammar EBNF rules, in the two value syntaxes the plugins
//! need: JSON (Hermes, Qwen XML parameter values) and FunctionGemma's
//! `{key:value}` with `<escape>`-quoted strings. Schema-aware: required
//! properties in declared order, optional ones skippable, enums, consts,
//! nested objects and arrays, `anyOf`/`oneOf`, type lists.
//!
//! It knows nothing about tool-call framing; plugins wrap these rules.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::{Map, Value};

/// The value syntax to emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Dialect {
    Json,
    Gemma,
}

impl Dialect {
    /// The base rule that accepts any value, or with `shape` (`_arr`,
    /// `_obj`) any array or object: `json_any`, `fg_any_arr`, ….
    fn any(self, shape: &str) -> String {
        let any = match self {
            Self::Json => "json_any",
            Self::Gemma => "fg_any",
        };
        format!("{any}{shape}")
    }
}

/// Shared rules every grammar gets (referenced by name).
const JSON_BASE: &str = r#"ws ::= [ \t\n]*
json_string ::= "\"" json_char* "\""
json_char ::= [^"\\\x00-\x1f] | "\\" (["\\/bfnrt] | "u" json_hex json_hex json_hex json_hex)
json_hex ::= [0-9a-fA-F]
json_int ::= "-"? ("0" | [1-9] [0-9]*)
json_num ::= json_int ("." [0-9]+)? ([eE] [+-]? [0-9]+)?
json_bool ::= "true" | "false"
json_any ::= json_string | json_num | json_bool | "null" | json_any_obj | json_any_arr
json_any_obj ::= "{" ws (json_string ws ":" ws json_any ws ("," ws json_string ws ":" ws json_any ws)*)? "}"
json_any_arr ::= "[" ws (json_any ws ("," ws json_any ws)*)? "]"
"#;

const GEMMA_BASE: &str = r#"fg_string ::= "<escape>" fg_char* "<escape>"
fg_char ::= [^<] | "<" [^e<]
fg_key ::= [a-zA-Z_] [a-zA-Z0-9_]*
fg_any ::= fg_string | json_num | json_bool | "null" | fg_any_obj | fg_any_arr
fg_any_obj ::= "{" (fg_key ":" fg_any ("," fg_key ":" fg_any)*)? "}"
fg_any_arr ::= "[" (fg_any ("," fg_any)*)? "]"
"#;

/// Text allowed inside a Qwen XML `<parameter>` for a string value: anything
/// that does not start a closing tag.
pub(crate) const XML_TEXT_RULE: &str = "xml_text ::= ([^<] | \"<\" [^/])*\n";

/// An EBNF rule set under construction.
#[derive(Default)]
pub(crate) struct Ebnf {
    rules: Vec<(String, String)>,
    taken: HashMap<String, usize>,
    gemma: bool,
    xml_text: bool,
}

/// The schema uses something this builder cannot express: what, quoting
/// the bad part. Where: [`super::GrammarError::Schema`] names the tool; the
/// fix is a simpler parameter schema (or `grammar: none`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SchemaError {
    #[error("schema nests deeper than {} levels", MAX_DEPTH)]
    TooDeep,
    #[error("schema `false` accepts no value")]
    AcceptsNothing,
    #[error("schema must be an object, found {0}")]
    NotAnObject(Value),
    /// `enum`, `anyOf` or `oneOf` holds something other than a list.
    #[error("`{0}` must be an array")]
    NotAList(&'static str),
    /// `enum`, `anyOf` or `oneOf` lists nothing.
    #[error("`{0}` is empty")]
    EmptyList(&'static str),
    #[error("`type` list holds a non-string")]
    TypeListNotStrings,
    #[error("`type` must be a string or a list, found {0}")]
    TypeNotStringOrList(Value),
    #[error("unknown type `{0}`")]
    UnknownType(String),
    #[error(
        "property name `{0}` cannot be written in FunctionGemma's syntax (letters, digits and `_` only)"
    )]
    NotGemmaKey(String),
    #[error("constant {0} cannot be written in FunctionGemma's syntax")]
    NotGemmaConstant(Value),
    #[error("FunctionGemma tool names must be letters, digits and `_`")]
    NotGemmaToolName,
}

/// Depth past which schemas are refused: deeper nesting is a mistake in a
/// tool definition, and recursion must stay bounded.
const MAX_DEPTH: usize = 32;

impl Ebnf {
    /// Adds a rule with a fresh name derived from `base`; returns the name.
    pub(crate) fn add(&mut self, base: &str, body: String) -> String {
        let clean: String = base
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let n = self.taken.entry(clean.clone()).or_insert(0);
        *n += 1;
        let name = if *n == 1 {
            clean
        } else {
            format!("{clean}_{n}")
        };
        self.rules.push((name.clone(), body));
        name
    }

    /// Marks the Qwen XML string rule as used.
    pub(crate) fn use_xml_text(&mut self) -> &'static str {
        self.xml_text = true;
        "xml_text"
    }

    /// The full grammar with `root ::= root_body` first.
    pub(crate) fn render(&self, root_body: &str) -> String {
        let mut out = format!("root ::= {root_body}\n");
        for (name, body) in &self.rules {
            let _ = writeln!(out, "{name} ::= {body}");
        }
        out.push_str(JSON_BASE);
        if self.gemma {
            out.push_str(GEMMA_BASE);
        }
        if self.xml_text {
            out.push_str(XML_TEXT_RULE);
        }
        out
    }

    /// The whole grammar for calls written as rule `call`: free text (no
    /// `<`, so it cannot open a tag) then the calls, or only the calls when
    /// they are required. `separator` is an expression between parallel
    /// calls (empty for none).
    pub(crate) fn render_calls(
        &mut self,
        call: &str,
        separator: &str,
        rules: crate::model::CallRules,
    ) -> String {
        let calls = if rules.parallel {
            let next = if separator.is_empty() {
                call.to_string()
            } else {
                format!("{separator} {call}")
            };
            format!("{call} ({next})*")
        } else {
            call.to_string()
        };
        if rules.required {
            self.render(&calls)
        } else {
            let text = self.add("text", "[^<]*".into());
            self.render(&format!("{text} ({calls})?"))
        }
    }

    /// An expression matching values of `schema` in `dialect`.
    pub(crate) fn value(
        &mut self,
        schema: &Value,
        dialect: Dialect,
        hint: &str,
    ) -> Result<String, SchemaError> {
        self.value_at(schema, dialect, hint, 0)
    }

    /// [`Self::value`] `depth` schemas down: `true` is any value, a
    /// choice (`const`, `enum`, `anyOf`, `oneOf`) its alternatives, else
    /// one alternative for each of its types.
    fn value_at(
        &mut self,
        schema: &Value,
        dialect: Dialect,
        hint: &str,
        depth: usize,
    ) -> Result<String, SchemaError> {
        if depth > MAX_DEPTH {
            return Err(SchemaError::TooDeep);
        }
        if dialect == Dialect::Gemma {
            self.gemma = true;
        }
        let any = || dialect.any("");
        let schema = match schema {
            Value::Bool(true) => return Ok(any()),
            Value::Bool(false) => return Err(SchemaError::AcceptsNothing),
            Value::Object(o) => o,
            other => return Err(SchemaError::NotAnObject(other.clone())),
        };
        if let Some(choice) = self.choice(schema, dialect, hint, depth)? {
            return Ok(choice);
        }
        let Some(types) = types_of(schema)? else {
            return Ok(any());
        };
        let mut alts = Vec::new();
        for t in types {
            alts.push(match (t, dialect) {
                ("string", Dialect::Json) => "json_string".to_string(),
                ("string", Dialect::Gemma) => "fg_string".to_string(),
                ("integer", _) => "json_int".to_string(),
                ("number", _) => "json_num".to_string(),
                ("boolean", _) => "json_bool".to_string(),
                ("null", _) => "\"null\"".to_string(),
                ("object", _) => self.object(schema, dialect, hint, depth)?,
                ("array", _) => self.array(schema, dialect, hint, depth)?,
                (other, _) => return Err(SchemaError::UnknownType(other.to_string())),
            });
        }
        Ok(if alts.len() == 1 {
            alts.remove(0)
        } else {
            format!("({})", alts.join(" | "))
        })
    }

    /// The alternatives of a schema that is a choice: its `const`, its
    /// `enum`'s literals, or its `anyOf` / `oneOf` options; `None` for any
    /// other schema.
    fn choice(
        &mut self,
        schema: &Map<String, Value>,
        dialect: Dialect,
        hint: &str,
        depth: usize,
    ) -> Result<Option<String>, SchemaError> {
        if let Some(c) = schema.get("const") {
            return literal(c, dialect).map(Some);
        }
        if let Some(options) = schema.get("enum") {
            let options = options.as_array().ok_or(SchemaError::NotAList("enum"))?;
            if options.is_empty() {
                return Err(SchemaError::EmptyList("enum"));
            }
            let alts = options
                .iter()
                .map(|v| literal(v, dialect))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(Some(format!("({})", alts.join(" | "))));
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(options) = schema.get(key) {
                let options = options.as_array().ok_or(SchemaError::NotAList(key))?;
                let mut alts = Vec::new();
                for (i, option) in options.iter().enumerate() {
                    alts.push(self.value_at(option, dialect, &format!("{hint}_{i}"), depth + 1)?);
                }
                if alts.is_empty() {
                    return Err(SchemaError::EmptyList(key));
                }
                return Ok(Some(format!("({})", alts.join(" | "))));
            }
        }
        Ok(None)
    }

    // `array` and `object` take `value_at`'s arguments, as the rules it
    // descends into.
    fn array(
        &mut self,
        schema: &Map<String, Value>,
        dialect: Dialect,
        hint: &str,
        depth: usize,
    ) -> Result<String, SchemaError> {
        let item = match schema.get("items") {
            Some(items) => self.value_at(items, dialect, &format!("{hint}_item"), depth + 1)?,
            None => return Ok(dialect.any("_arr")),
        };
        let min = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0);
        let body = match dialect {
            Dialect::Json if min >= 1 => format!("\"[\" ws {item} (ws \",\" ws {item})* ws \"]\""),
            Dialect::Json => format!("\"[\" ws ({item} (ws \",\" ws {item})* ws)? \"]\""),
            Dialect::Gemma if min >= 1 => format!("\"[\" {item} (\",\" {item})* \"]\""),
            Dialect::Gemma => format!("\"[\" ({item} (\",\" {item})*)? \"]\""),
        };
        Ok(self.add(&format!("{hint}_arr"), body))
    }

    fn object(
        &mut self,
        schema: &Map<String, Value>,
        dialect: Dialect,
        hint: &str,
        depth: usize,
    ) -> Result<String, SchemaError> {
        let Some(props) = schema.get("properties").and_then(Value::as_object) else {
            return Ok(dialect.any("_obj"));
        };
        let required = required_set(schema);
        let mut members = Vec::new();
        for (key, sub) in props {
            let value = self.value_at(sub, dialect, &format!("{hint}_{key}"), depth + 1)?;
            let pair = match dialect {
                Dialect::Json => {
                    format!(
                        "{} ws \":\" ws {value}",
                        ebnf_literal(&Value::String(key.clone()).to_string())
                    )
                }
                Dialect::Gemma => {
                    if !is_gemma_key(key) {
                        return Err(SchemaError::NotGemmaKey(key.clone()));
                    }
                    format!("{} {value}", ebnf_literal(&format!("{key}:")))
                }
            };
            members.push(Member {
                pair,
                required: required.contains(&key.as_str()),
            });
        }
        let sep = match dialect {
            Dialect::Json => "ws \",\" ws",
            Dialect::Gemma => "\",\"",
        };
        let body = self.members(&members, sep, hint);
        Ok(match dialect {
            Dialect::Json => self.add(
                &format!("{hint}_obj"),
                format!("\"{{\" ws {body} ws \"}}\""),
            ),
            Dialect::Gemma => self.add(&format!("{hint}_obj"), format!("\"{{\" {body} \"}}\"")),
        })
    }

    /// A sequence of members in declared order, optional ones skippable,
    /// with `sep` only between members present. One rule per (position,
    /// "something came before") so the size stays linear.
    pub(crate) fn members(&mut self, members: &[Member], sep: &str, hint: &str) -> String {
        if members.is_empty() {
            return "\"\"".into();
        }
        // Built back to front: tail[i][first] names the rule for members i.. .
        let mut tail: Vec<[String; 2]> = vec![["\"\"".into(), "\"\"".into()]; members.len() + 1];
        for i in (0..members.len()).rev() {
            let m = &members[i];
            let mut names: [String; 2] = Default::default();
            for (slot, first) in [(0usize, false), (1usize, true)] {
                let lead = if first || sep.is_empty() {
                    String::new()
                } else {
                    format!("{sep} ")
                };
                let take = format!("{lead}{} {}", m.pair, tail[i + 1][0]);
                let body = if m.required {
                    take
                } else {
                    format!("({take}) | {}", tail[i + 1][slot])
                };
                names[slot] = self.add(
                    &format!("{hint}_m{i}_{}", if first { "f" } else { "n" }),
                    body,
                );
            }
            tail[i] = names;
        }
        tail[0][1].clone()
    }
}

/// One member of an object-like sequence.
pub(crate) struct Member {
    pub pair: String,
    pub required: bool,
}

pub(crate) fn required_set(schema: &Map<String, Value>) -> Vec<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// FunctionGemma's string quote, on both sides of a string value.
pub(crate) const ESCAPE: &str = "<escape>";

/// `value` in FunctionGemma's syntax; `None` when it cannot be written
/// (a key that is not an identifier, a string holding `<escape>`).
pub(crate) fn render_value(value: &Value) -> Option<String> {
    Some(match value {
        Value::String(s) if s.contains(ESCAPE) => return None,
        Value::String(s) => format!("{ESCAPE}{s}{ESCAPE}"),
        Value::Object(o) => {
            let mut parts = Vec::with_capacity(o.len());
            for (k, v) in o {
                if !is_gemma_key(k) {
                    return None;
                }
                parts.push(format!("{k}:{}", render_value(v)?));
            }
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(items) => {
            format!(
                "[{}]",
                items
                    .iter()
                    .map(render_value)
                    .collect::<Option<Vec<_>>>()?
                    .join(",")
            )
        }
        other => other.to_string(),
    })
}

/// Keys FunctionGemma writes bare.
pub(crate) fn is_gemma_key(key: &str) -> bool {
    let mut chars = key.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `text` as an EBNF string literal.
pub(crate) fn ebnf_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The types a schema allows: its `type` (one or a list), else `object`
/// when it has `properties` and `array` when it has `items`; `None` when it
/// says nothing (any value).
fn types_of(schema: &Map<String, Value>) -> Result<Option<Vec<&str>>, SchemaError> {
    Ok(Some(match schema.get("type") {
        None => {
            if schema.contains_key("properties") {
                vec!["object"]
            } else if schema.contains_key("items") {
                vec!["array"]
            } else {
                return Ok(None);
            }
        }
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts
            .iter()
            .map(|t| t.as_str().ok_or(SchemaError::TypeListNotStrings))
            .collect::<Result<_, _>>()?,
        Some(other) => return Err(SchemaError::TypeNotStringOrList(other.clone())),
    }))
}

/// A constant value as an EBNF literal in `dialect`.
fn literal(value: &Value, dialect: Dialect) -> Result<String, SchemaError> {
    match dialect {
        Dialect::Json => Ok(ebnf_literal(&value.to_string())),
        Dialect::Gemma => render_value(value)
            .map(|text| ebnf_literal(&text))
            .ok_or_else(|| SchemaError::NotGemmaConstant(value.clone())),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn optional_members_get_linear_rules() {
        let mut g = Ebnf::default();
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "integer"}, "b": {"type": "string"}, "c": {"enum": ["x", "y"]}
        }, "required": ["a"]});
        let root = g.value(&schema, Dialect::Json, "t").unwrap();
        let text = g.render(&root);
        assert!(text.starts_with("root ::= t_obj\n"), "{text}");
        assert!(text.contains("\"\\\"x\\\"\" | \"\\\"y\\\"\""), "{text}");
        assert!(g.rules.len() <= 8, "{text}");
    }

    #[test]
    fn bad_schemas_are_explained() {
        let mut g = Ebnf::default();
        assert!(
            g.value(&json!({"type": "banana"}), Dialect::Json, "t")
                .unwrap_err()
                .to_string()
                .contains("banana")
        );
        assert!(
            g.value(&json!({"enum": []}), Dialect::Json, "t")
                .unwrap_err()
                .to_string()
                .contains("empty")
        );
        let bad_key = json!({"type": "object", "properties": {"a-b": {"type": "string"}}});
        assert!(
            g.value(&bad_key, Dialect::Gemma, "t")
                .unwrap_err()
                .to_string()
                .contains("a-b")
        );
    }

    #[test]
    fn literals_escape_quotes_and_newlines() {
        assert_eq!(ebnf_literal("a\"b\\\n"), "\"a\\\"b\\\\\\n\"");
    }
}
