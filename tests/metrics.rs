//! Prometheus metrics of a real daemon after a workload: names, labels and
//! `promtool check metrics`; the dashboards' queries against a real
//! Prometheus; the alert rules under `promtool check rules` and `promtool
//! test rules`; and every exported family on a panel.

mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::daemon::{Site, client, eventually, submit_and_wait};
use common::mock_server;
use serde_json::json;

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
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("metered", BUNDLE);
    let daemon = site.start();
    let http = client();
    for i in 0..3 {
        submit_and_wait(
            &http,
            &daemon,
            json!({"bundle": "metered", "input": format!("job {i}")}),
            Duration::from_secs(30),
        )
        .await;
    }
    // A job's final JobState reaches the metrics observer after the job's
    // commit, so its API state can be terminal a moment before it is
    // counted. It is the last event of a job: once all three are counted as
    // finished, every count of the workload is in.
    let text = eventually(
        Duration::from_secs(60),
        "the three jobs counted as finished",
        || async {
            let text = http
                .get(daemon.url("/metrics"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            text.contains(
                "structured_agents_jobs_finished_total{bundle=\"metered\",state=\"succeeded\"} 3",
            )
            .then_some(text)
        },
    )
    .await;
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
        "structured_agents_tool_duration_seconds_count{bundle=\"metered\",outcome=\"ok\",tool=\"ok_tool\"} 3",
        "structured_agents_queue_jobs{state=\"queued\"} 0",
        "structured_agents_queue_jobs{state=\"needs_attention\"} 0",
        "structured_agents_bundles{status=\"ok\"} 1",
        "structured_agents_reloads_total{result=\"applied\"}",
        "structured_agents_build_info{version=",
        "gen_ai_client_operation_duration_seconds_bucket{error_type=\"\",gen_ai_operation_name=\"chat\",gen_ai_provider_name=\"openai\",gen_ai_request_model=\"mock-model\",le=\"81.92\"} 6",
        "gen_ai_client_token_usage_sum{gen_ai_operation_name=\"chat\",gen_ai_provider_name=\"openai\",gen_ai_request_model=\"mock-model\",gen_ai_token_type=\"input\"} 960",
        "gen_ai_client_token_usage_bucket{gen_ai_operation_name=\"chat\",gen_ai_provider_name=\"openai\",gen_ai_request_model=\"mock-model\",gen_ai_token_type=\"output\",le=\"67108864\"} 6",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    assert!(!text.contains("job_id"), "job ids must never be labels");
    let exported = exported_families();
    for line in text.lines().filter(|l| l.starts_with("# TYPE")) {
        let name = line.split_whitespace().nth(2).unwrap();
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "{name} has no HELP"
        );
        assert!(
            exported.contains(name),
            "{name} is scraped but not among the families src/telemetry names: {exported:?}"
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

/// Debian's Prometheus scrapes the daemon during a workload; every panel
/// query of every dashboard is evaluated through its HTTP API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboards_queries_work_against_real_prometheus() {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("metered", BUNDLE);
    let daemon = site.start();
    let http = client();
    let target = daemon.base.trim_start_matches("http://").to_string();

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let prom_dir = site.path().join("prometheus");
    std::fs::create_dir_all(&prom_dir).unwrap();
    std::fs::write(
        prom_dir.join("prometheus.yml"),
        format!("global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nscrape_configs:\n  - job_name: structured-agents\n    static_configs: [{{targets: [\"{target}\"]}}]\n"),
    )
    .unwrap();
    let prometheus = Command::new("prometheus")
        .arg(format!(
            "--config.file={}",
            prom_dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            prom_dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus is needed (Debian package `prometheus`; ./scripts/test installs it)");
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _guard = KillOnDrop(prometheus);
    let prom = format!("http://127.0.0.1:{port}");

    // Wait until Prometheus scrapes the daemon, then run jobs across several scrapes.
    common::daemon::eventually(
        Duration::from_secs(30),
        "prometheus scraping the daemon",
        || async {
            let r = http
                .get(format!("{prom}/api/v1/query?query=up"))
                .send()
                .await
                .ok()?;
            let v: serde_json::Value = r.json().await.ok()?;
            (v["data"]["result"][0]["value"][1] == "1").then_some(())
        },
    )
    .await;
    for i in 0..12 {
        submit_and_wait(
            &http,
            &daemon,
            json!({"bundle": "metered", "input": format!("job {i}")}),
            Duration::from_secs(30),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;

    for file in [
        "structured-agents-overview.json",
        "structured-agents-bundle.json",
    ] {
        let path = format!("{}/dashboards/{file}", env!("CARGO_MANIFEST_DIR"));
        let dashboard: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert!(dashboard["uid"].is_string(), "{file}: stable uid");
        assert!(dashboard.get("__inputs").is_none(), "{file}: no __inputs");
        let vars = dashboard["templating"]["list"].as_array().unwrap();
        assert!(
            vars.iter()
                .any(|v| v["type"] == "datasource" && v["query"] == "prometheus"),
            "{file}: datasource variable"
        );
        for panel in dashboard["panels"].as_array().unwrap() {
            let title = panel["title"].as_str().unwrap();
            assert!(
                panel["fieldConfig"]["defaults"]["unit"].is_string(),
                "{file}/{title}: unit"
            );
            let must = panel["description"]
                .as_str()
                .unwrap_or_default()
                .contains("[must-have-data]");
            let mut any_data = false;
            for target in panel["targets"].as_array().unwrap() {
                let expr = target["expr"].as_str().unwrap();
                assert!(
                    !expr.contains("[1m]") && !expr.contains("[5m]")
                        || expr.contains("$__rate_interval"),
                    "{file}/{title}: use $__rate_interval"
                );
                let query = expr
                    .replace("$__rate_interval", "1m")
                    .replace("$bundle", "metered");
                let url = reqwest::Url::parse_with_params(
                    &format!("{prom}/api/v1/query"),
                    &[("query", query.as_str())],
                )
                .unwrap();
                let response = http.get(url).send().await.unwrap();
                let body: serde_json::Value = response.json().await.unwrap();
                assert_eq!(body["status"], "success", "{file}/{title}: {query}: {body}");
                let results = body["data"]["result"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                any_data |= results
                    .iter()
                    .any(|r| r["value"][1].as_str().is_some_and(|v| v != "NaN"));
            }
            assert!(
                !must || any_data,
                "{file}/{title}: no data after the workload"
            );
        }
    }
    assert_eq!(daemon.stop(), Some(0));
}

fn repo(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Every metric family the daemon exports to Prometheus: the names
/// `src/telemetry` registers (a family with no sample yet is not in a
/// scrape, so the scrape alone cannot list them).
fn exported_families() -> BTreeSet<String> {
    let name = regex::Regex::new(r#""((?:structured_agents|gen_ai_client)_[a-z_]+)""#).unwrap();
    let mut families = BTreeSet::new();
    let mut dirs = vec![repo("src/telemetry")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                families.extend(name.captures_iter(&text).map(|c| c[1].to_string()));
            }
        }
    }
    assert!(families.len() > 40, "too few families found: {families:?}");
    families
}

/// The metric families a PromQL expression reads (a histogram's
/// `_bucket`, `_sum` and `_count` series named by their family).
fn families_read(expr: &str, exported: &BTreeSet<String>) -> BTreeSet<String> {
    let name = regex::Regex::new(r"\b((?:structured_agents|gen_ai_client)_[a-z_]+)").unwrap();
    name.captures_iter(expr)
        .map(|c| {
            let series = &c[1];
            ["_bucket", "_sum", "_count"]
                .iter()
                .filter_map(|suffix| series.strip_suffix(suffix))
                .find(|family| exported.contains(*family))
                .unwrap_or(series)
                .to_string()
        })
        .collect()
}

/// Every exported family is on a dashboard panel, and every family a panel
/// or an alert reads is exported (a renamed metric leaves no panel empty).
#[test]
fn every_exported_family_is_on_a_panel_and_every_panel_reads_one() {
    let exported = exported_families();
    let mut on_panels = BTreeSet::new();
    for file in [
        "structured-agents-overview.json",
        "structured-agents-bundle.json",
    ] {
        let text = std::fs::read_to_string(repo(&format!("dashboards/{file}"))).unwrap();
        let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
        for panel in dashboard["panels"].as_array().unwrap() {
            for target in panel["targets"].as_array().unwrap() {
                let read = families_read(target["expr"].as_str().unwrap(), &exported);
                let unknown: Vec<_> = read.difference(&exported).collect();
                assert!(
                    unknown.is_empty(),
                    "{file}/{}: reads {unknown:?}, which the daemon does not export",
                    panel["title"]
                );
                on_panels.extend(read);
            }
        }
    }
    let missing: Vec<_> = exported.difference(&on_panels).collect();
    assert!(
        missing.is_empty(),
        "exported but on no panel of dashboards/: {missing:?}"
    );
    let rules = std::fs::read_to_string(repo("dashboards/alerts.yml")).unwrap();
    let rules: serde_json::Value = serde_saphyr::from_str(&rules).unwrap();
    for rule in rules["groups"][0]["rules"].as_array().unwrap() {
        let read = families_read(rule["expr"].as_str().unwrap(), &exported);
        let unknown: Vec<_> = read.difference(&exported).collect();
        assert!(
            unknown.is_empty(),
            "alert {}: reads {unknown:?}, which the daemon does not export",
            rule["alert"]
        );
    }
}

/// The shipped alert rules are valid, and each fires on the series that
/// should raise it and stays quiet on a healthy daemon
/// (`dashboards/alerts.test.yml`).
#[test]
fn alert_rules_pass_promtool_check_and_test() {
    for args in [
        ["check", "rules", "alerts.yml"],
        ["test", "rules", "alerts.test.yml"],
    ] {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(repo("dashboards"))
            .output()
            .expect("promtool is needed (Debian package `prometheus`; ./scripts/test installs it)");
        assert!(
            out.status.success(),
            "promtool {}:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A model error is counted for each HTTP attempt that failed, not once a
/// call or a run: the job's first attempt gets 503, is retried by the
/// client (`max_retries = 1`) and gets 503 again, so the job retries and
/// its next attempt is answered — two failed requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_failed_http_attempt_of_a_model_call_is_counted() {
    let script = "mode: sequential\nreplies:\n  - {status: 503, error: busy}\n  - {status: 503, error: busy}\n  - {content: done}\n";
    let server = mock_server(script).await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle(
        "flaky",
        "name: flaky\nversion: \"1\"\nmodel: {endpoint: mock, name: mock-model}\nprompts: {user: \"{{ input }}\"}\n",
    );
    let daemon = site.start();
    let http = client();
    let job = submit_and_wait(
        &http,
        &daemon,
        json!({"bundle": "flaky", "input": "x"}),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(job["state"], "succeeded", "{job}");
    assert_eq!(job["attempts"], 2, "{job}");
    let series = "structured_agents_model_request_errors_total{error_type=\"http_5xx\",model=\"mock-model\"}";
    assert_eq!(common::daemon::metric(&http, &daemon, series).await, 2);
    assert_eq!(daemon.stop(), Some(0));
}
