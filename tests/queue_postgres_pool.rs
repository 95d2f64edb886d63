//! The PostgreSQL queue's writes on a pool of connections: what one job's
//! hot path costs in statements (each one round trip to the server), many
//! callers leasing and finishing one small queue at once, and the pool's
//! backends killed while jobs run. The semantics both dialects share are in
//! `queue_conformance.rs`; these are what only a shared server has.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::postgres::{START_POSTGRES, Schema, postgres_url};
use serde_json::json;
use structured_agents::events::{Event, EventEnvelope};
use structured_agents::journal::JournalEntry;
use structured_agents::queue::postgres::{PostgresOptions, PostgresQueue};
use structured_agents::queue::{
    CompleteReply, JobQueue, JobState, NewJob, NextLease, Outcome, Pin, Pinner, RetryPolicy,
};

/// A lease no stall can outlive.
const HELD: Duration = Duration::from_secs(600);

fn job() -> NewJob {
    NewJob {
        bundle: "b".into(),
        input: "in".into(),
        max_attempts: Some(3),
        ..Default::default()
    }
}

fn event(seq: u64) -> EventEnvelope {
    EventEnvelope {
        run_id: "r".into(),
        bundle: "b".into(),
        bundle_version: "1".into(),
        parent: None,
        seq,
        timestamp: "2026-01-01T00:00:00.000Z".into(),
        event: Event::ParseError {
            turn: 1,
            detail: format!("e{seq}"),
        },
    }
}

fn pinner() -> Arc<Pinner> {
    Arc::new(|_: &str| {
        Some(Pin {
            version: "1".into(),
            digest: "d1".into(),
        })
    })
}

async fn open(schema: &Schema, pool_size: usize) -> PostgresQueue {
    let options = PostgresOptions {
        schema: schema.name.clone(),
        pool_size,
        ..PostgresOptions::new(postgres_url())
    };
    let retry = RetryPolicy {
        backoff_base: Duration::from_millis(10),
        backoff_max: Duration::from_millis(10),
        max_crash_resumes: 2,
    };
    PostgresQueue::open(options, retry)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL is needed for this test: {e}\n{START_POSTGRES}"))
}

/// Statements the queue's writes sent while `f` ran.
async fn statements<T>(q: &PostgresQueue, f: impl Future<Output = T>) -> (T, u64) {
    let before = q.write_stats().statements;
    let out = f.await;
    (out, q.write_stats().statements - before)
}

/// One job's hot path, one call at a time (so nothing shares a round trip):
/// each operation's statements are counted and printed, and each stays
/// within its bound, so a second round trip cannot creep in unnoticed.
#[tokio::test]
async fn postgres_a_jobs_hot_path_costs_its_bounded_statements() {
    let schema = Schema::fresh();
    let q = open(&schema, 2).await;
    let mut figures: BTreeMap<&str, u64> = BTreeMap::new();
    let ((first, _), n) = statements(&q, async { q.submit(job()).await.unwrap() }).await;
    figures.insert("submit", n);
    let (batch, n) = statements(&q, async {
        q.submit_many(vec![job(), job()]).await.unwrap()
    })
    .await;
    figures.insert("submit_many (2 jobs)", n);
    assert_eq!(batch.len(), 2);
    let (leased, n) = statements(&q, async {
        q.lease_many("w", HELD, 1, Some(pinner())).await.unwrap()
    })
    .await;
    figures.insert("lease (1 job, first pin)", n);
    let lease = leased.into_iter().next().expect("the first job leases");
    assert_eq!(lease.job.id, first.id);
    assert_eq!(lease.job.bundle_digest.as_deref(), Some("d1"));
    let step = JournalEntry {
        scope: "s".into(),
        turn: 1,
        step: "call".into(),
        body: "{}".into(),
    };
    let (recorded, n) = statements(&q, async {
        q.record_steps(&first.id, lease.attempt, &[step], &[event(1)])
            .await
    })
    .await;
    recorded.unwrap();
    figures.insert("record_steps (1 step, 1 event)", n);
    let (beat, n) = statements(&q, async {
        q.heartbeat(&first.id, lease.attempt, HELD).await.unwrap()
    })
    .await;
    figures.insert("heartbeat", n);
    assert_eq!(beat, structured_agents::queue::HeartbeatReply::Ok);
    let next = NextLease {
        worker: "w".into(),
        lease_for: HELD,
        n: 1,
        pin: Some(pinner()),
    };
    let ((finished, more), n) = statements(&q, async {
        q.finish_and_lease(
            &first.id,
            lease.attempt,
            Outcome::Succeeded(json!("ok")),
            &[event(2)],
            None,
            next,
        )
        .await
        .unwrap()
    })
    .await;
    figures.insert("finish_and_lease (1 event, 1 job)", n);
    assert_eq!(finished.reply, CompleteReply::Recorded(JobState::Succeeded));
    assert_eq!(more.len(), 1);
    // One commit: the finished job's row and the leased one's were written
    // by one transaction.
    let db = schema.client().await;
    let xmin = |id: String| {
        let (db, schema) = (&db, &schema.name);
        async move {
            let sql = format!("SELECT xmin::text FROM {schema}.jobs WHERE id = $1");
            db.query_one(&sql, &[&id])
                .await
                .unwrap()
                .get::<_, String>(0)
        }
    };
    assert_eq!(
        xmin(first.id.to_string()).await,
        xmin(more[0].job.id.to_string()).await,
        "the finish and the next lease are one transaction"
    );
    // The finish's lease pinned with the pin the first lease learnt.
    assert_eq!(more[0].job.bundle_digest.as_deref(), Some("d1"));
    let (released, n) = statements(&q, async {
        q.release(&more[0].job.id, more[0].attempt, &[], None)
            .await
            .unwrap()
    })
    .await;
    figures.insert("release", n);
    assert_eq!(released.reply, CompleteReply::Recorded(JobState::Queued));
    let (again, n) = statements(&q, async {
        q.lease_many("w", HELD, 1, Some(pinner())).await.unwrap()
    })
    .await;
    figures.insert("lease (1 job, pin known)", n);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].job.bundle_digest.as_deref(), Some("d1"));
    for (operation, n) in &figures {
        println!("{operation}: {n} statements");
    }
    let bounds: BTreeMap<&str, u64> = BOUNDS.iter().copied().collect();
    assert!(
        figures.keys().eq(bounds.keys()),
        "each bound is measured, each figure bounded"
    );
    for (operation, n) in &figures {
        let bound = bounds[operation];
        assert!(
            *n <= bound,
            "{operation} sent {n} statements, more than its {bound}: {figures:?}"
        );
    }
}

