//! The crash matrix: a 3-turn job with two tools per turn (`lookup`,
//! read_only; `append`, unsafe: it appends a line to a file) runs on the real
//! daemon, which kills itself with SIGKILL at a named failpoint; the test
//! restarts it and checks that the job ended exactly once, that no model call
//! of a completed turn was repeated (counted at the mock server), that each
//! line was appended exactly once (or the job parked in needs_attention and
//! `resolve` completed it), that the event log is gap-free, and that the
//! final history equals an uninterrupted run's.

mod common;

use std::path::Path;
use std::time::Duration;

use common::daemon::{
    Daemon, SHORT_LEASE, Site, client, eventually, file_lines, get, job_events, resolve,
    submit_and_wait, wait_settled, wait_terminal,
};
use common::mock_server;
use serde_json::{Value, json};
use structured_agents::mock::MockServer;

const SCRIPT: &str = r#"
replies:
  - turn: 1
    tool_calls:
      - {id: c1a, name: lookup, arguments: {n: 1}}
      - {id: c1b, name: append, arguments: {line: t1}}
  - turn: 2
    tool_calls:
      - {id: c2a, name: lookup, arguments: {n: 2}}
      - {id: c2b, name: append, arguments: {line: t2}}
  - turn: 3
    tool_calls:
      - {id: c3a, name: lookup, arguments: {n: 3}}
      - {id: c3b, name: append, arguments: {line: t3}}
  - turn: 4
    content: all three lines written
"#;

fn bundle(effects: &Path) -> String {
    let effects = effects.display();
    format!(
        r#"
name: crash
version: "1"
model: {{endpoint: mock, name: m, plugin: openai}}
prompts:
  system: "You write lines."
  user: "{{{{ input }}}}"
limits: {{max_turns: 6, max_concurrency: 1}}
tools:
  - name: lookup
    kind: process
    effect: read_only
    description: look a number up
    command: [python3, -c, "import json,sys; a=json.load(sys.stdin); print(json.dumps({{'n': a['n'], 'square': a['n'] * a['n']}}))"]
  - name: append
    kind: process
    effect: unsafe
    description: append a line to the effects file
    command: [python3, -c, "import json,os,sys,time; a=json.load(sys.stdin); f=open('{effects}','a'); f.write(a['line'] + ' ' + os.environ['SA_IDEMPOTENCY_KEY'] + chr(10)); f.close(); time.sleep(0.6); print(json.dumps({{'written': a['line']}}))"]
"#
    )
}

struct Run {
    site: Site,
    server: MockServer,
    effects: std::path::PathBuf,
}

async fn setup() -> Run {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    let effects = site.path().join("effects.txt");
    site.put_bundle("crash", &bundle(&effects));
    Run {
        site,
        server,
        effects,
    }
}

/// The history the run had, rebuilt from its journal: the initial messages,
/// then per turn the assistant message and the tool messages in call order.
async fn history(http: &reqwest::Client, daemon: &Daemon, id: &str) -> Vec<Value> {
    let journal = get(http, daemon, &format!("/v1/jobs/{id}/journal")).await;
    let steps = journal["steps"].as_array().unwrap();
    let find = |turn: u64, step: &str| {
        steps
            .iter()
            .find(|s| s["scope"] == "" && s["turn"] == turn && s["step"] == step)
            .map(|s| s["body"].clone())
    };
    let mut out: Vec<Value> = find(0, "input").unwrap().as_array().unwrap().clone();
    for turn in 1.. {
        let Some(reply) = find(turn, "reply") else {
            break;
        };
        let assistant = reply["assistant"].clone();
        out.push(assistant.clone());
        // Results are keyed by the call's position in the reply.
        let calls = assistant["tool_calls"].as_array().into_iter().flatten();
        for (position, _) in calls.enumerate() {
            let result = find(turn, &format!("result@{position}"))
                .unwrap_or_else(|| panic!("turn {turn}: no result for call {position}"));
            out.push(result["result"].clone());
        }
    }
    out
}

