//! A `tool_run` job: one call of its bundle's tool, outside any agent run
//! (`POST /v1/bundles/{name}/tools/{tool}:run` makes it and waits for it).
//! The call runs through the bundle's engine as a direct run does, under
//! the job's cancellation and into its event log; its answer is the job's
//! result.
//!
//! A call is never repeated unless its effect says repeating is safe: a
//! tool whose effect is `unsafe` is marked started in the job's journal
//! before it runs, and an attempt that finds the mark (the daemon died or
//! drained while the tool ran) fails the job saying the call may have run,
//! rather than run it a second time.

use serde_json::json;

use crate::queue::{LeasedJob, Outcome};
use crate::registry::LoadedBundle;
use crate::runner::RunScope;
use crate::tools::{Effect, direct};

/// The journal step that marks an `unsafe` call started.
const STARTED: &str = "tool_run.started";
/// The turn the mark is recorded at (a tool run has one).
const TURN: u32 = 1;

/// Runs the call of `tool` with `arguments` for `job`.
pub(super) async fn run(
    loaded: &LoadedBundle,
    job: &LeasedJob,
    tool: &str,
    arguments: &str,
    scope: &RunScope,
) -> Outcome {
    let failed = |error: String| Outcome::Failed {
        error,
        retryable: false,
    };
    if loaded.tools.effect(tool) == Effect::Unsafe {
        match scope
            .journal
            .recorded_step::<serde_json::Value>(TURN, STARTED)
        {
            Ok(None) => {}
            Ok(Some(_)) => {
                return failed(format!(
                    "job {}: the daemon stopped while tool {tool:?} of bundle {:?} ran, and its effect is `unsafe`, so it is not run again on its own: it may have run; check what it does, then run it again",
                    job.id, job.bundle
                ));
            }
            Err(e) => return failed(format!("job {}: its journal cannot be read: {e}", job.id)),
        }
        let mark = json!({"tool": tool});
        if let Err(e) = scope.journal.record_value(TURN, STARTED, &mark).await {
            return Outcome::Failed {
                error: format!(
                    "job {}: the start of tool {tool:?} could not be recorded, so it was not run: {e}",
                    job.id
                ),
                retryable: true,
            };
        }
    }
    let (bundle, engine) = (loaded.name(), &loaded.tools);
    let journal = Some(&scope.journal);
    match direct::run(
        bundle,
        engine,
        tool,
        arguments,
        journal,
        &scope.cancel,
        &scope.sink,
    )
    .await
    {
        Ok(run) => match serde_json::to_value(&run) {
            Ok(answer) => Outcome::Succeeded(answer),
            Err(e) => failed(format!(
                "job {}: the tool's answer cannot be stored: {e}",
                job.id
            )),
        },
        Err(refused) => failed(format!("job {}: {refused}", job.id)),
    }
}
