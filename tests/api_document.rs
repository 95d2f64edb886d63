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

    // The operations still described by hand (src/api/openapi.json).
    let hand: Value = serde_json::from_str(
        &std::fs::read_to_string(common::repo("src/api/openapi.json")).unwrap(),
    )
    .unwrap();
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            if !["get", "post", "put", "patch", "delete"].contains(&method.as_str()) {
                continue;
            }
            let by_hand = hand["paths"][path].get(method).is_some();
            let responses = operation["responses"]
                .as_object()
                .unwrap_or_else(|| panic!("{method} {path} has no responses: {operation:#}"));
            assert!(
                responses.keys().any(|code| code.starts_with('2')),
                "{method} {path} names no success: {operation:#}"
            );
            let takes_body = ["post", "put", "patch"].contains(&method.as_str());
            if takes_body && !by_hand {
                // The request layer's answers (a wrong Content-Type, a body too
                // large or too slow) are on every generated write.
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
        json!([{"bearer": []}, {"reload_key": []}])
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
    // The schema as a document of its own, with the components beside it
    // (its references point at `#/components/schemas/…`).
    let mut root = schema.clone();
    root["components"] = document["components"].clone();
    let validator = jsonschema::validator_for(&root).expect("the schema compiles");
    validator.is_valid(body)
}
