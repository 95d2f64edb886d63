//! Caller tools on the real daemon (issue 49): a bundle that declares
//! `caller_tools` takes a request's `tools`; the model's call of one parks
//! the job and the response hands it over as a `function_call`; the
//! client's `function_call_output` (with `previous_response_id`) resumes
//! the same job, also after the daemon was SIGKILLed while it waited, and
//! is fed to the model exactly once. Streamed, on both wires, the calls are
//! handed over at the end of the stream and a streamed resume tells the
//! rest of the run. The parameters that cannot be honoured are 400s naming
//! them.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use common::daemon::{Daemon, Site, client, get, post_json};
use common::mock_server;
use serde_json::{Value, json};
use structured_agents::mock::MockServer;

const SCRIPT: &str = r#"
replies:
  - match: "Shout hi"
    turn: 1
    tool_calls: [{id: call-7, name: shout, arguments: {text: hi}}, {id: call-8, name: shout, arguments: {text: ho}}]
  - match: "Shout hi"
    turn: 2
    content: "Shouted."
"#;

const SHOUTER: &str = "name: shouter\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\ncaller_tools: {max: 2}\n";
const PLAIN: &str = "name: plain\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\n";

/// A daemon serving `shouter` and `plain` on the mock model of [`SCRIPT`],
/// and a client.
struct Shouting {
    mock: MockServer,
    site: Site,
    http: reqwest::Client,
    daemon: Daemon,
}

async fn shouting() -> Shouting {
    let mock = mock_server(SCRIPT).await;
    let site = Site::new(&mock.base_url(), "");
    site.put_bundle("shouter", SHOUTER);
    site.put_bundle("plain", PLAIN);
    let http = client();
    let daemon = site.start();
    Shouting {
        mock,
        site,
        http,
        daemon,
    }
}

fn shout_tool() -> Value {
    json!({"type": "function", "name": "shout", "description": "Shouts the text.",
           "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}})
}

/// A kill while the job waits for the client neither loses the calls nor
/// asks the model again; the outputs resume the same job, which answers
/// once, and sending them again is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_resume_the_same_job_across_a_sigkill() {
    let Shouting {
        mock,
        site,
        http,
        daemon,
    } = shouting().await;
    let (status, first) = post_json(
        &http,
        &daemon,
        "/v1/responses",
        json!({"model": "bundle/shouter", "input": "Shout hi.", "tools": [shout_tool()]}),
    )
    .await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["status"], "completed", "{first}");
    let calls: Vec<&Value> = first["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["type"] == "function_call")
        .collect();
    assert_eq!(calls.len(), 2, "{first}");
    assert_eq!(
        (&calls[0]["call_id"], &calls[0]["name"]),
        (&json!("call-7"), &json!("shout"))
    );
    assert_eq!(calls[1]["arguments"], "{\"text\":\"ho\"}", "{first}");
    assert!(
        first["output"]
            .as_array()
            .unwrap()
            .iter()
            .all(|item| item["type"] != "mcp_call"),
        "{first}"
    );
    let response_id = first["id"].as_str().unwrap().to_string();
    let job_id = response_id.strip_prefix("resp_").unwrap().to_string();
    let job = get(&http, &daemon, &format!("/v1/jobs/{job_id}")).await;
    assert_eq!(job["state"], "needs_attention", "{job}");
    assert_eq!(job["pending_call"]["kind"], "caller_call", "{job}");

    daemon.kill9();
    let daemon = site.start();
    let job = get(&http, &daemon, &format!("/v1/jobs/{job_id}")).await;
    assert_eq!(job["state"], "needs_attention", "{job}");

    // An unknown or missing call id is refused naming it; the job waits on.
    let (status, refused) = post_json(
        &http,
        &daemon,
        "/v1/responses",
        json!({"model": "bundle/shouter", "previous_response_id": response_id,
               "input": [{"type": "function_call_output", "call_id": "call-9", "output": "x"}]}),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["param"], "input", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("call-9") && message.contains("call-7") && message.contains("call-8"),
        "{message}"
    );

    let outputs = json!({"model": "bundle/shouter", "previous_response_id": response_id,
        "input": [{"type": "function_call_output", "call_id": "call-7", "output": "HI!"},
                  {"type": "function_call_output", "call_id": "call-8", "output": "HO!"}]});
    let (status, second) = post_json(&http, &daemon, "/v1/responses", outputs.clone()).await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["status"], "completed", "{second}");
    assert_eq!(second["output_text"], "Shouted.", "{second}");
    assert_eq!(
        second["previous_response_id"],
        json!(response_id),
        "{second}"
    );
    assert!(
        second["output"]
            .as_array()
            .unwrap()
            .iter()
            .all(|item| item["type"] == "message"),
        "{second}"
    );
    let second_id = second["id"].as_str().unwrap();
    assert!(
        second_id.starts_with(&format!("{response_id}.")),
        "{second_id}"
    );
    let again = get(&http, &daemon, &format!("/v1/responses/{second_id}")).await;
    assert_eq!(again["output_text"], "Shouted.", "{again}");

    // The same outputs again: the job waits for none.
    let (status, refused) = post_json(&http, &daemon, "/v1/responses", outputs).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["param"], "input", "{refused}");

    let job = get(&http, &daemon, &format!("/v1/jobs/{job_id}")).await;
    assert_eq!(job["state"], "succeeded", "{job}");
    let requests = mock.requests();
    assert_eq!(
        requests.len(),
        2,
        "the model was asked once per turn: {requests:?}"
    );
    let fed: Vec<&Value> = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(fed.len(), 2, "{requests:?}");
    assert_eq!(
        (&fed[0]["content"], &fed[1]["content"]),
        (&json!("HI!"), &json!("HO!"))
    );
    assert_eq!(daemon.stop(), Some(0));
}

