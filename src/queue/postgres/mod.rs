//! The shared queue: PostgreSQL, for several daemons working one queue.
//!
//! Semantics are the SQLite backend's, statement for statement (both pass
//! `tests/queue_conformance.rs`); what differs is how writers are kept
//! apart. SQLite has one writer; here every write is a transaction that
//! locks the job's row first (`require_current` reads it `FOR UPDATE`), and
//! leasing takes the best row with `FOR UPDATE SKIP LOCKED`, so two daemons
//! never lease the same job and never interleave two writes to one job.
//!
//! Times are BIGINT milliseconds, as in SQLite, taken from the database's
//! clock: daemons on hosts whose clocks disagree still agree on when a lease
//! expires. Commits are durable under PostgreSQL's default
//! `synchronous_commit = on`.
//!
//! Every change also `NOTIFY`s the other daemons (see `listen`).

mod dialect;
mod listen;
mod schema;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use deadpool_postgres::{
    Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime, Transaction,
};
use futures::future::BoxFuture;
use tokio::sync::broadcast;
use tokio_postgres::NoTls;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::lifecycle::{self, Ending, LeaseAsk, Pinner};
use super::tx::{Change, Res, Tx, Wakeups};
use super::*;
use dialect::PgTx;
use listen::Sinks;
pub use schema::{PostgresOptions, SCHEMA_VERSION};

/// A PostgreSQL error with the server's message, detail and hint (the
/// driver's own `Display` says only "db error").
pub(crate) fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut out = format!("{} ({})", db.message(), db.code().code());
            if let Some(detail) = db.detail() {
                out.push_str(&format!("; {detail}"));
            }
            if let Some(hint) = db.hint() {
                out.push_str(&format!("; hint: {hint}"));
            }
            out
        }
        None => {
            let mut out = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                out.push_str(&format!(": {s}"));
                source = s.source();
            }
            out
        }
    }
}

fn pool_error(options: &PostgresOptions, e: deadpool_postgres::PoolError) -> QueueError {
    use deadpool_postgres::PoolError;
    let detail = match &e {
        PoolError::Backend(e) => describe(e),
        PoolError::Timeout(_) => format!(
            "{e} (all {} connections of queue.pool_size were busy, or the server did not answer)",
            options.pool_size
        ),
        other => other.to_string(),
    };
    QueueError::Connect {
        url: options.url.clone(),
        detail,
    }
}

pub struct PostgresQueue {
    pool: Pool,
    options: PostgresOptions,
    label: String,
    channel: String,
    retry: RetryPolicy,
    sinks: Sinks,
    stats: Arc<WriteStats>,
    /// Stops the LISTEN task when the handle goes away.
    _listener: DropGuard,
}

impl PostgresQueue {
    /// Connects, applies pending migrations (once across daemons starting
    /// together), and starts listening for other daemons' changes.
    pub async fn open(options: PostgresOptions, retry: RetryPolicy) -> Result<Self, QueueError> {
        let config = options.connect_config()?;
        let pool = Self::pool(&options, config.clone())?;
        schema::migrate(&pool, &options, false).await?;
        let channel = format!("sa_jobs_{}", options.schema);
        let first = listen::listen(&config, &channel)
            .await
            .map_err(|e| QueueError::Connect {
                url: options.url.clone(),
                detail: format!("opening the LISTEN connection: {}", describe(&e)),
            })?;
        let sinks = Sinks {
            instance: uuid::Uuid::new_v4().simple().to_string(),
            wake: Wakeups::new(),
        };
        let stop = CancellationToken::new();
        let label = options.label();
        tokio::spawn(listen::run(
            Some(first),
            config,
            channel.clone(),
            sinks.clone(),
            stop.clone(),
            label.clone(),
        ));
        Ok(Self {
            pool,
            label,
            channel,
            retry,
            sinks,
            stats: Arc::new(WriteStats::default()),
            _listener: stop.drop_guard(),
            options,
        })
    }

    /// Applies pending migrations (or with `check_only` only reports them)
    /// without opening the queue: `structured-agents migrate`.
    pub async fn migrate(
        options: &PostgresOptions,
        check_only: bool,
    ) -> Result<MigrationStatus, QueueError> {
        let pool = Self::pool(options, options.connect_config()?)?;
        schema::migrate(&pool, options, check_only).await
    }

