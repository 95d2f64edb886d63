//! Random tool schemas and argument values that conform to them, shared by
//! the model round-trip and xgrammar tests. Strings avoid `<` (which would
//! open tags in the text formats) but include quotes, backslashes, commas,
//! braces and newlines so escaping is exercised.

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

use structured_agents::types::{ToolCall, ToolSchema};

pub fn text_value() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 ,.:{}\\[\\]\"\\\\\n-]{0,12}"
}

fn leaf() -> BoxedStrategy<Value> {
    prop_oneof![
        Just(json!({"type": "integer"})),
        Just(json!({"type": "number"})),
        Just(json!({"type": "boolean"})),
        Just(json!({"type": "string"})),
        proptest::collection::btree_set("[a-z]{1,6}", 1..4).prop_map(
            |options| json!({"type": "string", "enum": options.into_iter().collect::<Vec<_>>()})
        ),
    ]
    .boxed()
}

pub fn schema(depth: u32) -> BoxedStrategy<Value> {
    if depth == 0 {
        return leaf();
    }
    prop_oneof![
        4 => leaf(),
        1 => object_schema(depth - 1),
        1 => schema(depth - 1).prop_map(|items| json!({"type": "array", "items": items})),
    ]
    .boxed()
}

pub fn object_schema(depth: u32) -> BoxedStrategy<Value> {
    btree_map("[a-z][a-z0-9_]{0,7}", (schema(depth), any::<bool>()), 1..5)
        .prop_map(|props| {
            let required: Vec<&String> = props
                .iter()
                .filter(|(_, (_, r))| *r)
                .map(|(k, _)| k)
                .collect();
            let properties: Map<String, Value> = props
                .iter()
                .map(|(k, (s, _))| (k.clone(), s.clone()))
                .collect();
            json!({"type": "object", "properties": properties, "required": required})
        })
        .boxed()
}

/// A value of `schema`, object members in declared order.
pub fn value_for(schema: &Value) -> BoxedStrategy<Value> {
    if let Some(options) = schema.get("enum").and_then(Value::as_array) {
        return proptest::sample::select(options.clone()).boxed();
    }
    match schema["type"].as_str().unwrap_or_default() {
        "integer" => (-1_000_000i64..1_000_000).prop_map(Value::from).boxed(),
        "number" => (-1.0e6f64..1.0e6).prop_map(|f| json!(f)).boxed(),
        "boolean" => any::<bool>().prop_map(Value::from).boxed(),
        "string" => text_value().prop_map(Value::from).boxed(),
        "array" => vec(value_for(&schema["items"]), 0..3)
            .prop_map(Value::from)
            .boxed(),
        "object" => {
            let required: Vec<String> = schema["required"]
                .as_array()
                .map(|r| {
                    r.iter()
                        .filter_map(|k| k.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            let members: Vec<BoxedStrategy<Option<(String, Value)>>> = schema["properties"]
                .as_object()
                .map(|p| {
                    p.iter()
                        .map(|(k, s)| {
                            let k = k.clone();
                            let v = value_for(s);
                            if required.contains(&k) {
                                v.prop_map(move |v| Some((k.clone(), v))).boxed()
                            } else {
                                (any::<bool>(), v)
                                    .prop_map(move |(on, v)| on.then(|| (k.clone(), v)))
                                    .boxed()
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            members
                .prop_map(|m| Value::Object(m.into_iter().flatten().collect()))
                .boxed()
        }
        other => panic!("generator made unknown type {other}"),
    }
}

/// A tool with a random object schema, and a conforming call to it.
pub fn tool_and_call() -> impl Strategy<Value = (ToolSchema, ToolCall)> {
    ("[a-z][a-z0-9_]{0,10}", object_schema(2)).prop_flat_map(|(name, params)| {
        let tool = ToolSchema {
            name: name.clone(),
            description: String::new(),
            parameters: params.clone(),
        };
        value_for(&params)
            .prop_map(move |args| (tool.clone(), ToolCall::new("x", name.clone(), args)))
    })
}
