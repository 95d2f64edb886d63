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
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::coerce::{ArgsError, parse_and_coerce};
use super::handling::ToolPolicy;
use super::invoke::{Invocation, ToolOutcome, Trace};
use super::{CallPlace, Effect, Tool};
use crate::events::{EventSink, preview};
use crate::types::{ToolCall, ToolSchema};

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

        // 3. cache, 4. input guardrails
        if let Some(answered) = before_invoke(&entry.policy, call, raw, arguments, &trace).await {
            return answered;
        }

        // 5. invoke with retries and a timeout
        let (output, attempts) = match (Invocation {
            tool: &entry.tool,
            policy: &entry.policy,
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
        let output = match guard_output(policy, output, attempts, &trace).await {
            Ok(output) => output,
            Err(blocked) => return blocked,
        };

        // 8. store
        if let Some(cache) = &policy.cache {
            cache.put(&call.name, raw, output.clone());
            trace.emit("cache.store", Value::Null).await;
        }
        trace.done(output, None, attempts, false)
    }
}

/// Stages 3 and 4: a cached answer, or the input guardrails' refusal; `None`
/// when the call goes on to its tool.
async fn before_invoke(
    policy: &ToolPolicy,
    call: &ToolCall,
    raw: &str,
    arguments: &serde_json::Map<String, Value>,
    trace: &Trace<'_>,
) -> Option<ToolOutcome> {
    if let Some(cache) = &policy.cache {
        if let Some(output) = cache.get(&call.name, raw) {
            trace
                .emit(
                    "cache.hit",
                    json!({"output_preview": preview(&output, 200)}),
                )
                .await;
            return Some(trace.done(output, None, 0, true));
        }
        trace.emit("cache.miss", Value::Null).await;
    }
    if let Some(guards) = &policy.guardrails {
        if let Err(reason) = guards.check_input(raw, arguments) {
            let reason = reason.to_string();
            trace
                .emit("guard.input.block", json!({"reason": reason}))
                .await;
            return Some(trace.done(format!("guardrail:{reason}"), Some("guardrail"), 0, false));
        }
        trace.emit("guard.input.ok", Value::Null).await;
    }
    None
}

/// Stage 7: the output as the output guardrails leave it (truncated,
/// redacted), or the call's outcome when they block it.
async fn guard_output(
    policy: &ToolPolicy,
    output: String,
    attempts: u32,
    trace: &Trace<'_>,
) -> Result<String, ToolOutcome> {
    let Some(guards) = &policy.guardrails else {
        return Ok(output);
    };
    match guards.check_output(output) {
        Ok(checked) => {
            trace
                .emit(
                    "guard.output.ok",
                    json!({"truncated": checked.truncated, "redactions": checked.redactions}),
                )
                .await;
            Ok(checked.output)
        }
        Err(reason) => {
            let reason = reason.to_string();
            trace
                .emit("guard.output.block", json!({"reason": reason}))
                .await;
            Err(trace.done(
                format!("guardrail:{reason}"),
                Some("guardrail"),
                attempts,
                false,
            ))
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
mod tests;
