//! A job's kind and the daemon's controls are typed fields of the job
//! (`queue::kind`): admission lifts the controls a client sends as
//! variables into them, `GET /v1/jobs/{id}` shows them, and a job stored
//! before the fields existed — its controls in its variables — is moved by
//! the migration and runs with them, on SQLite and on PostgreSQL.

mod common;

use std::time::Duration;

use common::daemon::{Daemon, Site, client, post_json, submit_body, wait_terminal};
use common::mock_server;
use common::postgres::{START_POSTGRES, Schema, postgres_url};
use serde_json::{Value, json};
use structured_agents::queue::postgres::{PostgresOptions, PostgresQueue};
use structured_agents::queue::sqlite::SqliteQueue;
use structured_agents::queue::{Controls, JobKind, JobQueue, NewJob, RetryPolicy};

const TOOLS_BUNDLE: &str = r#"name: b
version: "1"
model:
  endpoint: mock
  name: mock-model
prompts:
  user: "{{ input }}"
tools:
  - name: echo
    kind: process
    effect: read_only
    command: [python3, -c, "import json,sys; print(json.dumps(json.load(sys.stdin)))"]
  - name: shout
    kind: process
    effect: read_only
    command: [python3, -c, "import sys; print(sys.stdin.read().upper())"]
"#;

const WITHIN: Duration = Duration::from_secs(60);

