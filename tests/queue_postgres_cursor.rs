//! Where a PostgreSQL lease starts (`queue/postgres/cursor.rs`): each key's
//! scan starts where this daemon last leased from it, and a regular walk
//! from every key's head finds what a cursor cannot see. These cases are
//! the ones a cursor could get wrong: a job of a higher priority arriving
//! behind it, a job put back behind it by another daemon, a key only
//! another daemon submits to, an abandoned run, and a snapshot held open
//! the whole time (the reason cursors exist).

mod common;

use std::time::{Duration, Instant};

use common::postgres::{START_POSTGRES, Schema, postgres_url};
use structured_agents::queue::postgres::{PostgresOptions, PostgresQueue};
use structured_agents::queue::{JobId, JobQueue, Lease, NewJob, Outcome, RetryPolicy};

/// A lease no stall can outlive.
const HELD: Duration = Duration::from_secs(600);

/// How long a job behind a cursor may wait, with room for a slow machine:
/// the full walk comes at least once a second (`cursor::FULL_EVERY`).
const FOUND_WITHIN: Duration = Duration::from_secs(10);

fn job(owner: &str, priority: i32) -> NewJob {
    NewJob {
        bundle: "b".into(),
        input: format!("{owner}/{priority}"),
        owner: (!owner.is_empty()).then(|| owner.to_string()),
        priority,
        max_attempts: Some(5),
        ..Default::default()
    }
}

async fn open(schema: &Schema) -> PostgresQueue {
    let options = PostgresOptions {
        schema: schema.name.clone(),
        pool_size: 2,
        ..PostgresOptions::new(postgres_url())
    };
    PostgresQueue::open(options, RetryPolicy::default())
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL is needed for this test: {e}\n{START_POSTGRES}"))
}

/// Submits `n` jobs of the key "" at priority 0: their ids, in order.
async fn submit_plain(q: &PostgresQueue, n: usize) -> Vec<JobId> {
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        ids.push(q.submit(job("", 0)).await.unwrap().0.id);
    }
    ids
}

async fn lease_one(q: &PostgresQueue, lease_for: Duration) -> Option<Lease> {
    q.lease_many("w", lease_for, 1, None)
        .await
        .expect("the lease answers")
        .into_iter()
        .next()
}

/// Leases until a job comes, for at most [`FOUND_WITHIN`].
async fn lease_within(q: &PostgresQueue, what: &str) -> Lease {
    let started = Instant::now();
    loop {
        if let Some(lease) = lease_one(q, HELD).await {
            return lease;
        }
        assert!(
            started.elapsed() < FOUND_WITHIN,
            "{what}: no lease within {FOUND_WITHIN:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn succeed(q: &PostgresQueue, lease: &Lease) {
    let ok = Outcome::Succeeded(serde_json::json!("ok"));
    q.finish(&lease.job.id, lease.attempt, ok, &[], None)
        .await
        .expect("the finish is recorded");
}

#[tokio::test]
async fn postgres_a_higher_priority_job_submitted_behind_a_cursor_is_leased_first() {
    let schema = Schema::fresh();
    let q = open(&schema).await;
    let low = submit_plain(&q, 3).await;
    // The first lease walks from the head; the second from its cursor.
    assert_eq!(lease_one(&q, HELD).await.unwrap().job.id, low[0]);
    assert_eq!(lease_one(&q, HELD).await.unwrap().job.id, low[1]);
    let high = q.submit(job("", 5)).await.unwrap().0.id;
    assert_eq!(
        lease_one(&q, HELD).await.unwrap().job.id,
        high,
        "a higher priority sorts before the cursor and is found by the probe before it"
    );
    assert_eq!(lease_one(&q, HELD).await.unwrap().job.id, low[2]);
}

#[tokio::test]
async fn postgres_a_job_another_daemon_puts_back_behind_a_cursor_is_leased_again() {
    let schema = Schema::fresh();
    let (here, there) = (open(&schema).await, open(&schema).await);
    let ids = submit_plain(&here, 3).await;
    let first = lease_one(&here, HELD).await.unwrap();
    let second = lease_one(&here, HELD).await.unwrap();
    assert_eq!((&first.job.id, &second.job.id), (&ids[0], &ids[1]));
    // The other daemon puts the first job back, with its place in the queue.
    there
        .release(&first.job.id, first.attempt, &[], None)
        .await
        .expect("the release is recorded");
    let mut leased = Vec::new();
    while leased.len() < 2 {
        let lease = lease_within(&here, "the job put back behind the cursor").await;
        leased.push(lease.job.id.clone());
    }
    leased.sort();
    let mut want = vec![ids[0].clone(), ids[2].clone()];
    want.sort();
    assert_eq!(leased, want, "each job is leased once more, none twice");
    assert!(lease_one(&here, HELD).await.is_none());
}

#[tokio::test]
async fn postgres_a_key_only_another_daemon_submits_to_is_found() {
    let schema = Schema::fresh();
    let (here, there) = (open(&schema).await, open(&schema).await);
    here.submit(job("a", 0)).await.unwrap();
    let a = lease_one(&here, HELD).await.expect("a's job leases");
    succeed(&here, &a).await;
    let b = there.submit(job("b", 0)).await.unwrap().0.id;
    let lease = lease_within(&here, "a job of a key this daemon never saw").await;
    assert_eq!(lease.job.id, b);
}

#[tokio::test]
async fn postgres_an_abandoned_run_is_leased_after_the_last_lease_found_none() {
    let schema = Schema::fresh();
    let (here, there) = (open(&schema).await, open(&schema).await);
    let abandoned = here.submit(job("", 0)).await.unwrap().0.id;
    let queued = here.submit(job("", 0)).await.unwrap().0.id;
    // The other daemon leases the first job briefly and dies (never renews).
    let short = lease_one(&there, Duration::from_millis(300)).await.unwrap();
    assert_eq!(short.job.id, abandoned);
    // This daemon's leases find no abandoned run yet: later ones look after.
    let next = lease_one(&here, HELD).await.unwrap();
    assert_eq!(next.job.id, queued);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let resumed = lease_within(&here, "the abandoned run").await;
    assert_eq!(resumed.job.id, abandoned);
    assert_eq!(resumed.attempt, short.attempt + 1);
}

#[tokio::test]
async fn postgres_with_a_snapshot_held_every_job_is_leased_once_in_order() {
    let schema = Schema::fresh();
    let q = open(&schema).await;
    let mut ids = submit_plain(&q, 40).await;
    // Another client holds a snapshot: no version the leases leave behind
    // can be removed until it ends.
    let holder = schema.client().await;
    holder
        .batch_execute(&format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM {}.jobs",
            schema.name
        ))
        .await
        .expect("the snapshot opens");
    let mut leased = Vec::new();
    for i in 0..ids.len() {
        let lease = lease_within(&q, &format!("job {i} with a snapshot held")).await;
        succeed(&q, &lease).await;
        leased.push(lease.job.id);
        if i == 20 {
            // More work arrives while the snapshot is held.
            ids.extend(submit_plain(&q, 5).await);
        }
    }
    while leased.len() < ids.len() {
        let lease = lease_within(&q, "the work that came during the hold").await;
        succeed(&q, &lease).await;
        leased.push(lease.job.id);
    }
    holder
        .batch_execute("COMMIT")
        .await
        .expect("the snapshot ends");
    assert_eq!(leased, ids, "in submission order, each once");
    assert!(lease_one(&q, HELD).await.is_none());
}
