//! The kernel against the mock OpenAI-compatible server: event order and
//! fields, termination reasons, retries, timeouts.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Behaviour, Recorder, TestTool, script};
use serde_json::{Value, json};
use structured_agents::client::{EndpointSettings, HttpBackend};
use structured_agents::events::{Event, EventSink, RunContext};
use structured_agents::kernel::{Kernel, KernelConfig, Phase};
use structured_agents::mock::MockServer;
use structured_agents::model::OpenAiPlugin;
use structured_agents::tools::ToolEngine;
use structured_agents::tools::ToolPolicy;
use structured_agents::types::{Message, TerminationReason};
use tokio_util::sync::CancellationToken;

struct Harness {
    server: MockServer,
    recorder: Arc<Recorder>,
    kernel: Kernel,
}

async fn harness(
    yaml: &str,
    config: KernelConfig,
    settings: impl FnOnce(&mut EndpointSettings),
) -> Harness {
    harness_with(yaml, config, settings, Arc::default()).await
}

async fn harness_with(
    yaml: &str,
    config: KernelConfig,
    settings: impl FnOnce(&mut EndpointSettings),
    tracker: Arc<common::Tracker>,
) -> Harness {
    let server = MockServer::start(script(yaml)).await.unwrap();
    let mut endpoint = EndpointSettings::new("mock", server.base_url());
    endpoint.backoff_base = Duration::from_millis(10);
    settings(&mut endpoint);
    let recorder = Arc::new(Recorder::default());
    // Tools that wait for a signal get a minute and more before the engine's
    // timeout fails them: the signal, not the timeout, ends them.
    let patient = || ToolPolicy {
        timeout: Duration::from_secs(120),
        ..Default::default()
    };
    let mut tools = ToolEngine::new();
    tools.add(
        TestTool::arc(
            "slow_echo",
            Behaviour::EchoAfterOther(recorder.clone(), Duration::from_millis(150)),
        ),
        patient(),
    );
    tools.add(
        TestTool::arc("fast_echo", Behaviour::Echo(Duration::from_millis(1))),
        ToolPolicy::default(),
    );
    tools.add(
        TestTool::arc("broken", Behaviour::Fail("disk on fire".into())),
        ToolPolicy::default(),
    );
    tools.add(
        TestTool::arc("panicky", Behaviour::Panic),
        ToolPolicy::default(),
    );
    tools.add(
        TestTool::arc("finish", Behaviour::Echo(Duration::ZERO)),
        ToolPolicy::default(),
    );
    tools.add(
        TestTool::arc(
            "tracked",
            Behaviour::Tracked(tracker, Duration::from_millis(100)),
        ),
        patient(),
    );
    let kernel = Kernel::new(
        config,
        Arc::new(OpenAiPlugin),
        Arc::new(HttpBackend::new(endpoint).unwrap()),
        Arc::new(tools),
        None,
    );
    Harness {
        server,
        recorder,
        kernel,
    }
}

impl Harness {
    fn sink(&self) -> EventSink {
        let context = RunContext {
            run_id: "run-1".into(),
            bundle: "b".into(),
            bundle_version: "1".into(),
            parent: None,
        };
        EventSink::new(context, 1, self.recorder.clone())
    }

    async fn run(
        &self,
        cancel: CancellationToken,
    ) -> Result<structured_agents::types::RunResult, structured_agents::kernel::RunError> {
        self.kernel
            .run(
                vec![Message::system("sys"), Message::user("go")],
                &self.sink(),
                cancel,
            )
            .await
    }
}

const THREE_TURNS: &str = r#"
replies:
  - content: "two at once"
    tool_calls:
      - {id: c1, name: slow_echo, arguments: {n: 1}}
      - {id: c2, name: broken, arguments: {}}
    usage: {prompt_tokens: 10, completion_tokens: 2}
  - tool_calls:
      - {id: c3, name: fast_echo, arguments: {n: 3}}
    usage: {prompt_tokens: 20, completion_tokens: 3}
  - content: "all done"
    usage: {prompt_tokens: 30, completion_tokens: 4}
"#;

