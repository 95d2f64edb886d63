//! One way in: the same table of cases through every route that starts a
//! job — `POST /v1/jobs`, the batch, `/v1/chat/completions`,
//! `/api/agents/{id}/message`, `/api/query`, `/api/group-chat` and MCP
//! `tools/call` — gets the same answers, spelled in each wire's format: no
//! key 401, a key without `submit` 403, a bundle outside the key's globs
//! refused, a NUL byte refused naming the field, a key at its jobs-in-flight
//! cap 429 with `Retry-After` (on the OpenAI route too), and a good request
//! admitted. Controls sent as variables are refused naming the variable.

mod common;

use std::time::Duration;

use common::daemon::{Daemon, Site, client, eventually, new_key};
use common::mock_server;
use serde_json::{Value, json};

const SCRIPT: &str = r#"
replies:
  - {match: slow, content: DONE, delay_ms: 30000}
  - content: DONE
"#;

const AGENT: &str = "name: helper\nversion: \"1\"\ndescription: Helps.\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\nagent: {name: Helper}\n";
const ROUTER: &str = "name: router\nversion: \"1\"\ndescription: Routes.\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\n";
const GROUP: &str = "name: group-chat\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {system: \"You moderate.\", user: \"{{ input }}\"}\ngroup_chat: {max_rounds: 1, stop_word: DONE}\n";

/// The routes that start a job.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Way {
    Jobs,
    Batch,
    Chat,
    AgentMessage,
    Query,
    GroupChat,
    Mcp,
}

const WAYS: [Way; 7] = [
    Way::Jobs,
    Way::Batch,
    Way::Chat,
    Way::AgentMessage,
    Way::Query,
    Way::GroupChat,
    Way::Mcp,
];

/// What a way in answered: the HTTP status, whether `Retry-After` came,
/// and the body (for MCP, the JSON-RPC message of the call).
#[derive(Debug)]
struct Answer {
    status: u16,
    retry_after: bool,
    body: Value,
}

impl Answer {
    /// The refusal's text, wherever the wire puts it.
    fn text(&self) -> String {
        self.body.to_string()
    }

    /// An MCP call's outcome: a JSON-RPC error or an error result.
    fn mcp_refused(&self) -> bool {
        self.body.get("error").is_some() || self.body["result"]["isError"] == true
    }
}

async fn ask(daemon: &Daemon, way: Way, token: Option<&str>, bundle: &str, input: &str) -> Answer {
    let http = client();
    let (path, body) = match way {
        Way::Jobs => (
            "/v1/jobs".to_string(),
            json!({"bundle": bundle, "input": input}),
        ),
        Way::Batch => (
            "/v1/jobs/batch".to_string(),
            json!({"jobs": [{"bundle": bundle, "input": input}]}),
        ),
        Way::Chat => (
            "/v1/chat/completions".to_string(),
            json!({"model": format!("bundle/{bundle}"), "messages": [{"role": "user", "content": input}]}),
        ),
        Way::AgentMessage => (
            format!("/api/agents/{bundle}/message"),
            json!({"content": input}),
        ),
        // The runtime's configured router and group-chat host are the bundles.
        Way::Query => ("/api/query".to_string(), json!({"query": input})),
        Way::GroupChat => (
            "/api/group-chat".to_string(),
            json!({"query": input, "agent_ids": ["helper"], "max_iterations": 1}),
        ),
        Way::Mcp => return mcp_call(daemon, token, bundle, input).await,
    };
    let mut request = http.post(daemon.url(&path)).json(&body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let retry_after = response.headers().contains_key("retry-after");
    let text = response.text().await.unwrap();
    Answer {
        status,
        retry_after,
        body: serde_json::from_str(&text).unwrap_or(Value::String(text)),
    }
}

/// `initialize`, `initialized`, then `tools/call` of `bundle`; a refusal
/// at the HTTP level is answered as such.
async fn mcp_call(daemon: &Daemon, token: Option<&str>, bundle: &str, input: &str) -> Answer {
    let http = client();
    let post = |session: Option<String>, body: Value| {
        let mut request = http
            .post(daemon.url("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        request.send()
    };
    let init = post(
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "admission-test", "version": "1"}}}),
    )
    .await
    .unwrap();
    if init.status() != 200 {
        let status = init.status().as_u16();
        return Answer {
            status,
            retry_after: init.headers().contains_key("retry-after"),
            body: init.json().await.unwrap_or(Value::Null),
        };
    }
    let session = init.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    let _ = init.text().await;
    let _ = post(
        Some(session.clone()),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await
    .unwrap();
    let call = post(
        Some(session),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": bundle, "arguments": {"input": input}}}),
    )
    .await
    .unwrap();
    let status = call.status().as_u16();
    let text = call.text().await.unwrap();
    // Streamable HTTP answers as SSE: the message is the `data:` line.
    let message = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|m| m["id"] == 2)
        .or_else(|| serde_json::from_str(&text).ok())
        .unwrap_or(Value::String(text));
    Answer {
        status,
        retry_after: false,
        body: message,
    }
}

