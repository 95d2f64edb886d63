//! The `agent` backend: another loaded bundle called as a tool. The nested
//! run's events go to the parent's sink (same job log, same sequence), marked
//! with the child run id and the parent call id; nesting depth is limited
//! (a tool error past `MAX_DEPTH`; past the job's `depth` budget, the job ends).
//! The bundles are run by the run's [`AgentHost`] (the daemon's runner),
//! which the call finds in its place: a bundle binds its agent tools
//! without knowing who will run them.

use async_trait::async_trait;
use futures::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{Tool, ToolContext, ToolError, ToolOutput};
use crate::events::{EventSink, RunContext};
use crate::journal::RunJournal;
use crate::types::{ToolSchema, agent_message};

/// Nesting deeper than this is refused.
pub const MAX_DEPTH: u32 = 3;

/// What a nested run inherits from the call that starts it besides its
/// events: its own journal (scoped under the agent call, so a new attempt
/// resumes it too), the parent's cancellation and the job's budget.
pub struct Inherited {
    pub journal: RunJournal,
    pub cancel: CancellationToken,
    pub budget: Option<crate::budget::Budget>,
}

/// Runs bundles as nested agents (the daemon's runner, which knows them).
pub trait AgentHost: Send + Sync {
    /// Runs `bundle` with `input` as a child of `parent` (events through
    /// `parent.child(context)`, with the bundle version filled in), under
    /// what it `inherits`; returns its answer.
    fn run_nested<'a>(
        &'a self,
        bundle: &'a str,
        input: String,
        parent: &'a EventSink,
        context: RunContext,
        inherits: Inherited,
    ) -> BoxFuture<'a, Result<String, ToolError>>;
}

pub struct AgentTool {
    schema: ToolSchema,
    bundle: String,
}

impl AgentTool {
    pub fn new(schema: ToolSchema, bundle: String) -> Self {
        Self { schema, bundle }
    }

    /// The default argument schema: one `input` string.
    pub fn default_parameters() -> Value {
        serde_json::json!({"type": "object", "properties": {"input": {"type": "string", "description": "What to ask the agent"}}, "required": ["input"]})
    }
}

#[async_trait]
impl Tool for AgentTool {
    fn schema(&self) -> &ToolSchema {
        &self.schema
    }

    fn kind(&self) -> &'static str {
        "agent"
    }

    async fn invoke(
        &self,
        arguments: Value,
        ctx: ToolContext<'_>,
    ) -> Result<ToolOutput, ToolError> {
        let Some(host) = ctx.place.agents else {
            return Err(ToolError::Failed(format!(
                "agent `{}` runs another bundle, which needs the daemon (`structured-agents serve`)",
                self.bundle
            )));
        };
        let parent = ctx.events.context();
        let depth = parent.parent.as_ref().map_or(0, |p| p.depth) + 1;
        // The job's depth budget ends the job; a nested run's own bundle's
        // and the structural cap below are the model's to mend (a tool
        // error).
        if let Some(budget) = ctx.place.budget {
            budget
                .before_nested_run(depth)
                .map_err(|stop| match stop.bundle {
                    None => ToolError::EndsJob(super::JobEnd::OverBudget(Box::new(stop))),
                    Some(_) => ToolError::Validation(stop.to_string()),
                })?;
        }
        if depth > MAX_DEPTH {
            return Err(ToolError::Validation(format!(
                "agent `{}` would nest {depth} levels deep (limit {MAX_DEPTH})",
                self.bundle
            )));
        }
        let input = agent_message(&arguments);
        let (turn, position) = (ctx.place.turn, ctx.place.position);
        let child = parent.nested(&format!("{turn}:{position}"), &ctx.call.id, &self.bundle);
        // The child run's tool keys extend this call's key, which is the
        // key a nested job is known by.
        let journal = match ctx.place.journal {
            Some(journal) => journal.child_of_call(turn, position, &ctx.call.id),
            None => RunJournal::disabled(ctx.idempotency_key()),
        };
        let answer = host
            .run_nested(
                &self.bundle,
                input,
                ctx.events,
                child,
                Inherited {
                    journal,
                    cancel: ctx.cancel.clone(),
                    budget: ctx.place.budget.cloned(),
                },
            )
            .await?;
        Ok(ToolOutput::Text(answer))
    }
}
