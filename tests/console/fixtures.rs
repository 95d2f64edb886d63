//! What the console's tests drop and script alike: the calculator bundle
//! whose `add` tool sums two numbers (its `approval:` line the test's), and
//! the model's turns that call it.
#![allow(dead_code)]

/// A bundle adding with a tool; `approval` is the tool's `approval:` line
/// (empty for none), indented as a key of the tool.
pub fn calc(name: &str, approval: &str) -> String {
    format!(
        r#"name: {name}
version: "1"
description: Adds two numbers with a tool.
model: {{endpoint: mock, name: m, plugin: openai}}
prompts: {{system: "You add.", user: "{{{{ input }}}}"}}
limits: {{cost: 1.5, prompt_tokens: 100000}}
tools:
  - name: add
    kind: process
    effect: read_only
    description: Add two numbers.
{approval}    parameters:
      type: object
      properties: {{a: {{type: number, description: the first}}, b: {{type: number}}}}
      required: [a, b]
    command: [python3, -c, "import json,sys; a=json.load(sys.stdin); print(json.dumps({{'sum': a['a'] + a['b']}}))"]
"#
    )
}

/// The model's two turns of an addition: it calls `add` with 2 and 3,
/// then answers with the sum (a script's `replies:` entries, after the
/// test's own, which match first).
pub const ADDING: &str = r#"  - turn: 1
    content: "Adding them."
    tool_calls:
      - {id: call_add, name: add, arguments: {a: 2, b: 3}}
  - {turn: 2, content: "2 + 3 = 5."}
"#;
