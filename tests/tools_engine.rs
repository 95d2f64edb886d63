//! The tool engine pipeline, step by step, through its public API and its
//! trace events.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use common::Recorder;
use serde_json::{Value, json};
use structured_agents::events::{Event, EventSink, RunContext};
use structured_agents::tools::ToolOutcome;
use structured_agents::tools::ToolPolicy;
use structured_agents::tools::policy::{CacheSpec, GuardrailSpec};
use structured_agents::tools::{Tool, ToolContext, ToolEngine, ToolError, ToolOutput};
use structured_agents::types::{ToolCall, ToolSchema};
use tokio_util::sync::CancellationToken;

type Behaviour = Box<dyn Fn(u32, &mut Value) -> Result<ToolOutput, ToolError> + Send + Sync>;

/// A tool whose behaviour is scripted per attempt.
struct Scripted {
    schema: ToolSchema,
    calls: AtomicU32,
    behave: Behaviour,
    delay: Duration,
}

#[async_trait]
impl Tool for Scripted {
    fn schema(&self) -> &ToolSchema {
        &self.schema
    }
    fn kind(&self) -> &'static str {
        "test"
    }
    async fn invoke(
        &self,
        mut arguments: Value,
        _ctx: ToolContext<'_>,
    ) -> Result<ToolOutput, ToolError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        tokio::time::sleep(self.delay).await;
        (self.behave)(n, &mut arguments)
    }
}

fn tool(
    behave: impl Fn(u32, &mut Value) -> Result<ToolOutput, ToolError> + Send + Sync + 'static,
) -> Arc<Scripted> {
    Arc::new(Scripted {
        schema: ToolSchema {
            name: "t".into(),
            description: String::new(),
            parameters: json!({"type": "object", "properties": {"n": {"type": "integer"}, "flag": {"type": "boolean"}, "path": {"type": "string"}}}),
        },
        calls: AtomicU32::new(0),
        behave: Box::new(behave),
        delay: Duration::ZERO,
    })
}

struct Run {
    engine: ToolEngine,
    recorder: Arc<Recorder>,
    sink: EventSink,
}

fn engine(t: Arc<Scripted>, policy: ToolPolicy) -> Run {
    let mut engine = ToolEngine::new();
    engine.add(t, policy);
    let recorder = Arc::new(Recorder::default());
    let sink = EventSink::new(RunContext::default(), 1, recorder.clone());
    Run {
        engine,
        recorder,
        sink,
    }
}

impl Run {
    async fn call(&self, raw: &str) -> ToolOutcome {
        self.call_tool("t", raw).await
    }

    async fn call_tool(&self, name: &str, raw: &str) -> ToolOutcome {
        let call = ToolCall {
            id: "c1".into(),
            name: name.into(),
            arguments: Value::Null,
            raw_arguments: Some(raw.into()),
        };
        self.engine
            .execute(&call, 1, &CancellationToken::new(), &self.sink)
            .await
    }

    fn stages(&self) -> Vec<String> {
        self.recorder
            .events()
            .into_iter()
            .filter_map(|e| match e.event {
                Event::ToolTrace { stage, .. } => Some(stage),
                _ => None,
            })
            .collect()
    }

    fn clear(&self) {
        self.recorder.0.lock().unwrap().clear();
    }
}

fn policy(retries: u32, cache: bool, guards: Option<GuardrailSpec>) -> ToolPolicy {
    let cache = cache.then_some(CacheSpec {
        enabled: true,
        max_entries: 16,
        ttl: None,
    });
    let mut p = ToolPolicy::compile(
        Duration::from_millis(300),
        retries,
        cache.as_ref(),
        guards.as_ref(),
    )
    .unwrap();
    p.retry_backoff = Duration::from_millis(1);
    p
}

fn echo() -> Arc<Scripted> {
    tool(|_, args| Ok(ToolOutput::Json(args.clone())))
}

#[tokio::test]
async fn unknown_tool_echoes_the_name() {
    let run = engine(echo(), policy(0, false, None));
    let out = run.call_tool("nope", "{}").await;
    assert_eq!(
        (out.result.output.as_str(), out.error_code, out.attempts),
        ("unknown_tool:nope", Some("unknown_tool"), 0)
    );
    assert_eq!(run.stages(), ["tool.resolve.fail"]);
}