/// What cannot be honoured is refused naming the parameter: tools for a
/// bundle that takes none, more than it takes, a name of its own tools,
/// `n > 1`, and `tool_choice: required` without tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_cannot_be_honoured_is_a_400_naming_it() {
    let Shouting {
        mock,
        site: _site,
        http,
        daemon,
    } = shouting().await;
    let other = |name: &str| json!({"type": "function", "name": name});
    for (path, body, param, said) in [
        (
            "/v1/responses",
            json!({"model": "bundle/plain", "input": "x", "tools": [shout_tool()]}),
            "tools",
            "caller_tools",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "bundle/plain", "messages": [{"role": "user", "content": "x"}],
                   "tools": [{"type": "function", "function": {"name": "shout"}}]}),
            "tools",
            "caller_tools",
        ),
        (
            "/v1/responses",
            json!({"model": "bundle/shouter", "input": "x",
                   "tools": [other("a"), other("b"), other("c")]}),
            "tools",
            "at most 2",
        ),
        (
            "/v1/responses",
            json!({"model": "bundle/shouter", "input": "x", "tools": [other("bad name")]}),
            "tools[0]",
            "letters",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "bundle/shouter", "messages": [{"role": "user", "content": "x"}], "n": 2}),
            "n",
            "n = 2",
        ),
        (
            "/v1/responses",
            json!({"model": "bundle/plain", "input": "x", "tool_choice": "required"}),
            "tool_choice",
            "needs caller tools",
        ),
        (
            "/v1/responses",
            json!({"model": "bundle/shouter",
                   "input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]}),
            "previous_response_id",
            "previous_response_id",
        ),
    ] {
        let (status, refused) = post_json(&http, &daemon, path, body.clone()).await;
        assert_eq!(status, 400, "{body}: {refused}");
        assert_eq!(refused["error"]["param"], param, "{body}: {refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains(said), "{body}: {message}");
    }
    assert!(mock.requests().is_empty());
    assert_eq!(daemon.stop(), Some(0));
}

/// Chat completions: the call is handed over as `tool_calls` (its id names
/// the job), and the `tool` message that answers it resumes the same job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_messages_resume_the_same_job_over_chat_completions() {
    let Shouting {
        mock,
        site: _site,
        http,
        daemon,
    } = shouting().await;
    let tools = json!([{"type": "function", "function": {"name": "shout", "parameters": {"type": "object"}}}]);
    let mut messages = vec![json!({"role": "user", "content": "Shout hi."})];
    let (status, first) = post_json(
        &http,
        &daemon,
        "/v1/chat/completions",
        json!({"model": "bundle/shouter", "messages": messages, "tools": tools}),
    )
    .await;
    assert_eq!(status, 200, "{first}");
    let choice = &first["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{first}");
    let calls = choice["message"]["tool_calls"].as_array().unwrap().clone();
    assert_eq!(calls.len(), 2, "{first}");
    assert_eq!(calls[0]["function"]["name"], "shout");
    messages.push(choice["message"].clone());
    for (call, output) in calls.iter().zip(["HI!", "HO!"]) {
        messages.push(json!({"role": "tool", "tool_call_id": call["id"], "content": output}));
    }
    let (status, second) = post_json(
        &http,
        &daemon,
        "/v1/chat/completions",
        json!({"model": "bundle/shouter", "messages": messages, "tools": tools}),
    )
    .await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["choices"][0]["finish_reason"], "stop", "{second}");
    assert_eq!(
        second["choices"][0]["message"]["content"], "Shouted.",
        "{second}"
    );
    assert_eq!(first["id"], second["id"], "one job: {first} {second}");
    let jobs = get(&http, &daemon, "/v1/jobs").await;
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 1, "{jobs}");
    assert_eq!(mock.requests().len(), 2);
    assert_eq!(daemon.stop(), Some(0));
}

