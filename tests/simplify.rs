//! `structured-agents simplify` (issue 38 item 4: the standalone `lol simp`)
//! through the real binary: the shipped `implement-review` example's
//! `simplify` stage run alone as a job of the daemon against a throwaway
//! demo repository — it starts there, commits what the simplifier changed,
//! passes its parse gate and ends finished; a daemon killed inside the
//! stage resumes it and commits once; a stage the bundle does not have, or
//! a bundle that is no workflow, is a 422 naming what to do.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::daemon::{
    Daemon, SHORT_LEASE, Site, client, job_events, post_json, run_cli, wait_terminal,
};
use common::{mock_server, repo};
use serde_json::{Value, json};
use structured_agents::mock::MockServer;

/// The simplifier's replies: it rewrites `calc.py` and writes its commit
/// report, then passes.
const SCRIPT: &str = r#"
replies:
  - match: "Simplify the change"
    turn: 1
    tool_calls:
      - name: write_file
        arguments: {path: calc.py, content: "def add(a, b):\n    return a + b\n"}
      - name: write_file
        arguments: {path: .tmp/simp-commit-report.txt, content: "calc: drop the temporary\n"}
  - match: "Simplify the change"
    turn: 2
    content: "Simplified calc.add.\nRESULT: pass"
"#;

/// The example bundle on a demo repository whose last commit added
/// `calc.py` (what the implement stage would have committed).
struct Example {
    site: Site,
    mock: MockServer,
    demo: tempfile::TempDir,
}

impl Example {
    fn clone_dir(&self) -> std::path::PathBuf {
        self.demo.path().join("repo")
    }
}

async fn example() -> Example {
    let mock = mock_server(SCRIPT).await;
    let demo = tempfile::tempdir().unwrap();
    let made = Command::new(repo("scripts/workflow-demo"))
        .env("SA_DEMO_DIR", demo.path())
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let clone = demo.path().join("repo");
    std::fs::write(
        clone.join("calc.py"),
        "def add(a, b):\n    total = a + b\n    return total\n",
    )
    .unwrap();
    git(&clone, &["add", "calc.py"]);
    git(&clone, &["commit", "-q", "-m", "calc: add"]);

    let shipped = repo("config/examples/implement-review");
    let site = Site::new(&mock.base_url(), "");
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
    std::fs::write(dir.join("bundle.yaml"), yaml).unwrap();
    std::fs::rename(&dir, site.path().join("bundles/implement-review")).unwrap();
    site.put_bundle(
        "plain",
        "name: plain\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\n",
    );
    Example { site, mock, demo }
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `structured-agents --server BASE simplify ARGS…`.
async fn simplify(base: &str, args: &[&str]) -> (i32, String, String) {
    let base = base.to_string();
    let args: Vec<String> = std::iter::once("simplify".to_string())
        .chain(args.iter().map(|a| a.to_string()))
        .collect();
    let out: Output = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_cli(&base, &args, "")
    })
    .await
    .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The (stage, event) of every `StageEnd` of a job.
