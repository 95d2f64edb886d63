//! Workflows through the real daemon: the shipped `implement-review`
//! example end to end against a throwaway git repository with a local bare
//! remote (its commits, its PR's body and base, its artifacts over the API,
//! its stage metrics), and `kill -9`
//! during an agent stage, during a command gate and between stages, each
//! resuming exactly: same stage and counters, no model call of a completed
//! step repeated, every stage ending once.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::daemon::{
    Daemon, SHORT_LEASE, Site, client, get, job_events, metric_samples, submit, wait_terminal,
};
use common::{mock_server, repo};
use serde_json::Value;
use structured_agents::mock::MockServer;

/// A site with the example bundle, a demo repository of its own, and the
/// example's replies served by a mock server that outlives daemon restarts
/// (so it counts every model call).
struct Example {
    site: Site,
    mock: MockServer,
    demo: tempfile::TempDir,
}

async fn example() -> Example {
    example_with("").await
}

async fn example_with(extra_config: &str) -> Example {
    example_on("main", extra_config, |yaml| yaml).await
}

/// The example against a demo repository whose remote's default branch is
/// `base`, with `edit` applied to its `bundle.yaml`.
async fn example_on(base: &str, extra_config: &str, edit: impl Fn(String) -> String) -> Example {
    let shipped = repo("config/examples/implement-review");
    let script = std::fs::read_to_string(shipped.join("script.yaml")).unwrap();
    let mock = mock_server(&script).await;
    let demo = tempfile::tempdir().unwrap();
    let made = Command::new(repo("scripts/workflow-demo"))
        .env("SA_DEMO_DIR", demo.path())
        .env("SA_DEMO_BASE", base)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let site = Site::new(&mock.base_url(), extra_config);
    let dir = site.path().join(".staging");
    std::fs::create_dir_all(dir.join("tools")).unwrap();
    std::fs::copy(
        shipped.join("tools/write_file.py"),
        dir.join("tools/write_file.py"),
    )
    .unwrap();
    let yaml = std::fs::read_to_string(shipped.join("bundle.yaml"))
        .unwrap()
        .replace("/tmp/structured-agents-demo", demo.path().to_str().unwrap())
        .replace("endpoint: scripted:script.yaml", "endpoint: mock");
    std::fs::write(dir.join("bundle.yaml"), edit(yaml)).unwrap();
    std::fs::rename(&dir, site.path().join("bundles/implement-review")).unwrap();
    Example { site, mock, demo }
}