/// The JSON `data` of each event `POST path` answers `body` with, up to
/// the stream's end (chat completions' `[DONE]` left out).
async fn stream(http: &reqwest::Client, url: &str, body: Option<&Value>) -> Vec<Value> {
    let request = match body {
        Some(body) => http.post(url).json(body),
        None => http.get(url),
    };
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(
        body.is_none() || !url.ends_with("completions") || text.ends_with("data: [DONE]\n\n"),
        "{text}"
    );
    text.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).unwrap())
        .collect()
}

/// Asserts each of `events` matches the API document's schema of one
/// event's data of the stream `POST path` answers.
fn conform(document: &Value, path: &str, events: &[Value]) {
    let schema = &document["paths"][path]["post"]["responses"]["200"]["content"]["text/event-stream"]
        ["schema"]["properties"]["data"]["contentSchema"];
    let mut root = schema.clone();
    root["components"] = document["components"].clone();
    let validator = jsonschema::validator_for(&root).unwrap();
    for event in events {
        assert!(
            validator.is_valid(event),
            "{path}: not in the document: {event:#}"
        );
    }
}

/// A daemon's streams: each event of one it is `POST`ed for is checked
/// against its API document.
struct Streams<'a> {
    http: &'a reqwest::Client,
    daemon: &'a Daemon,
    document: Value,
}

impl<'a> Streams<'a> {
    async fn of(http: &'a reqwest::Client, daemon: &'a Daemon) -> Self {
        let document = get(http, daemon, "/v1/openapi.json").await;
        Self {
            http,
            daemon,
            document,
        }
    }

    /// The events `POST path` answers `body` with, each as the document
    /// says an event of that stream is.
    async fn post(&self, path: &str, body: &Value) -> Vec<Value> {
        let events = stream(self.http, &self.daemon.url(path), Some(body)).await;
        conform(&self.document, path, &events);
        events
    }

    /// The events `GET path` streams (a response told again).
    async fn get(&self, path: &str) -> Vec<Value> {
        stream(self.http, &self.daemon.url(path), None).await
    }
}

