//! What answers a verify's tool calls. A verify runs the bundle's crash
//! matrix: about twice as many runs as the bundle has journal writes, each
//! calling its tools. By default no tool with a side effect really runs: a
//! tool whose `effect` is not `read_only` is answered by a [`StandIn`] with
//! the result the caller scripted for it, or a fixed placeholder — the
//! matrix counts its executions just the same, through the same pipeline.
//! Running the real tools is [`ToolMode::Real`], asked for explicitly
//! (`--real-tools`, `"real_tools": true`).

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::tools::{Effect, Tool, ToolContext, ToolEngine, ToolError, ToolOutput};
use crate::types::ToolSchema;

/// How a verify's tool calls are answered.
#[derive(Debug, Clone)]
pub enum ToolMode {
    /// Tools with a side effect answer from `results` (by tool name), or a
    /// placeholder saying nothing ran; `read_only` tools run.
    StandIns { results: BTreeMap<String, Value> },
    /// Every tool really runs, side effects and all.
    Real,
}

impl Default for ToolMode {
    fn default() -> Self {
        ToolMode::StandIns {
            results: BTreeMap::new(),
        }
    }
}

impl ToolMode {
    /// `engine` as the verify's runs see it, and the names of the tools a
    /// stand-in answers (in the engine's order).
    pub fn apply(&self, engine: &ToolEngine) -> (ToolEngine, Vec<String>) {
        let ToolMode::StandIns { results } = self else {
            return (engine.with(Vec::new()), Vec::new());
        };
        let stood_in = stood_in(engine);
        let swapped = engine.swapped(|tool, policy| {
            (policy.effect != Effect::ReadOnly).then(|| {
                let name = &tool.schema().name;
                Arc::new(StandIn {
                    schema: tool.schema().clone(),
                    result: results.get(name).cloned().unwrap_or_else(|| {
                        json!({"verify": format!(
                            "stand-in: tool `{name}` has effect `{}`, so verify did not run it (give its result in the tool results, or ask for the real tools)",
                            policy.effect.as_str()
                        )})
                    }),
                }) as Arc<dyn Tool>
            })
        });
        (swapped, stood_in)
    }
}

/// The tools of `engine` a stand-in answers unless the real tools are
/// asked for — every tool whose effect is not `read_only` — in the
/// engine's order: what `real_tools` would really run, side effects and
/// all (the console lists them before it asks).
pub fn stood_in(engine: &ToolEngine) -> Vec<String> {
    engine
        .schemas()
        .iter()
        .filter(|schema| engine.effect(&schema.name) != Effect::ReadOnly)
        .map(|schema| schema.name.clone())
        .collect()
}

/// A tool with a side effect, answered by a scripted result instead.
pub struct StandIn {
    schema: ToolSchema,
    result: Value,
}

#[async_trait]
impl Tool for StandIn {
    fn schema(&self) -> &ToolSchema {
        &self.schema
    }

    fn kind(&self) -> &'static str {
        "stand_in"
    }

    async fn invoke(&self, _: Value, _: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::Json(self.result.clone()))
    }
}