async fn stage_ends(daemon: &Daemon, id: &str) -> Vec<(String, String)> {
    job_events(&client(), daemon, id)
        .await
        .iter()
        .filter(|e| e["type"] == "StageEnd")
        .map(|e| {
            (
                e["stage"].as_str().unwrap().to_string(),
                e["event"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn simplified() -> Vec<(String, String)> {
    vec![("simplify".to_string(), "pass".to_string())]
}

/// The job the CLI printed first (`job ID STATE (bundle NAME)`).
fn job_id(stdout: &str) -> String {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("job "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("no job line in {stdout}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn simplify_runs_the_simplify_stage_alone_and_commits_what_it_changed() {
    let ex = example().await;
    let daemon = ex.site.start();
    let (code, out, err) = simplify(&daemon.base, &["--focus", "the temporary", "--follow"]).await;
    assert_eq!(code, 0, "{out}\n{err}\n{}", daemon.log());
    assert!(
        out.contains("workflow implement-review starts at simplify"),
        "{out}"
    );
    assert!(out.contains("◆ simplify → pass"), "{out}");
    assert!(out.contains("next: finish"), "{out}");

    let id = job_id(&out);
    let done = wait_terminal(&client(), &daemon, &id, Duration::from_secs(30)).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["result"]["outcome"], "finish");
    assert_eq!(done["result"]["steps"], 1, "{done}");
    // The CLI sends `variables.only_stage`; the job's kind carries it.
    assert_eq!(
        done["kind"],
        json!({"type": "stage", "stage": "simplify"}),
        "{done}"
    );
    assert!(done["variables"].get("only_stage").is_none(), "{done}");
    assert_eq!(stage_ends(&daemon, &id).await, simplified());
    // The simplifier saw the last commit's file, and only it ran.
    let asked = ex.mock.requests();
    assert_eq!(asked.len(), 2, "{asked:?}");
    let prompt = asked[0]["messages"].to_string();
    assert!(prompt.contains("in calc.py without"), "{prompt}");
    assert!(prompt.contains("Focus: the temporary"), "{prompt}");

    // Its commit step committed the change with its report, on top of the
    // implementation's commit; the parse gate passed on it.
    let clone = ex.clone_dir();
    assert_eq!(
        git(&clone, &["log", "--format=%s", "main..feature"]),
        "calc: drop the temporary\ncalc: add\n"
    );
    assert_eq!(
        std::fs::read_to_string(clone.join("calc.py")).unwrap(),
        "def add(a, b):\n    return a + b\n"
    );
    let gate = common::daemon::get(
        &client(),
        &daemon,
        &format!("/v1/jobs/{id}/artifacts/simplified_parse-iter-1.json"),
    )
    .await;
    assert_eq!(gate["pass"], true, "{gate}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_daemon_killed_inside_the_stage_resumes_it_and_commits_once() {
    let ex = example().await;
    // The simplifier's last reply is recorded; the commit step has not run.
    let mut daemon = ex
        .site
        .start_with_env(&[("SA_FAILPOINTS", "after_reply_recorded@2"), SHORT_LEASE]);
    let (code, out, err) = simplify(&daemon.base, &[]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    let id = job_id(&out);
    daemon.wait_killed_at("after_reply_recorded");
    let daemon = ex.site.start();
    let done = wait_terminal(&client(), &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(done["attempts"], 2, "{done}");
    assert_eq!(stage_ends(&daemon, &id).await, simplified());
    assert_eq!(ex.mock.requests().len(), 2, "no completed model step again");
    assert_eq!(
        git(&ex.clone_dir(), &["log", "--format=%s", "main..feature"]),
        "calc: drop the temporary\ncalc: add\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stage_the_bundle_lacks_or_may_not_run_alone_or_a_bundle_without_a_workflow_is_refused() {
    let ex = example().await;
    let daemon = ex.site.start();
    let (code, out, err) = simplify(&daemon.base, &["--stage", "tidy"]).await;
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains("cannot run stage \"tidy\" of bundle \"implement-review\"")
            && err.contains("HTTP 422")
            && err.contains(
                "the workflow has no stage \"tidy\"; its stages are implement, pr, rebase, review, simplify"
            )
            && err.contains("variables.only_stage"),
        "{err}"
    );

    let (status, body) = post_json(
        &client(),
        &daemon,
        "/v1/jobs",
        json!({"bundle": "implement-review", "input": "", "variables": {"only_stage": "tidy"}}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["field"], "variables.only_stage", "{body}");

    // The PR stage exists, but the bundle's `run_alone` lists only
    // simplify: no job skips the review to push.
    let (status, body) = post_json(
        &client(),
        &daemon,
        "/v1/jobs",
        json!({"bundle": "implement-review", "input": "", "variables": {"only_stage": "pr"}}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["field"], "variables.only_stage", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message
            .contains("stage \"pr\" may not run alone: the workflow's `run_alone` lists simplify"),
        "{body}"
    );

    let (code, _, err) = simplify(&daemon.base, &["plain"]).await;
    assert_eq!(code, 2);
    assert!(
        err.contains("bundle \"plain\" has no `workflow:` section: name a workflow bundle"),
        "{err}"
    );
    assert_eq!(ex.mock.requests().len(), 0, "nothing ran");

    let jobs: Value = common::daemon::get(&client(), &daemon, "/v1/jobs").await;
    assert_eq!(jobs["jobs"].as_array().map(Vec::len), Some(0), "{jobs}");

    drop(daemon);
    let (code, _, err) = simplify("http://127.0.0.1:9", &[]).await;
    assert_eq!(code, 2);
    assert!(
        err.contains("cannot reach the daemon") && err.contains("structured-agents serve"),
        "{err}"
    );
}
