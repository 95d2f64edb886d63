//! Approvals on the real daemon: a call its policy says needs a person parks
//! the job in `awaiting_approval`; approve, deny, edit and the timeout each
//! resume it, checked on the side-effect file the tool writes; a second or
//! stale decision is refused naming the call; a kill while parked or right
//! after a decision neither loses the decision nor runs the tool twice; a
//! call in a nested agent or a workflow stage parks the whole job.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::daemon::{
    Daemon, Site, client, eventually, file_lines, get, job_events, submit, wait_terminal,
};
use common::mock_server;
use serde_json::{Value, json};
use structured_agents::mock::MockServer;

const SCRIPT: &str = r#"
replies:
  - {match: big, turn: 1, tool_calls: [{id: w1, name: wire_money, arguments: {amount: 500, to: alice}}]}
  - {match: big, turn: 2, content: wired}
  - {match: small, turn: 1, tool_calls: [{id: w1, name: wire_money, arguments: {amount: 5, to: bob}}]}
  - {match: small, turn: 2, content: wired small}
  - {match: nested task, turn: 1, tool_calls: [{id: a1, name: banker, arguments: {input: big child}}]}
  - {match: nested task, turn: 2, content: parent done}
  - {match: not a dry run, turn: 1, tool_calls: [{id: p1, name: pay, arguments: {amount: 5000, dry_run: "false"}}]}
  - {match: not a dry run, turn: 2, content: paid}
  - {match: amount as text, turn: 1, tool_calls: [{id: p1, name: pay, arguments: {amount: "5000"}}]}
  - {match: amount as text, turn: 2, content: paid}
  - {match: extra key, turn: 1, tool_calls: [{id: p1, name: pay, arguments: {amount: 50, "amount ": 5000}}]}
  - {match: extra key, turn: 2, content: refused}
"#;

/// A `pay` tool with a boolean `dry_run` and an integer `amount` under
/// `approval` (a YAML flow mapping); it appends its arguments as it got
/// them to `effects`.
fn pay_bundle(name: &str, effects: &Path, approval: &str) -> String {
    let effects = effects.display();
    format!(
        r#"
name: {name}
version: "1"
model: {{endpoint: mock, name: m, plugin: openai}}
prompts: {{user: "{{{{ input }}}}"}}
tools:
  - name: pay
    kind: process
    effect: unsafe
    description: pay
    parameters: {{type: object, properties: {{amount: {{type: integer}}, dry_run: {{type: boolean, default: true}}}}, required: [amount]}}
    approval: {approval}
    command: [python3, -c, "import json,sys; a=json.load(sys.stdin); f=open('{effects}','a'); f.write(json.dumps(a, sort_keys=True) + chr(10)); f.close(); print('{{}}')"]
"#
    )
}

/// A `wire_money` tool that appends `<amount> <to> <idempotency key>` to
/// `effects`; calls over 100 need approval (`timeout` denies them).
fn bank_bundle(name: &str, effects: &Path, approval_extra: &str) -> String {
    let effects = effects.display();
    format!(
        r#"
name: {name}
version: "1"
model: {{endpoint: mock, name: m, plugin: openai}}
prompts: {{user: "{{{{ input }}}}"}}
tools:
  - name: wire_money
    kind: process
    effect: unsafe
    description: wire money
    parameters: {{type: object, properties: {{amount: {{type: integer}}, to: {{type: string}}}}, required: [amount, to]}}
    approval: {{when: "args.amount > 100"{approval_extra}}}
    command: [python3, -c, "import json,os,sys; a=json.load(sys.stdin); f=open('{effects}','a'); f.write(str(a['amount']) + ' ' + a['to'] + ' ' + os.environ['SA_IDEMPOTENCY_KEY'] + chr(10)); f.close(); print(json.dumps({{'sent': a['amount']}}))"]
"#
    )
}

struct Bank {
    site: Site,
    server: MockServer,
    effects: PathBuf,
}

async fn setup(approval_extra: &str) -> Bank {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    let effects = site.path().join("effects.txt");
    site.put_bundle("bank", &bank_bundle("bank", &effects, approval_extra));
    Bank {
        site,
        server,
        effects,
    }
}

