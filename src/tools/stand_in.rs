//! Stand-ins: what answers a tool with a side effect when a run must not
//! really run it — a verify's crash matrix and an eval's cases (unless the
//! real tools are asked for). A tool whose `effect` is not `read_only` is
//! answered by a stand-in with the result the caller scripted for it
//! or a fixed placeholder saying nothing ran; its schema, policy and place
//! in the engine stay, so its calls go through the same pipeline (checks,
//! approvals, journal, events) and are counted and graded the same.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{Effect, Tool, ToolContext, ToolEngine, ToolError, ToolOutput};
use crate::types::{StandIns, ToolSchema};

/// `engine` with a stand-in for each tool whose effect is not `read_only`,
/// answering from `stand_ins`; `who` names the run in the placeholder
/// ("verify", "this run").
pub fn swap(engine: &ToolEngine, stand_ins: &StandIns, who: &str) -> ToolEngine {
    engine.swapped(|tool, policy| {
        (policy.effect != Effect::ReadOnly).then(|| {
            let name = &tool.schema().name;
            let result = stand_ins.results.get(name).cloned().unwrap_or_else(|| {
                json!({"stand_in": format!(
                    "stand-in: tool `{name}` has effect `{}`, so {who} did not really run it (give its result in the tool results, or ask for the real tools)",
                    policy.effect.as_str()
                )})
            });
            Arc::new(StandIn {
                schema: tool.schema().clone(),
                result,
            }) as Arc<dyn Tool>
        })
    })
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
struct StandIn {
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
