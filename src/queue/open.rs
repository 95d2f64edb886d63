//! Opening the configured queue backend: the one place that reads the
//! `[queue]` section to choose and connect a store; and where a backend's
//! schema stands.

use std::sync::Arc;

use super::postgres::{PostgresOptions, PostgresQueue};
use super::sqlite::{Durability, SqliteQueue};
use super::{JobQueue, QueueError, RetryPolicy};
use crate::config::{Config, QueueBackend, QueueDurability};

/// Opens the configured queue backend, applying pending migrations.
/// (With PostgreSQL, other daemons' submissions reach this one through
/// `JobQueue::runnable`.)
pub async fn open(config: &Config) -> Result<Arc<dyn JobQueue>, QueueError> {
    let retry = RetryPolicy {
        backoff_base: config.queue.backoff_base.into(),
        backoff_max: config.queue.backoff_max.into(),
        max_crash_resumes: config.queue.max_crash_resumes,
    };
    Ok(match config.queue.backend {
        QueueBackend::Sqlite => {
            let durability = match config.queue.durability {
                QueueDurability::Full => Durability::Full,
                QueueDurability::Fast => Durability::Fast,
            };
            Arc::new(SqliteQueue::open_with(&config.queue_path(), retry, durability).await?)
        }
        QueueBackend::Postgres => {
            Arc::new(PostgresQueue::open(postgres_options(config)?, retry).await?)
        }
    })
}

/// Where the queue lives, for logs.
pub fn location(config: &Config) -> String {
    match config.queue.backend {
        QueueBackend::Sqlite => config.queue_path().display().to_string(),
        QueueBackend::Postgres => format!(
            "{} (schema {})",
            config.queue.url.as_deref().unwrap_or_default(),
            config.queue.schema
        ),
    }
}

/// The PostgreSQL settings, with the password read from the variable
/// `queue.password_env` names (never from the file).
pub fn postgres_options(config: &Config) -> Result<PostgresOptions, QueueError> {
    let queue = &config.queue;
    let url = queue.url.clone().ok_or_else(|| QueueError::Setting {
        key: "queue.url",
        message: "backend \"postgres\" needs a url: add url = \"postgres://USER@HOST:PORT/DATABASE\" under [queue]".into(),
    })?;
    let password = match &queue.password_env {
        None => None,
        Some(name) => Some(std::env::var(name).map_err(|e| QueueError::Setting {
            key: "queue.password_env",
            message: format!(
                "names the environment variable {name}, which cannot be read ({e}): export it with the database password, or remove queue.password_env for trust or peer authentication"
            ),
        })?),
    };
    Ok(PostgresOptions {
        url,
        password,
        schema: queue.schema.clone(),
        pool_size: queue.pool_size,
    })
}

/// Where a backend's schema stands (`structured-agents migrate`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationStatus {
    /// The version found before this run (0: no queue tables yet).
    pub found: u32,
    /// The version this binary writes.
    pub supported: u32,
    /// The versions this run applied (empty when only checking).
    pub applied: Vec<u32>,
}

impl MigrationStatus {
    pub fn pending(&self) -> u32 {
        self.supported
            .saturating_sub(self.found + self.applied.len() as u32)
    }
}