/// What each operation may send at most, each statement one round trip:
/// the hot path is one statement an operation (a finish-and-lease is a
/// finish and a lease pipelined with `BEGIN` and `COMMIT` in one round
/// trip; a first lease of a bundle whose pin the queue has
/// not seen yet pins it in a second); the rest are
/// a transaction (`BEGIN`, the lifecycle's statements, `COMMIT`). Before
/// the pool (one writer task, a savepoint a write, a `NOTIFY` a group):
/// submit 6, lease 11, record_steps 7, heartbeat 5, finish_and_lease 18,
/// release 8.
const BOUNDS: [(&str, u64); 8] = [
    ("submit", 1),
    ("submit_many (2 jobs)", 4),
    ("lease (1 job, first pin)", 2),
    ("lease (1 job, pin known)", 1),
    ("record_steps (1 step, 1 event)", 1),
    ("heartbeat", 1),
    ("finish_and_lease (1 event, 1 job)", 1),
    ("release", 1),
];

/// Writes waiting for a connection are bounded: with every admitted submit
/// held inside its insert (another client holds the jobs table), the
/// 1,024 first are admitted and every submit past them is refused at once
/// with `Busy` (the API's 503), never another error; once the table is
/// free every admitted submit commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_flood_of_submits_past_the_backlog_is_refused_busy() {
    const BACKLOG: usize = 1024;
    const EXTRA: usize = 40;
    let schema = Schema::fresh();
    let q = Arc::new(open(&schema, 2).await);
    let holder = schema.client().await;
    holder
        .batch_execute(&format!(
            "SET search_path TO {}; BEGIN; LOCK TABLE jobs IN SHARE MODE",
            schema.name
        ))
        .await
        .unwrap();
    let (answers, mut answered) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..BACKLOG + EXTRA {
        let (q, answers) = (q.clone(), answers.clone());
        tokio::spawn(async move {
            let _ = answers.send(q.submit(job()).await.map(|_| ()));
        });
    }
    drop(answers);
    // While the table is held no admitted submit can answer: the first
    // answers are the refusals.
    for _ in 0..EXTRA {
        match answered.recv().await.expect("every submit answers") {
            Err(structured_agents::queue::QueueError::Busy { waiting, .. }) => {
                assert_eq!(waiting, BACKLOG)
            }
            other => panic!("a submit past the backlog answered {other:?}"),
        }
    }
    holder.batch_execute("COMMIT").await.unwrap();
    let mut committed = 0;
    while let Some(answer) = answered.recv().await {
        answer.unwrap_or_else(|e| panic!("an admitted submit failed: {e}"));
        committed += 1;
    }
    assert_eq!(committed, BACKLOG);
}