/// Waits until the job parks awaiting approval; returns its one pending
/// request as `GET /v1/jobs/{id}/approvals` shows it.
async fn awaiting(http: &reqwest::Client, daemon: &Daemon, id: &str) -> Value {
    let job = common::daemon::wait_settled(http, daemon, id).await;
    assert_eq!(job["state"], "awaiting_approval", "{job}\n{}", daemon.log());
    let approvals = get(http, daemon, &format!("/v1/jobs/{id}/approvals")).await;
    let list = approvals["approvals"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{approvals}");
    list[0].clone()
}

/// Submits a job and returns its id.
async fn submit_id(http: &reqwest::Client, daemon: &Daemon, bundle: &str, input: &str) -> String {
    submit(http, daemon, bundle, input).await["id"]
        .as_str()
        .unwrap()
        .to_string()
}

async fn decide(
    http: &reqwest::Client,
    daemon: &Daemon,
    id: &str,
    call: &str,
    body: Value,
) -> (u16, Value) {
    let path = format!("/v1/jobs/{id}/approvals/{call}");
    common::daemon::post_json(http, daemon, &path, body).await
}

/// The journaled result of the job's call at turn 1, position 0.
async fn first_result(http: &reqwest::Client, daemon: &Daemon, id: &str) -> Value {
    let journal = get(http, daemon, &format!("/v1/jobs/{id}/journal")).await;
    journal["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["scope"] == "" && s["turn"] == 1 && s["step"] == "result@0")
        .map(|s| s["body"]["result"].clone())
        .unwrap_or_else(|| panic!("no result@0 in {journal}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_call_runs_once_with_its_idempotency_key() {
    let bank = setup("").await;
    let daemon = bank.site.start();
    let http = client();
    let id = submit_id(&http, &daemon, "bank", "big transfer").await;
    let request = awaiting(&http, &daemon, &id).await;
    assert_eq!(request["call_id"], "w1");
    assert_eq!(request["tool"], "wire_money");
    assert_eq!(request["arguments"], json!({"amount": 500, "to": "alice"}));
    assert!(request["digest"].as_str().unwrap().starts_with("sha256:"));
    assert!(
        file_lines(&bank.effects).is_empty(),
        "nothing ran before the decision"
    );
    let parked = common::daemon::metric(
        &http,
        &daemon,
        "structured_agents_queue_jobs{state=\"awaiting_approval\"}",
    )
    .await;
    assert_eq!(parked, 1, "the live gauge counts the parked job");

    let (status, answer) = decide(
        &http,
        &daemon,
        &id,
        "w1",
        json!({"decision": "approve", "digest": request["digest"]}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["by"], "local");
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(file_lines(&bank.effects), [format!("500 alice {id}:1:0")]);
    // A park and its decision are not an attempt: the job continued its
    // first, and its retries are all still there. The decision's commit
    // makes the job leasable before the failpoint kills the daemon, so its
    // worker may lease it in between: then the restart resumes a crashed
    // lease, which is counted as a crash resume (and gives a retry back),
    // never as a spent attempt.
    let crash_resumes = done["crash_resumes"].as_u64().expect("crash_resumes");
    assert!(crash_resumes <= 1, "{done}");
    assert_eq!(
        (&done["attempts"], &done["max_attempts"]),
        (&json!(1 + crash_resumes), &json!(3)),
        "{done}"
    );

    // A second decision finds nothing to decide, and says which job and why.
    let body = json!({"decision": "approve", "digest": request["digest"]});
    let (status, again) = decide(&http, &daemon, &id, "w1", body).await;
    assert_eq!(status, 409, "{again}");
    let message = again["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&id) && message.contains("not awaiting_approval"),
        "{message}"
    );

    // The log tells the story in order, each stage of the call once.
    let events = job_events(&http, &daemon, &id).await;
    let kinds: Vec<String> = events
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_string())
        .collect();
    for stage in ["tool.resolve.ok", "args.parse.ok", "tool.invoke.ok"] {
        let traced = events
            .iter()
            .filter(|e| e["type"] == "ToolTrace" && e["stage"] == stage)
            .count();
        assert_eq!(traced, 1, "{stage} in {events:#?}");
    }
    let at = |kind: &str| kinds.iter().position(|k| k == kind).unwrap_or(usize::MAX);
    assert!(at("ApprovalRequested") < at("ApprovalDecided"), "{kinds:?}");
    assert!(at("ApprovalDecided") < at("ToolResult"), "{kinds:?}");
    assert_eq!(
        common::daemon::metric(
            &http,
            &daemon,
            "structured_agents_approval_decisions_total{bundle=\"bank\",by=\"person\",decision=\"approve\"}",
        )
        .await,
        1
    );
    assert_eq!(bank.server.requests().len(), 2, "one model call per turn");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_under_the_rule_needs_no_approval() {
    let bank = setup("").await;
    let daemon = bank.site.start();
    let http = client();
    let id = submit_id(&http, &daemon, "bank", "small transfer").await;
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(file_lines(&bank.effects), [format!("5 bob {id}:1:0")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_call_never_runs_and_the_model_reads_the_reason() {
    let bank = setup("").await;
    let daemon = bank.site.start();
    let http = client();
    let id = submit_id(&http, &daemon, "bank", "big transfer").await;
    let request = awaiting(&http, &daemon, &id).await;
    let (status, answer) = decide(
        &http,
        &daemon,
        &id,
        "w1",
        json!({"decision": "deny", "reason": "alice is not a customer", "digest": request["digest"]}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert!(
        file_lines(&bank.effects).is_empty(),
        "a denied call never runs"
    );
    let result = first_result(&http, &daemon, &id).await;
    assert_eq!(result["is_error"], true);
    assert_eq!(result["output"], "denied:alice is not a customer");
    // The model's second request carries the denial as the tool's answer.
    let second = &bank.server.requests()[1];
    assert!(
        second.to_string().contains("alice is not a customer"),
        "{second}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_runs_the_call_with_the_new_arguments_checked_against_the_schema() {
    let bank = setup("").await;
    let daemon = bank.site.start();
    let http = client();
    let id = submit_id(&http, &daemon, "bank", "big transfer").await;
    let request = awaiting(&http, &daemon, &id).await;

    let bad = json!({"decision": "edit", "arguments": {"amount": "all", "to": "alice"}, "digest": request["digest"]});
    let (status, refused) = decide(&http, &daemon, &id, "w1", bad).await;
    assert_eq!(status, 422, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("wire_money") && message.contains("amount"),
        "{message}"
    );
    assert_eq!(refused["error"]["field"], "arguments");

    let stale = json!({"decision": "approve", "digest": "sha256:0000"});
    let (status, refused) = decide(&http, &daemon, &id, "w1", stale).await;
    assert_eq!(
        status, 409,
        "a decision for other arguments is stale: {refused}"
    );
    assert!(refused["error"]["message"].as_str().unwrap().contains("w1"));

    let body = json!({"decision": "approve", "digest": request["digest"]});
    let (status, refused) = decide(&http, &daemon, &id, "w9", body).await;
    assert_eq!(status, 409, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not on call w9")
    );

    let edit = json!({"decision": "edit", "arguments": {"amount": 50, "to": "alice"}, "digest": request["digest"]});
    let (status, answer) = decide(&http, &daemon, &id, "w1", edit).await;
    assert_eq!(status, 200, "{answer}");
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(file_lines(&bank.effects), [format!("50 alice {id}:1:0")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_timeout_denies_a_call_nobody_decided() {
    let bank = setup(", timeout: 1s").await;
    let daemon = bank.site.start();
    let http = client();
    let id = submit_id(&http, &daemon, "bank", "big transfer").await;
    let request = awaiting(&http, &daemon, &id).await;
    assert!(request["expires_at"].is_string(), "{request}");
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert!(file_lines(&bank.effects).is_empty());
    let result = first_result(&http, &daemon, &id).await;
    assert!(
        result["output"]
            .as_str()
            .unwrap()
            .starts_with("denied:no decision came before the approval timeout"),
        "{result}"
    );
    let decided = job_events(&http, &daemon, &id)
        .await
        .into_iter()
        .find(|e| e["type"] == "ApprovalDecided")
        .unwrap();
    assert_eq!(decided["by"], "timeout");
    assert_eq!(decided["decision"], "deny");
}

/// Killed while parked: the restarted daemon still holds the request and
/// takes the decision. Killed right after a decision is committed (before
/// its HTTP answer): the restarted daemon runs the call exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kills_while_parked_and_after_a_decision_lose_nothing_and_repeat_nothing() {
    let bank = setup("").await;
    let http = client();
    let mut daemon = bank
        .site
        .start_with_env(&[("SA_FAILPOINTS", "after_approval_recorded")]);
    let id = submit_id(&http, &daemon, "bank", "big transfer").await;
    awaiting(&http, &daemon, &id).await;
    daemon.child.kill().unwrap();
    daemon.child.wait().unwrap();

    let mut daemon = bank
        .site
        .start_with_env(&[("SA_FAILPOINTS", "after_approval_recorded")]);
    let request = awaiting(&http, &daemon, &id).await;
    let url = daemon.url(&format!("/v1/jobs/{id}/approvals/w1"));
    // The daemon dies before it answers.
    let answer = http
        .post(url)
        .json(&json!({"decision": "approve", "digest": request["digest"]}))
        .send()
        .await;
    assert!(
        answer.is_err(),
        "the daemon died before answering: {answer:?}"
    );
    daemon.wait_killed_at("after_approval_recorded");

    let daemon = bank.site.start();
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(file_lines(&bank.effects), [format!("500 alice {id}:1:0")]);
    // A park and its decision are not an attempt: the job continued its
    // first, and its retries are all still there. The decision's commit
    // makes the job leasable before the failpoint kills the daemon, so its
    // worker may lease it in between: then the restart resumes a crashed
    // lease, which is counted as a crash resume (and gives a retry back),
    // never as a spent attempt.
    let crash_resumes = done["crash_resumes"].as_u64().expect("crash_resumes");
    assert!(crash_resumes <= 1, "{done}");
    assert_eq!(
        (&done["attempts"], &done["max_attempts"]),
        (&json!(1 + crash_resumes), &json!(3)),
        "{done}"
    );
    assert_eq!(bank.server.requests().len(), 2, "no model call repeated");
}

/// A call awaiting approval in a nested agent parks the whole job; the
/// decision reaches that innermost call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_agents_call_parks_the_whole_job() {
    let bank = setup("").await;
    bank.site.put_bundle(
        "parent",
        "name: parent\nversion: \"1\"\nmodel: {endpoint: mock, name: m, plugin: openai}\nprompts: {user: \"{{ input }}\"}\ntools:\n  - {name: banker, kind: agent, bundle: bank}\n",
    );
    let daemon = bank.site.start();
    let http = client();
    let id = submit_id(&http, &daemon, "parent", "nested task").await;
    let request = awaiting(&http, &daemon, &id).await;
    assert_eq!(request["scope"], "1:0/", "the innermost call, at its depth");
    let body = json!({"decision": "approve", "digest": request["digest"]});
    let (status, answer) = decide(&http, &daemon, &id, "w1", body).await;
    assert_eq!(status, 200, "{answer}");
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(done["result"]["output"], "parent done");
    assert_eq!(
        file_lines(&bank.effects),
        [format!("500 alice {id}:1:0:1:0")]
    );
    assert_eq!(bank.server.requests().len(), 4, "each model call once");
}

/// A workflow stage's agent call that needs approval parks the job; after
/// the decision the workflow goes on from that stage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_stages_call_parks_the_whole_job() {
    let bank = setup("").await;
    let effects = bank.effects.display().to_string();
    let workflow = format!(
        "{}workflow:\n  start: pay\n  stages:\n    pay:\n      kind: agent\n      prompt: \"big {{{{ input }}}}\"\n      result: {{regex: '^(?P<event>wired)$', events: [wired], otherwise: not_done}}\n  transitions:\n    pay: {{wired: finish, not_done: fatal}}\n",
        bank_bundle("payday", Path::new(&effects), "")
    );
    bank.site.put_bundle("payday", &workflow);
    let daemon = bank.site.start();
    let http = client();
    let id = submit_id(&http, &daemon, "payday", "monthly").await;
    let request = awaiting(&http, &daemon, &id).await;
    let body = json!({"decision": "approve", "digest": request["digest"]});
    let (status, answer) = decide(&http, &daemon, &id, "w1", body).await;
    assert_eq!(status, 200, "{answer}");
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(file_lines(&bank.effects).len(), 1, "the call ran once");
    eventually(Duration::from_secs(5), "the workflow ended", || async {
        job_events(&http, &daemon, &id)
            .await
            .iter()
            .any(|e| e["type"] == "WorkflowEnd")
            .then_some(())
    })
    .await;
}

/// Copies the shipped `config/examples/refunds` bundle into the site.
fn install_refunds(site: &Site) {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), target).unwrap();
            }
        }
    }
    let staging = site.path().join(".staging-refunds");
    copy(&common::repo("config/examples/refunds"), &staging);
    std::fs::rename(staging, site.path().join("bundles/refunds")).unwrap();
}

fn cli(daemon: &Daemon, args: &[&str], stdin: &str) -> (bool, String) {
    let out = common::daemon::run_cli(&daemon.base, args, stdin);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The shipped example: its refund over 100 waits; `approvals` shows it and
/// `approve` (bound to the digest shown) lets it run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_refunds_example_waits_for_the_cli_to_approve() {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    install_refunds(&site);
    let daemon = site.start();
    let http = client();
    let id = submit_id(&http, &daemon, "refunds", "Refund order 1042").await;
    awaiting(&http, &daemon, &id).await;
    let (daemon, id) = tokio::task::spawn_blocking(move || {
        let (ok, shown) = cli(&daemon, &["approvals", &id], "");
        assert!(ok, "{shown}");
        assert!(
            shown.contains(
                "tool `refund` (unsafe) wants to run with {\"order\":1042,\"amount\":250}"
            ),
            "{shown}"
        );
        let (ok, said) = cli(&daemon, &["approve", &id], "");
        assert!(ok, "{said}");
        assert!(said.contains("approved; the job is queued"), "{said}");
        let (ok, again) = cli(&daemon, &["deny", &id, "--reason", "late"], "");
        assert!(!ok, "nothing left to decide: {again}");
        assert!(again.contains("awaits no approval"), "{again}");
        (daemon, id)
    })
    .await
    .unwrap();
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    let result = first_result(&http, &daemon, &id).await;
    assert_eq!(result["name"], "lookup_order");
}

/// `chat` asks `approve? [y/N]` inline when a call waits, and sends the
/// answer typed at its prompt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_asks_inline_and_approves() {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    install_refunds(&site);
    let daemon = site.start();
    let (daemon, out) = tokio::task::spawn_blocking(move || {
        let out = cli(&daemon, &["chat", "refunds"], "Refund order 1042\ny\n\n");
        (daemon, out)
    })
    .await
    .unwrap();
    let (ok, text) = out;
    assert!(ok, "{text}");
    assert!(
        text.contains("refund wants to run with {\"order\":1042,\"amount\":250} — approve? [y/N]"),
        "{text}"
    );
    assert!(text.contains(" ↪ approved"), "{text}");
    assert!(text.contains("Order 1042 is handled"), "{text}");
    assert_eq!(
        text.matches("ƒ(x) calling refund").count(),
        1,
        "the call is shown once, not again when the job resumes: {text}"
    );
    let http = client();
    let jobs = get(&http, &daemon, "/v1/jobs?bundle=refunds").await;
    assert_eq!(jobs["jobs"][0]["state"], "succeeded", "{jobs}");
}

/// Reads an SSE response's `data:` frames until `[DONE]`; when a frame
/// carries `approval_required` (at the top or, for chat completions, at the
/// top of the chunk), approves that call with the digest it names.
async fn stream_and_approve(
    http: &reqwest::Client,
    daemon: &Daemon,
    response: reqwest::Response,
) -> Vec<Value> {
    use eventsource_stream::Eventsource;
    use futures::StreamExt;
    assert!(response.status().is_success(), "{}", response.status());
    let mut stream = response.bytes_stream().eventsource();
    let mut frames = Vec::new();
    while let Some(Ok(event)) = stream.next().await {
        if event.data == "[DONE]" {
            break;
        }
        let frame: Value = serde_json::from_str(&event.data).unwrap();
        if let Some(asked) = frame.get("approval_required") {
            let job = asked["job_id"].as_str().unwrap();
            let call = asked["call_id"].as_str().unwrap();
            assert_eq!(
                asked["decide"],
                format!("POST /v1/jobs/{job}/approvals/{call}")
            );
            let body = json!({"decision": "approve", "digest": asked["digest"]});
            let (status, answer) = decide(http, daemon, job, call, body).await;
            assert_eq!(status, 200, "{answer}");
        }
        frames.push(frame);
    }
    frames
}

/// How many times each stream is run: a decision sent the moment its frame
/// arrives must find the job parked every time (when streams told of a
/// request as the run recorded it, a moment before the park, some of these
/// decisions were refused as too early).
const ROUNDS: usize = 10;

/// `/api/query`, `/v1/chat/completions` and the job's own event stream say
/// when the job parks for a decision, naming the job and call; a decision
/// sent at once is taken, and the stream goes on. The first park waits a
/// second before it commits (`before_completion_commit:pause`): a stream
/// that told of the request before the park would have its decision
/// refused then, every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_send_an_approval_frame_and_go_on_after_the_decision() {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "[runtime]\nrouter = \"bank\"\n");
    let effects = site.path().join("effects.txt");
    site.put_bundle("bank", &bank_bundle("bank", &effects, ""));
    let daemon = site.start_with_env(&[("SA_FAILPOINTS", "before_completion_commit:pause")]);
    let http = client();
    for round in 1..=ROUNDS {
        query_round(&http, &daemon).await;
        chat_round(&http, &daemon).await;
        events_round(&http, &daemon).await;
        assert_eq!(file_lines(&effects).len(), 3 * round, "round {round}");
    }
}

/// `/api/query`: its `approval_required` frame comes before `complete`.
async fn query_round(http: &reqwest::Client, daemon: &Daemon) {
    let response = http
        .post(daemon.url("/api/query"))
        .json(&json!({"query": "big transfer", "stream": true}))
        .send()
        .await
        .unwrap();
    let frames = stream_and_approve(http, daemon, response).await;
    let asked = frames
        .iter()
        .position(|f| f.get("approval_required").is_some())
        .unwrap_or_else(|| panic!("no approval frame in {frames:#?}"));
    let asked_for = &frames[asked]["approval_required"];
    assert_eq!(asked_for["tool"], "wire_money");
    assert_eq!(
        asked_for["arguments"],
        json!({"amount": 500, "to": "alice"})
    );
    let complete = frames.iter().position(|f| f["complete"] == true).unwrap();
    assert!(asked < complete, "{frames:#?}");
    assert_eq!(frames[complete]["response"], "wired", "{frames:#?}");
}

/// `/v1/chat/completions`: an empty chunk carries `approval_required`; the
/// answer streams after it.
async fn chat_round(http: &reqwest::Client, daemon: &Daemon) {
    let response = http
        .post(daemon.url("/v1/chat/completions"))
        .json(&json!({
            "model": "bundle/bank",
            "stream": true,
            "messages": [{"role": "user", "content": "big transfer"}],
        }))
        .send()
        .await
        .unwrap();
    let chunks = stream_and_approve(http, daemon, response).await;
    let asked = chunks
        .iter()
        .position(|c| c.get("approval_required").is_some())
        .unwrap_or_else(|| panic!("no approval chunk in {chunks:#?}"));
    assert_eq!(chunks[asked]["object"], "chat.completion.chunk");
    assert_eq!(chunks[asked]["choices"][0]["delta"], json!({}));
    let text: String = chunks[asked..]
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "wired", "{chunks:#?}");
}

/// `GET /v1/jobs/{id}/events`: the `ApprovalRequested` event is decided on
/// as it arrives, once, and the job's events go on to its success.
async fn events_round(http: &reqwest::Client, daemon: &Daemon) {
    use eventsource_stream::Eventsource;
    use futures::StreamExt;
    let id = submit_id(http, daemon, "bank", "big transfer").await;
    let url = daemon.url(&format!("/v1/jobs/{id}/events"));
    let response = http.get(url).send().await.unwrap();
    let mut stream = response.bytes_stream().eventsource();
    let mut asked = 0;
    let read = async {
        while let Some(Ok(frame)) = stream.next().await {
            if frame.event != "event" {
                continue;
            }
            let event: Value = serde_json::from_str(&frame.data).unwrap();
            if event["type"] == "ApprovalRequested" {
                asked += 1;
                let body = json!({"decision": "approve", "digest": event["digest"]});
                let (status, answer) = decide(http, daemon, &id, "w1", body).await;
                assert_eq!(status, 200, "{answer}");
            }
            if event["type"] == "JobState" && event["state"] == "succeeded" {
                return;
            }
        }
        panic!("the events of job {id} ended before its success");
    };
    tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .unwrap_or_else(|_| panic!("job {id} did not succeed\n{}", daemon.log()));
    assert_eq!(asked, 1, "job {id}: one request, told once");
}

/// Issue 32's exploits: the approval rule read the arguments as the model
/// sent them (`"false"`, a truthy string; `"5000"`, not a number over 100)
/// while the tool ran on them coerced. Now the call is coerced once: the job
/// parks, showing (and binding the digest to) the arguments the tool runs
/// on, and runs on exactly those once approved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approval_rule_reads_the_arguments_the_tool_runs_on() {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    let effects = site.path().join("effects.txt");
    site.put_bundle(
        "dry",
        &pay_bundle("dry", &effects, r#"{when: "not args.dry_run"}"#),
    );
    site.put_bundle(
        "floor",
        &pay_bundle(
            "floor",
            &effects,
            "{matches: {properties: {amount: {type: integer, minimum: 100}}}}",
        ),
    );
    let daemon = site.start();
    let http = client();
    for (bundle, input, runs_on) in [
        (
            "dry",
            "not a dry run",
            json!({"amount": 5000, "dry_run": false}),
        ),
        (
            "floor",
            "amount as text",
            json!({"amount": 5000, "dry_run": true}),
        ),
    ] {
        let id = submit_id(&http, &daemon, bundle, input).await;
        let request = awaiting(&http, &daemon, &id).await;
        assert_eq!(request["tool"], "pay");
        assert_eq!(request["arguments"], runs_on, "{bundle}");
        assert_eq!(
            request["digest"],
            structured_agents::approval::digest(&runs_on),
            "the digest binds the coerced arguments ({bundle})"
        );
        assert!(
            file_lines(&effects).is_empty(),
            "nothing ran before the decision"
        );
        let body = json!({"decision": "approve", "digest": request["digest"]});
        let (status, answer) = decide(&http, &daemon, &id, "p1", body).await;
        assert_eq!(status, 200, "{answer}");
        let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
        assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
        let ran: Vec<Value> = file_lines(&effects)
            .iter()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(
            ran,
            [runs_on],
            "{bundle}: the tool ran on what was approved"
        );
        std::fs::remove_file(&effects).unwrap();
    }
}

/// Issue 46: a model sent `"amount "` beside `amount` to a tool whose
/// schema says `additionalProperties: false`; coercion let the extra key
/// through to the tool, and the approval rule read only `amount` (50, no
/// approval). Checked against the whole schema after coercion, the call is
/// `bad_args`: no approval is asked, the tool never runs, and the model
/// reads why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extra_key_the_schema_forbids_is_bad_args_and_the_tool_never_runs() {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    let effects = site.path().join("effects.txt");
    let strict = pay_bundle("strict", &effects, r#"{when: "args.amount > 100"}"#).replace(
        "parameters: {type: object, properties:",
        "parameters: {type: object, additionalProperties: false, properties:",
    );
    assert!(strict.contains("additionalProperties: false"));
    site.put_bundle("strict", &strict);
    let daemon = site.start();
    let http = client();
    let id = submit_id(&http, &daemon, "strict", "extra key").await;
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert!(file_lines(&effects).is_empty(), "the tool ran");
    let events = job_events(&http, &daemon, &id).await;
    assert!(
        !events.iter().any(|e| e["type"] == "ApprovalRequested"),
        "{events:?}"
    );
    let result = events
        .iter()
        .find(|e| e["type"] == "ToolResult")
        .unwrap_or_else(|| panic!("no ToolResult: {events:?}"));
    assert_eq!(result["error_type"], "bad_args", "{result}");
    assert!(
        result["output_preview"]
            .as_str()
            .unwrap()
            .contains("'amount ' was unexpected"),
        "{result}"
    );
}

/// A decision must carry the digest of the arguments it decides on: one
/// without is refused with 422 naming the field and where to read it, and
/// the job keeps waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_without_a_digest_is_refused() {
    let bank = setup("").await;
    let daemon = bank.site.start();
    let http = client();
    let id = submit_id(&http, &daemon, "bank", "big transfer").await;
    awaiting(&http, &daemon, &id).await;
    for body in [
        json!({"decision": "approve"}),
        json!({"decision": "deny", "reason": "no"}),
        json!({"decision": "edit", "arguments": {"amount": 5, "to": "alice"}}),
    ] {
        let (status, refused) = decide(&http, &daemon, &id, "w1", body).await;
        assert_eq!(status, 422, "{refused}");
        assert_eq!(refused["error"]["field"], "digest", "{refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&id) && message.contains("w1") && message.contains("/approvals"),
            "{message}"
        );
    }
    let request = awaiting(&http, &daemon, &id).await;
    assert_eq!(request["call_id"], "w1", "the job still waits");
    assert!(file_lines(&bank.effects).is_empty());
}