#[tokio::test]
async fn arguments_are_parsed_coerced_and_extras_pass_through() {
    let run = engine(echo(), policy(0, false, None));
    let out = run
        .call(r#"{"n": "2", "flag": "TRUE", "extra": {"k": [1]}}"#)
        .await;
    assert!(!out.result.is_error, "{out:?}");
    assert_eq!(
        serde_json::from_str::<Value>(&out.result.output).unwrap(),
        json!({"n": 2, "flag": true, "extra": {"k": [1]}})
    );
    assert_eq!(run.call("").await.result.output, "{}");
    assert_eq!(run.call("   ").await.result.output, "{}");
    for (raw, expect) in [
        ("[1, 2]", "bad_args:expected a JSON object, got array"),
        (r#"{"n": "two"}"#, "bad_args:bad_integer:n"),
        (r#"{"flag": "maybe"}"#, "bad_args:bad_boolean:flag"),
    ] {
        let out = run.call(raw).await;
        assert_eq!(
            (out.result.output.as_str(), out.error_code, out.attempts),
            (expect, Some("bad_args"), 0)
        );
    }
    assert!(
        run.call("{oops")
            .await
            .result
            .output
            .starts_with("bad_args:invalid JSON:")
    );
}

#[tokio::test]
async fn cache_keys_are_exact_raw_text_and_hits_skip_guards_and_invoke() {
    let t = echo();
    let guards = GuardrailSpec {
        max_argument_bytes: Some(1000),
        ..Default::default()
    };
    let run = engine(t.clone(), policy(0, true, Some(guards)));
    let first = run.call(r#"{"n":1}"#).await;
    assert!(!first.cached && first.attempts == 1);
    assert_eq!(
        run.stages(),
        [
            "tool.resolve.ok",
            "args.parse.ok",
            "cache.miss",
            "guard.input.ok",
            "tool.invoke.ok",
            "guard.output.ok",
            "cache.store"
        ]
    );
    run.clear();
    let hit = run.call(r#"{"n":1}"#).await;
    assert!(hit.cached && hit.attempts == 0 && hit.result.output == first.result.output);
    assert_eq!(
        run.stages(),
        ["tool.resolve.ok", "args.parse.ok", "cache.hit"]
    );
    // Whitespace makes a different key.
    let spaced = run.call(r#"{"n": 1}"#).await;
    assert!(!spaced.cached);
    assert_eq!(t.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn retryable_then_success_reports_two_attempts() {
    let run = engine(
        tool(|n, _| {
            if n == 1 {
                Err(ToolError::Retryable("flaky".into()))
            } else {
                Ok(ToolOutput::Text("ok".into()))
            }
        }),
        policy(2, false, None),
    );
    let out = run.call("{}").await;
    assert_eq!(
        (
            out.result.output.as_str(),
            out.attempts,
            out.result.is_error
        ),
        ("\"ok\"", 2, false)
    );
    assert_eq!(
        run.stages(),
        [
            "tool.resolve.ok",
            "args.parse.ok",
            "tool.invoke.retryable",
            "tool.invoke.ok"
        ]
    );
}

#[tokio::test]
async fn exhausted_retries_are_a_tool_error_after_retries_plus_one_attempts() {
    let t = tool(|_, _| Err(ToolError::Retryable("down".into())));
    let run = engine(t.clone(), policy(2, false, None));
    let out = run.call("{}").await;
    assert_eq!(
        (out.result.output.as_str(), out.error_code, out.attempts),
        ("tool_error:down", Some("tool_error"), 3)
    );
    assert_eq!(t.calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn validation_errors_are_user_errors_and_not_retried() {
    let t = tool(|_, _| Err(ToolError::Validation("n must be positive".into())));
    let run = engine(t.clone(), policy(3, false, None));
    let out = run.call("{}").await;
    assert_eq!(
        (out.result.output.as_str(), out.error_code, out.attempts),
        ("user_error:n must be positive", Some("user_error"), 1)
    );
    let failed = engine(
        tool(|_, _| Err(ToolError::Failed("boom".into()))),
        policy(3, false, None),
    )
    .call("{}")
    .await;
    assert_eq!(
        (failed.result.output.as_str(), failed.attempts),
        ("tool_error:boom", 1)
    );
}

#[tokio::test]
async fn a_timeout_reports_one_attempt_and_is_not_retried() {
    let slow = Arc::new(Scripted {
        schema: echo().schema.clone(),
        calls: AtomicU32::new(0),
        behave: Box::new(|_, _| Ok(ToolOutput::Null)),
        delay: Duration::from_secs(5),
    });
    let run = engine(slow.clone(), policy(3, false, None));
    let out = run.call("{}").await;
    assert_eq!(
        (out.result.output.as_str(), out.error_code, out.attempts),
        ("tool_error:timeout", Some("tool_error"), 1)
    );
    assert_eq!(slow.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn guardrail_blocks_cache_nothing() {
    let guards = GuardrailSpec {
        path_prefixes: [("path".to_string(), vec!["/srv/".to_string()])].into(),
        deny_output_patterns: vec!["secret".into()],
        ..Default::default()
    };
    let t = tool(|_, args| {
        Ok(ToolOutput::Text(if args["n"] == 1 {
            "secret stuff".into()
        } else {
            "fine".into()
        }))
    });
    let run = engine(t.clone(), policy(0, true, Some(guards)));
    let blocked_in = run.call(r#"{"path": "/etc/passwd"}"#).await;
    assert_eq!(blocked_in.error_code, Some("guardrail"));
    assert!(
        blocked_in
            .result
            .output
            .starts_with("guardrail:`path` path \"/etc/passwd\" is outside")
    );
    assert_eq!(t.calls.load(Ordering::SeqCst), 0);
    run.clear();
    let blocked_out = run.call(r#"{"n": 1}"#).await;
    assert_eq!(blocked_out.error_code, Some("guardrail"));
    assert!(run.stages().contains(&"guard.output.block".to_string()));
    assert!(!run.stages().contains(&"cache.store".to_string()));
    let again = run.call(r#"{"n": 1}"#).await;
    assert!(!again.cached, "a blocked output must not be cached");
    assert_eq!(t.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn output_guardrails_truncate_and_redact() {
    let guards = GuardrailSpec {
        max_output_bytes: Some(40),
        redact_patterns: vec!["token-[0-9]+".into()],
        ..Default::default()
    };
    let run = engine(
        tool(|_, _| Ok(ToolOutput::Text(format!("token-123 {}", "x".repeat(100))))),
        policy(0, false, Some(guards)),
    );
    let out = run.call("{}").await;
    assert!(!out.result.is_error);
    let text: String = serde_json::from_str(&out.result.output).unwrap();
    assert!(
        text.starts_with("[REDACTED] xxx") && text.contains("[truncated:"),
        "{text}"
    );
}

#[tokio::test]
async fn trace_payloads_are_copies() {
    // The tool mutates the arguments it was given; the recorded trace keeps
    // what was emitted.
    let run = engine(
        tool(|_, args| {
            args["n"] = json!(999);
            Ok(ToolOutput::Json(args.clone()))
        }),
        policy(0, false, None),
    );
    let out = run.call(r#"{"n": 1}"#).await;
    assert_eq!(
        serde_json::from_str::<Value>(&out.result.output).unwrap()["n"],
        999
    );
    let parsed = run
        .recorder
        .events()
        .into_iter()
        .find_map(|e| match e.event {
            Event::ToolTrace { stage, detail, .. } if stage == "args.parse.ok" => Some(detail),
            _ => None,
        });
    assert_eq!(parsed.unwrap()["arguments"]["n"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_on_the_runtime_inside_a_tool_is_a_tool_error() {
    let run = engine(
        tool(|_, _| {
            // A tool that (wrongly) blocks on the runtime it runs on.
            tokio::runtime::Handle::current().block_on(async {});
            Ok(ToolOutput::Null)
        }),
        policy(0, false, None),
    );
    let out = run.call("{}").await;
    assert_eq!(out.error_code, Some("tool_error"));
    assert!(
        out.result.output.starts_with("tool_error:tool panicked"),
        "{}",
        out.result.output
    );
    assert!(run.stages().contains(&"tool.invoke.panic".to_string()));
}

#[tokio::test]
async fn bad_guardrail_regexes_are_rejected_when_compiling() {
    let guards = GuardrailSpec {
        deny_patterns: [("q".to_string(), vec!["(".to_string()])].into(),
        ..Default::default()
    };
    let err = ToolPolicy::compile(Duration::from_secs(1), 0, None, Some(&guards)).unwrap_err();
    assert!(err.to_string().contains("deny_patterns.q"), "{err}");
}