/// The bundle each way in is pointed at (query and group chat use the
/// runtime's configured bundles whatever is asked).
fn bundle_of(way: Way) -> &'static str {
    match way {
        Way::Query => "router",
        Way::GroupChat => "group-chat",
        _ => "helper",
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_way_in_answers_the_same_table_of_cases_the_same_way() {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(
        &server.base_url(),
        "[auth]\nkeys_file = \"keys.toml\"\n\n[runtime]\nrouter = \"router\"\ngroup_chat = \"group-chat\"\n",
    );
    let file = site.path().join("keys.toml");
    let key = |name: &str, args: &[&str]| new_key(&file, name, args);
    let full = key("full", &["--scopes", "submit,read"]);
    let reader = key("reader", &["--scopes", "read"]);
    let elsewhere = key(
        "elsewhere",
        &["--scopes", "submit", "--bundles", "nothing-*"],
    );
    let busy = key("busy", &["--scopes", "submit,read", "--max-in-flight", "1"]);
    site.put_bundle("helper", AGENT);
    site.put_bundle("router", ROUTER);
    site.put_bundle("group-chat", GROUP);
    let daemon = site.start();

    // The busy key holds its one job in flight for the whole test.
    let held = ask(&daemon, Way::Jobs, Some(&busy), "helper", "slow").await;
    assert_eq!(held.status, 201, "{:?}", held);

    for way in WAYS {
        let bundle = bundle_of(way);
        let no_key = ask(&daemon, way, None, bundle, "hello").await;
        assert_eq!(no_key.status, 401, "{way:?} without a key: {no_key:?}");

        let no_scope = ask(&daemon, way, Some(&reader), bundle, "hello").await;
        assert_eq!(no_scope.status, 403, "{way:?} without submit: {no_scope:?}");
        if way != Way::Mcp {
            assert!(
                no_scope.text().contains("`submit` scope"),
                "{way:?}: {no_scope:?}"
            );
        }

        let outside = ask(&daemon, way, Some(&elsewhere), bundle, "hello").await;
        match way {
            // OpenAI's wire says an unknown model is a 404.
            Way::Chat => assert_eq!(outside.status, 404, "{outside:?}"),
            Way::Mcp => assert!(outside.mcp_refused(), "{outside:?}"),
            // The runtime looks the agent up in the key's directory first.
            Way::AgentMessage => assert!([404, 422].contains(&outside.status), "{outside:?}"),
            _ => assert_eq!(outside.status, 422, "{way:?}: {outside:?}"),
        }

        let nul = ask(&daemon, way, Some(&full), bundle, "a\u{0}b").await;
        match way {
            Way::Chat => assert_eq!(nul.status, 400, "{nul:?}"),
            Way::Mcp => assert!(nul.mcp_refused() && nul.text().contains("NUL"), "{nul:?}"),
            _ => assert_eq!(nul.status, 422, "{way:?}: {nul:?}"),
        }
        if way != Way::Mcp {
            assert!(nul.text().contains("NUL"), "{way:?}: {nul:?}");
        }

        let quota = ask(&daemon, way, Some(&busy), bundle, "hello").await;
        if way == Way::Mcp {
            assert!(
                quota.mcp_refused() && quota.text().contains("max_in_flight"),
                "{quota:?}"
            );
        } else {
            assert_eq!(quota.status, 429, "{way:?}: {quota:?}");
            assert!(quota.retry_after, "{way:?} without Retry-After: {quota:?}");
            assert!(quota.text().contains("max_in_flight"), "{way:?}: {quota:?}");
        }

        let ok = ask(&daemon, way, Some(&full), bundle, "hello").await;
        assert!((200..300).contains(&ok.status), "{way:?}: {ok:?}");
        if way == Way::Mcp {
            assert!(!ok.mcp_refused(), "{ok:?}");
        }
    }

    // Each refusal is counted, by key and reason; each way in counted once.
    let http = client();
    let quota = "structured_agents_submissions_refused_total{key=\"busy\",reason=\"quota\"}";
    assert_eq!(
        common::daemon::metric(&http, &daemon, quota).await,
        WAYS.len() as u64
    );
    let nul = "structured_agents_submissions_refused_total{key=\"full\",reason=\"invalid\"}";
    // MCP refuses before admission only what its wire cannot carry.
    assert!(common::daemon::metric(&http, &daemon, nul).await >= WAYS.len() as u64 - 1);
    let unauthorized = "structured_agents_http_requests_refused_total{reason=\"unauthorized\"}";
    assert!(common::daemon::metric(&http, &daemon, unauthorized).await >= WAYS.len() as u64);

    // Every admitted job is owned by the key that asked.
    let jobs = eventually(Duration::from_secs(10), "the jobs are listed", || async {
        let response = client()
            .get(daemon.url("/v1/jobs?limit=100"))
            .bearer_auth(&full)
            .send()
            .await
            .ok()?;
        let body: Value = response.json().await.ok()?;
        Some(body["jobs"].as_array()?.clone())
    })
    .await;
    assert!(jobs.len() >= WAYS.len(), "{jobs:?}");
    assert!(jobs.iter().all(|j| j["owner"] == "full"), "{jobs:?}");
}

/// The controls a job's variables carry are admission's rules too, checked
/// against the bundle as loaded: a group chat's plan comes only from the
/// runtime API, `tools` narrows only an agent bundle's own tools, and
/// `only_stage` names a stage of a workflow. Each refusal is a 422 naming
/// the variable and saying what to do.
#[tokio::test(flavor = "multi_thread")]
async fn controls_sent_as_variables_are_refused_naming_the_variable() {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("helper", AGENT);
    site.put_bundle("group-chat", GROUP);
    let daemon = site.start();
    let cases = [
        (
            "group-chat",
            json!({"group_chat": {"agents": []}}),
            "variables.group_chat",
            "is set by the daemon",
        ),
        (
            "group-chat",
            json!({"tools": ["echo"]}),
            "variables.tools",
            "is a group-chat host (leave the variable out)",
        ),
        (
            "helper",
            json!({"tools": ["nope"]}),
            "variables.tools",
            "no tool named nope",
        ),
        (
            "helper",
            json!({"only_stage": "review"}),
            "variables.only_stage",
            "has no `workflow:` section",
        ),
    ];
    for (bundle, variables, field, says) in cases {
        let response = client()
            .post(daemon.url("/v1/jobs"))
            .json(&json!({"bundle": bundle, "input": "hello", "variables": variables}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 422, "{bundle} {variables}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["field"], field, "{body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{variables}: {body}");
    }
}
