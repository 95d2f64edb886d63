//! The tool engine: the one pipeline every tool call goes through, whatever
//! its backend, in this order:
//!
//! resolve → parse and coerce arguments → cache lookup → input guardrails →
//! invoke (timeout, retries) → normalize output → output guardrails → store.
//!
//! Problems become `ToolResult`s with a code the model can read:
//! `unknown_tool:<name>`, `bad_args:<detail>`, `user_error:<msg>`,
//! `tool_error:<msg>`, `guardrail:<reason>`. Every step emits a `ToolTrace`
//! event whose payload is built for that event alone (no shared, mutable
//! payloads).

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::JobEnd;
use super::cache::ResultCache;
use super::coerce::{ArgsError, parse_and_coerce};
use super::guardrails::{GuardrailError, Guardrails};
use super::policy::{CacheSpec, GuardrailSpec};
use super::{CallPlace, Effect, Tool, ToolContext, ToolError, panic_message};
use crate::events::{Event, EventSink, preview};
use crate::types::{ToolCall, ToolResult, ToolSchema};

/// Per-tool handling, compiled from the bundle.
#[derive(Debug)]
pub struct ToolPolicy {
    pub timeout: Duration,
    /// Extra attempts for retryable backend errors.
    pub retries: u32,
    pub retry_backoff: Duration,
    pub cache: Option<ResultCache>,
    pub guardrails: Option<Guardrails>,
    /// What repeating a call does; decides resumption after a crash.
    pub effect: Effect,
    /// Which calls wait for a person's decision.
    pub approval: crate::approval::ApprovalPolicy,
}

impl Default for ToolPolicy {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30),
            retries: 0,
            retry_backoff: Duration::from_millis(100),
            cache: None,
            guardrails: None,
            effect: Effect::default(),
            approval: Default::default(),
        }
    }
}

impl ToolPolicy {
    /// Compiles the bundle's settings; a bad regex is an error naming it.
    pub fn compile(
        timeout: Duration,
        retries: u32,
        cache: Option<&CacheSpec>,
        guardrails: Option<&GuardrailSpec>,
    ) -> Result<Self, GuardrailError> {
        Ok(Self {
            timeout,
            retries,
            retry_backoff: Duration::from_millis(100),
            cache: cache
                .filter(|c| c.enabled)
                .map(|c| ResultCache::new(c.max_entries, c.ttl.map(Into::into))),
            guardrails: guardrails.map(Guardrails::compile).transpose()?,
            effect: Effect::default(),
            approval: Default::default(),
        })
    }
}

struct Entry {
    tool: Arc<dyn Tool>,
    /// Shared by a backend and the stand-in that may replace it
    /// ([`ToolEngine::swapped`]).
    policy: Arc<ToolPolicy>,
    /// The tool's parameter schema, compiled once: coerced arguments must
    /// satisfy all of it (`additionalProperties: false` included) before
    /// anything sees them. `None` when it does not compile (a schema an
    /// MCP server announced; a bundle's own are checked at load).
    validator: Option<Arc<jsonschema::Validator>>,
}

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

/// A call resolved to a tool of this engine, its arguments coerced to the
/// tool's schema (see [`ToolEngine::prepare`], the only way to make one).
pub struct PreparedCall {
    /// The tool it resolved to.
    entry: Arc<Entry>,
    /// The call with its coerced arguments (and no raw text).
    call: ToolCall,
    /// The argument text as the model wrote it: the cache key and what the
    /// whole-text guardrails (`*`, `max_argument_bytes`) read.
    raw: String,
}

impl PreparedCall {
    /// The call in its one canonical form.
    pub fn call(&self) -> &ToolCall {
        &self.call
    }
}

/// A tool bound to its backend, with its policy.
pub type BoundTool = (Arc<dyn Tool>, ToolPolicy);

