//! What answers a verify's tool calls. A verify runs the bundle's crash
//! matrix: about twice as many runs as the bundle has journal writes, each
//! calling its tools. By default no tool with a side effect really runs:
//! stand-ins answer them (`tools::stand_in`, which eval cases use too) —
//! the matrix counts their executions just the same, through the same
//! pipeline. Running the real tools is [`ToolMode::Real`], asked for
//! explicitly (`--real-tools`, `"real_tools": true`).

use crate::tools::ToolEngine;
pub use crate::tools::stand_in::stood_in;
use crate::tools::stand_in::swap;
use crate::types::StandIns;

/// How a verify's tool calls are answered.
#[derive(Debug, Clone)]
pub enum ToolMode {
    /// Tools with a side effect are answered by stand-ins; `read_only`
    /// tools run.
    StandIns(StandIns),
    /// Every tool really runs, side effects and all.
    Real,
}

impl Default for ToolMode {
    fn default() -> Self {
        ToolMode::StandIns(StandIns::default())
    }
}

impl ToolMode {
    /// `engine` as the verify's runs see it, and the names of the tools a
    /// stand-in answers (in the engine's order).
    pub fn apply(&self, engine: &ToolEngine) -> (ToolEngine, Vec<String>) {
        match self {
            ToolMode::StandIns(stand_ins) => (swap(engine, stand_ins, "verify"), stood_in(engine)),
            ToolMode::Real => (engine.with(Vec::new()), Vec::new()),
        }
    }
}
