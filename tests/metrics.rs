//! Prometheus metrics of a real daemon after a workload: names, labels and
//! `promtool check metrics`.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::daemon::{Site, client, submit, wait_terminal};
use structured_agents::mock::{MockServer, Script};

const BUNDLE: &str = r#"name: metered
version: "1"
model: {endpoint: mock, name: mock-model}
prompts: {user: "{{ input }}"}
tools:
  - name: ok_tool
    kind: process
    command: [python3, -c, "print('{\"fine\": true}')"]
  - name: bad_tool
    kind: process
    command: [python3, -c, "import sys; sys.exit(3)"]
"#;

const SCRIPT: &str = r#"
replies:
  - tool_calls: [{name: ok_tool, arguments: {}}, {name: bad_tool, arguments: {}}]
    usage: {prompt_tokens: 120, completion_tokens: 30}
  - content: done
    usage: {prompt_tokens: 200, completion_tokens: 10}
"#;

/// Runs a workload and returns the scrape.
pub async fn scrape_after_workload() -> String {
    let server = MockServer::start(Script::parse(SCRIPT, "t").unwrap())
        .await
        .unwrap();
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("metered", BUNDLE);
    let daemon = site.start();
    let http = client();
    for i in 0..3 {
        let job = submit(&http, &daemon, "metered", &format!("job {i}")).await;
        wait_terminal(
            &http,
            &daemon,
            job["id"].as_str().unwrap(),
            Duration::from_secs(30),
        )
        .await;
    }
    let text = http
        .get(daemon.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(daemon.stop(), Some(0));
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_after_a_workload_pass_promtool() {
    let text = scrape_after_workload().await;
    for needle in [
        "structured_agents_jobs_submitted_total{bundle=\"metered\"} 3",
        "structured_agents_jobs_finished_total{bundle=\"metered\",state=\"succeeded\"} 3",
        "structured_agents_tool_calls_total{bundle=\"metered\",outcome=\"tool_error\",tool=\"bad_tool\"} 3",
        "structured_agents_tool_calls_total{bundle=\"metered\",outcome=\"ok\",tool=\"ok_tool\"} 3",
        "structured_agents_turns_total{bundle=\"metered\"} 6",
        "structured_agents_queue_jobs{state=\"succeeded\"} 3",
        "structured_agents_bundles{status=\"ok\"} 1",
        "structured_agents_reloads_total{result=\"applied\"}",
        "structured_agents_build_info{version=",
        "gen_ai_client_operation_duration_seconds_bucket{error_type=\"\",gen_ai_operation_name=\"chat\",gen_ai_provider_name=\"openai\",gen_ai_request_model=\"mock-model\",le=\"81.92\"} 6",
        "gen_ai_client_token_usage_sum{gen_ai_operation_name=\"chat\",gen_ai_request_model=\"mock-model\",gen_ai_token_type=\"input\"} 960",
        "gen_ai_client_token_usage_bucket{gen_ai_operation_name=\"chat\",gen_ai_request_model=\"mock-model\",gen_ai_token_type=\"output\",le=\"67108864\"} 6",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    assert!(!text.contains("job_id"), "job ids must never be labels");
    for line in text.lines().filter(|l| l.starts_with("# TYPE")) {
        let name = line.split_whitespace().nth(2).unwrap();
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "{name} has no HELP"
        );
    }

    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool is needed (Debian package `prometheus`; ./scripts/test installs it)");
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = promtool.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && report.trim().is_empty(),
        "promtool check metrics:\n{report}"
    );
}
