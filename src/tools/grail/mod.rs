//! The `grail` backend: runs a Grail `.pym` script through Grail's Python
//! API, as the original tool engine's `GrailBackend` did, in a pool of
//! Python host processes (`host.py`, shipped inside the binary).
//!
//! # The Grail API relied on
//!
//! Read from Grail's source (github.com/Bullish-Design/grail, `src/grail`,
//! version 3.0.0); nothing else of Grail is used:
//!
//! - module `grail`, importable in the tool's Python (`grail.python`,
//!   default `python3`);
//! - `grail.load(path, grail_dir=None) -> GrailScript`: parses and checks
//!   the script (raises `ParseError`, `CheckError`); `grail_dir=None` keeps
//!   it from writing a `.grail/` artifacts directory next to the bundle;
//! - `GrailScript.externals`: the script's `@external` functions, a dict of
//!   name to `ExternalSpec` (`is_async`, `parameters[].name`);
//! - `await GrailScript.run(inputs=dict, externals=dict, limits=Limits)`:
//!   the call's arguments are the script's declared `Input("name")` values,
//!   each external a callable, and the value is the script's result;
//! - `grail.Limits(max_memory="16mb" | bytes, max_duration="2s" | seconds,
//!   max_recursion=int, max_allocations=int)`;
//! - errors, all `grail.GrailError`: `LimitError` (with `limit_type`:
//!   `memory`, `duration`, `recursion`, `allocations`), `InputError`,
//!   `ExternalError`, `ExecutionError`, `ParseError`, `CheckError`,
//!   `OutputError`.
//!
//! # What a call does
//!
//! The daemon lends a host from the tool's pool, sends it the script's
//! path and digest (the host caches the loaded script per both), the
//! arguments, the limits and the names of the externals the bundle wires
//! (`grail.externals`: external function name to another tool of the
//! bundle). While the script runs, each external call comes back to the
//! daemon, which runs the named tool's backend and answers. The protocol is
//! described in `host.py`.
//!
//! Error codes: an `InputError` is `user_error` (the model should change
//! the arguments); a limit hit, any other Grail error, a host that died, a
//! timeout and an answer over `max_output_bytes` are `tool_error`, each
//! naming the script. A host that timed out, was cancelled or broke the
//! protocol is killed; the next call starts a new one.

mod pool;

pub use pool::{HOST_SOURCE, HostLaunch, HostPool};

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, ToolOutput};
use crate::types::{ToolCall, ToolSchema};
use pool::{Host, HostError};

/// The Python a grail tool runs its host with unless `grail.python` says.
pub const DEFAULT_PYTHON: &str = "python3";
/// Hosts per grail tool unless `grail.pool_size` says (the original's
/// `max_workers`).
pub const DEFAULT_POOL_SIZE: usize = 4;

/// A grail tool's `grail:` section of `bundle.yaml`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrailSection {
    /// The Python interpreter Grail is installed in (default `python3`,
    /// looked up on the `PATH` the tool passes through).
    #[serde(default)]
    pub python: Option<String>,
    /// Grail's limits for each run; unset ones take the original backend's
    /// defaults (`512mb`, `60s`, recursion `100`).
    #[serde(default)]
    pub limits: GrailLimits,
    /// The script's `@external` functions the daemon answers: function name
    /// to the name of another tool of this bundle, run with the external's
    /// arguments (by parameter name) and answering with its result.
    #[serde(default)]
    pub externals: BTreeMap<String, String>,
    /// How many hosts (Python processes) may run this tool's calls at once
    /// (default 4).
    #[serde(default)]
    pub pool_size: Option<usize>,
}

/// Grail's `Limits`, in Grail's own spellings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrailLimits {
    /// Heap memory: `"16mb"`, `"1gb"`, `"512kb"` or bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Value>")]
    pub max_memory: Option<Value>,
    /// Run time: `"500ms"`, `"2s"` or seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Value>")]
    pub max_duration: Option<Value>,
    /// Call stack depth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_recursion: Option<u32>,
    /// Heap allocations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_allocations: Option<u64>,
}

impl GrailLimits {
    /// The limits sent to Grail: these, with the original backend's
    /// defaults where unset.
    pub fn effective(&self) -> Value {
        let limits = GrailLimits {
            max_memory: Some(self.max_memory.clone().unwrap_or_else(|| json!("512mb"))),
            max_duration: Some(self.max_duration.clone().unwrap_or_else(|| json!("60s"))),
            max_recursion: Some(self.max_recursion.unwrap_or(100)),
            max_allocations: self.max_allocations,
        };
        serde_json::to_value(limits).unwrap_or(Value::Null)
    }

