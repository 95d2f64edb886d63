//! Several real daemons on one PostgreSQL queue: a daemon killed mid-job
//! (SIGKILL at a failpoint) leaves its lease to expire, and another daemon,
//! with its own state directory, resumes the job from the journal in the
//! database: no model call of a completed turn repeated, each side effect
//! once, one gap-free event log, one end. Three daemons finish 1,000 jobs
//! when one of them is killed mid-load; an SSE client on one daemon follows
//! a job another runs; a submission wakes an idle daemon at once (LISTEN/
//! NOTIFY, not polling); and a database restart mid-load loses nothing and
//! shows in the logs, `/readyz` and the metrics. A model's call id with a
//! NUL, which PostgreSQL refuses in text, is replaced before it is stored.
//!
//! The restart test (`postgres_restart_…`) stops the whole PostgreSQL
//! cluster for a moment, so it runs only on a throwaway cluster started for
//! it (`scripts/with-postgres --throwaway`, whose `SA_TEST_POSTGRES_CTL`
//! script stops and starts it; never a server the suite did not start), and
//! `scripts/test` runs it alone, after the rest.
//!
//! Needs PostgreSQL like `queue_conformance` (`SA_TEST_POSTGRES_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`); fails, never skips, without it.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::daemon::{
    Daemon, SHORT_LEASE, Site, client, eventually, file_lines, get, job_events, metric, post_json,
    read_sse, submit, wait_terminal,
};
use common::mock_server;
use common::postgres::{Database, START_POSTGRES, Schema, postgres_url};
use serde_json::{Value, json};
use structured_agents::mock::MockServer;

const SCRIPT: &str = r#"
replies:
  - turn: 1
    tool_calls:
      - {id: c1, name: append, arguments: {line: t1}}
  - turn: 2
    tool_calls:
      - {id: c2, name: append, arguments: {line: t2}}
  - turn: 3
    content: both lines written
"#;

fn bundle(effects: &Path) -> String {
    let effects = effects.display();
    format!(
        r#"
name: lines
version: "1"
model: {{endpoint: mock, name: m, plugin: openai}}
prompts:
  system: "You write lines."
  user: "{{{{ input }}}}"
limits: {{max_turns: 5, max_concurrency: 1}}
tools:
  - name: append
    kind: process
    effect: unsafe
    description: append a line to the effects file
    command: [python3, -c, "import json,sys; a=json.load(sys.stdin); f=open('{effects}','a'); f.write(a['line'] + chr(10)); f.close(); print(json.dumps({{'written': a['line']}}))"]
"#
    )
}

