//! The shared queue: PostgreSQL, for several daemons working one queue.
//!
//! Semantics are the SQLite backend's, statement for statement (both pass
//! `tests/queue_conformance.rs`); what differs is how writers are kept
//! apart. SQLite has one writer; here each daemon has one writer task that
//! group-commits its writes (see `writer`), every write locks the job's row
//! first (`require_current` reads it `FOR UPDATE`), and leasing takes the
//! best rows with `FOR UPDATE SKIP LOCKED`, so two daemons never lease the
//! same job and never interleave two writes to one job. A group of writes
//! takes its locks in one order (`op::LockOrder`), the same on every
//! daemon, so two daemons' groups never deadlock; one PostgreSQL gives up
//! all the same runs again (see `writer`).
//!
//! Times are BIGINT milliseconds, as in SQLite, taken from the database's
//! clock: daemons on hosts whose clocks disagree still agree on when a lease
//! expires. Commits are durable under PostgreSQL's default
//! `synchronous_commit = on`.
//!
//! Every change also `NOTIFY`s the other daemons (see `listen`).

mod dialect;
mod listen;
mod outbox;
mod schedules;
mod schema;
mod writer;

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio::sync::broadcast;
use tokio_postgres::NoTls;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::driver::Driver;
use super::op::{FinishAndLease, Read, Write};
use super::tx::Wakeups;
use super::*;
use dialect::PgTx;
use listen::Sinks;
pub use schema::{PostgresOptions, SCHEMA_VERSION};
use writer::Writer;

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

/// The PostgreSQL driver: a pool of connections for reads, the writer task
/// that group-commits writes (see `writer`), and the LISTEN task that hears
/// the other daemons.
pub struct Postgres {
    pool: Pool,
    options: PostgresOptions,
    label: String,
    writer: Writer,
    sinks: Sinks,
    stats: Arc<WriteStats>,
    /// Stops the LISTEN task when the handle goes away.
    _listener: DropGuard,
}

/// The shared queue.
pub type PostgresQueue = Queue<Postgres>;

impl Queue<Postgres> {
    /// Connects, applies pending migrations (once across daemons starting
    /// together), and starts listening for other daemons' changes.
    pub async fn open(options: PostgresOptions, retry: RetryPolicy) -> Result<Self, QueueError> {
        let config = options.connect_config()?;
        let pool = Postgres::pool(&options, config.clone())?;
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
        let stats = Arc::new(WriteStats::default());
        let writer = Writer::start(writer::Shared {
            pool: pool.clone(),
            options: options.clone(),
            label: label.clone(),
            channel,
            sinks: sinks.clone(),
            stats: stats.clone(),
        });
        let driver = Postgres {
            pool,
            label,
            writer,
            sinks,
            stats,
            _listener: stop.drop_guard(),
            options,
        };
        Ok(Queue { driver, retry })
    }

    /// Applies pending migrations (or with `check_only` only reports them)
    /// without opening the queue: `structured-agents migrate`.
    pub async fn migrate(
        options: &PostgresOptions,
        check_only: bool,
    ) -> Result<MigrationStatus, QueueError> {
        let pool = Postgres::pool(options, options.connect_config()?)?;
        schema::migrate(&pool, options, check_only).await
    }

    /// Ids of jobs that became runnable, here or on any daemon sharing the
    /// database (submitted, released, resolved). A daemon wakes its idle
    /// workers from it, e.g.
    /// `while rx.recv().await.is_ok() { wake.notify_one() }` (a lagged
    /// receiver should wake them too).
    pub fn runnable(&self) -> broadcast::Receiver<JobId> {
        self.driver.sinks.wake.runnable.subscribe()
    }
}

impl Postgres {
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
}

impl Driver for Postgres {
    async fn write<O: Write>(&self, op: O) -> Result<O::Output, QueueError> {
        self.writer.write(op).await
    }

    async fn finish_and_lease(
        &self,
        op: FinishAndLease,
    ) -> Result<(Finished, Vec<Lease>), QueueError> {
        self.writer.finish_and_lease(op).await
    }

    /// Runs a read on a pooled connection, outside any transaction.
    async fn read<O: Read>(&self, op: O) -> Result<O::Output, QueueError> {
        let client = self.client().await?;
        let mut pg = PgTx::new(&client);
        op.run(&mut pg).await.map_err(|e| e.into_error(&self.label))
    }

    async fn ping(&self) -> Result<(), QueueError> {
        let client = self.client().await?;
        client
            .simple_query("SELECT 1")
            .await
            .map_err(|e| self.store(&e))?;
        Ok(())
    }

    fn label(&self) -> &str {
        &self.label
    }

    fn wakeups(&self) -> &Wakeups {
        &self.sinks.wake
    }

    fn write_counts(&self) -> WriteCounts {
        self.stats.counts()
    }
}