/// Checks the event log: sequence 1..=N with no gap and no duplicate, and
/// exactly one terminal JobState event.
async fn check_event_log(http: &reqwest::Client, daemon: &Daemon, id: &str) -> Vec<Value> {
    let data = job_events(http, daemon, id).await;
    let seqs: Vec<u64> = data.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "the event log has a gap or a duplicate"
    );
    let terminal: Vec<&Value> = data
        .iter()
        .filter(|e| {
            e["type"] == "JobState"
                && matches!(
                    e["state"].as_str(),
                    Some("succeeded" | "failed" | "dead" | "cancelled")
                )
        })
        .collect();
    assert_eq!(
        terminal.len(),
        1,
        "the job must end exactly once: {terminal:?}"
    );
    data
}

/// The lines each turn's `append` call (the second of its turn) writes: its
/// text and its idempotency key, `{job}:{turn}:{position}`.
fn expected_lines(job: &str) -> Vec<String> {
    (1..=3).map(|t| format!("t{t} {job}:{t}:1")).collect()
}

/// An uninterrupted run of the same job on a fresh site: the reference.
async fn reference_history() -> Vec<Value> {
    let run = setup().await;
    let daemon = run.site.start();
    let http = client();
    let job = common::daemon::submit(&http, &daemon, "crash", "write three lines").await;
    let id = job["id"].as_str().unwrap();
    let done = wait_terminal(&http, &daemon, id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(run.server.requests().len(), 4);
    assert_eq!(file_lines(&run.effects), expected_lines(id));
    history(&http, &daemon, id).await
}

/// Runs the job with `failpoint` armed, restarts after the kill, finishes it
/// (resolving it when it parks), and checks every promise.
async fn crash_at(failpoint: &str) {
    let reference = reference_history().await;
    let run = setup().await;
    let http = client();
    let mut daemon = run
        .site
        .start_with_env(&[("SA_FAILPOINTS", failpoint), SHORT_LEASE]);
    let body =
        json!({"bundle": "crash", "input": "write three lines", "idempotency_key": "crash-1"});
    // With `after_submit_commit` the daemon dies before answering.
    let submitted = http.post(daemon.url("/v1/jobs")).json(&body).send().await;
    daemon.wait_killed_at(failpoint.split('@').next().unwrap());
    drop(daemon);
    let model_calls_before = run.server.requests().len();

    let daemon = run.site.start();
    // A client that saw no answer submits again with the same key.
    let again = http
        .post(daemon.url("/v1/jobs"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let again_status = again.status();
    let job: Value = again.json().await.unwrap();
    assert_eq!(
        again_status, 200,
        "the key names the job already stored: {job}"
    );
    if let Ok(first) = submitted
        && let Ok(first) = first.json::<Value>().await
    {
        assert_eq!(first["id"], job["id"]);
    }
    let id = job["id"].as_str().unwrap().to_string();

    let parked = eventually(Duration::from_secs(60), "the job settles", || async {
        let job = get(&http, &daemon, &format!("/v1/jobs/{id}")).await;
        match job["state"].as_str() {
            Some("needs_attention" | "succeeded" | "failed" | "dead" | "cancelled") => Some(job),
            _ => None,
        }
    })
    .await;
    if parked["state"] == "needs_attention" {
        // The unsafe call was cut short after its effect: the operator tells
        // the daemon what it returned instead of running it again.
        let pending = &parked["pending_call"];
        assert_eq!(pending["tool"], "append", "{parked}");
        let resolved = http
            .post(daemon.url(&format!("/v1/jobs/{id}/resolve")))
            .json(&json!({"action": "skip", "output": format!("{{\"written\": \"{}\"}}", pending["arguments"]["line"].as_str().unwrap())}))
            .send()
            .await
            .unwrap();
        assert_eq!(resolved.status(), 200, "{}", resolved.text().await.unwrap());
    }
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}\nlog:\n{}", daemon.log());

    // No model call of a completed turn was repeated: four in all.
    let model_calls = run.server.requests().len();
    assert_eq!(
        model_calls, 4,
        "model calls: {model_calls_before} before the crash, {model_calls} in all"
    );
    assert_eq!(
        file_lines(&run.effects),
        expected_lines(&id),
        "each side effect exactly once, with the same idempotency key on every attempt"
    );
    let events = check_event_log(&http, &daemon, &id).await;
    if !matches!(failpoint, "after_submit_commit") {
        assert!(
            events.iter().any(|e| e["type"] == "Resumed"),
            "the resumed attempt is marked in the event log"
        );
    }
    assert_eq!(
        history(&http, &daemon, &id).await,
        reference,
        "the resumed run's history equals an uninterrupted run's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_a_model_reply_is_recorded() {
    crash_at("after_reply_recorded@2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_before_a_tool_starts() {
    crash_at("before_tool_start@4").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_while_a_tool_runs() {
    crash_at("tool_running@4").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_a_tool_result_is_recorded() {
    crash_at("after_tool_result_recorded@4").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_before_the_completion_commit() {
    crash_at("before_completion_commit").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_the_submit_commit_before_the_answer() {
    crash_at("after_submit_commit").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_answers_only_parked_jobs_and_names_them() {
    let run = setup().await;
    let daemon = run.site.start();
    let http = client();
    let job = common::daemon::submit(&http, &daemon, "crash", "write three lines").await;
    let id = job["id"].as_str().unwrap();
    wait_terminal(&http, &daemon, id, Duration::from_secs(60)).await;
    let response = http
        .post(daemon.url(&format!("/v1/jobs/{id}/resolve")))
        .json(&json!({"action": "retry"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 409);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("succeeded"),
        "{body}"
    );
    let missing = http
        .post(daemon.url("/v1/jobs/nope/resolve"))
        .json(&json!({"action": "fail"}))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    // The CLI says the same, and asks for an action when given none.
    let cli = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_structured-agents"))
            .args(args)
            .args(["--server", &daemon.base])
            .output()
            .unwrap()
    };
    let refused = cli(&["resolve", id, "--retry"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("succeeded") && stderr.contains(id),
        "{stderr}"
    );
    let no_action = cli(&["resolve", id]);
    assert_eq!(no_action.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&no_action.stderr).contains("--retry, --skip RESULT or --fail")
    );
    let bad = http
        .post(daemon.url(&format!("/v1/jobs/{id}/resolve")))
        .json(&json!({"action": "maybe"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 422);
}

const NESTED_SCRIPT: &str = r#"
replies:
  - {match: parent task, turn: 1, tool_calls: [{id: p1, name: helper, arguments: {input: child go}}]}
  - {match: parent task, turn: 2, content: parent done}
  - {match: child go, turn: 1, tool_calls: [{id: k1, name: append, arguments: {line: c1}}]}
  - {match: child go, turn: 2, content: child done}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_agent_run_resumes_from_its_own_journal() {
    let server = mock_server(NESTED_SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    let effects = site.path().join("effects.txt");
    site.put_bundle("crash", &bundle(&effects));
    site.put_bundle(
        "parent",
        r#"
name: parent
version: "1"
model: {endpoint: mock, name: m, plugin: openai}
prompts: {user: "{{ input }}"}
tools:
  - name: helper
    kind: agent
    bundle: crash
"#,
    );
    let http = client();
    // The first tool result recorded is the child's `append`: die right after.
    let mut daemon =
        site.start_with_env(&[("SA_FAILPOINTS", "after_tool_result_recorded"), SHORT_LEASE]);
    let job = common::daemon::submit(&http, &daemon, "parent", "parent task").await;
    let id = job["id"].as_str().unwrap().to_string();
    daemon.wait_killed_at("after_tool_result_recorded");
    drop(daemon);
    assert_eq!(server.requests().len(), 2, "parent turn 1 and child turn 1");

    let daemon = site.start();
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(done["result"]["output"], "parent done");
    // Child turn 1 and its tool were replayed; only child turn 2 and parent
    // turn 2 were asked for.
    assert_eq!(server.requests().len(), 4);
    assert_eq!(file_lines(&effects), [format!("c1 {id}:1:0:1:0")]);
    let journal = get(&http, &daemon, &format!("/v1/jobs/{id}/journal")).await;
    assert!(
        journal["steps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["scope"] == "1:0/" && s["step"] == "result@0"),
        "the child's steps are scoped under the agent call: {journal}"
    );
    check_event_log(&http, &daemon, &id).await;
}

/// Kills the daemon right after the first reply of a `crash` job was
/// recorded, then edits the bundle (same version string, different
/// content) while the daemon is down → the job's id.
async fn crash_then_edit(run: &Run, http: &reqwest::Client) -> String {
    let mut daemon = run
        .site
        .start_with_env(&[("SA_FAILPOINTS", "after_reply_recorded"), SHORT_LEASE]);
    let job = common::daemon::submit(http, &daemon, "crash", "write three lines").await;
    let id = job["id"].as_str().unwrap().to_string();
    daemon.wait_killed_at("after_reply_recorded");
    drop(daemon);
    let edited = bundle(&run.effects).replace("You write lines.", "You write lines carefully.");
    run.site.put_bundle("crash", &edited);
    id
}

/// The bundle is edited while the daemon is down: the job resumes on the
/// content it started with (its content-addressed copy in the state
/// directory), never on the edit; a new job runs the edit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_resumes_on_the_content_it_started_with_after_an_edit() {
    let run = setup().await;
    let http = client();
    let id = crash_then_edit(&run, &http).await;

    let daemon = run.site.start();
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    let requests = run.server.requests();
    assert!(requests.len() > 1, "the job went on after the restart");
    for request in &requests {
        let system = request["messages"][0]["content"].to_string();
        assert!(
            system.contains("You write lines.") && !system.contains("carefully"),
            "every turn of the job ran its original content: {system}"
        );
    }
    let after = requests.len();
    let fresh = submit_and_wait(
        &http,
        &daemon,
        json!({"bundle": "crash", "input": "write three lines"}),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(fresh["state"], "succeeded", "{fresh}");
    let requests = run.server.requests();
    assert!(
        requests[after]["messages"][0]["content"]
            .to_string()
            .contains("carefully"),
        "a new job runs the edit"
    );
}

/// When the copy a job was pinned to is gone as well, the job fails saying
/// why; nothing runs against the edited content.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_content_is_gone_fails_and_never_runs_an_edit() {
    let run = setup().await;
    let http = client();
    let id = crash_then_edit(&run, &http).await;
    std::fs::remove_dir_all(run.site.path().join("state/bundles")).unwrap();

    let daemon = run.site.start();
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "failed", "{done}");
    let error = done["error"].as_str().unwrap();
    assert!(
        error.contains("can no longer be loaded")
            && error.contains("never replayed against different content")
            && error.contains(&id),
        "{error}"
    );
    assert_eq!(
        run.server.requests().len(),
        1,
        "nothing ran against the new content"
    );
    assert!(file_lines(&run.effects).is_empty());
}

/// A child bundle whose `charge` tool writes its line, then runs until its
/// daemon is gone (it is killed while the charge runs).
fn charging_child(effects: &Path, effect: &str) -> String {
    format!(
        "name: child\nversion: \"1\"\nmodel: {{endpoint: mock, name: m, plugin: openai}}\nprompts: {{user: \"{{{{ input }}}}\"}}\n{}",
        common::daemon::charge_tools(effects, effect)
    )
}

const CHARGE_SCRIPT: &str = r#"
replies:
  - {match: parent task, turn: 1, tool_calls: [{id: dup, name: helper, arguments: {input: child go}}]}
  - {match: parent task, turn: 2, content: parent done}
  - {match: child go, turn: 1, tool_calls: [{id: dup/x, name: charge, arguments: {}}]}
  - {match: child go, turn: 2, content: child done}
"#;

/// Starts a parent job whose nested agent's `charge` call is running, kills
/// the daemon once the charge's line is written, and returns the job id.
async fn kill_during_nested_charge(site: &Site, effects: &Path) -> String {
    site.put_bundle(
        "parent",
        "name: parent\nversion: \"1\"\nmodel: {endpoint: mock, name: m, plugin: openai}\nprompts: {user: \"{{ input }}\"}\ntools:\n  - {name: helper, kind: agent, bundle: child}\n",
    );
    let http = client();
    // Its lease is what the restarted daemon waits out before resuming.
    let daemon = site.start_with_env(&[SHORT_LEASE]);
    let job = common::daemon::submit(&http, &daemon, "parent", "parent task").await;
    common::daemon::kill_while_charging(daemon, effects).await;
    job["id"].as_str().unwrap().to_string()
}

/// An unsafe call of unknown outcome inside a nested agent parks the whole
/// job (never an error string the parent model reads); `resolve --skip`
/// hands the result to that innermost call and the job finishes once. The
/// model's call ids (one with a `/`) are data, never journal keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_outcome_in_a_nested_agent_parks_the_whole_job() {
    let server = mock_server(CHARGE_SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    let effects = site.path().join("effects.txt");
    site.put_bundle("child", &charging_child(&effects, "unsafe"));
    let id = kill_during_nested_charge(&site, &effects).await;
    assert_eq!(server.requests().len(), 2, "parent turn 1 and child turn 1");

    let http = client();
    let daemon = site.start();
    let pending = common::daemon::parked_on_charge(&http, &daemon, &id).await;
    assert_eq!(pending["scope"], "1:0/", "the innermost call, at its depth");
    assert_eq!(
        pending["call_id"], "dup/x",
        "the model's id is kept as data"
    );
    common::daemon::skip_charge(&http, &daemon, &id).await;
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(done["result"]["output"], "parent done");
    assert_eq!(file_lines(&effects), [format!("charged {id}:1:0:1:0")]);
    assert_eq!(server.requests().len(), 4, "no completed model call again");
    check_event_log(&http, &daemon, &id).await;
}

/// A nested agent's `idempotent` or `read_only` call cut short by the kill
/// runs again on resume (with the same idempotency key, which the backend
/// honours): the job succeeds without parking, the charge made once, no
/// completed model call asked again.
async fn a_repeatable_call_in_a_nested_agent_runs_again(effect: &str) {
    let server = mock_server(CHARGE_SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    let effects = site.path().join("effects.txt");
    site.put_bundle("child", &charging_child(&effects, effect));
    let id = kill_during_nested_charge(&site, &effects).await;
    let http = client();
    let daemon = site.start();
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(file_lines(&effects), [format!("charged {id}:1:0:1:0")]);
    assert_eq!(server.requests().len(), 4, "no completed model call again");
    check_event_log(&http, &daemon, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_call_in_a_nested_agent_runs_again() {
    a_repeatable_call_in_a_nested_agent_runs_again("idempotent").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_call_in_a_nested_agent_runs_again() {
    a_repeatable_call_in_a_nested_agent_runs_again("read_only").await;
}

/// The child bundle is edited while the daemon is down (its content, and its
/// `charge` tool now claims to be `idempotent`): the resumed job runs the
/// child it started with, whose `unsafe` charge has an unknown outcome, so
/// it parks for an operator; the charge never runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_run_resumes_on_its_original_child_not_an_edit() {
    let server = mock_server(CHARGE_SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    let effects = site.path().join("effects.txt");
    site.put_bundle("child", &charging_child(&effects, "unsafe"));
    let id = kill_during_nested_charge(&site, &effects).await;
    site.put_bundle("child", &charging_child(&effects, "idempotent"));

    let http = client();
    let daemon = site.start();
    let pending = common::daemon::parked_on_charge(&http, &daemon, &id).await;
    assert_eq!(pending["scope"], "1:0/", "{pending}");
    common::daemon::skip_charge(&http, &daemon, &id).await;
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(file_lines(&effects).len(), 1, "the charge ran once");
    assert_eq!(server.requests().len(), 4, "no completed model call again");
}

/// A crash is not a failed attempt: with `max_attempts = 1`, a kill just
/// before the completion commit leaves a job that resumes from its journal
/// and succeeds, without asking the model again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_does_not_use_up_the_attempts() {
    let run = setup().await;
    let http = client();
    let mut daemon = run
        .site
        .start_with_env(&[("SA_FAILPOINTS", "before_completion_commit"), SHORT_LEASE]);
    let job = common::daemon::submit_body(
        &http,
        &daemon,
        json!({"bundle": "crash", "input": "write three lines", "max_attempts": 1}),
    )
    .await;
    let id = job["id"].as_str().unwrap().to_string();
    daemon.wait_killed_at("before_completion_commit");
    drop(daemon);

    let daemon = run.site.start();
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(
        (done["attempts"].as_u64(), done["crash_resumes"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(run.server.requests().len(), 4, "no model call asked again");
    assert_eq!(file_lines(&run.effects), expected_lines(&id));
    check_event_log(&http, &daemon, &id).await;
}

/// A job that kills its daemon on every attempt is a poison pill: after
/// `queue.max_crash_resumes` resumes it parks in `needs_attention` saying
/// so and where it was — never `dead` in silence — and waits for an operator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_kills_its_daemon_every_time_parks() {
    let run = setup().await;
    let http = client();
    let resumes = ("STRUCTURED_AGENTS_QUEUE__MAX_CRASH_RESUMES", "1");
    let mut id = String::new();
    for _ in 0..2 {
        // Each daemon dies at its first recorded reply.
        let mut daemon = run.site.start_with_env(&[
            ("SA_FAILPOINTS", "after_reply_recorded"),
            SHORT_LEASE,
            resumes,
        ]);
        if id.is_empty() {
            let job = common::daemon::submit(&http, &daemon, "crash", "write three lines").await;
            id = job["id"].as_str().unwrap().to_string();
        }
        daemon.wait_killed_at("after_reply_recorded");
    }
    let daemon = run.site.start_with_env(&[resumes]);
    let parked = wait_settled(&http, &daemon, &id).await;
    assert_eq!(parked["state"], "needs_attention", "{parked}");
    let error = parked["error"].as_str().unwrap();
    assert!(
        error.contains("died") && error.contains("2 times") && error.contains("max_crash_resumes"),
        "{error}"
    );
    assert_eq!(parked["pending_call"], Value::Null);
    assert_eq!(run.server.requests().len(), 2, "one new turn per attempt");
}

/// Submits a `crash` job to a daemon that dies while its first `append`
/// (unsafe) runs; the job parks when a later daemon takes it up.
async fn job_killed_in_its_unsafe_call(run: &Run, http: &reqwest::Client) -> String {
    let mut daemon = run
        .site
        .start_with_env(&[("SA_FAILPOINTS", "tool_running@2"), SHORT_LEASE]);
    let job = common::daemon::submit(http, &daemon, "crash", "write three lines").await;
    daemon.wait_killed_at("tool_running");
    job["id"].as_str().unwrap().to_string()
}

/// Every terminal transition an operator makes writes the job's final
/// `JobState` event and counts it: cancelling a parked job, and `resolve
/// --fail`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_or_failing_a_parked_job_writes_its_final_event() {
    let run = setup().await;
    let http = client();
    let first = job_killed_in_its_unsafe_call(&run, &http).await;
    let second = job_killed_in_its_unsafe_call(&run, &http).await;
    let daemon = run.site.start();
    for id in [&first, &second] {
        let parked = wait_settled(&http, &daemon, id).await;
        assert_eq!(parked["state"], "needs_attention", "{parked}");
    }
    let cancelled = http
        .post(daemon.url(&format!("/v1/jobs/{first}/cancel")))
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(cancelled.status(), 200);
    let fail = json!({"action": "fail", "reason": "refunded by hand"});
    resolve(&http, &daemon, &second, fail).await;
    for (id, state) in [(&first, "cancelled"), (&second, "failed")] {
        let events = check_event_log(&http, &daemon, id).await;
        let last = events.last().unwrap();
        assert_eq!(
            (&last["type"], &last["state"]),
            (&json!("JobState"), &json!(state))
        );
        let series =
            format!("structured_agents_jobs_finished_total{{bundle=\"crash\",state=\"{state}\"}}");
        assert_eq!(
            common::daemon::metric(&http, &daemon, &series).await,
            1,
            "{series}"
        );
    }
}

/// A journal write whose commit happened but whose answer was lost (the
/// `steps_reply_lost` failpoint: as a connection dropped right after
/// COMMIT) is recognised when retried, so the attempt's later writes are
/// not refused as duplicates: the job ends once, its event log gap-free,
/// without asking the model again for the step that was committed.
async fn a_lost_commit_reply_is_recognised(mut env: Vec<(&'static str, String)>) {
    let run = setup().await;
    let http = client();
    env.push(("SA_FAILPOINTS", "steps_reply_lost".into()));
    let daemon = run.site.start_with_env(&env);
    let job = common::daemon::submit(&http, &daemon, "crash", "write three lines").await;
    let id = job["id"].as_str().unwrap().to_string();
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(
        run.server.requests().len(),
        4,
        "the committed reply is not asked for again"
    );
    assert_eq!(file_lines(&run.effects), expected_lines(&id));
    check_event_log(&http, &daemon, &id).await;
    assert!(
        daemon.log().contains("failpoint steps_reply_lost"),
        "the lost reply was injected: {}",
        daemon.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_commit_reply_is_recognised_on_sqlite() {
    a_lost_commit_reply_is_recognised(Vec::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_commit_reply_is_recognised_on_postgres() {
    let schema = common::postgres::Schema::fresh();
    a_lost_commit_reply_is_recognised(schema.daemon_env()).await;
}

/// A misspelt failpoint would never fire, and the crash test armed with it
/// would prove nothing: `serve` refuses it, naming the entry and the names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misspelt_failpoint_refuses_the_start() {
    let run = setup().await;
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_structured-agents"))
        .args(["serve", "--config"])
        .arg(run.site.path().join("config.toml"))
        .env("SA_FAILPOINTS", "after_reply_recorded@2,befor_model_call")
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("\"befor_model_call\"") && stderr.contains("before_model_call"),
        "{stderr}"
    );
}

/// Every failpoint is armed by a crash test (which then asserts that it
/// fired: `wait_killed_at`, or the daemon's log). A new failpoint without a
/// test fails here.
#[test]
fn every_failpoint_is_armed_by_a_crash_test() {
    use structured_agents::failpoint::Failpoint;
    let mut sources = String::new();
    for entry in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            sources.push_str(&std::fs::read_to_string(&path).unwrap());
        }
    }
    let unarmed: Vec<&str> = Failpoint::ALL
        .iter()
        .map(|point| point.name())
        .filter(|name| {
            !["\"", "@", ":"]
                .iter()
                .any(|end| sources.contains(&format!("\"{name}{end}")))
        })
        .collect();
    assert!(unarmed.is_empty(), "failpoints no test arms: {unarmed:?}");
}
