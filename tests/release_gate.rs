//! The release gate on the real daemon (issue 52 item 4): a bundle whose
//! `release:` gates it on its evals — version 1 answers right, version 2
//! regresses on two cases, version 3 fixes them. Version 2 stays a
//! candidate while version 1 serves every job; version 3 goes live; each
//! move is a daemon event (a metric, a log line) and shows on the bundle;
//! a daemon killed while a candidate's eval runs resumes that same eval;
//! the operator's promote overrides a rejection; daemons on one PostgreSQL
//! store share the decisions.

mod common;

use std::time::Duration;

use common::daemon::{
    Daemon, SHORT_LEASE, Site, client, eventually, get, metric, run_cli, submit, wait_terminal,
};
use common::gated::drop_version;
use common::mock_server;
use common::postgres::Schema;
use serde_json::{Value, json};

/// Versions answer as their variant says: `right` all right, `wrong`
/// wrong on two cases. Each answer takes a while, so an eval is under way
/// long enough to kill.
const SCRIPT: &str = r#"
replies:
  - {match: "Qright: add 2 and 3", turn: 1, content: "5", delay_ms: 400}
  - {match: "Qright: say hello", turn: 1, content: "hello", delay_ms: 400}
  - {match: "Qright: capital of France", turn: 1, content: "Paris", delay_ms: 400}
  - {match: "Qwrong: add 2 and 3", turn: 1, content: "7", delay_ms: 400}
  - {match: "Qwrong: say hello", turn: 1, content: "bye", delay_ms: 400}
  - {match: "Qwrong: capital of France", turn: 1, content: "Paris", delay_ms: 400}
"#;

async fn bundle(daemon: &Daemon) -> Value {
    get(&client(), daemon, "/v1/bundles/calc").await
}

/// Waits until `check` holds of the bundle, naming `what`.
async fn until(daemon: &Daemon, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    eventually(Duration::from_secs(90), what, || async {
        let b = bundle(daemon).await;
        check(&b).then_some(b)
    })
    .await
}