    fn pool(options: &PostgresOptions, config: tokio_postgres::Config) -> Result<Pool, QueueError> {
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                // `Fast` still drops connections the driver saw close.
                recycling_method: RecyclingMethod::Fast,
            },
        );
        Pool::builder(manager)
            .max_size(options.pool_size)
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(Duration::from_secs(10)))
            .wait_timeout(Some(Duration::from_secs(30)))
            .build()
            .map_err(|e| QueueError::Connect {
                url: options.url.clone(),
                detail: e.to_string(),
            })
    }

    /// Ids of jobs that became runnable, here or on any daemon sharing the
    /// database (submitted, released, resolved). A daemon wakes its idle
    /// workers from it, e.g.
    /// `while rx.recv().await.is_ok() { wake.notify_one() }` (a lagged
    /// receiver should wake them too).
    pub fn runnable(&self) -> broadcast::Receiver<JobId> {
        self.sinks.wake.runnable.subscribe()
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, QueueError> {
        self.pool
            .get()
            .await
            .map_err(|e| pool_error(&self.options, e))
    }

    fn store(&self, e: &tokio_postgres::Error) -> QueueError {
        QueueError::Store {
            path: self.label.clone(),
            detail: describe(e),
        }
    }

    /// Runs `f` in a transaction of its own and commits it; its changes are
    /// announced in one coalesced `NOTIFY` (delivered at commit) and to this
    /// handle's subscribers once committed.
    async fn write<T: Send>(
        &self,
        f: impl for<'t> FnOnce(&'t mut PgTx<'_, Transaction<'_>>) -> BoxFuture<'t, Res<T>> + Send,
    ) -> Result<T, QueueError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.store(&e))?;
        let mut pg = PgTx::new(&tx);
        let mut outcome = f(&mut pg).await;
        let changes = std::mem::take(&mut pg.changes);
        if outcome.is_ok()
            && let Err(e) = self.notify_in(&tx, &changes).await
        {
            outcome = Err(e);
        }
        match outcome {
            Ok(value) => {
                tx.commit().await.map_err(|e| self.store(&e))?;
                self.stats.count(1);
                self.sinks.wake.publish_all(&changes);
                Ok(value)
            }
            Err(e) => {
                // Rolled back now rather than whenever the dropped
                // transaction's ROLLBACK gets sent, so its row locks go at
                // once; if this fails the connection is broken, which ends
                // the transaction as well.
                let _ = tx.rollback().await;
                Err(e.into_error(&self.label))
            }
        }
    }

    /// Queues the notifications of `changes`; PostgreSQL delivers them at
    /// commit.
    async fn notify_in(&self, tx: &Transaction<'_>, changes: &[(Change, JobId)]) -> Res<()> {
        if changes.is_empty() {
            return Ok(());
        }
        let statement = tx.prepare_cached("SELECT pg_notify($1, $2)").await?;
        for payload in listen::payloads(&self.sinks.instance, changes) {
            tx.execute(&statement, &[&self.channel, &payload]).await?;
        }
        Ok(())
    }

    /// Runs a read on a pooled connection, outside any transaction.
    async fn read<T: Send>(
        &self,
        f: impl for<'t> FnOnce(&'t mut PgTx<'_, Object>) -> BoxFuture<'t, Res<T>> + Send,
    ) -> Result<T, QueueError> {
        let client = self.client().await?;
        let mut pg = PgTx::new(&client);
        f(&mut pg).await.map_err(|e| e.into_error(&self.label))
    }
}

#[async_trait]
impl JobQueue for PostgresQueue {
    async fn submit(&self, mut job: NewJob) -> Result<(Job, bool), QueueError> {
        let id = job.id.take().unwrap_or_default();
        let submitted = self
            .write(move |tx| Box::pin(lifecycle::submit(tx, id, job)))
            .await?;
        if submitted.1 {
            crate::failpoint::hit("after_submit_commit");
        }
        Ok(submitted)
    }

    async fn submit_many(&self, jobs: Vec<NewJob>) -> Result<Vec<(Job, bool)>, QueueError> {
        let jobs = with_ids(jobs);
        self.write(move |tx| Box::pin(lifecycle::submit_many(tx, jobs)))
            .await
    }

    async fn get(&self, id: &JobId) -> Result<Option<Job>, QueueError> {
        let id = id.clone();
        self.read(move |tx| Box::pin(async move { tx.job(id.as_str(), false).await }))
            .await
    }

    async fn list(&self, filter: JobFilter) -> Result<Page, QueueError> {
        self.read(move |tx| Box::pin(async move { lifecycle::list(tx, &filter).await }))
            .await
    }

    async fn counts_by_state(&self) -> Result<Vec<(String, JobState, u64)>, QueueError> {
        self.read(|tx| Box::pin(lifecycle::counts_by_state(tx)))
            .await
    }

    async fn live_counts(&self) -> Result<Vec<(JobState, u64)>, QueueError> {
        self.read(|tx| Box::pin(lifecycle::live_counts(tx))).await
    }

    async fn forget_conversation(
        &self,
        conversation_id: &str,
    ) -> Result<(usize, usize), QueueError> {
        let conversation = conversation_id.to_string();
        self.write(move |tx| {
            Box::pin(async move { lifecycle::forget_conversation(tx, &conversation).await })
        })
        .await
    }

    async fn purge_finished(
        &self,
        finished_before: SystemTime,
        limit: usize,
    ) -> Result<usize, QueueError> {
        let cutoff = millis(finished_before);
        self.write(|tx| Box::pin(lifecycle::purge_finished(tx, cutoff, limit)))
            .await
    }

