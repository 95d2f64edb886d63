//! The `plugin` backend: a tool exported by a dynamic plugin library. Calls
//! run on the plugin's own few threads (plugin code may block, and a call
//! that never returns must not take threads the rest of the daemon needs)
//! under the engine's timeout; a plugin panic (caught by the SDK) is a
//! `tool_error`.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, ToolOutput};
use crate::plugins::{Instance, Plugin};
use crate::types::ToolSchema;

pub struct PluginTool {
    schema: ToolSchema,
    plugin: Arc<Plugin>,
    instance: Arc<Instance>,
    /// The tool's name inside the plugin.
    plugin_tool: String,
}

impl PluginTool {
    pub fn new(
        schema: ToolSchema,
        plugin: Arc<Plugin>,
        instance: Arc<Instance>,
        plugin_tool: String,
    ) -> Self {
        Self {
            schema,
            plugin,
            instance,
            plugin_tool,
        }
    }
}

#[async_trait]
impl Tool for PluginTool {
    fn schema(&self) -> &ToolSchema {
        &self.schema
    }

    fn kind(&self) -> &'static str {
        "plugin"
    }

    async fn invoke(
        &self,
        arguments: Value,
        ctx: ToolContext<'_>,
    ) -> Result<ToolOutput, ToolError> {
        let call = json!({"name": self.plugin_tool, "arguments": arguments, "call_id": ctx.call.id, "idempotency_key": ctx.idempotency_key()});
        let (plugin, instance) = (self.plugin.clone(), self.instance.clone());
        let name = self.plugin.info.name.clone();
        // The engine's deadline bounds the wait for a free plugin thread too.
        let result = plugin
            .pooled(Plugin::invoke, instance, call, ctx.remaining())
            .await
            .map_err(|e| ToolError::Failed(e.to_string()))?
            .map_err(|e| ToolError::Failed(e.to_string()))?;
        if let Some(ok) = result.get("ok") {
            return Ok(ToolOutput::Json(ok.clone()));
        }
        let kind = result
            .pointer("/error/kind")
            .and_then(Value::as_str)
            .unwrap_or("failed");
        let message = result
            .pointer("/error/message")
            .and_then(Value::as_str)
            .unwrap_or("no message")
            .to_string();
        Err(match kind {
            "retryable" => ToolError::Retryable(message),
            "validation" => ToolError::Validation(message),
            "panic" => ToolError::Failed(format!("plugin {name} panicked: {message}")),
            _ => ToolError::Failed(message),
        })
    }
}
