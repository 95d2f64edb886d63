//! Tests of `tools::engine`.

use super::*;
use crate::approval::ApprovalSpec;
use crate::events::{NullObserver, RunContext};
use crate::tools::{ToolContext, ToolError};
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
    assert!(policy(json!({"when": "not args.dry_run"})).needs_approval(&prepared.call().arguments));
    let matches =
        policy(json!({"matches": {"properties": {"amount": {"type": "integer", "minimum": 100}}}}));
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
