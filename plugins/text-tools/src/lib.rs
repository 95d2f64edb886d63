//! Example tool plugin: word_count, upper, reverse. The instance config may
//! set `{"max_len": N}` to refuse longer texts (a validation error).

use structured_agents_plugin_sdk::{
    ToolDef, ToolFailure, ToolPlugin, Value, export_tool_plugin, json,
};

fn text_arg() -> Value {
    json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
}

fn text<'a>(args: &'a Value, config: &Value) -> Result<&'a str, ToolFailure> {
    let t = args["text"]
        .as_str()
        .ok_or_else(|| ToolFailure::Validation("`text` must be a string".into()))?;
    if let Some(max) = config["max_len"].as_u64()
        && t.chars().count() as u64 > max
    {
        return Err(ToolFailure::Validation(format!(
            "text longer than {max} characters"
        )));
    }
    Ok(t)
}

fn word_count(args: &Value, config: &Value) -> Result<Value, ToolFailure> {
    Ok(json!({"words": text(args, config)?.split_whitespace().count()}))
}

fn upper(args: &Value, config: &Value) -> Result<Value, ToolFailure> {
    Ok(json!({"text": text(args, config)?.to_uppercase()}))
}

fn reverse(args: &Value, config: &Value) -> Result<Value, ToolFailure> {
    Ok(json!({"text": text(args, config)?.chars().rev().collect::<String>()}))
}

fn plugin() -> ToolPlugin {
    ToolPlugin {
        name: "text-tools",
        version: env!("CARGO_PKG_VERSION"),
        tools: vec![
            ToolDef {
                name: "word_count",
                description: "Count the words of a text.",
                parameters: text_arg,
                run: word_count,
            },
            ToolDef {
                name: "upper",
                description: "Upper-case a text.",
                parameters: text_arg,
                run: upper,
            },
            ToolDef {
                name: "reverse",
                description: "Reverse a text.",
                parameters: text_arg,
                run: reverse,
            },
        ],
    }
}

export_tool_plugin!(plugin);