fn kinds(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

/// Responses: a stream with the caller's tools ends with the calls handed
/// over (`function_call` items, `response.completed`), as the response
/// retrieved has them and its own stream tells them; a streamed
/// `function_call_output` resumes the same job and streams the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_response_hands_calls_over_and_a_streamed_resume_answers() {
    let Shouting {
        mock,
        site: _site,
        http,
        daemon,
    } = shouting().await;
    let streams = Streams::of(&http, &daemon).await;
    let first = json!({"model": "bundle/shouter", "input": "Shout hi.", "tools": [shout_tool()],
                       "stream": true});
    let events = streams.post("/v1/responses", &first).await;
    let call = [
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
    ];
    let expected: Vec<&str> = ["response.created", "response.in_progress"]
        .into_iter()
        .chain(call)
        .chain(call)
        .chain(["response.completed"])
        .collect();
    assert_eq!(kinds(&events), expected, "{events:#?}");
    let numbers: Vec<u64> = events
        .iter()
        .map(|e| e["sequence_number"].as_u64().unwrap())
        .collect();
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");
    let added = &events[2]["item"];
    assert_eq!(
        (&added["type"], &added["arguments"], &added["status"]),
        (&json!("function_call"), &json!(""), &json!("in_progress"))
    );
    let done = &events[4];
    assert_eq!(done["name"], "shout", "{done}");
    assert_eq!(done["arguments"], "{\"text\":\"hi\"}", "{done}");
    assert_eq!(events[5]["item"]["call_id"], "call-7");
    assert_eq!(events[9]["item"]["call_id"], "call-8");
    let completed = &events[10]["response"];
    assert_eq!(completed["status"], "completed", "{completed}");
    let response_id = completed["id"].as_str().unwrap().to_string();
    // The response retrieved ends with the same calls, and its stream
    // tells them alike, numbered the same.
    let retrieved = get(&http, &daemon, &format!("/v1/responses/{response_id}")).await;
    assert_eq!(retrieved["output"], completed["output"], "{retrieved}");
    assert_eq!(retrieved["status"], "completed");
    let again = streams
        .get(&format!("/v1/responses/{response_id}?stream=true"))
        .await;
    assert_eq!(again, events);

    let outputs = json!({"model": "bundle/shouter", "previous_response_id": response_id,
        "tools": [shout_tool()], "stream": true,
        "input": [{"type": "function_call_output", "call_id": "call-7", "output": "HI!"},
                  {"type": "function_call_output", "call_id": "call-8", "output": "HO!"}]});
    let resumed = streams.post("/v1/responses", &outputs).await;
    let resumed_kinds = kinds(&resumed);
    assert_eq!(resumed_kinds.first(), Some(&"response.created"));
    assert_eq!(resumed_kinds.last(), Some(&"response.completed"));
    assert!(
        resumed_kinds.iter().all(|k| !k.contains("function_call")),
        "{resumed_kinds:?}"
    );
    let text: String = resumed
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Shouted.");
    let last = &resumed.last().unwrap()["response"];
    assert_eq!(last["output_text"], "Shouted.", "{last}");
    assert_eq!(last["previous_response_id"], json!(response_id), "{last}");
    let resumed_id = last["id"].as_str().unwrap();
    assert!(
        resumed_id.starts_with(&format!("{response_id}.")),
        "{resumed_id}"
    );
    assert_eq!(resumed[0]["response"]["id"], json!(resumed_id));
    let answered = get(&http, &daemon, &format!("/v1/responses/{resumed_id}")).await;
    assert_eq!(answered["output"], last["output"], "{answered}");

    // The first response's stream, picked up after its last event now
    // that the job answered: the rest of the job, the answer whole.
    let after = numbers.last().unwrap();
    let rest = streams
        .get(&format!(
            "/v1/responses/{response_id}?stream=true&starting_after={after}"
        ))
        .await;
    let rest_kinds = kinds(&rest);
    assert_eq!(rest_kinds[0], "response.output_item.added", "{rest:#?}");
    assert_eq!(rest[0]["item"]["type"], "message", "{rest:#?}");
    let text: String = rest
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Shouted.");
    assert_eq!(mock.requests().len(), 2);
    let jobs = get(&http, &daemon, "/v1/jobs").await;
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 1, "{jobs}");
    assert_eq!(daemon.stop(), Some(0));
}