/// The (stage, event) of every `StageEnd`, and the whole event log, of a job.
async fn stages(daemon: &Daemon, id: &str) -> (Vec<(String, String)>, Vec<Value>) {
    let events = job_events(&client(), daemon, id).await;
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "gap in the event log"
    );
    let ends = events
        .iter()
        .filter(|e| e["type"] == "StageEnd")
        .map(|e| {
            (
                e["stage"].as_str().unwrap().to_string(),
                e["event"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    (ends, events)
}

const EXPECTED: [(&str, &str); 5] = [
    ("implement", "parse_fail"),
    ("implement", "done"),
    ("review", "pass"),
    ("simplify", "pass"),
    ("pr", "pass"),
];

fn expected() -> Vec<(String, String)> {
    EXPECTED
        .iter()
        .map(|(s, e)| (s.to_string(), e.to_string()))
        .collect()
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_example_workflow_runs_end_to_end() {
    let ex = example().await;
    let daemon = ex.site.start();
    let http = client();
    let job = submit(&http, &daemon, "implement-review", "Implement issue 13").await;
    let id = job["id"].as_str().unwrap();
    let done = wait_terminal(&http, &daemon, id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    let (ends, events) = stages(&daemon, id).await;
    assert_eq!(ends, expected());
    // Each event also under the name `lol impl` gave it (the example's
    // `event_prefix`es).
    let originals: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "StageEnd")
        .map(|e| e["original_event"].as_str().unwrap())
        .collect();
    assert_eq!(
        originals,
        [
            "parse_fail",
            "impl_done",
            "review_pass",
            "simp_pass",
            "pr_pass"
        ]
    );
    assert_eq!(done["result"]["outcome"], "finish");
    assert_eq!(done["result"]["iteration"], 2);
    assert_eq!(ex.mock.requests().len(), 6);

    // The parse gate's traceback reached iteration 2 as retry context.
    let second_input = &ex.mock.requests()[2]["messages"];
    assert!(
        second_input.to_string().contains("calc.py"),
        "retry context missing: {second_input}"
    );
    let starts: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "WorkflowStart")
        .collect();
    assert_eq!(starts.len(), 1);
    assert_eq!(starts[0]["resumed"], false);
    assert_eq!(
        events.iter().filter(|e| e["type"] == "WorkflowEnd").count(),
        1
    );

    // Artifacts over the API.
    let list = get(&http, &daemon, &format!("/v1/jobs/{id}/artifacts")).await;
    let names: Vec<&str> = list["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    for name in [
        "impl-input-1",
        "impl-input-2",
        "impl-commit-iter-1.json",
        "impl-commit-iter-2.json",
        "parse-iter-1.json",
        "review-iter-2.json",
        "pr-iter-2.json",
    ] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    let parse = get(
        &http,
        &daemon,
        &format!("/v1/jobs/{id}/artifacts/parse-iter-1.json"),
    )
    .await;
    assert_eq!(parse["pass"], false, "{parse}");
    assert!(
        parse["failed_files"].to_string().contains("calc.py"),
        "{parse}"
    );
    let review = get(
        &http,
        &daemon,
        &format!("/v1/jobs/{id}/artifacts/review-iter-2.json"),
    )
    .await;
    assert_eq!(review["pass"], true, "{review}");
    assert_eq!(review["scores"]["faithful"], 96);
    let missing = http
        .get(daemon.url(&format!("/v1/jobs/{id}/artifacts/nope")))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert!(missing.text().await.unwrap().contains("review-iter-2.json"));

    // The same artifacts as files, in `artifacts_dir`.
    let on_disk =
        std::fs::read_to_string(ex.demo.path().join("artifacts/review-iter-2.json")).unwrap();
    assert_eq!(serde_json::from_str::<Value>(&on_disk).unwrap(), review);
    assert!(
        std::fs::read_to_string(ex.demo.path().join("artifacts/impl-input-2"))
            .unwrap()
            .contains("iteration 2")
    );

    // The implement stage's commit-report step committed each iteration
    // with the agent's report as its message (the report and the finalize
    // file stay out of the commit), before the parse gate checked it.
    let clone = ex.demo.path().join("repo");
    assert_eq!(
        git(&clone, &["log", "--format=%s", "main..feature"]),
        "calc: fix the syntax error\ncalc: add\n"
    );
    assert_eq!(
        git(&clone, &["show", "--name-only", "--format=", "feature~1"]),
        "calc.py\n"
    );
    let commit = get(
        &http,
        &daemon,
        &format!("/v1/jobs/{id}/artifacts/impl-commit-iter-1.json"),
    )
    .await;
    assert_eq!(commit["committed"], true, "{commit}");

    // The PR stage pushed the branch to the bare remote and "opened" the PR
    // against the remote's default branch, its body the finalize file.
    let remote = ex.demo.path().join("remote.git");
    assert!(git(&remote, &["ls-tree", "--name-only", "feature"]).contains("calc.py"));
    let pr = git(&clone, &["notes", "--ref", "prs", "show"]);
    assert!(pr.contains("feature -> main"), "{pr}");
    assert!(
        pr.contains("[feat][#13] Add the calculator module\n\nAdds calc.add.\n\nIssue 13 resolved\n\nCloses #13"),
        "the body is the finalize file: {pr}"
    );
    assert_eq!(done["result"]["pr_url"], Value::Null, "{done}");

    // Stage metrics, labelled by stage and event.
    let samples = metric_samples(&http, &daemon, "structured_agents_workflow").await;
    let stage_runs = |stage: &str, event: &str| {
        samples
            .get(&format!(
                "structured_agents_workflow_stages_total{{bundle=\"implement-review\",event=\"{event}\",stage=\"{stage}\"}}"
            ))
            .copied()
            .unwrap_or(0)
    };
    assert_eq!(stage_runs("implement", "parse_fail"), 1, "{samples:?}");
    assert_eq!(stage_runs("pr", "pass"), 1, "{samples:?}");
    assert_eq!(
        samples.get("structured_agents_workflows_finished_total{bundle=\"implement-review\",outcome=\"finish\"}"),
        Some(&1)
    );

    // The CLI prints one artifact.
    let out = Command::new(env!("CARGO_BIN_EXE_structured-agents"))
        .args([
            "--server",
            &daemon.base,
            "artifacts",
            id,
            "review-iter-2.json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["scores"]["style"], 92);
}

/// A repository whose default branch is `develop` gets its PR against
/// `develop` (detected from the remote's HEAD), and the PR's URL and number
/// are top-level in the job's result.
#[tokio::test(flavor = "multi_thread")]
async fn the_pr_targets_the_remotes_default_branch_and_the_result_names_it() {
    let ex = example_on("develop", "", |yaml| {
        yaml.replace(
            r#"create_command: [git, notes, --ref, prs, add, -f, -m, "{{ title }} ({{ branch }} -> {{ base }})", -m, "{{ body }}"]"#,
            r#"create_command: [sh, -c, "git notes --ref prs add -f -m \"$0 -> $1\" && echo https://example.test/o/r/pull/7", "{{ branch }}", "{{ base }}"]"#,
        )
    })
    .await;
    let daemon = ex.site.start();
    let http = client();
    let job = submit(&http, &daemon, "implement-review", "Implement issue 13").await;
    let id = job["id"].as_str().unwrap();
    let done = wait_terminal(&http, &daemon, id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    let clone = ex.demo.path().join("repo");
    let pr = git(&clone, &["notes", "--ref", "prs", "show"]);
    assert_eq!(pr, "feature -> develop\n");
    assert_eq!(done["result"]["pr_url"], "https://example.test/o/r/pull/7");
    assert_eq!(done["result"]["pr_number"], 7);
    let report = get(
        &http,
        &daemon,
        &format!("/v1/jobs/{id}/artifacts/pr-iter-2.json"),
    )
    .await;
    assert_eq!(report["details"]["base"], "develop", "{report}");
}

/// Kills the daemon at `failpoint`, starts it again, and checks the job
/// resumed exactly.
async fn resumes_after_kill_at(failpoint: &str) {
    let ex = example().await;
    let mut daemon = ex
        .site
        .start_with_env(&[("SA_FAILPOINTS", failpoint), SHORT_LEASE]);
    let http = client();
    let job = submit(&http, &daemon, "implement-review", "Implement issue 13").await;
    let id = job["id"].as_str().unwrap().to_string();
    let name = failpoint.split('@').next().unwrap();
    daemon.wait_killed_at(name);
    let daemon = ex.site.start();
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(done["attempts"], 2, "{done}");
    let (ends, events) = stages(&daemon, &id).await;
    // Every stage ended once: the interrupted one only in the second attempt.
    assert_eq!(ends, expected(), "after a kill at {failpoint}");
    // No completed model step was asked again.
    assert_eq!(
        ex.mock.requests().len(),
        6,
        "model calls after a kill at {failpoint}"
    );
    let starts: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "WorkflowStart")
        .collect();
    assert_eq!(starts.len(), 2);
    assert_eq!(starts[1]["resumed"], true);
    assert_eq!(
        events.iter().filter(|e| e["type"] == "WorkflowEnd").count(),
        1
    );
    assert_eq!(done["result"]["iteration"], 2);
    assert_eq!(done["result"]["steps"], 5, "{done}");
    // Each iteration committed once, however often its stage ran.
    let clone = ex.demo.path().join("repo");
    assert_eq!(
        git(&clone, &["log", "--format=%s", "main..feature"]),
        "calc: fix the syntax error\ncalc: add\n",
        "after a kill at {failpoint}"
    );
    drop(ex.demo);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kill_during_an_agent_stage_resumes_that_stage_at_its_step() {
    // The third model reply (iteration 2's first) is recorded; its tool has not run.
    resumes_after_kill_at("after_reply_recorded@3").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kill_during_a_command_gate_runs_the_gate_again() {
    // The parse gate of iteration 1 is running.
    resumes_after_kill_at("gate_started@1").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kill_between_stages_resumes_at_the_next_stage() {
    // The checkpoint before the third dispatch (review) is durable.
    resumes_after_kill_at("after_checkpoint@3").await;
}

/// Rewrites every checkpoint `job` has stored in `db` into format 1, the
/// layout of the daemons before the git kinds had their own section (its
/// fields at the top), and returns the last one.
fn checkpoints_to_format_1(db: &Path, job: &str) -> Value {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut rows: Vec<(String, i64, String)> = conn
        .prepare("SELECT scope, turn, body FROM journal WHERE job_id = ?1 AND step = 'checkpoint' ORDER BY turn")
        .unwrap()
        .query_map([job], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(!rows.is_empty(), "no checkpoint stored for {job}");
    for (scope, turn, body) in &mut rows {
        let mut cp: Value = serde_json::from_str(body).unwrap();
        let top = cp.as_object_mut().unwrap();
        let kinds = top.remove("kinds").unwrap_or_default();
        if let Some(git) = kinds.get("git").and_then(Value::as_object) {
            top.extend(git.clone());
        }
        top.insert("format".into(), 1.into());
        *body = cp.to_string();
        conn.execute(
            "UPDATE journal SET body = ?1 WHERE job_id = ?2 AND scope = ?3 AND turn = ?4 AND step = 'checkpoint'",
            (body.as_str(), job, scope.as_str(), *turn),
        )
        .unwrap();
    }
    serde_json::from_str(&rows.last().unwrap().2).unwrap()
}

/// A job an older daemon stored goes on after an upgrade: killed right
/// after the checkpoint of its first dispatch (`implement`, whose commit
/// step keeps `HEAD` in the checkpoint), its checkpoint rewritten in
/// format 1, the next daemon resumes it and finishes the workflow as an
/// uninterrupted run does, committing each iteration once.
#[tokio::test(flavor = "multi_thread")]
async fn a_checkpoint_stored_in_format_1_resumes() {
    let ex = example().await;
    let mut daemon = ex
        .site
        .start_with_env(&[("SA_FAILPOINTS", "after_checkpoint@1"), SHORT_LEASE]);
    let http = client();
    let job = submit(&http, &daemon, "implement-review", "Implement issue 13").await;
    let id = job["id"].as_str().unwrap().to_string();
    daemon.wait_killed_at("after_checkpoint");
    let db = ex.site.path().join("state").join("queue.db");
    let stored = checkpoints_to_format_1(&db, &id);
    assert_eq!(stored["stage"], "implement", "{stored}");
    assert!(stored["commit_base"].is_string(), "{stored}");
    assert!(stored.get("kinds").is_none(), "{stored}");

    let daemon = ex.site.start();
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(done["attempts"], 2, "{done}");
    let (ends, _) = stages(&daemon, &id).await;
    assert_eq!(ends, expected());
    assert_eq!(done["result"]["iteration"], 2);
    assert_eq!(done["result"]["steps"], 5, "{done}");
    let clone = ex.demo.path().join("repo");
    assert_eq!(
        git(&clone, &["log", "--format=%s", "main..feature"]),
        "calc: fix the syntax error\ncalc: add\n"
    );
    drop(ex.demo);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_broken_workflow_is_refused_with_the_missing_pair() {
    let site = Site::new("http://127.0.0.1:9/v1", "");
    let yaml = std::fs::read_to_string(repo("config/examples/implement-review/bundle.yaml"))
        .unwrap()
        .replace(
            "    review: {pass: simplify, fail: implement}\n",
            "    review: {pass: simplify}\n",
        );
    let dir = site.path().join("bundles/broken");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("bundle.yaml"), yaml).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_structured-agents"))
        .args(["validate"])
        .arg(&dir)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(
            "bundle.yaml:131: workflow.transitions.review: missing transition: review + fail"
        ),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workflow_is_one_span_with_a_child_per_stage() {
    let (otlp, spans, _) = common::otlp::collector().await;
    let ex = example_with(&format!("[telemetry]\notlp_endpoint = \"{otlp}\"\n")).await;
    let daemon = ex.site.start();
    let http = client();
    let job = submit(&http, &daemon, "implement-review", "Implement issue 13").await;
    let id = job["id"].as_str().unwrap();
    let done = wait_terminal(&http, &daemon, id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded");
    // Shutdown flushes the exporter.
    assert_eq!(daemon.stop(), Some(0));
    let spans = spans.lock().unwrap().clone();
    let root = spans
        .iter()
        .find(|s| s.name == "invoke_workflow implement-review")
        .unwrap_or_else(|| {
            panic!(
                "no workflow span in {:?}",
                spans.iter().map(|s| &s.name).collect::<Vec<_>>()
            )
        });
    let children: Vec<_> = spans
        .iter()
        .filter(|s| s.parent_span_id == root.span_id)
        .collect();
    let mut stage_spans: Vec<_> = children
        .iter()
        .filter(|s| s.name.starts_with("stage "))
        .collect();
    stage_spans.sort_by_key(|s| s.start_time_unix_nano);
    let seen: Vec<(String, String)> = stage_spans
        .iter()
        .map(|s| {
            let a = common::otlp::attrs(s);
            (
                a["structured_agents.workflow.stage"].clone(),
                a["structured_agents.workflow.event"].clone(),
            )
        })
        .collect();
    assert_eq!(seen, expected());
    for span in &stage_spans {
        assert!(span.end_time_unix_nano >= span.start_time_unix_nano);
        assert!(span.start_time_unix_nano >= root.start_time_unix_nano);
        assert!(span.end_time_unix_nano <= root.end_time_unix_nano);
    }
    let a = common::otlp::attrs(stage_spans[0]);
    assert_eq!(a["structured_agents.workflow.iteration"], "1");
    assert!(
        a["structured_agents.workflow.reason"].contains("py_compile"),
        "{a:?}"
    );
    // The stages' agent runs hang under the workflow span.
    let agents = children
        .iter()
        .filter(|s| s.name.starts_with("invoke_agent"))
        .count();
    assert_eq!(agents, 4, "implement twice, review, simplify");
    assert_eq!(
        common::otlp::attrs(root)["structured_agents.workflow.outcome"],
        "finish"
    );
}

/// A workflow whose `work` stage is an agent stage of its own bundle, or a
/// score stage reviewed by the `reviewer` bundle (`kind`); the stage's agent
/// has a `charge` tool of `effect` (see `charge_tools`). Its directories
/// come from its own `data.place`, the directory beside the effects file
/// (outside the bundle, whose content the files written would change).
fn charging_workflow(effects: &Path, kind: &str, effect: &str) -> String {
    let place = effects.parent().unwrap().join("place");
    let place = place.display();
    let tools = common::daemon::charge_tools(effects, effect);
    let stage_bundle = "reviewer";
    let stage = match kind {
        "score" => format!("kind: score\n      bundle: {stage_bundle}\n      prompt: review it"),
        _ => "kind: agent\n      prompt: charge it\n      result: {regex: '(?m)^RESULT: (?P<event>\\w+)$', events: [done], otherwise: done}".to_string(),
    };
    let next = if kind == "score" {
        "{pass: finish, fail: finish}"
    } else {
        "{done: finish}"
    };
    format!(
        r#"name: wf
version: "1"
model: {{endpoint: mock, name: m, plugin: openai}}
prompts: {{user: "{{{{ input }}}}"}}
{tools}workflow:
  start: work
  working_dir: "{{{{ place }}}}"
  artifacts_dir: "{{{{ place }}}}/artifacts"
  data: {{place: "{place}"}}
  stages:
    work:
      {stage}
  transitions:
    work: {next}
"#
    )
}

/// Kills the daemon while the stage's charge (of `effect`) runs, restarts
/// it and checks that an `unsafe` call parked the whole job (then skips
/// it), while a repeatable one ran again; either way the job finishes once,
/// the charge made once and no completed model call asked again.
async fn a_stage_survives_a_kill_during_its_charge(kind: &str, effect: &str) {
    let mock = mock_server(
        "replies:\n  - {turn: 1, tool_calls: [{id: c, name: charge, arguments: {}}]}\n  - {turn: 2, content: \"RESULT: done\"}\n",
    )
    .await;
    let site = Site::new(&mock.base_url(), "");
    let effects = site.path().join("effects.txt");
    let elsewhere = tempfile::tempdir().unwrap();
    if kind == "score" {
        // The reviewer is another bundle with the same tool.
        let reviewer =
            charging_workflow(&effects, "agent", effect).replace("name: wf", "name: reviewer");
        let reviewer = reviewer.split("workflow:").next().unwrap().to_string();
        site.put_bundle("reviewer", &reviewer);
    }
    site.put_bundle("wf", &charging_workflow(&effects, kind, effect));
    let http = client();
    let daemon = site.start_with_env(&[SHORT_LEASE]);
    // The variable tries to move where gates run and files are written.
    let job = common::daemon::submit_body(
        &http,
        &daemon,
        serde_json::json!({"bundle": "wf", "input": "go", "variables": {"place": elsewhere.path()}}),
    )
    .await;
    let id = job["id"].as_str().unwrap().to_string();
    common::daemon::kill_while_charging(daemon, &effects).await;

    let daemon = site.start();
    if effect == "unsafe" {
        let pending = common::daemon::parked_on_charge(&http, &daemon, &id).await;
        assert!(
            pending["scope"].as_str().unwrap().ends_with("-work/"),
            "the call inside the stage: {pending}"
        );
        common::daemon::skip_charge(&http, &daemon, &id).await;
    }
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(
        common::daemon::file_lines(&effects).len(),
        1,
        "charged once"
    );
    assert_eq!(mock.requests().len(), 2, "no completed model call again");
    // The bundle's own `place` decided where files went, not the variable.
    let own = site.path().join("place/artifacts");
    assert!(
        own.join("work-input-1").exists() || kind == "score",
        "{own:?}"
    );
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_outcome_in_an_agent_stage_parks_the_job() {
    a_stage_survives_a_kill_during_its_charge("agent", "unsafe").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_outcome_in_a_score_stage_parks_the_job() {
    a_stage_survives_a_kill_during_its_charge("score", "unsafe").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_call_in_an_agent_stage_runs_again() {
    a_stage_survives_a_kill_during_its_charge("agent", "idempotent").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_call_in_a_score_stage_runs_again() {
    a_stage_survives_a_kill_during_its_charge("score", "read_only").await;
}

/// `resolve --skip` works at any depth: an unsafe charge of unknown outcome
/// in an agent nested inside a workflow's agent stage parks the whole job
/// naming that innermost call; skipping it finishes the stage and the job
/// once, the charge made once and no completed model call asked again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skip_reaches_a_call_in_an_agent_nested_in_a_stage() {
    let mock = mock_server(
        r#"
replies:
  - {match: charge it, turn: 1, tool_calls: [{id: h, name: helper, arguments: {input: child go}}]}
  - {match: charge it, turn: 2, content: "RESULT: done"}
  - {match: child go, turn: 1, tool_calls: [{id: c, name: charge, arguments: {}}]}
  - {match: child go, turn: 2, content: child done}
"#,
    )
    .await;
    let site = Site::new(&mock.base_url(), "");
    let effects = site.path().join("effects.txt");
    let child = format!(
        "name: child\nversion: \"1\"\nmodel: {{endpoint: mock, name: m, plugin: openai}}\nprompts: {{user: \"{{{{ input }}}}\"}}\n{}",
        common::daemon::charge_tools(&effects, "unsafe")
    );
    site.put_bundle("child", &child);
    let workflow = charging_workflow(&effects, "agent", "unsafe").replace(
        &common::daemon::charge_tools(&effects, "unsafe"),
        "tools:\n  - {name: helper, kind: agent, bundle: child}\n",
    );
    site.put_bundle("wf", &workflow);
    let http = client();
    let daemon = site.start_with_env(&[SHORT_LEASE]);
    let job = submit(&http, &daemon, "wf", "go").await;
    let id = job["id"].as_str().unwrap().to_string();
    common::daemon::kill_while_charging(daemon, &effects).await;

    let daemon = site.start();
    let pending = common::daemon::parked_on_charge(&http, &daemon, &id).await;
    let scope = pending["scope"].as_str().unwrap();
    assert!(
        scope.starts_with("0:s") && scope.ends_with("-work/1:0/"),
        "the charge inside the agent inside the stage: {pending}"
    );
    common::daemon::skip_charge(&http, &daemon, &id).await;
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(
        common::daemon::file_lines(&effects).len(),
        1,
        "charged once"
    );
    assert_eq!(mock.requests().len(), 4, "no completed model call again");
}

/// A gate command printing `bytes` bytes on `stream`, capped at `cap`.
async fn gate_printing(
    bytes: usize,
    stream: &str,
    cap: usize,
) -> structured_agents::workflow::command::CommandRun {
    let redirect = if stream == "stderr" { " >&2" } else { "" };
    let argv = [
        "sh".to_string(),
        "-c".to_string(),
        format!("printf '%{bytes}s' ''{redirect}"),
    ];
    structured_agents::workflow::run_command(
        &argv,
        &std::env::temp_dir(),
        Duration::from_secs(60),
        cap,
        &[],
    )
    .await
}

/// Gate output of exactly `max_output_bytes` is kept; one byte more on
/// either stream fails the command with an error naming the cap.
#[tokio::test]
async fn gate_output_one_byte_over_max_output_bytes_fails_the_gate() {
    for stream in ["stdout", "stderr"] {
        let fits = gate_printing(100, stream, 100).await;
        assert!(fits.success(), "{stream}: {fits:?}");
        assert_eq!(fits.output().len(), 100, "{stream}");

        let over = gate_printing(101, stream, 100).await;
        assert!(!over.success(), "{stream}: {over:?}");
        let error = over.error.clone().unwrap_or_default();
        assert!(
            error.contains(&format!("wrote more than 100 bytes on {stream}"))
                && error.contains("raise `max_output_bytes` on its stage"),
            "{stream}: {error}"
        );
        assert!(over.describe("sh").contains("max_output_bytes"));
    }
}

/// The built-in `ci` gate through the real daemon, as `lol impl
/// --wait-for-ci`: the PR's checks fail once, their output reaches the next
/// implementation prompt (once) as `ci_failure`, the fixed PR's checks pass
/// and the workflow finishes; both times the stage reports its original
/// event name beside ours.
#[tokio::test(flavor = "multi_thread")]
async fn failing_ci_checks_reach_the_next_iteration_as_ci_failure() {
    let mock = mock_server("replies:\n  - content: done\n").await;
    let site = Site::new(&mock.base_url(), "");
    let place = site.path().join("place");
    std::fs::create_dir_all(&place).unwrap();
    // The checks fail until the first run left `seen` behind; the failing
    // line is what `gh pr checks` prints: name, state, link.
    let checks = "if [ -e seen ]; then echo 'all checks passed'; else touch seen; \
                  printf 'lint\\tfail\\thttps://ci.example/runs/1\\n'; exit 1; fi";
    site.put_bundle(
        "ciwf",
        &format!(
            r#"name: ciwf
version: "1"
model: {{endpoint: mock, name: m, plugin: openai}}
prompts: {{user: "{{{{ input }}}}"}}
workflow:
  start: implement
  working_dir: "{{{{ place }}}}"
  data: {{place: "{}", pr_url: "https://git.example/acme/calc/pull/7", pr_number: 7}}
  stages:
    implement:
      kind: agent
      prompt: "Implement it (iteration {{{{ iteration }}}}).{{% if ci_failure %}} CI FAILED: {{{{ ci_failure }}}}{{% endif %}}"
    ci:
      kind: command
      builtin: ci
      ci: {{command: [sh, -c, "{}"]}}
  transitions:
    implement: {{done: ci, not_done: implement}}
    ci: {{pass: finish, fail: implement}}
"#,
            place.display(),
            checks
        ),
    );
    let daemon = site.start();
    let http = client();
    let job = submit(&http, &daemon, "ciwf", "go").await;
    let id = job["id"].as_str().unwrap().to_string();
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());

    let (ends, events) = stages(&daemon, &id).await;
    let pairs: Vec<(&str, &str)> = ends.iter().map(|(s, e)| (s.as_str(), e.as_str())).collect();
    assert_eq!(
        pairs,
        [
            ("implement", "done"),
            ("ci", "fail"),
            ("implement", "done"),
            ("ci", "pass")
        ]
    );
    let originals: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "StageEnd")
        .filter_map(|e| e["original_event"].as_str())
        .collect();
    assert_eq!(
        originals,
        ["implement_done", "ci_fail", "implement_done", "ci_pass"]
    );

    let prompts: Vec<String> = mock
        .requests()
        .iter()
        .map(|r| r["messages"].to_string())
        .collect();
    assert_eq!(prompts.len(), 2, "{prompts:#?}");
    assert!(!prompts[0].contains("CI FAILED"), "{}", prompts[0]);
    assert!(
        prompts[1].contains(
            "CI FAILED: PR: https://git.example/acme/calc/pull/7\\nFailing checks:\\nlint\\tfail\\thttps://ci.example/runs/1"
        ),
        "{}",
        prompts[1]
    );
}