/// The names of the tools a recorded model request offered.
fn offered(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap_or("?").to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn object(value: Value) -> serde_json::Map<String, Value> {
    value.as_object().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controls_sent_as_variables_are_typed_fields_of_the_job() {
    let server = mock_server("replies:\n  - content: done\n").await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("b", TOOLS_BUNDLE);
    let daemon = site.start();
    let http = client();
    let body = json!({
        "bundle": "b", "input": "x", "idempotency_key": "k1",
        "variables": {"tools": "echo", "max_agents": 3, "city": "Oslo"}
    });
    let job = submit_body(&http, &daemon, body.clone()).await;
    assert_eq!(job["kind"], json!({"type": "bundle"}), "{job}");
    assert_eq!(
        job["controls"],
        json!({"tools": ["echo"], "max_agents": 3}),
        "{job}"
    );
    assert_eq!(job["variables"], json!({"city": "Oslo"}), "{job}");
    let id = job["id"].as_str().unwrap().to_string();
    let done = wait_terminal(&http, &daemon, &id, WITHIN).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(offered(&server.requests()[0]), ["echo"]);

    // The same request again is the same job: its controls compare as the
    // lift left them; other controls under the same key are a conflict.
    let (status, again) = post_json(&http, &daemon, "/v1/jobs", body).await;
    assert_eq!((status, again["id"].as_str()), (200, Some(id.as_str())));
    let (status, other) = post_json(
        &http,
        &daemon,
        "/v1/jobs",
        json!({"bundle": "b", "input": "x", "idempotency_key": "k1",
               "variables": {"tools": "shout", "max_agents": 3, "city": "Oslo"}}),
    )
    .await;
    assert_eq!(status, 409, "{other}");
    assert!(
        other["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("kind or controls")),
        "{other}"
    );

    // A rerun keeps them.
    let (status, rerun) =
        post_json(&http, &daemon, &format!("/v1/jobs/{id}/rerun"), json!({})).await;
    assert_eq!(status, 201, "{rerun}");
    assert_eq!(rerun["controls"], job["controls"], "{rerun}");
    assert_eq!(rerun["variables"], json!({"city": "Oslo"}), "{rerun}");

    // A control of the wrong shape is refused naming its variable.
    let (status, refused) = post_json(
        &http,
        &daemon,
        "/v1/jobs",
        json!({"bundle": "b", "input": "x", "variables": {"max_agents": "two"}}),
    )
    .await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(
        refused["error"]["field"], "variables.max_agents",
        "{refused}"
    );
}

// ---------------------------------------------------------------------------
// A store from before the columns: each test writes jobs with today's
// binary, then turns the store back into the old schema (the controls in
// the variables, no `kind` or `controls` column, the migration not applied)
// and opens it again.

/// What a submitter of the old schema stored, and what the migration must
/// make of it: (variables then, kind now, controls now, variables now).
fn old_jobs() -> Vec<(Value, Value, Value, Value)> {
    let plan = json!({
        "agents": [{"id": "a", "name": "A", "kind": "local", "bundle": "a"}],
        "max_iterations": 1, "termination": {"type": "max_iterations"}, "stop_word": "DONE"
    });
    vec![
        (
            json!({"tools": ["shout"], "city": "Oslo"}),
            json!({"type": "bundle"}),
            json!({"tools": ["shout"]}),
            json!({"city": "Oslo"}),
        ),
        (
            json!({"tools": "echo, shout"}),
            json!({"type": "bundle"}),
            json!({"tools": ["echo", "shout"]}),
            json!({}),
        ),
        (
            json!({"only_stage": "simplify", "files": ["a.py"]}),
            json!({"type": "stage", "stage": "simplify"}),
            json!({}),
            json!({"files": ["a.py"]}),
        ),
        (
            json!({"group_chat": plan, "user_id": "ada"}),
            json!({"type": "group_chat", "plan": plan}),
            json!({}),
            json!({"user_id": "ada"}),
        ),
        // A runtime query: its user stays a variable (templates render it).
        (
            json!({"user_id": "ada", "verbose": true, "max_agents": 2}),
            json!({"type": "bundle"}),
            json!({"max_agents": 2, "verbose": true}),
            json!({"user_id": "ada"}),
        ),
        // Not a control: a submitter's own `verbose`, and values of shapes
        // admission refused, stay variables.
        (
            json!({"verbose": true, "tools": 5, "max_agents": -1}),
            json!({"type": "bundle"}),
            json!({}),
            json!({"verbose": true, "tools": 5, "max_agents": -1}),
        ),
    ]
}

/// Submits one plain job per [`old_jobs`] entry (those with a user in a
/// conversation, as the runtime API's were); returns their ids in order.
async fn submit_plain(q: &dyn JobQueue) -> Vec<String> {
    let mut ids = Vec::new();
    for (old, ..) in old_jobs() {
        let conversation = old.get("user_id").map(|_| format!("c-{}", ids.len()));
        let (job, _) = q
            .submit(NewJob {
                bundle: "b".into(),
                input: "in".into(),
                conversation_id: conversation,
                ..Default::default()
            })
            .await
            .unwrap();
        ids.push(job.id.to_string());
    }
    ids
}

/// Each job as the migration left it, and as a lease hands it to a worker.
async fn check_migrated(q: &dyn JobQueue, ids: &[String]) {
    for (id, (old, kind, controls, variables)) in ids.iter().zip(old_jobs()) {
        let job = q.get(&id.as_str().into()).await.unwrap().unwrap();
        let kind: JobKind = serde_json::from_value(kind).unwrap();
        let controls: Controls = serde_json::from_value(controls).unwrap();
        assert_eq!(job.kind, kind, "{old}");
        assert_eq!(job.controls, controls, "{old}");
        assert_eq!(job.variables, object(variables), "{old}");
    }
    let leases = q
        .lease_many("w", Duration::from_secs(30), ids.len(), None)
        .await
        .unwrap();
    assert_eq!(leases.len(), ids.len());
    let stage = leases.iter().find(|l| l.job.id.as_str() == ids[2]).unwrap();
    assert_eq!(
        stage.job.kind,
        JobKind::Stage {
            stage: "simplify".into()
        }
    );
}

fn retry() -> RetryPolicy {
    RetryPolicy {
        backoff_base: Duration::from_millis(400),
        backoff_max: Duration::from_millis(800),
        max_crash_resumes: 2,
    }
}

/// Turns an SQLite store back into the schema before the columns, with
/// `variables` for each job (by id), and runs the migration that made them.
fn sqlite_before_columns(path: &std::path::Path, variables: &[(String, Value)]) {
    let conn = rusqlite::Connection::open(path).unwrap();
    for (id, old) in variables {
        conn.execute(
            "UPDATE jobs SET variables = ?1 WHERE id = ?2",
            (old.to_string(), id),
        )
        .unwrap();
    }
    conn.execute_batch("ALTER TABLE jobs DROP COLUMN kind; ALTER TABLE jobs DROP COLUMN controls;")
        .unwrap();
    // The migration, run again on that store (later migrations stay
    // applied).
    conn.execute_batch(include_str!(
        "../src/queue/sqlite/migrations/0015_job_kind_controls.sql"
    ))
    .unwrap();
}

/// Turns a PostgreSQL schema back into the one before the columns, and
/// runs the migration that made them.
async fn postgres_before_columns(schema: &Schema, variables: &[(String, Value)]) {
    let client = schema.client().await;
    let s = &schema.name;
    for (id, old) in variables {
        client
            .execute(
                &format!("UPDATE {s}.jobs SET variables = $1 WHERE id = $2"),
                &[&old.to_string(), id],
            )
            .await
            .unwrap();
    }
    client
        .batch_execute(&format!(
            "ALTER TABLE {s}.jobs DROP COLUMN kind, DROP COLUMN controls;
             SET search_path TO {s};"
        ))
        .await
        .unwrap();
    // The migration, run again on that schema (later migrations stay
    // applied).
    client
        .batch_execute(include_str!(
            "../src/queue/postgres/migrations/0016_job_kind_controls.sql"
        ))
        .await
        .unwrap();
}

fn with_old_variables(ids: &[String]) -> Vec<(String, Value)> {
    ids.iter()
        .cloned()
        .zip(old_jobs().into_iter().map(|(old, ..)| old))
        .collect()
}

#[tokio::test]
async fn sqlite_migration_moves_controls_out_of_the_variables_of_stored_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("queue.db");
    let ids = {
        let q = SqliteQueue::open(&path, retry()).await.unwrap();
        submit_plain(&q).await
    };
    sqlite_before_columns(&path, &with_old_variables(&ids));
    let q = SqliteQueue::open(&path, retry()).await.unwrap();
    check_migrated(&q, &ids).await;
}

fn postgres_options(schema: &Schema) -> PostgresOptions {
    PostgresOptions {
        schema: schema.name.clone(),
        pool_size: 2,
        ..PostgresOptions::new(postgres_url())
    }
}

async fn open_postgres(schema: &Schema) -> PostgresQueue {
    PostgresQueue::open(postgres_options(schema), retry())
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL is needed for this test: {e}\n{START_POSTGRES}"))
}

#[tokio::test]
async fn postgres_migration_moves_controls_out_of_the_variables_of_stored_jobs() {
    let schema = Schema::fresh();
    let ids = {
        let q = open_postgres(&schema).await;
        submit_plain(&q).await
    };
    postgres_before_columns(&schema, &with_old_variables(&ids)).await;
    let q = open_postgres(&schema).await;
    check_migrated(&q, &ids).await;
}

// ---------------------------------------------------------------------------
// The same, through the daemon: a job queued before the upgrade with a
// `tools` variable runs after it offering only those tools.

/// Queues a job that waits (its `run_at` far ahead) and stops the daemon.
async fn queue_waiting_job(daemon: Daemon) -> String {
    let job = submit_body(
        &client(),
        &daemon,
        json!({"bundle": "b", "input": "old", "run_at": "2099-01-01T00:00:00Z"}),
    )
    .await;
    assert_eq!(daemon.stop(), Some(0));
    job["id"].as_str().unwrap().to_string()
}

/// Runs the job the old store holds and checks it ran with its controls.
async fn runs_with_its_controls(
    daemon: &Daemon,
    server: &structured_agents::mock::MockServer,
    id: &str,
) {
    let done = wait_terminal(&client(), daemon, id, WITHIN).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(done["controls"], json!({"tools": ["shout"]}), "{done}");
    assert_eq!(done["variables"], json!({"city": "Oslo"}), "{done}");
    let requests = server.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(offered(&requests[0]), ["shout"]);
}

fn old_tools_job(id: &str) -> Vec<(String, Value)> {
    vec![(id.to_string(), json!({"tools": ["shout"], "city": "Oslo"}))]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_job_queued_before_the_upgrade_runs_with_its_controls() {
    let server = mock_server("replies:\n  - content: done\n").await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("b", TOOLS_BUNDLE);
    let id = queue_waiting_job(site.start()).await;
    let path = site.path().join("state").join("queue.db");
    sqlite_before_columns(&path, &old_tools_job(&id));
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute("UPDATE jobs SET run_at = 0", ()).unwrap();
    drop(conn);
    let daemon = site.start();
    runs_with_its_controls(&daemon, &server, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_job_queued_before_the_upgrade_runs_with_its_controls() {
    let schema = Schema::fresh();
    let env = schema.daemon_env();
    let server = mock_server("replies:\n  - content: done\n").await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("b", TOOLS_BUNDLE);
    let id = queue_waiting_job(site.start_with_env(&env)).await;
    postgres_before_columns(&schema, &old_tools_job(&id)).await;
    let client = schema.client().await;
    client
        .execute(&format!("UPDATE {}.jobs SET run_at = 0", schema.name), &[])
        .await
        .unwrap();
    let daemon = site.start_with_env(&env);
    runs_with_its_controls(&daemon, &server, &id).await;
}

/// A job whose kind its bundle's content cannot run (a group chat of a
/// bundle that hosts none: the bundle changed shape after admission) fails
/// at once, saying so, instead of running as something else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_the_bundle_cannot_run_fails_naming_both() {
    let server = mock_server("replies:\n  - content: done\n").await;
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("b", TOOLS_BUNDLE);
    assert_eq!(site.start().stop(), Some(0));
    let plan = json!({
        "agents": [{"id": "a", "name": "A", "kind": "local", "bundle": "b"}],
        "max_iterations": 1, "termination": {"type": "max_iterations"}, "stop_word": "DONE"
    });
    let id = {
        let q = SqliteQueue::open(&site.path().join("state").join("queue.db"), retry())
            .await
            .unwrap();
        let (job, _) = q
            .submit(NewJob {
                bundle: "b".into(),
                input: "in".into(),
                kind: serde_json::from_value(json!({"type": "group_chat", "plan": plan})).unwrap(),
                ..Default::default()
            })
            .await
            .unwrap();
        job.id.to_string()
    };
    let daemon = site.start();
    let done = wait_terminal(&client(), &daemon, &id, WITHIN).await;
    assert_eq!(done["state"], "failed", "{done}");
    let error = done["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("is a group chat")
            && error.contains("bundle \"b\"")
            && error.contains("is an agent"),
        "{error}"
    );
    assert!(server.requests().is_empty(), "nothing ran");
}
