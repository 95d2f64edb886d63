//! XGrammar EBNF → llama.cpp GBNF. The two share their syntax for literals,
//! character classes, grouping and repetition; they differ in rule names:
//! GBNF allows only letters, digits and `-`, so `call_add` is refused there
//! ("failed to parse grammar"). The grammars this crate builds use no
//! XGrammar-only constructs (lookahead, tag dispatch), so renaming is the
//! whole translation.

/// `text` with every `_` in a rule name turned into `-`. Literals (`"…"`)
/// and character classes (`[…]`) are copied as they are, escapes included.
pub(crate) fn from_xgrammar(text: &str) -> String {
    #[derive(PartialEq)]
    enum At {
        Rules,
        Literal,
        Class,
    }
    let mut out = String::with_capacity(text.len());
    let mut at = At::Rules;
    let mut escaped = false;
    for c in text.chars() {
        match at {
            At::Rules => {
                match c {
                    '"' => at = At::Literal,
                    '[' => at = At::Class,
                    _ => {}
                }
                out.push(if c == '_' { '-' } else { c });
            }
            At::Literal | At::Class => {
                out.push(c);
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if (at == At::Literal && c == '"') || (at == At::Class && c == ']') {
                    at = At::Rules;
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_names_lose_underscores_and_literals_keep_them() {
        let text = "root ::= t_add \"_x\\\"_\" [^_\\]_] json_any\nt_add ::= \"a_b\"\n";
        assert_eq!(
            from_xgrammar(text),
            "root ::= t-add \"_x\\\"_\" [^_\\]_] json-any\nt-add ::= \"a_b\"\n"
        );
    }

    #[test]
    fn a_built_grammar_has_no_underscore_outside_literals() {
        use crate::model::{CallRules, Grammar, GrammarMode, ModelPlugin, QwenPlugin};
        use crate::types::ToolSchema;
        let tools = [ToolSchema {
            name: "add_numbers".into(),
            description: String::new(),
            parameters: serde_json::json!({"type": "object",
                "properties": {"a_b": {"type": "integer"}, "n": {"type": "array", "items": {"type": "string"}}},
                "required": ["a_b"]}),
        }];
        let Ok(Grammar::Ebnf(text)) =
            QwenPlugin::default().build_grammar(GrammarMode::Ebnf, &tools, CallRules::default())
        else {
            panic!("qwen builds EBNF");
        };
        let gbnf = from_xgrammar(&text);
        for line in gbnf.lines() {
            let (name, _) = line.split_once(" ::= ").unwrap_or_default();
            assert!(
                name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
                "GBNF rule name {name:?} in {gbnf}"
            );
        }
    }
}
