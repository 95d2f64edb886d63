//! The `plugin` backend: a tool exported by a dynamic plugin library. Calls
//! run on the blocking pool (plugin code may block) under the engine's
//! timeout; a plugin panic (caught by the SDK) is a `tool_error`.

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
        let call =
            json!({"name": self.plugin_tool, "arguments": arguments, "call_id": ctx.call.id});
        let (plugin, instance) = (self.plugin.clone(), self.instance.clone());
        let name = self.plugin.info.name.clone();
        let result = tokio::task::spawn_blocking(move || plugin.invoke(&instance, &call))
            .await
            .map_err(|e| ToolError::Failed(format!("plugin {name} call failed: {e}")))?
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