fn pinned(digest: &'static str) -> Arc<Pinner> {
    Arc::new(move |_: &str| {
        Some(Pin {
            version: digest.into(),
            digest: digest.into(),
        })
    })
}

/// The lease pins a first attempt in its statement with what the pinner
/// answered last for the bundle; when the pinner answers otherwise now (the
/// bundle was reloaded), the job is pinned to the new answer, in the store
/// as in the lease, and a job submitted with its own version keeps it.
#[tokio::test]
async fn postgres_a_lease_pins_to_what_the_pinner_answers_now() {
    let schema = Schema::fresh();
    let q = open(&schema, 2).await;
    for _ in 0..3 {
        q.submit(job()).await.unwrap();
    }
    let first = q
        .lease_many("w", HELD, 1, Some(pinned("d1")))
        .await
        .unwrap();
    assert_eq!(first[0].job.bundle_digest.as_deref(), Some("d1"));
    // The statement pins with "d1", learnt; the pinner now says "d2".
    let second = q
        .lease_many("w", HELD, 1, Some(pinned("d2")))
        .await
        .unwrap();
    assert_eq!(second[0].job.bundle_digest.as_deref(), Some("d2"));
    assert_eq!(second[0].job.bundle_version.as_deref(), Some("d2"));
    let stored = q.get(&second[0].job.id).await.unwrap().unwrap();
    assert_eq!(
        (
            stored.bundle_version.as_deref(),
            stored.bundle_digest.as_deref()
        ),
        (Some("d2"), Some("d2"))
    );
    // A version given at submit stays; the digest is the pinner's.
    let own = q
        .submit(NewJob {
            bundle_version: Some("7".into()),
            ..job()
        })
        .await
        .unwrap()
        .0;
    let leased = q
        .lease_many("w", HELD, 2, Some(pinned("d3")))
        .await
        .unwrap();
    let mine = leased.iter().find(|l| l.job.id == own.id).expect("leased");
    assert_eq!(
        (
            mine.job.bundle_version.as_deref(),
            mine.job.bundle_digest.as_deref()
        ),
        (Some("7"), Some("d3"))
    );
    let stored = q.get(&own.id).await.unwrap().unwrap();
    assert_eq!(
        (
            stored.bundle_version.as_deref(),
            stored.bundle_digest.as_deref()
        ),
        (Some("7"), Some("d3"))
    );
}

/// A plain submit (one statement) stores everything a job carries: its
/// kind and controls come back as submitted, from the store and from the
/// lease.
#[tokio::test]
async fn postgres_a_plain_submit_stores_the_kind_and_controls() {
    use structured_agents::queue::{Controls, JobKind};
    let schema = Schema::fresh();
    let q = open(&schema, 2).await;
    let kind = JobKind::Stage {
        stage: "review".into(),
    };
    let controls = Controls {
        tools: Some(vec!["search".into()]),
        max_agents: Some(2),
        ..Default::default()
    };
    let (submitted, new) = q
        .submit(NewJob {
            kind: kind.clone(),
            controls: controls.clone(),
            priority: 3,
            ..job()
        })
        .await
        .unwrap();
    assert!(new);
    let stored = q.get(&submitted.id).await.unwrap().unwrap();
    assert_eq!((&stored.kind, &stored.controls), (&kind, &controls));
    assert_eq!(stored.priority, 3);
    let leased = q.lease_many("w", HELD, 1, None).await.unwrap();
    assert_eq!(
        (&leased[0].job.kind, &leased[0].job.controls),
        (&kind, &controls)
    );
}

/// Plain submits and journal steps waiting together share a commit (the
/// group commit, `postgres/group.rs`): 200 submits at once take fewer
/// commits than writes, and each job is there once. A statement the
/// database fails in a group (here a job id taken already) fails alone:
/// the group rolls back and each write runs again on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_concurrent_one_statement_writes_share_commits_and_fail_alone() {
    let schema = Schema::fresh();
    let q = Arc::new(open(&schema, 4).await);
    let (taken, _) = q.submit(job()).await.unwrap();
    let before = q.write_stats();
    let mut calls = Vec::new();
    for i in 0..200 {
        let q = q.clone();
        let id = (i == 100).then(|| taken.id.clone());
        calls.push(tokio::spawn(async move {
            q.submit(NewJob { id, ..job() })
                .await
                .map(|(job, _)| job.id)
        }));
    }
    let mut ids = Vec::new();
    let mut refused = 0;
    for call in calls {
        match call.await.unwrap() {
            Ok(id) => ids.push(id),
            Err(_) => refused += 1,
        }
    }
    let after = q.write_stats();
    assert_eq!(refused, 1, "only the write with a taken id fails");
    assert_eq!(ids.len(), 199);
    let db = schema.client().await;
    let sql = format!("SELECT COUNT(*) FROM {}.jobs", schema.name);
    let stored: i64 = db.query_one(&sql, &[]).await.unwrap().get(0);
    assert_eq!(stored, 200, "the 199 new jobs and the first, each once");
    let (writes, commits) = (after.writes - before.writes, after.commits - before.commits);
    println!("200 concurrent submits: {writes} writes in {commits} commits");
    assert_eq!(writes, 199);
    assert!(commits < writes, "{writes} writes took {commits} commits");
}

