//! `http_agent` tools against a real HTTP agent on 127.0.0.1.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use common::Recorder;
use serde_json::{Value, json};
use structured_agents::egress::Egress;
use structured_agents::events::{EventSink, RunContext};
use structured_agents::tools::ToolEngine;
use structured_agents::tools::ToolPolicy;
use structured_agents::tools::http_agent::{HttpAgentTool, MessageType};
use structured_agents::types::{ToolCall, ToolSchema};
use tokio_util::sync::CancellationToken;

type Seen = Arc<Mutex<Vec<Value>>>;

/// The reply to `pad` and `pad-chunked`: `{"content":"aaa…"}`, exactly
/// `REPLY_BYTES` bytes (with and without a Content-Length).
const REPLY_BYTES: usize = 114;

fn padded_reply() -> String {
    let reply = json!({"content": "a".repeat(100)}).to_string();
    assert_eq!(reply.len(), REPLY_BYTES);
    reply
}

async fn agent(
    State(seen): State<Seen>,
    headers: axum::http::HeaderMap,
    Json(message): Json<Value>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    match message["content"].as_str() {
        Some("pad") => {
            return ([("content-type", "application/json")], padded_reply()).into_response();
        }
        // A redirect to the same agent: never followed (the Location is a
        // second URL the egress rule did not check).
        Some("redirect") => {
            seen.lock().unwrap().push(message.clone());
            return (
                StatusCode::TEMPORARY_REDIRECT,
                [("location", "/messages")],
                "moved",
            )
                .into_response();
        }
        Some("pad-chunked") => {
            let chunks = padded_reply()
                .into_bytes()
                .chunks(10)
                .map(|c| Ok::<_, std::io::Error>(c.to_vec()))
                .collect::<Vec<_>>();
            return axum::body::Body::from_stream(futures::stream::iter(chunks)).into_response();
        }
        _ => {}
    }
    answer(State(seen), headers, Json(message))
        .await
        .into_response()
}

async fn answer(
    State(seen): State<Seen>,
    headers: axum::http::HeaderMap,
    Json(mut message): Json<Value>,
) -> (StatusCode, Json<Value>) {
    // Kept beside the envelope so tests can see what each attempt sent.
    message["_idempotency_key"] =
        json!(headers.get("idempotency-key").and_then(|v| v.to_str().ok()));
    seen.lock().unwrap().push(message.clone());
    let content = message["content"].as_str().unwrap_or_default().to_string();
    let attempts = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|m| m["content"] == content.as_str())
        .count();
    match content.as_str() {
        "flaky" if attempts == 1 => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"error": {"message": "warming up"}})),
        ),
        "bad" => (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": {"message": "no such task"}})),
        ),
        "slow" => {
            // Longer than any test waits: only the caller's timeout ends it.
            tokio::time::sleep(Duration::from_secs(600)).await;
            (StatusCode::OK, Json(json!({"content": "late"})))
        }
        other => (
            StatusCode::OK,
            Json(
                json!({"messageId": "r1", "content": format!("agent says: {other}"), "type": "response"}),
            ),
        ),
    }
}

/// An engine whose `ask` calls the agent with a per-attempt timeout long
/// enough that only a hanging agent meets it.
async fn setup() -> (ToolEngine, Seen, EventSink) {
    setup_with(Duration::from_secs(30)).await
}

async fn setup_with(timeout: Duration) -> (ToolEngine, Seen, EventSink) {
    setup_capped(
        timeout,
        structured_agents::tools::http_agent::DEFAULT_MAX_RESPONSE_BYTES,
    )
    .await
}

async fn setup_capped(timeout: Duration, cap: usize) -> (ToolEngine, Seen, EventSink) {
    setup_tool(timeout, cap, MessageType::default()).await
}

async fn setup_tool(
    timeout: Duration,
    cap: usize,
    message_type: MessageType,
) -> (ToolEngine, Seen, EventSink) {
    let seen: Seen = Arc::default();
    let app = axum::Router::new()
        .route("/messages", post(agent))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/messages", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let schema = ToolSchema {
        name: "ask".into(),
        description: String::new(),
        parameters: HttpAgentTool::default_parameters(),
    };
    let mut engine = ToolEngine::new();
    let mut policy = ToolPolicy::compile(timeout, 1, None, None).unwrap();
    policy.retry_backoff = Duration::from_millis(1);
    engine.add(
        Arc::new(
            HttpAgentTool::new(schema, url, "researcher".into(), cap, Some(&loopback()))
                .unwrap()
                .with_message_type(message_type),
        ),
        policy,
    );
    let context = RunContext {
        run_id: "job-9".into(),
        bundle: "b".into(),
        bundle_version: "1".into(),
        parent: None,
    };
    (
        engine,
        seen,
        EventSink::new(context, 1, Arc::new(Recorder::default())),
    )
}

/// The agents of these tests listen on loopback, which the egress rule
/// denies unless `egress.allow` names it.
fn loopback() -> Egress {
    Egress::new(Some(&["http://127.0.0.1:*".to_string()])).unwrap()
}

async fn ask(
    engine: &ToolEngine,
    sink: &EventSink,
    content: &str,
) -> structured_agents::tools::ToolOutcome {
    let call = ToolCall::new("c1", "ask", json!({"content": content}));
    engine
        .execute(&call, 1, &CancellationToken::new(), sink)
        .await
}

