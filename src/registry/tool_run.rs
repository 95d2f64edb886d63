//! One tool call of a loaded bundle outside any agent run: the API checks
//! it here (`POST /v1/bundles/{name}/tools/{tool}:run`) before it queues
//! the `tool_run` job a worker runs; the API reaches tools only through
//! the registry, and the bundle's own engine answers
//! ([`crate::tools::direct`]).

pub use crate::tools::direct::{DirectRun, DirectRunError};

use super::LoadedBundle;

impl LoadedBundle {
    /// Whether `tool` may run directly with `arguments` (a JSON object's
    /// text) through this bind's engine, or why it needs a job of another
    /// kind: found without running it.
    pub async fn check_tool_run(&self, tool: &str, arguments: &str) -> Result<(), DirectRunError> {
        crate::tools::direct::check(self.name(), &self.tools, tool, arguments).await
    }
}
