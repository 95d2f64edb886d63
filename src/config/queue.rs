//! The `[queue]` section: which store holds the jobs (one SQLite file, or a
//! PostgreSQL database several daemons share), how many run at once, and
//! the lease, retry, durability and retention rules every job follows.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration::HumanDuration;

/// How often a worker renews the lease of the job it runs: three beats per
/// lease, so one late or lost beat does not expire a healthy run. A job
/// whose worker stayed silent for two beats has likely lost it (the
/// console says so before the lease expires).
pub fn heartbeat_every(lease: std::time::Duration) -> std::time::Duration {
    lease / 3
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum QueueBackend {
    /// One SQLite file (`queue.path`), for one daemon.
    Sqlite,
    /// A PostgreSQL database (`queue.url`), shared by several daemons.
    Postgres,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct QueueConfig {
    pub backend: QueueBackend,
    /// SQLite file; default `<state_dir>/queue.db`.
    pub path: Option<PathBuf>,
    /// PostgreSQL: `postgres://USER@HOST:PORT/DATABASE`, without a password.
    pub url: Option<String>,
    /// PostgreSQL: the environment variable holding the password (never the
    /// password itself).
    pub password_env: Option<String>,
    /// PostgreSQL: the schema holding the queue's tables (created when
    /// missing); daemons sharing work use the same one.
    pub schema: String,
    /// PostgreSQL: connections this daemon keeps (plus one for LISTEN);
    /// by default [`default_pool_size`].
    pub pool_size: usize,
    /// Jobs run at the same time by this daemon.
    pub workers: usize,
    /// How long a leased job stays with its worker without a heartbeat.
    pub lease: HumanDuration,
    /// Attempts before a job is dead (retryable failures; a resume after a
    /// crash is not one).
    pub max_attempts: u32,
    /// Resumes after its worker died (its lease expired) before a job is
    /// taken for a poison pill and parks in `needs_attention`.
    pub max_crash_resumes: u32,
    /// First retry delay; doubles per attempt, with jitter.
    pub backoff_base: HumanDuration,
    pub backoff_max: HumanDuration,
    /// How long SIGTERM waits for running jobs before releasing them to the queue.
    pub drain_timeout: HumanDuration,
    /// How often idle workers look for due jobs (new submissions wake them at once).
    pub poll_interval: HumanDuration,
    /// `full` (default): an acknowledged submit, journal step or outcome
    /// survives power loss (fsync per group commit). `fast`: survives a crash
    /// of the daemon but the last commits may be lost if the machine loses
    /// power.
    pub durability: QueueDurability,
    /// Finished jobs, their events and journals are deleted this long after
    /// they finished (a background task, in small batches).
    pub retention: HumanDuration,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum QueueDurability {
    #[default]
    Full,
    Fast,
}

/// PostgreSQL connections a daemon keeps by default: 4 per CPU core,
/// between 8 and 32. Each write holds a connection only for its statement
/// (or its short transaction), and the time goes to round trips, not to
/// the daemon's CPU: a few per core keep the cores busy while statements
/// wait for the network and the WAL flush, without crowding a server that
/// several daemons share (`max_connections` is 100 by default).
pub fn default_pool_size() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    (4 * cores).clamp(8, 32)
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            backend: QueueBackend::Sqlite,
            path: None,
            url: None,
            password_env: None,
            schema: "public".into(),
            pool_size: default_pool_size(),
            workers: 8,
            lease: HumanDuration::from_secs(30),
            max_attempts: 3,
            max_crash_resumes: 5,
            backoff_base: HumanDuration::from_secs(1),
            backoff_max: HumanDuration::from_secs(60),
            drain_timeout: HumanDuration::from_secs(30),
            poll_interval: HumanDuration::from_millis(250),
            durability: QueueDurability::Full,
            retention: HumanDuration::from_secs(7 * 24 * 3600),
        }
    }
}
