//! The shared queue: PostgreSQL, for several daemons working one queue.
//!
//! Semantics are the SQLite backend's, statement for statement (both pass
//! `tests/queue_conformance.rs`); what differs is how writes reach the
//! store. SQLite has one writer that batches; here every write runs on a
//! pooled connection of its own (`queue.pool_size` of them, see `pool`)
//! and PostgreSQL groups the commits. A job's hot path — lease, journal
//! steps, heartbeat, finish, release — is one statement each, with no
//! transaction held across round trips (`hot`, `ending`); every other
//! write is one short transaction. Writers are kept apart by row locks:
//! every write to a job locks its row first, and leasing takes the best
//! rows with `FOR UPDATE SKIP LOCKED`, so two daemons never lease the same
//! job and never interleave two writes to one job. A write locks its rows
//! in one order and holds no other write's, so writes do not deadlock; one
//! PostgreSQL gives up all the same runs again (see `pool`).
//!
//! Times are BIGINT milliseconds, as in SQLite, taken from the database's
//! clock: daemons on hosts whose clocks disagree still agree on when a lease
//! expires. Commits are durable under PostgreSQL's default
//! `synchronous_commit = on`.
//!
//! Every committed change is also announced to the other daemons with
//! `NOTIFY`, by one task per handle that batches them (see `notify`,
//! `listen`).

mod assistants;
mod cursor;
mod dialect;
mod ending;
mod group;
mod hot;
mod items;
mod lease;
mod listen;
mod notify;
mod outbox;
mod pool;
mod releases;
mod schedules;
mod schema;
mod settle;
mod sql;
mod submit;
mod threads;
mod transaction;

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio::sync::broadcast;
use tokio_postgres::NoTls;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::backend::Driver;
use super::op::{self, FinishAndLease, LeaseJobs, Read, Write};
use super::tx::Wakeups;
use super::*;
use listen::Sinks;
use pool::Writes;
pub use schema::{PostgresOptions, SCHEMA_VERSION};
use transaction::PgTx;

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

/// The PostgreSQL driver: a pool of connections that reads and writes run
/// on, each write on a connection of its own (see `pool`; a job's hot path
/// one statement each, see `hot` and `ending`), and the LISTEN task that
/// hears the other daemons.
pub struct Postgres {
    pool: Pool,
    options: PostgresOptions,
    label: String,
    writes: Writes,
    /// The pins first attempts are leased with (see `lease::lease`).
    pins: Arc<lease::Pins>,
    /// Where each key's next lease scan starts (see `cursor`).
    cursors: Arc<cursor::Cursors>,
    /// Worker slots' settles waiting for their group (`settle`).
    settles: Arc<group::Group<settle::Settles>>,
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
        let notifier =
            notify::Notifier::start(pool.clone(), channel, sinks.instance.clone(), label.clone());
        let writes = Writes::new(pool::Shared {
            pool: pool.clone(),
            options: options.clone(),
            label: label.clone(),
            sinks: sinks.clone(),
            notifier,
            stats: stats.clone(),
        });
        let pins = Arc::new(lease::Pins::default());
        let cursors = Arc::new(cursor::Cursors::default());
        let settles = Arc::new(group::Group::new(
            settle::Settles::new(pins.clone(), cursors.clone()),
            settle::MAX_SETTLES,
        ));
        let driver = Postgres {
            pool,
            label,
            writes,
            pins,
            cursors,
            settles,
            sinks,
            stats,
            _listener: stop.drop_guard(),
            options,
        };
        Ok(Queue::new(driver, retry))
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
        self.writes.shared.store(e)
    }
}

impl Driver for Postgres {
    async fn write<O: Write>(&self, op: O) -> Result<O::Output, QueueError> {
        let _place = self.writes.admit(O::REFUSED_WHEN_BUSY).await?;
        let written = self.writes.transaction(&op).await;
        if O::MAY_QUEUE_BEHIND {
            self.cursors.rewind();
        }
        written
    }

    async fn submit(&self, op: op::Submit) -> Result<(Job, bool), QueueError> {
        let _place = self.writes.admit(true).await?;
        let submitted = match submit::submit(&self.writes, &op).await? {
            Some(submitted) => submitted,
            None => self.writes.transaction(&op).await?,
        };
        // This daemon's leases find the key at once, not at the next full walk.
        self.cursors
            .submitted(submitted.0.owner.as_deref().unwrap_or(""));
        Ok(submitted)
    }

    async fn lease(&self, op: LeaseJobs) -> Result<Vec<Lease>, QueueError> {
        let _place = self.writes.admit(false).await?;
        match lease::lease(&self.writes, &self.pins, &self.cursors, &op).await? {
            Some(leases) => Ok(leases),
            None => self.writes.transaction(&op).await,
        }
    }

    async fn heartbeat(&self, op: op::Heartbeat) -> Result<HeartbeatReply, QueueError> {
        let _place = self.writes.admit(false).await?;
        hot::heartbeat(&self.writes, &op).await
    }

    async fn record_steps(&self, op: op::RecordSteps) -> Result<(), QueueError> {
        let _place = self.writes.admit(false).await?;
        hot::record_steps(&self.writes, &op).await
    }

    async fn finish(&self, op: op::Finish) -> Result<Finished, QueueError> {
        let _place = self.writes.admit(false).await?;
        match ending::finish(&self.writes, &op).await? {
            Some(finished) => Ok(finished),
            None => self.writes.transaction(&op).await,
        }
    }

    async fn release(&self, op: op::Release) -> Result<Finished, QueueError> {
        let _place = self.writes.admit(false).await?;
        // The job goes back with its place in the queue, behind the cursor.
        self.cursors.rewind();
        match ending::release(&self.writes, &op).await? {
            Some(finished) => Ok(finished),
            None => self.writes.transaction(&op).await,
        }
    }

    /// The finish and the lease in one commit (`settle`); what the
    /// pipeline could not write runs on its own after it: a park's finish
    /// in the lifecycle's transaction, a lease that gives way to it. A lease
    /// that fails answers the finish with nothing leased (the worker leases
    /// again on its own), as a failed write records nothing.
    async fn finish_and_lease(
        &self,
        op: FinishAndLease,
    ) -> Result<(Finished, Vec<Lease>), QueueError> {
        if op.lease.n == 0 {
            return Ok((self.finish(op.finish).await?, Vec::new()));
        }
        let pipelined = {
            let _place = self.writes.admit(false).await?;
            settle::finish_and_lease(&self.writes, &self.settles, &self.pins, &op).await?
        };
        let FinishAndLease { finish, lease } = op;
        let (finished, leases) = match pipelined {
            settle::Pipelined::Both { finished, leases } => (*finished, leases),
            settle::Pipelined::LeaseOnly { leases } => (self.finish(finish).await?, leases),
            settle::Pipelined::Neither => (self.finish(finish).await?, None),
        };
        let leases = match leases {
            Some(leases) => Ok(leases),
            None => self.lease(lease).await,
        };
        match leases {
            Ok(leases) => Ok((finished, leases)),
            Err(e) => {
                tracing::warn!(
                    queue = %self.label,
                    error = %e,
                    "the lease after a finish failed; the finish is recorded with nothing leased"
                );
                Ok((finished, Vec::new()))
            }
        }
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
