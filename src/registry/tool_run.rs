//! One tool call of a loaded bundle outside any job, for the API
//! (`POST /v1/bundles/{name}/tools/{tool}:run`), which reaches tools only
//! through the registry: the bundle's own engine runs it
//! ([`crate::tools::direct`]).

use tokio_util::sync::CancellationToken;

pub use crate::tools::direct::{DirectRun, DirectRunError};

use super::LoadedBundle;
use crate::events::EventSink;

impl LoadedBundle {
    /// Runs `tool` once with `arguments` (a JSON object's text) through
    /// this bind's engine: an error result as in a job, or why it needs
    /// a job.
    pub async fn run_tool(
        &self,
        tool: &str,
        arguments: &str,
        cancel: &CancellationToken,
        events: &EventSink,
    ) -> Result<DirectRun, DirectRunError> {
        crate::tools::direct::run(self.name(), &self.tools, tool, arguments, cancel, events).await
    }
}
