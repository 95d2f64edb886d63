//! Fair shares between API keys (`queue::fair`), on both stores: a key's
//! flood holds another key back by at most a job or two, weights share the
//! workers in proportion, `priority` orders jobs inside a key only, an idle
//! key banks little credit, and jobs from before keys are one key. Every
//! case runs on SQLite (the rule in Rust, `fair::plan`) and on PostgreSQL
//! (a fresh schema each; the same rule in its one-statement lease), and
//! both must give the same order.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::daemon::{Site, client_as, new_key};
use common::mock_server;
use common::postgres::{START_POSTGRES, Schema, postgres_url};
use serde_json::{Value, json};
use structured_agents::queue::postgres::{PostgresOptions, PostgresQueue};
use structured_agents::queue::sqlite::SqliteQueue;
use structured_agents::queue::{JobQueue, NewJob, Outcome, RetryPolicy, Shares};

const HELD: Duration = Duration::from_secs(60);

fn of(owner: Option<&str>, priority: i32) -> NewJob {
    NewJob {
        bundle: "b".into(),
        input: "in".into(),
        max_attempts: Some(3),
        owner: owner.map(str::to_string),
        priority,
        ..Default::default()
    }
}

async fn submit(q: &dyn JobQueue, owner: Option<&str>, priority: i32, n: usize) {
    let jobs = (0..n).map(|_| of(owner, priority)).collect();
    q.submit_many(jobs).await.unwrap();
}

/// Leases `n` jobs one at a time, finishing each (as one worker would):
/// each lease's (owner, priority) in order.
async fn run(q: &dyn JobQueue, n: usize) -> Vec<(String, i32)> {
    let mut order = Vec::new();
    for _ in 0..n {
        let lease = q.lease_many("w", HELD, 1, None).await.unwrap();
        let [lease] = <[_; 1]>::try_from(lease).expect("one job leased");
        order.push((
            lease.job.owner.clone().unwrap_or_default(),
            lease.job.priority,
        ));
        let done = Outcome::Succeeded(json!("ok"));
        q.finish(&lease.job.id, lease.attempt, done, &[], None)
            .await
            .unwrap();
    }
    order
}

fn owners(order: &[(String, i32)]) -> Vec<&str> {
    order.iter().map(|(owner, _)| owner.as_str()).collect()
}

fn count(order: &[(String, i32)], owner: &str) -> usize {
    order.iter().filter(|(o, _)| o == owner).count()
}

pub async fn a_flood_holds_another_key_back_by_at_most_a_job(q: Arc<dyn JobQueue>) {
    submit(&*q, Some("a"), 0, 40).await;
    assert_eq!(owners(&run(&*q, 10).await), ["a"; 10]);
    submit(&*q, Some("b"), 0, 1).await;
    let next = run(&*q, 2).await;
    assert_eq!(
        owners(&next),
        ["b", "a"],
        "b's one job goes before a's 30 waiting"
    );
}

pub async fn weights_share_the_workers_in_proportion(q: Arc<dyn JobQueue>) {
    q.share_by(Shares::new([("a".to_string(), 3)]));
    submit(&*q, Some("a"), 0, 60).await;
    submit(&*q, Some("b"), 0, 60).await;
    let order = run(&*q, 40).await;
    // 30 to 10, give or take the two jobs of credit a key starts with.
    let a = count(&order, "a");
    assert!((28..=32).contains(&a), "a got {a} of 40: {order:?}");
    // A batch shares as one lease at a time does.
    let batch = q.lease_many("w", HELD, 8, None).await.unwrap();
    let a = batch
        .iter()
        .filter(|l| l.job.owner.as_deref() == Some("a"))
        .count();
    assert_eq!(a, 6, "a batch of 8 gives a 6 and b 2");
}

pub async fn priority_orders_jobs_inside_a_key_only(q: Arc<dyn JobQueue>) {
    submit(&*q, Some("a"), 0, 3).await;
    submit(&*q, Some("a"), 9, 3).await;
    submit(&*q, Some("b"), 0, 3).await;
    let order = run(&*q, 6).await;
    let a: Vec<i32> = order
        .iter()
        .filter(|(o, _)| o == "a")
        .map(|(_, p)| *p)
        .collect();
    assert_eq!(a, [9, 9, 9], "a's urgent jobs go first among a's");
    assert_eq!(
        count(&order, "b"),
        3,
        "but a's priority does not hold b back: {order:?}"
    );
}

pub async fn an_idle_key_banks_little_credit(q: Arc<dyn JobQueue>) {
    submit(&*q, Some("b"), 0, 2).await;
    run(&*q, 2).await;
    submit(&*q, Some("a"), 0, 60).await;
    run(&*q, 30).await;
    // b was idle while a ran 30 jobs: it may go first, but not for long.
    submit(&*q, Some("b"), 0, 20).await;
    let order = run(&*q, 10).await;
    assert_eq!(order[0].0, "b");
    let b = count(&order, "b");
    assert!((5..=7).contains(&b), "b got {b} of 10: {order:?}");
}