#[tokio::test]
async fn posts_the_envelope_and_returns_the_reply_content() {
    let (engine, seen, sink) = setup().await;
    let out = ask(&engine, &sink, "find sources").await;
    assert_eq!(out.result.output, "\"agent says: find sources\"");
    let message = seen.lock().unwrap()[0].clone();
    assert_eq!(message["conversationId"], "job-9");
    assert_eq!(message["recipientId"], "researcher");
    assert_eq!(message["senderId"], "runtime");
    // What the multi-agent runtime sent (`generate_request`).
    assert_eq!(message["type"], "Text");
    assert_eq!(message["_idempotency_key"], "job-9:1:0");
    assert!(uuid::Uuid::parse_str(message["messageId"].as_str().unwrap()).is_ok());
    let ts = message["timestamp"].as_str().unwrap();
    assert!(
        ts.ends_with('Z') && humantime::parse_rfc3339(ts).is_ok(),
        "{ts}"
    );
}

/// An agent whose message type is an enum read as a number (the
/// multi-agent runtime's .NET agent) is sent the `message_type` it was
/// given, a number as a number.
#[tokio::test]
async fn the_envelope_carries_the_agents_message_type() {
    for (message_type, sent) in [
        (MessageType::Number(0), json!(0)),
        (MessageType::Name("Greeting".into()), json!("Greeting")),
    ] {
        let (engine, seen, sink) = setup_tool(
            Duration::from_secs(30),
            structured_agents::tools::http_agent::DEFAULT_MAX_RESPONSE_BYTES,
            message_type,
        )
        .await;
        let out = ask(&engine, &sink, "say goodbye").await;
        assert!(!out.result.is_error, "{out:?}");
        assert_eq!(seen.lock().unwrap()[0]["type"], sent);
    }
}

#[tokio::test]
async fn errors_become_error_results() {
    let (engine, seen, sink) = setup().await;
    let flaky = ask(&engine, &sink, "flaky").await;
    assert_eq!(
        (flaky.result.is_error, flaky.attempts),
        (false, 2),
        "5xx is retried: {flaky:?}"
    );
    let keys: Vec<Value> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|m| m["content"] == "flaky")
        .map(|m| m["_idempotency_key"].clone())
        .collect();
    assert_eq!(
        keys,
        [json!("job-9:1:0"), json!("job-9:1:0")],
        "the same key on every attempt"
    );
    let bad = ask(&engine, &sink, "bad").await;
    assert_eq!(
        bad.result.output,
        "tool_error:agent researcher answered HTTP 400 Bad Request: no such task"
    );
    // A short timeout for the agent that never answers.
    let (engine, _, sink) = setup_with(Duration::from_millis(500)).await;
    let slow = ask(&engine, &sink, "slow").await;
    assert_eq!(
        (slow.result.output.as_str(), slow.attempts),
        ("tool_error:timeout", 1)
    );
}

/// A reply of exactly `max_response_bytes` is read; one byte more is a
/// failure naming the agent and the cap, whether the agent announced its
/// length or streamed the body.
#[tokio::test]
async fn a_reply_one_byte_over_max_response_bytes_is_refused() {
    let (engine, _, sink) = setup_capped(Duration::from_secs(30), REPLY_BYTES).await;
    for content in ["pad", "pad-chunked"] {
        let fits = ask(&engine, &sink, content).await;
        assert!(!fits.result.is_error, "{content}: {fits:?}");
        assert_eq!(fits.result.output, format!("\"{}\"", "a".repeat(100)));
    }
    let (engine, _, sink) = setup_capped(Duration::from_secs(30), REPLY_BYTES - 1).await;
    for content in ["pad", "pad-chunked"] {
        let over = ask(&engine, &sink, content).await;
        assert!(over.result.is_error, "{content}: {over:?}");
        assert!(
            over.result.output.contains("agent researcher at http://")
                && over.result.output.contains(&format!(
                    "sent a reply larger than max_response_bytes ({} bytes)",
                    REPLY_BYTES - 1
                ))
                && over.result.output.contains("raise `max_response_bytes`"),
            "{content}: {}",
            over.result.output
        );
        assert_eq!(over.attempts, 1, "{content}: not retried");
    }
}

/// A bundle's own agent URL on this machine is refused when the tool is
/// made, unless `egress.allow` names it; a redirect is an error, not a
/// second request.
#[tokio::test]
async fn an_agent_on_this_machine_needs_egress_allow_and_redirects_are_not_followed() {
    let schema = ToolSchema {
        name: "ask".into(),
        description: String::new(),
        parameters: HttpAgentTool::default_parameters(),
    };
    for url in [
        "http://127.0.0.1:9/messages",
        "http://2130706433:9/messages",
        "http://[::ffff:127.0.0.1]:9/messages",
        "http://localhost:9/messages",
    ] {
        let refused = HttpAgentTool::new(
            schema.clone(),
            url.into(),
            "researcher".into(),
            1024,
            Some(&Egress::default()),
        );
        let err = refused.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("egress.allow"), "{url}: {err}");
    }
    let (engine, seen, sink) = setup().await;
    let out = ask(&engine, &sink, "redirect").await;
    assert!(out.result.is_error, "{out:?}");
    assert!(out.result.output.contains("307"), "{}", out.result.output);
    assert_eq!(seen.lock().unwrap().len(), 1, "the redirect was followed");
}