async fn eval_jobs(daemon: &Daemon) -> Vec<Value> {
    let page = get(&client(), daemon, "/v1/jobs?bundle=calc&limit=200").await;
    page["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["kind"]["type"] == "eval")
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_regressing_version_stays_a_candidate_and_the_fix_goes_live() {
    let server = mock_server(SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    drop_version(&site, 1, "right");
    let daemon = site.start_with_env(&[SHORT_LEASE]);
    let http = client();
    // A bundle's first version serves at once: nothing to compare it with.
    let first = bundle(&daemon).await;
    assert_eq!(
        (&first["version"], &first["candidate"]),
        (&json!("1"), &Value::Null),
        "{first}"
    );

    drop_version(&site, 2, "wrong");
    let held = until(&daemon, "version 2 held", |b| {
        b["candidate"]["version"] == "2"
    })
    .await;
    assert_eq!(held["version"], "1", "version 1 keeps serving: {held}");
    // A job submitted meanwhile runs on version 1.
    let job = submit(&http, &daemon, "calc", "say hello").await;
    let job = wait_terminal(
        &http,
        &daemon,
        job["id"].as_str().unwrap(),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(job["bundle_version"], "1", "{job}");

    // Killed while the candidate's eval runs: the restart resumes the same
    // eval (its idempotency key is the candidate's identity).
    let evals = eventually(
        Duration::from_secs(30),
        "the candidate's eval job",
        || async { Some(eval_jobs(&daemon).await).filter(|jobs| !jobs.is_empty()) },
    )
    .await;
    daemon.kill9();
    let daemon = site.start_with_env(&[SHORT_LEASE]);
    let rejected = until(&daemon, "version 2 rejected", |b| {
        b["candidate"]["state"] == "rejected"
    })
    .await;
    assert_eq!(rejected["version"], "1", "{rejected}");
    let reason = rejected["candidate"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("regressed") && reason.contains("sum") && reason.contains("hello"),
        "{reason}"
    );
    let after = eval_jobs(&daemon).await;
    assert_eq!(after.len(), 1, "one eval, resumed: {after:?}");
    assert_eq!(after[0]["id"], evals[0]["id"]);
    assert_eq!(rejected["candidate"]["eval_job"], after[0]["id"]);
    let report = &after[0]["result"];
    assert_eq!(
        (&report["version"], &report["against"]),
        (&json!("2"), &json!("1")),
        "{report}"
    );
    assert_eq!(report["regressions"], json!(["sum", "hello"]), "{report}");

    // Each move is an event: a metric (and a log line).
    let http = client();
    let moves = |state: &str| {
        format!("structured_agents_release_transitions_total{{bundle=\"calc\",state=\"{state}\"}}")
    };
    assert!(metric(&http, &daemon, &moves("rejected")).await >= 1);
    assert!(
        daemon.log().contains("release gate: version 2 rejected"),
        "{}",
        daemon.log()
    );

    // A rejected version is not evaluated again after a restart, and the
    // version before it still serves.
    daemon.stop();
    let daemon = site.start_with_env(&[SHORT_LEASE]);
    let again = bundle(&daemon).await;
    assert_eq!(
        (&again["version"], &again["candidate"]["state"]),
        (&json!("1"), &json!("rejected")),
        "{again}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(eval_jobs(&daemon).await.len(), 1);

    drop_version(&site, 3, "right");
    let live = until(&daemon, "version 3 live", |b| b["version"] == "3").await;
    assert_eq!(live["candidate"], Value::Null, "{live}");
    assert!(metric(&http, &daemon, &moves("promoted")).await >= 1);
    let job = submit(&http, &daemon, "calc", "say hello").await;
    let job = wait_terminal(
        &http,
        &daemon,
        job["id"].as_str().unwrap(),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(
        (&job["bundle_version"], &job["result"]["output"]),
        (&json!("3"), &json!("hello")),
        "{job}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_operator_promotes_a_rejected_version_and_rejects_a_held_one() {
    // Slow answers: the operator's reject lands while the eval still runs.
    let server = mock_server(&SCRIPT.replace("delay_ms: 400", "delay_ms: 3000")).await;
    let site = Site::new(&server.base_url(), "");
    drop_version(&site, 1, "right");
    let daemon = site.start();
    drop_version(&site, 2, "wrong");
    until(&daemon, "version 2 rejected", |b| {
        b["candidate"]["state"] == "rejected"
    })
    .await;

    let out = run_cli(
        &daemon.url(""),
        &[
            "promote",
            "calc",
            "2",
            "--reason",
            "the new wording is wanted",
        ],
        "",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("serving 2"), "{stdout}");
    let live = bundle(&daemon).await;
    assert_eq!(
        (&live["version"], &live["candidate"]),
        (&json!("2"), &Value::Null),
        "{live}"
    );
    assert!(daemon.log().contains("the new wording is wanted"));

    // A version the gate does not hold: a 409 naming what it holds.
    let out = run_cli(&daemon.url(""), &["reject", "calc", "9"], "");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("holds no version"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Rejected by the operator while its eval runs: it never serves.
    drop_version(&site, 3, "right");
    until(&daemon, "version 3 held", |b| {
        b["candidate"]["version"] == "3"
    })
    .await;
    let out = run_cli(&daemon.url(""), &["reject", "calc", "3"], "");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let held = bundle(&daemon).await;
    assert_eq!(
        (
            &held["version"],
            &held["candidate"]["state"],
            &held["candidate"]["by"]
        ),
        (&json!("2"), &json!("rejected"), &json!("local")),
        "{held}"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        bundle(&daemon).await["version"],
        "2",
        "its eval's verdict does not override the operator"
    );
}

/// Version `flaky` answers the suite right but fails every live job (its
/// model server refuses them); `right` answers both.
const CANARY_SCRIPT: &str = r#"
replies:
  - {match: "Qright: add 2 and 3", content: "5"}
  - {match: "Qright: say hello", content: "hello"}
  - {match: "Qright: capital of France", content: "Paris"}
  - {match: "Qright: live", content: "fine"}
  - {match: "Qflaky: add 2 and 3", content: "5"}
  - {match: "Qflaky: say hello", content: "hello"}
  - {match: "Qflaky: capital of France", content: "Paris"}
  - {match: "Qflaky: live", status: 400, error: "this version cannot serve"}
"#;

/// Live jobs until the candidate is no longer a canary: the bundle then,
/// and each job's version and state.
async fn live_jobs_until_decided(daemon: &Daemon) -> (Value, Vec<(String, String)>) {
    let http = client();
    let mut ran = Vec::new();
    for batch in 0..30 {
        let mut ids = Vec::new();
        for i in 0..6 {
            let job = submit(&http, daemon, "calc", &format!("live {batch}.{i}")).await;
            ids.push(job["id"].as_str().unwrap().to_string());
        }
        for id in ids {
            let job = wait_terminal(&http, daemon, &id, Duration::from_secs(60)).await;
            ran.push((
                job["bundle_version"].as_str().unwrap_or("?").to_string(),
                job["state"].as_str().unwrap_or("?").to_string(),
            ));
        }
        // The gate counts every 2 s.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let b = bundle(daemon).await;
        if b["candidate"]["state"] != "canary" {
            return (b, ran);
        }
    }
    panic!("the canary was never decided: {ran:?}");
}

/// `release.canary`: a version whose evals pass takes a share of live jobs
/// first; failing them, it is rolled back and every job goes to the version
/// serving again; doing as well, it is promoted.
#[tokio::test(flavor = "multi_thread")]
async fn a_canary_failing_live_jobs_is_rolled_back_and_a_good_one_promoted() {
    let server = mock_server(CANARY_SCRIPT).await;
    let site = Site::new(&server.base_url(), "");
    let drop_canary = |version: u32, variant: &str| {
        drop_version(&site, version, variant);
        let file = site.path().join("bundles/calc/bundle.yaml");
        let yaml = std::fs::read_to_string(&file).unwrap().replace(
            "release: {gate: evals, no_regressions: true}",
            "release: {gate: evals, canary: {share: 0.5, min_jobs: 4}}",
        );
        site.put_bundle("calc", &yaml);
    };
    drop_canary(1, "right");
    let daemon = site.start();
    let http = client();

    drop_canary(2, "flaky");
    let canary = until(&daemon, "version 2 a canary", |b| {
        b["candidate"]["state"] == "canary"
    })
    .await;
    assert_eq!(canary["version"], "1", "{canary}");
    let (rolled_back, ran) = live_jobs_until_decided(&daemon).await;
    assert_eq!(
        (&rolled_back["version"], &rolled_back["candidate"]["state"]),
        (&json!("1"), &json!("rejected")),
        "{rolled_back}"
    );
    let reason = rolled_back["candidate"]["reason"].as_str().unwrap();
    assert!(reason.contains("rolled back"), "{reason}");
    assert!(
        ran.iter().any(|(v, s)| v == "2" && s != "succeeded"),
        "version 2 took a share and failed it: {ran:?}"
    );
    assert!(
        ran.iter().all(|(v, s)| (v == "1") == (s == "succeeded")),
        "{ran:?}"
    );
    // Rolled back: every new job runs on version 1 again.
    for i in 0..8 {
        let job = submit(&http, &daemon, "calc", &format!("live after {i}")).await;
        let job = wait_terminal(
            &http,
            &daemon,
            job["id"].as_str().unwrap(),
            Duration::from_secs(60),
        )
        .await;
        assert_eq!(job["bundle_version"], "1", "{job}");
    }

    drop_canary(3, "right");
    until(&daemon, "version 3 a canary", |b| {
        b["candidate"]["state"] == "canary" && b["candidate"]["version"] == "3"
    })
    .await;
    let (promoted, ran) = live_jobs_until_decided(&daemon).await;
    assert_eq!(promoted["version"], "3", "promoted: {promoted}");
    assert!(ran.iter().any(|(v, _)| v == "3"), "{ran:?}");
    assert!(ran.iter().all(|(_, s)| s == "succeeded"), "{ran:?}");
    let moves = metric(
        &http,
        &daemon,
        "structured_agents_release_transitions_total{bundle=\"calc\",state=\"canary\"}",
    )
    .await;
    assert!(moves >= 2, "two canaries: {moves}");
}

/// Daemons on one PostgreSQL store share the gate's decisions: the
/// operator's promote sent to one serves the version on the other, and a
/// reject sent to the other holds a candidate on both (each tells it as
/// its own event).
#[tokio::test(flavor = "multi_thread")]
async fn daemons_on_one_store_share_the_operators_promote_and_reject() {
    let server = mock_server(&SCRIPT.replace("delay_ms: 400", "delay_ms: 3000")).await;
    let schema = Schema::fresh();
    let env = schema.daemon_env();
    let (one, two) = (
        Site::new(&server.base_url(), ""),
        Site::new(&server.base_url(), ""),
    );
    for site in [&one, &two] {
        drop_version(site, 1, "right");
    }
    let (a, b) = (one.start_with_env(&env), two.start_with_env(&env));
    for site in [&one, &two] {
        drop_version(site, 2, "wrong");
    }
    for daemon in [&a, &b] {
        until(daemon, "version 2 rejected on both", |bundle| {
            bundle["candidate"]["state"] == "rejected"
        })
        .await;
    }
    // One eval job decided for both.
    assert_eq!(eval_jobs(&a).await.len(), 1, "{:?}", eval_jobs(&a).await);

    let out = run_cli(&a.url(""), &["promote", "calc", "2"], "");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let live = until(&b, "version 2 serving on the other daemon", |bundle| {
        bundle["version"] == "2" && bundle["candidate"].is_null()
    })
    .await;
    assert_eq!(live["version"], "2", "{live}");
    let promoted =
        "structured_agents_release_transitions_total{bundle=\"calc\",state=\"promoted\"}";
    assert!(metric(&client(), &b, promoted).await >= 1);

    // Rejected on the second while its eval runs: held on both, its
    // eval's verdict overriding neither.
    for site in [&one, &two] {
        drop_version(site, 3, "right");
    }
    for daemon in [&a, &b] {
        until(daemon, "version 3 held on both", |bundle| {
            bundle["candidate"]["version"] == "3"
        })
        .await;
    }
    let out = run_cli(&b.url(""), &["reject", "calc", "3"], "");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let held = until(&a, "version 3 rejected on the first daemon", |bundle| {
        bundle["candidate"]["state"] == "rejected"
    })
    .await;
    assert_eq!(
        (&held["version"], &held["candidate"]["by"]),
        (&json!("2"), &json!("local")),
        "{held}"
    );
    tokio::time::sleep(Duration::from_secs(8)).await;
    for daemon in [&a, &b] {
        let bundle = bundle(daemon).await;
        assert_eq!(
            (&bundle["version"], &bundle["candidate"]["state"]),
            (&json!("2"), &json!("rejected")),
            "its eval's verdict overrides the operator on neither: {bundle}"
        );
    }
}
