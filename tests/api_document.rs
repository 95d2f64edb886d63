//! The API document the daemon serves (`/v1/openapi.json`), generated from
//! the routes (src/api/document.rs): it describes every route the router
//! is built from, each operation says its success and the errors its
//! request layer answers, and every reference in it resolves. Schemathesis
//! (tests/fuzz_api.rs) checks the answers against it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::daemon::{Site, client, get, post_json};
use common::mock_server;
use serde_json::{Value, json};

/// Routes the document does not describe, and why.
const UNDESCRIBED: [(&str, &str); 3] = [
    ("/ui", "the console's page, not an API"),
    ("/ui/", "the console's page, not an API"),
    (
        "/ui/{*path}",
        "the console's scripts and styles, not an API",
    ),
];

/// Routes the document spells another way, and why.
const SPELLED: [(&str, &str, &str); 1] = [(
    "/bundles/{name}/tools/{tool_run}",
    "/bundles/{name}/tools/{tool}:run",
    "the route takes `{tool}:run` as one segment (axum captures whole segments)",
)];

/// Where a route declared in `src/api` is served: at its own path, or
/// nested under `/v1` (the job API) or `/api` (the runtime API).
fn served_as<'d>(route: &str, paths: &'d BTreeSet<String>) -> Option<&'d String> {
    let route = SPELLED
        .iter()
        .find(|(declared, _, _)| *declared == route)
        .map_or(route, |(_, spelled, _)| spelled);
    ["", "/v1", "/api"]
        .iter()
        .map(|prefix| format!("{prefix}{route}"))
        .find_map(|path| paths.get(&path))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_describes_every_route_and_each_operation_its_answers() {
    let mock = mock_server("replies:\n  - content: hi\n").await;
    let site = Site::new(&mock.base_url(), "");
    let daemon = site.start();
    let document = get(&client(), &daemon, "/v1/openapi.json").await;
    assert_eq!(document["openapi"], "3.1.0", "{document:#}");
    let paths: BTreeSet<String> = document["paths"]
        .as_object()
        .expect("the document has paths")
        .keys()
        .cloned()
        .collect();

    let undescribed: Vec<&str> = UNDESCRIBED.iter().map(|(route, _)| *route).collect();
    let missing: Vec<String> = common::routes::routes()
        .into_iter()
        .filter(|(route, _, _)| !undescribed.contains(&route.as_str()))
        .filter(|(route, _, _)| served_as(route, &paths).is_none())
        .map(|(route, _, file)| format!("{file}: {route}"))
        .collect();
    assert!(
        missing.is_empty(),
        "routes the API document does not describe:\n{}",
        missing.join("\n")
    );

    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            if !["get", "post", "put", "patch", "delete"].contains(&method.as_str()) {
                continue;
            }
            let responses = operation["responses"]
                .as_object()
                .unwrap_or_else(|| panic!("{method} {path} has no responses: {operation:#}"));
            // A WebSocket's success is its upgrade (101).
            assert!(
                responses
                    .keys()
                    .any(|code| code.starts_with('2') || code == "101"),
                "{method} {path} names no success: {operation:#}"
            );
            let takes_body = ["post", "put", "patch"].contains(&method.as_str());
            // A JSON-RPC interface answers a body it cannot read with a
            // JSON-RPC error, not the request layer's 415.
            let json_rpc = operation["x-errors-as-json-rpc"] == true;
            if takes_body && !json_rpc {
                // The request layer's answers (a wrong Content-Type, a body too
                // large or too slow) are on every write.
                for code in ["408", "413", "415"] {
                    assert!(
                        responses.contains_key(code),
                        "{method} {path} lacks {code}: {operation:#}"
                    );
                }
            }
        }
    }

    // The probes and the document need no key; reload takes an API key or
    // the control file's reload key; nothing is required document-wide.
    assert!(
        document.get("security").is_none(),
        "{:#}",
        document["security"]
    );
    for path in ["/healthz", "/readyz", "/metrics", "/v1/openapi.json"] {
        let operation = &document["paths"][path]["get"];
        assert!(operation.is_object(), "{path} is not described");
        assert!(operation.get("security").is_none(), "{path}: {operation:#}");
    }
    assert_eq!(
        document["paths"]["/v1/reload"]["post"]["security"],
        json!([{"bearer": []}, {"api_key": []}, {"reload_key": []}])
    );
    let run = &document["paths"]["/v1/bundles/{name}/tools/{tool}:run"]["post"];
    let names: Vec<&str> = run["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["name", "tool"], "{run:#}");

    let mut refs = Vec::new();
    references(&document, &mut refs);
    assert!(refs.len() > 20, "few references: {refs:?}");
    for reference in refs {
        let pointer = reference
            .strip_prefix('#')
            .unwrap_or_else(|| panic!("an outside reference: {reference}"));
        assert!(
            document.pointer(pointer).is_some(),
            "{reference} does not resolve in the document"
        );
    }
    assert_eq!(daemon.stop(), Some(0));
}

/// Every `$ref` in `value`.
fn references(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(reference)) = map.get("$ref") {
                out.push(reference.clone());
            }
            map.values().for_each(|v| references(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| references(v, out)),
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_and_an_error_match_their_schemas_in_the_document() {
    let mock = mock_server("replies:\n  - content: hi\n").await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle(
        "echo",
        "name: echo\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\n",
    );
    let daemon = site.start();
    let http = client();
    let document = get(&http, &daemon, "/v1/openapi.json").await;
    let job = common::daemon::submit_and_wait(
        &http,
        &daemon,
        json!({"bundle": "echo", "input": "hello"}),
        Duration::from_secs(120),
    )
    .await;
    let id = job["id"].as_str().unwrap();
    let read = get(&http, &daemon, &format!("/v1/jobs/{id}")).await;
    conforms(&document, "/v1/jobs/{id}", "get", "200", &read);
    let missing = http
        .get(daemon.url("/v1/jobs/no-such-job"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    let body: Value = missing.json().await.unwrap();
    conforms(&document, "/v1/jobs/{id}", "get", "404", &body);
    // A document that accepted anything would pass the above: a job with a
    // state the daemon has not is refused by the same schema.
    let mut wrong = read.clone();
    wrong["state"] = Value::from("sleeping");
    assert!(!valid(&document, "/v1/jobs/{id}", "get", "200", &wrong));
    assert_eq!(daemon.stop(), Some(0));
}

/// The A2A and MCP interfaces are described from the types they read and
/// write: a served card, a JSON-RPC result and error, and a refusal of the
/// MCP transport match the document.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2a_and_mcp_answers_match_their_schemas_in_the_document() {
    let mock = mock_server("replies:\n  - content: hi\n").await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle(
        "echo",
        "name: echo\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\n",
    );
    let daemon = site.start();
    let http = client();
    let document = get(&http, &daemon, "/v1/openapi.json").await;
    let card = get(&http, &daemon, "/.well-known/agent-card.json").await;
    conforms(
        &document,
        "/.well-known/agent-card.json",
        "get",
        "200",
        &card,
    );
    let beside = get(&http, &daemon, "/a2a/.well-known/agent-card.json").await;
    conforms(
        &document,
        "/a2a/.well-known/agent-card.json",
        "get",
        "200",
        &beside,
    );
    assert_eq!(beside, card, "the same card beside its interface");
    let bundle_card = get(&http, &daemon, "/a2a/echo/.well-known/agent-card.json").await;
    conforms(
        &document,
        "/a2a/{bundle}/.well-known/agent-card.json",
        "get",
        "200",
        &bundle_card,
    );
    assert_eq!(bundle_card["skills"][0]["id"], "echo", "{bundle_card:#}");

    let call = |method: &str, params: Value| {
        http.post(daemon.url("/a2a/echo"))
            .json(&json!({"jsonrpc": "2.0", "id": 3, "method": method, "params": params}))
    };
    let message = json!({"message": {"messageId": "doc-1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}});
    let sent: Value = call("SendMessage", message)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(sent["result"]["task"]["id"].is_string(), "{sent:#}");
    conforms(&document, "/a2a/{bundle}", "post", "200", &sent);
    let unknown: Value = call("message/send", json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(unknown["error"]["code"], -32601, "{unknown:#}");
    conforms(&document, "/a2a/{bundle}", "post", "200", &unknown);
    // The methods the document lists are the ones the interface serves.
    let methods = document
        .pointer("/components/schemas/A2aMethod/enum")
        .cloned();
    assert!(
        methods
            .as_ref()
            .and_then(Value::as_array)
            .is_some_and(|m| m.contains(&json!("SubscribeToTask"))),
        "the document names the A2A methods: {methods:?}"
    );

    let no_session = http
        .post(daemon.url("/mcp"))
        .header("Accept", "application/json, text/event-stream")
        .header("Mcp-Session-Id", "no-such-session")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(no_session.status(), 404);
    let refused: Value = no_session.json().await.unwrap();
    conforms(&document, "/mcp", "post", "404", &refused);
    let request =
        &document["paths"]["/mcp"]["post"]["requestBody"]["content"]["application/json"]["schema"];
    assert!(
        request.is_object(),
        "the MCP message is described: {request:#}"
    );
    assert_eq!(daemon.stop(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_wires_bodies_and_answers_match_their_schemas_in_the_document() {
    let mock = mock_server("replies:\n  - content: hi\n").await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle(
        "echo",
        "name: echo\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\n",
    );
    let daemon = site.start();
    let http = client();
    let document = get(&http, &daemon, "/v1/openapi.json").await;

    let chat = json!({"model": "bundle/echo", "n": 1, "tool_choice": "auto",
                      "messages": [{"role": "system", "content": "Be brief."},
                                   {"role": "user", "content": [{"type": "text", "text": "hello"}]}]});
    takes(&document, "/v1/chat/completions", &chat);
    let (status, completion) = post_json(&http, &daemon, "/v1/chat/completions", chat).await;
    assert_eq!(status, 200, "{completion}");
    conforms(
        &document,
        "/v1/chat/completions",
        "post",
        "200",
        &completion,
    );
    // A document that accepted anything would pass the above.
    let mut wrong = completion.clone();
    wrong["choices"][0]["finish_reason"] = json!("length");
    assert!(!valid(
        &document,
        "/v1/chat/completions",
        "post",
        "200",
        &wrong
    ));
    let unknown = json!({"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]});
    let (status, error) = post_json(&http, &daemon, "/v1/chat/completions", unknown).await;
    assert_eq!(status, 404, "{error}");
    conforms(&document, "/v1/chat/completions", "post", "404", &error);

    let models = get(&http, &daemon, "/v1/models").await;
    conforms(&document, "/v1/models", "get", "200", &models);

    let request = json!({"model": "bundle/echo", "instructions": "Be brief.",
                         "text": {"format": {"type": "text"}},
                         "input": [{"role": "user", "content": [{"type": "input_text", "text": "hello"}]}]});
    takes(&document, "/v1/responses", &request);
    let (status, response) = post_json(&http, &daemon, "/v1/responses", request).await;
    assert_eq!(status, 200, "{response}");
    assert_eq!(response["status"], "completed", "{response}");
    conforms(&document, "/v1/responses", "post", "200", &response);
    let id = response["id"].as_str().unwrap();
    let read = get(&http, &daemon, &format!("/v1/responses/{id}")).await;
    conforms(&document, "/v1/responses/{id}", "get", "200", &read);
    let items = get(&http, &daemon, &format!("/v1/responses/{id}/input_items")).await;
    assert_eq!(items["data"].as_array().map(Vec::len), Some(2), "{items}");
    conforms(
        &document,
        "/v1/responses/{id}/input_items",
        "get",
        "200",
        &items,
    );
    let deleted: Value = http
        .delete(daemon.url(&format!("/v1/responses/{id}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    conforms(&document, "/v1/responses/{id}", "delete", "200", &deleted);
    let missing = http
        .get(daemon.url(&format!("/v1/responses/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    let body: Value = missing.json().await.unwrap();
    conforms(&document, "/v1/responses/{id}", "get", "404", &body);
    assert_eq!(daemon.stop(), Some(0));
}

/// A bundle whose model calls its tool, then answers.
const CALLER: &str = r#"name: caller
version: "1"
model: {endpoint: mock, name: m}
prompts: {user: "{{ input }}"}
tools:
  - name: echo
    kind: process
    description: echo the arguments
    effect: read_only
    command: [python3, -c, "import json,sys; print(json.dumps(json.load(sys.stdin)))"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_wires_streamed_events_match_their_schemas_in_the_document() {
    let mock = mock_server(
        "replies:\n  - tool_calls: [{id: call-1, name: echo, arguments: {x: 1}}]\n  - content: the echo said 1\n",
    )
    .await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle("caller", CALLER);
    let daemon = site.start();
    let http = client();
    let document = get(&http, &daemon, "/v1/openapi.json").await;

    let request = json!({"model": "bundle/caller", "input": "echo 1", "stream": true});
    takes(&document, "/v1/responses", &request);
    let events = stream(&http, &daemon, "/v1/responses", &request).await;
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert!(kinds.contains(&"response.mcp_call.completed"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"response.completed"), "{kinds:?}");
    for event in &events {
        assert!(
            streamed_valid(&document, "/v1/responses", event),
            "a Responses event does not match the document: {event:#}"
        );
    }
    // The response as retrieved holds the call's item and the answer.
    let id = events[0]["response"]["id"].as_str().unwrap();
    let read = get(&http, &daemon, &format!("/v1/responses/{id}")).await;
    assert_eq!(read["output"][0]["type"], "mcp_call", "{read}");
    conforms(&document, "/v1/responses/{id}", "get", "200", &read);
    // A document that accepted anything would pass the above.
    let mut wrong = events[0].clone();
    wrong["type"] = json!("response.sleeping");
    assert!(!streamed_valid(&document, "/v1/responses", &wrong));

    let chat = json!({"model": "bundle/caller", "stream": true, "stream_options": {"include_usage": true},
                      "messages": [{"role": "user", "content": "echo 1"}]});
    takes(&document, "/v1/chat/completions", &chat);
    let chunks = stream(&http, &daemon, "/v1/chat/completions", &chat).await;
    assert!(chunks.len() > 3, "{chunks:?}");
    assert!(chunks.last().unwrap()["usage"].is_object(), "{chunks:?}");
    for chunk in &chunks {
        assert!(
            streamed_valid(&document, "/v1/chat/completions", chunk),
            "a chunk does not match the document: {chunk:#}"
        );
    }
    assert_eq!(daemon.stop(), Some(0));
}

/// The JSON `data` of each event `POST path` answers `body` with, up to
/// the stream's end (chat completions' `[DONE]` left out).
async fn stream(
    http: &reqwest::Client,
    daemon: &common::daemon::Daemon,
    path: &str,
    body: &Value,
) -> Vec<Value> {
    let response = http.post(daemon.url(path)).json(body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    text.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).unwrap())
        .collect()
}

/// Whether `data` matches the document's schema of one event's data in
/// the stream `POST path` answers.
fn streamed_valid(document: &Value, path: &str, data: &Value) -> bool {
    let schema = &document["paths"][path]["post"]["responses"]["200"]["content"]["text/event-stream"]
        ["schema"]["properties"]["data"]["contentSchema"];
    assert!(schema.is_object(), "POST {path} describes no event data");
    let mut root = schema.clone();
    root["components"] = document["components"].clone();
    let validator = jsonschema::validator_for(&root).expect("the schema compiles");
    validator.is_valid(data)
}

/// Asserts the document's request body of `POST path` takes `body`.
fn takes(document: &Value, path: &str, body: &Value) {
    let schema =
        &document["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"];
    assert!(schema.is_object(), "POST {path} has no JSON body schema");
    let mut root = schema.clone();
    root["components"] = document["components"].clone();
    let validator = jsonschema::validator_for(&root).expect("the schema compiles");
    assert!(
        validator.is_valid(body),
        "POST {path}: the document does not take the body {body:#}"
    );
}

/// A bundle with a tool, on a reply script (no model server): verify and
/// a tool run both answer.
const CALC: &str = r#"name: calc
version: "1"
model: {endpoint: "scripted:script.yaml", name: m}
prompts: {user: "{{ input }}"}
tools:
  - name: add
    kind: process
    effect: read_only
    description: adds a and b
    parameters: {type: object, properties: {a: {type: integer}, b: {type: integer}}, required: [a, b]}
    command: [python3, -c, "import json,sys; a=json.load(sys.stdin); print(json.dumps({'sum': a['a'] + a['b']}))"]
"#;

const SCRIPT: &str = r#"replies:
  - tool_calls: [{name: add, arguments: {a: 2, b: 3}, id: call_add}]
  - content: "5"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bundle_operations_reload_and_probes_match_their_schemas() {
    let site = Site::new("http://127.0.0.1:9/v1", "");
    site.put_bundle("calc", CALC);
    std::fs::write(site.path().join("bundles/calc/script.yaml"), SCRIPT).unwrap();
    let daemon = site.start();
    let http = client();
    let document = get(&http, &daemon, "/v1/openapi.json").await;
    for path in ["/healthz", "/readyz"] {
        let answer = get(&http, &daemon, path).await;
        conforms(&document, path, "get", "200", &answer);
    }
    let post = |path: &'static str, body: Value| {
        let (http, daemon) = (&http, &daemon);
        async move {
            let (status, answer) = post_json(http, daemon, path, body).await;
            assert_eq!(status, 200, "{path}: {answer:#}\n{}", daemon.log());
            answer
        }
    };
    let reloaded = post("/v1/reload", json!({})).await;
    conforms(&document, "/v1/reload", "post", "200", &reloaded);
    let plan = post("/v1/bundles/calc/migrate-jobs", json!({"dry_run": true})).await;
    conforms(
        &document,
        "/v1/bundles/{name}/migrate-jobs",
        "post",
        "200",
        &plan,
    );
    let arguments = json!({"arguments": {"a": 2, "b": 3}});
    for (url, path) in [
        (
            "/v1/bundles/calc/tools/add:run",
            "/v1/bundles/{name}/tools/{tool}:run",
        ),
        (
            "/v1/bundles/calc/tools/add/run",
            "/v1/bundles/{name}/tools/{tool}/run",
        ),
    ] {
        let ran = post(url, arguments.clone()).await;
        assert_eq!(ran["value"], json!({"sum": 5}), "{ran:#}");
        conforms(&document, path, "post", "200", &ran);
        // The answer's schema holds the call's result and the job's id.
        let mut wrong = ran.clone();
        wrong.as_object_mut().unwrap().remove("job_id");
        assert!(!valid(&document, path, "post", "200", &wrong));
    }
    let report = post("/v1/bundles/calc/verify", json!({})).await;
    conforms(
        &document,
        "/v1/bundles/{name}/verify",
        "post",
        "200",
        &report,
    );
    let mut wrong = report.clone();
    wrong["crash_points"][0]["moment"] = json!("during");
    assert!(!valid(
        &document,
        "/v1/bundles/{name}/verify",
        "post",
        "200",
        &wrong
    ));
    assert_eq!(daemon.stop(), Some(0));
}

fn conforms(document: &Value, path: &str, method: &str, status: &str, body: &Value) {
    assert!(
        valid(document, path, method, status, body),
        "{method} {path} {status}: the answer does not match the document: {body:#}"
    );
}

/// Whether `body` matches the document's schema of the answer.
fn valid(document: &Value, path: &str, method: &str, status: &str, body: &Value) -> bool {
    let schema = &document["paths"][path][method]["responses"][status]["content"]["application/json"]
        ["schema"];
    assert!(
        schema.is_object(),
        "{method} {path} {status} has no JSON schema"
    );
    schema_accepts(document, schema, body)
}

/// The runtime API's answers, and one event of each stream the document
/// describes (the runtime's frames, AG-UI's events, a job's events), match
/// their schemas in the document; a frame the daemon never sends does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_answers_and_stream_events_match_their_schemas_in_the_document() {
    let mock = mock_server("replies:\n  - content: hi\n").await;
    let site = Site::new(&mock.base_url(), "");
    let bundle = |name: &str, extra: &str| {
        format!(
            "name: {name}\nversion: \"1\"\nmodel: {{endpoint: mock, name: m}}\nprompts: {{user: \"{{{{ input }}}}\"}}\n{extra}"
        )
    };
    site.put_bundle("echo", &bundle("echo", ""));
    site.put_bundle("router", &bundle("router", ""));
    site.put_bundle(
        "group-chat",
        &bundle(
            "group-chat",
            "group_chat: {max_rounds: 2, stop_word: DONE}\n",
        ),
    );
    let daemon = site.start();
    let http = client();
    let document = get(&http, &daemon, "/v1/openapi.json").await;
    let post = |path: &str, body: Value| {
        let request = http.post(daemon.url(path)).json(&body);
        async move { request.send().await.unwrap() }
    };
    let answer = |response: reqwest::Response| async move {
        assert_eq!(response.status(), 200);
        response.json::<Value>().await.unwrap()
    };

    let agents = get(&http, &daemon, "/api/agents").await;
    conforms(&document, "/api/agents", "get", "200", &agents);
    let message = answer(post("/api/agents/echo/message", json!({"content": "hello"})).await).await;
    conforms(
        &document,
        "/api/agents/{id}/message",
        "post",
        "200",
        &message,
    );
    let query = json!({"query": "hello", "verbose": true});
    let reply = answer(post("/api/query", query).await).await;
    conforms(&document, "/api/query", "post", "200", &reply);
    let chat = json!({"query": "hello", "agent_ids": ["echo"], "max_iterations": 1});
    let chat = answer(post("/api/group-chat", chat).await).await;
    conforms(&document, "/api/group-chat", "post", "200", &chat);
    let conversation = reply["conversationId"].as_str().unwrap();
    let turns = get(
        &http,
        &daemon,
        &format!("/api/conversations/{conversation}"),
    )
    .await;
    conforms(&document, "/api/conversations/{id}", "get", "200", &turns);
    let unknown = post("/api/agents/nobody/message", json!({"content": "hello"})).await;
    assert_eq!(unknown.status(), 404);
    let unknown: Value = unknown.json().await.unwrap();
    conforms(
        &document,
        "/api/agents/{id}/message",
        "post",
        "404",
        &unknown,
    );

    let streamed = post("/api/query", json!({"query": "hello", "stream": true})).await;
    let frames = common::daemon::read_sse_response(streamed, None).await;
    assert_eq!(frames.last().unwrap().2, "[DONE]", "{frames:?}");
    stream_conforms(&document, "/api/query", "post", &frames);
    let run = json!({"threadId": "t-1", "runId": "r-1",
                     "messages": [{"id": "m-1", "role": "user", "content": "hello"}]});
    let events = common::daemon::read_sse_response(post("/v1/agui/echo", run).await, None).await;
    assert!(
        events.last().unwrap().2.contains("RUN_FINISHED"),
        "{events:?}"
    );
    stream_conforms(&document, "/v1/agui/{bundle}", "post", &events);
    let job = reply["job_id"].as_str().unwrap();
    let url = daemon.url(&format!("/v1/jobs/{job}/events"));
    let events = common::daemon::read_sse(&http, &url, None, None).await;
    assert_eq!(events.last().unwrap().1, "end", "{events:?}");
    stream_conforms(&document, "/v1/jobs/{id}/events", "get", &events);

    // A document that accepted anything would pass the above.
    let sleeping = r#"{"type": "RUN_SLEEPING", "threadId": "t-1", "runId": "r-1"}"#;
    assert!(!valid_event(
        &document,
        "/v1/agui/{bundle}",
        "post",
        "message",
        sleeping
    ));
    assert!(!valid_event(
        &document,
        "/v1/jobs/{id}/events",
        "get",
        "end",
        r#"{"state": 1}"#
    ));
    assert!(!valid_event(
        &document,
        "/api/query",
        "post",
        "message",
        r#"{"chunk": 7}"#
    ));
    assert_eq!(daemon.stop(), Some(0));
}

fn stream_conforms(
    document: &Value,
    path: &str,
    method: &str,
    events: &[(Option<u64>, String, String)],
) {
    assert!(!events.is_empty(), "{method} {path}: no events");
    for (_, name, data) in events {
        assert!(
            valid_event(document, path, method, name, data),
            "{method} {path}: an event the document does not describe: {name} {data}"
        );
    }
}

/// Whether one Server-Sent Event (`name` as a client reads it, `message`
/// when unnamed) matches the document's schema of the route's stream: one
/// of its kinds of event fits the event, and the data, JSON, fits the
/// `contentSchema` that kind names (`[DONE]` is where the kind allows it).
fn valid_event(document: &Value, path: &str, method: &str, name: &str, data: &str) -> bool {
    let schema = &document["paths"][path][method]["responses"]["200"]["content"]["text/event-stream"]
        ["schema"];
    let schema = resolve(document, schema);
    let kinds = match schema["oneOf"].as_array() {
        Some(kinds) => kinds.iter().map(|kind| resolve(document, kind)).collect(),
        None => vec![schema],
    };
    let event = json!({"event": name, "data": data});
    kinds.iter().any(|kind| {
        if !schema_accepts(document, kind, &event) {
            return false;
        }
        let data_schema = &kind["properties"]["data"];
        if data_schema["if"]["const"] == data {
            return true;
        }
        let content = match data_schema.get("contentSchema") {
            Some(content) => content,
            None => &data_schema["else"]["contentSchema"],
        };
        assert!(content.is_object(), "{path}: no contentSchema in {kind:#}");
        serde_json::from_str::<Value>(data)
            .is_ok_and(|parsed| schema_accepts(document, content, &parsed))
    })
}

/// `schema`, or what its `$ref` points at in the document.
fn resolve(document: &Value, schema: &Value) -> Value {
    match schema["$ref"].as_str() {
        Some(reference) => document
            .pointer(reference.trim_start_matches('#'))
            .unwrap_or_else(|| panic!("{reference} does not resolve"))
            .clone(),
        None => schema.clone(),
    }
}

/// Whether `value` fits `schema`, its references resolved in `document`:
/// the schema as a document of its own, with the components beside it (its
/// references point at `#/components/schemas/…`).
fn schema_accepts(document: &Value, schema: &Value, value: &Value) -> bool {
    let mut root = schema.clone();
    root["components"] = document["components"].clone();
    let validator = jsonschema::validator_for(&root).expect("the schema compiles");
    validator.is_valid(value)
}