pub async fn jobs_from_before_keys_are_one_key(q: Arc<dyn JobQueue>) {
    submit(&*q, None, 0, 10).await;
    submit(&*q, Some("a"), 0, 10).await;
    let order = run(&*q, 8).await;
    assert_eq!(count(&order, ""), 4, "{order:?}");
    assert_eq!(count(&order, "a"), 4, "{order:?}");
}

macro_rules! suite {
    ($backend:ident, $make:expr) => {
        mod $backend {
            use super::*;
            macro_rules! case {
                ($name:ident) => {
                    #[tokio::test]
                    async fn $name() {
                        let (queue, _guard) = $make.await;
                        super::$name(queue).await;
                    }
                };
            }
            case!(a_flood_holds_another_key_back_by_at_most_a_job);
            case!(weights_share_the_workers_in_proportion);
            case!(priority_orders_jobs_inside_a_key_only);
            case!(an_idle_key_banks_little_credit);
            case!(jobs_from_before_keys_are_one_key);
        }
    };
}

fn retry() -> RetryPolicy {
    RetryPolicy {
        backoff_base: Duration::from_millis(400),
        backoff_max: Duration::from_millis(800),
        max_crash_resumes: 2,
    }
}

async fn sqlite_queue() -> (Arc<dyn JobQueue>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let q = SqliteQueue::open(&dir.path().join("state/queue.db"), retry())
        .await
        .unwrap();
    (Arc::new(q), dir)
}

async fn open_postgres(schema: &Schema) -> PostgresQueue {
    let options = PostgresOptions {
        schema: schema.name.clone(),
        pool_size: 4,
        ..PostgresOptions::new(postgres_url())
    };
    PostgresQueue::open(options, retry())
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL is needed for this test: {e}\n{START_POSTGRES}"))
}

async fn postgres_queue() -> (Arc<dyn JobQueue>, Schema) {
    let schema = Schema::fresh();
    let q = open_postgres(&schema).await;
    (Arc::new(q), schema)
}

suite!(sqlite, sqlite_queue());
suite!(postgres, postgres_queue());

/// One worker, two keys of weights 3 and 1, 24 jobs each, all due at one
/// moment: the first 16 started are 12 of the heavier key's and 4 of the
/// other's, give or take the credit a key starts with.
#[tokio::test(flavor = "multi_thread")]
async fn a_keys_weight_in_the_keys_file_shares_the_workers() {
    let server = mock_server("replies:\n  - content: done\n").await;
    let site = Site::new(&server.base_url(), "[auth]\nkeys_file = \"keys.toml\"\n");
    let file = site.path().join("keys.toml");
    let heavy = new_key(
        &file,
        "heavy",
        &["--scopes", "submit,read", "--weight", "3"],
    );
    let light = new_key(&file, "light", &["--scopes", "submit,read"]);
    site.put_bundle(
        "b",
        "name: b\nversion: \"1\"\nmodel: {endpoint: mock, name: m}\nprompts: {user: \"{{ input }}\"}\n",
    );
    let daemon = site.start_with_env(&[("STRUCTURED_AGENTS_QUEUE__WORKERS", "1")]);
    let due =
        humantime::format_rfc3339_millis(std::time::SystemTime::now() + Duration::from_secs(3));
    let mut ids = Vec::new();
    for token in [&heavy, &light] {
        let jobs: Vec<Value> = (0..24)
            .map(|i| json!({"bundle": "b", "input": format!("{i}"), "run_at": due.to_string()}))
            .collect();
        let answer: Value = client_as(token)
            .post(daemon.url("/v1/jobs/batch"))
            .json(&json!({"jobs": jobs}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let jobs = answer["jobs"]
            .as_array()
            .unwrap_or_else(|| panic!("{answer}"));
        ids.extend(
            jobs.iter()
                .map(|j| (token.clone(), j["id"].as_str().unwrap().to_string())),
        );
    }
    let mut started = Vec::new();
    for (token, id) in &ids {
        let job =
            common::daemon::wait_terminal(&client_as(token), &daemon, id, Duration::from_secs(120))
                .await;
        assert_eq!(job["state"], "succeeded", "{job}");
        let at = humantime::parse_rfc3339(job["started_at"].as_str().unwrap()).unwrap();
        started.push((at, job["owner"].as_str().unwrap_or_default().to_string()));
    }
    started.sort();
    let first: Vec<&str> = started[..16].iter().map(|(_, o)| o.as_str()).collect();
    let heavy = first.iter().filter(|o| **o == "heavy").count();
    assert!(
        (10..=13).contains(&heavy),
        "heavy got {heavy} of the first 16: {first:?}"
    );
}
