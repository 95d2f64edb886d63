//! Example tool plugin: add, multiply, divide (a validation error on division
//! by zero) and `explode` (panics, to show the daemon survives it).
//!
//! Build-time variant for the loader's reload test: `SA_CALC_VARIANT=times10`
//! makes `multiply` return ten times the product, a visibly different library.

use structured_agents_plugin_sdk::{
    ToolDef, ToolFailure, ToolPlugin, Value, export_tool_plugin, json,
};

fn two_numbers() -> Value {
    json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]})
}

fn numbers(args: &Value) -> Result<(f64, f64), ToolFailure> {
    let get = |k: &str| {
        args[k]
            .as_f64()
            .ok_or_else(|| ToolFailure::Validation(format!("`{k}` must be a number")))
    };
    Ok((get("a")?, get("b")?))
}

fn add(args: &Value, _config: &Value) -> Result<Value, ToolFailure> {
    let (a, b) = numbers(args)?;
    Ok(json!({"result": a + b}))
}

fn multiply(args: &Value, _config: &Value) -> Result<Value, ToolFailure> {
    let (a, b) = numbers(args)?;
    let factor = if option_env!("SA_CALC_VARIANT") == Some("times10") {
        10.0
    } else {
        1.0
    };
    Ok(json!({"result": a * b * factor}))
}

fn divide(args: &Value, _config: &Value) -> Result<Value, ToolFailure> {
    let (a, b) = numbers(args)?;
    if b == 0.0 {
        return Err(ToolFailure::Validation("division by zero".into()));
    }
    Ok(json!({"result": a / b}))
}

fn explode(_args: &Value, _config: &Value) -> Result<Value, ToolFailure> {
    panic!("the explode tool always panics")
}

fn plugin() -> ToolPlugin {
    ToolPlugin {
        name: "calculator",
        version: env!("CARGO_PKG_VERSION"),
        tools: vec![
            ToolDef {
                name: "add",
                description: "Add two numbers.",
                parameters: two_numbers,
                run: add,
            },
            ToolDef {
                name: "multiply",
                description: "Multiply two numbers.",
                parameters: two_numbers,
                run: multiply,
            },
            ToolDef {
                name: "divide",
                description: "Divide a by b.",
                parameters: two_numbers,
                run: divide,
            },
            ToolDef {
                name: "explode",
                description: "Always panics (for tests).",
                parameters: || json!({"type": "object"}),
                run: explode,
            },
        ],
    }
}

export_tool_plugin!(plugin);