    async fn lease_many(
        &self,
        worker: &str,
        lease_for: Duration,
        n: usize,
        pin: Option<Arc<Pinner>>,
    ) -> Result<Vec<Lease>, QueueError> {
        let (worker, max_crash_resumes) = (worker.to_string(), self.retry.max_crash_resumes);
        self.write(move |tx| {
            Box::pin(async move {
                let ask = LeaseAsk {
                    worker: &worker,
                    lease_for,
                    n,
                    max_crash_resumes,
                    pin: pin.as_deref(),
                };
                lifecycle::lease(tx, &ask).await
            })
        })
        .await
    }

    async fn heartbeat(
        &self,
        id: &JobId,
        attempt: u32,
        lease_for: Duration,
    ) -> Result<HeartbeatReply, QueueError> {
        // One statement: no transaction of its own.
        let id = id.clone();
        self.read(move |tx| {
            Box::pin(async move { lifecycle::heartbeat(tx, &id, attempt, lease_for).await })
        })
        .await
    }

    async fn pin_version(
        &self,
        id: &JobId,
        attempt: u32,
        version: &str,
        digest: &str,
    ) -> Result<(), QueueError> {
        let pin = Pin {
            version: version.to_string(),
            digest: digest.to_string(),
        };
        let id = id.clone();
        self.read(move |tx| {
            Box::pin(async move { lifecycle::pin_version(tx, &id, attempt, &pin).await })
        })
        .await
    }

    async fn finish(
        &self,
        id: &JobId,
        attempt: u32,
        outcome: Outcome,
        events: &[EventEnvelope],
        final_event: Option<EventEnvelope>,
    ) -> Result<Finished, QueueError> {
        crate::failpoint::hit("before_completion_commit");
        let (id, events, retry) = (id.clone(), events.to_vec(), self.retry);
        self.write(move |tx| {
            Box::pin(async move {
                let ending = Ending {
                    events: &events,
                    final_event,
                };
                lifecycle::finish(tx, &id, attempt, outcome, ending, &retry).await
            })
        })
        .await
    }

    async fn release(
        &self,
        id: &JobId,
        attempt: u32,
        events: &[EventEnvelope],
        final_event: Option<EventEnvelope>,
    ) -> Result<Finished, QueueError> {
        let (id, events) = (id.clone(), events.to_vec());
        self.write(move |tx| {
            Box::pin(async move {
                let ending = Ending {
                    events: &events,
                    final_event,
                };
                lifecycle::release(tx, &id, attempt, ending).await
            })
        })
        .await
    }

    async fn cancel(&self, id: &JobId) -> Result<Option<Changed>, QueueError> {
        let id = id.clone();
        self.write(move |tx| Box::pin(async move { lifecycle::cancel(tx, &id).await }))
            .await
    }

    async fn append_events(
        &self,
        id: &JobId,
        attempt: u32,
        events: &[EventEnvelope],
    ) -> Result<(), QueueError> {
        if events.is_empty() {
            return Ok(());
        }
        let (id, events) = (id.clone(), events.to_vec());
        self.write(move |tx| {
            Box::pin(async move { lifecycle::append_events(tx, &id, attempt, &events).await })
        })
        .await
    }

    async fn events_after(
        &self,
        id: &JobId,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, QueueError> {
        let id = id.clone();
        self.read(move |tx| {
            Box::pin(async move { tx.events_after(id.as_str(), after_seq, limit).await })
        })
        .await
    }

    async fn last_seq(&self, id: &JobId) -> Result<u64, QueueError> {
        let id = id.clone();
        self.read(move |tx| Box::pin(async move { tx.last_seq(id.as_str()).await }))
            .await
    }

    async fn journal(&self, id: &JobId) -> Result<Vec<JournalEntry>, QueueError> {
        let id = id.clone();
        self.read(move |tx| Box::pin(async move { tx.journal(id.as_str()).await }))
            .await
    }

    async fn record_steps(
        &self,
        id: &JobId,
        attempt: u32,
        entries: &[JournalEntry],
        events: &[EventEnvelope],
    ) -> Result<(), QueueError> {
        let (id, entries, events) = (id.clone(), entries.to_vec(), events.to_vec());
        self.write(move |tx| {
            Box::pin(
                async move { lifecycle::record_steps(tx, &id, attempt, &entries, &events).await },
            )
        })
        .await?;
        lost_reply(&self.label)
    }

    async fn resolve(&self, id: &JobId, resolution: Resolution) -> Result<Changed, QueueError> {
        let (id, label) = (id.clone(), self.label.clone());
        self.write(move |tx| {
            Box::pin(async move { lifecycle::resolve(tx, &id, &resolution, &label).await })
        })
        .await
    }

    fn subscribe(&self) -> broadcast::Receiver<JobId> {
        self.sinks.wake.changes.subscribe()
    }

    fn runnable(&self) -> Option<broadcast::Receiver<JobId>> {
        Some(PostgresQueue::runnable(self))
    }

    fn write_stats(&self) -> WriteCounts {
        self.stats.counts()
    }

    async fn ping(&self) -> Result<(), QueueError> {
        let client = self.client().await?;
        client
            .simple_query("SELECT 1")
            .await
            .map_err(|e| self.store(&e))?;
        Ok(())
    }
}