#[tokio::test]
async fn three_turn_run_emits_events_in_order_with_fields() {
    let h = harness(
        THREE_TURNS,
        KernelConfig {
            model: "m".into(),
            max_concurrency: 2,
            ..Default::default()
        },
        |_| {},
    )
    .await;
    let result = h.run(CancellationToken::new()).await.unwrap();
    assert_eq!(result.termination_reason, TerminationReason::NoToolCalls);
    assert_eq!(result.turn_count, 3);
    assert_eq!(result.usage.prompt_tokens, 60);
    assert_eq!(result.usage.completion_tokens, 9);
    assert_eq!(result.final_message.content.as_deref(), Some("all done"));

    // The seven kernel events, in order (tool-engine traces interleave).
    let kinds: Vec<String> = h
        .recorder
        .kinds()
        .into_iter()
        .filter(|k| k != "ToolTrace")
        .collect();
    assert_eq!(
        kinds,
        [
            "KernelStart",
            "ModelRequest",
            "ModelResponse",
            "ToolCall",
            "ToolCall",
            "ToolResult",
            "ToolResult",
            "TurnComplete",
            "ModelRequest",
            "ModelResponse",
            "ToolCall",
            "ToolResult",
            "TurnComplete",
            "ModelRequest",
            "ModelResponse",
            "TurnComplete",
            "KernelEnd",
        ]
    );
    let all = h.recorder.events();
    // Sequence numbers are gap-free from 1 and the envelope carries the run.
    for (i, e) in all.iter().enumerate() {
        assert_eq!(e.seq, i as u64 + 1);
        assert_eq!(e.run_id, "run-1");
    }
    let events: Vec<_> = all
        .into_iter()
        .filter(|e| e.event.kind() != "ToolTrace")
        .collect();
    match &events[0].event {
        Event::KernelStart {
            max_turns,
            tools_count,
            initial_messages_count,
        } => {
            assert_eq!(
                (*max_turns, *tools_count, *initial_messages_count),
                (structured_agents::kernel::DEFAULT_MAX_TURNS, 6, 2)
            );
        }
        other => panic!("{other:?}"),
    }
    match &events[1].event {
        Event::ModelRequest {
            turn,
            messages_count,
            tools_count,
            model,
            ..
        } => {
            assert_eq!(
                (*turn, *messages_count, *tools_count, model.as_str()),
                (1, 2, 6, "m")
            );
        }
        other => panic!("{other:?}"),
    }
    // Each result arrives when its tool ends: the failing call first,
    // though the slow one was called first (history keeps call order).
    let results: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ToolResult {
                turn,
                call_id,
                is_error,
                output_preview,
                error_type,
                ..
            } => Some((
                *turn,
                call_id.clone(),
                *is_error,
                output_preview.clone(),
                error_type.clone(),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(results[1].1, "c1");
    assert!(!results[1].2);
    assert_eq!(
        results[0],
        (
            1,
            "c2".into(),
            true,
            "tool_error:disk on fire".into(),
            Some("tool_error".into())
        )
    );
    assert_eq!(results[2].0, 2);
    match &events[7].event {
        Event::TurnComplete {
            turn,
            tool_calls_count,
            tool_results_count,
            errors_count,
        } => {
            assert_eq!(
                (*turn, *tool_calls_count, *tool_results_count, *errors_count),
                (1, 2, 2, 1)
            );
        }
        other => panic!("{other:?}"),
    }
    match &events.last().unwrap().event {
        Event::KernelEnd {
            turn_count,
            termination_reason,
            ..
        } => {
            assert_eq!(
                (*turn_count, *termination_reason),
                (3, TerminationReason::NoToolCalls)
            );
        }
        other => panic!("{other:?}"),
    }

    // History: assistant then tool messages in call order, on the wire.
    let requests = h.server.requests();
    let second = requests[1]["messages"].as_array().unwrap();
    let roles: Vec<_> = second.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "tool"]);
    assert_eq!(second[3]["tool_call_id"], "c1");
    assert_eq!(second[4]["tool_call_id"], "c2");
    assert_eq!(
        second[2]["tool_calls"][0]["function"]["arguments"],
        "{\"n\":1}"
    );
    assert_eq!(requests[0]["tool_choice"], "auto");
}

