//! The tool engine: the one pipeline every tool call goes through, whatever
//! its backend. resolve → parse arguments → invoke (timeout, retries) →
//! normalize. Errors become `ToolResult`s carrying a code the model can read:
//! `unknown_tool`, `bad_args:<detail>`, `user_error:<msg>`, `tool_error:<msg>`.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::{Tool, ToolContext, ToolError};
use crate::events::EventSink;
use crate::types::{ToolCall, ToolResult, ToolSchema};

/// Per-tool execution policy, from the bundle.
#[derive(Debug, Clone)]
pub struct ToolPolicy {
    pub timeout: Duration,
    /// Extra attempts for retryable backend errors.
    pub retries: u32,
    pub retry_backoff: Duration,
}

impl Default for ToolPolicy {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30),
            retries: 0,
            retry_backoff: Duration::from_millis(100),
        }
    }
}

struct Entry {
    tool: Arc<dyn Tool>,
    policy: ToolPolicy,
}

/// The outcome of one call, with what the pipeline did.
#[derive(Debug, Clone)]
pub struct ToolOutcome {
    pub result: ToolResult,
    /// `unknown_tool`, `bad_args`, `user_error`, `tool_error`, `guardrail`.
    pub error_code: Option<&'static str>,
    pub attempts: u32,
    pub cached: bool,
    pub duration: Duration,
}

/// The tool map of one bundle, built once.
#[derive(Default)]
pub struct ToolEngine {
    tools: HashMap<String, Entry>,
    schemas: Vec<ToolSchema>,
}

impl ToolEngine {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add(&mut self, tool: Arc<dyn Tool>, policy: ToolPolicy) {
        let schema = tool.schema().clone();
        self.schemas.retain(|s| s.name != schema.name);
        self.tools
            .insert(schema.name.clone(), Entry { tool, policy });
        self.schemas.push(schema);
    }

    /// Schemas in the order the tools were added.
    pub fn schemas(&self) -> &[ToolSchema] {
        &self.schemas
    }

    pub fn tool(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name).map(|e| &e.tool)
    }

    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Runs one call through the pipeline. Never fails: every problem becomes
    /// an error result.
    pub async fn execute(
        &self,
        call: &ToolCall,
        turn: u32,
        cancel: &CancellationToken,
        events: &EventSink,
    ) -> ToolOutcome {
        let started = Instant::now();
        let finish = |output: String, code: Option<&'static str>, attempts: u32| ToolOutcome {
            result: ToolResult {
                call_id: call.id.clone(),
                name: call.name.clone(),
                output,
                is_error: code.is_some(),
            },
            error_code: code,
            attempts,
            cached: false,
            duration: started.elapsed(),
        };

        let Some(entry) = self.tools.get(&call.name) else {
            return finish(
                format!("unknown_tool:{}", call.name),
                Some("unknown_tool"),
                0,
            );
        };
        let arguments = match parse_arguments(call) {
            Ok(args) => args,
            Err(detail) => return finish(format!("bad_args:{detail}"), Some("bad_args"), 0),
        };

        let mut attempts = 0;
        loop {
            attempts += 1;
            let deadline = Instant::now() + entry.policy.timeout;
            let ctx = ToolContext {
                call,
                turn,
                cancel: cancel.child_token(),
                deadline,
                events,
            };
            let attempt_cancel = ctx.cancel.clone();
            let invocation =
                AssertUnwindSafe(entry.tool.invoke(arguments.clone(), ctx)).catch_unwind();
            let outcome = tokio::select! {
                r = tokio::time::timeout(entry.policy.timeout, invocation) => r,
                _ = cancel.cancelled() => {
                    attempt_cancel.cancel();
                    return finish("tool_error:cancelled".into(), Some("tool_error"), attempts);
                }
            };
            match outcome {
                Err(_) => {
                    attempt_cancel.cancel();
                    return finish("tool_error:timeout".into(), Some("tool_error"), attempts);
                }
                Ok(Err(_panic)) => {
                    return finish(
                        format!("tool_error:tool `{}` panicked", call.name),
                        Some("tool_error"),
                        attempts,
                    );
                }
                Ok(Ok(Ok(output))) => return finish(output.into_json_string(), None, attempts),
                Ok(Ok(Err(ToolError::Validation(msg)))) => {
                    return finish(format!("user_error:{msg}"), Some("user_error"), attempts);
                }
                Ok(Ok(Err(ToolError::Retryable(msg)))) if attempts <= entry.policy.retries => {
                    tracing::debug!(tool = %call.name, attempt = attempts, error = %msg, "retryable tool error");
                    let backoff = entry
                        .policy
                        .retry_backoff
                        .saturating_mul(1 << (attempts - 1).min(8));
                    tokio::time::sleep(backoff).await;
                }
                Ok(Ok(Err(ToolError::Retryable(msg) | ToolError::Failed(msg)))) => {
                    return finish(format!("tool_error:{msg}"), Some("tool_error"), attempts);
                }
            }
        }
    }
}

/// The call's arguments as an object: blank means `{}`; anything that is not
/// a JSON object is `bad_args`.
fn parse_arguments(call: &ToolCall) -> Result<Value, String> {
    if let Some(raw) = &call.raw_arguments {
        if raw.trim().is_empty() {
            return Ok(Value::Object(Map::new()));
        }
        return match serde_json::from_str::<Value>(raw) {
            Ok(Value::Object(map)) => Ok(Value::Object(map)),
            Ok(other) => Err(format!(
                "arguments must be a JSON object, got {}",
                json_type(&other)
            )),
            Err(e) => Err(format!("invalid JSON: {e}")),
        };
    }
    match &call.arguments {
        Value::Object(_) => Ok(call.arguments.clone()),
        Value::Null => Ok(Value::Object(Map::new())),
        other => Err(format!(
            "arguments must be a JSON object, got {}",
            json_type(other)
        )),
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}
