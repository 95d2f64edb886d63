//! One tool call outside any agent run (the original engine's `run_sync` /
//! `run_async`): `structured-agents tool run` runs it here, and so does the
//! worker that runs a `tool_run` job (which `POST
//! /v1/bundles/{name}/tools/{tool}:run` makes after [`check`]).
//!
//! The call goes through the same pipeline as a call inside a job
//! ([`ToolEngine::prepare`] then [`ToolEngine::execute_at`]): the same
//! argument coercion, cache, guardrails, timeout, retries, output caps and
//! error codes. What needs a job is refused instead of run: a call the
//! bundle's approval policy sends to a person (only a parked job can wait
//! for one), and an `agent` tool (its nested run belongs to a job).

use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{CallPlace, PreparedCall, ToolEngine, ToolOutcome};
use crate::events::EventSink;
use crate::journal::RunJournal;
use crate::types::ToolCall;

/// Why a direct call was not run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DirectRunError {
    #[error("bundle {bundle:?} has no tool named {tool:?} (its tools: {known})")]
    UnknownTool {
        bundle: String,
        tool: String,
        known: String,
    },
    #[error(
        "tool {tool:?} of bundle {bundle:?} needs a person's approval for these arguments (its `approval` policy); approvals need a job, which waits parked until someone decides: submit one instead"
    )]
    NeedsApproval { bundle: String, tool: String },
    #[error(
        "tool {tool:?} of bundle {bundle:?} runs another bundle as a nested agent, whose run belongs to a job: submit a job that calls it"
    )]
    NestedAgent { bundle: String, tool: String },
}

/// What a direct call answered, as the CLI prints it and the API returns
/// it: `output` is the exact text a model would have read.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct DirectRun {
    pub bundle: String,
    pub tool: String,
    pub output: String,
    /// `output` parsed, when it is JSON (it is unless a guardrail cut it).
    pub value: Option<Value>,
    pub is_error: bool,
    /// `bad_args`, `user_error`, `tool_error`, `guardrail` (as in a job).
    pub error_code: Option<&'static str>,
    pub attempts: u32,
    pub cached: bool,
    pub duration_ms: u64,
}