    /// What Grail would refuse: (key, message).
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        if let Some(memory) = &self.max_memory
            && !spelled(memory, &["kb", "mb", "gb"])
        {
            problems.push((
                "max_memory",
                format!("{memory} is not a memory size Grail reads: write bytes or e.g. \"16mb\", \"1gb\", \"512kb\""),
            ));
        }
        if let Some(duration) = &self.max_duration
            && !spelled(duration, &["ms", "s"])
        {
            problems.push((
                "max_duration",
                format!("{duration} is not a duration Grail reads: write seconds or e.g. \"500ms\", \"2s\""),
            ));
        }
        problems
    }
}

/// A non-negative number, or a number followed by one of `units` (Grail's
/// `^\d+(\.\d+)?(unit)$`, any case).
fn spelled(value: &Value, units: &[&str]) -> bool {
    match value {
        Value::Number(n) => n.as_f64().is_some_and(|n| n >= 0.0),
        Value::String(text) => {
            let text = text.trim().to_ascii_lowercase();
            // Longest unit first: "ms" before "s".
            let mut sorted = units.to_vec();
            sorted.sort_by_key(|u| std::cmp::Reverse(u.len()));
            sorted.iter().any(|unit| {
                text.strip_suffix(unit).is_some_and(|number| {
                    let mut parts = number.splitn(2, '.');
                    let whole = parts.next().unwrap_or_default();
                    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
                    digits(whole) && parts.next().is_none_or(digits)
                })
            })
        }
        _ => false,
    }
}

/// Everything a bound grail tool runs with.
pub struct GrailToolSpec {
    /// The script, absolute.
    pub script: PathBuf,
    /// The script's content digest (the host's cache key with the path).
    pub digest: String,
    /// The limits sent with each run ([`GrailLimits::effective`]).
    pub limits: Value,
    /// External function name to the tool answering it.
    pub externals: Vec<(String, Arc<dyn Tool>)>,
    pub max_output_bytes: usize,
    pub timeout: Duration,
}

pub struct GrailTool {
    schema: ToolSchema,
    spec: GrailToolSpec,
    pool: HostPool,
    runs: AtomicU64,
}

/// What the host answered a run with.
enum Answer {
    Value(Value),
    /// Grail's (or the host's) error object: `type`, `message`, `limit_type`.
    Refused(Value),
}

/// Room for the answer's envelope around a value of `max_output_bytes`.
const ENVELOPE: usize = 4096;

impl GrailTool {
    pub fn new(schema: ToolSchema, spec: GrailToolSpec, pool: HostPool) -> Self {
        Self {
            schema,
            spec,
            pool,
            runs: AtomicU64::new(0),
        }
    }

    fn script_name(&self) -> String {
        self.spec.script.display().to_string()
    }

    /// One run on `host`: the request, the externals it asks for, its answer.
    async fn converse(
        &self,
        host: &mut Host,
        arguments: Value,
        ctx: &ToolContext<'_>,
    ) -> Result<Answer, HostError> {
        let id = self.runs.fetch_add(1, Ordering::Relaxed);
        let externals: Vec<&str> = self
            .spec
            .externals
            .iter()
            .map(|(n, _)| n.as_str())
            .collect();
        host.send(&json!({
            "op": "run",
            "id": id,
            "script": self.spec.script,
            "digest": self.spec.digest,
            "inputs": arguments,
            "limits": self.spec.limits,
            "externals": externals,
        }))
        .await?;
        let cap = self.spec.max_output_bytes + ENVELOPE;
        loop {
            let message = host.receive(cap).await?;
            match message.get("op").and_then(Value::as_str) {
                Some("external") => {
                    let reply = self.external(&message, ctx).await;
                    host.send(&reply).await?;
                }
                Some("result") if message.get("id") == Some(&json!(id)) => {
                    return Ok(if message.get("ok") == Some(&Value::Bool(true)) {
                        Answer::Value(message.get("value").cloned().unwrap_or(Value::Null))
                    } else {
                        Answer::Refused(message.get("error").cloned().unwrap_or(Value::Null))
                    });
                }
                _ => {
                    return Err(HostError::Protocol {
                        what: format!(
                            "{} while running {}",
                            crate::events::preview(&message.to_string(), 200),
                            self.script_name()
                        ),
                    });
                }
            }
        }
    }