/// Milliseconds from the `ToolCall` to the `ToolResult` of each call id.
fn tool_spans(events: &[structured_agents::events::EventEnvelope]) -> Vec<(String, i64, i64)> {
    let at = |e: &structured_agents::events::EventEnvelope| {
        humantime::parse_rfc3339(&e.timestamp)
            .unwrap()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    let origin = at(&events[0]);
    events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ToolCall { call_id, .. } => {
                let end = events.iter().find_map(|r| match &r.event {
                    Event::ToolResult { call_id: c, .. } if c == call_id => Some(at(r)),
                    _ => None,
                })?;
                Some((call_id.clone(), at(e) - origin, end - origin))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn each_tool_event_has_its_own_start_and_end_time() {
    let yaml = r#"
replies:
  - tool_calls:
      - {id: slow, name: slow_echo, arguments: {}}
      - {id: fast, name: fast_echo, arguments: {}}
  - content: done
"#;
    // Two at once (the default runs them one after another).
    let config = KernelConfig {
        max_concurrency: 2,
        ..Default::default()
    };
    let h = harness(yaml, config, |_| {}).await;
    h.run(CancellationToken::new()).await.unwrap();
    let events = h.recorder.events();
    let spans = tool_spans(&events);
    let (slow, fast) = (&spans[0], &spans[1]);
    assert_eq!((slow.0.as_str(), fast.0.as_str()), ("slow", "fast"));
    // Proven by order, not by how long anything took: the slow call starts
    // first and ends only after the fast one's result was recorded (and
    // 150 ms more), so the fast span ends inside the slow one, at its own
    // call's end.
    assert!(slow.1 <= fast.1, "{spans:?}");
    assert!(slow.2 - slow.1 >= 150, "{spans:?}");
    assert!(slow.2 > fast.2, "{spans:?}");
    let order: Vec<String> = events
        .iter()
        .filter(|e| e.event.kind() == "ToolResult")
        .map(|e| match &e.event {
            Event::ToolResult { call_id, .. } => call_id.clone(),
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(order, ["fast", "slow"]);
    // History stays in call order.
    let second = h.server.requests()[1]["messages"].clone();
    assert_eq!(second[3]["tool_call_id"], "slow");
    assert_eq!(second[4]["tool_call_id"], "fast");
}

#[tokio::test]
async fn tool_choice_follows_the_turn() {
    use structured_agents::kernel::TurnShape;
    use structured_agents::model::ToolChoice;
    let yaml = r#"
replies:
  - tool_calls:
      - {id: a, name: fast_echo, arguments: {}}
  - tool_calls:
      - {id: b, name: finish, arguments: {}}
  - content: done
"#;
    let mut config = KernelConfig {
        shape: TurnShape {
            tool_choice: ToolChoice::Required,
            fragment: serde_json::Map::from_iter([("stop".to_string(), json!(["<end>"]))]),
            list_tools: true,
        },
        ..Default::default()
    };
    config.turn_shapes.insert(
        2,
        TurnShape {
            tool_choice: ToolChoice::Tool("finish".into()),
            fragment: serde_json::Map::new(),
            list_tools: true,
        },
    );
    let h = harness(yaml, config, |_| {}).await;
    h.run(CancellationToken::new()).await.unwrap();
    let requests = h.server.requests();
    assert_eq!(requests[0]["tool_choice"], "required");
    assert_eq!(requests[0]["stop"], json!(["<end>"]));
    assert_eq!(
        requests[1]["tool_choice"],
        json!({"type": "function", "function": {"name": "finish"}})
    );
    assert!(requests[1].get("stop").is_none());
    assert_eq!(requests[2]["tool_choice"], "required");
}

#[tokio::test]
async fn tools_the_server_cannot_list_are_declared_in_the_prompt() {
    use structured_agents::kernel::TurnShape;
    let yaml = "replies:\n  - content: done\n";
    let config = KernelConfig {
        shape: TurnShape {
            list_tools: false,
            fragment: serde_json::Map::from_iter([(
                "grammar".to_string(),
                json!("root ::= \"done\""),
            )]),
            ..Default::default()
        },
        ..Default::default()
    };
    let h = harness(yaml, config, |_| {}).await;
    h.run(CancellationToken::new()).await.unwrap();
    let request = &h.server.requests()[0];
    assert!(
        request.get("tools").is_none() && request.get("tool_choice").is_none(),
        "{request}"
    );
    assert_eq!(request["grammar"], "root ::= \"done\"");
    let system = request["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.starts_with("sys\n\n# Tools") && system.contains("\"name\":\"slow_echo\""),
        "{system}"
    );
}

#[tokio::test]
async fn concurrent_tools_overlap_and_a_panicking_tool_is_an_error_result() {
    let yaml = r#"
replies:
  - tool_calls:
      - {id: a, name: tracked, arguments: {}}
      - {id: b, name: tracked, arguments: {}}
      - {id: c, name: panicky, arguments: {}}
      - {id: d, name: tracked, arguments: {}}
  - content: done
"#;
    let tracker = Arc::new(common::Tracker::default());
    let config = KernelConfig {
        max_concurrency: 2,
        ..Default::default()
    };
    let h = harness_with(yaml, config, |_| {}, tracker.clone()).await;
    let result = h.run(CancellationToken::new()).await.unwrap();
    // Tools overlapped (the first two tracked calls waited for each other),
    // but never more than max_concurrency at once.
    assert_eq!(
        tracker
            .max_in_flight
            .load(std::sync::atomic::Ordering::SeqCst),
        2
    );
    let tool_msgs: Vec<_> = result
        .history
        .iter()
        .filter(|m| m.role == structured_agents::types::Role::Tool)
        .collect();
    let ids: Vec<_> = tool_msgs
        .iter()
        .map(|m| m.tool_call_id.clone().unwrap())
        .collect();
    assert_eq!(ids, ["a", "b", "c", "d"]);
    assert!(
        tool_msgs[2]
            .content
            .as_deref()
            .unwrap()
            .starts_with("tool_error:"),
        "{:?}",
        tool_msgs[2]
    );
    assert_eq!(result.termination_reason, TerminationReason::NoToolCalls);
}

#[tokio::test]
async fn max_turns_stops_the_loop() {
    let yaml = "replies:\n  - tool_calls: [{name: fast_echo, arguments: {}}]\n";
    let h = harness(
        yaml,
        KernelConfig {
            max_turns: 2,
            ..Default::default()
        },
        |_| {},
    )
    .await;
    let result = h.run(CancellationToken::new()).await.unwrap();
    assert_eq!(result.termination_reason, TerminationReason::MaxTurns);
    assert_eq!(result.turn_count, 2);
    assert_eq!(h.server.requests().len(), 2);
}

#[tokio::test]
async fn termination_tool_ends_the_run_with_its_output() {
    let yaml =
        "replies:\n  - tool_calls: [{name: finish, arguments: {answer: 42}}]\n  - content: never\n";
    let config = KernelConfig {
        termination_tool: Some("finish".into()),
        ..Default::default()
    };
    let h = harness(yaml, config, |_| {}).await;
    let result = h.run(CancellationToken::new()).await.unwrap();
    assert_eq!(
        result.termination_reason,
        TerminationReason::TerminationTool
    );
    assert_eq!(
        result.final_output.as_deref(),
        Some(r#"{"echo":{"answer":42}}"#)
    );
    assert_eq!(result.turn_count, 1);
}

#[tokio::test]
async fn failed_termination_tool_does_not_end_the_run() {
    let yaml =
        "replies:\n  - tool_calls: [{name: broken, arguments: {}}]\n  - content: recovered\n";
    let config = KernelConfig {
        termination_tool: Some("broken".into()),
        ..Default::default()
    };
    let h = harness(yaml, config, |_| {}).await;
    let result = h.run(CancellationToken::new()).await.unwrap();
    assert_eq!(result.termination_reason, TerminationReason::NoToolCalls);
}

#[tokio::test]
async fn cancellation_stops_a_running_tool() {
    let yaml = "replies:\n  - tool_calls: [{name: slow_echo, arguments: {}}]\n  - content: never\n";
    let h = harness(yaml, KernelConfig::default(), |_| {}).await;
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    // Cancelled once the call has started: alone in its turn, `slow_echo`
    // never ends on its own, so only the cancel can end it.
    let recorder = h.recorder.clone();
    tokio::spawn(async move {
        recorder
            .recorded(|e| matches!(e, Event::ToolCall { .. }))
            .await;
        trigger.cancel();
    });
    let result = h.run(cancel).await.unwrap();
    assert_eq!(result.termination_reason, TerminationReason::Cancelled);
    assert_eq!(h.server.requests().len(), 1);
    assert_eq!(
        h.recorder.kinds().last().map(String::as_str),
        Some("KernelEnd")
    );
    // The cut call did not fail, the run stopped: its result says so, and
    // its event's error type is `interrupted` (no tool error).
    let tool_msg = result.history.last().unwrap();
    assert_eq!(
        tool_msg.content.as_deref(),
        Some("interrupted: the job was cancelled or ran out of time before the call ended")
    );
    let interrupted = h.recorder.events().into_iter().any(
        |e| matches!(&e.event, Event::ToolResult { error_type: Some(t), .. } if t == "interrupted"),
    );
    assert!(interrupted, "{:?}", h.recorder.kinds());
}

#[tokio::test]
async fn whole_run_deadline_is_a_timeout() {
    let yaml = "replies:\n  - content: slow\n    delay_ms: 2000\n";
    let config = KernelConfig {
        timeout: Some(Duration::from_millis(100)),
        ..Default::default()
    };
    let h = harness(yaml, config, |_| {}).await;
    let result = h.run(CancellationToken::new()).await.unwrap();
    assert_eq!(result.termination_reason, TerminationReason::Timeout);
    assert_eq!(
        h.recorder.kinds().last().map(String::as_str),
        Some("KernelEnd")
    );
}

#[tokio::test]
async fn model_timeout_is_a_kernel_error_and_kernel_end_is_still_emitted() {
    let yaml = "replies:\n  - content: late\n    delay_ms: 2000\n";
    let h = harness(yaml, KernelConfig::default(), |e| {
        e.request_timeout = Duration::from_millis(100);
        e.max_retries = 0;
    })
    .await;
    let err = h.run(CancellationToken::new()).await.unwrap_err();
    let structured_agents::kernel::RunError::Model(model) = &err else {
        panic!("expected a model error: {err}")
    };
    assert_eq!(model.turn, 1);
    assert_eq!(model.phase, Phase::ModelCall);
    assert!(err.is_retryable());
    assert!(err.to_string().contains("did not answer within"), "{err}");
    let events = h.recorder.events();
    match &events.last().unwrap().event {
        Event::KernelEnd {
            termination_reason,
            error,
            ..
        } => {
            assert_eq!(*termination_reason, TerminationReason::Error);
            assert!(error.as_deref().unwrap().contains("turn 1"));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_503_is_retried_then_succeeds() {
    let yaml = r#"
mode: sequential
replies:
  - {status: 503, error: "warming up"}
  - {content: "hello"}
"#;
    let h = harness(yaml, KernelConfig::default(), |_| {}).await;
    let result = h.run(CancellationToken::new()).await.unwrap();
    assert_eq!(result.final_message.content.as_deref(), Some("hello"));
    assert_eq!(h.server.requests().len(), 2);
    // The retry is invisible to the event stream: one request, one response.
    assert_eq!(
        h.recorder
            .kinds()
            .iter()
            .filter(|k| *k == "ModelRequest")
            .count(),
        1
    );
}

#[tokio::test]
async fn errors_carry_the_servers_message_and_4xx_is_not_retried() {
    let yaml = "mode: sequential\nreplies:\n  - {status: 400, error: \"context length exceeded\"}\n  - {content: never}\n";
    let h = harness(yaml, KernelConfig::default(), |_| {}).await;
    let err = h.run(CancellationToken::new()).await.unwrap_err();
    assert!(!err.is_retryable());
    assert!(
        err.to_string()
            .contains("HTTP 400: context length exceeded"),
        "{err}"
    );
    assert_eq!(h.server.requests().len(), 1);
}

#[tokio::test]
async fn empty_and_choiceless_bodies_are_typed_errors() {
    for raw in ["", "{\"object\": \"error\"}"] {
        let yaml = format!(
            "replies:\n  - raw_body: {}\n",
            serde_json::to_string(raw).unwrap()
        );
        let h = harness(&yaml, KernelConfig::default(), |_| {}).await;
        let err = h
            .run(CancellationToken::new())
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("empty body") || err.contains("no `choices`"),
            "{err}"
        );
    }
}

#[tokio::test]
async fn no_tools_means_no_tool_choice_and_extra_body_is_merged() {
    let server = MockServer::start(script("replies:\n  - content: hi\n"))
        .await
        .unwrap();
    let mut config = KernelConfig {
        model: "base".into(),
        ..Default::default()
    };
    config.extra_body.insert(
        "chat_template_kwargs".into(),
        json!({"enable_thinking": false}),
    );
    config.turn_models.insert(1, "my-lora".into());
    config.sampling.insert("temperature".into(), json!(0.1));
    let kernel = Kernel::new(
        config,
        Arc::new(OpenAiPlugin),
        Arc::new(HttpBackend::new(EndpointSettings::new("mock", server.base_url())).unwrap()),
        Arc::new(ToolEngine::new()),
        None,
    );
    let sink = EventSink::new(RunContext::default(), 1, Arc::new(Recorder::default()));
    kernel
        .run(vec![Message::user("x")], &sink, CancellationToken::new())
        .await
        .unwrap();
    let req = &server.requests()[0];
    assert!(
        req.get("tool_choice").is_none() && req.get("tools").is_none(),
        "{req}"
    );
    assert_eq!(
        req["chat_template_kwargs"],
        json!({"enable_thinking": false})
    );
    assert_eq!(req["model"], "my-lora");
    assert_eq!(req["temperature"], json!(0.1));
}

#[tokio::test]
async fn streaming_is_used_when_an_observer_wants_tokens() {
    use structured_agents::events::{EventEnvelope, Observer, ObserverError, TokenDelta};
    #[derive(Default)]
    struct Tokens(std::sync::Mutex<String>);
    #[async_trait::async_trait]
    impl Observer for Tokens {
        async fn on_event(&self, _: &EventEnvelope) -> Result<(), ObserverError> {
            Ok(())
        }
        fn wants_tokens(&self) -> bool {
            true
        }
        fn on_token(&self, d: TokenDelta<'_>) {
            self.0.lock().unwrap().push_str(d.text);
        }
    }
    let server = MockServer::start(script("replies:\n  - content: streamed answer here\n"))
        .await
        .unwrap();
    let kernel = Kernel::new(
        KernelConfig::default(),
        Arc::new(OpenAiPlugin),
        Arc::new(HttpBackend::new(EndpointSettings::new("mock", server.base_url())).unwrap()),
        Arc::new(ToolEngine::new()),
        None,
    );
    let tokens = Arc::new(Tokens::default());
    let sink = EventSink::new(RunContext::default(), 1, tokens.clone());
    let result = kernel
        .run(vec![Message::user("x")], &sink, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        result.final_message.content.as_deref(),
        Some("streamed answer here")
    );
    assert_eq!(*tokens.0.lock().unwrap(), "streamed answer here");
    assert_eq!(server.requests()[0]["stream"], Value::Bool(true));
}

/// A model reply of exactly `max_response_bytes` is read; one byte more is
/// a `too_large` error naming the endpoint and the cap, not retried.
#[tokio::test]
async fn a_model_reply_one_byte_over_max_response_bytes_is_refused() {
    use structured_agents::client::{ChatBackend, ChatRequest, ClientError};
    let raw = json!({"choices": [{"message": {"role": "assistant", "content": "fits exactly"}}]})
        .to_string();
    let server = MockServer::start(script(&format!(
        "replies:\n  - raw_body: {}\n",
        serde_json::to_string(&raw).unwrap()
    )))
    .await
    .unwrap();
    let request = ChatRequest {
        body: json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
            .as_object()
            .unwrap()
            .clone(),
    };
    let backend = |cap: usize| {
        let mut settings = EndpointSettings::new("small", server.base_url());
        settings.max_response_bytes = cap;
        settings.max_retries = 0;
        HttpBackend::new(settings).unwrap()
    };
    let fits = backend(raw.len()).complete(&request, None).await.unwrap();
    assert_eq!(fits.message.content.as_deref(), Some("fits exactly"));
    let over = backend(raw.len() - 1)
        .complete(&request, None)
        .await
        .unwrap_err();
    assert!(
        matches!(&over, ClientError::TooLarge { limit, .. } if *limit == raw.len() - 1),
        "{over:?}"
    );
    assert!(over.to_string().contains("max_response_bytes") && !over.is_retryable());
}

/// `ModelResponse` means what the Python kernel's did: `content` is the
/// reply as the server sent it (tool-call text included) and
/// `tool_calls_count` counts the native `tool_calls`; what the model plugin
/// parsed is `parsed_content` and `parsed_tool_calls_count`.
#[tokio::test]
async fn model_response_keeps_the_python_kernels_meanings_and_adds_the_parsed_values() {
    let yaml = r#"
replies:
  - content: "Adding.\n<tool_call>\n{\"name\": \"fast_echo\", \"arguments\": {\"n\": 1}}\n</tool_call>"
  - tool_calls: [{id: n1, name: fast_echo, arguments: {n: 2}}]
  - content: "done"
"#;
    let server = MockServer::start(script(yaml)).await.unwrap();
    let mut tools = ToolEngine::new();
    tools.add(
        TestTool::arc("fast_echo", Behaviour::Echo(Duration::ZERO)),
        ToolPolicy::default(),
    );
    let kernel = Kernel::new(
        KernelConfig::default(),
        Arc::new(structured_agents::model::QwenPlugin::new(Default::default())),
        Arc::new(HttpBackend::new(EndpointSettings::new("mock", server.base_url())).unwrap()),
        Arc::new(tools),
        None,
    );
    let recorder = Arc::new(Recorder::default());
    let sink = EventSink::new(RunContext::default(), 1, recorder.clone());
    kernel
        .run(vec![Message::user("x")], &sink, CancellationToken::new())
        .await
        .unwrap();
    let responses: Vec<_> = recorder
        .events()
        .into_iter()
        .filter_map(|e| match e.event {
            Event::ModelResponse {
                content,
                parsed_content,
                tool_calls_count,
                parsed_tool_calls_count,
                ..
            } => Some((
                content,
                parsed_content,
                tool_calls_count,
                parsed_tool_calls_count,
            )),
            _ => None,
        })
        .collect();
    assert_eq!(responses.len(), 3, "{responses:?}");
    let (raw, parsed, native, calls) = &responses[0];
    assert_eq!(parsed.as_deref(), Some("Adding."));
    assert!(
        raw.as_deref()
            .is_some_and(|r| r.starts_with("Adding.\n<tool_call>")),
        "{raw:?}"
    );
    assert_eq!((*native, *calls), (0, 1));
    let (raw, _, native, calls) = &responses[1];
    assert_eq!((raw.as_deref(), *native, *calls), (None, 1, 1));
    let (raw, parsed, native, calls) = &responses[2];
    assert_eq!(parsed.as_deref(), Some("done"));
    assert_eq!((raw.as_deref(), *native, *calls), (Some("done"), 0, 0));

    // On the wire (the event log, SSE, observer plugins) under these names.
    let wire = recorder
        .events()
        .into_iter()
        .find(|e| matches!(e.event, Event::ModelResponse { turn: 1, .. }))
        .map(|e| serde_json::to_value(&e).unwrap())
        .unwrap();
    assert_eq!(wire["parsed_content"], "Adding.", "{wire}");
    assert_eq!(wire["tool_calls_count"], 0, "{wire}");
    assert_eq!(wire["parsed_tool_calls_count"], 1, "{wire}");
    assert!(
        wire["content"]
            .as_str()
            .is_some_and(|c| c.contains("<tool_call>")),
        "{wire}"
    );
    assert!(wire.get("raw_content").is_none(), "{wire}");
}

/// A call id with a NUL (or another control character) is never kept: the
/// daemon's own key of the call replaces it before anything records it, in
/// the history, the events and the next request alike.
#[tokio::test]
async fn a_call_id_with_a_nul_is_replaced_by_the_daemons_key() {
    let script = "replies:\n  - tool_calls:\n      - {id: \"bad\\0id\", name: fast_echo, arguments: {n: 1}}\n      - {id: \"line\\nbreak\", name: fast_echo, arguments: {n: 2}}\n      - {id: fine_id, name: fast_echo, arguments: {n: 3}}\n  - content: done\n";
    let h = harness(script, KernelConfig::default(), |_| {}).await;
    let result = h.run(CancellationToken::new()).await.unwrap();
    let ids: Vec<&str> = result.history[2]
        .tool_calls
        .iter()
        .map(|c| c.id.as_str())
        .collect();
    assert_eq!(ids, ["call_1_0", "call_1_1", "fine_id"]);
    let answered: Vec<&str> = result.history[3..6]
        .iter()
        .filter_map(|m| m.tool_call_id.as_deref())
        .collect();
    assert_eq!(answered, ["call_1_0", "call_1_1", "fine_id"]);
    let events = h.recorder.events();
    assert!(
        events
            .iter()
            .all(|e| !serde_json::to_string(&e.event).unwrap().contains("\\u0000")),
        "no event carries the NUL"
    );
    let second = h.server.requests()[1].to_string();
    assert!(
        second.contains("\"call_1_0\"") && !second.contains("\\u0000"),
        "{second}"
    );
}