impl DirectRun {
    fn new(bundle: &str, outcome: ToolOutcome) -> Self {
        let value = serde_json::from_str(&outcome.result.output).ok();
        Self {
            bundle: bundle.to_string(),
            tool: outcome.result.name,
            output: outcome.result.output,
            value,
            is_error: outcome.result.is_error,
            error_code: outcome.error_code,
            attempts: outcome.attempts,
            cached: outcome.cached,
            duration_ms: u64::try_from(outcome.duration.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

/// Whether `tool` of `bundle`'s engine may run directly with `arguments`:
/// the [`DirectRunError`] [`run`] would answer, found without running
/// anything (and without trace events), so a caller can refuse before it
/// queues the call. Arguments that do not fit the tool's schema pass: the
/// run answers them with a `bad_args` result, as in a job.
pub async fn check(
    bundle: &str,
    engine: &ToolEngine,
    tool: &str,
    arguments: &str,
) -> Result<(), DirectRunError> {
    let call = runnable(bundle, engine, tool, arguments)?;
    match engine.prepare_again(&call, TURN).await {
        Ok(prepared) => needs_no_approval(bundle, engine, tool, &prepared),
        Err(_) => Ok(()),
    }
}

/// The turn a direct call is made at.
const TURN: u32 = 1;

/// The call of `tool` with `arguments`, unless the engine has no such tool
/// or it is an `agent` tool.
fn runnable(
    bundle: &str,
    engine: &ToolEngine,
    tool: &str,
    arguments: &str,
) -> Result<ToolCall, DirectRunError> {
    let Some(backend) = engine.tool(tool) else {
        let known: Vec<&str> = engine.schemas().iter().map(|s| s.name.as_str()).collect();
        return Err(DirectRunError::UnknownTool {
            bundle: bundle.to_string(),
            tool: tool.to_string(),
            known: if known.is_empty() {
                "none".into()
            } else {
                known.join(", ")
            },
        });
    };
    if backend.kind() == "agent" {
        return Err(DirectRunError::NestedAgent {
            bundle: bundle.to_string(),
            tool: tool.to_string(),
        });
    }
    Ok(ToolCall {
        id: format!("direct-{}", uuid::Uuid::now_v7()),
        name: tool.to_string(),
        arguments: Value::Null,
        raw_arguments: Some(arguments.to_string()),
    })
}

/// Refuses a prepared call the bundle's approval policy sends to a person.
fn needs_no_approval(
    bundle: &str,
    engine: &ToolEngine,
    tool: &str,
    prepared: &PreparedCall,
) -> Result<(), DirectRunError> {
    if engine
        .approval(tool)
        .is_some_and(|policy| policy.needs_approval(&prepared.call().arguments))
    {
        return Err(DirectRunError::NeedsApproval {
            bundle: bundle.to_string(),
            tool: tool.to_string(),
        });
    }
    Ok(())
}

/// Runs `tool` of `bundle`'s engine once with `arguments` (the JSON text a
/// model would write). Problems of the call itself (bad arguments, a
/// failing or slow tool, a guardrail) are an error result with its code,
/// as in a job; what needs a job is a [`DirectRunError`]. With `journal`
/// (a `tool_run` job's), the call's idempotency key is the job's
/// (`{job}:1:0`), the same on every attempt.
pub async fn run(
    bundle: &str,
    engine: &ToolEngine,
    tool: &str,
    arguments: &str,
    journal: Option<&RunJournal>,
    cancel: &CancellationToken,
    events: &EventSink,
) -> Result<DirectRun, DirectRunError> {
    let call = runnable(bundle, engine, tool, arguments)?;
    let prepared = match engine.prepare(&call, TURN, events).await {
        Ok(prepared) => prepared,
        Err(outcome) => return Ok(DirectRun::new(bundle, outcome)),
    };
    needs_no_approval(bundle, engine, tool, &prepared)?;
    let place = CallPlace {
        turn: TURN,
        journal,
        ..CallPlace::default()
    };
    let outcome = engine.execute_at(&prepared, place, cancel, events).await;
    Ok(DirectRun::new(bundle, outcome))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{NullObserver, RunContext};
    use crate::tools::ToolPolicy;
    use crate::tools::{Tool, ToolContext, ToolError, ToolOutput};
    use crate::types::ToolSchema;
    use serde_json::json;
    use std::sync::Arc;

    struct Echo(ToolSchema);

    #[async_trait::async_trait]
    impl Tool for Echo {
        fn schema(&self) -> &ToolSchema {
            &self.0
        }
        fn kind(&self) -> &'static str {
            "echo"
        }
        async fn invoke(&self, args: Value, _: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
            Ok(ToolOutput::Json(args))
        }
    }

    fn engine(approval: Option<Value>) -> ToolEngine {
        let mut policy = ToolPolicy::default();
        if let Some(spec) = approval {
            policy.approval = serde_json::from_value::<crate::approval::ApprovalSpec>(spec)
                .unwrap()
                .compile()
                .unwrap();
        }
        let mut engine = ToolEngine::new();
        engine.add(
            Arc::new(Echo(ToolSchema {
                name: "pay".into(),
                description: String::new(),
                parameters: json!({"type": "object", "properties": {"amount": {"type": "integer"}}}),
            })),
            policy,
        );
        engine
    }

    async fn call(
        engine: &ToolEngine,
        tool: &str,
        args: &str,
    ) -> Result<DirectRun, DirectRunError> {
        let events = EventSink::new(RunContext::default(), 1, Arc::new(NullObserver));
        run(
            "b",
            engine,
            tool,
            args,
            None,
            &CancellationToken::new(),
            &events,
        )
        .await
    }

    #[tokio::test]
    async fn a_call_runs_on_its_coerced_arguments() {
        let answer = call(&engine(None), "pay", r#"{"amount": "7"}"#)
            .await
            .unwrap();
        assert_eq!(answer.value, Some(json!({"amount": 7})));
        assert!(!answer.is_error);
        assert_eq!(answer.attempts, 1);
        let bad = call(&engine(None), "pay", r#"{"amount": "lots"}"#)
            .await
            .unwrap();
        assert_eq!(bad.error_code, Some("bad_args"));
        assert_eq!(bad.output, "bad_args:bad_integer:amount");
    }

    #[tokio::test]
    async fn what_needs_a_job_is_refused() {
        let gated = engine(Some(json!({"when": "args.amount > 100"})));
        assert!(call(&gated, "pay", r#"{"amount": 5}"#).await.is_ok());
        let refused = call(&gated, "pay", r#"{"amount": 500}"#).await.unwrap_err();
        assert!(matches!(refused, DirectRunError::NeedsApproval { .. }));
        let unknown = call(&gated, "nope", "{}").await.unwrap_err();
        assert_eq!(
            unknown.to_string(),
            "bundle \"b\" has no tool named \"nope\" (its tools: pay)"
        );
    }
}
