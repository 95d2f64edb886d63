//! The queue conformance suite, written against the `JobQueue` trait only:
//! every backend runs it (today: SQLite; `suite!` instantiates it per backend).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::json;
use structured_agents::events::{Event, EventEnvelope};
use structured_agents::queue::sqlite::SqliteQueue;
use structured_agents::queue::{
    CompleteReply, HeartbeatReply, JobFilter, JobQueue, JobState, NewJob, Outcome, QueueError,
    RetryPolicy,
};

const LEASE: Duration = Duration::from_millis(150);

fn job(bundle: &str) -> NewJob {
    NewJob {
        bundle: bundle.into(),
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

fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        backoff_base: Duration::from_millis(400),
        backoff_max: Duration::from_millis(800),
    }
}

async fn lease_until(q: &dyn JobQueue, within: Duration) -> structured_agents::queue::Lease {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(l) = q.lease("w", LEASE).await.unwrap() {
            return l;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "nothing became leasable"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub async fn lease_expiry_makes_a_job_runnable_again(q: Arc<dyn JobQueue>) {
    let (submitted, _) = q.submit(job("b")).await.unwrap();
    let first = q.lease("w1", LEASE).await.unwrap().unwrap();
    assert_eq!(first.attempt, 1);
    assert!(
        q.lease("w2", LEASE).await.unwrap().is_none(),
        "a leased job must not be handed out twice"
    );
    tokio::time::sleep(LEASE + Duration::from_millis(50)).await;
    let second = q
        .lease("w2", LEASE)
        .await
        .unwrap()
        .expect("expired lease is runnable again");
    assert_eq!(second.job.id, submitted.id);
    assert_eq!(second.attempt, 2);
    // Heartbeats keep a lease alive.
    for _ in 0..4 {
        tokio::time::sleep(LEASE / 2).await;
        assert_eq!(
            q.heartbeat(&second.job.id, 2, LEASE).await.unwrap(),
            HeartbeatReply::Ok
        );
    }
    assert!(q.lease("w3", LEASE).await.unwrap().is_none());
}

pub async fn stale_worker_cannot_overwrite_newer_outcome(q: Arc<dyn JobQueue>) {
    let (submitted, _) = q.submit(job("b")).await.unwrap();
    let stale = q.lease("w1", LEASE).await.unwrap().unwrap();
    tokio::time::sleep(LEASE + Duration::from_millis(50)).await;
    let fresh = q.lease("w2", LEASE).await.unwrap().unwrap();
    assert_eq!(
        q.heartbeat(&submitted.id, stale.attempt, LEASE)
            .await
            .unwrap(),
        HeartbeatReply::Lost
    );
    assert!(matches!(
        q.append_events(&submitted.id, stale.attempt, &[event(1)])
            .await,
        Err(QueueError::StaleAttempt { .. })
    ));
    let reply = q
        .complete(
            &submitted.id,
            fresh.attempt,
            Outcome::Succeeded(json!("new")),
            &[event(1)],
        )
        .await
        .unwrap();
    assert_eq!(reply, CompleteReply::Recorded(JobState::Succeeded));
    let reply = q
        .complete(
            &submitted.id,
            stale.attempt,
            Outcome::Failed {
                error: "old".into(),
                retryable: true,
            },
            &[],
        )
        .await
        .unwrap();
    assert_eq!(reply, CompleteReply::Stale);
    let stored = q.get(&submitted.id).await.unwrap().unwrap();
    assert_eq!(stored.state, JobState::Succeeded);
    assert_eq!(stored.result, Some(json!("new")));
    // A succeeded job never runs again, whatever its old lease says.
    tokio::time::sleep(LEASE + Duration::from_millis(50)).await;
    assert!(q.lease("w3", LEASE).await.unwrap().is_none());
}

pub async fn idempotency_keys_return_the_first_job(q: Arc<dyn JobQueue>) {
    let keyed = || NewJob {
        idempotency_key: Some("k".into()),
        ..job("b")
    };
    let (a, created_a) = q.submit(keyed()).await.unwrap();
    let (b, created_b) = q
        .submit(NewJob {
            input: "different".into(),
            ..keyed()
        })
        .await
        .unwrap();
    assert!(created_a && !created_b);
    assert_eq!(a.id, b.id);
    assert_eq!(b.input, "in");
    let (c, created_c) = q.submit(job("b")).await.unwrap();
    assert!(created_c && c.id != a.id);
}

pub async fn priority_then_run_at_ordering(q: Arc<dyn JobQueue>) {
    let now = SystemTime::now();
    let (low, _) = q
        .submit(NewJob {
            priority: 0,
            ..job("low")
        })
        .await
        .unwrap();
    let (high, _) = q
        .submit(NewJob {
            priority: 5,
            ..job("high")
        })
        .await
        .unwrap();
    let (later, _) = q
        .submit(NewJob {
            priority: 9,
            run_at: Some(now + Duration::from_millis(300)),
            ..job("later")
        })
        .await
        .unwrap();
    let (early_low, _) = q
        .submit(NewJob {
            priority: 0,
            run_at: Some(now - Duration::from_secs(10)),
            ..job("early")
        })
        .await
        .unwrap();
    let order: Vec<_> = [
        q.lease("w", LEASE * 20).await.unwrap().unwrap().job.id,
        q.lease("w", LEASE * 20).await.unwrap().unwrap().job.id,
        q.lease("w", LEASE * 20).await.unwrap().unwrap().job.id,
    ]
    .into();
    assert_eq!(order, vec![high.id, early_low.id, low.id]);
    assert!(
        q.lease("w", LEASE).await.unwrap().is_none(),
        "run_at in the future is not due yet"
    );
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(q.lease("w", LEASE).await.unwrap().unwrap().job.id, later.id);
}

pub async fn retries_back_off_then_die(q: Arc<dyn JobQueue>) {
    let (submitted, _) = q.submit(job("b")).await.unwrap();
    for attempt in 1..=3 {
        let lease = lease_until(q.as_ref(), Duration::from_secs(5)).await;
        assert_eq!(lease.attempt, attempt);
        let reply = q
            .complete(
                &submitted.id,
                attempt,
                Outcome::Failed {
                    error: "model down".into(),
                    retryable: true,
                },
                &[],
            )
            .await
            .unwrap();
        if attempt < 3 {
            assert_eq!(reply, CompleteReply::Recorded(JobState::Queued));
            // Backed off: not runnable immediately.
            assert!(
                q.lease("w", LEASE).await.unwrap().is_none(),
                "retry must wait for its backoff"
            );
        } else {
            assert_eq!(reply, CompleteReply::Recorded(JobState::Dead));
        }
    }
    let dead = q.get(&submitted.id).await.unwrap().unwrap();
    assert_eq!(
        (dead.state, dead.attempts, dead.error.as_deref()),
        (JobState::Dead, 3, Some("model down"))
    );
    // Non-retryable failures fail at once.
    let (other, _) = q.submit(job("b")).await.unwrap();
    let lease = lease_until(q.as_ref(), Duration::from_secs(1)).await;
    let reply = q
        .complete(
            &other.id,
            lease.attempt,
            Outcome::Failed {
                error: "bad input".into(),
                retryable: false,
            },
            &[],
        )
        .await
        .unwrap();
    assert_eq!(reply, CompleteReply::Recorded(JobState::Failed));
}

pub async fn cancellation_of_queued_and_running_jobs(q: Arc<dyn JobQueue>) {
    let (queued, _) = q
        .submit(NewJob {
            run_at: Some(SystemTime::now() + Duration::from_secs(3600)),
            ..job("b")
        })
        .await
        .unwrap();
    assert_eq!(
        q.cancel(&queued.id).await.unwrap().unwrap().state,
        JobState::Cancelled
    );
    let (running, _) = q.submit(job("b")).await.unwrap();
    let lease = q.lease("w", LEASE * 10).await.unwrap().unwrap();
    let after = q.cancel(&running.id).await.unwrap().unwrap();
    assert_eq!(after.state, JobState::Running);
    assert!(after.cancel_requested);
    assert_eq!(
        q.heartbeat(&running.id, lease.attempt, LEASE)
            .await
            .unwrap(),
        HeartbeatReply::CancelRequested
    );
    let reply = q
        .complete(
            &running.id,
            lease.attempt,
            Outcome::Failed {
                error: "stopped".into(),
                retryable: true,
            },
            &[],
        )
        .await
        .unwrap();
    assert_eq!(reply, CompleteReply::Recorded(JobState::Cancelled));
    // A cancel request on a running job whose worker vanished ends it when the lease expires.
    let (orphan, _) = q.submit(job("b")).await.unwrap();
    q.lease("w", LEASE).await.unwrap().unwrap();
    q.cancel(&orphan.id).await.unwrap();
    tokio::time::sleep(LEASE + Duration::from_millis(50)).await;
    assert!(q.lease("w", LEASE).await.unwrap().is_none());
    assert_eq!(
        q.get(&orphan.id).await.unwrap().unwrap().state,
        JobState::Cancelled
    );
    assert!(
        q.cancel(&structured_agents::queue::JobId::from("missing"))
            .await
            .unwrap()
            .is_none()
    );
}

pub async fn event_log_is_ordered_guarded_and_continues_across_attempts(q: Arc<dyn JobQueue>) {
    let (submitted, _) = q.submit(job("b")).await.unwrap();
    let first = q.lease("w", LEASE).await.unwrap().unwrap();
    q.append_events(&submitted.id, first.attempt, &[event(1), event(2)])
        .await
        .unwrap();
    assert!(matches!(
        q.append_events(&submitted.id, first.attempt, &[event(2)])
            .await,
        Err(QueueError::DuplicateEvent { seq: 2, .. })
    ));
    tokio::time::sleep(LEASE + Duration::from_millis(50)).await;
    let second = q.lease("w", LEASE).await.unwrap().unwrap();
    let next = q.last_seq(&submitted.id).await.unwrap() + 1;
    assert_eq!(next, 3);
    q.append_events(&submitted.id, second.attempt, &[event(3)])
        .await
        .unwrap();
    q.complete(
        &submitted.id,
        second.attempt,
        Outcome::Succeeded(json!(1)),
        &[event(4)],
    )
    .await
    .unwrap();
    let stored = q.events_after(&submitted.id, 0, 100).await.unwrap();
    assert_eq!(
        stored.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    let tail = q.events_after(&submitted.id, 2, 1).await.unwrap();
    assert_eq!(tail.len(), 1);
    assert_eq!(tail[0].seq, 3);
    let parsed: EventEnvelope = serde_json::from_str(&tail[0].event_json).unwrap();
    assert_eq!(parsed, event(3));
}

pub async fn release_does_not_consume_an_attempt(q: Arc<dyn JobQueue>) {
    let (submitted, _) = q.submit(job("b")).await.unwrap();
    let lease = q.lease("w", LEASE).await.unwrap().unwrap();
    q.release(&submitted.id, lease.attempt).await.unwrap();
    let again = q.lease("w", LEASE).await.unwrap().unwrap();
    assert_eq!(again.attempt, 1);
}

pub async fn listing_pages_and_counts(q: Arc<dyn JobQueue>) {
    for i in 0..5 {
        q.submit(job(if i % 2 == 0 { "even" } else { "odd" }))
            .await
            .unwrap();
    }
    let page = q
        .list(JobFilter {
            limit: 2,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(page.jobs.len(), 2);
    let rest = q
        .list(JobFilter {
            limit: 10,
            cursor: page.next_cursor.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(rest.jobs.len(), 3);
    assert!(rest.next_cursor.is_none());
    let odd = q
        .list(JobFilter {
            limit: 10,
            bundle: Some("odd".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(odd.jobs.len(), 2);
    let counts = q.counts_by_state().await.unwrap();
    assert!(counts.contains(&("even".to_string(), JobState::Queued, 3)));
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
            case!(lease_expiry_makes_a_job_runnable_again);
            case!(stale_worker_cannot_overwrite_newer_outcome);
            case!(idempotency_keys_return_the_first_job);
            case!(priority_then_run_at_ordering);
            case!(retries_back_off_then_die);
            case!(cancellation_of_queued_and_running_jobs);
            case!(event_log_is_ordered_guarded_and_continues_across_attempts);
            case!(release_does_not_consume_an_attempt);
            case!(listing_pages_and_counts);
        }
    };
}

async fn sqlite() -> (Arc<dyn JobQueue>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let q = SqliteQueue::open(&dir.path().join("state/queue.db"), fast_retry())
        .await
        .unwrap();
    (Arc::new(q), dir)
}

suite!(sqlite_backend, sqlite());

#[tokio::test]
async fn sqlite_survives_reopen_and_refuses_newer_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("queue.db");
    let id = {
        let q = SqliteQueue::open(&path, fast_retry()).await.unwrap();
        let (j, _) = q.submit(job("b")).await.unwrap();
        let lease = q.lease("w", LEASE).await.unwrap().unwrap();
        q.append_events(&j.id, lease.attempt, &[event(1)])
            .await
            .unwrap();
        j.id
    };
    let q = SqliteQueue::open(&path, fast_retry()).await.unwrap();
    assert_eq!(q.get(&id).await.unwrap().unwrap().state, JobState::Running);
    assert_eq!(q.last_seq(&id).await.unwrap(), 1);
    drop(q);
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);
    let err = SqliteQueue::open(&path, fast_retry()).await.err().unwrap();
    assert!(
        err.to_string().contains("newer than this binary supports"),
        "{err}"
    );
}