/// The tool map of one bundle, built once.
#[derive(Default)]
pub struct ToolEngine {
    /// Shared, so a run offered a subset of the tools ([`ToolEngine::only`])
    /// uses the same backends, caches and policies.
    tools: HashMap<String, Arc<Entry>>,
    schemas: Vec<ToolSchema>,
}

/// One call going through the pipeline: emits its trace events.
struct Trace<'a> {
    call: &'a ToolCall,
    turn: u32,
    /// `None`: the stages already emitted their events (see
    /// [`ToolEngine::prepare_again`]).
    events: Option<&'a EventSink>,
    started: Instant,
}

impl Trace<'_> {
    async fn emit(&self, stage: &str, detail: Value) {
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

    fn done(
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

impl ToolEngine {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add(&mut self, tool: Arc<dyn Tool>, policy: ToolPolicy) {
        let schema = tool.schema().clone();
        let validator = jsonschema::validator_for(&schema.parameters)
            .inspect_err(|e| {
                tracing::warn!(tool = %schema.name, error = %e, "the tool's parameter schema does not compile; its calls are coerced but not validated");
            })
            .ok()
            .map(Arc::new);
        self.schemas.retain(|s| s.name != schema.name);
        self.tools.insert(
            schema.name.clone(),
            Arc::new(Entry {
                tool,
                policy: Arc::new(policy),
                validator,
            }),
        );
        self.schemas.push(schema);
    }

    /// The same tools restricted to `names` (in this engine's order): a run
    /// offered a subset of its tools. A name that is none of them is an
    /// error naming it and the tools there are.
    pub fn subset(&self, names: &[String]) -> Result<ToolEngine, UnknownTools> {
        let unknown: Vec<String> = names
            .iter()
            .filter(|n| !self.tools.contains_key(n.as_str()))
            .cloned()
            .collect();
        if !unknown.is_empty() {
            let known = self.schemas.iter().map(|s| s.name.clone()).collect();
            return Err(UnknownTools { unknown, known });
        }
        let schemas: Vec<ToolSchema> = self
            .schemas
            .iter()
            .filter(|s| names.contains(&s.name))
            .cloned()
            .collect();
        let tools = schemas
            .iter()
            .filter_map(|s| Some((s.name.clone(), self.tools.get(&s.name)?.clone())))
            .collect();
        Ok(ToolEngine { tools, schemas })
    }

    /// These tools and `more` after them (a name already here keeps its tool).
    pub fn with(&self, more: Vec<BoundTool>) -> ToolEngine {
        let mut engine = ToolEngine {
            tools: self.tools.clone(),
            schemas: self.schemas.clone(),
        };
        for (tool, policy) in more {
            if !engine.tools.contains_key(&tool.schema().name) {
                engine.add(tool, policy);
            }
        }
        engine
    }

    /// The same tools, with the backend of each one `swap` answers for
    /// replaced (verify's stand-ins for tools with side effects): schemas,
    /// order and policies stay, so calls go through the same pipeline.
    pub fn swapped(
        &self,
        swap: impl Fn(&Arc<dyn Tool>, &ToolPolicy) -> Option<Arc<dyn Tool>>,
    ) -> ToolEngine {
        let tools = self
            .tools
            .iter()
            .map(|(name, entry)| {
                let entry = match swap(&entry.tool, &entry.policy) {
                    Some(tool) => Arc::new(Entry {
                        tool,
                        policy: entry.policy.clone(),
                        validator: entry.validator.clone(),
                    }),
                    None => entry.clone(),
                };
                (name.clone(), entry)
            })
            .collect();
        ToolEngine {
            tools,
            schemas: self.schemas.clone(),
        }
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

    /// Whether any tool's backend announced a change since binding.
    pub fn stale(&self) -> bool {
        self.tools.values().any(|e| e.tool.stale())
    }

    /// The declared effect of a tool (`unsafe` for names the bundle does
    /// not declare; those never run).
    pub fn effect(&self, name: &str) -> Effect {
        self.tools
            .get(name)
            .map_or(Effect::Unsafe, |e| e.policy.effect)
    }

    /// The approval policy of `name` (an unknown tool needs none: it never
    /// runs).
    pub fn approval(&self, name: &str) -> Option<&crate::approval::ApprovalPolicy> {
        self.tools
            .get(name)
            .map(|e| &e.policy.approval)
            .filter(|policy| !policy.is_never())
    }

    /// The parameter schema of `name`.
    pub fn parameters(&self, name: &str) -> Option<&Value> {
        self.tools.get(name).map(|e| &e.tool.schema().parameters)
    }

    /// Runs one call through the pipeline outside any journal. Never fails:
    /// every problem is an error result.
    pub async fn execute(
        &self,
        call: &ToolCall,
        turn: u32,
        cancel: &CancellationToken,
        events: &EventSink,
    ) -> ToolOutcome {
        let place = CallPlace {
            turn,
            ..CallPlace::default()
        };
        match self.prepare(call, turn, events).await {
            Ok(prepared) => self.execute_at(&prepared, place, cancel, events).await,
            Err(outcome) => outcome,
        }
    }

    /// Stages 1 and 2 of the pipeline: resolves the call's tool and coerces
    /// its arguments to the tool's schema. The [`PreparedCall`] is the one
    /// form of the call everything after sees — the approval rule and its
    /// digest, the journal, the tool — so no check can read one value while
    /// the tool runs on another. A call that cannot be prepared is answered
    /// with its error (`unknown_tool:…`, `bad_args:…`).
    pub async fn prepare(
        &self,
        call: &ToolCall,
        turn: u32,
        events: &EventSink,
    ) -> Result<PreparedCall, ToolOutcome> {
        self.prepare_traced(call, turn, Some(events)).await
    }

    /// [`ToolEngine::prepare`] without its trace events, for a call whose
    /// preparation an earlier attempt already traced (one that waited for
    /// approval): the job's log shows each stage once.
    pub async fn prepare_again(
        &self,
        call: &ToolCall,
        turn: u32,
    ) -> Result<PreparedCall, ToolOutcome> {
        self.prepare_traced(call, turn, None).await
    }

    async fn prepare_traced(
        &self,
        call: &ToolCall,
        turn: u32,
        events: Option<&EventSink>,
    ) -> Result<PreparedCall, ToolOutcome> {
        let trace = Trace {
            call,
            turn,
            events,
            started: Instant::now(),
        };

        // 1. resolve
        let Some(entry) = self.tools.get(&call.name) else {
            trace
                .emit("tool.resolve.fail", json!({"requested": call.name}))
                .await;
            return Err(trace.done(
                format!("unknown_tool:{}", call.name),
                Some("unknown_tool"),
                0,
                false,
            ));
        };
        trace
            .emit("tool.resolve.ok", json!({"kind": entry.tool.kind()}))
            .await;

        // 2. arguments
        let raw = call.arguments_text();
        let checked = parse_and_coerce(&raw, &entry.tool.schema().parameters).and_then(|args| {
            match &entry.validator {
                Some(validator) => schema_problems(validator, args),
                None => Ok(args),
            }
        });
        match checked {
            Ok(args) => {
                trace
                    .emit(
                        "args.parse.ok",
                        json!({"arguments": Value::Object(args.clone())}),
                    )
                    .await;
                Ok(PreparedCall {
                    entry: entry.clone(),
                    call: ToolCall {
                        arguments: Value::Object(args),
                        raw_arguments: None,
                        ..call.clone()
                    },
                    raw,
                })
            }
            Err(detail) => {
                let detail = detail.to_string();
                trace
                    .emit("args.parse.fail", json!({"detail": detail, "raw": raw}))
                    .await;
                Err(trace.done(format!("bad_args:{detail}"), Some("bad_args"), 0, false))
            }
        }
    }

    /// Runs a prepared call (on the tool it resolved to) through the rest
    /// of the pipeline at its place in a run (the journal gives the call its idempotency key and nested
    /// runs their own journal).
    pub async fn execute_at(
        &self,
        prepared: &PreparedCall,
        place: CallPlace<'_>,
        cancel: &CancellationToken,
        events: &EventSink,
    ) -> ToolOutcome {
        let turn = place.turn;
        let call = &prepared.call;
        let raw = &prepared.raw;
        let trace = Trace {
            call,
            turn,
            events: Some(events),
            started: Instant::now(),
        };
        let entry = &prepared.entry;
        let Value::Object(arguments) = &call.arguments else {
            // `prepare` only makes objects.
            return trace.done(
                "bad_args:expected a JSON object".into(),
                Some("bad_args"),
                0,
                false,
            );
        };

        // 3. cache
        if let Some(cache) = &entry.policy.cache {
            if let Some(output) = cache.get(&call.name, raw) {
                trace
                    .emit(
                        "cache.hit",
                        json!({"output_preview": preview(&output, 200)}),
                    )
                    .await;
                return trace.done(output, None, 0, true);
            }
            trace.emit("cache.miss", Value::Null).await;
        }

        // 4. input guardrails
        if let Some(guards) = &entry.policy.guardrails {
            if let Err(reason) = guards.check_input(raw, arguments) {
                let reason = reason.to_string();
                trace
                    .emit("guard.input.block", json!({"reason": reason}))
                    .await;
                return trace.done(format!("guardrail:{reason}"), Some("guardrail"), 0, false);
            }
            trace.emit("guard.input.ok", Value::Null).await;
        }

        // 5. invoke with retries and a timeout
        let (output, attempts) = match (Invocation {
            entry,
            call,
            place,
            cancel,
            events,
            trace: &trace,
        })
        .invoke()
        .await
        {
            Ok(answered) => answered,
            Err(outcome) => return outcome,
        };
        let policy = &entry.policy;

        // 6. normalize
        let output = output.into_json_string();

        // 7. output guardrails
        let output = match &policy.guardrails {
            Some(guards) => match guards.check_output(output) {
                Ok(checked) => {
                    trace
                        .emit(
                            "guard.output.ok",
                            json!({"truncated": checked.truncated, "redactions": checked.redactions}),
                        )
                        .await;
                    checked.output
                }
                Err(reason) => {
                    let reason = reason.to_string();
                    trace
                        .emit("guard.output.block", json!({"reason": reason}))
                        .await;
                    return trace.done(
                        format!("guardrail:{reason}"),
                        Some("guardrail"),
                        attempts,
                        false,
                    );
                }
            },
            None => output,
        };

        // 8. store
        if let Some(cache) = &policy.cache {
            cache.put(&call.name, raw, output.clone());
            trace.emit("cache.store", Value::Null).await;
        }
        trace.done(output, None, attempts, false)
    }
}

/// A prepared call on its way through the tool: what each attempt needs.
#[derive(Clone, Copy)]
struct Invocation<'a> {
    entry: &'a Entry,
    call: &'a ToolCall,
    place: CallPlace<'a>,
    cancel: &'a CancellationToken,
    events: &'a EventSink,
    trace: &'a Trace<'a>,
}

impl Invocation<'_> {
    /// Invokes the tool with retries and a timeout until it answers, fails
    /// for good or the call is cancelled: its output and the attempts it
    /// took, or the call's outcome when it ends here.
    async fn invoke(&self) -> Result<(super::ToolOutput, u32), ToolOutcome> {
        let Invocation {
            entry,
            cancel,
            trace,
            ..
        } = *self;
        let policy = &entry.policy;
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
                    trace
                        .emit(
                            "tool.invoke.user_error",
                            json!({"attempt": attempts, "message": msg}),
                        )
                        .await;
                    return Err(trace.done(
                        format!("user_error:{msg}"),
                        Some("user_error"),
                        attempts,
                        false,
                    ));
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
                    trace
                        .emit(
                            "tool.invoke.fail",
                            json!({"attempt": attempts, "message": msg}),
                        )
                        .await;
                    return Err(trace.done(
                        format!("tool_error:{msg}"),
                        Some("tool_error"),
                        attempts,
                        false,
                    ));
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
            entry,
            call,
            place,
            cancel,
            events,
            trace,
        } = *self;
        let policy = &entry.policy;
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
        let invocation =
            AssertUnwindSafe(entry.tool.invoke(call.arguments.clone(), ctx)).catch_unwind();
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

/// Names asked of an engine that has no such tools, and the tools it has.
#[derive(Debug, Clone, thiserror::Error)]
#[error("no tool named {} (the tools: {})", unknown.join(", "), known.join(", "))]
pub struct UnknownTools {
    pub unknown: Vec<String>,
    pub known: Vec<String>,
}

/// The coerced arguments if they satisfy the tool's whole schema, else the
/// `bad_args` detail: what is wrong and where (at most five problems), so
/// the model can correct its call.
fn schema_problems(
    validator: &jsonschema::Validator,
    args: serde_json::Map<String, Value>,
) -> Result<serde_json::Map<String, Value>, ArgsError> {
    let instance = Value::Object(args);
    let problems: Vec<String> = validator
        .iter_errors(&instance)
        .take(5)
        .map(|e| match e.instance_path().to_string() {
            path if path.is_empty() => e.to_string(),
            path => format!("{e} at {path}"),
        })
        .collect();
    match instance {
        Value::Object(args) if problems.is_empty() => Ok(args),
        _ => Err(ArgsError::Schema(problems)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approval::ApprovalSpec;
    use crate::events::{NullObserver, RunContext};
    use async_trait::async_trait;

    /// Answers with the arguments it was given.
    struct Echo(ToolSchema);

    #[async_trait]
    impl Tool for Echo {
        fn schema(&self) -> &ToolSchema {
            &self.0
        }
        fn kind(&self) -> &'static str {
            "echo"
        }
        async fn invoke(
            &self,
            arguments: Value,
            _ctx: ToolContext<'_>,
        ) -> Result<super::super::ToolOutput, ToolError> {
            Ok(super::super::ToolOutput::Json(arguments))
        }
    }

    fn engine() -> ToolEngine {
        let mut engine = ToolEngine::new();
        engine.add(
            Arc::new(Echo(ToolSchema {
                name: "pay".into(),
                description: String::new(),
                parameters: json!({"type": "object", "properties": {
                    "amount": {"type": "integer"}, "dry_run": {"type": "boolean"}
                }}),
            })),
            ToolPolicy::default(),
        );
        engine
    }

    fn sink() -> EventSink {
        EventSink::new(RunContext::default(), 1, Arc::new(NullObserver))
    }

    fn call(raw: &str) -> ToolCall {
        ToolCall {
            id: "c1".into(),
            name: "pay".into(),
            arguments: serde_json::from_str(raw).unwrap_or(Value::Null),
            raw_arguments: Some(raw.into()),
        }
    }

    fn policy(spec: Value) -> crate::approval::ApprovalPolicy {
        serde_json::from_value::<ApprovalSpec>(spec)
            .unwrap()
            .compile()
            .unwrap()
    }

    /// The exploits of issue 32: the rule read `"false"` (a truthy string)
    /// and `"5000"` (not a number over 100) while the tool ran on `false`
    /// and `5000`. On the prepared call the rule reads what the tool gets.
    #[tokio::test]
    async fn the_approval_rule_and_the_tool_see_the_same_coerced_arguments() {
        let engine = engine();
        let events = sink();
        let prepared = engine
            .prepare(
                &call(r#"{"amount": "5000", "dry_run": "false"}"#),
                1,
                &events,
            )
            .await
            .unwrap();
        let canonical = json!({"amount": 5000, "dry_run": false});
        assert_eq!(prepared.call().arguments, canonical);
        assert_eq!(prepared.call().raw_arguments, None);
        assert!(
            policy(json!({"when": "not args.dry_run"})).needs_approval(&prepared.call().arguments)
        );
        let matches = policy(
            json!({"matches": {"properties": {"amount": {"type": "integer", "minimum": 100}}}}),
        );
        assert!(matches.needs_approval(&prepared.call().arguments));
        assert_eq!(
            crate::approval::digest(&prepared.call().arguments),
            crate::approval::digest(&canonical)
        );
        let outcome = engine
            .execute_at(
                &prepared,
                CallPlace::default(),
                &CancellationToken::new(),
                &events,
            )
            .await;
        assert_eq!(outcome.error_code, None, "{:?}", outcome.result);
        let ran_on: Value = serde_json::from_str(&outcome.result.output).unwrap();
        assert_eq!(ran_on, canonical, "the tool ran on what the rule read");
    }

    #[tokio::test]
    async fn arguments_that_cannot_be_coerced_stay_a_tool_error() {
        let engine = engine();
        let events = sink();
        let Err(outcome) = engine
            .prepare(&call(r#"{"amount": "lots"}"#), 1, &events)
            .await
        else {
            panic!("\"lots\" is no integer");
        };
        assert_eq!(outcome.error_code, Some("bad_args"));
        assert_eq!(outcome.result.output, "bad_args:bad_integer:amount");
        let Err(outcome) = engine
            .prepare(&ToolCall::new("c2", "nope", json!({})), 1, &events)
            .await
        else {
            panic!("no tool is named nope");
        };
        assert_eq!(outcome.result.output, "unknown_tool:nope");
    }

    /// Issue 46: `"amount "` beside `amount` passed coercion (keys the
    /// schema does not name pass through) and reached the tool, while the
    /// approval rule read only `amount`. Checked against the whole schema
    /// after coercion, the extra key is `bad_args` and the tool never runs.
    #[tokio::test]
    async fn an_extra_key_against_additional_properties_false_is_bad_args() {
        let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        struct Counting(ToolSchema, Arc<std::sync::atomic::AtomicUsize>);
        #[async_trait]
        impl Tool for Counting {
            fn schema(&self) -> &ToolSchema {
                &self.0
            }
            fn kind(&self) -> &'static str {
                "counting"
            }
            async fn invoke(
                &self,
                arguments: Value,
                _ctx: ToolContext<'_>,
            ) -> Result<super::super::ToolOutput, ToolError> {
                self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok(super::super::ToolOutput::Json(arguments))
            }
        }
        let mut engine = ToolEngine::new();
        engine.add(
            Arc::new(Counting(
                ToolSchema {
                    name: "pay".into(),
                    description: String::new(),
                    parameters: json!({"type": "object", "additionalProperties": false,
                        "properties": {"amount": {"type": "integer", "maximum": 100}},
                        "required": ["amount"]}),
                },
                ran.clone(),
            )),
            ToolPolicy::default(),
        );
        let events = sink();
        for (raw, says) in [
            (
                r#"{"amount": "50", "amount ": 5000}"#,
                "'amount ' was unexpected",
            ),
            (r#"{"amount": "5000"}"#, "at /amount"),
        ] {
            let Err(outcome) = engine.prepare(&call(raw), 1, &events).await else {
                panic!("{raw} was prepared");
            };
            assert_eq!(outcome.error_code, Some("bad_args"), "{raw}");
            let output = &outcome.result.output;
            assert!(output.starts_with("bad_args:schema:"), "{raw}: {output}");
            assert!(output.contains(says), "{raw}: {output}");
        }
        // Coerced first, then checked: "50" is the integer 50.
        let prepared = engine
            .prepare(&call(r#"{"amount": "50"}"#), 1, &events)
            .await
            .unwrap();
        assert_eq!(prepared.call().arguments, json!({"amount": 50}));
        assert_eq!(ran.load(std::sync::atomic::Ordering::SeqCst), 0);
    }
}
