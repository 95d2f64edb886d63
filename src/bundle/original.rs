//! The Python agent kernel's `bundle.yaml` keys, recognised: a load that
//! meets them names each (with its line) and the command that converts the
//! bundle (`structured-agents import`). The converter itself is the
//! top-level `import` module, outside the core: the loader only needs to
//! know the keys.

use std::path::Path;

use serde_json::Value;

/// The keys only the original format has, with where their content goes
/// here. `tools[]` stands for every item of `tools`.
pub const ORIGINAL_KEYS: &[(&str, &str)] = &[
    ("initial_context", "`prompts.system` and `prompts.user`"),
    ("max_turns", "`limits.max_turns`"),
    ("termination_tool", "`termination.tool`"),
    ("registries", "each tool's `kind`"),
    ("model.adapter", "`model.name`"),
    ("model.grammar.args_format", "no equivalent"),
    ("tools[].registry", "`kind`"),
    ("tools[].inputs_override", "`parameters`"),
    ("tools[].context_providers", "no equivalent"),
];

/// Where the original kernel's server was when the bundle does not say
/// (its `KernelConfig.base_url`, set in code): vLLM's default address.
pub const DEFAULT_ENDPOINT: &str = "http://localhost:8000/v1";

/// One original key that a load met: its path in the file and where its
/// content goes in this format.
#[derive(Debug, Clone, PartialEq)]
pub struct OriginalKey {
    pub path: String,
    pub goes_to: &'static str,
}

/// The original-format keys present in a parsed `bundle.yaml`, in the
/// order of [`ORIGINAL_KEYS`] (every tool's for the `tools[]` ones).
pub fn original_keys(value: &Value) -> Vec<OriginalKey> {
    let mut found = Vec::new();
    for (key, goes_to) in ORIGINAL_KEYS {
        if let Some(rest) = key.strip_prefix("tools[].") {
            let tools = value.get("tools").and_then(Value::as_array);
            for (i, tool) in tools.into_iter().flatten().enumerate() {
                if tool.get(rest).is_some() {
                    found.push(OriginalKey {
                        path: format!("tools[{i}].{rest}"),
                        goes_to,
                    });
                }
            }
        } else if lookup(value, key).is_some() {
            found.push(OriginalKey {
                path: (*key).to_string(),
                goes_to,
            });
        }
    }
    found
}

/// The message a load error gives for an original key met in `dir`.
/// `converted` says the rest of the file is already of this format (it has
/// `prompts`): `import` takes whole original bundles, so the key is moved
/// by hand.
pub fn original_key_message(key: &OriginalKey, dir: &Path, converted: bool) -> String {
    let what_to_do = if converted {
        format!(
            "the rest of this bundle is of this format: move it to {} (a whole original bundle converts with `structured-agents import {}`)",
            key.goes_to,
            dir.display()
        )
    } else {
        format!(
            "run `structured-agents import {}` to convert this bundle",
            dir.display()
        )
    };
    format!(
        "unknown key: `{}` belongs to the Python agent kernel's bundle format (here: {}); {what_to_do}",
        key.path, key.goes_to
    )
}

fn lookup<'a>(value: &'a Value, dotted: &str) -> Option<&'a Value> {
    dotted
        .split('.')
        .try_fold(value, |v, k| v.as_object().and_then(|m| m.get(k)))
}