fn start(site: &Site, schema: &Schema, extra: &[(&'static str, &str)]) -> Daemon {
    let mut env = schema.daemon_env();
    env.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
    site.start_with_env(&env)
}

/// A call id with a NUL failed the job's writes where it went into text (a
/// parked job's `error` names its call), and the job was resumed again and
/// again; the daemon's own key of the call replaces it: the job parks for
/// approval once, named by that key, and runs its call once when approved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_id_with_a_nul_is_stored_as_the_daemons_key() {
    let script = "replies:\n  - turn: 1\n    tool_calls:\n      - {id: \"c\\0nul\", name: append, arguments: {line: t1}}\n  - turn: 2\n    content: written\n";
    let server = mock_server(script).await;
    let site = Site::new(&server.base_url(), "");
    let effects = site.path().join("effects.txt");
    site.put_bundle(
        "lines",
        &bundle(&effects).replace("effect: unsafe", "effect: unsafe\n    approval: always"),
    );
    let schema = Schema::fresh();
    let http = client();
    let daemon = start(&site, &schema, &[]);
    let job = submit(&http, &daemon, "lines", "write a line").await;
    let id = job["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{job}\n{START_POSTGRES}\nlog:\n{}", daemon.log()))
        .to_string();
    let parked = common::daemon::wait_settled(&http, &daemon, &id).await;
    assert_eq!(
        parked["state"],
        "awaiting_approval",
        "{parked}\n{}",
        daemon.log()
    );
    assert_eq!(parked["crash_resumes"], 0, "{parked}");
    let approvals = get(&http, &daemon, &format!("/v1/jobs/{id}/approvals")).await;
    let request = &approvals["approvals"][0];
    assert_eq!(request["call_id"], "call_1_0", "{approvals}");
    let (status, answer) = common::daemon::post_json(
        &http,
        &daemon,
        &format!("/v1/jobs/{id}/approvals/call_1_0"),
        json!({"decision": "approve", "digest": request["digest"]}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let done = wait_terminal(&http, &daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", daemon.log());
    assert_eq!(file_lines(&effects).len(), 1, "the call ran once");
    let journal = get(&http, &daemon, &format!("/v1/jobs/{id}/journal")).await;
    assert!(!journal.to_string().contains("\\u0000"), "{journal}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_of_a_killed_daemon_is_resumed_by_another_from_its_journal() {
    let server = mock_server(SCRIPT).await;
    // Two deployments (own config, bundles and state directories) sharing
    // one queue schema and one effects file.
    let site_a = Site::new(&server.base_url(), "");
    let site_b = Site::new(&server.base_url(), "");
    let effects = site_a.path().join("effects.txt");
    site_a.put_bundle("lines", &bundle(&effects));
    site_b.put_bundle("lines", &bundle(&effects));
    let schema = Schema::fresh();
    let http = client();

    // Daemon A dies right after the second model reply is in the journal
    // (turn 1 is complete, turn 2's call has not started).
    let mut a = start(
        &site_a,
        &schema,
        &[("SA_FAILPOINTS", "after_reply_recorded@2"), SHORT_LEASE],
    );
    let response = http
        .post(a.url("/v1/jobs"))
        .json(&json!({"bundle": "lines", "input": "write two lines"}))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}\n{START_POSTGRES}\nlog:\n{}", a.log()));
    let job: Value = response.json().await.unwrap();
    let id = job["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{job}\nlog:\n{}", a.log()))
        .to_string();
    a.wait_killed_at("after_reply_recorded");
    drop(a);
    assert_eq!(server.requests().len(), 2, "A made two model calls");

    // Daemon B never saw the job; it takes it once A's lease expires.
    let b = start(&site_b, &schema, &[]);
    let done = wait_terminal(&http, &b, &id, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "succeeded", "{done}\nlog:\n{}", b.log());
    assert_eq!(done["attempts"], 2, "{done}");
    assert_eq!(
        server.requests().len(),
        3,
        "B replayed turns 1 and 2 from the journal and asked the model only for turn 3"
    );
    assert_eq!(file_lines(&effects), ["t1", "t2"], "each side effect once");

    let journal = get(&http, &b, &format!("/v1/jobs/{id}/journal")).await;
    let steps = journal["steps"].as_array().unwrap();
    assert!(
        steps.iter().any(|s| s["turn"] == 1 && s["step"] == "reply"),
        "{journal}"
    );

    let data = job_events(&http, &b, &id).await;
    let seqs: Vec<u64> = data.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "one gap-free event log across both daemons"
    );
    assert!(
        data.iter().any(|e| e["type"] == "Resumed"),
        "the resumed attempt is marked"
    );
    let ends = data
        .iter()
        .filter(|e| e["type"] == "JobState" && e["state"] == "succeeded")
        .count();
    assert_eq!(ends, 1, "the job ends exactly once");
    assert_eq!(b.stop(), Some(0));
}

// ---------------------------------------------------------------------------
// Scale: several daemons, many jobs, outages.
// ---------------------------------------------------------------------------

/// Two turns: a call of the read-only `look` tool (`cat` echoes its
/// arguments), then the answer. Each reply takes 20 ms, so a daemon's
/// workers hold jobs for a while; inputs containing `slow` get a reply that
/// takes two minutes (a worker kept busy).
const SCAN_SCRIPT: &str = r#"
replies:
  - match: slow
    turn: 1
    content: finally
    delay_ms: 120000
  - turn: 1
    delay_ms: 20
    tool_calls:
      - {id: c1, name: look, arguments: {q: x}}
  - turn: 2
    delay_ms: 20
    content: done
"#;

const SCAN_BUNDLE: &str = r#"
name: scan
version: "1"
model: {endpoint: mock, name: m, plugin: openai}
prompts:
  system: "You look things up."
  user: "{{ input }}"
limits: {max_turns: 4}
tools:
  - name: look
    kind: process
    effect: read_only
    description: look something up
    command: [cat]
"#;

/// Model calls a scan job makes when nothing goes wrong.
const TURNS: usize = 2;

/// Settings every scale daemon shares: no client-side retries of model
/// calls (so every call the mock counts is one the kernel asked for), a
/// request timeout longer than the slow reply, enough attempts to survive
/// an outage.
const SCALE_ENV: &[(&str, &str)] = &[
    ("STRUCTURED_AGENTS_ENDPOINTS__MOCK__MAX_RETRIES", "0"),
    ("STRUCTURED_AGENTS_ENDPOINTS__MOCK__REQUEST_TIMEOUT", "300s"),
    ("STRUCTURED_AGENTS_QUEUE__MAX_ATTEMPTS", "5"),
    ("STRUCTURED_AGENTS_QUEUE__POOL_SIZE", "8"),
];

/// A deployment of its own (config, bundles, state) running the scan bundle.
fn scan_site(server: &MockServer) -> Site {
    let site = Site::new(&server.base_url(), "");
    site.put_bundle("scan", SCAN_BUNDLE);
    site
}

fn start_scale(site: &Site, schema: &Schema, extra: &[(&'static str, &str)]) -> Daemon {
    let mut env: Vec<(&'static str, &str)> = SCALE_ENV.to_vec();
    env.extend_from_slice(extra);
    start(site, schema, &env)
}

/// A direct connection to the test's schema (to check what the daemons
/// stored); fails with how to start PostgreSQL when it is not reachable.
async fn database(schema: &Schema) -> tokio_postgres::Client {
    let client = schema.client().await;
    client
        .batch_execute(&format!("SET search_path TO {}", schema.name))
        .await
        .unwrap();
    client
}

/// The worker id a daemon leases under (`{hostname}-{pid}`), as a LIKE pattern.
fn owner_pattern(daemon: &Daemon) -> String {
    format!("%-{}", daemon.child.id())
}

async fn count_where(db: &tokio_postgres::Client, condition: &str) -> i64 {
    db.query_one(&format!("SELECT count(*) FROM jobs WHERE {condition}"), &[])
        .await
        .unwrap()
        .get(0)
}

/// Submits `inputs` spread round-robin over `daemons`, 24 at a time.
async fn submit_all(
    http: &reqwest::Client,
    daemons: &[&Daemon],
    inputs: Vec<String>,
) -> Vec<String> {
    use futures::StreamExt;
    futures::stream::iter(inputs.into_iter().enumerate())
        .map(|(i, input)| {
            let daemon = daemons[i % daemons.len()];
            async move {
                submit(http, daemon, "scan", &input).await["id"]
                    .as_str()
                    .unwrap()
                    .to_string()
            }
        })
        .buffer_unordered(24)
        .collect()
        .await
}

/// Waits until no job of the schema is queued or running.
async fn wait_all_finished(
    db: &tokio_postgres::Client,
    jobs: i64,
    within: Duration,
    daemons: &[&Daemon],
) {
    let deadline = Instant::now() + within;
    loop {
        let finished = count_where(db, "state NOT IN ('queued', 'running')").await;
        if finished == jobs {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "only {finished} of {jobs} jobs finished; logs:\n{}",
            daemons
                .iter()
                .map(|d| d.log())
                .collect::<Vec<_>>()
                .join("\n----\n")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every job succeeded and ended exactly once, and every job's event log
/// runs 1..=n with no gap and no duplicate (a model reply of one turn is
/// logged once per attempt). Returns the sum over jobs of `attempts - 1`.
async fn assert_each_job_ended_once(db: &tokio_postgres::Client, jobs: i64) -> i64 {
    assert_eq!(count_where(db, "TRUE").await, jobs);
    let not_succeeded = db
        .query(
            "SELECT id, state, error FROM jobs WHERE state <> 'succeeded' LIMIT 5",
            &[],
        )
        .await
        .unwrap();
    assert!(
        not_succeeded.is_empty(),
        "jobs that did not succeed: {:?}",
        not_succeeded
            .iter()
            .map(|r| (
                r.get::<_, String>(0),
                r.get::<_, String>(1),
                r.get::<_, Option<String>>(2)
            ))
            .collect::<Vec<_>>()
    );
    let logs = db
        .query(
            "SELECT j.id, count(e.seq), coalesce(min(e.seq), 0), coalesce(max(e.seq), 0), \
                    count(*) FILTER (WHERE e.event::jsonb->>'type' = 'JobState' \
                                       AND e.event::jsonb->>'state' IN ('succeeded', 'failed', 'dead', 'cancelled')) \
             FROM jobs j LEFT JOIN events e ON e.job_id = j.id GROUP BY j.id",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(logs.len() as i64, jobs);
    for row in &logs {
        let (id, n, first, last, ends): (String, i64, i64, i64, i64) =
            (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
        assert!(
            n > 0 && first == 1 && last == n,
            "job {id}: {n} events with seqs {first}..={last}: a gap"
        );
        assert_eq!(ends, 1, "job {id} ended {ends} times");
    }
    let repeated = db
        .query(
            "SELECT job_id, attempt, event::jsonb->>'turn', count(*) FROM events \
             WHERE event::jsonb->>'type' = 'ModelResponse' GROUP BY 1, 2, 3 HAVING count(*) > 1 LIMIT 5",
            &[],
        )
        .await
        .unwrap();
    assert!(
        repeated.is_empty(),
        "a turn's reply logged twice in one attempt: {:?}",
        repeated
            .iter()
            .map(|r| r.get::<_, String>(0))
            .collect::<Vec<_>>()
    );
    db.query_one(
        "SELECT coalesce(sum(attempts - 1), 0)::BIGINT FROM jobs",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

/// The model calls the mock counted: every turn of every job at least once,
/// and at most one more per extra attempt (a job makes one model call at a
/// time and a recorded reply is never asked for again, so an attempt that
/// dies repeats at most the call it had in flight). Model retries are off.
fn assert_model_calls(server: &MockServer, jobs: i64, extra_attempts: i64) {
    let calls = server.requests().len() as i64;
    let minimum = jobs * TURNS as i64;
    assert!(
        calls >= minimum && calls <= minimum + extra_attempts,
        "{calls} model calls for {jobs} jobs of {TURNS} turns with {extra_attempts} extra attempts: \
         expected {minimum}..={}",
        minimum + extra_attempts
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_three_daemons_finish_1000_jobs_when_one_is_killed() {
    const JOBS: usize = 1000;
    let server = mock_server(SCAN_SCRIPT).await;
    let schema = Schema::fresh();
    let sites = [scan_site(&server), scan_site(&server), scan_site(&server)];
    let a = start_scale(&sites[0], &schema, &[]);
    let b = start_scale(&sites[1], &schema, &[]);
    // C's connections carry a name of their own, to wait for them to end.
    let c_app = format!("sa_c_{}", &schema.name["sa_test_".len()..]);
    let separator = if postgres_url().contains('?') {
        '&'
    } else {
        '?'
    };
    let c_url = format!("{}{separator}application_name={c_app}", postgres_url());
    let c = start_scale(
        &sites[2],
        &schema,
        &[
            ("STRUCTURED_AGENTS_QUEUE__URL", c_url.as_str()),
            SHORT_LEASE,
        ],
    );
    let db = database(&schema).await;
    let http = client();

    // The first half goes to all three daemons; then C dies holding jobs.
    let inputs: Vec<String> = (0..JOBS).map(|i| format!("job {i}")).collect();
    let (first, second) = inputs.split_at(JOBS / 2);
    let mut ids = submit_all(&http, &[&a, &b, &c], first.to_vec()).await;
    let c_owner = owner_pattern(&c);
    eventually(
        Duration::from_secs(30),
        "daemon C holds a running job",
        || {
            let db = &db;
            let c_owner = c_owner.clone();
            async move {
                let held = db
                    .query_one(
                        "SELECT count(*) FROM jobs WHERE state = 'running' AND lease_owner LIKE $1",
                        &[&c_owner],
                    )
                    .await
                    .unwrap()
                    .get::<_, i64>(0);
                (held > 0).then_some(())
            }
        },
    )
    .await;
    c.kill9();
    // A statement C sent before it died still runs to its end on the
    // server (each write is one statement, committed as it ends); once
    // C's backends are gone, C cannot change anything any more.
    eventually(
        Duration::from_secs(60),
        "the killed daemon's connections end",
        || {
            let db = &db;
            let c_app = c_app.clone();
            async move {
                let left: i64 = db
                    .query_one(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                        &[&c_app],
                    )
                    .await
                    .unwrap()
                    .get(0);
                (left == 0).then_some(())
            }
        },
    )
    .await;
    // These are the jobs it held.
    let held: Vec<String> = db
        .query(
            "SELECT id FROM jobs WHERE state = 'running' AND lease_owner LIKE $1",
            &[&c_owner],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(!held.is_empty(), "C held no job when it was killed");
    assert!(
        count_where(&db, "state = 'queued'").await > 0 || !second.is_empty(),
        "the kill came mid-load"
    );

    // The rest goes to the survivors.
    ids.extend(submit_all(&http, &[&a, &b], second.to_vec()).await);
    assert_eq!(ids.len(), JOBS);
    wait_all_finished(&db, JOBS as i64, Duration::from_secs(90), &[&a, &b]).await;

    let extra_attempts = assert_each_job_ended_once(&db, JOBS as i64).await;
    eprintln!(
        "{JOBS} jobs, {} held by the killed daemon, {extra_attempts} extra attempts, {} model calls",
        held.len(),
        server.requests().len()
    );
    assert_model_calls(&server, JOBS as i64, extra_attempts);
    // The dead daemon's jobs were finished by the others, on a new attempt
    // once their leases expired.
    for id in &held {
        let row = db
            .query_one("SELECT state, attempts FROM jobs WHERE id = $1", &[id])
            .await
            .unwrap();
        let (state, attempts): (String, i32) = (row.get(0), row.get(1));
        assert_eq!(state, "succeeded", "job {id} held by the dead daemon");
        assert!(
            attempts >= 2,
            "job {id} held by the dead daemon ran {attempts} attempt(s)"
        );
        // (The dead attempt's events may never have reached the log: they
        // ride with its journal steps and its outcome.)
        let ended_by: i32 = db
            .query_one(
                "SELECT attempt FROM events WHERE job_id = $1 AND event::jsonb->>'type' = 'JobState' AND event::jsonb->>'state' = 'succeeded'",
                &[id],
            )
            .await
            .unwrap()
            .get(0);
        assert!(
            ended_by >= 2,
            "job {id} held by the dead daemon ended on attempt {ended_by}"
        );
    }
    assert!(
        extra_attempts >= held.len() as i64,
        "{extra_attempts} extra attempts for {} jobs the dead daemon held",
        held.len()
    );
    assert_eq!(a.stop(), Some(0));
    assert_eq!(b.stop(), Some(0));
}

/// Every connection two daemons hold to PostgreSQL (their write pools and
/// LISTEN connections, told apart by an `application_name` of the test's
/// own) is killed with `pg_terminate_backend`, five times while 300 jobs
/// run, each time once the jobs have moved on since the last: statements
/// die mid-flight, the pools open new connections, and no job is lost,
/// ended twice, or has a gap in its events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_killed_pool_connections_lose_and_double_nothing() {
    const JOBS: usize = 300;
    const ROUNDS: usize = 5;
    let server = mock_server(SCAN_SCRIPT).await;
    let schema = Schema::fresh();
    let app = format!("sa_kill_{}", &schema.name["sa_test_".len()..]);
    let separator = if postgres_url().contains('?') {
        '&'
    } else {
        '?'
    };
    let url = format!("{}{separator}application_name={app}", postgres_url());
    let env = [("STRUCTURED_AGENTS_QUEUE__URL", url.as_str()), SHORT_LEASE];
    let sites = [scan_site(&server), scan_site(&server)];
    let a = start_scale(&sites[0], &schema, &env);
    let b = start_scale(&sites[1], &schema, &env);
    let db = database(&schema).await;
    let http = client();
    let inputs: Vec<String> = (0..JOBS).map(|i| format!("job {i}")).collect();
    let ids = submit_all(&http, &[&a, &b], inputs).await;
    assert_eq!(ids.len(), JOBS);
    let mut killed = 0;
    let mut finished = 0;
    for round in 0..ROUNDS {
        // Progress since the last round, not a clock, decides when.
        let last = finished;
        finished = eventually(
            Duration::from_secs(120),
            "the jobs move on between two kills",
            || {
                let db = &db;
                async move {
                    let now = count_where(db, "state NOT IN ('queued', 'running')").await;
                    (now > last || now == JOBS as i64).then_some(now)
                }
            },
        )
        .await;
        let n: i64 = db
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
                &[&app],
            )
            .await
            .unwrap()
            .get(0);
        eprintln!("round {round}: {finished} jobs finished, {n} connections killed");
        killed += n;
    }
    assert!(killed > 0, "no connection of the daemons was found to kill");
    wait_all_finished(&db, JOBS as i64, Duration::from_secs(180), &[&a, &b]).await;
    let extra_attempts = assert_each_job_ended_once(&db, JOBS as i64).await;
    eprintln!("{killed} connections killed, {extra_attempts} extra attempts");
    assert_model_calls(&server, JOBS as i64, extra_attempts);
    assert_eq!(a.stop(), Some(0));
    assert_eq!(b.stop(), Some(0));
}

/// Daemon A with one worker, kept busy by a slow job, and daemon B idle;
/// both poll only every hour, so within a test's life only LISTEN/NOTIFY
/// can move a job or an event between them: the tests' deadlines are
/// generous failure deadlines, never what they prove.
struct BusyAndIdle {
    server: MockServer,
    schema: Schema,
    _sites: (Site, Site),
    a: Daemon,
    b: Daemon,
    db: tokio_postgres::Client,
    http: reqwest::Client,
}

const SLOW_POLL: &[(&str, &str)] = &[("STRUCTURED_AGENTS_QUEUE__POLL_INTERVAL", "1h")];
/// How long a busy/idle test waits before it fails (far below the poll).
const NOTIFY_DEADLINE: Duration = Duration::from_secs(120);

async fn busy_and_idle() -> BusyAndIdle {
    let server = mock_server(SCAN_SCRIPT).await;
    let schema = Schema::fresh();
    let sites = (scan_site(&server), scan_site(&server));
    let mut a_env = SLOW_POLL.to_vec();
    a_env.push(("STRUCTURED_AGENTS_QUEUE__WORKERS", "1"));
    let a = start_scale(&sites.0, &schema, &a_env);
    let db = database(&schema).await;
    let http = client();
    // Only A exists: A's one worker takes the slow job.
    let slow = submit(&http, &a, "scan", "slow").await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let a_owner = owner_pattern(&a);
    eventually(Duration::from_secs(15), "A runs the slow job", || {
        let (db, slow, a_owner) = (&db, slow.clone(), a_owner.clone());
        async move {
            let n: i64 = db
                .query_one("SELECT count(*) FROM jobs WHERE id = $1 AND state = 'running' AND lease_owner LIKE $2", &[&slow, &a_owner])
                .await
                .unwrap()
                .get(0);
            (n == 1).then_some(())
        }
    })
    .await;
    // B starts afterwards, finds nothing to lease and goes idle.
    let b = start_scale(&sites.1, &schema, SLOW_POLL);
    BusyAndIdle {
        server,
        schema,
        _sites: sites,
        a,
        b,
        db,
        http,
    }
}

/// Waits until `daemon` counts one succeeded job: a job's final JobState
/// reaches the metrics observer after the job's commit, so the count can
/// trail the job's terminal state.
async fn one_succeeded_here(http: &reqwest::Client, daemon: &Daemon, what: &str) {
    eventually(Duration::from_secs(60), what, || async {
        (succeeded_here(http, daemon).await >= 1).then_some(())
    })
    .await;
    assert_eq!(succeeded_here(http, daemon).await, 1, "{what}");
}

/// Succeeded jobs of the scan bundle counted in a daemon's metrics.
async fn succeeded_here(http: &reqwest::Client, daemon: &Daemon) -> u64 {
    metric(
        http,
        daemon,
        "structured_agents_jobs_finished_total{bundle=\"scan\",state=\"succeeded\"}",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_submission_wakes_an_idle_daemon_at_once() {
    let t = busy_and_idle().await;
    tokio::time::timeout(NOTIFY_DEADLINE, async {
        // A cannot run it (its worker is busy); B polls every hour, so only
        // the submission's NOTIFY can wake it in time.
        let job = submit(&t.http, &t.a, "scan", "wake up").await;
        let id = job["id"].as_str().unwrap();
        let done = wait_terminal(&t.http, &t.a, id, NOTIFY_DEADLINE).await;
        assert_eq!(
            done["state"],
            "succeeded",
            "{done}\nB's log:\n{}",
            t.b.log()
        );
        assert_eq!(done["attempts"], 1, "{done}");
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "B was not woken (it polls only hourly); B's log:\n{}",
            t.b.log()
        )
    });
    one_succeeded_here(&t.http, &t.b, "B ran the job").await;
    assert_eq!(
        succeeded_here(&t.http, &t.a).await,
        0,
        "A's only worker was busy"
    );
    assert_eq!(
        count_where(&t.db, "state = 'running'").await,
        1,
        "A still runs the slow job"
    );
    drop(t.schema);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_sse_client_on_one_daemon_follows_a_job_another_runs() {
    let t = busy_and_idle().await;
    let events = tokio::time::timeout(NOTIFY_DEADLINE, async {
        // Submitted to B, which runs it; followed on A from its first event,
        // which A's SSE stream sees only through B's NOTIFYs (A rereads the
        // store on its own only every poll_interval, an hour).
        let job = submit(&t.http, &t.b, "scan", "follow me").await;
        let id = job["id"].as_str().unwrap().to_string();
        read_sse(
            &t.http,
            &t.a.url(&format!("/v1/jobs/{id}/events")),
            None,
            None,
        )
        .await
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "the stream on A did not reach its end (A rereads the store only hourly); A's log:\n{}",
            t.a.log()
        )
    });
    let (last, data) = events.split_last().unwrap();
    assert_eq!(last.1, "end", "{events:?}");
    let end: Value = serde_json::from_str(&last.2).unwrap();
    assert_eq!(end["state"], "succeeded", "{end}");
    let data: Vec<Value> = data
        .iter()
        .map(|(_, _, d)| serde_json::from_str(d).unwrap())
        .collect();
    let seqs: Vec<u64> = data.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "in order, no gap: {data:?}"
    );
    let ids: Vec<Option<u64>> = events[..events.len() - 1]
        .iter()
        .map(|(id, _, _)| *id)
        .collect();
    assert_eq!(
        ids,
        seqs.iter().map(|s| Some(*s)).collect::<Vec<_>>(),
        "SSE ids are the sequence numbers"
    );
    let kinds: Vec<&str> = data.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds.first(),
        Some(&"JobState"),
        "from the start: {kinds:?}"
    );
    assert!(
        kinds.contains(&"ToolResult") && kinds.contains(&"KernelEnd"),
        "{kinds:?}"
    );
    assert_eq!(
        data.last().unwrap()["state"],
        "succeeded",
        "to the end: {kinds:?}"
    );
    one_succeeded_here(&t.http, &t.b, "B ran the job").await;
    assert_eq!(succeeded_here(&t.http, &t.a).await, 0, "A only streamed it");
    assert!(t.server.requests().len() >= TURNS);
}

/// The tests' PostgreSQL server, stopped and started: only ever the
/// throwaway cluster `scripts/with-postgres --throwaway` started for this
/// run, through its control script (`SA_TEST_POSTGRES_CTL stop|start`).
/// Never a server the suite did not start: a user's own PostgreSQL on 5432
/// is not this test's to stop. Started again on drop, so a test that fails
/// mid-outage never leaves the server down.
struct Cluster {
    script: String,
}

/// What to run instead when no throwaway cluster was started.
const THROWAWAY: &str = "this test stops and starts its PostgreSQL server, so it runs only on a throwaway cluster started for it: run it through `scripts/test` (which does), or `scripts/with-postgres --throwaway cargo nextest run --test queue_postgres_daemons -E 'test(postgres_restart)'`";

impl Cluster {
    fn throwaway() -> Self {
        let script = std::env::var("SA_TEST_POSTGRES_CTL")
            .unwrap_or_else(|_| panic!("SA_TEST_POSTGRES_CTL is not set: {THROWAWAY}"));
        Self { script }
    }

    fn command(&self, action: &str) -> std::process::Command {
        let mut command = std::process::Command::new(&self.script);
        command.arg(action);
        command
    }

    fn ctl(&self, action: &str) {
        let output = self
            .command(action)
            .output()
            .unwrap_or_else(|e| panic!("cannot stop/start PostgreSQL ({self:?}): {e}"));
        assert!(
            output.status.success(),
            "{self:?} {action}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Starts the cluster (if down) and waits until it accepts connections.
    async fn start(&self) {
        let _ = self.command("start").output();
        eventually(
            Duration::from_secs(60),
            "PostgreSQL accepts connections again",
            || async {
                tokio_postgres::connect(&postgres_url(), tokio_postgres::NoTls)
                    .await
                    .ok()
                    .map(|_| ())
            },
        )
        .await;
    }
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.script)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.command("start").output();
    }
}

async fn readyz(http: &reqwest::Client, daemon: &Daemon) -> (u16, Value) {
    let response = http.get(daemon.url("/readyz")).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// Stops PostgreSQL mid-load and starts it again: both daemons see the
/// outage (logs, `/readyz` 503, `structured_agents_queue_up` 0, lease
/// errors counted), reconnect on their own, and every job still ends
/// exactly once. Run alone (see the module docs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restart_mid_load_loses_no_job_and_shows_the_outage() {
    const JOBS: usize = 400;
    let cluster = Cluster::throwaway();
    let server = mock_server(SCAN_SCRIPT).await;
    let schema = Schema::fresh();
    let sites = [scan_site(&server), scan_site(&server)];
    let a = start_scale(&sites[0], &schema, &[]);
    let b = start_scale(&sites[1], &schema, &[]);
    let daemons = [&a, &b];
    let http = client();
    for d in daemons {
        assert_eq!(readyz(&http, d).await.0, 200);
        assert_eq!(metric(&http, d, "structured_agents_queue_up").await, 1);
    }
    let inputs: Vec<String> = (0..JOBS).map(|i| format!("job {i}")).collect();
    let ids = submit_all(&http, &daemons, inputs).await;
    assert_eq!(ids.len(), JOBS);
    {
        let db = database(&schema).await;
        eventually(
            Duration::from_secs(30),
            "a quarter of the jobs finished",
            || async {
                (count_where(&db, "state = 'succeeded'").await >= (JOBS / 4) as i64).then_some(())
            },
        )
        .await;
        assert!(
            count_where(&db, "state IN ('queued', 'running')").await > 0,
            "the outage comes mid-load"
        );
    }

    // The outage.
    cluster.ctl("stop");
    for d in daemons {
        let (status, body) = readyz(&http, d).await;
        assert_eq!(status, 503, "/readyz while the database is down: {body}");
        assert_eq!(body["queue_reachable"], false, "{body}");
        eventually(
            Duration::from_secs(60),
            "the workers count failed leases",
            || async {
                (metric(
                    &http,
                    d,
                    "structured_agents_queue_errors_total{operation=\"lease\"}",
                )
                .await
                    > 0)
                .then_some(())
            },
        )
        .await;
        assert_eq!(metric(&http, d, "structured_agents_queue_up").await, 0);
        assert!(d.log().contains("queue unreachable"), "{}", d.log());
    }
    cluster.start().await;

    // Back: every job ends exactly once.
    let db = database(&schema).await;
    wait_all_finished(&db, JOBS as i64, Duration::from_secs(120), &daemons).await;
    let extra_attempts = assert_each_job_ended_once(&db, JOBS as i64).await;
    eprintln!(
        "{JOBS} jobs across a database restart: {extra_attempts} extra attempts, {} model calls",
        server.requests().len()
    );
    assert_model_calls(&server, JOBS as i64, extra_attempts);
    for d in daemons {
        eventually(Duration::from_secs(60), "/readyz is 200 again", || async {
            (readyz(&http, d).await.0 == 200).then_some(())
        })
        .await;
        assert_eq!(metric(&http, d, "structured_agents_queue_up").await, 1);
        eventually(
            Duration::from_secs(30),
            "the LISTEN connection is restored",
            || async {
                d.log()
                    .contains("queue LISTEN connection restored")
                    .then_some(())
            },
        )
        .await;
        let log = d.log();
        assert!(log.contains("queue LISTEN connection lost"), "{log}");
        assert!(log.contains("queue reachable again"), "{log}");
    }
    assert_eq!(a.stop(), Some(0));
    assert_eq!(b.stop(), Some(0));
    drop(cluster);
}

/// `ids` in the order daemon `d` cancels them: ascending, descending, or
/// from the middle on (opposite orders, so their write groups would lock
/// the same jobs in a cycle without the queue's lock order).
fn daemon_order(ids: &[String], d: usize) -> Vec<String> {
    let mut ids = ids.to_vec();
    ids.sort();
    match d {
        0 => ids,
        1 => ids.into_iter().rev().collect(),
        _ => {
            let half = ids.len() / 2;
            ids.rotate_left(half);
            ids
        }
    }
}

/// Three daemons on one database cancel the same jobs, each in its own
/// order, and submit batches with the same idempotency keys, each in its
/// own order, while their workers run and finish those jobs: every answer
/// is a 2xx, every cancel takes effect (the job ends `cancelled`, unless it
/// had ended already or, running, finished before its next heartbeat; the
/// slow third cannot), one job per key, and PostgreSQL detects no deadlock
/// in the test's own database (`pg_stat_database.deadlocks`, read once the
/// daemons are gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_three_daemons_touch_the_same_jobs_without_deadlock() {
    const JOBS: usize = 60;
    const KEYS: usize = 20;
    const BATCHES: usize = 3;
    let server = mock_server(SCAN_SCRIPT).await;
    let db = Database::fresh().await;
    let mut env: Vec<(&'static str, &str)> = SCALE_ENV.to_vec();
    env.extend([
        ("STRUCTURED_AGENTS_QUEUE__BACKEND", "postgres"),
        ("STRUCTURED_AGENTS_QUEUE__URL", db.url.as_str()),
        ("STRUCTURED_AGENTS_QUEUE__SCHEMA", "sa_locks"),
    ]);
    let sites = [scan_site(&server), scan_site(&server), scan_site(&server)];
    let daemons: Vec<Daemon> = sites.iter().map(|s| s.start_with_env(&env)).collect();
    let http = client();
    // A third of the jobs wait on a slow model reply (running when the
    // cancels come); the rest run and finish in between.
    let inputs: Vec<String> = (0..JOBS)
        .map(|i| {
            if i % 3 == 0 {
                format!("slow {i}")
            } else {
                format!("job {i}")
            }
        })
        .collect();
    let all: Vec<&Daemon> = daemons.iter().collect();
    let ids = submit_all(&http, &all, inputs).await;
    let keys: Vec<String> = (0..KEYS).map(|k| format!("k{k:02}")).collect();

    let storm = daemons.iter().enumerate().map(|(d, daemon)| {
        let http = &http;
        let ids = daemon_order(&ids, d);
        let keys = daemon_order(&keys, d);
        async move {
            let cancels = futures::future::join_all(ids.iter().map(|id| async move {
                post_json(http, daemon, &format!("/v1/jobs/{id}/cancel"), json!({})).await
            }));
            let batches = futures::future::join_all((0..BATCHES).map(|_| {
                let jobs: Vec<Value> = keys
                    .iter()
                    .map(|key| json!({"bundle": "scan", "input": key, "idempotency_key": key}))
                    .collect();
                post_json(http, daemon, "/v1/jobs/batch", json!({ "jobs": jobs }))
            }));
            let (cancels, batches) = tokio::join!(cancels, batches);
            (ids, cancels, batches)
        }
    });
    let answers = futures::future::join_all(storm).await;

    let mut failures = Vec::new();
    let mut by_key: Vec<Value> = Vec::new();
    let mut must_be_cancelled = std::collections::BTreeSet::new();
    for (ids, cancels, batches) in answers {
        for (id, (status, job)) in ids.iter().zip(cancels) {
            if !(200..300).contains(&status) {
                failures.push(format!("cancel {id}: {status} {job}"));
            } else if !matches!(job["state"].as_str(), Some("succeeded" | "failed" | "dead")) {
                // Ended at once (queued), or asked to stop (running): a slow
                // job cannot finish before it sees the request; another may.
                let may_finish = job["state"] == "running"
                    && !job["input"]
                        .as_str()
                        .unwrap_or_default()
                        .starts_with("slow");
                must_be_cancelled.insert((id.clone(), may_finish));
            }
        }
        for (status, body) in batches {
            if !(200..300).contains(&status) {
                failures.push(format!("batch: {status} {body}"));
            } else {
                by_key.push(Value::Array(
                    body["jobs"]
                        .as_array()
                        .unwrap_or_else(|| panic!("{body}"))
                        .iter()
                        .map(|job| json!([job["input"], job["id"]]))
                        .collect(),
                ));
            }
        }
    }
    for (id, may_finish) in &must_be_cancelled {
        let job = wait_terminal(&http, &daemons[0], id, Duration::from_secs(120)).await;
        let finished = *may_finish && job["state"] == "succeeded";
        if job["state"] != "cancelled" && !finished {
            failures.push(format!("cancel of {id} did not take effect: {job}"));
        }
    }
    let one_job_per_key = |jobs: &Value| {
        let mut pairs: Vec<String> = jobs
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| p.to_string())
            .collect();
        pairs.sort();
        pairs
    };
    for pair in by_key.windows(2) {
        assert_eq!(one_job_per_key(&pair[0]), one_job_per_key(&pair[1]));
    }
    let logs: Vec<String> = daemons.iter().map(|d| d.log()).collect();
    for daemon in daemons {
        daemon.stop();
    }
    let deadlocks = db.deadlocks_once_idle().await;
    assert!(
        failures.is_empty() && deadlocks == 0,
        "{deadlocks} deadlocks; {} failures:\n{}\nlogs:\n{}",
        failures.len(),
        failures.join("\n"),
        logs.join("\n----\n")
    );
    for log in &logs {
        assert!(!log.contains("deadlock detected"), "{log}");
    }
}