    /// Answers one external call by running the tool the bundle wired to it.
    async fn external(&self, message: &Value, ctx: &ToolContext<'_>) -> Value {
        let call = message.get("call").cloned().unwrap_or(Value::Null);
        let name = message
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let Some((_, tool)) = self.spec.externals.iter().find(|(n, _)| n == name) else {
            return json!({"op": "external_result", "call": call, "ok": false,
                "error": format!("no tool answers external {name:?} (grail.externals)")});
        };
        let arguments = message
            .get("arguments")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let external_call = ToolCall {
            id: format!("{}:{name}:{call}", ctx.call.id),
            name: tool.schema().name.clone(),
            arguments: arguments.clone(),
            raw_arguments: None,
        };
        let context = ToolContext {
            call: &external_call,
            place: ctx.place,
            cancel: ctx.cancel.clone(),
            deadline: ctx.deadline,
            events: ctx.events,
        };
        match tool.invoke(arguments, context).await {
            Ok(output) => {
                let text = output.into_json_string();
                let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
                json!({"op": "external_result", "call": call, "ok": true, "value": value})
            }
            Err(e) => json!({"op": "external_result", "call": call, "ok": false,
                "error": format!("tool {:?}: {e}", tool.schema().name)}),
        }
    }

    /// Grail's error as our error code.
    fn refused(&self, error: &Value) -> ToolError {
        let kind = error.get("type").and_then(Value::as_str).unwrap_or("error");
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let script = self.script_name();
        match kind {
            "LimitError" => {
                let limit = error
                    .get("limit_type")
                    .and_then(Value::as_str)
                    .unwrap_or("a");
                ToolError::Failed(format!(
                    "grail {limit} limit exceeded running {script}: {message} (the tool's `grail.limits.max_{limit}` sets it)"
                ))
            }
            "InputError" => {
                ToolError::Validation(format!("{script} refused its inputs: {message}"))
            }
            _ => ToolError::Failed(format!("grail {kind} running {script}: {message}")),
        }
    }
}

#[async_trait]
impl Tool for GrailTool {
    fn schema(&self) -> &ToolSchema {
        &self.schema
    }

    fn kind(&self) -> &'static str {
        "grail"
    }

    async fn invoke(
        &self,
        arguments: Value,
        ctx: ToolContext<'_>,
    ) -> Result<ToolOutput, ToolError> {
        let timeout = self
            .spec
            .timeout
            .min(ctx.remaining().max(Duration::from_millis(1)));
        let name = &self.schema.name;
        let work = async {
            let mut lease = self.pool.checkout(timeout).await?;
            let answer = self.converse(&mut lease.host, arguments, &ctx).await?;
            // A clean conversation: the host serves the next call.
            self.pool.give_back(lease);
            Ok::<_, HostError>(answer)
        };
        // Leaving `work` unfinished drops its host, which kills it.
        let answer = tokio::select! {
            answer = tokio::time::timeout(timeout, work) => match answer {
                Ok(Ok(answer)) => answer,
                Ok(Err(HostError::NoGrail { python, detail })) => {
                    return Err(ToolError::Failed(
                        HostError::NoGrail { python, detail }.to_string(),
                    ));
                }
                Ok(Err(e)) => {
                    return Err(ToolError::Failed(format!(
                        "tool `{name}` ({}): {e}; the host was stopped, the next call starts a new one",
                        self.script_name()
                    )));
                }
                Err(_) => {
                    return Err(ToolError::Failed(format!(
                        "timeout: {} ran past {timeout:?}; its host was killed",
                        self.script_name()
                    )));
                }
            },
            _ = ctx.cancel.cancelled() => return Err(ToolError::Failed("cancelled".into())),
        };
        match answer {
            Answer::Value(value) => {
                let text = value.to_string();
                if text.len() > self.spec.max_output_bytes {
                    return Err(ToolError::Failed(format!(
                        "output of {} exceeds {} bytes",
                        self.script_name(),
                        self.spec.max_output_bytes
                    )));
                }
                Ok(ToolOutput::Json(value))
            }
            Answer::Refused(error) => Err(self.refused(&error)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_checked_in_grails_own_spellings() {
        let good = GrailLimits {
            max_memory: Some(json!("16MB")),
            max_duration: Some(json!("500ms")),
            max_recursion: Some(50),
            max_allocations: None,
        };
        assert!(good.problems().is_empty());
        let bytes = GrailLimits {
            max_memory: Some(json!(1_048_576)),
            max_duration: Some(json!(1.5)),
            ..Default::default()
        };
        assert!(bytes.problems().is_empty());
        let bad = GrailLimits {
            max_memory: Some(json!("16 megs")),
            max_duration: Some(json!("5m")),
            ..Default::default()
        };
        let keys: Vec<_> = bad.problems().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["max_memory", "max_duration"]);
    }

    #[test]
    fn unset_limits_take_the_original_backends_defaults() {
        let limits = GrailLimits {
            max_duration: Some(json!("2s")),
            ..Default::default()
        };
        assert_eq!(
            limits.effective(),
            json!({"max_memory": "512mb", "max_duration": "2s", "max_recursion": 100})
        );
    }
}
