//! One call's way through its tool, after the pipeline has resolved it and
//! checked its arguments: each attempt under the tool's timeout, retries of
//! retryable errors with backoff, cancellation, a panicking tool caught —
//! and the [`ToolOutcome`] every call ends in, with the trace events that
//! say what happened on the way.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::JobEnd;
use super::handling::ToolPolicy;
use super::{CallPlace, Tool, ToolContext, ToolError, panic_message};
use crate::events::{Event, EventSink};
use crate::types::{ToolCall, ToolResult};

/// The outcome of one call, with what the pipeline did.
#[derive(Debug, Clone)]
pub struct ToolOutcome {
    pub result: ToolResult,
    /// `unknown_tool`, `bad_args`, `user_error`, `tool_error`, `guardrail`.
    pub error_code: Option<&'static str>,
    /// Backend invocations (0 for a cache hit or a call that never ran).
    pub attempts: u32,
    pub cached: bool,
    pub duration: Duration,
    /// A nested run ended the whole job (it parked, cannot go on, or used
    /// up a budget).
    pub ends_job: Option<JobEnd>,
}

/// One call going through the pipeline: emits its trace events.
pub(super) struct Trace<'a> {
    pub(super) call: &'a ToolCall,
    pub(super) turn: u32,
    /// `None`: the stages already emitted their events (see
    /// [`ToolEngine::prepare_again`]).
    pub(super) events: Option<&'a EventSink>,
    pub(super) started: Instant,
}

impl Trace<'_> {
    pub(super) async fn emit(&self, stage: &str, detail: Value) {
        let Some(events) = self.events else {
            return;
        };
        events
            .emit(Event::ToolTrace {
                turn: self.turn,
                call_id: self.call.id.clone(),
                tool_name: self.call.name.clone(),
                stage: stage.to_string(),
                detail,
            })
            .await;
    }

    /// The outcome of a call whose attempt `attempts` failed for good with
    /// `message`: traced as `stage`, its output `{code}:{message}`.
    async fn failed(
        &self,
        stage: &str,
        code: &'static str,
        message: &str,
        attempts: u32,
    ) -> ToolOutcome {
        let detail = json!({"attempt": attempts, "message": message});
        self.emit(stage, detail).await;
        self.done(format!("{code}:{message}"), Some(code), attempts, false)
    }

    pub(super) fn done(
        &self,
        output: String,
        code: Option<&'static str>,
        attempts: u32,
        cached: bool,
    ) -> ToolOutcome {
        ToolOutcome {
            result: ToolResult {
                call_id: self.call.id.clone(),
                name: self.call.name.clone(),
                output,
                is_error: code.is_some(),
            },
            error_code: code,
            attempts,
            cached,
            duration: self.started.elapsed(),
            ends_job: None,
        }
    }
}

/// A prepared call on its way through the tool: what each attempt needs.
#[derive(Clone, Copy)]
pub(super) struct Invocation<'a> {
    pub(super) tool: &'a Arc<dyn Tool>,
    pub(super) policy: &'a ToolPolicy,
    pub(super) call: &'a ToolCall,
    pub(super) place: CallPlace<'a>,
    pub(super) cancel: &'a CancellationToken,
    pub(super) events: &'a EventSink,
    pub(super) trace: &'a Trace<'a>,
}

impl Invocation<'_> {
    /// Invokes the tool with retries and a timeout until it answers, fails
    /// for good or the call is cancelled: its output and the attempts it
    /// took, or the call's outcome when it ends here.
    pub(super) async fn invoke(&self) -> Result<(super::ToolOutput, u32), ToolOutcome> {
        let Invocation {
            policy,
            cancel,
            trace,
            ..
        } = *self;
        let mut attempts = 0;
        let output = loop {
            attempts += 1;
            let answer = self.attempt(attempts).await?;
            match answer {
                Ok(output) => {
                    trace
                        .emit("tool.invoke.ok", json!({"attempt": attempts}))
                        .await;
                    break output;
                }
                Err(ToolError::Validation(msg)) => {
                    let stage = "tool.invoke.user_error";
                    return Err(trace.failed(stage, "user_error", &msg, attempts).await);
                }
                Err(ToolError::EndsJob(end)) => {
                    let (stage, mut detail) = end.trace();
                    detail["attempt"] = json!(attempts);
                    trace.emit(stage, detail).await;
                    let mut outcome = trace.done(
                        format!("tool_error:{end}"),
                        Some("tool_error"),
                        attempts,
                        false,
                    );
                    outcome.ends_job = Some(end);
                    return Err(outcome);
                }
                Err(ToolError::Retryable(msg)) if attempts <= policy.retries => {
                    trace
                        .emit(
                            "tool.invoke.retryable",
                            json!({"attempt": attempts, "message": msg}),
                        )
                        .await;
                    let backoff = policy
                        .retry_backoff
                        .saturating_mul(1 << (attempts - 1).min(8));
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = cancel.cancelled() => return Err(trace.done("tool_error:cancelled".into(), Some("tool_error"), attempts, false)),
                    }
                }
                Err(ToolError::Retryable(msg) | ToolError::Failed(msg)) => {
                    let stage = "tool.invoke.fail";
                    return Err(trace.failed(stage, "tool_error", &msg, attempts).await);
                }
            }
        };
        Ok((output, attempts))
    }

    /// One attempt of a call: the tool's own answer, or the call's outcome
    /// when the attempt ends it (cancelled, timed out, panicked).
    async fn attempt(
        &self,
        attempts: u32,
    ) -> Result<Result<super::ToolOutput, ToolError>, ToolOutcome> {
        let Invocation {
            tool,
            policy,
            call,
            place,
            cancel,
            events,
            trace,
        } = *self;
        let ctx = ToolContext {
            call,
            place,
            cancel: cancel.child_token(),
            deadline: Instant::now() + policy.timeout,
            events,
        };
        let attempt_cancel = ctx.cancel.clone();
        // A tool that panics (including one that blocks on the runtime
        // from inside it) is caught here and becomes a tool_error.
        let invocation = AssertUnwindSafe(tool.invoke(call.arguments.clone(), ctx)).catch_unwind();
        crate::failpoint::hit_after(
            crate::failpoint::Failpoint::ToolRunning,
            Duration::from_millis(300),
        );
        let outcome = tokio::select! {
            r = tokio::time::timeout(policy.timeout, invocation) => r,
            _ = cancel.cancelled() => {
                attempt_cancel.cancel();
                trace.emit("tool.invoke.cancelled", json!({"attempt": attempts})).await;
                return Err(trace.done("tool_error:cancelled".into(), Some("tool_error"), attempts, false));
            }
        };
        match outcome {
            Ok(Ok(answer)) => Ok(answer),
            Err(_) => {
                attempt_cancel.cancel();
                trace
                    .emit(
                        "tool.invoke.timeout",
                        json!({"attempt": attempts, "timeout_ms": policy.timeout.as_millis() as u64}),
                    )
                    .await;
                Err(trace.done(
                    "tool_error:timeout".into(),
                    Some("tool_error"),
                    attempts,
                    false,
                ))
            }
            Ok(Err(panic)) => {
                let message = panic_message(panic.as_ref());
                trace
                    .emit(
                        "tool.invoke.panic",
                        json!({"attempt": attempts, "message": message}),
                    )
                    .await;
                Err(trace.done(
                    format!("tool_error:tool panicked: {message}"),
                    Some("tool_error"),
                    attempts,
                    false,
                ))
            }
        }
    }
}
