//! Each bundle's prompts as an MCP prompt named after the bundle:
//! `prompts/list` gives its arguments (`input` and the variables its
//! templates use), `prompts/get` renders its templates with them, as a job
//! would start. MCP prompts have no system role: the system prompt comes
//! first, as a user message.

use crate::access::policy::{Action, Resource};
use rmcp::ErrorData as McpError;
use rmcp::model::{GetPromptResult, JsonObject, Prompt, PromptArgument, PromptMessage, Role};
use serde_json::Value;

use super::super::AppState;
use super::super::auth::Caller;

/// The prompts of the bundles the caller may use, in name order.
pub fn list(state: &AppState, caller: &Caller) -> Vec<Prompt> {
    let snapshot = state.registry.snapshot();
    let mut prompts: Vec<Prompt> = snapshot
        .loaded()
        .filter(|b| caller.allows(Action::SubmitJob, &Resource::bundle(b.name())))
        .map(|b| {
            let mut arguments = vec![argument("input", "The job's input.", true)];
            arguments.extend(
                b.bundle
                    .prompts
                    .variables()
                    .into_iter()
                    .map(|name| argument(&name, "A template variable of the bundle.", false)),
            );
            let description = Some(b.bundle.raw.description.clone()).filter(|d| !d.is_empty());
            Prompt::new(b.name(), description, Some(arguments))
        })
        .collect();
    prompts.sort_by(|a, b| a.name.cmp(&b.name));
    prompts
}

fn argument(name: &str, description: &str, required: bool) -> PromptArgument {
    let mut argument = PromptArgument::new(name);
    argument.description = Some(description.to_string());
    argument.required = Some(required);
    argument
}

/// The bundle `name`'s templates rendered with `arguments` (strings; a
/// JSON text is taken as its value, so a variable can be a list).
pub fn get(
    state: &AppState,
    caller: &Caller,
    name: &str,
    arguments: Option<&JsonObject>,
) -> Result<GetPromptResult, McpError> {
    let snapshot = state.registry.snapshot();
    let Some(bundle) = snapshot
        .loaded()
        .find(|b| b.name() == name && caller.allows(Action::SubmitJob, &Resource::bundle(name)))
    else {
        let known: Vec<String> = list(state, caller).into_iter().map(|p| p.name).collect();
        return Err(McpError::invalid_params(
            format!("no prompt `{name}` (prompts: {})", known.join(", ")),
            None,
        ));
    };
    let mut variables = arguments.cloned().unwrap_or_default();
    let input = match variables.remove("input") {
        Some(Value::String(input)) => input,
        Some(other) => other.to_string(),
        None => String::new(),
    };
    for value in variables.values_mut() {
        if let Value::String(text) = value
            && let Ok(parsed) = serde_json::from_str::<Value>(text)
            && !parsed.is_string()
        {
            *value = parsed;
        }
    }
    let messages = bundle
        .bundle
        .prompts
        .render(&input, &variables)
        .map_err(|e| {
            McpError::invalid_params(
                format!("prompt `{name}`: prompts.{}: {}", e.key, e.message),
                None,
            )
        })?;
    let messages = messages
        .into_iter()
        .map(|m| {
            let role = if m.role == crate::types::Role::Assistant {
                Role::Assistant
            } else {
                Role::User
            };
            PromptMessage::new_text(role, m.content.unwrap_or_default())
        })
        .collect();
    let mut result = GetPromptResult::new(messages);
    result.description = Some(format!("bundle {name}'s opening messages"));
    Ok(result)
}
