//! Retention: finished jobs, with their events and journals, are deleted
//! `queue.retention` after they finished, by a background task that works in
//! small batches so it never holds the store for long.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use crate::events::daemon::{DaemonBus, DaemonEvent};
use crate::queue::JobQueue;

/// Jobs deleted per transaction.
const BATCH: usize = 200;

/// Runs until `shutdown`: every tenth of `retention` (at most a minute),
/// deletes what is past `retention` and publishes how many went.
pub fn spawn(
    queue: Arc<dyn JobQueue>,
    retention: Duration,
    bus: DaemonBus,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let every = (retention / 10).min(Duration::from_secs(60));
    spawn_every(queue, retention, every, bus, shutdown)
}

fn spawn_every(
    queue: Arc<dyn JobQueue>,
    retention: Duration,
    every: Duration,
    bus: DaemonBus,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let stopping = shutdown.clone();
    super::sweep::every(every, shutdown, move || {
        let (queue, bus, stopping) = (queue.clone(), bus.clone(), stopping.clone());
        async move {
            let purged = purge(&*queue, SystemTime::now() - retention, &stopping).await;
            if purged > 0 {
                bus.publish(DaemonEvent::JobsPurged { count: purged });
            }
        }
    })
}

/// Deletes what finished before `cutoff`, a batch at a time, until nothing
/// is left or the daemon stops; returns how many jobs went.
async fn purge(queue: &dyn JobQueue, cutoff: SystemTime, stopping: &CancellationToken) -> u64 {
    let mut purged = 0;
    loop {
        match queue.purge_finished(cutoff, BATCH).await {
            Ok(n) => {
                purged += n as u64;
                if n < BATCH || stopping.is_cancelled() {
                    return purged;
                }
                // Let other writers in between batches.
                tokio::task::yield_now().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "retention: cannot delete finished jobs; trying again later");
                return purged;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::sqlite::SqliteQueue;
    use crate::queue::{JobState, NewJob, Outcome};

    #[tokio::test]
    async fn finished_jobs_are_purged_in_batches_and_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let queue: Arc<dyn JobQueue> = Arc::new(
            SqliteQueue::open(&dir.path().join("q.db"), Default::default())
                .await
                .unwrap(),
        );
        let submit = || NewJob {
            bundle: "b".into(),
            input: "x".into(),
            ..Default::default()
        };
        for _ in 0..BATCH + 5 {
            queue.submit(submit()).await.unwrap();
            let lease = queue
                .lease("w", Duration::from_secs(30))
                .await
                .unwrap()
                .unwrap();
            queue
                .complete(
                    &lease.job.id,
                    lease.attempt,
                    Outcome::Succeeded(1.into()),
                    &[],
                )
                .await
                .unwrap();
        }
        let (waiting, _) = queue.submit(submit()).await.unwrap();
        // Counted the way the daemon counts it: metrics subscribe to the bus.
        let metrics = crate::telemetry::Metrics::new().unwrap();
        let bus = DaemonBus::new();
        bus.subscribe(metrics.clone());
        let shutdown = CancellationToken::new();
        let task = spawn_every(
            queue.clone(),
            Duration::ZERO,
            Duration::from_millis(10),
            bus,
            shutdown.clone(),
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while metrics.jobs_purged.get() < (BATCH + 5) as u64 {
            assert!(
                std::time::Instant::now() < deadline,
                "purged only {}",
                metrics.jobs_purged.get()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        shutdown.cancel();
        task.await.unwrap();
        let counts = queue.counts_by_state(None).await.unwrap();
        assert_eq!(counts, vec![("b".to_string(), JobState::Queued, 1)]);
        assert!(queue.get(&waiting.id).await.unwrap().is_some());
    }
}