/// Worker slots ending their jobs together share a commit (the settle
/// group, `postgres/settle.rs`): 32 finishes, each with its slot's next
/// lease, take fewer commits than settles, and each queued job is leased
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_concurrent_settles_share_commits() {
    const SLOTS: usize = 32;
    let schema = Schema::fresh();
    let q = Arc::new(open(&schema, 4).await);
    for _ in 0..2 * SLOTS {
        q.submit(job()).await.unwrap();
    }
    let running = q.lease_many("w", HELD, SLOTS, None).await.unwrap();
    assert_eq!(running.len(), SLOTS);
    let before = q.write_stats();
    let settles: Vec<_> = running
        .into_iter()
        .map(|lease| {
            let q = q.clone();
            tokio::spawn(async move {
                let next = NextLease {
                    worker: "w".into(),
                    lease_for: HELD,
                    n: 1,
                    pin: None,
                };
                let outcome = Outcome::Succeeded(json!("ok"));
                q.finish_and_lease(
                    &lease.job.id,
                    lease.attempt,
                    outcome,
                    &[event(1)],
                    None,
                    next,
                )
                .await
            })
        })
        .collect();
    let mut leased = std::collections::BTreeSet::new();
    for settle in futures::future::join_all(settles).await {
        let (finished, more) = settle.unwrap().unwrap();
        assert_eq!(finished.reply, CompleteReply::Recorded(JobState::Succeeded));
        assert_eq!(more.len(), 1);
        assert!(leased.insert(more[0].job.id.clone()), "leased twice");
    }
    let after = q.write_stats();
    let (writes, commits) = (after.writes - before.writes, after.commits - before.commits);
    println!("{SLOTS} concurrent settles: {writes} writes in {commits} commits");
    assert_eq!(writes, SLOTS as u64);
    assert!(commits < writes, "{writes} settles took {commits} commits");
    assert!(
        q.lease_many("w", HELD, SLOTS, None)
            .await
            .unwrap()
            .is_empty()
    );
}

/// The unique index of idempotency keys holds only the jobs that have one
/// (migration 0022): a lease and a finish write new versions of a job's
/// row, and a NULL key in every version was an index entry each time.
/// Keyed submits still find the job their key names.
#[tokio::test]
async fn postgres_the_key_index_holds_only_keyed_jobs() {
    let schema = Schema::fresh();
    let q = open(&schema, 2).await;
    let keyless: Vec<NewJob> = (0..2000).map(|_| job()).collect();
    for chunk in keyless.chunks(500) {
        q.submit_many(chunk.to_vec()).await.unwrap();
    }
    let keyed = |key: &str| NewJob {
        idempotency_key: Some(key.into()),
        ..job()
    };
    let (first, new) = q.submit(keyed("k1")).await.unwrap();
    assert!(new);
    let (again, new) = q.submit(keyed("k1")).await.unwrap();
    assert!(!new, "a taken key finds its job");
    assert_eq!(again.id, first.id);
    let many: Vec<_> = q
        .submit_many(vec![keyed("k1"), keyed("k2")])
        .await
        .unwrap()
        .into_iter()
        .map(|(job, new)| (job.id, new))
        .collect();
    assert_eq!(many[0], (first.id.clone(), false));
    assert!(many[1].1, "a new key inserts");
    let db = schema.client().await;
    let sql = format!(
        "SELECT indexdef, pg_relation_size(format('%I.%I', schemaname, indexname)::regclass)
         FROM pg_indexes WHERE schemaname = '{}' AND indexname = 'jobs_keyed'",
        schema.name
    );
    let row = db.query_one(&sql, &[]).await.unwrap();
    let (definition, bytes): (String, i64) = (row.get(0), row.get(1));
    assert!(
        definition.contains("WHERE (idempotency_key IS NOT NULL)"),
        "{definition}"
    );
    // A metapage and one leaf: two keys. 2,000 NULL entries would take
    // several leaves.
    assert!(bytes <= 2 * 8192, "the key index is {bytes} bytes");
}