/// Chat completions: a stream with the caller's tools ends with each call
/// in `delta.tool_calls` and `finish_reason: "tool_calls"`; the `tool`
/// messages that answer them, streamed, resume the same job and stream the
/// answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_completion_hands_calls_over_and_a_streamed_resume_answers() {
    let Shouting {
        mock: _mock,
        site: _site,
        http,
        daemon,
    } = shouting().await;
    let streams = Streams::of(&http, &daemon).await;
    let tools = json!([{"type": "function", "function": {"name": "shout", "parameters": {"type": "object"}}}]);
    let mut messages = vec![json!({"role": "user", "content": "Shout hi."})];
    let request = |messages: &[Value]| {
        json!({"model": "bundle/shouter", "messages": messages, "tools": tools, "stream": true,
               "stream_options": {"include_usage": true}})
    };
    let chunks = streams
        .post("/v1/chat/completions", &request(&messages))
        .await;
    assert_eq!(chunks.len(), 5, "{chunks:#?}");
    let id = chunks[0]["id"].as_str().unwrap();
    let job = id.strip_prefix("chatcmpl-").unwrap();
    let mut calls = Vec::new();
    for (index, chunk) in chunks[1..3].iter().enumerate() {
        let choice = &chunk["choices"][0];
        assert_eq!(choice["finish_reason"], Value::Null, "{chunk}");
        let call = &choice["delta"]["tool_calls"][0];
        assert_eq!(call["index"], index, "{chunk}");
        assert_eq!(call["type"], "function", "{chunk}");
        assert_eq!(call["function"]["name"], "shout", "{chunk}");
        calls.push(call.clone());
    }
    assert_eq!(calls[0]["id"], format!("{job}.call-7"));
    assert_eq!(calls[1]["function"]["arguments"], "{\"text\":\"ho\"}");
    assert_eq!(chunks[3]["choices"][0]["finish_reason"], "tool_calls");
    assert!(chunks[4]["usage"].is_object(), "{chunks:#?}");
    // As the completion that is not streamed hands them over.
    let (status, unstreamed) = post_json(
        &http,
        &daemon,
        "/v1/chat/completions",
        json!({"model": "bundle/shouter", "messages": messages, "tools": tools}),
    )
    .await;
    assert_eq!(status, 200, "{unstreamed}");
    let handed: Vec<Value> = unstreamed["choices"][0]["message"]["tool_calls"]
        .as_array()
        .unwrap()
        .clone();
    let streamed: Vec<Value> = calls
        .iter()
        .map(|c| {
            let mut c = c.clone();
            c.as_object_mut().unwrap().remove("index");
            c
        })
        .collect();
    for (handed, streamed) in handed.iter().zip(&streamed) {
        assert_eq!(handed["function"], streamed["function"]);
        assert_eq!(handed["type"], streamed["type"]);
        let call = |c: &Value| {
            c["id"]
                .as_str()
                .unwrap()
                .rsplit('.')
                .next()
                .unwrap()
                .to_string()
        };
        assert_eq!(call(handed), call(streamed));
    }

    messages.push(json!({"role": "assistant", "content": null, "tool_calls": streamed}));
    for (call, output) in calls.iter().zip(["HI!", "HO!"]) {
        messages.push(json!({"role": "tool", "tool_call_id": call["id"], "content": output}));
    }
    let resumed = streams
        .post("/v1/chat/completions", &request(&messages))
        .await;
    assert!(resumed.iter().all(|c| c["id"] == id), "{resumed:#?}");
    let text: String = resumed
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Shouted.");
    let finish: Vec<&Value> = resumed
        .iter()
        .map(|c| &c["choices"][0]["finish_reason"])
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finish, [&json!("stop")], "{resumed:#?}");
    let job = get(&http, &daemon, &format!("/v1/jobs/{job}")).await;
    assert_eq!(job["state"], "succeeded", "{job}");
    assert_eq!(daemon.stop(), Some(0));
}
